"""A gate on a benchmark's measured numbers, as a CI step uses it (DeepEval's `deepeval test run` fails
on a metric's pass rate): each named metric must reach its floor, on the point estimate or on its 95%
interval's lower bound, and the share of answers flagged must stay under a ceiling."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from halluscope.bench.runner import BenchResult
from halluscope.errors import ConfigError

GATE_ON = ("point", "lower")  # the estimate itself, or its interval's lower bound (the stricter gate)


def shortfalls(
    results: Sequence[BenchResult],
    fail_under: Mapping[str, float],
    on: str = "point",
    max_flag_rate: float | None = None,
) -> list[str]:
    """One line per gate a result falls short of (none: every gate passes). A metric no result
    measures is refused, naming the ones it has; a flag-rate ceiling needs the flag rate measured."""
    if on not in GATE_ON:
        raise ConfigError(f"a gate is on {' or '.join(GATE_ON)}, got {on!r}")
    floors = dict(fail_under)
    ceilings = {} if max_flag_rate is None else {"flag_rate": max_flag_rate}
    found = []
    for result in results:
        name = result.params.get("method", result.bench)
        for metric in (*floors, *ceilings):
            if result.metrics.get(metric) is None:
                measured = sorted(k for k, v in result.metrics.items() if isinstance(v, float))
                why = " (bench mine measures it with --threshold T)" if metric == "flag_rate" else ""
                raise ConfigError(f"{name} measured no {metric}{why}; it measured: {', '.join(measured)}")
            point = float(result.metrics[metric])
            interval = result.intervals.get(metric)
            if metric in floors:
                value = interval[0] if on == "lower" and interval else point
                read = "its interval's lower bound" if on == "lower" and interval else "its estimate"
                if value < floors[metric]:
                    found.append(f"{name}: {metric} {value:.3g} ({read}) is under {floors[metric]:g}")
            if metric in ceilings and point > ceilings[metric]:
                found.append(f"{name}: {point:.1%} of answers flagged, over the ceiling of {ceilings[metric]:.1%}")
    return found
