"""A calibration made by hand, for tests that need one without fitting it: a straight isotonic line
from (x0, y0) to (x1, y1) over one method's raw scores."""

from __future__ import annotations

from typing import Any

from halluscope.calibration import Calibration


def line(
    method: str,
    x: tuple[float, float],
    y: tuple[float, float],
    *,
    model: str | None = None,
    cap: float | None = None,
    **fields: Any,
) -> Calibration:
    """``method``'s raw scores x mapped linearly to probabilities y; ``cap``: the score an unseen unigram
    stands for (default x's top); ``fields``: the rest of the file (settings, threshold, report ...)."""
    params = {"x": list(x), "y": list(y), "cap": {method: x[1] if cap is None else cap}}
    return Calibration(kind="isotonic", methods=[method], model=model, prompts=[], params=params, **fields)
