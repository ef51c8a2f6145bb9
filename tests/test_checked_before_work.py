"""Checks before work, in every door (issue 56, parts 6 and 7): a hidden-state cache row that is not what
was written is read again and counted, never handed to a probe; `probe fit`, `choose` and `calibrate
--data` refuse what cannot work (an unwritable --out, one class, too few rows held out, a sample count
past the budget, a bad fold count, an unknown candidate, a negative budget) before their first call; a
probe that ranks no better than chance is refused unless forced; a candidate that cannot run is listed
with its reason; an unreadable judge verdict is counted and said on the verdict line."""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from halluscope.backends import readings
from halluscope.backends.gateway import Gateway
from halluscope.backends.logprobs import LogProbModel, Reading, TokenStat
from halluscope.backends.readings import UNREADABLE_STATES, _packed, _rounded, _state_rows
from halluscope.backends.stats import CallStats
from halluscope.errors import ConfigError
from tests.test_choose import answers, judge

WIDTH = 4


class Reader(LogProbModel):
    """A log-prob model that reads any text to fixed hidden states, counting its forward passes."""

    name = "test:reader"

    def __init__(self) -> None:
        self.reads = 0

    @property
    def width(self) -> int:
        return WIDTH

    def read(self, prompt: str, text: str, ends: Sequence[int], layers: Sequence[int]) -> Reading:
        self.reads += 1
        states = {layer: np.full((len(ends), WIDTH), float(layer), dtype=np.float32) for layer in layers}
        return Reading([TokenStat(0, -1.0, 1.0)], states)

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def score_many(self, prompt: str, continuations: Sequence[str]) -> list[float]:
        raise NotImplementedError

    def sample(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


def rows_of(layer_values: np.ndarray) -> dict[str, Any]:
    return _packed(_rounded(layer_values))


@pytest.mark.parametrize(
    "damage",
    [
        "nan",
        "infinity",
        "ends as strings",
        "narrower rows",
        "bytes cut short",
        "a layer of another dtype name",
    ],
)
def test_a_cache_row_that_is_not_what_was_written_is_read_again_and_counted(tmp_path: Path, damage: str) -> None:
    from halluscope.backends.cache import call_key, open_cache
    from halluscope.backends.readings import HIDDEN_STATES

    gateway = Gateway(cache=open_cache(str(tmp_path / "cache")))
    reader = Reader()
    stats = CallStats()
    readings.hidden_states(gateway, reader, "Q:", "Paris is in France.", [0, 19], [12], stats)
    assert reader.reads == 1
    messages = [{"role": "prompt", "content": "Q:"}, {"role": "text", "content": "Paris is in France."}]
    key = call_key(reader.name, {"read": HIDDEN_STATES}, messages, 0)
    entry = gateway.cache.get(key)
    good = np.full((2, WIDTH), 12.0, dtype=np.float32)
    if damage == "nan":
        entry["layers"]["12"] = rows_of(np.array([[np.nan] * WIDTH, [1.0] * WIDTH], dtype=np.float32))
    elif damage == "infinity":
        entry["layers"]["12"] = {
            "shape": [2, WIDTH],
            "float32": base64.b64encode(np.full((2, WIDTH), np.inf, "<f4").tobytes()).decode(),
        }
    elif damage == "ends as strings":
        entry["ends"] = ["0", "19"]
    elif damage == "narrower rows":
        entry["layers"]["12"] = rows_of(good[:, :2])
    elif damage == "bytes cut short":
        entry["layers"]["12"]["float16"] = entry["layers"]["12"]["float16"][:8]
    else:
        entry["layers"]["12"] = {"shape": [2, WIDTH], "float64": entry["layers"]["12"]["float16"]}
    gateway.cache.set(key, entry)
    stats = CallStats()
    found = readings.hidden_states(gateway, reader, "Q:", "Paris is in France.", [0, 19], [12], stats)
    assert reader.reads == 2 and np.array_equal(found[12], good)  # read again, not handed on
    assert stats.events == {UNREADABLE_STATES: 1}
    assert stats.meta("probe").events[UNREADABLE_STATES] == 1
    readings.hidden_states(gateway, reader, "Q:", "Paris is in France.", [0, 19], [12], stats)
    assert reader.reads == 2  # the row written again is read back


def test_a_well_written_row_reads_back_exactly() -> None:
    massive = np.array([[1.5, 70000.0], [2.0, -3.0]], dtype=np.float32)
    read = _state_rows({"ends": [3, 9], "layers": {"12": rows_of(massive)}}, 2)
    assert read is not None and read[0] == [3, 9] and np.array_equal(read[1][12], massive)


# ---------------------------------------------------------------- probe fit, before its first forward pass


def labelled_sentences(path: Path, rows: list[tuple[str, list[int]]]) -> Path:
    path.write_text(
        "".join(json.dumps({"id": f"r{i}", "text": t, "labels": y}) + "\n" for i, (t, y) in enumerate(rows))
    )
    return path


def test_probe_fit_refuses_an_unwritable_out_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from halluscope.cli import main

    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    data = labelled_sentences(tmp_path / "d.jsonl", [("Paris is in France.", [0]), ("Paris is in Spain.", [1])])
    code = main(
        [
            "probe",
            "fit",
            "--kind",
            "sentence",
            "--data",
            str(data),
            "--model",
            "local:nowhere",
            "--out",
            str(blocker / "p.json"),
        ]
    )
    assert code == 2 and "a-file is a file, not a folder" in capsys.readouterr().err


def test_probe_fit_refuses_one_class_and_a_held_out_share_of_one_class(tmp_path: Path) -> None:
    from halluscope.tune.probe_fit import Example, check_balance

    with pytest.raises(ConfigError, match="needs both labels"):
        check_balance([Example(f"g{i}", "t", None, ("t",), (0,)) for i in range(10)])
    two = [Example("g0", "t", None, ("t",), (0,)), Example("g1", "t", None, ("t",), (1,))]
    with pytest.raises(ConfigError, match="hold one label only: give more data"):
        check_balance(two)
    many = [Example(f"g{i}", "t", None, ("t", "u"), (0, 1)) for i in range(10)]
    check_balance(many)  # both labels on either side of the split


def test_a_sep_fit_past_the_call_limit_is_refused_before_any_call(tmp_path: Path) -> None:
    from halluscope.tune.probe_fit import ProbeFitSettings, fit

    questions = tmp_path / "q.txt"
    questions.write_text("Who wrote Hamlet?\n")
    with pytest.raises(ConfigError, match="n takes 1 to 9,999"):
        fit(ProbeFitSettings(kind="sep", data=str(questions), model="local:nowhere", n=1_000_000), Gateway(cache=None))


def test_a_probe_no_better_than_chance_is_refused_unless_forced(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from halluscope.tune import probe_fit as probes

    monkeypatch.setattr(probes, "read_states", _noise_states)
    monkeypatch.setattr(Gateway, "logprob_model", lambda self, model: _Named())
    data = labelled_sentences(tmp_path / "d.jsonl", [("Paris is in France. Lyon is in Spain.", [0, 1])] * 20)
    with pytest.raises(ConfigError, match=r"held-out AUC-ROC (is \d+\.\d|cannot be computed) \(chance is 50\)"):
        probes.fit(
            probes.ProbeFitSettings(kind="sentence", data=str(data), model="test:reader", layers=[3]),
            Gateway(cache=None),
        )
    fitted, _ = probes.fit(
        probes.ProbeFitSettings(kind="sentence", data=str(data), model="test:reader", layers=[3], force=True),
        Gateway(cache=None),
    )
    assert fitted.layer == 3


class _Named:
    name = "test:reader"
    file_hash = "0" * 64
    n_layers = 3


def _noise_states(examples: Sequence[Any], *args: Any) -> tuple[dict[int, np.ndarray], list[int], list[str], int]:
    """Rows whose features say nothing of their labels: a probe fitted on them ranks at chance."""
    labels = [y for ex in examples for y in ex.labels]
    groups = [ex.group for ex in examples for _ in ex.labels]
    return {3: np.zeros((len(labels), WIDTH))}, labels, groups, 0


def test_a_deeply_nested_probe_file_is_one_line(tmp_path: Path) -> None:
    from halluscope.probing import load_probe

    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ConfigError, match="its JSON nests too deeply"):
        load_probe(deep)


# ---------------------------------------------------------------- choose and calibrate, before their first call


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_calls_per_answer": -1}, "max_calls_per_answer takes a number of at least 0"),
        ({"methods": ["grounded", "groundd"]}, "unknown method 'groundd'"),
        ({"folds": 0}, "folds is between 2 and 20, got 0"),
        ({"folds": 50}, "folds is between 2 and 20, got 50"),
        ({"data": [{**row, "labels": [0, 0]} for row in answers()]}, "are labelled 0: a fit needs both"),
    ],
)
def test_choose_refuses_what_cannot_work_before_its_first_call(
    tmp_path: Path, gateway: Gateway, scripted: Any, kwargs: dict[str, Any], message: str
) -> None:
    from halluscope.tune.choose import ChooseSettings, choose

    asked: list[str] = []
    model = scripted(lambda prompt, params: asked.append(prompt) or judge(prompt, params))
    given = {"data": answers(), "methods": ["grounded"], **kwargs}
    with pytest.raises(ConfigError, match=message):  # the settings refuse some as they are made, choose the rest
        data = given.pop("data")
        choose(data, ChooseSettings(**given), tmp_path / "out", model=model, gateway=gateway, progress=False)
    assert asked == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"folds": 0}, "folds is between 2 and 20, got 0"),
        ({"folds": 50}, "folds is between 2 and 20, got 50"),
        ({"data": [{**row, "labels": [0, 0]} for row in answers()]}, "are labelled 0: a fit needs both"),
        ({"out": "BLOCKED/cal.json"}, "is a file, not a folder"),
    ],
)
def test_calibrate_refuses_what_cannot_work_before_its_first_call(
    tmp_path: Path, gateway: Gateway, scripted: Any, kwargs: dict[str, Any], message: str
) -> None:
    from halluscope.tune.calibrate import calibrate_labelled

    (tmp_path / "BLOCKED").write_text("a file where a folder should be")
    asked: list[str] = []
    model = scripted(lambda prompt, params: asked.append(prompt) or judge(prompt, params))
    given = {"data": answers(), "out": "cal.json", "folds": 3, **kwargs}
    with pytest.raises(ConfigError, match=message):
        calibrate_labelled(
            ["grounded"],
            given["data"],
            tmp_path / given["out"],
            model=model,
            gateway=gateway,
            folds=given["folds"],
            progress=False,
        )
    assert asked == []


