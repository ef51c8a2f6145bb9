"""`halluscope bench ragtruth`: RAGTruth's test split (Wu et al., ACL 2024; the copy Vectara's FaithJudge
keeps, 2,617 of the 2,700 responses) scored by the published protocols. A test set: nothing here is
fitted, calibrated or chosen on it.

Each response is an answer; its task's prompt goes to the check as RAGTruth gave it to the model that
wrote it: QA's question with its passages as the documents, the summary instruction with the news
article, the data-to-text instruction with the business record (JSON). Measured, with intervals that
resample sources (a source's six responses move together):

- response level (LettuceDetect's and the RAGTruth paper's): a response is hallucinated when it holds a
  labelled span; precision, recall and F1 of that class at the decision threshold (the check's own, 0.5
  of p(not supported), or ``--threshold`` fitted elsewhere), per task and overall, and AUC-ROC of the
  response's riskiest unit;
- span level: character overlap of the flagged units' spans with the labelled spans, precision,
  recall and F1 over all characters (micro), per task and overall;
- per source model: response-level F1.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from halluscope.backends.gateway import CallStats, Gateway
from halluscope.backends.models import model_name
from halluscope.bench.benchmark import Benchmark, Settings, listed, option
from halluscope.bench.datasets import dataset_file
from halluscope.bench.grounded import FLAGS, grounded_methods
from halluscope.bench.mine import riskiest, score_answer
from halluscope.bench.report import markdown_table, write_text
from halluscope.bench.runner import BenchResult, Plan
from halluscope.bench.wikibio import finite_scores, score_list
from halluscope.errors import ConfigError, DataError
from halluscope.labelled import LabelledAnswer
from halluscope.metrics import auc_roc_resampled, unresampled
from halluscope.runtime import registry
from halluscope.runtime.contract import start

TASKS = ("qa", "summary", "data2txt")
FILES = {task: f"ragtruth_{task}.jsonl" for task in TASKS}
DECISION = 0.5  # a grounded check's own decision: flagged where p(not supported) >= 0.5
# the prompts RAGTruth's models answered (its paper's appendix), the instruction a check reads as the question
QA_PROMPT = "Briefly answer the following question:\n{question}\nBear in mind that your response should be strictly based on the following passages."  # noqa: E501
SUMMARY_PROMPT = "Summarize the following news."
DATA2TXT_PROMPT = (
    "Write an objective overview about the following local business based only on the provided structured data in "
    "the JSON format. You should include details and cover the information mentioned in the customers' review. "
    "Don't make up information."
)
PROTOCOL = (
    "RAGTruth test (FaithJudge's copy): a response is hallucinated when it holds a labelled span; response-level "
    "precision / recall / F1 at the decision threshold, AUC-ROC of its riskiest unit; character-level span F1 of "
    "flagged units; x100; intervals resample sources"
)


@dataclass(frozen=True)
class Response:
    """One response of RAGTruth's test split: its task, source and the model that wrote it, the prompt's
    instruction and documents it answered, its text and its labelled spans (character offsets)."""

    id: str
    task: str
    source: str
    model: str
    question: str
    documents: tuple[str, ...]
    text: str
    spans: tuple[tuple[int, int], ...]

    @property
    def hallucinated(self) -> bool:
        return bool(self.spans)


def _prompt(task: str, source: Any) -> tuple[str, tuple[str, ...]]:
    """The instruction and documents of a source as its task's prompt gave them to the model."""
    if task == "qa":
        return QA_PROMPT.format(question=source["question"]), (str(source["passages"]),)
    if task == "summary":
        return SUMMARY_PROMPT, (str(source),)
    return DATA2TXT_PROMPT, (json.dumps(source, ensure_ascii=False),)


def load_ragtruth(data: str | Path | None = None, tasks: Sequence[str] = TASKS) -> list[Response]:
    """Every response of the tasks, in file order (a source's responses together)."""
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        raise ConfigError(f"RAGTruth's tasks are {', '.join(TASKS)}, not {', '.join(unknown)}", settings=("task",))
    found = []
    for task in tasks:
        path = dataset_file("ragtruth_test", FILES[task], data)
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                question, documents = _prompt(task, row["source"])
                for k, given in enumerate(row["responses"]):
                    text = str(given["response"])
                    spans = tuple(sorted((int(s["start"]), int(s["end"])) for s in given["labels"]))
                    if any(not 0 <= a < b <= len(text) for a, b in spans):
                        raise ValueError(f"response {k}: a labelled span outside its {len(text)} characters")
                    source = f"{task}/{row['source_id']}"
                    model = str(given["model"])
                    found.append(Response(f"{source}/{k}", task, source, model, question, documents, text, spans))
            except (ValueError, KeyError, TypeError) as exc:
                raise DataError(f"{path}, line {number}: not a RAGTruth source ({exc})") from exc
    return found


