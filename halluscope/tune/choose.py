"""`halluscope choose`: which method for your answers, and at what threshold. Each candidate runs on the
user's labelled answers (``bench mine``'s plans: through the cache, resumable), is calibrated and
cross-validated by answer, and is compared on its held-out AUC-ROC (with its interval), its ECE after
calibration and its cost per answer; a stack of the best few is tried where it improves the held-out
AUC-ROC, and a cascade of a fitted checker and the LLM judge where both are candidates (``cascades``).
The recommendation is the best candidate within the call budget, with an operating point (the threshold
for a target precision or recall, on the out-of-fold probabilities) and its calibration file.
A candidate that cannot run on the rows is listed with the reason, never dropped silently.
"""

from __future__ import annotations

import functools
import json
import math
import re
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, astuple, dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from halluscope.backends.gateway import Gateway
from halluscope.backends.models import ModelLike, model_name
from halluscope.bench import mine
from halluscope.bench.provenance import envelope
from halluscope.bench.report import markdown_table, write_json, write_text
from halluscope.bench.runner import RESULTS, BenchResult, run
from halluscope.calibration import (
    Calibration,
    fit,
    precision_recall_at,
    reliability_diagram,
    threshold_for_precision,
    threshold_for_recall,
)
from halluscope.errors import ConfigError, HalluscopeError, redact_credentials
from halluscope.labelled import LabelledData, load_labelled
from halluscope.metrics import PairedDifference, decisions_resampled, paired_difference, resample_counts
from halluscope.runtime import registry
from halluscope.tune import cascades
from halluscope.tune.calibrate import (
    FOLDS,
    Split,
    answer_folds,
    check_fit_inputs,
    cross_validated,
    fitted_on_answers,
    ranking,
)

STACK_OF = (2, 3)  # stacks of the best two and three single methods are tried
CHANCE = 50.0  # AUC-ROC: a member whose own held-out interval holds it is no stack's member
FEW_ANSWERS = 100  # below this many answers a fold's isotonic fit may flatten scores into ties
CASCADE_SHARE = 0.3  # a cascade sends this share of units to the judge unless told otherwise
FLATTENED = 3.0  # AUC-ROC points the held-out figure falls under the raw ranking before a note says why


@dataclass
class Candidate:
    """One row of the table: a method (or a stack), how it did held out, and what it costs an answer."""

    name: str
    methods: list[str]
    auc_roc: float | None = None
    auc_roc_interval: list[float] | None = None
    ece: float | None = None
    brier: float | None = None
    calls_per_answer: float | None = None
    prompt_tokens_per_answer: float | None = None
    seconds_per_answer: float | None = None
    costed_answers: int | None = None  # the answers the costs were measured on (the runs that scored them)
    draws_per_answer: int = 0  # samples your file gave, which a deployed run draws (counted in calls_per_answer)
    raw_auc_roc: list[float] | None = None  # each member's raw scores ranked, pooled over every unit (no fit)
    notes: list[str] = field(default_factory=list)  # what a reader should know of its numbers (not disqualifying)
    problems: list[str] = field(default_factory=list)
    skipped: str | None = None  # why it did not run on these rows
    over_budget: bool = False


@dataclass
class Choice:
    """What `choose` found: every candidate, the one recommended and its operating point."""

    source: str
    answers: int
    units: str
    candidates: list[Candidate]
    recommended: str | None
    operating_point: dict[str, Any] | None
    calibration: str | None
    why: str
    nested: dict[str, Any] | None = None  # the whole selection held out: the honest figure, and the optimism
    use: str | None = None  # the command that runs the pick as chosen, on an answer on standard input
    use_needs: list[str] = field(default_factory=list)  # what that command needs beside the answer


