"""Choosing a method for your case (issue 44, part 2): each candidate run on the labelled answers,
cross-validated by answer and costed; one that cannot run is listed with its reason; a stack is kept only
where it beats the best single; the recommendation respects the call budget and comes with an
operating point and its calibration file."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from halluscope.backends.gateway import Gateway
from halluscope.bench.runner import BenchResult
from halluscope.calibration import Calibration
from halluscope.cli import main
from halluscope.errors import ConfigError
from halluscope.tune.choose import ChooseSettings, choose
from tests.calibrations import line

CAPITALS = [
    ("Paris", "France"), ("Berlin", "Germany"), ("Rome", "Italy"), ("Madrid", "Spain"), ("Lisbon", "Portugal"),
    ("Vienna", "Austria"), ("Oslo", "Norway"), ("Athens", "Greece"), ("Dublin", "Ireland"), ("Warsaw", "Poland"),
    ("Prague", "Czechia"), ("Budapest", "Hungary"), ("Helsinki", "Finland"), ("Stockholm", "Sweden"),
    ("Copenhagen", "Denmark"),
]  # fmt: skip


def answers() -> list[dict[str, Any]]:
    """30 answers of two sentences, the second naming a wrong capital in half of them."""
    rng = random.Random(0)
    rows = []
    for i in range(30):
        city, country = CAPITALS[i % len(CAPITALS)]
        wrong = i % 2 == 1
        named = CAPITALS[(i + 3) % len(CAPITALS)][0] if wrong else city
        rows.append(
            {
                "id": f"a{i}",
                "text": f"{country} is a country in Europe. Its capital is {named}.",
                "question": f"Tell me about {country}.",
                "context": [f"{country} is a country in Europe. Its capital is {city}."],
                "samples": [f"{country} is in Europe, and its capital is {city}." for _ in range(3)],
                "labels": [0, int(wrong)],
            }
        )
    rng.shuffle(rows)
    return rows


def judge(prompt: str, _params: dict[str, Any]) -> str:
    """Grounded: Yes when the sentence's names are in the context. Direct Question: always Yes."""
    if "Context:" not in prompt:
        return "Yes"
    context = prompt.split("Context:", 1)[1].split("Question the sentence answers:", 1)[0]
    sentence = prompt.split("Sentence:", 1)[1].split("Is the sentence", 1)[0]
    names = [w.strip('."') for w in sentence.split() if w[:1].isupper() and w.strip('."') not in ("Its",)]
    return "Yes" if all(n in context for n in names) else "No"


