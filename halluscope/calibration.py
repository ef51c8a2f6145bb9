"""Calibrated risk: a probability that a unit is hallucinated, fitted on labelled data from a
method's raw scores (which are not probabilities, and differ in scale from method to method).

One method: isotonic regression (monotone, non-parametric) or Platt scaling (a logistic curve).
Several methods: their scores stacked by a cross-validated logistic regression. A ``Calibration``
is plain JSON (the fitted numbers, the methods, model and prompt versions it was fitted for, the
data split and its held-out report), so it is read back without unpickling anything, and a detector
refuses one fitted for another method, model or prompt version.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, Field, ValidationError

from halluscope.errors import ConfigError, redact_credentials
from halluscope.metrics import auc_pr, auc_roc
from halluscope.readers import read_file
from halluscope.results import DetectionResult, Unit

Kind = Literal["isotonic", "platt", "stacked"]
KINDS: tuple[str, ...] = ("isotonic", "platt")
ECE_BINS = 10
FORCED = " (forced)"  # ends the warning of a calibration applied to other settings
EXTREME_BASE_RATE = 0.1  # a fit where fewer than 10% (or more than 90%) of the units are hallucinated


def _setting(value: Any) -> Any:
    """A setting as compared: numbers given as text ('0.2,0.8', how a bracketed option or --opt gives a
    band) and as a list (how a run's params record it) are one setting."""
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, str) and "," in value:
        try:
            return [float(part) for part in value.split(",")]
        except ValueError:
            return value
    return value


