"""Linear probes on a model's hidden states (Kossen et al. 2024, "Semantic Entropy Probes", arXiv
2406.15927): logistic regression on standardised states predicts, from one forward pass, what
otherwise costs samples or labels.

Four kinds, by what the label is and where the probe reads:
- ``sentence``: a sentence is inaccurate (WikiBio's annotations, TruthfulQA's incorrect answers, a
  user's labelled file); read at each sentence's last token;
- ``grounded``: a sentence is not supported by the context given with the answer (WikiBio's sentences
  against their Wikipedia text, RTE's hypotheses against their premises, a labelled file with a
  context); read at each sentence's last token, the answer read after the context in one forward pass;
- ``accuracy``: a short answer is wrong (against a dataset's gold answers); read at the question's
  last token (before answering, the paper's TBG) and the answer's last token (its SLT);
- ``sep``: the question's semantic entropy is high, split into high and low as the paper does
  (``best_split``); no gold labels; read where ``accuracy`` reads.

A ``Probe`` is plain JSON (weights, bias, the standardisation, layer, positions, the model and the
hash of its file, the prompt version, the data, base rate and validation metrics), never a pickle,
and it refuses another model, file or prompt version with one line, as a calibration does.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, Field, ValidationError

from halluscope.errors import ConfigError
from halluscope.metrics import auc_pr, auc_roc
from halluscope.readers import read_file

Kind = Literal["sentence", "grounded", "accuracy", "sep"]
KINDS: tuple[str, ...] = ("sentence", "grounded", "accuracy", "sep")
SENTENCE_KINDS = ("sentence", "grounded")  # one row a sentence; the others one row an answer
# where each kind reads: a sentence's last token, or the question's and the answer's (concatenated)
POSITIONS: dict[str, tuple[str, ...]] = {
    "sentence": ("sentence",),
    "grounded": ("sentence",),
    "accuracy": ("question", "answer"),
    "sep": ("question", "answer"),
}
VALIDATION_SHARE = 0.2  # of the fit's groups (answers, questions), held out to choose the layer
SPLITS = 100  # thresholds the SE binarisation tries, from ~0 to the largest entropy (the authors' notebook)
C = 1.0  # scikit-learn's default inverse regularisation


class Probe(BaseModel):
    """A fitted linear probe and what it was fitted on."""

    kind: Kind
    model: str = Field(description="the model spec that read the texts (local:... or transformers:...)")
    model_file: str = Field(description="sha256 of the model's weights as read (a GGUF file, a directory's files)")
    layer: int = Field(description="the hidden layer read (0: the embeddings; the model's count: the last)")
    positions: list[str] = Field(description="where the states are read, concatenated in this order")
    prompt: str | None = Field(description="id@version#hash of the prompt that frames the question; None: none")
    weights: list[float]
    bias: float
    mean: list[float] = Field(description="the standardisation: each feature's mean over the fit")
    scale: list[float] = Field(description="and its standard deviation (1 where it is constant)")
    base_rate: float = Field(description="the share of positive labels (hallucinated, wrong, high SE) in the fit")
    threshold: float | None = Field(None, description="sep: the semantic entropy at or above which a label is high")
    data: dict[str, Any] = Field(default_factory=dict, description="what it was fitted on: source, items, counts")
    validation: dict[str, Any] = Field(default_factory=dict, description="held-out metrics, per layer tried")

    def problem(self) -> str | None:
        """Why its numbers cannot be used (None when they can)."""
        width = len(self.weights)
        if width == 0:
            return "weights is empty"
        if len(self.mean) != width or len(self.scale) != width:
            return f"weights, mean and scale must have one length (got {width}, {len(self.mean)}, {len(self.scale)})"
        numbers = [*self.weights, *self.mean, *self.scale, self.bias]
        if not all(math.isfinite(v) for v in numbers):
            return "weights, bias, mean and scale must be finite numbers"
        if any(v <= 0 for v in self.scale):
            return "scale must be positive"
        if list(self.positions) != list(POSITIONS[self.kind]):
            return f"a {self.kind} probe reads at {', '.join(POSITIONS[self.kind])}, not {', '.join(self.positions)}"
        return None

    def checked(self, where: str = "the probe") -> Probe:
        found = self.problem()
        if found:
            raise ConfigError(f"{where} cannot be used: {found}")
        return self

    def check(self, model: str, model_file: str, prompt: str | None) -> None:
        """Refuse other weights (another model, or another file of it; a path to the same file passes)
        or another version of the framing prompt."""
        if model_file != self.model_file:
            other = "another file of it" if model == self.model else model
            raise ConfigError(
                f"this probe was fitted on {self.model}'s hidden states (sha256 {self.model_file[:12]}), not "
                f"{other} (sha256 {model_file[:12]}): fit it again for this model"
            )
        if prompt != self.prompt:
            raise ConfigError(f"this probe was fitted with prompt {self.prompt}, not {prompt}: fit it again")

    def check_width(self, width: int) -> None:
        if width != len(self.weights):
            raise ConfigError(
                f"this probe reads {len(self.weights)} numbers at layer {self.layer}, the model gave {width}: "
                "it was fitted on another model or layer"
            )

    def probabilities(self, features: np.ndarray) -> np.ndarray:
        """P(positive) for each row of features (the states at its positions, concatenated)."""
        x = np.atleast_2d(np.asarray(features, dtype=np.float64))
        self.check_width(x.shape[1])
        z = ((x - np.asarray(self.mean)) / np.asarray(self.scale)) @ np.asarray(self.weights) + self.bias
        return np.asarray(1.0 / (1.0 + np.exp(-np.clip(z, -500, 500))))

    def digest(self) -> str:
        """A short hash of everything it is: what a result and a calibration fitted on its scores name."""
        return hashlib.sha256(self.model_dump_json().encode("utf-8")).hexdigest()[:16]

    def save(self, path: str | Path) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(self.model_dump_json(indent=1) + "\n", encoding="utf-8")


def load_probe(path: str | Path) -> Probe:
    """A probe from its JSON file: read as JSON, checked, never unpickled."""
    text = read_file(str(path), "probe")
    try:
        found = Probe.model_validate(json.loads(text))
    except RecursionError:
        raise ConfigError(
            f"{path} is not a probe written by `halluscope probe fit`: its JSON nests too deeply"
        ) from None
    except (json.JSONDecodeError, ValidationError) as exc:
        first = str(exc).splitlines()[0]
        raise ConfigError(f"{path} is not a probe written by `halluscope probe fit`: {first}") from exc
    return found.checked(str(path))


def best_split(entropies: Sequence[float]) -> float:
    """The paper's binarisation of semantic entropy (Section 4): of ``SPLITS`` thresholds from ~0 to the
    largest entropy, the one whose low and high groups lie closest to their own means (least summed
    squared error); a label is high at or above it."""
    values = np.asarray(entropies, dtype=np.float64)
    if values.size == 0 or not np.all(np.isfinite(values)):
        raise ConfigError("the semantic entropies to split must be finite numbers, and at least one")
    best, best_error = 0.0, math.inf
    for split in np.linspace(1e-10, float(values.max()), SPLITS):
        low, high = values[values < split], values[values >= split]
        error = sum(float(((g - g.mean()) ** 2).sum()) for g in (low, high) if g.size)
        if error < best_error:
            best, best_error = float(split), error
    return best


def validation_groups(groups: Sequence[str], share: float = VALIDATION_SHARE, seed: int = 0) -> np.ndarray:
    """Whether each row's group (its answer or question) is held out to choose the layer: a seeded draw
    of ``share`` of the groups, so a passage's sentences stay together."""
    names = sorted(set(groups))
    rng = np.random.default_rng(seed)
    held = set(rng.choice(names, size=max(1, round(share * len(names))), replace=False).tolist())
    return np.array([g in held for g in groups])