def test_choose_ranks_the_candidates_and_recommends_within_the_budget(
    tmp_path: Path, gateway: Gateway, scripted: Any
) -> None:
    model = scripted(judge)
    methods = ["grounded", "direct-question", "selfcheck-unigram", "selfcheck-nli"]
    choice = choose(
        answers(),
        ChooseSettings(methods=methods, folds=3),
        tmp_path / "all",
        model=model,
        gateway=gateway,
        progress=False,
    )
    rows = {c.name: c for c in choice.candidates}
    assert "selfcheck-nli needs --opt judge=" in (rows["selfcheck-nli"].skipped or "")  # listed, not dropped
    assert rows["grounded"].auc_roc == 100.0 and rows["grounded"].calls_per_answer == 2.0
    assert rows["grounded"].costed_answers == 30 and rows["grounded"].raw_auc_roc == [100.0]
    assert rows["direct-question"].problems  # a judge that always says Yes ranks nothing: not eligible
    unigram = rows["selfcheck-unigram"]  # costed as it will run: the file's 3 samples are drawn when deployed
    assert unigram.calls_per_answer == 3.0 and unigram.draws_per_answer == 3
    assert choice.recommended == "grounded" and choice.operating_point is not None
    assert choice.operating_point["precision"] == 1.0 and choice.operating_point["recall"] == 1.0
    assert Calibration.load(tmp_path / "all" / "calibration.json").methods == ["grounded"]
    nested = choice.nested  # the selection held out: grounded is picked in every outer fold and stays perfect
    assert nested is not None and nested["picks"] == ["grounded"] * 3 and nested["auc_roc"] == 100.0
    assert (
        nested["optimism"] == 0.0
        and "Nested cross-validation (3 outer folds" in (tmp_path / "all" / "choose.md").read_text()
    )
    assert all("+" not in name for name in rows)  # no stack can beat the best single's 100: none is kept
    written = json.loads((tmp_path / "all" / "choose.json").read_text())
    assert written["recommended"] == "grounded" and (tmp_path / "all" / "choose.md").is_file()
    budget = ChooseSettings(methods=methods, folds=3, max_calls_per_answer=1)
    cheap = choose(answers(), budget, tmp_path / "cheap", model=model, gateway=gateway, progress=False)
    assert {c.name: c.over_budget for c in cheap.candidates} == {
        "grounded": True, "direct-question": True, "selfcheck-unigram": True, "selfcheck-nli": False
    }  # fmt: skip  # selfcheck-nli did not run
    assert cheap.recommended is None  # the file's samples do not make selfcheck-unigram free
    again = choose(
        answers(),
        ChooseSettings(methods=["grounded"], folds=3),
        tmp_path / "all",
        model=model,
        gateway=gateway,
        progress=False,
    )
    [resumed] = again.candidates  # every answer resumed from the journal: its costs are those the first run kept
    assert resumed.auc_roc == 100.0 and resumed.costed_answers == 30 and resumed.calls_per_answer == 2.0


def test_choose_on_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "answers.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in answers()))
    argv = ["choose", "--data", str(data), "--method", "selfcheck-unigram,selfcheck-nli", "--folds", "3"]
    assert main([*argv, "--out", str(tmp_path / "out"), "--target-recall", "0.9"]) == 0
    printed = capsys.readouterr().out
    assert "| selfcheck-unigram |" in printed and "selfcheck-nli needs --opt judge=" in printed
    assert "Recommended: **selfcheck-unigram**" in printed and "Operating point for recall 0.9" in printed
    assert (tmp_path / "out" / "calibration.json").is_file()


def test_a_stack_pays_for_every_member_each_over_the_answers_its_runs_scored() -> None:
    from halluscope.tune.choose import Spent, costs

    grounded = Spent(answers=246, calls=246, sent=246, prompt_tokens=24_600, seconds=492.0)  # 31 resumed elsewhere
    dq = Spent(answers=277, calls=277, sent=277, prompt_tokens=13_850, seconds=277.0)
    stacked = costs([grounded, dq])
    assert stacked["calls_per_answer"] == pytest.approx(2.0)  # 1 + 1, not (246 + 277) / 246
    assert stacked["prompt_tokens_per_answer"] == pytest.approx(100 + 50)
    assert stacked["seconds_per_answer"] == pytest.approx(2.0 + 1.0) and stacked["costed_answers"] == 246
    no_model = Spent(answers=10, calls=0, sent=0, seconds=2.0)  # SelfCheck-Unigram: no tokens, its own seconds
    assert costs([grounded, no_model])["prompt_tokens_per_answer"] == pytest.approx(100)
    assert costs([no_model])["seconds_per_answer"] == pytest.approx(0.2)
    replayed = Spent(answers=10, calls=20, sent=0, replayed_tokens=1_000, replayed_seconds=30.0)  # an earlier run's
    assert costs([replayed]) == {
        "calls_per_answer": 2.0, "prompt_tokens_per_answer": 100.0, "seconds_per_answer": 3.0, "costed_answers": 10
    }  # fmt: skip  # priced by what the cached calls cost when they were made
    older = Spent(answers=10, calls=20, sent=0, replayed_tokens=1_000, replayed_untimed=20)  # a cache kept no seconds
    assert costs([older])["seconds_per_answer"] is None and costs([older])["prompt_tokens_per_answer"] == 100.0


