"""`halluscope calibrate`: fit a method's (or several methods') probability of "inaccurate" on labelled
units and report it held out: on the WikiBio benchmark's sentences, with a held-out split of passages;
or on a user's own labelled answers (``--data FILE``, ``labelled.py``), cross-validated by answer (k
folds; an answer's sentences never split across folds), then fitted on every answer.

The methods' scores come from the benchmark runner (so a rerun, or a bench run of the same methods,
is replayed from the cache); a sentence is positive when its label is minor or major inaccurate
(the protocol's NonFact). A passage any method could not score is left out of both splits.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from halluscope.backends.gateway import Gateway
from halluscope.backends.models import ModelLike, model_name
from halluscope.bench import mine
from halluscope.bench.provenance import provenance
from halluscope.bench.runner import BenchResult, run
from halluscope.bench.wikibio import finite_scores, load_wikibio, run_bench, score_list, sentence_scores
from halluscope.calibration import (
    Calibration,
    brier,
    evaluate,
    expected_calibration_error,
    fit,
    precision_recall_at,
    reliability_diagram,
    threshold_for_precision,
    threshold_for_recall,
)
from halluscope.errors import ConfigError
from halluscope.labelled import LabelledData, load_labelled
from halluscope.metrics import auc_pr, auc_roc, auc_roc_resampled, both_classes, resample_counts
from halluscope.readers import check_writable
from halluscope.runtime import registry

TARGET_PRECISION = 0.8


@dataclasses.dataclass(frozen=True, kw_only=True)
class WikiBioCalibrationSettings:
    """What a WikiBio calibration fits and reports on, checked when made (before any passage is scored):
    ``methods`` (one, or several to stack), the ``fit_passages`` and held-out ``test_passages`` (disjoint;
    their first ``limit_passages`` each, a quick first look), ``n`` samples, the fit's ``kind``, the
    reported threshold's ``target_precision``, the benchmark ``data`` directory, and ``force``: write a
    fit that fails its own held-out check, its report saying so."""

    methods: tuple[str, ...]
    fit_passages: range
    test_passages: range
    n: int | None = None
    kind: str = "isotonic"
    target_precision: float = TARGET_PRECISION
    data: str | Path | None = None
    limit_passages: int | None = None
    force: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "methods", tuple(self.methods))
        if not self.methods:
            raise ConfigError(
                "calibrate fits one method, or several to stack: give at least one", settings=("methods",)
            )
        if self.limit_passages is not None and self.limit_passages < 1:
            raise ConfigError(
                f"limit_passages must be at least 1, got {self.limit_passages}", settings=("limit_passages",)
            )
        fit_passages, test_passages = self.splits()
        if set(fit_passages) & set(test_passages):
            raise ConfigError("the fit and test passages overlap: a held-out report needs disjoint splits")
        if not 0 < self.target_precision <= 1:
            raise ConfigError(
                f"the target precision is in (0, 1], got {self.target_precision}", settings=("target_precision",)
            )

    def splits(self) -> tuple[range, range]:
        """The fit and test passages scored: the first ``limit_passages`` of each split, else all."""
        k = self.limit_passages
        return (self.fit_passages, self.test_passages) if k is None else (self.fit_passages[:k], self.test_passages[:k])


def calibrate_wikibio(
    settings: WikiBioCalibrationSettings,
    out: str | Path,
    *,
    model: ModelLike | None = None,
    gateway: Gateway | None = None,
    progress: bool = True,
) -> Calibration:
    """Score the passages of both splits with each method, fit on the fit passages, report on the test
    passages; writes ``out`` (the calibration JSON), the runs beside it and a reliability PNG. A fit that
    fails its own held-out check (``quality_problems``) is refused, unless ``settings.force``: then it is
    written with its report saying so."""
    s = settings
    methods = list(s.methods)
    fit_passages, test_passages = s.splits()
    path = Path(out)
    chosen = set(fit_passages) | set(test_passages)
    runs = path.parent / f"{path.stem}.runs"
    results = run_bench(methods, runs, s.data, None, s.n, progress, model, gateway, only=chosen)
    passages = {p.index: p for p in load_wikibio(s.data) if p.index in chosen}
    fit_split, test_split, kept = _scored_splits(methods, results, passages, fit_passages, test_passages)
    fitted_kind, params = fit(fit_split.scores, fit_split.labels, s.kind)
    data = _wikibio_data(fit_passages, test_passages, sorted(set(passages) - set(kept)), results[0].params["n"], runs)
    method_settings = {r.params["method"]: _settings(r.params) for r in results}
    calibration = _fitted(fitted_kind, methods, model, results, params, method_settings, data)
    report = held_out_report(calibration, fit_split, test_split, s.target_precision, s.force)
    _reported(calibration, report, results)
    _refuse_a_poor_fit(path, calibration.report["quality"]["problems"], s.force)
    reliability_diagram(
        path.with_suffix(".reliability.png"),
        test_split.labels,
        calibration.probabilities(test_split.scores),
        f"{'+'.join(methods)}: held-out passages {test_passages.start}-{test_passages.stop - 1}",
    )
    calibration.save(path)
    return calibration


def _scored_splits(
    methods: list[str], results: list[BenchResult], passages: dict[int, Any], fit: range, test: range
) -> tuple[Split, Split, list[int]]:
    """The fit and test splits of the passages every method scored, and those passages."""
    by_method = {
        r.params["method"]: dict(zip((rec["index"] for rec in r.records), sentence_scores(r), strict=True))
        for r in results
    }
    kept = sorted(set.intersection(*(set(scores) for scores in by_method.values())))
    fit_split = Split.of(methods, by_method, passages, [i for i in kept if i in fit])
    test_split = Split.of(methods, by_method, passages, [i for i in kept if i in test])
    if not test_split.labels.size:
        raise ConfigError("no test passage was scored")
    return fit_split, test_split, kept


def _fitted(
    kind: str,
    methods: list[str],
    model: ModelLike | None,
    results: list[BenchResult],
    params: dict[str, Any],
    settings: dict[str, Any],
    data: dict[str, Any],
) -> Calibration:
    """A fitted calibration with what it was fitted for: the methods, their model, prompts and settings."""
    return Calibration(
        kind=kind,
        methods=methods,
        model=model_name(model) if model is not None else None,
        prompts=sorted({p for r in results for p in r.meta.prompts}),
        params=params,
        settings=settings,
        data=data,
    )


def _reported(calibration: Calibration, report: dict[str, Any], results: list[BenchResult]) -> None:
    """The held-out report kept on the calibration, its operating point as the threshold a check decides
    at unless given another, and what the runs cost."""
    calibration.report = report
    calibration.threshold = report["threshold"]
    calibration.report |= {
        "calls": sum(r.meta.calls for r in results),
        "cache_hits": sum(r.meta.cache_hits for r in results),
    }


def _wikibio_data(fit: range, test: range, left_out: list[int], n: Any, runs: Path) -> dict[str, Any]:
    """What a WikiBio calibration was fitted and reported on, as its JSON records it."""
    return {
        "bench": "wikibio",
        "positive": "minor or major inaccurate (NonFact)",
        "fit_passages": [fit.start, fit.stop - 1],
        "test_passages": [test.start, test.stop - 1],
        "passages_left_out": left_out,
        "n": n,
        "runs": str(runs),
    }


def _refuse_a_poor_fit(path: Path, problems: list[str], force: bool) -> None:
    """A fit that fails its own held-out check is not written, unless forced."""
    if problems and not force:
        raise ConfigError(
            f"refused to write {path}: {'; '.join(problems)}. Its probabilities would mislead: fit it on more or "
            "other passages (a split with both accurate and inaccurate sentences), or keep it anyway (force=True)",
            settings=("force=True",),
        )


FOLDS = 5


def calibrate_labelled(
    methods: list[str],
    data: Any,
    out: str | Path,
    *,
    model: ModelLike | None = None,
    gateway: Gateway | None = None,
    kind: str = "isotonic",
    folds: int = FOLDS,
    target_precision: float = TARGET_PRECISION,
    options: Mapping[str, Any] | None = None,
    progress: bool = True,
    force: bool = False,
) -> Calibration:
    """Score the user's labelled answers with each method (``bench mine``'s plans, their runs beside
    ``out``), cross-validate the fit by answer (``folds``), report the out-of-fold AUC-ROC, Brier and ECE
    with intervals resampling answers, then fit on every answer and write ``out``. The units are the
    labelled sentences where every row labels its sentences, else the answers (each scored by its
    riskiest unit). A fit that fails its held-out check is refused unless ``force``."""
    if not 0 < target_precision <= 1:
        raise ConfigError(f"the target precision is in (0, 1], got {target_precision}")
    labelled = data if isinstance(data, LabelledData) else load_labelled(data)
    check_fit_inputs(labelled, folds)
    check_writable(out, "out")
    path = Path(out)
    runs = path.parent / f"{path.stem}.runs"
    plans = mine.mine_plans(labelled, methods, model, gateway, options=options)
    results = [run(plan, runs / plan.method, progress) for plan in plans]
    calibration, split, out_of_fold = fitted_on_answers(
        methods, results, labelled, model=model, kind=kind, folds=folds, target_precision=target_precision
    )
    calibration.data["runs"] = str(runs)
    problems = calibration.report["quality"]["problems"]
    calibration.report["quality"]["forced"] = bool(problems) and force
    if problems and not force:
        raise ConfigError(
            f"refused to write {path}: {'; '.join(problems)}. Its probabilities would mislead: label more answers "
            "(both supported and hallucinated ones), or keep it anyway (force=True)",
            settings=("force=True",),
        )
    reliability_diagram(
        path.with_suffix(".reliability.png"),
        split.labels,
        out_of_fold,
        f"{'+'.join(methods)}: {folds}-fold out-of-fold, {labelled.source}",
    )
    calibration.save(path)
    return calibration


def check_fit_inputs(labelled: LabelledData, folds: int) -> None:
    """What a fit on a user's answers needs, checked before any answer is scored: 2 to 20 folds, no more
    than the answers, and both labels among the units it fits on."""
    if isinstance(folds, bool) or not isinstance(folds, int) or not 2 <= folds <= 20:
        raise ConfigError(f"folds is between 2 and 20, got {folds}", settings=("folds",))
    independent = len({row.group or row.id for row in labelled.rows})
    if folds > independent:
        raise ConfigError(
            f"folds={folds} is more than the {independent} answers (or groups): each fold holds out whole ones",
            settings=("folds=",),
        )
    units = "sentences" if labelled.per_sentence else "answers"
    labels = [x for row in labelled.rows for x in (row.labels if labelled.per_sentence else (row.answer_label,))]
    if len(set(labels)) < 2:
        raise ConfigError(
            f"all {len(labels)} {units} of {labelled.source} are labelled {labels[0]}: a fit needs both supported "
            "(0) and hallucinated (1) ones"
        )


def fitted_on_answers(
    methods: list[str],
    results: list[BenchResult],
    labelled: LabelledData,
    *,
    model: ModelLike | None = None,
    kind: str = "isotonic",
    folds: int = FOLDS,
    target_precision: float = TARGET_PRECISION,
) -> tuple[Calibration, Split, np.ndarray]:
    """The methods' scored runs on a user's answers, cross-validated by answer and fitted on every answer:
    the calibration (its report the out-of-fold numbers and quality problems), its units and their
    out-of-fold probabilities."""
    if not 2 <= folds <= 20:
        raise ConfigError(f"folds is between 2 and 20, got {folds}", settings=("folds",))
    split = Split.of_answers(methods, results, labelled.per_sentence)
    if not split.labels.size:
        raise ConfigError("no answer was scored by every method")
    out_of_fold = cross_validated(split, kind, folds)
    fitted_kind, params = fit(split.scores, split.labels, kind)
    own = registry.own_model(methods[0]) if len(methods) == 1 else None
    model = own if own is not None else model  # 'grounded[model=nli:DIR]' was scored, and runs, on its own
    settings = {r.params["method"]: option_settings(r.params["method"], r.params["options"]) for r in results}
    data = {
        "bench": "mine",
        "source": labelled.source,
        "positive": "label 1 (hallucinated)",
        "units": "sentences" if labelled.per_sentence else "answers (each scored by its riskiest unit)",
        "answers": int(np.unique(split.groups).size),
        "held_out": f"{folds}-fold cross-validation by answer",
    }
    calibration = _fitted(fitted_kind, methods, model, results, params, settings, data)
    _reported(calibration, cross_validated_report(calibration, split, out_of_fold, target_precision), results)
    return calibration, split, out_of_fold


def answer_folds(groups: np.ndarray, folds: int, seed: int = 0) -> np.ndarray:
    """Each unit's fold: the answers shuffled (``seed``) and dealt round the folds, so an answer's units
    share one fold."""
    answers = np.unique(groups)
    order = np.random.default_rng(seed).permutation(answers.size)
    fold_of = dict(zip(answers[order].tolist(), (np.arange(answers.size) % folds).tolist(), strict=True))
    return np.array([fold_of[g] for g in groups.tolist()], dtype=int)


def cross_validated(split: Split, kind: str, folds: int) -> np.ndarray:
    """Every unit's probability from a fit on the other folds' answers. A fold whose training units hold
    one class only cannot be fitted: the fit is refused, naming the fold."""
    fold = answer_folds(split.groups, folds)
    out = np.empty(split.labels.size)
    for k in range(folds):
        held, kept = fold == k, fold != k
        if not held.any():
            continue
        train = {m: np.asarray(v, dtype=np.float64)[kept].tolist() for m, v in split.scores.items()}
        if split.labels[kept].all() or not split.labels[kept].any():
            raise ConfigError(
                f"fold {k + 1} of {folds} trains on one class only: label more answers, or fewer folds",
                settings=("folds",),
            )
        fitted_kind, params = fit(train, split.labels[kept], kind)
        part = Calibration(kind=fitted_kind, methods=list(split.scores), model=None, prompts=[], params=params)
        out[held] = part.probabilities(
            {m: np.asarray(v, dtype=np.float64)[held].tolist() for m, v in split.scores.items()}
        )
    return out


def cross_validated_report(
    calibration: Calibration, split: Split, out_of_fold: np.ndarray, target_precision: float
) -> dict[str, Any]:
    """The out-of-fold numbers (AUC-ROC, Brier and ECE with 95% intervals resampling answers), the
    threshold for the target precision chosen on them, and the quality check."""
    y = split.labels
    in_sample = calibration.probabilities(split.scores)
    threshold = threshold_for_precision(y, out_of_fold, target_precision)
    interval = held_out_interval(y, out_of_fold, split.groups)
    return {
        "provenance": provenance(),
        "quality": {"auc_roc_interval": interval, "problems": quality_problems(y, y, interval), "forced": False},
        "target_precision": target_precision,
        "threshold": threshold,
        "base_rate_fit": float(y.mean()),
        "operating_points": operating_points(y, out_of_fold, y, out_of_fold),
        "fit": evaluate(y, in_sample, threshold),
        "test": evaluate(y, out_of_fold, threshold),
        "test_intervals": resampled_intervals(y, out_of_fold, split.groups),
        "raw_scores_test": {m: ranking(y, np.asarray(split.scores[m], dtype=np.float64)) for m in calibration.methods},
    }


def resampled_intervals(y: np.ndarray, p: np.ndarray, groups: np.ndarray) -> dict[str, list[float]]:
    """95% bootstrap intervals of the out-of-fold Brier score and ECE, resampling answers (seed 0)."""
    names, index = np.unique(groups, return_inverse=True)
    drawn = resample_counts(names.size)[:, index]
    values: dict[str, list[float]] = {"brier": [], "ece": []}
    for weights in drawn:
        units = np.repeat(np.arange(y.size), weights)
        if units.size:
            values["brier"].append(brier(y[units], p[units]))
            values["ece"].append(expected_calibration_error(y[units], p[units]))
    return {k: [float(np.percentile(v, 2.5)), float(np.percentile(v, 97.5))] for k, v in values.items() if v}


@dataclasses.dataclass(frozen=True)
class Split:
    """One split's sentences: each method's scores, the labels (inaccurate: True) and each sentence's
    passage (what the held-out interval resamples)."""

    scores: dict[str, list[float]]
    labels: np.ndarray
    groups: np.ndarray

    @classmethod
    def of(
        cls,
        methods: list[str],
        by_method: dict[str, dict[int, list[float]]],
        passages: dict[int, Any],
        chosen: list[int],
    ) -> Split:
        return cls(
            scores={m: [x for i in chosen for x in by_method[m][i]] for m in methods},
            labels=np.array([lab != "accurate" for i in chosen for lab in passages[i].labels]),
            groups=np.array([i for i in chosen for _ in passages[i].labels]),
        )

    @classmethod
    def of_answers(cls, methods: list[str], results: list[BenchResult], per_sentence: bool) -> Split:
        """The answers every method scored: their labelled sentences, or (``per_sentence`` False) the
        answers themselves, each scored by its riskiest unit; grouped by answer, or by the answers'
        ``group`` where the labelled file gives one (one question's answers)."""
        scored = [{item.id: item for item in r.items} for r in results]
        ids = [i for i in scored[0] if all(i in s for s in scored[1:])]
        if per_sentence:
            units = [(i, k) for i in ids for k in range(len(scored[0][i].record["labels"]))]
            scores = {m: [score_list(s[i].scores)[k] for i, k in units] for m, s in zip(methods, scored, strict=True)}
            labels = [scored[0][i].record["labels"][k] == "1" for i, k in units]
            groups = [scored[0][i].record.get("group", i) for i, _ in units]
        else:
            scores = {m: [mine.riskiest(s[i].scores) for i in ids] for m, s in zip(methods, scored, strict=True)}
            labels = [bool(scored[0][i].record["answer_label"]) for i in ids]
            groups = [scored[0][i].record.get("group", i) for i in ids]
        return cls(scores=scores, labels=np.array(labels, dtype=bool), groups=np.array(groups))


def held_out_report(
    calibration: Calibration, fit_split: Split, test_split: Split, target_precision: float, force: bool
) -> dict[str, Any]:
    """The fitted calibration judged on both splits: the threshold for the target precision (chosen on
    the fit split), the held-out AUC-ROC interval and the quality problems it shows, operating points."""
    p_fit, p_test = calibration.probabilities(fit_split.scores), calibration.probabilities(test_split.scores)
    threshold = threshold_for_precision(fit_split.labels, p_fit, target_precision)
    interval = held_out_interval(test_split.labels, p_test, test_split.groups)
    problems = quality_problems(fit_split.labels, test_split.labels, interval)
    raw = {
        m: ranking(test_split.labels, np.asarray(test_split.scores[m], dtype=np.float64)) for m in calibration.methods
    }
    return {
        "provenance": provenance(),
        "quality": {"auc_roc_interval": interval, "problems": problems, "forced": bool(problems) and force},
        "target_precision": target_precision,
        "threshold": threshold,
        "base_rate_fit": float(fit_split.labels.mean()),
        "operating_points": operating_points(fit_split.labels, p_fit, test_split.labels, p_test),
        "fit": evaluate(fit_split.labels, p_fit, threshold),
        "test": evaluate(test_split.labels, p_test, threshold),
        "raw_scores_test": raw,
    }


MIN_EACH_CLASS = 10  # fewer accurate (or inaccurate) fit sentences than this: no curve worth fitting


def held_out_interval(y: np.ndarray, p: np.ndarray, groups: np.ndarray) -> list[float] | None:
    """The 95% bootstrap interval of the held-out AUC-ROC (x100), resampling whole passages (seed 0);
    None where the held-out split has one class only."""
    if not both_classes(y):
        return None
    names, index = np.unique(groups, return_inverse=True)
    drawn = resample_counts(names.size)
    values = auc_roc_resampled(y, p, drawn[:, index].astype(np.float64)) * 100
    low, high = np.nanpercentile(values, [2.5, 97.5])
    return [float(low), float(high)]


def quality_problems(fit_y: np.ndarray, test_y: np.ndarray, interval: list[float] | None) -> list[str]:
    """Why a fitted calibration would mislead: too few fit sentences of a class, or a held-out AUC-ROC
    whose interval holds 50 (its probabilities would rank no better than chance) or lies below it (the
    wrong way round: an isotonic fit keeps the order)."""
    problems = []
    for name, count in (("inaccurate", int(fit_y.sum())), ("accurate", int((~fit_y).sum()))):
        if count < MIN_EACH_CLASS:
            problems.append(f"the fit split has {count} {name} sentences (at least {MIN_EACH_CLASS} needed)")
    if interval is None:
        problems.append("the held-out split has one class only, so nothing checks the fit")
    elif interval[0] <= 50 <= interval[1]:
        low, high = interval
        problems.append(f"its held-out AUC-ROC interval [{low:.1f}, {high:.1f}] holds 50: no better than chance")
    elif interval[1] < 50:
        low, high = interval
        problems.append(
            f"its held-out AUC-ROC interval [{low:.1f}, {high:.1f}] lies below 50: it ranks hallucinated units as "
            "the least likely (a calibration cannot turn it round)"
        )
    return problems


def _settings(params: dict[str, Any]) -> dict[str, Any]:
    """What sets a method's scale in a WikiBio bench run: its options (``option_settings``), the sample
    count and the judge."""
    n = {"n": params["n"]} if "n" in registry.get(registry.configured(params["method"])[0]).option_names else {}
    judge = {"judge": params["judge"]} if params.get("judge") else {}
    return option_settings(params["method"], {**n, **judge})


def option_settings(configured: str, given: Mapping[str, Any]) -> dict[str, Any]:
    """What sets a method's scale, as a result's ``meta.params`` names it: the method's option defaults
    (``theta``, ``mode`` ...), a preset's options ('selfcheck-prompt:prob' is scoring='prob'), and the
    options the run was given."""
    name, preset = registry.configured(configured)
    spec = registry.get(name)
    defaults = {
        f.name: f.default
        for f in dataclasses.fields(spec.options)
        if f.name != spec.model_field and isinstance(f.default, str | int | float | bool)
    }
    return {**defaults, **preset, **given}


OPERATING_POINTS = (("precision", 0.8), ("precision", 0.9), ("recall", 0.8), ("recall", 0.9))


def operating_points(
    fit_y: np.ndarray, fit_p: np.ndarray, test_y: np.ndarray, test_p: np.ndarray
) -> list[dict[str, Any]]:
    """For each target (precision or recall 0.8 / 0.9), the threshold chosen on the fit split and what
    it gives there and held out. A precision target at or below the fit split's base rate is met by
    flagging everything: that row says so (``everything``) instead of offering p >= 0."""
    rows = []
    base = float(fit_y.mean())
    for kind, target in OPERATING_POINTS:
        everything = kind == "precision" and base >= target
        if kind == "precision":
            t = None if everything else threshold_for_precision(fit_y, fit_p, target)
        else:
            t = threshold_for_recall(fit_y, fit_p, target)
        applied = -math.inf if everything else t  # flagging everything: the base rates, recall 1
        fit_prec, fit_rec = precision_recall_at(fit_y, fit_p, applied)
        test_prec, test_rec = precision_recall_at(test_y, test_p, applied)
        rows.append(
            {
                "target": f"{kind} {target:.1f}",
                "threshold": t,
                "everything": everything,
                "fit_precision": fit_prec,
                "fit_recall": fit_rec,
                "test_precision": test_prec,
                "test_recall": test_rec,
            }
        )
    return rows


def ranking(y: np.ndarray, scores: np.ndarray) -> dict[str, Any]:
    finite = finite_scores(scores)
    return {"auc_roc": auc_roc(y, finite), "auc_pr": auc_pr(y, finite)}


def describe(calibration: Calibration) -> str:
    """The lines `halluscope calibrate` prints."""
    r = calibration.report
    scores = f"{calibration.model}'s scores" if calibration.model else "scores (no model)"
    lines = [f"{calibration.kind} calibration of {'+'.join(calibration.methods)} from {scores}"]
    held_out = calibration.data.get("held_out")  # a user's answers: cross-validated
    names = {"fit": "fit (in sample)", "test": f"held out ({held_out})"} if held_out else {"fit": "fit", "test": "test"}
    unit = "units" if held_out else "sentences"
    spread = r.get("test_intervals") or {}
    for split in ("fit", "test"):
        m = r[split]
        auc = "n/a" if m["auc_roc"] is None else f"{m['auc_roc']:.1f}"
        brier_ci, ece_ci = (_interval(spread.get(k), 3) if split == "test" else "" for k in ("brier", "ece"))
        lines.append(
            f"  {names[split]}: {m['units']} {unit} ({m['hallucinated']} hallucinated): AUC-ROC {auc}, "
            f"Brier {m['brier']:.3f}{brier_ci}, ECE {m['ece']:.3f}{ece_ci}"
        )
    base = r.get("base_rate_fit")
    if base is not None and base >= r["target_precision"]:
        lines.append(
            f"  threshold for precision {r['target_precision']:.2f}: none to recommend: {base:.0%} of the fit "
            "split's sentences are inaccurate, so flagging every one already reaches it"
        )
    else:
        t, held_out = r["threshold"], r["test"]
        reached = (
            "none reaches it"
            if t is None
            else f"p >= {t:.3f} (held out: precision {held_out['threshold_precision'] or 0:.3f}, "
            f"recall {held_out['threshold_recall'] or 0:.3f})"
        )
        chosen_on = "the out-of-fold probabilities" if held_out else "the fit split"
        lines.append(f"  threshold for precision {r['target_precision']:.2f} on {chosen_on}: {reached}")
    if r.get("operating_points"):
        if held_out:
            lines.append("  operating points (threshold, precision / recall, all on the out-of-fold probabilities):")
        else:
            lines.append(
                "  operating points (threshold chosen on the fit split; precision / recall fit, then held out):"
            )
        for row in r["operating_points"]:
            lines.append(f"    {row['target']:<14} {_point(row, held_out=bool(held_out))}")
    quality = r.get("quality") or {}
    if quality.get("auc_roc_interval"):
        low, high = quality["auc_roc_interval"]
        resampled = "answers" if held_out else "passages"
        lines.append(f"  held-out AUC-ROC 95% interval ({resampled} resampled): [{low:.1f}, {high:.1f}]")
    if quality.get("forced"):
        lines.append(f"  KEPT WITH --force although {'; '.join(quality['problems'])}")
    note = calibration.base_rate_note()
    if note:
        lines.append(f"  {note}")
    lines.append(f"{r['calls']} model calls, {r['cache_hits']} cache hits")
    return "\n".join(lines)


def _interval(bounds: list[float] | None, digits: int) -> str:
    return f" [{bounds[0]:.{digits}f}, {bounds[1]:.{digits}f}]" if bounds else ""


def _point(row: dict[str, Any], held_out: bool = False) -> str:
    """One operating point: fit then held out, or (``held_out``: cross-validated) the out-of-fold pair."""

    def num(x: float | None) -> str:
        return "  n/a" if x is None else f"{x:.3f}"

    test = f"{num(row['test_precision'])} / {num(row['test_recall'])}"
    shown = test if held_out else f"fit {num(row['fit_precision'])} / {num(row['fit_recall'])}   held out {test}"
    if row["everything"]:
        return f"flag everything (the base rate reaches it)   {shown}"
    if row["threshold"] is None:
        return "no threshold reaches it"
    return f"p >= {row['threshold']:.3f}   {shown}"


def labelled_file(data: str | None) -> bool:
    """Whether --data names a user's labelled answers (a file) rather than the benchmark data directory."""
    return data is not None and data.endswith((".csv", ".jsonl", ".json"))