def test_a_candidate_that_cannot_run_is_listed_and_the_others_go_on(
    tmp_path: Path, gateway: Gateway, scripted: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from halluscope.backends.budget import BudgetError
    from halluscope.tune import choose as choosing
    from halluscope.tune.choose import ChooseSettings

    real = choosing.run

    def run(plan: Any, folder: Path, progress: bool) -> Any:
        if plan.method == "direct-question":
            raise BudgetError("this run plans 99 model calls, more than the limit of 1")
        return real(plan, folder, progress)

    monkeypatch.setattr(choosing, "run", run)
    choice = choosing.choose(
        answers(),
        ChooseSettings(methods=["direct-question", "grounded"], folds=3),
        tmp_path,
        model=scripted(judge),
        gateway=gateway,
        progress=False,
    )
    rows = {c.name: c for c in choice.candidates}
    assert "BudgetError: this run plans 99 model calls" in (rows["direct-question"].skipped or "")
    assert choice.recommended == "grounded"


# ---------------------------------------------------------------- an unreadable verdict, counted and said


def test_an_unreadable_judge_verdict_is_counted_and_said_on_the_verdict_line(
    gateway: Gateway, scripted: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    import halluscope
    from halluscope.cli.detect import show_verdict

    model = scripted(lambda prompt, params: "Perhaps." if "Sydney" in prompt else "Yes")
    result = halluscope.check(
        "Canberra is the capital. It lies in Sydney.",
        context=["Canberra is the capital of Australia."],
        model=model,
        gateway=gateway,
    )
    assert result.meta.events.get("unparsed_verdict") == 1
    assert [u.parsed for u in result.units] == [True, False] and result.units[1].score == 0.5  # the paper's rule
    show_verdict(result, result.verdict, coloured=False)
    assert "1 scored from a reply the judge gave no readable verdict in" in capsys.readouterr().out
