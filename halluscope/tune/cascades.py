"""Cascades among `choose`'s candidates, made from runs it already has: where the candidates hold a fitted
checker (``grounded[model=nli:DIR]``) and the LLM judge (``grounded``) on the same answers, the cascade
``grounded[fast=nli:DIR;band=LOW,HIGH]`` scores a unit as the judge did when the checker's score lies in
the band and as the checker did elsewhere, so its scores are composed from the two runs with no new
call (the cascade checks the same pairs with the same judge: ``methods/grounded.escalate``). The band
holds the target share of units whose checker score lies nearest 0.5, the checker's own decision point:
fitted on the answers' scores, never on their labels, so it adds nothing to what cross-validation
holds out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from halluscope.backends.entailment import judge_target
from halluscope.bench.runner import BenchItem, BenchResult
from halluscope.errors import ConfigError
from halluscope.runtime import registry

CENTRE = 0.5  # a fitted checker's p(not supported) decides at one half
METHOD = "grounded"
PLACES = 10_000  # a band's ends are written to four decimal places
STEPS_OUT = ("decompose", "batch")  # a cascade checks sentences pair by pair: a judge run with these is no member


@dataclass(frozen=True)
class Cascade:
    """A cascade composed from two runs: its configured name (which holds its band), its members, the
    units it escalated of all its units, and its composed run."""

    name: str
    fast: str
    judge: str
    escalated: int
    units: int
    result: BenchResult

    @property
    def share(self) -> float:
        return self.escalated / self.units if self.units else 0.0


def members(ran: Mapping[str, BenchResult]) -> list[tuple[str, str]]:
    """(fast, judge) candidate pairs that make a cascade: a grounded run whose own judge is a fitted checker
    with no other option, and the plain grounded run on an LLM judge, pair by pair."""
    fast, judges = [], []
    for name, result in ran.items():
        method, own = registry.configured(name)
        if method != METHOD:
            continue
        options = result.params.get("options") or {}
        if set(own) == {"model"} and _entails(own["model"]):
            fast.append(name)
        elif not own and not any(options.get(k) for k in STEPS_OUT) and not _entails(result.params.get("model")):
            judges.append(name)
    return [(f, j) for f in fast for j in judges]


def _entails(spec: object) -> bool:
    """Whether a spec names an NLI checkpoint (a fitted checker), as the judge's provider declares it."""
    return isinstance(spec, str) and judge_target(spec, "a model spec")[0]


def band_for_share(scores: Sequence[float], share: float) -> tuple[float, float]:
    """The narrowest band around ``CENTRE`` holding at least ``share`` of the scores (their nearest to it),
    widened to whole ``PLACES`` so the cascade's name runs the band it was scored with; (CENTRE, CENTRE)
    where the share rounds to no unit."""
    if not 0 <= share <= 1:
        raise ConfigError(f"a cascade's share of judged units lies in [0, 1], got {share}", settings=("cascade_share",))
    values = np.asarray([s for s in scores if s is not None and math.isfinite(s)], dtype=np.float64)
    kept = math.ceil(share * values.size)
    if not kept:
        return CENTRE, CENTRE
    nearest = values[np.argsort(np.abs(values - CENTRE), kind="stable")[:kept]]
    low, high = min(float(nearest.min()), CENTRE), max(float(nearest.max()), CENTRE)
    return math.floor(low * PLACES) / PLACES, math.ceil(high * PLACES) / PLACES  # as its name prints it


def cascaded(
    fast: Mapping[str, float | None], judge: Mapping[str, float | None], band: tuple[float, float]
) -> tuple[dict[str, float | None], list[str]]:
    """One item's units as the cascade scores them: the judge's score where the fast score lies in the
    band, the fast one elsewhere; and the units escalated."""
    low, high = band
    chosen = [k for k, s in fast.items() if s is not None and low <= s <= high]
    return {k: judge[k] if k in chosen else s for k, s in fast.items()}, chosen


def compose(fast: str, judge: str, ran: Mapping[str, BenchResult], share: float) -> Cascade:
    """The cascade of ``fast`` then ``judge`` at the band for ``share``: each answer's units scored by the
    judge where the checker's score lies in the band; the answers both runs scored, their units alike."""
    quick, slow = ran[fast], ran[judge]
    by_id = {item.id: item for item in slow.items}
    pairs = [(item, by_id[item.id]) for item in quick.items if item.id in by_id]
    for a, b in pairs:
        if a.record.get("texts") != b.record.get("texts"):
            raise ConfigError(f"{fast} and {judge} split answer {a.id} into different units: no cascade of the two")
    low, high = band_for_share([s for a, _ in pairs for s in a.scores.values()], share)
    items, escalated, units = [], 0, 0
    for a, b in pairs:
        scores, chosen = cascaded(a.scores, b.scores, (low, high))
        items.append(BenchItem(id=a.id, scores=scores, record={**a.record, "scores": scores}))
        escalated, units = escalated + len(chosen), units + len(a.scores)
    spec = registry.own_model(fast)
    band = f"{low:g},{high:g}"
    name = f"{METHOD}[fast={spec};band={band}]"
    options = {**(slow.params.get("options") or {}), "fast": spec, "band": band}
    params = {**slow.params, "method": name, "options": options}
    result = slow.model_copy(update={"items": items, "params": params, "failures": []})
    return Cascade(name, fast, judge, escalated, units, result)
