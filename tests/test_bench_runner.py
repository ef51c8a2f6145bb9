"""The one benchmark runner: per-item failures, progress, results.json with the same keys for every
benchmark, the report beside it, and resume through the cache."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from halluscope.backends.gateway import CallStats, Gateway
from halluscope.bench.runner import BenchResult, Plan, run
from halluscope.errors import ConfigError, ModelUnavailableError
from tests.bars import BARS, CountingBar

KEYS = {
    "bench",
    "params",
    "meta",
    "metrics",
    "intervals",
    "items",
    "failures",
    "item",
    "per_score",
    "positive",
    "provenance",
}


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
    made = saved["provenance"]  # how the run was made: a record published from it says so
    assert set(made) >= {"command", "commit", "machine", "halluscope", "started"} and "cores" in made["machine"]
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


# ---------------------------------------------------------------- issue 32: a damaged journal


def _toy(items: list[str], asked: list[str]) -> Plan:
    def score(item: str) -> dict[str, Any]:
        asked.append(item)
        return {"scores": {"length": float(len(item)), "half": len(item) / 2}}

    return Plan(
        bench="toy",
        method="toy",
        what="question",
        items=items,
        item_id=lambda item: f"question {items.index(item)}",
        score=score,
        summarise=lambda records: {"mean": sum(r["scores"]["length"] for r in records) / len(records)},
        params={},
        report=lambda result, out, failed: None,
    )


ITEMS = ["Q zero?", "Q one, longer?", "Q two, the longest one?"]


def _damage(journal: Path, line: int, new: bytes) -> None:
    lines = journal.read_bytes().split(b"\n")
    lines[line - 1] = new
    journal.write_bytes(b"\n".join(lines))


def _record(journal: Path, line: int) -> dict[str, Any]:
    return json.loads(journal.read_bytes().split(b"\n")[line - 1])


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        (lambda entry: b"\xff\xfe not utf-8", "line 3: is not UTF-8 text"),
        (lambda entry: b"{}", "line 3: is not a journal record"),
        (lambda entry: b"[1, 2", "line 3: is not JSON"),
        (
            lambda entry: json.dumps({**entry, "record": {**entry["record"], "scores": {"length": 999.0}}}).encode(),
            "line 3: record of 'question 1' does not match its checksum (edited or damaged)",
        ),
        (
            lambda entry: json.dumps({**entry, "record": {"scores": {"length": "long"}}}).encode(),
            "line 3: record of 'question 1' does not match its checksum",
        ),
        (
            lambda entry: json.dumps({**entry, "record": {"scores": {}}}).encode(),  # fewer scores
            "line 3: record of 'question 1' does not match its checksum",
        ),
    ],
)
def test_a_damaged_journal_line_is_named_and_its_item_scored_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: Any, why: str
) -> None:
    asked: list[str] = []
    clean = run(_toy(ITEMS, asked), tmp_path, progress=False)
    journal = tmp_path / "items.jsonl"
    _damage(journal, 3, damage(_record(journal, 3)))
    asked.clear()
    again = run(_toy(ITEMS, asked), tmp_path, progress=False)
    err = capsys.readouterr().err
    assert why in err and "Traceback" not in err
    assert asked == [ITEMS[1]] and again.items == clean.items and again.metrics == clean.metrics
    assert len(list(tmp_path.glob("items.jsonl.damaged-*"))) == 1  # kept aside, not deleted
    asked.clear()
    assert run(_toy(ITEMS, asked), tmp_path, progress=False).items == clean.items and asked == []  # clean now
    assert capsys.readouterr().err.count("warning") == 0


def test_a_record_with_its_checksum_but_a_score_that_is_not_a_number_is_scored_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A record written with a valid checksum over a non-numeric score (a bug, or a forged line)."""
    from halluscope.bench.runner import _checksum, _digest, _header

    asked: list[str] = []
    plan = _toy(ITEMS, asked)
    run(plan, tmp_path, progress=False)
    journal = tmp_path / "items.jsonl"
    record = {"scores": {"length": "long"}}
    seal = _digest(_header(plan, ""))
    forged = {"id": "question 1", "record": record, "sum": _checksum("question 1", record, seal)}
    _damage(journal, 3, json.dumps(forged).encode())
    asked.clear()
    run(_toy(ITEMS, asked), tmp_path, progress=False)
    assert "line 3: record of 'question 1' has no scores, or a score that is not a number" in capsys.readouterr().err
    assert asked == [ITEMS[1]]


