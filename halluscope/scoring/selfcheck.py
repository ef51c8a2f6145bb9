"""SelfCheckGPT-Prompt (SCGP) as specified in the FIBE paper, Appendix E.2 and Section 2:
supported(r_i, S^j) is 1.0 for Yes, 0.0 for No, 0.5 otherwise; H_P(i) = mean_j (1 - supported)."""

from __future__ import annotations

from collections.abc import Sequence

SUPPORTED_VALUE = {"yes": 1.0, "no": 0.0}
OTHERWISE = 0.5


def supported_value(answer: str | None) -> float:
    """The paper's reading of one Yes/No answer (``None``: an answer that was neither)."""
    return SUPPORTED_VALUE.get(answer or "", OTHERWISE)


def scgp_score(supported: Sequence[float]) -> float:
    """H_P(i) for one sentence from its supported values against the N samples."""
    if not supported:
        raise ValueError("a sentence needs at least one sample to be scored")
    return sum(1.0 - s for s in supported) / len(supported)
