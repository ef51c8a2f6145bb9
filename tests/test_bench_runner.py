"""The one benchmark runner: per-item failures, progress, results.json with the same keys for every
benchmark, the report beside it, and resume through the cache."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from halluscope.backends.gateway import CallStats, Gateway
from halluscope.bench.runner import BenchResult, Plan, run
from halluscope.errors import ModelUnavailableError

KEYS = {"bench", "params", "meta", "metrics", "intervals", "items", "failures"}


class Refused(Exception):
    status_code = 400  # a provider's final refusal: not retried


def _plan(gateway: Gateway, model: Any, items: list[str]) -> Plan:
    stats = CallStats()

    def score(question: str) -> dict[str, Any]:
        reply = gateway.call(model, "semantic_entropy.answer", {"question": question}, stats=stats)
        return {"answer": reply.text, "events": {"short": 1}, "scores": {"length": float(len(reply.text))}}

    def report(result: BenchResult, out: Path, failed: str) -> None:
        (out / "report.md").write_text(f"{len(result.items)} scored\n{failed}", encoding="utf-8")

    return Plan(
        bench="toy",
        method="toy",
        what="question",
        items=items,
        item_id=lambda q: f"question {items.index(q)}",
        score=score,
        summarise=lambda records: {"mean_length": sum(len(r["answer"]) for r in records) / len(records)},
        params={"items": len(items)},
        report=report,
        stats=stats,
        counts_calls=True,
        planned_calls=lambda _q: 1,
    )


def test_a_failed_item_is_recorded_the_rest_are_scored_and_a_rerun_resumes(
    gateway: Gateway, scripted: Any, tmp_path: Path
) -> None:
    def respond(prompt: str, _params: dict[str, Any]) -> str:
        if "broken" in prompt:
            raise Refused("the provider refused this question")
        return "Paris" if "France" in prompt else "Rome"

    model = scripted(respond, "scripted:toy")
    items = ["Capital of France?", "broken question", "Capital of Italy?"]
    result = run(_plan(gateway, model, items), tmp_path, progress=False)
    saved = json.loads((tmp_path / "results.json").read_text())
    assert set(saved) == KEYS == set(BenchResult.model_fields)
    assert [i.id for i in result.items] == ["question 0", "question 2"] and result.items[0].scores == {"length": 5.0}
    assert result.items[0].record == {"answer": "Paris", "events": {"short": 1}}
    assert [f["item"] for f in result.failures] == ["question 1"] and "refused" in result.failures[0]["error"]
    assert result.metrics == {"mean_length": 4.5} and result.meta.events == {"short": 2}
    assert result.meta.calls == 2 and result.meta.method == "toy"
    report = (tmp_path / "report.md").read_text()
    assert report.startswith("2 scored") and "**1 questions failed**" in report
    assert BenchResult.read(tmp_path) == result
    again = run(_plan(gateway, model, items), tmp_path, progress=False)  # the scored items are skipped
    assert again.meta.calls == 0 and again.meta.cache_hits == 0 and again.meta.params["resumed_items"] == 2
    assert again.metrics == result.metrics and again.items == result.items and again.failures == result.failures
    fresh = run(_plan(gateway, model, items), tmp_path, progress=False, fresh=True)  # scored again: the cache
    assert fresh.meta.calls == 0 and fresh.meta.cache_hits == 2 and fresh.items == result.items
    assert len(list(tmp_path.glob("items.jsonl.old-*"))) == 1  # the journal fresh replaced is kept aside


def test_a_run_killed_mid_way_resumes_without_scoring_a_finished_item_again(
    gateway: Gateway, scripted: Any, tmp_path: Path
) -> None:
    """An error that stops the run (here a bug on the third item) leaves the first two in items.jsonl; a
    torn last line is ignored; the rerun scores only what is left, and the result equals one clean run."""
    asked: list[str] = []

    def respond(prompt: str, _params: dict[str, Any]) -> str:
        asked.append(prompt)
        return "An answer"

    items = ["Q0?", "Q1?", "Q2?", "Q3?"]
    plan = _plan(gateway, scripted(respond, "scripted:kill"), items)
    score = plan.score
    plan.score = lambda q: (_ for _ in ()).throw(KeyboardInterrupt()) if q == "Q2?" else score(q)
    with pytest.raises(KeyboardInterrupt):
        run(plan, tmp_path, progress=False)
    journal = tmp_path / "items.jsonl"
    ids = [json.loads(line).get("id") for line in journal.read_text().splitlines()]
    assert ids == [None, "question 0", "question 1"]  # the header, then the two items scored
    with journal.open("a") as f:
        f.write('{"id": "question 2", "rec')  # a kill mid-write
    asked.clear()
    resumed = run(_plan(gateway, scripted(respond, "scripted:kill"), items), tmp_path, progress=False)
    assert len(asked) == 2 and resumed.meta.calls == 2 and resumed.meta.params["resumed_items"] == 2
    assert [i.id for i in resumed.items] == [f"question {k}" for k in range(4)]
    clean = run(_plan(gateway, scripted(respond, "scripted:kill"), items), tmp_path / "clean", progress=False)
    assert clean.items == resumed.items and clean.metrics == resumed.metrics


def test_a_journal_of_other_settings_is_moved_aside_not_resumed(
    gateway: Gateway, scripted: Any, tmp_path: Path
) -> None:
    model = scripted(lambda _p, _q: "An answer", "scripted:other")
    first = _plan(gateway, model, ["Q0?", "Q1?"])
    first.params["limit"] = 1
    first.items = first.items[:1]
    run(first, tmp_path, progress=False, fingerprint="prompts A")
    more = _plan(gateway, model, ["Q0?", "Q1?"])  # a larger limit resumes what the smaller one scored
    assert run(more, tmp_path, progress=False, fingerprint="prompts A").meta.params["resumed_items"] == 1
    again = run(_plan(gateway, model, ["Q0?", "Q1?"]), tmp_path, progress=False, fingerprint="prompts B")
    assert "resumed_items" not in again.meta.params and again.meta.cache_hits == 2
    assert len(list(tmp_path.glob("items.jsonl.old-*"))) == 1


def test_every_item_failing_is_one_error(gateway: Gateway, scripted: Any, tmp_path: Path) -> None:
    def refuse(_prompt: str, _params: dict[str, Any]) -> str:
        raise Refused("down")

    with pytest.raises(ModelUnavailableError, match="no question could be scored"):
        run(_plan(gateway, scripted(refuse, "scripted:down"), ["Q?"]), tmp_path, progress=False)
    assert not (tmp_path / "results.json").exists()


def test_a_resumed_record_keeps_the_order_of_its_scores(gateway: Gateway, tmp_path: Path) -> None:
    """Scores named "unit 0" .. "unit 11" are read in order (a WikiBio passage's sentences against their
    labels): a journal that sorted keys put "unit 10" before "unit 2"."""
    names = [f"unit {i}" for i in range(12)]

    def plan() -> Plan:
        return Plan(
            bench="toy",
            method="toy",
            what="passage",
            items=["only"],
            item_id=lambda item: item,
            score=lambda _item: {"scores": {name: float(i) for i, name in enumerate(names)}},
            summarise=lambda records: {"first_scores": list(records[0]["scores"].values())[:3]},
            params={},
            report=lambda result, out, failed: None,
        )

    fresh = run(plan(), tmp_path, progress=False)
    resumed = run(plan(), tmp_path, progress=False)
    assert fresh.metrics == resumed.metrics == {"first_scores": [0.0, 1.0, 2.0]}
    assert list(resumed.items[0].scores) == names