@dataclass
class Spent:
    """What one method's runs into one folder have spent, over the answers they scored (an answer
    resumed from the journal was paid for by the run that scored it, and is counted there)."""

    answers: int = 0
    calls: int = 0  # sent or replayed from the cache: what the answers cost uncached
    sent: int = 0
    prompt_tokens: int = 0  # of the calls sent
    seconds: float = 0.0
    replayed_tokens: int = 0  # of the calls replayed, as they were made (an earlier run made them)
    replayed_seconds: float = 0.0  # what those calls took when made, where the cache kept it
    replayed_untimed: int = 0  # replayed calls whose seconds the cache did not keep

    @classmethod
    def of(cls, result: BenchResult, answers: int) -> Spent:
        meta = result.meta
        scored = answers - int(meta.params.get("resumed_items", 0))
        replayed = meta.params.get("replayed") or {}
        untimed = meta.cache_hits - replayed.get("timed", 0)
        return cls(
            scored,
            meta.calls + meta.cache_hits,
            meta.calls,
            meta.tokens.prompt,
            meta.seconds if scored else 0.0,
            replayed.get("prompt_tokens", 0),
            replayed.get("seconds", 0.0),
            untimed,
        )

    def plus(self, other: Spent) -> Spent:
        return Spent(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))

    def times(self, factor: float) -> Spent:
        """Every count but the answers times ``factor``: what the run spends on that share of its work."""
        answers, *counts = astuple(self)
        return Spent(answers, *(v * factor for v in counts))

    @classmethod
    def of_cascade(cls, fast: Spent, judge: Spent, share: float) -> Spent:
        """A cascade's spending, estimated from its members' runs: the checker's on every answer, and the
        judge's on the share of units it escalates (a unit's judge calls taken as its answer's mean)."""
        answers = min(fast.answers, judge.answers)
        if not answers:
            return cls()
        total = fast.times(answers / fast.answers).plus(judge.times(share * answers / judge.answers))
        return replace(total, answers=answers)

    def per_answer(self) -> dict[str, float | None]:
        """Calls, prompt tokens and seconds per answer. A method that calls no model costs no tokens and
        its seconds are its own work; one whose calls were all replayed from the cache is priced by what
        they cost when made (the cache keeps each call's tokens and seconds; seconds unknown where an
        older cache did not keep them)."""
        if not self.answers:
            return {"calls_per_answer": None, "prompt_tokens_per_answer": None, "seconds_per_answer": None}
        if self.sent == 0 and self.calls:  # made by an earlier run (bench mine, calibrate): read the cache's record
            seconds = self.replayed_seconds / self.answers if not self.replayed_untimed else None
            return {
                "calls_per_answer": self.calls / self.answers,
                "prompt_tokens_per_answer": self.replayed_tokens / self.answers,
                "seconds_per_answer": seconds,
            }
        tokens = self.prompt_tokens / self.sent * self.calls / self.answers if self.sent else 0.0
        return {
            "calls_per_answer": self.calls / self.answers,
            "prompt_tokens_per_answer": tokens,
            "seconds_per_answer": self.seconds / self.answers,
        }


COSTS = "costs.json"  # beside a method's results.json: what every run into the folder spent


def spent(folder: Path, before: Spent, result: BenchResult, answers: int) -> Spent:
    """The folder's spending, this run's added to what earlier runs into it spent, kept in costs.json."""
    total = before.plus(Spent.of(result, answers))
    write_json(folder / COSTS, asdict(total))
    return total


def spent_before(folder: Path) -> Spent:
    """What earlier runs into ``folder`` spent: its costs.json, else the last run's results.json (a run
    made before costs were kept), else nothing."""
    if (folder / COSTS).is_file():
        return Spent(**json.loads((folder / COSTS).read_text(encoding="utf-8")))
    if (folder / RESULTS).is_file():
        last = BenchResult.read(folder)
        return Spent.of(last, len(last.items) + len(last.failures))
    return Spent()


def costs(spending: Sequence[Spent]) -> dict[str, Any]:
    """A candidate's costs per answer: the sum of its methods' (a stack pays for every member)."""
    each = [s.per_answer() for s in spending]
    summed: dict[str, Any] = {
        key: None if any(e[key] is None for e in each) else sum(e[key] for e in each)  # type: ignore[misc]
        for key in ("calls_per_answer", "prompt_tokens_per_answer", "seconds_per_answer")
    }
    return {**summed, "costed_answers": min(s.answers for s in spending)}


class Fitted(NamedTuple):
    """A candidate's fit: the calibration, and its units' labels, out-of-fold probabilities and answers."""

    calibration: Calibration
    labels: np.ndarray
    out_of_fold: np.ndarray
    groups: np.ndarray