class Calibration(BaseModel):
    """A fitted map from raw scores to P(hallucinated), with what it was fitted on."""

    kind: Kind
    methods: list[str]
    model: str | None = Field(description="the model spec the scores came from")
    prompts: list[str] = Field(description="id@version#hash of every prompt the scores used")
    params: dict[str, Any] = Field(
        description="isotonic: x, y; platt / stacked: coef, intercept; cap and range (finite raw scores) per method"
    )
    settings: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="per method, the settings that change its scores' scale (n, scoring, judge ...) as its "
        "results record them: a run with others is refused",
    )
    data: dict[str, Any] = Field(default_factory=dict, description="the benchmark and the fit / test split")
    report: dict[str, Any] = Field(default_factory=dict, description="held-out metrics of the fitted probability")
    prior: float | None = Field(
        None,
        description="the base rate its probabilities are corrected to (odds correction from the fit's own "
        "base rate, report.base_rate_fit); None: the fit's own",
    )
    threshold: float | None = Field(
        None,
        description="the probability at which a check draws its verdict unless given another (the operating "
        "point `choose` or `calibrate` chose, at the fit's base rate); None: p >= 0.5",
    )

    def problem(self) -> str | None:
        """Why the fitted numbers cannot be used (None when they can), naming the field: every number
        finite, an isotonic curve's x sorted and its y probabilities in [0, 1] of x's length, a logistic
        fit's one coefficient per method, each method's cap. Checked when a calibration is read or given,
        so a hand-edited or damaged file never turns a score into p=nan or p=7."""
        if not self.methods:
            return "methods is empty"
        if self.prior is not None and not 0 < self.prior < 1:
            return f"prior is {self.prior}, not a base rate in (0, 1)"
        if self.threshold is not None and not 0 <= self.threshold <= 1:
            return f"threshold is {self.threshold}, not a probability in [0, 1]"
        params = self.params

        def numbers(name: str, value: Any) -> str | None:
            values = value if isinstance(value, list) else [value]
            for i, v in enumerate(values):
                where = f"params.{name}[{i}]" if isinstance(value, list) else f"params.{name}"
                if isinstance(v, bool) or not isinstance(v, int | float):
                    return f"{where} is {v!r}, not a number"
                if not math.isfinite(v):
                    return f"{where} is {v}, not a finite number"
            return None

        need = ("x", "y", "cap") if self.kind == "isotonic" else ("coef", "intercept", "cap")
        missing = [k for k in need if k not in params]
        if missing:
            return f"params has no {', '.join(missing)} (a {self.kind} calibration needs {', '.join(need)})"
        if self.kind == "isotonic":
            x, y = params["x"], params["y"]
            if not isinstance(x, list) or not isinstance(y, list) or not x or len(x) != len(y):
                return "params.x and params.y must be lists of one length, at least 1"
            found = numbers("x", x) or numbers("y", y)
            if found:
                return found
            if any(b < a for a, b in zip(x, x[1:], strict=False)):
                return "params.x is not sorted (an isotonic curve's x rises)"
            outside = [i for i, v in enumerate(y) if not 0 <= v <= 1]
            if outside:
                return f"params.y[{outside[0]}] is {y[outside[0]]}, not a probability in [0, 1]"
            if len(self.methods) != 1:
                return f"an isotonic calibration has one method, not {len(self.methods)}"
        else:
            coef = params["coef"]
            if not isinstance(coef, list) or len(coef) != len(self.methods):
                shown = len(coef) if isinstance(coef, list) else repr(coef)
                return f"params.coef has {shown} coefficients for {len(self.methods)} method(s)"
            found = numbers("coef", coef) or numbers("intercept", params["intercept"])
            if found:
                return found
        caps = params["cap"]
        if not isinstance(caps, dict) or set(caps) != set(self.methods):
            return f"params.cap must give each method ({', '.join(self.methods)}) its cap"
        for method in self.methods:
            found = numbers(f"cap.{method}", caps[method])
            if found:
                return found
        return None

    def checked(self, where: str = "the calibration") -> Calibration:
        """This calibration, or one ConfigError naming ``where`` and the field that cannot be used."""
        found = self.problem()
        if found:
            raise ConfigError(f"{where} cannot be used: {found}")
        return self

    def probabilities(self, scores: Mapping[str, Sequence[float]]) -> np.ndarray:
        """Each sentence's probability, from each method's scores of the same sentences in one order."""
        rows = zip(*(scores[m] for m in self.methods), strict=True)
        return np.array([self.probability(dict(zip(self.methods, row, strict=True))) for row in rows])

    def probability(self, scores: Mapping[str, float | None]) -> float | None:
        """P(hallucinated) from each method's raw score (None when a method has no score)."""
        values = []
        for method in self.methods:
            score = scores.get(method)
            if score is None:
                return None
            values.append(self.params["cap"][method] if score == math.inf else score)  # an unseen unigram
        x = np.array(values, dtype=np.float64)
        if self.kind == "isotonic":
            return self._at_prior(float(np.interp(x[0], self.params["x"], self.params["y"])))
        z = float(np.dot(self.params["coef"], x) + self.params["intercept"])
        return self._at_prior(1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z)))

    def with_prior(self, prior: float | None) -> Calibration:
        """This calibration with its probabilities corrected to a user's own base rate ``prior`` (the share
        of hallucinated units where it is used): the fitted odds times prior odds over the fit's base-rate
        odds. A calibration that records no base rate cannot be corrected."""
        if prior is None:
            return self.model_copy(update={"prior": None})
        if not isinstance(prior, int | float) or not 0 < prior < 1:
            raise ConfigError(f"prior is the share of hallucinated units where you use it, in (0, 1); got {prior!r}")
        if self.base_rate() is None:
            raise ConfigError(
                "this calibration records no base rate (report.base_rate_fit): fit it again to use a prior"
            )
        return self.model_copy(update={"prior": float(prior)})

    def decides_at(self) -> float | None:
        """The threshold a check decides at by default: the fitted operating point, moved with the
        probabilities where a prior corrects them (the same units stay flagged); None: p >= 0.5."""
        return None if self.threshold is None else self._at_prior(self.threshold)

    def _at_prior(self, p: float) -> float:
        base = self.base_rate()
        if self.prior is None or base is None or p in (0.0, 1.0) or base in (0.0, 1.0):
            return p
        odds = p / (1 - p) * (self.prior / (1 - self.prior)) / (base / (1 - base))
        return odds / (1 + odds)

    def check(self, method: str, model: str | None) -> None:
        """Refuse use with another method or model than it was fitted for (a preset, as in
        'selfcheck-prompt:prob', is its method with the preset's options: its settings say which; so is one
        with its own options, as in 'grounded[model=nli:DIR]')."""
        if [m.partition("[")[0].partition(":")[0] for m in self.methods] != [method]:
            raise ConfigError(f"this calibration was fitted for {'+'.join(self.methods)}, not {method}")
        if self.model is not None and model is not None and model != self.model:
            raise ConfigError(f"this calibration was fitted on {self.model}'s scores, not {model}'s")

    def check_prompts(self, used: Sequence[str]) -> None:
        """Refuse scores made with another version of a prompt the calibration was fitted with (a
        prompt it never saw, such as SelfCheck's regeneration where the benchmark gave samples, is
        not a version change)."""
        fitted = {ref.split("@")[0]: ref for ref in self.prompts}
        other = sorted(ref for ref in used if ref.split("@")[0] in fitted and ref != fitted[ref.split("@")[0]])
        if other:
            raise ConfigError(
                f"this calibration was fitted with {', '.join(self.prompts) or 'no prompt'}; "
                f"the scores used {', '.join(other)}: fit it again for these prompt versions"
            )

    def mismatches(self, used: Mapping[str, Any], method: str | None = None) -> dict[str, tuple[Any, Any]]:
        """The settings a run of ``method`` (default: the one method) used, as its result's
        ``meta.params`` or a detector's options name them, that differ from those the calibration was
        fitted with: {setting: (fitted, used)}; a setting ``used`` does not name is not compared."""
        fitted = self.settings.get(method or self.methods[0], {})
        return {k: (v, used[k]) for k, v in fitted.items() if k in used and _setting(used[k]) != _setting(v)}

    def mismatch(self, used: Mapping[str, Any], method: str | None = None) -> str | None:
        """One sentence naming the settings ``used`` that the calibration was not fitted with (None: none)."""
        method = method or self.methods[0]
        found = self.mismatches(used, method)
        if not found:
            return None
        fitted = ", ".join(f"{k}={v[0]!r}" for k, v in found.items())
        other = ", ".join(f"{k}={v[1]!r}" for k, v in found.items())
        return (
            f"this calibration of {method} was fitted on scores made with {fitted}, and these are "
            f"made with {other}: another setting changes the scores' scale, so its probabilities would not "
            "be measured ones"
        )

    def outside(self, scores: Sequence[float | None]) -> tuple[int, tuple[float, float] | None]:
        """How many finite raw scores of a one-method calibration lie outside the range it was fitted on,
        and that range (a probability there is the fit's edge value, not a measured one)."""
        fitted = (self.params.get("range") or {}).get(self.methods[0])
        if fitted is None:
            return 0, None
        low, high = fitted
        count = sum(1 for s in scores if s is not None and math.isfinite(s) and not low <= s <= high)
        return count, (low, high)

    def apply(self, result: DetectionResult, force: bool = False) -> DetectionResult:
        """Each unit's probability, when the run's settings and prompts are those it was fitted with
        (another setting: refused, or with ``force`` applied and said); what a reader should know (forced
        settings, scores outside the fitted range, an extreme base rate) goes to ``meta.warnings``."""
        self.check_prompts(result.meta.prompts)
        notes = (
            self.settings_note(result.meta.params, force),
            self.outside_note(result.units),
            self.base_rate_note(),
            self.forced_note(),
        )
        result.meta.warnings += [note for note in notes if note]
        result.evidence["calibration"] = {"fitted_base_rate": self.base_rate(), "prior": self.prior}
        for unit in result.units:
            unit.probability = self.probability({self.methods[0]: fitted_score(unit)})
        return result

    def settings_note(self, used: Mapping[str, Any], force: bool) -> str | None:
        """Refuse settings it was not fitted with, unless ``force``: then the warning to give (it ends
        with FORCED)."""
        problem = self.mismatch(used)
        if problem is None:
            return None
        if not force:
            raise ConfigError(
                f"{problem}; fit it again with these settings, or force it (force_calibration=True)",
                settings=("force_calibration=True",),
            )
        return problem + FORCED

    def outside_note(self, units: Iterable[Unit]) -> str | None:
        """One sentence on the units whose raw score lies outside the range it was fitted on."""
        scores = [fitted_score(u) for u in units]
        count, span = self.outside(scores)
        if not count or span is None:
            return None
        return (
            f"{count} of {len(scores)} units scored outside the range the calibration was fitted on "
            f"({span[0]:.4g} to {span[1]:.4g}): their probability is the fit's edge value, not a measured one"
        )

    def base_rate(self) -> float | None:
        """The share of hallucinated units in the split it was fitted on (None in an older file)."""
        value = self.report.get("base_rate_fit")
        return float(value) if isinstance(value, int | float) else None

    def base_rate_note(self) -> str | None:
        """What a reader of its probabilities should know when it was fitted at an extreme base rate
        (under 10% or over 90% hallucinated): its probabilities carry that rate."""
        base = self.base_rate()
        if base is None or EXTREME_BASE_RATE <= base <= 1 - EXTREME_BASE_RATE:
            return None
        return (
            f"this calibration was fitted where {base:.0%} of the units were hallucinated: its probabilities "
            "carry that base rate, so a probability near it says little about a unit"
        )

    def forced_note(self) -> str | None:
        """Its own held-out check failed and it was kept with --force: why."""
        quality = self.report.get("quality") or {}
        if not quality.get("forced"):
            return None
        return f"this calibration was kept with --force although {'; '.join(quality.get('problems') or [])}"

    def save(self, path: str | Path) -> Path:
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(redact_credentials(self.model_dump_json(indent=2)) + "\n", encoding="utf-8")
        return out

    @classmethod
    def load(cls, path: str | Path) -> Calibration:
        text = read_file(str(path), "the calibration file")  # binary, non-UTF-8 or missing: one line
        try:
            found = cls.model_validate_json(text)
        except (ValidationError, json.JSONDecodeError) as exc:
            first = exc.errors()[0] if isinstance(exc, ValidationError) else None
            why = f"{'.'.join(map(str, first['loc']))}: {first['msg']}" if first else str(exc)
            raise ConfigError(f"{path} is not a halluscope calibration file ({why})") from exc
        return found.checked(str(path))