def _fitted(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """(weights, mean, scale, bias) of a logistic regression on standardised x."""
    from sklearn.linear_model import LogisticRegression

    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale[scale == 0] = 1.0
    model = LogisticRegression(C=C, max_iter=2000)
    model.fit((x - mean) / scale, y)
    return model.coef_[0], mean, scale, float(model.intercept_[0])


def _scores(x: np.ndarray, fitted: tuple[np.ndarray, np.ndarray, np.ndarray, float]) -> np.ndarray:
    weights, mean, scale, bias = fitted
    return np.asarray(((x - mean) / scale) @ weights + bias)


def fit_probe(
    features: Mapping[int, np.ndarray],
    labels: Sequence[int],
    groups: Sequence[str],
    *,
    kind: Kind,
    model: str,
    model_file: str,
    prompt: str | None,
    data: Mapping[str, Any],
    threshold: float | None = None,
) -> Probe:
    """A probe: at each layer of ``features`` (rows: the states at its positions, concatenated), fitted
    on the groups not held out and scored on those held out (AUC-ROC, AUC-PR); the best layer is
    refitted on every row. One layer given is fitted on every row, with its held-out metrics still
    reported."""
    y = np.asarray(labels, dtype=int)
    if len(set(y.tolist())) < 2:
        raise ConfigError(
            f"a probe needs both labels among its {len(y)} rows; these are all {int(y[0]) if len(y) else '-'}"
        )
    held = validation_groups(groups)
    if len(set(y[~held].tolist())) < 2:
        raise ConfigError("the rows left after holding out a validation share have one label only: give more data")
    per_layer: dict[str, dict[str, Any]] = {}
    for layer, x in sorted(features.items()):
        x = np.asarray(x, dtype=np.float64)
        if x.shape[0] != len(y):
            raise ConfigError(f"layer {layer} has {x.shape[0]} rows for {len(y)} labels")
        scores = _scores(x[held], _fitted(x[~held], y[~held]))
        per_layer[str(layer)] = {"auc_roc": auc_roc(y[held], scores), "auc_pr": auc_pr(y[held], scores)}
    chosen = max(features, key=lambda layer: per_layer[str(layer)]["auc_roc"] or -1.0)
    weights, mean, scale, bias = _fitted(np.asarray(features[chosen], dtype=np.float64), y)
    return Probe(
        kind=kind,
        model=model,
        model_file=model_file,
        layer=int(chosen),
        positions=list(POSITIONS[kind]),
        prompt=prompt,
        weights=weights.tolist(),
        bias=bias,
        mean=mean.tolist(),
        scale=scale.tolist(),
        base_rate=float(y.mean()),
        threshold=threshold,
        data={**data, "rows": len(y), "groups": len(set(groups))},
        validation={
            "share": VALIDATION_SHARE,
            "rows": int(held.sum()),
            "groups": len({g for g, h in zip(groups, held, strict=True) if h}),
            "per_layer": per_layer,
            "chosen": int(chosen),
            "rule": "each layer fitted on the groups not held out, scored on those held out; the best AUC-ROC "
            "refitted on all rows",
        },
    ).checked("the fitted probe")