def operating_point(y: np.ndarray, p: np.ndarray, groups: np.ndarray, target: str, value: float) -> dict[str, Any]:
    """The threshold for a target precision or recall on the out-of-fold probabilities, and what a guard
    at it does: precision, recall and false-positive rate with 95% intervals resampling answers, the
    base rate, the share of units and of answers it flags, and the confusion matrix."""
    threshold = threshold_for_precision(y, p, value) if target == "precision" else threshold_for_recall(y, p, value)
    precision, recall = precision_recall_at(y, p, threshold)
    point: dict[str, Any] = {"target": f"{target} {value:g}", "threshold": threshold, "precision": precision}
    point |= {"recall": recall, "base_rate": float(np.mean(y))}
    if threshold is None:
        return point
    y, flagged = np.asarray(y, dtype=bool), np.asarray(p) >= threshold
    confusion = {
        "true_positive": int((flagged & y).sum()),
        "false_positive": int((flagged & ~y).sum()),
        "false_negative": int((~flagged & y).sum()),
        "true_negative": int((~flagged & ~y).sum()),
    }
    answers, owner = np.unique(groups, return_inverse=True)
    weights = resample_counts(answers.size)[:, owner]
    with np.errstate(invalid="ignore", divide="ignore"):
        resampled = decisions_resampled(y, flagged, weights)
        resampled["false_positive_rate"] = (weights @ (flagged & ~y)) / (weights @ ~y)
    negatives = confusion["false_positive"] + confusion["true_negative"]
    point |= {
        "false_positive_rate": confusion["false_positive"] / negatives if negatives else None,
        "flagged_units": float(flagged.mean()),
        "flagged_answers": float(np.mean([flagged[owner == a].any() for a in range(answers.size)])),
        "confusion": confusion,
        "intervals": {k: _interval(resampled[k]) for k in ("precision", "recall", "false_positive_rate")},
        "resampled": f"{answers.size} answers, {weights.shape[0]} resamples",
    }
    return point


def _interval(values: np.ndarray) -> list[float] | None:
    kept = values[np.isfinite(values)]
    return [float(np.percentile(kept, 2.5)), float(np.percentile(kept, 97.5))] if kept.size else None


@dataclass(frozen=True, kw_only=True)
class ChooseSettings:
    """What `choose` compares and how, checked when made (before any answer is scored): the candidate
    ``methods`` (methods and presets, each known to the registry), the call budget per answer, the
    operating point's ``target`` (precision or recall, and its value in (0, 1]), the cross-validation
    ``folds`` by answer, the method ``options`` given to each candidate that has them, and the share of
    units a cascade of a fitted checker and the LLM judge sends to the judge (``tune.cascades``; None:
    no cascade is tried)."""

    methods: tuple[str, ...]
    max_calls_per_answer: float | None = None
    target: tuple[str, float] = ("precision", 0.8)
    folds: int = FOLDS
    options: Mapping[str, Any] | None = None
    cascade_share: float | None = CASCADE_SHARE

    def __post_init__(self) -> None:
        object.__setattr__(self, "methods", tuple(self.methods))
        share = self.cascade_share
        if share is not None and not (isinstance(share, int | float) and 0 < share < 1):
            raise ConfigError(f"cascade_share lies between 0 and 1, got {share}", settings=("cascade_share",))
        if not self.methods:
            raise ConfigError("choose compares methods: give at least one", settings=("methods",))
        kind, value = self.target
        if kind not in ("precision", "recall") or not 0 < value <= 1:
            raise ConfigError(f"the operating point's target is precision or recall in (0, 1], got {self.target}")
        budget = self.max_calls_per_answer
        if budget is not None and not (isinstance(budget, int | float) and 0 <= budget < math.inf):
            raise ConfigError(
                f"max_calls_per_answer takes a number of at least 0, got {budget}", settings=("max_calls_per_answer",)
            )
        for name in self.methods:
            registry.get(registry.configured(name)[0])  # unknown: refused now, not listed as one that cannot run