OFFICIAL_SOURCES = 150  # a task's sources in the official test split (450 sources, six responses each: 2,700)
SOURCE_MODELS = 6  # the six LLMs that answered every source


def absent(responses: Sequence[Response]) -> dict[str, Any]:
    """What the official test split has and this copy lacks, for the tasks loaded: how many sources a task
    misses (not nameable: the copy's source ids are sparse) and each response missing from a source it
    holds, named by source and model."""
    by_source: dict[str, set[str]] = {}
    for r in responses:
        by_source.setdefault(r.source, set()).add(r.model)
    models = sorted({r.model for r in responses})
    tasks = sorted({r.task for r in responses}, key=TASKS.index)
    return {
        "sources": {t: OFFICIAL_SOURCES - sum(s.startswith(f"{t}/") for s in by_source) for t in tasks},
        "responses": [
            f"{s} by {m}" for s, held in by_source.items() if len(held) < SOURCE_MODELS for m in models if m not in held
        ],
    }


def stratified(responses: Sequence[Response], per_task: int | None, seed: int = 0) -> list[Response]:
    """``per_task`` responses of each task (all where None), drawn seeded and spread over the source models
    in turn, so that each model writes about as many; returned in file order."""
    if per_task is None:
        return list(responses)
    kept: set[str] = set()
    for number, task in enumerate(TASKS):
        rng = np.random.default_rng([seed, number])  # a task's draw is the same whichever tasks are loaded
        by_model: dict[str, list[Response]] = {}
        for r in responses:
            if r.task == task:
                by_model.setdefault(r.model, []).append(r)
        queues = {m: [rs[i] for i in rng.permutation(len(rs))] for m, rs in sorted(by_model.items())}
        taken = 0
        while taken < per_task and any(queues.values()):
            for queue in queues.values():
                if queue and taken < per_task:
                    kept.add(queue.pop(0).id)
                    taken += 1
    return [r for r in responses if r.id in kept]


def _overlap(a: Sequence[Sequence[int]], b: Sequence[Sequence[int]]) -> int:
    """Characters in both span sets (each a union of [start, end) spans)."""
    ours = {c for first, last in a for c in range(first, last)}
    theirs = {c for first, last in b for c in range(first, last)}
    return len(ours & theirs)


def _covered(spans: Sequence[Sequence[int]]) -> int:
    return _overlap(spans, spans)


def char_counts(record: dict[str, Any], threshold: float) -> tuple[int, int, int]:
    """(flagged and labelled, flagged, labelled) characters of one response: the flagged units' spans
    against its labelled spans."""
    scores = score_list(record["scores"])
    flagged = [span for s, spans in zip(scores, record["spans"], strict=True) if s >= threshold for span in spans]
    return _overlap(flagged, record["gold_spans"]), _covered(flagged), _covered(record["gold_spans"])


def _f1(tp: np.ndarray, predicted: np.ndarray, actual: np.ndarray) -> dict[str, np.ndarray]:
    with np.errstate(invalid="ignore", divide="ignore"):
        precision = np.where(predicted > 0, tp / predicted, np.nan)
        recall = np.where(actual > 0, tp / actual, np.nan)
        f1 = np.where(precision + recall > 0, 2 * precision * recall / (precision + recall), np.nan)
    return {"precision": precision * 100, "recall": recall * 100, "f1": f1 * 100}


