"""`halluscope bench ragtruth`: RAGTruth's test split read as its SOURCE.md counts it, each response
checked against its prompt's documents, and the published protocols (response-level precision / recall
/ F1, AUC-ROC, character-level span F1) checked against numbers worked by hand."""

from __future__ import annotations

import json
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from halluscope.backends.gateway import Gateway
from halluscope.bench.ragtruth import (
    RagTruthSettings,
    absent,
    char_counts,
    load_ragtruth,
    ragtruth_plan,
    resampled_metrics,
    stratified,
    summarise,
)
from halluscope.bench.runner import run as run_plan
from halluscope.cli import main
from halluscope.errors import ConfigError


def test_the_test_split_reads_as_its_source_counts_it(data_dir: Path) -> None:
    responses = load_ragtruth(data_dir)
    tasks = Counter(r.task for r in responses)
    assert tasks == {"qa": 817, "summary": 900, "data2txt": 900}
    hallucinated = Counter(r.task for r in responses if r.hallucinated)
    assert hallucinated == {"qa": 259, "summary": 241, "data2txt": 579}  # SOURCE.md's "with a label"
    assert len({r.source for r in responses}) == 139 + 150 + 150
    qa = next(r for r in responses if r.task == "qa")
    assert qa.question.startswith("Briefly answer the following question:\n") and "passage 1:" in qa.documents[0]
    record = json.loads(next(r for r in responses if r.task == "data2txt").documents[0])
    assert {"name", "address", "review_info"} <= set(record)
    for r in responses[:200]:
        assert all(0 <= a < b <= len(r.text) for a, b in r.spans)


def test_the_responses_this_copy_lacks_are_named(data_dir: Path) -> None:
    """The official split's 2,700 responses less this copy's 2,617: 11 whole QA sources (six responses
    each, their ids unknown here) and 17 responses of sources it holds, each named by source and model."""
    lacking = absent(load_ragtruth(data_dir))
    assert lacking["sources"] == {"qa": 11, "summary": 0, "data2txt": 0} and len(lacking["responses"]) == 17
    assert 6 * sum(lacking["sources"].values()) + len(lacking["responses"]) == 2700 - 2617
    assert (
        "qa/15453 by gpt-3.5-turbo-0613" in lacking["responses"]
        and "qa/15453 by mistral-7B-instruct" in (lacking["responses"])
    )
    assert absent(load_ragtruth(data_dir, ("summary",))) == {"sources": {"summary": 0}, "responses": []}


def test_a_stratified_subset_takes_k_a_task_spread_over_the_models(data_dir: Path) -> None:
    responses = load_ragtruth(data_dir)
    subset = stratified(responses, 50)
    assert Counter(r.task for r in subset) == {"qa": 50, "summary": 50, "data2txt": 50}
    per_model = Counter(r.model for r in subset)
    assert len(per_model) == 6 and max(per_model.values()) - min(per_model.values()) <= 3
    assert subset == stratified(responses, 50)  # seeded
    assert [r.id for r in subset] == [r.id for r in responses if r in subset]  # file order
    assert stratified(responses, None) == responses
    summaries = stratified(load_ragtruth(data_dir, ("summary",)), 50)
    assert summaries == [r for r in subset if r.task == "summary"]  # the same draw of a task alone


def _record(task: str, label: int, scores: list[float], spans: list[list[int]], gold: list[list[int]]) -> dict:
    return {
        "answer_label": label,
        "task": task,
        "model": "m",
        "group": task,
        "scores": {f"unit {i}": s for i, s in enumerate(scores)},
        "spans": [[span] for span in spans],
        "gold_spans": gold,
    }