def choose(
    data: Any,
    settings: ChooseSettings,
    out: str | Path,
    *,
    model: ModelLike | None = None,
    gateway: Gateway | None = None,
    progress: bool = True,
) -> Choice:
    """Run, calibrate and compare each candidate method on the labelled answers ``data``; write
    OUT/choose.json (with how it was made and what it cost: a record), OUT/choose.md and the
    recommended candidate's calibration (OUT/calibration.json)."""
    s = settings
    began = time.perf_counter()
    labelled = data if isinstance(data, LabelledData) else load_labelled(data)
    check_fit_inputs(labelled, s.folds)
    out = Path(out)
    ran, spending, rows = _run_candidates(labelled, s.methods, out, model, gateway, s.options, progress)
    fitted: dict[str, Fitted] = {}
    for name, result in ran.items():
        rows.append(_scored(name, [name], [result], spending, labelled, model, s.folds, fitted))
    composed: dict[str, BenchResult] = {}  # cascades' runs, made of the others' (no call of their own)
    if s.cascade_share is not None:
        rows += _cascades(ran, composed, spending, labelled, model, s, fitted)
    singles = sorted((r for r in rows if r.auc_roc is not None), key=lambda r: -(r.auc_roc or 0))
    best_single = singles[0].auc_roc if singles else None
    above_chance = [r for r in singles if r.auc_roc_interval is None or r.auc_roc_interval[0] > CHANCE]
    for size in STACK_OF:
        if len(above_chance) >= size:
            members = [r.name for r in above_chance[:size]]
            results = [{**ran, **composed}[m] for m in members]
            stack = _scored("+".join(members), members, results, spending, labelled, model, s.folds, fitted)
            if stack.auc_roc is not None and best_single is not None and stack.auc_roc > best_single:
                rows.append(_costed_against(stack, above_chance[0], fitted))
    for row in rows:
        row.over_budget = s.max_calls_per_answer is not None and (row.calls_per_answer or 0) > s.max_calls_per_answer
    choice = _recommend(labelled, rows, fitted, s.target, out)
    choice.nested = nested_selection({**ran, **composed}, rows, labelled, s.target, s.folds)
    write_text(out / "choose.md", report(choice))
    made = envelope(
        models=sorted({m for r in ran.values() for m in (*r.meta.models, r.params.get("model")) if m}),
        items=len(labelled.rows),
        item="answer",
        calls=sum(r.meta.calls for r in ran.values()),
        seconds=time.perf_counter() - began,
        cache_hits=sum(r.meta.cache_hits for r in ran.values()),
        prompt_tokens=sum(r.meta.tokens.prompt for r in ran.values()),
    )
    write_json(out / "choose.json", {**made, **asdict(choice)})
    return choice


def _run_candidates(
    labelled: LabelledData,
    methods: Sequence[str],
    out: Path,
    model: ModelLike | None,
    gateway: Gateway | None,
    options: Mapping[str, Any] | None,
    progress: bool,
) -> tuple[dict[str, BenchResult], dict[str, Spent], list[Candidate]]:
    """Each candidate run on the answers (its own folder, resumable), what it spent, and a row for each
    that cannot run on these rows or could not run at all (the others go on)."""
    ran: dict[str, BenchResult] = {}
    spending: dict[str, Spent] = {}
    rows: list[Candidate] = []
    for name in methods:
        try:
            [plan] = mine.mine_plans(labelled, [name], model, gateway, options=options)
        except ConfigError as exc:  # it cannot run on these rows: listed with the reason
            rows.append(Candidate(name, [name], skipped=str(exc)))
            continue
        folder = out / "runs" / re.sub(r"[^\w.:=+-]", "_", name)  # a bracketed path stays one folder
        before = spent_before(folder)
        try:
            ran[name] = run(plan, folder, progress)
        except HalluscopeError as exc:  # it could not run at all (its model, its limit): listed, the others go on
            rows.append(Candidate(name, [name], skipped=redact_credentials(f"{type(exc).__name__}: {exc}")))
            continue
        spending[name] = spent(folder, before, ran[name], len(labelled.rows))
    return ran, spending, rows


def _cascades(
    ran: Mapping[str, BenchResult],
    composed: dict[str, BenchResult],
    spending: dict[str, Spent],
    labelled: LabelledData,
    model: ModelLike | None,
    s: ChooseSettings,
    fitted: dict[str, Fitted],
) -> list[Candidate]:
    """A row for each cascade the candidates make (a fitted checker, then the LLM judge on the units in its
    band), scored from their runs; its run, composed from theirs, goes into ``composed``."""
    rows = []
    for fast, judge in cascades.members(ran):
        try:
            cascade = cascades.compose(fast, judge, ran, s.cascade_share or 0.0)
        except ConfigError as exc:
            rows.append(Candidate(f"{fast} then {judge}", [fast, judge], skipped=str(exc)))
            continue
        composed[cascade.name] = cascade.result
        spending[cascade.name] = Spent.of_cascade(spending[fast], spending[judge], cascade.share)
        row = _scored(cascade.name, [cascade.name], [cascade.result], spending, labelled, model, s.folds, fitted)
        row.notes.append(
            f"a cascade: {cascade.escalated} of {cascade.units} units ({cascade.share:.0%}) in its band go to "
            f"{judge}'s judge; its costs are {fast}'s plus that share of {judge}'s, composed from their runs"
        )
        rows.append(row)
    return rows