def responses_resampled(records: list[dict[str, Any]], counts: np.ndarray, threshold: float) -> dict[str, np.ndarray]:
    """The response-level metrics on each resample (a row of counts per response): precision, recall and
    F1 at the threshold and AUC-ROC, overall and per task, and F1 per source model where records name it;
    all a composed run can give, whose records keep no spans."""
    y = np.array([r["answer_label"] for r in records], dtype=bool)
    s = finite_scores(np.array([riskiest(r["scores"]) for r in records], dtype=np.float64))
    flagged = s >= threshold
    task = np.array([r["task"] for r in records])
    out: dict[str, np.ndarray] = {}
    for name, keep in _parts(task):
        w = counts[:, keep]
        response = _f1(w @ (flagged & y)[keep], w @ flagged[keep], w @ y[keep])
        out |= {f"{name}response_{k}": v for k, v in response.items()}
        out[f"{name}auc_roc"] = auc_roc_resampled(y[keep], s[keep], w) * 100
    models = np.array([r.get("model", "") for r in records])
    for name in sorted(set(models) - {""}):  # each source model's response-level F1
        keep = models == name
        w = counts[:, keep]
        out[f"model {name} response_f1"] = _f1(w @ (flagged & y)[keep], w @ flagged[keep], w @ y[keep])["f1"]
    return out