def test_a_repeated_item_keeps_its_first_record(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    asked: list[str] = []
    clean = run(_toy(ITEMS, asked), tmp_path, progress=False)
    journal = tmp_path / "items.jsonl"
    lines = journal.read_bytes().split(b"\n")
    journal.write_bytes(b"\n".join([*lines[:-1], lines[2], b""]))  # question 1 again at the end
    asked.clear()
    again = run(_toy(ITEMS, asked), tmp_path, progress=False)
    assert "line 5: repeats 'question 1' (line 3 kept)" in capsys.readouterr().err
    assert asked == [] and again.items == clean.items


def test_a_torn_last_line_is_cut_off_before_appending(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    asked: list[str] = []
    plan = _toy(ITEMS, asked)
    score = plan.score
    plan.score = lambda q: (_ for _ in ()).throw(KeyboardInterrupt()) if q == ITEMS[2] else score(q)
    with pytest.raises(KeyboardInterrupt):
        run(plan, tmp_path, progress=False)
    journal = tmp_path / "items.jsonl"
    with journal.open("ab") as f:
        f.write(b'{"id": "question 2", "rec')  # a kill mid-write
    asked.clear()
    run(_toy(ITEMS, asked), tmp_path, progress=False)
    assert "line 4: was cut off mid-write (a crash)" in capsys.readouterr().err and asked == [ITEMS[2]]
    lines = journal.read_text().splitlines()
    assert [json.loads(line).get("id") for line in lines] == [None, "question 0", "question 1", "question 2"]
    asked.clear()
    run(_toy(ITEMS, asked), tmp_path, progress=False)  # the next rerun scores nothing again
    assert asked == [] and "warning" not in capsys.readouterr().err


def test_a_journal_that_is_not_a_file_is_one_error(tmp_path: Path) -> None:
    (tmp_path / "items.jsonl").mkdir()
    with pytest.raises(ConfigError, match=r"the resume journal .*items.jsonl is not a file"):
        run(_toy(ITEMS, []), tmp_path, progress=False)


def test_a_resumed_run_keeps_the_record_of_the_runs_that_scored_its_items(
    tmp_path: Path, gateway: Gateway, scripted: Any
) -> None:
    """The same bench run twice: the second resumes every item and makes no call, and its results.json
    still names the models and prompts, and the calls and seconds, of the run that made them."""
    from halluscope.bench.mine import mine_plans
    from halluscope.bench.runner import run

    rows = [
        {"id": f"a{i}", "text": f"Paris has {i} bridges.", "question": "Where is Paris?", "label": i % 2}
        for i in range(4)
    ]
    model = scripted(lambda prompt, params: "Yes")
    first = run(mine_plans(rows, ["direct-question"], model, gateway)[0], tmp_path / "out", progress=False)
    again = run(mine_plans(rows, ["direct-question"], model, gateway)[0], tmp_path / "out", progress=False)
    assert first.meta.calls == 4 and again.meta.calls == 0 and again.meta.params["resumed_items"] == 4
    assert again.meta.models == first.meta.models and again.meta.prompts == first.meta.prompts
    assert again.meta.params["earlier_runs"]["calls"] == 4
    assert "before it, for the resumed items: 4 model calls" in again.meta.cost()
    third = run(mine_plans(rows, ["direct-question"], model, gateway)[0], tmp_path / "out", progress=False)
    assert third.meta.params["earlier_runs"]["calls"] == 4  # carried, not counted twice


def test_a_call_counting_bar_projects_its_total_from_the_items_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Methods announce their calls as they go, so the calls announced undercount the run: after each
    item the bar's total is the calls per finished item times the items (never shrinking), and its time
    left is an estimate from the first item on, not a total that keeps growing."""
    monkeypatch.setattr("tqdm.tqdm", CountingBar)
    BARS.clear()
    stats = CallStats()

    def score(item: int) -> dict[str, Any]:
        stats.plan(2)  # each item announces 2 calls when it starts, and makes them
        for _ in range(2):
            assert stats.on_reply is not None
            stats.on_reply()  # what a reply recorded does to the bar
        return {"scores": {"unit 0": float(item)}}

    plan = Plan(
        bench="t", method="m", what="item", items=list(range(4)), item_id=str, score=score,
        summarise=lambda records: {"n": len(records)}, params={}, report=lambda *_: None, stats=stats,
        counts_calls=True, bootstrap=False,
    )  # fmt: skip
    run(plan, tmp_path, progress=True)
    [bar] = BARS
    assert bar.totals == [8, 8, 8, 8]  # 2 calls an item x 4 items from the first item on (announced: 2, 4, 6, 8)
    assert bar.total == bar.n == 8  # at the end: the calls made