class Inner(NamedTuple):
    """A candidate's cross-validated fit inside one outer fold's training answers."""

    auc_roc: float
    out_of_fold: np.ndarray


def nested_selection(
    ran: Mapping[str, BenchResult],
    rows: Sequence[Candidate],
    labelled: LabelledData,
    target: tuple[str, float],
    folds: int,
) -> dict[str, Any] | None:
    """The selection itself held out: outer folds by answer; in each, the candidates (and stacks of the
    best) are cross-validated on the training answers alone, one is picked by the same rule and its
    threshold set on those answers, then it is fitted on them and scored on the held-out answers. The
    pooled held-out figure is what the pick will do; the picks' inner figures minus it is the optimism
    of reporting the selection on the scores it was made on. None where it cannot be run (no candidate
    ran, or a fold's training answers hold one class)."""
    calls = {r.name: r.calls_per_answer for r in rows if len(r.methods) == 1}
    singles = [r.name for r in rows if len(r.methods) == 1 and r.auc_roc is not None and not r.over_budget]
    if not singles:
        return None
    everything = Split.of_answers(singles, [ran[n] for n in singles], labelled.per_sentence)
    outer = answer_folds(everything.groups, folds, seed=1)
    held_out = np.full(everything.labels.size, np.nan)
    flagged = np.zeros(everything.labels.size, dtype=bool)
    picks, inner_figures = [], []
    for k in range(folds):
        train, test = outer != k, outer == k
        scored = _fold_candidates(everything, singles, train, folds)
        if not scored:
            return None
        cost = {n: sum(calls.get(m) or 0.0 for m in n.split("+")) for n in scored}
        labels, groups = everything.labels[train], everything.groups[train]

        tied = functools.partial(_tied_in_fold, labels, groups, scored)
        pick, _ = cheapest_tied(list(scored), {n: f.auc_roc for n, f in scored.items()}, cost, tied)
        members = pick.split("+")
        point = operating_point(labels, scored[pick].out_of_fold, groups, *target)
        kind, params = fit({m: np.asarray(everything.scores[m])[train].tolist() for m in members}, labels)
        fitted = Calibration(kind=kind, methods=members, model=None, prompts=[], params=params)
        held_out[test] = fitted.probabilities({m: np.asarray(everything.scores[m])[test].tolist() for m in members})
        if point["threshold"] is not None:
            flagged[test] = held_out[test] >= point["threshold"]
        picks.append(pick)
        inner_figures.append(scored[pick].auc_roc)
    y = everything.labels
    outer_auc = float(ranking(y, held_out)["auc_roc"])
    precision, recall = (
        (float(y[flagged].mean()) if flagged.any() else None),
        float(flagged[y].mean()) if y.any() else None,
    )
    return {
        "outer_folds": folds,
        "picks": picks,
        "auc_roc": outer_auc,
        "inner_auc_roc": float(np.mean(inner_figures)),
        "optimism": float(np.mean(inner_figures)) - outer_auc,
        "precision": precision,
        "recall": recall,
    }


def _tied_in_fold(labels: np.ndarray, groups: np.ndarray, scored: Mapping[str, Inner], top: str, name: str) -> bool:
    """Within one outer fold's training answers: ``top`` is not detectably better than ``name``."""
    try:
        found = paired_difference(labels, scored[top].out_of_fold, scored[name].out_of_fold, groups)
    except ValueError:  # a unit without a probability: no paired measure
        return False
    return found.verdict() != "met"


def _fold_candidates(everything: Split, singles: list[str], train: np.ndarray, folds: int) -> dict[str, Inner]:
    """One outer fold's candidates on its training answers: each single, and the stacks of the best two
    and three that beat the best single there (as the whole choice keeps them)."""
    found = {n: _inner(everything, [n], train, folds) for n in singles}
    scored = {n: f for n, f in found.items() if f is not None}
    ranked = sorted(scored, key=lambda n: -scored[n].auc_roc)
    for size in STACK_OF:
        if ranked and len(ranked) >= size:
            stack = _inner(everything, ranked[:size], train, folds)
            if stack is not None and stack.auc_roc > scored[ranked[0]].auc_roc:
                scored["+".join(ranked[:size])] = stack
    return scored