def test_the_protocols_metrics_by_hand() -> None:
    records = [
        _record("qa", 1, [0.9, 0.1], [[0, 10], [10, 20]], [[5, 15]]),  # flagged, hallucinated: a TP
        _record("qa", 0, [0.2], [[0, 8]], []),  # not flagged, clean: a TN
        _record("summary", 1, [0.3], [[0, 6]], [[0, 6]]),  # missed: a FN
        _record("summary", 0, [0.7], [[0, 4]], []),  # flagged, clean: a FP
    ]
    # characters: the TP's flagged unit [0, 10) overlaps its label [5, 15) on 5 of 10 flagged, 10 labelled
    assert char_counts(records[0], 0.5) == (5, 10, 10) and char_counts(records[3], 0.5) == (0, 4, 0)
    m = summarise(records, 0.5)
    assert m["response_precision"] == pytest.approx(50.0) and m["response_recall"] == pytest.approx(50.0)
    assert m["response_f1"] == pytest.approx(50.0)
    # span: overlap 5; flagged 10 + 4 = 14; labelled 10 + 6 = 16 -> P 5/14, R 5/16
    p, r = 5 / 14, 5 / 16
    assert m["span_precision"] == pytest.approx(100 * p) and m["span_recall"] == pytest.approx(100 * r)
    assert m["span_f1"] == pytest.approx(100 * 2 * p * r / (p + r))
    # AUC-ROC of riskiest units 0.9, 0.2, 0.3, 0.7 for labels 1, 0, 1, 0: pairs (0.9>0.2, 0.9>0.7, 0.3>0.2, 0.3<0.7)
    assert m["auc_roc"] == pytest.approx(75.0)
    assert m["qa_response_f1"] == pytest.approx(100.0) and m["summary_response_precision"] == 0.0  # 0 TP, 1 FP
    assert m["summary_response_f1"] is None  # precision and recall both 0: no F1
    assert m["n_responses"] == 4 and m["n_hallucinated"] == 2 and m["model m response_f1"] == pytest.approx(50.0)
    twice = resampled_metrics(records, np.array([[2, 2, 2, 2], [1, 1, 1, 1]]), 0.5)
    assert twice["response_f1"] == pytest.approx([50.0, 50.0])  # weights scale counts, not the F1
    assert set(summarise(records, 0.5)) - {"n_responses", "n_hallucinated", "n_sources"} == set(twice)
    from halluscope.metrics import bootstrap_metrics

    # the run's intervals: every figure summarise gives is one the resampled metrics give (a KeyError once)
    found = bootstrap_metrics(
        partial(summarise, threshold=0.5), records * 3, 50, resampled=partial(resampled_metrics, threshold=0.5)
    )
    assert "response_f1" in found and "model m response_f1" in found


def _judge(prompt: str, _params: dict[str, Any]) -> str:
    """Unsupported (No) for any sentence that names a number the documents do not hold."""
    context = prompt.split("Context:", 1)[1].split("Sentence:", 1)[0]
    sentence = prompt.split("Sentence:", 1)[1].split("Is the sentence", 1)[0]
    numbers = [w.strip(".,;:()$%") for w in sentence.split() if any(c.isdigit() for c in w)]
    return "No" if any(n and n not in context for n in numbers) else "Yes"


def test_a_run_checks_each_response_against_its_prompts_documents(
    data_dir: Path, gateway: Gateway, scripted: Any, tmp_path: Path
) -> None:
    responses = stratified(load_ragtruth(data_dir), 2)
    seen: list[str] = []
    model = scripted(lambda prompt, params: seen.append(prompt) or _judge(prompt, params))
    plan = ragtruth_plan("grounded", responses, {"model": model, "top_k": 1}, gateway, 0.5, 2)
    result = run_plan(plan, tmp_path / "rt", progress=False)
    assert (
        len(result.items) == 6 and not result.failures and result.params["responses"] == sorted(r.id for r in responses)
    )
    assert {i.record["group"] for i in result.items} == {r.source for r in responses}  # resampled by source
    qa = next(r for r in responses if r.task == "qa")
    assert any(qa.documents[0][:60] in prompt for prompt in seen)  # the passages are the documents
    assert result.metrics["n_responses"] == 6 and result.metrics["n_sources"] == 6
    plan = ragtruth_plan("grounded", responses, {"model": model, "top_k": 1}, gateway, 0.5, 2)
    again = run_plan(plan, tmp_path / "rt", progress=False)  # resumed from the journal: no call
    assert again.meta.calls == 0 and again.meta.params["resumed_items"] == 6 and again.metrics == result.metrics


def test_bench_ragtruth_on_the_command_line_and_its_settings_refuse_what_cannot_run(data_dir: Path) -> None:
    with pytest.raises(ConfigError, match="per_task keeps at least 1"):
        RagTruthSettings(per_task=0)
    with pytest.raises(ConfigError, match="threshold is a probability"):
        RagTruthSettings(threshold=2.0)
    with pytest.raises(ConfigError, match="RAGTruth's tasks are"):
        load_ragtruth(data_dir, ("qa", "dialogue"))
    code = main(["bench", "ragtruth", "--method", "direct-question", "--data", str(data_dir), "--per-task", "1"])
    assert code == 2