def test_choose_after_bench_mine_prices_the_calls_bench_mine_made(
    tmp_path: Path, gateway: Gateway, scripted: Any
) -> None:
    """The order the docs give (bench mine, then choose on the same cache): choose sends no call, and
    still gives each candidate's tokens and seconds an answer, from the cached calls' own records."""
    from halluscope.bench.mine import mine_plans
    from halluscope.bench.runner import run

    model = scripted(judge)
    run(mine_plans(answers(), ["grounded"], model, gateway)[0], tmp_path / "mine", progress=False)
    choice = choose(
        answers(),
        ChooseSettings(methods=["grounded"], folds=3),
        tmp_path / "choose",
        model=model,
        gateway=gateway,
        progress=False,
    )
    [grounded] = choice.candidates
    assert (
        grounded.calls_per_answer == 2.0 and grounded.prompt_tokens_per_answer and grounded.prompt_tokens_per_answer > 0
    )
    assert grounded.seconds_per_answer is not None


def test_answers_of_one_group_are_held_out_and_resampled_together(
    tmp_path: Path, gateway: Gateway, scripted: Any
) -> None:
    """TruthfulQA's answers come from questions: a labelled file's ``group`` column keeps one question's
    answers in one fold and resamples them together, so the intervals are not those of independent answers."""
    from halluscope.bench import mine
    from halluscope.bench.runner import run
    from halluscope.labelled import load_labelled
    from halluscope.tune.calibrate import Split, answer_folds

    rows = [{**row, "group": f"q{i // 3}"} for i, row in enumerate(answers())]  # 10 questions of three answers
    labelled = load_labelled(rows)
    assert labelled.rows[0].group == "q0"
    [plan] = mine.mine_plans(labelled, ["grounded"], scripted(judge), gateway)
    result = run(plan, tmp_path / "mine", False)
    assert all(item.record["group"].startswith("q") for item in result.items)
    split = Split.of_answers(["grounded"], [result], per_sentence=True)
    assert set(split.groups.tolist()) == {f"q{g}" for g in range(10)}
    folds = answer_folds(split.groups, 3)
    for group in set(split.groups.tolist()):
        assert len(set(folds[split.groups == group].tolist())) == 1  # a question's answers in one fold
    with pytest.raises(Exception, match="more than the 10 answers"):
        choose(
            rows,
            ChooseSettings(methods=["grounded"], folds=11),
            tmp_path / "c",
            model=scripted(judge),
            gateway=gateway,
            progress=False,
        )


# ---------------------------------------------------------------- from choice to guard (issue 59, part 1)


def test_a_stacked_calibration_runs_every_member_as_it_was_fitted(
    tmp_path: Path, gateway: Gateway, scripted: Any
) -> None:
    """check(calibration=FILE) with no method runs the stack: grounded with the top_k it was fitted with,
    selfcheck-unigram on as many drawn samples as the file gave it (3), the verdict at the file's threshold."""
    import halluscope
    from halluscope.tune.calibrate import calibrate_labelled

    model = scripted(judge)
    cal = calibrate_labelled(
        ["grounded", "selfcheck-unigram"], answers(), tmp_path / "cal.json", model=model, gateway=gateway,
        folds=3, options={"top_k": 1}, progress=False, force=True,
    )  # fmt: skip
    assert cal.settings["grounded"]["top_k"] == 1 and cal.settings["selfcheck-unigram"]["n"] == 3
    assert cal.threshold == cal.report["threshold"]
    documents = ["France is a country in Europe.", "Its capital is Paris.", "Paris lies on the Seine."]
    result = halluscope.check(
        "France is a country in Europe. Its capital is Rome.", context=documents, question="Tell me about France.",
        calibration=tmp_path / "cal.json", model=model, gateway=gateway,
    )  # fmt: skip
    assert result.method == "ensemble" and result.error is None
    assert all(u.probability is not None for u in result.units)
    assert set(result.units[0].evidence["scores"]) == {"grounded", "selfcheck-unigram"}
    assert result.meta.params["sample_draws"] == 1
    assert result.meta.calls == 2 + 3  # top_k=1: one grounded call a sentence (not one per chunk), 3 samples drawn
    verdict = result.verdict
    assert verdict is not None and verdict.threshold == cal.threshold
    rare = halluscope.check(
        "France is a country in Europe. Its capital is Rome.", context=documents, question="Tell me about France.",
        calibration=cal, model=model, gateway=gateway, prior=0.05,
    )  # fmt: skip  # a stack takes a prior too; its threshold moves with its probabilities
    assert rare.verdict is not None and rare.verdict.threshold == cal.with_prior(0.05).decides_at()
    with pytest.raises(ConfigError, match="fitted for grounded\\+selfcheck-unigram, not grounded: leave the method"):
        halluscope.check("A b.", context=documents, calibration=cal, method="grounded", model=model, gateway=gateway)