def _inner(everything: Split, members: list[str], train: np.ndarray, folds: int) -> Inner | None:
    """``members`` cross-validated on the training answers alone (None: a fold with one class)."""
    part = Split(
        scores={m: np.asarray(everything.scores[m])[train].tolist() for m in members},
        labels=everything.labels[train],
        groups=everything.groups[train],
    )
    try:
        out_of_fold = cross_validated(part, "isotonic", folds)
    except ConfigError:
        return None
    return Inner(float(ranking(part.labels, out_of_fold)["auc_roc"]), out_of_fold)


def _scored(
    name: str,
    methods: list[str],
    results: list[BenchResult],
    spending: Mapping[str, Spent],
    labelled: LabelledData,
    model: ModelLike | None,
    folds: int,
    fitted: dict[str, Fitted],
) -> Candidate:
    row = Candidate(name, methods, **costs([spending[m] for m in methods]))
    # samples the file gave are drawn by the model when deployed: once an answer, shared by a stack's members
    row.draws_per_answer = max(
        (r.params["options"].get("n", 0) for r in results if r.params.get("samples_from")), default=0
    )
    if row.draws_per_answer and row.calls_per_answer is not None:
        row.calls_per_answer += row.draws_per_answer
    try:
        calibration, split, out_of_fold = fitted_on_answers(methods, results, labelled, model=model, folds=folds)
    except ConfigError as exc:  # one class in a fold, nothing scored: no held-out measure
        row.problems = [str(exc)]
        return row
    held_out = calibration.report["test"]
    row.auc_roc, row.ece, row.brier = held_out["auc_roc"], held_out["ece"], held_out["brier"]
    row.auc_roc_interval = calibration.report["quality"]["auc_roc_interval"]
    row.problems = list(calibration.report["quality"]["problems"])
    raw = calibration.report["raw_scores_test"]
    row.raw_auc_roc = [float(raw[m]["auc_roc"]) for m in methods]
    answers = int(np.unique(split.groups).size)
    if row.auc_roc is not None and max(row.raw_auc_roc) - row.auc_roc > FLATTENED and answers < FEW_ANSWERS:
        row.notes.append(
            f"on {answers} answers the cross-validated fit ties scores: held out {row.auc_roc:.1f} against "
            f"{max(row.raw_auc_roc):.1f} for the raw scores' ranking"
        )
    fitted[name] = Fitted(calibration, split.labels, out_of_fold, split.groups)
    return row


def _costed_against(stack: Candidate, best: Candidate, fitted: dict[str, Fitted]) -> Candidate:
    """A stack's row with what it costs against its best member, and why it cannot be recommended: a
    member with a negative weight (it does not add) or no paired difference that shows it beats its best
    member (it would cost more for nothing detectable)."""
    if stack.calls_per_answer is not None and best.calls_per_answer is not None:
        ratio = f", {stack.calls_per_answer / best.calls_per_answer:.1f}x" if best.calls_per_answer else ""
        stack.notes.append(
            f"costs {stack.calls_per_answer:.2f} calls an answer against {best.calls_per_answer:.2f} for {best.name}"
            f" alone{ratio}"
        )
    fit_of = fitted.get(stack.name)
    if fit_of is None:
        return stack
    coefficients = fit_of.calibration.params.get("coef") or []
    negative = [m for m, c in zip(stack.methods, coefficients, strict=False) if c < 0]
    if negative:
        stack.problems.append(f"{', '.join(negative)} weighs negatively in the stack: it does not add")
    difference = paired_against(fitted, stack.name, best.name)
    if difference is None or difference.verdict() != "met":
        shown = "not paired" if difference is None else difference.shown()
        stack.problems.append(f"no detectable gain over {best.name} alone ({shown}, paired by answer)")
    return stack


def paired_against(fitted: Mapping[str, Fitted], name: str, other: str) -> PairedDifference | None:
    """The paired bootstrap (by answer) of ``name``'s held-out AUC-ROC minus ``other``'s, on the same units
    (None: their units differ, so they cannot be paired)."""
    a, b = fitted.get(name), fitted.get(other)
    if a is None or b is None or a.labels.shape != b.labels.shape:
        return None
    if not (np.array_equal(a.labels, b.labels) and np.array_equal(a.groups, b.groups)):
        return None
    try:
        return paired_difference(a.labels, a.out_of_fold, b.out_of_fold, a.groups)
    except ValueError:  # a unit without a probability, or one class: no paired measure
        return None