def fitted_score(unit: Unit) -> float | None:
    """A unit's score as calibrations are fitted on it: SelfCheck-Unigram's unseen token (reported
    as no score) is +inf, as the benchmark keeps it."""
    return math.inf if unit.score is None and unit.evidence.get("unseen_token") else unit.score


def _features(scores: Mapping[str, Sequence[float]], methods: Sequence[str]) -> tuple[np.ndarray, dict[str, float]]:
    """The score matrix (rows: units) with +inf (SelfCheck-Unigram's unseen token) replaced by a cap
    above every finite score, the same cap a later probability uses."""
    columns, caps = [], {}
    for m in methods:
        col = np.asarray(scores[m], dtype=np.float64)
        finite = col[np.isfinite(col)]
        caps[m] = float(finite.max() + 1.0) if finite.size else 1.0
        columns.append(np.where(col == math.inf, caps[m], col))
    return np.column_stack(columns), caps


def fit(
    scores: Mapping[str, Sequence[float]],
    labels: Sequence[bool],
    kind: str = "isotonic",
    seed: int = 0,
) -> tuple[Kind, dict[str, Any]]:
    """Fit P(label) from one method's scores (``kind`` isotonic or platt) or several (stacked)."""
    from sklearn.isotonic import IsotonicRegression
    from sklearn.linear_model import LogisticRegression, LogisticRegressionCV

    methods = list(scores)
    y = np.asarray(labels, dtype=bool)
    if not y.any() or y.all():
        raise ConfigError("calibration needs both hallucinated and accurate units in the fit split")
    x, caps = _features(scores, methods)
    fitted = {m: [float(v) for v in np.asarray(scores[m], dtype=np.float64)] for m in methods}
    finite = {m: [v for v in fitted[m] if math.isfinite(v)] for m in methods}
    ranges = {m: [min(finite[m]), max(finite[m])] for m in methods if finite[m]}
    if len(methods) > 1:
        folds = int(min(5, y.sum(), (~y).sum()))
        model = LogisticRegressionCV(  # L2, its strength chosen by cross-validated log-loss
            cv=max(folds, 2), scoring="neg_log_loss", l1_ratios=(0.0,), use_legacy_attributes=False, random_state=seed
        ).fit(x, y)
        params = {"coef": model.coef_[0].tolist(), "intercept": float(model.intercept_[0]), "cap": caps}
        return "stacked", {**params, "range": ranges}
    if kind == "isotonic":
        iso = IsotonicRegression(y_min=0.0, y_max=1.0, out_of_bounds="clip").fit(x[:, 0], y)
        params = {"x": iso.X_thresholds_.tolist(), "y": iso.y_thresholds_.tolist(), "cap": caps}
        return "isotonic", {**params, "range": ranges}
    if kind == "platt":
        platt = LogisticRegression().fit(x, y)
        params = {"coef": platt.coef_[0].tolist(), "intercept": float(platt.intercept_[0]), "cap": caps}
        return "platt", {**params, "range": ranges}
    raise ConfigError(f"unknown calibration kind {kind!r}; available: {', '.join(KINDS)} (several methods: stacked)")


