"""Fitting a probe (`halluscope probe fit`): the labelled examples of a kind, their hidden states read
through the gateway (cached: a refit, another layer asked before, or another probe reads them back),
and the logistic regression of ``halluscope.probing``.

Examples by kind and data:
- ``sentence``: WikiBio's passages (a sentence labelled minor or major inaccurate is 1), TruthfulQA's
  correct (0) and incorrect (1) answers as statements read after their question, or a labelled file
  (``halluscope.labelled``: per-sentence ``labels``, or one ``label`` per one-sentence answer);
- ``grounded``: the same sentences read after the context they should rest on: WikiBio's passages
  after their person's Wikipedia text (and the passage's prompt), RTE's training hypotheses after their
  premise (not entailed: 1), or a labelled file with a ``context`` (as `bench mine` reads it);
- ``accuracy``: TriviaQA's or SQuAD's questions, answered at temperature 0.1 by the answering model
  (the QA bench's graded answer, the same cached call) and graded against the gold answers, or a
  labelled file of question, text (the answer) and label (1: wrong);
- ``sep``: those questions' semantic entropy (the ``semantic-entropy`` method, its samples and judge),
  split into high and low by ``probing.best_split``; no gold answers needed, so a file of questions
  (one a line, or a labelled file's question column) will do.
Everything runs through the cache: an interrupted fit resumes where it stopped.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from halluscope.backends import readings
from halluscope.backends.budget import MAX_CALLS, BudgetError
from halluscope.backends.gateway import CallStats, Gateway
from halluscope.backends.logprobs import LogProbModel
from halluscope.backends.models import ModelLike, model_name
from halluscope.bench.grounded import UNSUPPORTED, load_rte
from halluscope.bench.papers.qa import GREEDY_TEMPERATURE, is_correct, load_qa
from halluscope.bench.papers.truthfulqa import load_truthfulqa
from halluscope.bench.wikibio import load_wikibio
from halluscope.errors import ConfigError, HalluscopeError
from halluscope.labelled import load_labelled
from halluscope.methods import probe
from halluscope.probing import SENTENCE_KINDS, Kind, Probe, best_split, fit_probe, validation_groups
from halluscope.prompts import short_answer
from halluscope.readers import read_lines
from halluscope.runtime import registry
from halluscope.runtime.contract import start

SENTENCE_DATA = ("wikibio", "truthfulqa")
GROUNDED_DATA = ("wikibio", "rte")
QA_DATA = ("triviaqa", "squad")


@dataclass(frozen=True)
class Example:
    """One text a probe reads: its group (what validation holds out together), the question before it,
    its sentences (a sentence probe's units) and one label per unit; ``entropy`` for a sep probe, the
    ``context`` documents a grounded probe reads first."""

    group: str
    text: str
    question: str | None
    sentences: tuple[str, ...]
    labels: tuple[int, ...]
    entropy: float | None = None
    context: tuple[str, ...] = ()


def wikibio_examples(items: range | None, data_dir: str | Path | None, grounded: bool = False) -> list[Example]:
    """WikiBio's passages (a sentence labelled minor or major inaccurate is 1), after their prompt; for a
    grounded probe, after the person's Wikipedia text too."""
    return [
        Example(
            f"passage {p.index}",
            p.text,
            p.prompt,
            tuple(p.sentences),
            tuple(int(x != "accurate") for x in p.labels),
            context=(p.wiki_text,) if grounded else (),
        )
        for p in load_wikibio(data_dir)
        if items is None or p.index in items
    ]


def sentence_examples(data: str, items: range | None, data_dir: str | Path | None) -> list[Example]:
    """A sentence probe's examples from WikiBio, TruthfulQA or a labelled file."""
    if data == "wikibio":
        return wikibio_examples(items, data_dir)
    if data == "truthfulqa":
        found = []
        for q in load_truthfulqa(data_dir):
            if items is not None and q.index not in items:
                continue
            wrong = set(q.incorrect)
            found += [
                Example(f"question {q.index}", a, q.question, (a.strip(),), (int(a in wrong),)) for a in q.labelled
            ]
        return found
    rows = load_labelled(data).rows
    examples = []
    for row in rows:
        text = str(row.inputs.get("text", ""))
        question = row.inputs.get("question")
        if row.labels is not None:
            examples.append(Example(row.id, text, question, tuple(row.units or ()), row.labels))
        else:  # one label for the answer: read as one unit
            examples.append(Example(row.id, text, question, (text.strip(),), (row.answer_label,)))
    return [e for i, e in enumerate(examples) if items is None or i in items]


def grounded_examples(data: str, items: range | None, data_dir: str | Path | None) -> list[Example]:
    """A grounded probe's examples: sentences with the context they should rest on, from WikiBio (its
    Wikipedia text), RTE's training split (one hypothesis a premise) or a labelled file's context."""
    if data == "wikibio":
        return wikibio_examples(items, data_dir, grounded=True)
    if data == "rte":
        return [
            Example(
                f"pair {p.index}",
                p.hypothesis,
                None,
                (p.hypothesis,),
                (int(p.label in UNSUPPORTED),),
                context=(p.premise,),
            )
            for p in load_rte(data_dir, split="train")
            if items is None or p.index in items
        ]
    examples = []
    for i, row in enumerate(load_labelled(data).rows):
        if items is not None and i not in items:
            continue
        context, units = row.inputs.get("context"), row.units
        if not context or units is None or row.labels is None:
            raise ConfigError(f"{data}, answer {row.id}: a grounded probe fits on a context and a label per sentence")
        documents = (context,) if isinstance(context, str) else tuple(str(c) for c in context)
        question = row.inputs.get("question")
        text = str(row.inputs.get("text", ""))
        examples.append(Example(row.id, text, question, tuple(units), row.labels, context=documents))
    return examples


def _questions(data: str, items: range | None, data_dir: str | Path | None) -> list[tuple[str, str, list[str] | None]]:
    """(group, question, gold answers or None) for the accuracy and sep probes."""
    if data in QA_DATA:
        return [
            (f"question {q.index}", q.question, q.answers)
            for q in load_qa(data, data_dir)
            if items is None or q.index in items
        ]
    if Path(data).suffix == ".txt":
        lines = read_lines(data, "data")
        return [(f"question {i}", line, None) for i, line in enumerate(lines) if items is None or i in items]
    rows = load_labelled(data).rows
    return [(row.id, str(row.inputs["question"]), None) for i, row in enumerate(rows) if items is None or i in items]


def _labelled_examples(data: str, items: range | None) -> list[Example]:
    """An accuracy probe's examples from a labelled file: each answer with its own label."""
    rows = load_labelled(data).rows
    return [
        Example(
            row.id,
            str(row.inputs["text"]),
            str(row.inputs["question"]),
            (str(row.inputs["text"]),),
            (row.answer_label,),
        )
        for i, row in enumerate(rows)
        if items is None or i in items
    ]


def answered_examples(
    kind: Kind,
    data: str,
    items: range | None,
    data_dir: str | Path | None,
    *,
    answerer: ModelLike,
    gateway: Gateway,
    stats: CallStats,
    n: int,
    judge: Any,
    progress: Callable[[Iterable[Any]], Iterable[Any]],
) -> list[Example]:
    """An accuracy or sep probe's examples: each question's answer at temperature 0.1 (graded against the
    gold answers for accuracy), and for sep its semantic entropy of ``n`` sampled answers."""
    if kind == "accuracy" and data not in QA_DATA:
        return _labelled_examples(data, items)
    entropy = None
    if kind == "sep":
        semantic_entropy = registry.get("semantic-entropy")
        options = semantic_entropy.options(model=answerer, judge=judge, n=n)
        entropy = semantic_entropy.scorer(options, start(gateway, stats))
    examples = []
    questions = _questions(data, items, data_dir)
    if kind == "accuracy" and any(gold is None for _, _, gold in questions):
        raise ConfigError(
            f"an accuracy probe needs gold answers: {data} has none (use triviaqa, squad or a labelled file)"
        )
    for group, question, gold in progress(questions):
        try:
            reply = gateway.call(
                answerer,
                short_answer.ANSWER,
                {"question": question},
                stats=stats,
                temperature=GREEDY_TEMPERATURE,
                max_tokens=short_answer.ANSWER_MAX_TOKENS,
                seed=0,
            )
            answer = reply.text.strip()
            if kind == "accuracy":
                assert gold is not None
                examples.append(Example(group, answer, question, (answer,), (int(not is_correct(answer, gold)),)))
            else:
                assert entropy is not None
                score = entropy(registry.get("semantic-entropy").inputs(question=question)).units[0].score
                examples.append(Example(group, answer, question, (answer,), (), entropy=float(score or 0.0)))
        except BudgetError:  # the run's limit holds for every question alike: the fit cannot go on
            raise
        except HalluscopeError as exc:  # a question whose calls failed for good: left out, counted, said
            warnings.warn(f"{group} left out of the fit: {exc}", stacklevel=2)
            examples.append(Example(group, "", question, (), ()))
    return examples


def read_states(
    examples: Sequence[Example],
    kind: Kind,
    reader: LogProbModel,
    layers: Sequence[int],
    gateway: Gateway,
    stats: CallStats,
    progress: Callable[[Iterable[Any]], Iterable[Any]],
) -> tuple[dict[int, np.ndarray], list[int], list[str], int]:
    """Each example's rows at each layer (a sentence's state, or the question's and answer's side by
    side), their labels and groups, and how many sentences were not found in their text (left out)."""
    rows: dict[int, list[np.ndarray]] = {layer: [] for layer in layers}
    labels: list[int] = []
    groups: list[str] = []
    missing = 0
    for ex in progress(examples):
        before, _ = probe.framing(kind, reader, ex.question, gateway, ex.context)
        if kind in SENTENCE_KINDS:
            ends = probe.sentence_ends(ex.text, ex.sentences)
            kept = [(end, label) for end, label in zip(ends, ex.labels, strict=True) if end is not None]
            missing += len(ends) - len(kept)
            if not kept:
                continue
            wanted = [end for end, _ in kept]
            ex_labels = [label for _, label in kept]
        else:
            if not ex.text:
                missing += 1
                continue
            wanted, ex_labels = [0, len(ex.text)], list(ex.labels)
        states = readings.hidden_states(gateway, reader, before, ex.text, wanted, layers, stats)
        for layer in layers:
            rows[layer].append(probe.features(kind, states, layer))
        labels += ex_labels
        groups += [ex.group] * len(ex_labels)
    return {layer: np.concatenate(found) for layer, found in rows.items()}, labels, groups, missing


def default_layers(reader: LogProbModel) -> list[int]:
    """The layers a fit tries when none is given: every fourth from the first quarter and the last (a
    reader that gives its last only, llama.cpp's: that one)."""
    top = reader.n_layers
    if not reader.any_layer:
        return [top]
    return sorted({*range(max(1, top // 4), top + 1, 4), top})


def check_data(kind: Kind, data: str) -> None:
    """Refuse data that cannot give a probe of this kind its examples, naming the kind that fits it."""
    if kind in SENTENCE_KINDS and data in QA_DATA:
        raise ConfigError(f"{data} has short answers, not labelled sentences: fit an accuracy or sep probe on it")
    if kind == "grounded" and data == "truthfulqa":
        raise ConfigError("truthfulqa has no context to ground its answers on: fit a sentence probe on it")
    if kind == "sentence" and data == "rte":
        raise ConfigError("rte's hypotheses are checked against their premises: fit a grounded probe on it")
    if kind not in SENTENCE_KINDS and data in (*SENTENCE_DATA, *GROUNDED_DATA):
        fits = "grounded" if data == "rte" else "sentence"
        raise ConfigError(f"{data} labels sentences: fit a {fits} probe on it (an {kind} probe reads questions)")


def examples_of(
    kind: Kind, data: str, items: range | None, data_dir: str | Path | None, **answering: Any
) -> list[Example]:
    """A probe's examples by kind: labelled sentences (with their context for a grounded probe), or
    questions answered and graded or sampled (``answering``: ``answered_examples``' keywords)."""
    if kind == "sentence":
        return sentence_examples(data, items, data_dir)
    if kind == "grounded":
        return grounded_examples(data, items, data_dir)
    return answered_examples(kind, data, items, data_dir, **answering)


@dataclass(frozen=True, kw_only=True)
class ProbeFitSettings:
    """What a probe is fitted on, checked when made (before the first forward pass): its ``kind``, the
    ``data`` (a dataset name of the kind's or a labelled file) and its ``items``, the benchmark
    ``data_dir``, the ``model`` whose hidden states it reads, the ``layers`` to choose among (default:
    every fourth and the last), ``n`` answers a question for a ``sep`` probe's entropy, and ``force``:
    keep a probe that ranks its held-out rows no better than chance."""

    kind: Kind
    data: str
    model: str | LogProbModel
    layers: tuple[int, ...] | None = None
    items: range | None = None
    data_dir: str | Path | None = None
    n: int = 10
    force: bool = False

    def __post_init__(self) -> None:
        if self.layers is not None:
            object.__setattr__(self, "layers", tuple(self.layers))
        if self.kind == "sep" and not 1 <= self.n < MAX_CALLS:
            raise ConfigError(
                f"n takes 1 to {MAX_CALLS - 1:,} answers a question (a run's call limit), got {self.n:,}",
                settings=("n",),
            )
        check_data(self.kind, self.data)


def fit(
    settings: ProbeFitSettings,
    gateway: Gateway,
    *,
    answerer: ModelLike | None = None,
    judge: Any = None,
    stats: CallStats | None = None,
    progress: Callable[[Iterable[Any]], Iterable[Any]] = lambda x: x,
) -> tuple[Probe, list[Example]]:
    """A probe fitted as ``settings`` say (its layer chosen on held-out groups), and the examples it was
    fitted on; ``answerer`` answers an accuracy or sep probe's questions (default: the probe's model),
    ``judge`` clusters a sep probe's answers. The sample budget and both labels in the fit and in the
    held-out share are checked before the first forward pass; a probe that ranks its held-out rows no
    better than chance (AUC-ROC at or below 50, or none) is refused unless ``settings.force``."""
    s = settings
    stats = stats if stats is not None else CallStats()
    reader = gateway.logprob_model(s.model)
    tried = list(s.layers) if s.layers else default_layers(reader)
    answerer = answerer if answerer is not None else s.model
    answering = {"answerer": answerer, "gateway": gateway, "stats": stats, "n": s.n, "judge": judge}
    examples = examples_of(s.kind, s.data, s.items, s.data_dir, progress=progress, **answering)
    if not examples:
        raise ConfigError(
            f"no examples in {s.data}" + ("" if s.items is None else f" items {s.items.start}-{s.items.stop - 1}")
        )
    threshold, examples = entropy_labels(examples) if s.kind == "sep" else (None, examples)
    check_balance(examples, s.force)
    features, labels, groups, missing = read_states(examples, s.kind, reader, tried, gateway, stats, progress)
    fitted = fit_probe(
        features,
        labels,
        groups,
        kind=s.kind,
        model=reader.name,
        model_file=reader.file_hash,
        prompt=probe.prompt_ref(s.kind, gateway),
        threshold=threshold,
        data=_fitted_on(s.kind, s.data, s.items, len(examples), missing, answerer, s.n, judge),
    )
    if not s.force:
        check_better_than_chance(fitted)
    return fitted, examples


def entropy_labels(examples: list[Example]) -> tuple[float, list[Example]]:
    """Semantic Entropy Probes' labels: each answer's entropy split at the best threshold (high: 1)."""
    threshold = best_split([ex.entropy for ex in examples if ex.entropy is not None])
    return threshold, [
        Example(ex.group, ex.text, ex.question, ex.sentences, (int(ex.entropy >= threshold),), ex.entropy)
        if ex.entropy is not None
        else ex
        for ex in examples
    ]


def _fitted_on(
    kind: Kind, data: str, items: range | None, examples: int, missing: int, answerer: ModelLike, n: int, judge: Any
) -> dict[str, Any]:
    """What a probe was fitted on, as its JSON records it."""
    return {
        "source": data if data in (*SENTENCE_DATA, *GROUNDED_DATA, *QA_DATA) else Path(data).name,
        "items": None if items is None else f"{items.start}-{items.stop - 1}",
        "examples": examples,
        "not_read": missing,
        **({"answerer": model_name(answerer)} if kind not in SENTENCE_KINDS else {}),
        **({"n": n, "judge": getattr(judge, "name", judge)} if kind == "sep" else {}),
    }


CHANCE = 50.0  # AUC-ROC of a random ranking


def check_better_than_chance(fitted: Probe) -> None:
    """A probe whose held-out AUC-ROC (at its chosen layer) is unknown, or at or below chance, is refused."""
    held_out = fitted.validation["per_layer"][str(fitted.layer)]["auc_roc"]
    if held_out is None or held_out <= CHANCE:
        shown = "cannot be computed" if held_out is None else f"is {held_out:.1f}"
        raise ConfigError(
            f"the probe's held-out AUC-ROC {shown} (chance is 50) on {fitted.validation['rows']} rows: it would "
            "rank no better than chance; fit on more data, or write it anyway (force=True)",
            settings=("force=True",),
        )


def check_balance(examples: Sequence[Example], force: bool = False) -> None:
    """Both labels among the examples and among the rows fitted on, and (unless ``force``: the probe's
    held-out AUC-ROC is then unknown) among the rows held out to choose the layer (the same seeded draw of
    groups ``fit_probe`` makes), before any hidden state is read."""
    labels = [label for ex in examples for label in ex.labels]
    groups = [ex.group for ex in examples for _ in ex.labels]
    if len(set(labels)) < 2:
        shown = f"all {labels[0]}" if labels else "none"
        raise ConfigError(
            f"a probe needs both labels (0 and 1) among its examples; their {len(labels)} labels are {shown}"
        )
    held = validation_groups(groups)
    for part, name in ((~held, "fitted on"), (held, "held out to choose the layer")):
        found = {label for label, keep in zip(labels, part, strict=True) if keep}
        if len(found) < 2 and not (force and part is held):
            or_force = " (or force=True: a probe with no held-out AUC-ROC)" if part is held else ""
            raise ConfigError(
                f"the {int(part.sum())} rows {name} ({len(set(groups))} groups in all) hold one label only: "
                f"give more data{or_force}",
                settings=("force=True",),
            )


def summary(fitted: Probe) -> str:
    """The probe in a few lines: what it was fitted on, and each layer's held-out AUC-ROC."""
    val = fitted.validation
    lines = [
        f"{fitted.kind} probe on {fitted.model} layer {fitted.layer} ({', '.join(fitted.positions)}): "
        f"{fitted.data.get('rows')} rows from {fitted.data.get('groups')} groups of {fitted.data.get('source')}, "
        f"base rate {fitted.base_rate:.2f}"
        + ("" if fitted.threshold is None else f", semantic entropy split at {fitted.threshold:.3f}"),
        f"held out to choose the layer: {val['rows']} rows of {val['groups']} groups",
    ]
    for layer, metrics in val["per_layer"].items():
        chosen = " (chosen)" if int(layer) == fitted.layer else ""
        roc, pr = metrics["auc_roc"], metrics["auc_pr"]
        lines.append(
            f"  layer {layer}: AUC-ROC {'-' if roc is None else f'{roc:.1f}'}, "
            f"AUC-PR {'-' if pr is None else f'{pr:.1f}'}{chosen}"
        )
    held_out = val["per_layer"][str(fitted.layer)]["auc_roc"]
    if held_out is None or held_out <= CHANCE:  # only a forced fit gets here
        why = "cannot be computed (the held-out rows hold one label)" if held_out is None else f"is {held_out:.1f}"
        lines.append(f"warning: its held-out AUC-ROC {why}: nothing shows it ranks better than chance")
    return "\n".join(lines)