def _parts(task: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """The metrics' parts: every response (no prefix), then each task present ("qa_", ...)."""
    parts = [("", np.ones(len(task), dtype=bool))] + [(f"{t}_", task == t) for t in TASKS]
    return [(name, keep) for name, keep in parts if keep.any()]


def resampled_metrics(records: list[dict[str, Any]], counts: np.ndarray, threshold: float) -> dict[str, np.ndarray]:
    """The protocol's metrics on each resample: the response level's, and character span F1 of the
    flagged units overall and per task."""
    out = responses_resampled(records, counts, threshold)
    chars = np.array([char_counts(r, threshold) for r in records], dtype=np.float64).reshape(-1, 3)
    for name, keep in _parts(np.array([r["task"] for r in records])):
        w = counts[:, keep]
        spans = _f1(w @ chars[keep, 0], w @ chars[keep, 1], w @ chars[keep, 2])
        out |= {f"{name}span_{k}": v for k, v in spans.items()}
    return out


def summarise(records: list[dict[str, Any]], threshold: float) -> dict[str, Any]:
    """The metrics on every response (each task's, each source model's response-level F1) and counts."""
    metrics: dict[str, Any] = unresampled(partial(resampled_metrics, records, threshold=threshold), len(records))
    metrics["n_responses"] = len(records)
    metrics["n_hallucinated"] = sum(bool(r["answer_label"]) for r in records)
    metrics["n_sources"] = len({r["group"] for r in records})
    return metrics


def ragtruth_plan(
    name: str,
    responses: Sequence[Response],
    options: dict[str, Any],
    gateway: Gateway | None,
    threshold: float,
    per_task: int | None,
    lacking: dict[str, Any] | None = None,
) -> Plan:
    """One grounded method over the responses: each response's sentences checked against its documents;
    ``lacking``: what the copy lacks of the official split (``absent``), kept with the run."""
    method = registry.get(name)
    stats = CallStats()
    scorer = method.scorer(method.options(**options), start(gateway, stats))

    def score(response: Response) -> dict[str, Any]:
        row = LabelledAnswer(
            response.id,
            {"text": response.text, "context": list(response.documents), "question": response.question},
            label=int(response.hallucinated),
            group=response.source,
        )
        record = score_answer(method, scorer, row)
        gold = [list(span) for span in response.spans]
        return record | {"task": response.task, "model": response.model, "gold_spans": gold}

    model = options.get(method.model_field)
    return Plan(
        bench="ragtruth",
        method=name,
        what="response",
        items=list(responses),
        item_id=lambda r: r.id,
        score=score,
        summarise=partial(summarise, threshold=threshold),
        resampled=partial(resampled_metrics, threshold=threshold),
        params={
            "dataset": "ragtruth_test",
            "method": name,
            "model": model_name(model) if model is not None else None,
            "options": {k: v for k, v in options.items() if k != method.model_field and isinstance(v, str | int)},
            "threshold": threshold,
            "per_task": per_task,
            "responses": sorted(r.id for r in responses),
            "absent": lacking,
            "protocol": PROTOCOL,
        },
        report=lambda result, out, failed: None,  # one report for all methods: write_report
        stats=stats,
        counts_calls=model is not None,
        per_score={"texts": "text", "labels": "label", "spans": "spans"},
        positive=("1",),
    )


COLUMNS = (
    ("method", "method"),
    ("response_precision", "precision"),
    ("response_recall", "recall"),
    ("response_f1", "F1"),
    ("auc_roc", "AUC-ROC"),
    ("span_f1", "span F1 (characters)"),
    ("n_responses", "responses"),
    ("n_hallucinated", "hallucinated"),
)


def write_report(results: Sequence[BenchResult], out: Path) -> None:
    rows = [{"method": r.params["method"], **r.metrics} for r in results]
    per_task = [
        {"method": r.params["method"], "task": t, **{k: r.metrics.get(f"{t}_{k}") for k, _ in COLUMNS[1:6]}}
        for r in results
        for t in TASKS
        if r.metrics.get(f"{t}_response_f1") is not None or r.metrics.get(f"{t}_auc_roc") is not None
    ]
    write_text(
        out / "report.md",
        f"# RAGTruth test\n\nProtocol: {PROTOCOL}.\n\n{markdown_table(rows, COLUMNS)}\n\n"
        f"{markdown_table(per_task, (('method', 'method'), ('task', 'task'), *COLUMNS[1:6]))}\n",
    )


def describe(results: Sequence[BenchResult]) -> str:
    lines = []
    for r in results:
        m = r.metrics
        shown = "  ".join(f"{h} {'n/a' if m.get(k) is None else f'{m[k]:.1f}'}" for k, h in COLUMNS[1:6])
        lines += [f"{r.params['method']}: {m.get('n_responses')} responses; {r.meta.cost()}", f"  {shown}"]
        if r.failures:
            lines.append(f"  {len(r.failures)} responses failed (left out of the metrics; results.json says why)")
    return "\n".join(lines)


@dataclass(frozen=True, kw_only=True)
class RagTruthSettings(Settings):
    method: tuple[str, ...] = listed(("grounded",), "methods that check a text against documents", "--method")
    model: str | None = option(None, "the judge: a model spec, or nli:DIR (default: the local model)", "--model")
    task: tuple[str, ...] = listed(TASKS, "RAGTruth's tasks: qa, summary, data2txt", "--task")
    per_task: int | None = option(
        None, "a stratified subset: K responses of each task, spread over the source models", "--per-task", type=int
    )
    threshold: float = option(
        DECISION, "flag where p(not supported) >= this (fitted elsewhere: never on RAGTruth)", "--threshold", type=float
    )

    def __post_init__(self) -> None:
        if self.per_task is not None and self.per_task < 1:
            raise ConfigError(f"per_task keeps at least 1 response a task, got {self.per_task}", settings=("per_task",))
        if not 0 <= self.threshold <= 1:
            raise ConfigError(f"threshold is a probability in [0, 1], got {self.threshold}", settings=("threshold",))


def _plans(settings: RagTruthSettings, gateway: Callable[[], Gateway]) -> list[Plan]:
    unknown = [m for m in settings.method if m not in grounded_methods()]
    if unknown:
        raise ConfigError(
            f"RAGTruth checks a response against its documents: {', '.join(unknown)} reads none; "
            f"available: {', '.join(grounded_methods())}",
            settings=("method",),
        )
    loaded = load_ragtruth(settings.data, settings.task)
    responses, lacking = stratified(loaded, settings.per_task), absent(loaded)
    chosen = dict(settings.method_options) | ({"model": settings.model} if settings.model is not None else {})
    gw = gateway()
    plans = []
    for name in settings.method:
        method = registry.get(name)
        options = {k: v for k, v in chosen.items() if k in method.option_names and v is not None}
        plans.append(ragtruth_plan(name, responses, options, gw, settings.threshold, settings.per_task, lacking))
    return plans


BENCHMARK = Benchmark(
    name="ragtruth",
    help="RAGTruth's test split: response-level precision / recall / F1, AUC-ROC and span F1, per task and model",
    description="RAGTruth's test split (FaithJudge's copy) by its published protocols: each response checked "
    "against its prompt's documents; response-level precision / recall / F1 and AUC-ROC, character-level span "
    "F1, per task and per source model, intervals resampling sources. A test set: fit and choose elsewhere.",
    settings=RagTruthSettings,
    fields_of=(registry.get("grounded"), FLAGS),
    plans=_plans,
    describe=lambda results, _settings: describe(results),
    finish=write_report,
)