def cheapest_tied(
    names: Sequence[str], auc: Mapping[str, float], cost: Mapping[str, float], tied: Callable[[str, str], bool]
) -> tuple[str, str]:
    """(the pick, the best): the cheapest candidate with no detectable difference from the best held-out
    AUC-ROC (``tied(best, name)``: the paired interval of their difference holds zero), the best among equals."""
    best = max(names, key=lambda n: auc[n])
    return min((n for n in names if n == best or tied(best, n)), key=lambda n: (cost[n], -auc[n])), best


def _recommend(
    labelled: LabelledData,
    rows: list[Candidate],
    fitted: dict[str, Fitted],
    target: tuple[str, float],
    out: Path,
) -> Choice:
    eligible = {r.name: r for r in rows if r.auc_roc is not None and not r.over_budget and not r.problems}
    best: Candidate | None = None
    point, written, why = None, None, "no candidate ran within the budget with a held-out AUC-ROC above chance"
    use, needs = None, []
    if eligible:
        differences: dict[str, PairedDifference | None] = {}

        def tied(top: str, name: str) -> bool:
            differences[name] = found = paired_against(fitted, top, name)
            return found is not None and found.verdict() != "met"  # the best is not detectably better

        auc = {n: float(r.auc_roc or 0.0) for n, r in eligible.items()}
        cost = {n: math.inf if r.calls_per_answer is None else r.calls_per_answer for n, r in eligible.items()}
        pick, top = cheapest_tied(list(eligible), auc, cost, tied)
        best = eligible[pick]
    if best is not None:
        calibration, labels, out_of_fold, groups = fitted[best.name]
        point = operating_point(labels, out_of_fold, groups, *target)
        calibration = calibration.model_copy(update={"threshold": point["threshold"]})
        calibration.save(out / "calibration.json")
        use, needs = use_command(out / "calibration.json", calibration, labelled)
        reliability_diagram(out / "calibration.reliability.png", labels, out_of_fold, f"{best.name}: out of fold")
        written = str(out / "calibration.json")
        if best.name == top:
            why = f"the best held-out AUC-ROC within the budget, {best.auc_roc:.1f}, and no cheaper one ties it"
        else:
            found = differences[best.name]
            why = (
                f"the cheapest with no detectable difference from the best held-out AUC-ROC within the budget "
                f"({top}, {eligible[top].auc_roc:.1f}): {best.auc_roc:.1f}, "
                f"{found.shown() if found is not None else ''} paired by answer"
            )
    units = "sentences" if labelled.per_sentence else "answers"
    recommended = best.name if best else None
    return Choice(
        labelled.source, len(labelled.rows), units, rows, recommended, point, written, why, use=use, use_needs=needs
    )


def use_command(path: Path, calibration: Calibration, labelled: LabelledData) -> tuple[str, list[str]]:
    """`halluscope check` running the calibration as it was fitted (its methods, their options, its model
    and threshold) on an answer on standard input, and what else it needs: the answer's documents and
    question where the labelled answers carried them, a model where samples came from the file and no
    model was named."""
    command = f"halluscope check --calibration {shlex.quote(str(path))}"
    members = [registry.get(registry.configured(m)[0]) for m in calibration.methods]
    columns = labelled.columns
    needs = []
    if "context" in columns and any(m.context_field for m in members):
        needs.append("--context-file FILE: the answer's documents, as your rows' context")
    if "question" in columns and any(m.question_field for m in members):
        needs.append("--question TEXT: the question the answer answers")
    drawn = [name for name, m in zip(calibration.methods, members, strict=True) if "samples" in m.input_names]
    if drawn and calibration.model is None and "samples" in columns:
        needs.append(f"--model SPEC: the model that draws {', '.join(drawn)}'s samples (your file gave them)")
    return command, needs


COLUMNS = (
    ("name", "candidate"),
    ("auc_roc", "held-out AUC-ROC"),
    ("interval", "95% interval"),
    ("raw", "raw AUC-ROC (pooled)"),
    ("ece", "ECE (calibrated)"),
    ("calls_per_answer", "calls / answer"),
    ("prompt_tokens_per_answer", "prompt tokens / answer"),
    ("seconds_per_answer", "s / answer"),
    ("costed_answers", "answers costed"),
    ("note", "note"),
)