def brier(y: np.ndarray, p: np.ndarray) -> float:
    """Mean squared error of the probabilities against the 0/1 labels."""
    return float(np.mean((p - y.astype(np.float64)) ** 2))


def expected_calibration_error(y: np.ndarray, p: np.ndarray, bins: int = ECE_BINS) -> float:
    """ECE: over equal-width probability bins, the share of units in the bin times |observed rate -
    mean probability| (a probability of 1.0 falls in the last bin)."""
    which = np.minimum((p * bins).astype(int), bins - 1)
    total = 0.0
    for b in range(bins):
        mask = which == b
        if mask.any():
            total += mask.mean() * abs(float(y[mask].mean()) - float(p[mask].mean()))
    return total


def threshold_for_precision(y: np.ndarray, p: np.ndarray, target: float) -> float | None:
    """The lowest probability threshold whose flagged units (p >= t) reach ``target`` precision
    (None when no threshold does)."""
    for t in np.unique(p):
        flagged = p >= t
        if flagged.any() and float(y[flagged].mean()) >= target:
            return float(t)
    return None


def threshold_for_recall(y: np.ndarray, p: np.ndarray, target: float) -> float | None:
    """The highest probability threshold whose flagged units (p >= t) find ``target`` of the positives
    (None without a positive); 0/1 labels are read as booleans (as integers they would index)."""
    y = np.asarray(y, dtype=bool)
    if not y.any():
        return None
    for t in np.unique(p)[::-1]:
        if float((p[y] >= t).mean()) >= target:
            return float(t)
    return None


