"""Stages that several graphs compose (one implementation each)."""

from __future__ import annotations

from halluscope.backends.gateway import CallStats, Gateway, ModelLike
from halluscope.errors import ConfigError

REGENERATE = "selfcheck.regenerate"


def regenerate_passages(
    gateway: Gateway, model: ModelLike, concept: str, n_sentences: int, n: int, stats: CallStats | None = None
) -> list[str]:
    """N comparison passages about the concept with the FIBE paper's E.1 prompt (sample indexes 0..N-1)."""
    if not concept:
        raise ConfigError("regenerating samples needs the concept (or the original prompt); or pass samples")
    replies = gateway.sample(model, REGENERATE, {"n_sentences": n_sentences, "concept": concept}, n, stats=stats)
    return [r.text for r in replies]