def table_rows(choice: Choice) -> list[dict[str, Any]]:
    rows = []
    for c in choice.candidates:
        interval = f"[{c.auc_roc_interval[0]:.1f}, {c.auc_roc_interval[1]:.1f}]" if c.auc_roc_interval else None
        note = c.skipped or "; ".join([*c.problems, *c.notes]) or ("over the call budget" if c.over_budget else "")
        if c.name == choice.recommended:
            note = "recommended"
        if c.draws_per_answer:
            note = "; ".join(
                filter(None, (note, f"samples from your file: {c.draws_per_answer} draws an answer deployed"))
            )
        raw = ", ".join(f"{x:.1f}" for x in c.raw_auc_roc) if c.raw_auc_roc else None
        rows.append({**asdict(c), "interval": interval, "raw": raw, "note": note})
    return rows


def report(choice: Choice) -> str:
    """choose.md (and what the command prints): the table, then the recommendation."""
    lines = [
        f"# Choosing a method for {choice.source}\n",
        f"{choice.answers} answers; units: {choice.units}; held out: cross-validation by answer. The raw AUC-ROC "
        "ranks each member's scores pooled over every unit with no fit: the calibrated held-out figure is below it "
        "where the fit ties scores or the folds' fits differ.\n",
        markdown_table(table_rows(choice), COLUMNS, digits=2),
        "",
    ]
    if choice.recommended is None:
        lines.append(f"No recommendation: {choice.why}.")
    else:
        p = choice.operating_point or {}
        at = "none reaches it" if p.get("threshold") is None else f"p >= {p['threshold']:.3f}"
        lines.append(f"Recommended: **{choice.recommended}** ({choice.why}).")
        lines.append(f"Operating point for {p.get('target')}: {at}, out of fold; {guard_line(p, choice.units)}")
        lines.append(f"Its calibration: {choice.calibration} (its methods, options, model and threshold).")
        lines.append(nested_line(choice.nested))
        lines.append(f"\nuse it: {choice.use}")
        lines.append("  (the answer on standard input" + "".join(f"; {n}" for n in choice.use_needs) + ")")
    return "\n".join(lines) + "\n"


def nested_line(nested: Mapping[str, Any] | None) -> str:
    """The selection held out, in a sentence: what the pick does on answers the choice never saw."""
    if nested is None:
        return "Nested cross-validation: not run (no candidate ran, or a fold's training answers hold one class)."
    picks = ", ".join(nested["picks"])
    got = ", ".join(f"{k} {_num(nested[k])}" for k in ("precision", "recall"))
    return (
        f"Nested cross-validation ({nested['outer_folds']} outer folds by answer, the whole selection held out): "
        f"held-out AUC-ROC {nested['auc_roc']:.1f}, {got} at each fold's own threshold; the picks scored "
        f"{nested['inner_auc_roc']:.1f} on the answers they were picked on (optimism {nested['optimism']:+.1f} "
        f"points); picked per fold: {picks}."
    )


def guard_line(point: Mapping[str, Any], units: str) -> str:
    """What a guard at the operating point does, with the intervals resampling answers."""
    shown = []
    for key, name in (("precision", "precision"), ("recall", "recall"), ("false_positive_rate", "false-positive rate")):
        interval = (point.get("intervals") or {}).get(key)
        shown.append(
            f"{name} {_num(point.get(key))}" + (f" [{interval[0]:.3f}, {interval[1]:.3f}]" if interval else "")
        )
    line = ", ".join(shown) + f"; base rate {_num(point.get('base_rate'))}"
    if "confusion" in point:
        c = point["confusion"]
        flags = f"{point['flagged_units']:.0%} of the {units}"
        if units != "answers":  # sentences: and how many answers hold a flagged one
            flags += f" and {point['flagged_answers']:.0%} of the answers"
        line += (
            f"; it flags {flags} ({c['true_positive']} true and {c['false_positive']} false positives, "
            f"{c['false_negative']} missed, {c['true_negative']} passed; intervals: {point['resampled']})"
        )
    return line + "."


def _num(value: Any) -> str:
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.3f}"


def describe(choice: Choice, model: ModelLike | None) -> str:
    head = f"model: {model_name(model)}\n" if model is not None else ""
    return head + report(choice)