def test_a_single_methods_calibration_runs_with_its_options_and_threshold(
    tmp_path: Path, gateway: Gateway, scripted: Any
) -> None:
    import halluscope
    from halluscope.tune.calibrate import calibrate_labelled

    model = scripted(judge)
    cal = calibrate_labelled(
        ["grounded"], answers(), tmp_path / "cal.json", model=model, gateway=gateway, folds=3,
        options={"top_k": 1}, progress=False, force=True,
    )  # fmt: skip
    documents = ["France is a country in Europe.", "Its capital is Paris.", "Paris lies on the Seine."]
    result = halluscope.check(
        "France is a country in Europe. Its capital is Rome.", context=documents, calibration=cal, model=model,
        gateway=gateway,
    )  # fmt: skip
    assert result.method == "grounded" and result.meta.calls == 2  # top_k=1 as fitted
    assert result.verdict is not None and result.verdict.threshold == cal.threshold
    given = halluscope.check(
        "France is a country in Europe. Its capital is Rome.", context=documents, calibration=cal, model=model,
        gateway=gateway, threshold=0.99,
    )  # fmt: skip
    assert given.verdict is not None and given.verdict.threshold == 0.99  # a threshold given wins


@pytest.mark.slow
def test_choose_prints_a_use_it_command_that_runs_as_printed(tmp_path: Path) -> None:
    """choose on a small labelled file with SmolLM2, then its `use it:` line run as printed (with what it
    says it needs beside the answer): the pick's probabilities and its verdict come back."""
    import os
    import shlex
    import subprocess
    import sys

    data = tmp_path / "answers.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in answers()))
    env = {**os.environ, "HALLUSCOPE_CACHE_DIR": str(tmp_path / "cache")}
    argv = [sys.executable, "-m", "halluscope.cli", "choose", "--data", str(data), "--folds", "3"]
    argv += ["--method", "selfcheck-unigram", "--model", "local:smollm2-135m", "--out", str(tmp_path / "out")]
    chose = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
    assert chose.returncode == 0, chose.stderr
    [line] = [x for x in chose.stdout.splitlines() if x.startswith("use it: ")]
    command = line.removeprefix("use it: ")
    assert command == f"halluscope check --calibration {shlex.quote(str(tmp_path / 'out' / 'calibration.json'))}"
    assert "--question TEXT" in chose.stdout  # the rows carried it, and the samples are drawn from it
    assert "--context-file" not in chose.stdout  # the rows carried documents too, but the pick reads none
    needs = ["--question", "Tell me about France.", "--json"]
    ran = subprocess.run(
        [sys.executable, "-m", "halluscope.cli", *shlex.split(command)[1:], *needs],
        input="France is a country in Europe. Its capital is Rome.", capture_output=True, text=True, env=env,
        timeout=600,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    result = json.loads(ran.stdout)
    cal = Calibration.load(tmp_path / "out" / "calibration.json")
    assert result["method"] == "selfcheck-unigram" and all(u["probability"] is not None for u in result["units"])
    assert result["verdict"]["threshold"] == (cal.threshold if cal.threshold is not None else 0.5)
    assert result["meta"]["params"]["n"] == 3  # as many samples drawn as the file gave each answer


def test_detect_with_a_calibration_decides_at_its_threshold(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fitted = line("selfcheck-unigram", (0.0, 10.0), (0.1, 0.9), threshold=0.3).save(tmp_path / "calibration.json")
    samples = tmp_path / "samples.json"
    samples.write_text(json.dumps(["Paris is the capital of France."] * 3))
    argv = ["detect", "selfcheck-unigram", "--text", "Paris is the capital of France. It lies in Peru."]
    assert main([*argv, "--samples-file", str(samples), "--calibration", str(fitted), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["verdict"]["threshold"] == 0.3 and result["verdict"]["on"] == "probability"
    assert (
        main([*argv, "--samples-file", str(samples), "--calibration", str(fitted), "--json", "--threshold", "0.8"]) == 0
    )
    assert json.loads(capsys.readouterr().out)["verdict"]["threshold"] == 0.8


def test_the_operating_point_says_what_a_guard_at_it_does() -> None:
    """Base rate, precision, recall and false-positive rate (intervals resampling answers), the shares of
    units and answers flagged and the confusion matrix, worked by hand on six units of three answers."""
    import numpy as np

    from halluscope.tune.choose import operating_point

    y = np.array([1, 0, 1, 0, 0, 1])
    p = np.array([0.9, 0.8, 0.7, 0.2, 0.1, 0.3])
    groups = np.array(["a", "a", "b", "b", "c", "c"])
    point = operating_point(y, p, groups, "recall", 2 / 3)
    assert point["threshold"] == 0.7  # the highest threshold that still finds 2 of the 3 hallucinations
    assert point["confusion"] == {"true_positive": 2, "false_positive": 1, "false_negative": 1, "true_negative": 2}
    assert point["precision"] == pytest.approx(2 / 3) and point["recall"] == pytest.approx(2 / 3)
    assert point["false_positive_rate"] == pytest.approx(1 / 3) and point["base_rate"] == 0.5
    assert point["flagged_units"] == 0.5 and point["flagged_answers"] == pytest.approx(2 / 3)  # answers a and b
    low, high = point["intervals"]["precision"]
    assert 0 <= low <= 2 / 3 <= high <= 1
    from halluscope.tune.choose import guard_line

    assert "flags 50% of the sentences and 67% of the answers (2 true" in guard_line(point, "sentences")
    assert "flags 50% of the answers (2 true" in guard_line(point, "answers")  # said once, not twice


def test_choose_and_calibrate_take_the_first_k_answers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "answers.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in answers()))
    argv = ["choose", "--data", str(data), "--method", "selfcheck-unigram", "--folds", "3", "--limit", "12", "--json"]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 0
    assert json.loads(capsys.readouterr().out)["answers"] == 12
    calibrate = ["calibrate", "--data", str(data), "--method", "selfcheck-unigram", "--folds", "3", "--limit", "12"]
    assert main([*calibrate, "--out", str(tmp_path / "cal.json"), "--force", "--json"]) == 0
    assert Calibration.load(tmp_path / "cal.json").data["answers"] == 12
    assert main(["calibrate", "--data", str(tmp_path), "--method", "selfcheck-unigram", "--limit", "3"]) == 2
    assert "--limit-passages" in capsys.readouterr().err


def test_from_calibration_is_the_detector_the_file_describes(tmp_path: Path, gateway: Gateway, scripted: Any) -> None:
    """The guard's way to the pick: from_calibration(FILE) runs its method with the options it was fitted
    with (top_k=1: one call a sentence against three chunks), and detector(calibration=FILE) fills them too."""
    import halluscope
    from halluscope.tune.calibrate import calibrate_labelled

    model = scripted(judge)
    calibrate_labelled(
        ["grounded"], answers(), tmp_path / "cal.json", model=model, gateway=gateway, folds=3,
        options={"top_k": 1}, progress=False, force=True,
    )  # fmt: skip
    documents = ["France is a country in Europe.", "Its capital is Paris.", "Paris lies on the Seine."]
    answer = "France is a country in Europe. Its capital is Rome."
    for det in (
        halluscope.from_calibration(tmp_path / "cal.json", model, gateway=gateway),
        halluscope.detector("grounded", model, tmp_path / "cal.json", gateway=gateway),
    ):
        result = det.detect(text=answer, context=documents)  # the second replays the first's calls
        assert result.method == "grounded" and result.units[1].probability is not None
        assert result.meta.calls + result.meta.cache_hits == 2  # top_k=1 as fitted: not one call per chunk


def test_a_candidate_with_its_own_judge_is_chosen_among_the_others_and_deployed_on_it(
    tmp_path: Path, gateway: Gateway, scripted: Any
) -> None:
    """'grounded[model=nli:DIR]' (a fitted checker) runs beside the LLM candidates with its own judge
    (the run's model does not replace it), and its calibration runs on that judge: no LLM call."""
    import halluscope
    from halluscope.tune.calibrate import calibrate_labelled
    from tests.tiny_nli import build_tiny_nli

    words = " ".join(
        sorted({w.strip(".").lower() for r in answers() for t in (r["text"], *r["context"]) for w in t.split()})
    )
    (tmp_path / "checker").mkdir()
    checker = build_tiny_nli(tmp_path / "checker", words, {0: "entailment", 1: "contradiction"})
    own = f"grounded[model=nli:{checker}]"
    calls: list[str] = []
    model = scripted(lambda prompt, params: calls.append(prompt) or judge(prompt, params))
    choice = choose(
        answers(),
        ChooseSettings(methods=["grounded", own], folds=3),
        tmp_path / "c",
        model=model,
        gateway=gateway,
        progress=False,
    )
    rows = {c.name: c for c in choice.candidates}
    assert set(rows) >= {"grounded", own} and rows[own].auc_roc is not None and not rows[own].skipped
    folder = tmp_path / "c" / "runs" / own.replace("/", "_").replace("[", "_").replace("]", "_")
    assert BenchResult.read(folder).meta.models == [f"nli:{checker}"]  # its own judge, not the run's model
    assert BenchResult.read(tmp_path / "c" / "runs" / "grounded").meta.models == ["scripted:test"]
    asked = len(calls)
    cal = calibrate_labelled(
        [own], answers(), tmp_path / "cal.json", model=model, gateway=gateway, folds=3, progress=False, force=True
    )
    assert cal.model == f"nli:{checker}" and cal.methods == [own]
    result = halluscope.check(
        "France is a country in Europe. Its capital is Rome.", context=["France's capital is Paris."],
        calibration=cal, gateway=gateway,
    )  # fmt: skip
    assert result.method == "grounded" and result.meta.models == [f"nli:{checker}"] and len(calls) == asked
    with pytest.raises(ConfigError, match=r"'nope=1' is not KEY=VALUE of one of its options"):
        choose(
            answers(),
            ChooseSettings(methods=["grounded[nope=1]"]),
            tmp_path / "d",
            model=model,
            gateway=gateway,
            progress=False,
        )


def test_a_cascade_of_the_checker_and_the_judge_is_a_candidate_scored_as_the_cascade_scores(
    tmp_path: Path, gateway: Gateway, scripted: Any
) -> None:
    """With a fitted checker and the LLM judge among the candidates, choose lists their cascade: its band
    holds the asked share of the checker's scores nearest 0.5 (no label read), each unit scored as the
    cascade itself scores it (the judge's score in the band, the checker's elsewhere), its costs the
    checker's plus that share of the judge's; its calibration runs the cascade."""
    import halluscope
    from halluscope.bench import mine
    from halluscope.bench.runner import run
    from halluscope.labelled import load_labelled
    from halluscope.tune.calibrate import calibrate_labelled
    from tests.tiny_nli import build_tiny_nli

    words = " ".join(
        sorted({w.strip(".").lower() for r in answers() for t in (r["text"], *r["context"]) for w in t.split()})
    )
    (tmp_path / "checker").mkdir()
    checker = build_tiny_nli(tmp_path / "checker", words, {0: "entailment", 1: "contradiction"})
    own = f"grounded[model=nli:{checker}]"
    model = scripted(judge)
    choice = choose(
        answers(),
        ChooseSettings(methods=["grounded", own], folds=3, cascade_share=0.5),
        tmp_path / "c",
        model=model,
        gateway=gateway,
        progress=False,
    )
    rows = {c.name: c for c in choice.candidates}
    [name] = [n for n in rows if n.startswith(f"grounded[fast=nli:{checker};band=")]
    row = rows[name]
    assert row.auc_roc is not None and not row.skipped and "units" in row.notes[0], row
    own_folder = own.replace("/", "_").replace("[", "_").replace("]", "_")
    fast = {i.id: i for i in BenchResult.read(tmp_path / "c" / "runs" / own_folder).items}
    slow = {i.id: i for i in BenchResult.read(tmp_path / "c" / "runs" / "grounded").items}
    low, high = (float(v) for v in name.rsplit("band=", 1)[1].rstrip("]").split(","))
    scores = [s for i in fast.values() for s in i.scores.values()]
    inside = sum(low <= s <= high for s in scores)
    assert inside >= len(scores) / 2 and low <= 0.5 <= high
    assert f"{inside} of {len(scores)} units" in row.notes[0]

    labelled = load_labelled(answers())
    [plan] = mine.mine_plans(labelled, [name], model, gateway)
    itself = run(plan, tmp_path / "itself", False)  # the cascade run for real, on the same answers
    for item in itself.items:
        expected = {k: slow[item.id].scores[k] if low <= s <= high else s for k, s in fast[item.id].scores.items()}
        assert item.scores == pytest.approx(expected), item.id
    assert itself.meta.calls + itself.meta.cache_hits == inside  # one chunk an answer: a call an escalated unit
    share = inside / len(scores)
    assert row.calls_per_answer == pytest.approx(rows[own].calls_per_answer + share * rows["grounded"].calls_per_answer)

    cal = calibrate_labelled(
        [name], answers(), tmp_path / "cal.json", model=model, gateway=gateway, folds=3, progress=False, force=True
    )
    result = halluscope.check(
        "France is a country in Europe. Its capital is Rome.",
        context=["France is a country in Europe. Its capital is Paris."],
        calibration=cal,
        model=model,
        gateway=gateway,
    )
    assert "escalated" in result.units[0].evidence and result.meta.params["band"] == [low, high]
    with pytest.raises(ConfigError, match="cascade_share lies between 0 and 1"):
        ChooseSettings(methods=["grounded"], cascade_share=1.5)


def test_the_command_line_sets_the_cascades_share_or_turns_them_off(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "answers.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in answers()), encoding="utf-8")
    assert main(["choose", "--data", str(data), "--method", "grounded", "--cascade-share", "2"]) == 2
    assert "--cascade-share lies between 0 and 1, got 2.0" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # argparse refuses the two together
        main(["choose", "--data", str(data), "--method", "grounded", "--cascade-share", "0.2", "--no-cascades"])
    assert "not allowed with argument --cascade-share" in capsys.readouterr().err


def test_a_cascades_band_holds_the_share_of_checker_scores_nearest_one_half() -> None:
    """Worked by hand: of 0.1, 0.45, 0.52, 0.6, 0.9 the two nearest 0.5 are 0.52 and 0.45, the third 0.6;
    the ends widen to four places so the band the name prints holds what was scored; a band given as text
    (a bracketed option) is the setting a run records as numbers."""
    from halluscope.tune.cascades import band_for_share

    scores = [0.1, 0.45, 0.52, 0.6, 0.9]
    assert band_for_share(scores, 0.4) == (0.45, 0.52)
    assert band_for_share(scores, 0.6) == (0.45, 0.6)
    assert band_for_share(scores, 0.0) == (0.5, 0.5)
    assert band_for_share([0.123456, 0.9], 0.5) == (0.1234, 0.5)
    settings = {"grounded": {"band": "0.2,0.8"}}
    calibration = Calibration(
        kind="isotonic", methods=["grounded"], model=None, prompts=[], params={}, settings=settings
    )
    assert calibration.mismatches({"band": [0.2, 0.8]}) == {}
    assert calibration.mismatches({"band": [0.2, 0.7]}) == {"band": ("0.2,0.8", [0.2, 0.7])}


def test_bracketed_candidates_keep_their_commas_on_the_command_line() -> None:
    from halluscope.cli import build_parser

    args = build_parser().parse_args(
        ["choose", "--data", "x.jsonl", "--method", "grounded[model=nli:a,b;top_k=1],selfcheck-unigram"]
    )
    assert args.method == ["grounded[model=nli:a,b;top_k=1]", "selfcheck-unigram"]


def test_choose_picks_the_cheapest_with_no_detectable_difference_and_a_stack_must_add() -> None:
    import numpy as np

    from halluscope.tune.choose import Candidate, Fitted, _costed_against, cheapest_tied, paired_against

    rng = np.random.default_rng(0)
    labels = rng.random(400) < 0.5
    groups = np.arange(400) // 2  # two units an answer: resampled together
    signal = labels + rng.normal(0, 1.0, 400)
    scores = {
        "dear": signal + rng.normal(0, 0.05, 400),  # the best by a hair, five times the cost
        "cheap": signal + rng.normal(0, 0.05, 400),
        "chance": rng.random(400),  # the cheapest, and detectably worse
    }
    plain = Calibration(kind="isotonic", methods=["x"], model=None, prompts=[], params={})
    fitted = {n: Fitted(plain, labels, p, groups) for n, p in scores.items()}
    from halluscope.metrics import auc_roc

    auc = {n: 100 * float(auc_roc(labels, p)) for n, p in scores.items()}  # type: ignore[arg-type]
    cost = {"dear": 5.0, "cheap": 1.0, "chance": 0.0}

    def tied(top: str, name: str) -> bool:
        found = paired_against(fitted, top, name)
        return found is not None and found.verdict() != "met"

    pick, best = cheapest_tied(list(scores), auc, cost, tied)
    assert best == max(auc, key=auc.__getitem__) and pick == "cheap"
    assert paired_against(fitted, best, "chance").verdict() == "met"  # type: ignore[union-attr]

    stacked = Calibration(
        kind="stacked", methods=["cheap", "chance"], model=None, prompts=[],
        params={"coef": [1.0, -0.2], "intercept": 0.0, "cap": {"cheap": 1.0, "chance": 1.0}},
    )  # fmt: skip
    fitted["cheap+chance"] = Fitted(stacked, labels, scores["cheap"] + rng.normal(0, 0.01, 400), groups)
    row = _costed_against(
        Candidate("cheap+chance", ["cheap", "chance"], auc_roc=auc["cheap"] + 0.1, calls_per_answer=1.0),
        Candidate("cheap", ["cheap"], auc_roc=auc["cheap"], calls_per_answer=0.5),
        fitted,
    )
    assert "costs 1.00 calls an answer against 0.50 for cheap alone, 2.0x" in row.notes
    assert any("chance weighs negatively" in p for p in row.problems)
    assert any(p.startswith("no detectable gain over cheap alone") for p in row.problems)