def precision_recall_at(y: np.ndarray, p: np.ndarray, threshold: float | None) -> tuple[float | None, float | None]:
    """Precision and recall of flagging p >= ``threshold`` (None where undefined); 0/1 labels are read
    as booleans."""
    if threshold is None:
        return None, None
    y, flagged = np.asarray(y, dtype=bool), np.asarray(p) >= threshold
    precision = float(y[flagged].mean()) if flagged.any() else None
    return precision, (float(flagged[y].mean()) if y.any() else None)


def evaluate(y: np.ndarray, p: np.ndarray, threshold: float | None) -> dict[str, Any]:
    """Held-out numbers of fitted probabilities: ranking (AUC-ROC, AUC-PR, x100) and calibration."""
    flagged = p >= threshold if threshold is not None else np.zeros_like(y)
    return {
        "units": int(y.size),
        "hallucinated": int(y.sum()),
        "auc_roc": auc_roc(y, p),
        "auc_pr": auc_pr(y, p),
        "brier": brier(y, p),
        "ece": expected_calibration_error(y, p),
        "threshold_precision": float(y[flagged].mean()) if flagged.any() else None,
        "threshold_recall": float(flagged[y].mean()) if y.any() else None,
    }


def reliability_diagram(path: Path, y: np.ndarray, p: np.ndarray, title: str) -> None:
    """Observed hallucination rate against mean predicted probability per bin, with bin sizes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    which = np.minimum((p * ECE_BINS).astype(int), ECE_BINS - 1)
    bins = [b for b in range(ECE_BINS) if (which == b).any()]
    mean_p = [float(p[which == b].mean()) for b in bins]
    rate = [float(y[which == b].mean()) for b in bins]
    fig, ax = plt.subplots(figsize=(4.8, 4.5), dpi=120)
    ax.plot([0, 1], [0, 1], color="grey", linestyle=":", label="perfect")
    ax.plot(mean_p, rate, "o-", label="fitted")
    for mp, r, b in zip(mean_p, rate, bins, strict=True):
        ax.annotate(str(int((which == b).sum())), (mp, r), textcoords="offset points", xytext=(4, -10), fontsize=7)
    ax.set_xlabel("predicted probability")
    ax.set_ylabel("observed hallucination rate")
    ax.set_title(title)
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
