"""A user's own labelled answers (issue 44, part 1): one loader for CSV, JSON Lines, a DataFrame and rows,
every file that does not fit refused in one line naming the row and the column, and `bench mine`
scoring any method on them like every bench (metrics equal to scikit-learn's, items.csv, resume)."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import auc, precision_recall_curve, roc_auc_score

from halluscope.backends.gateway import Gateway
from halluscope.bench import mine
from halluscope.bench.runner import BenchResult, run
from halluscope.cli import main
from halluscope.errors import ConfigError
from halluscope.labelled import load_labelled
from tests.scripts import load_script

ROWS: list[dict[str, Any]] = [
    {
        "id": "paris-true",
        "text": "Paris is the capital of France. It lies on the Seine.",
        "question": "Where is Paris?",
        "context": ["Paris, the capital of France, lies on the Seine."],
        "samples": ["Paris is the capital of France, on the Seine.", "The Seine runs through Paris, France's capital."],
        "labels": [0, 0],
    },
    {
        "id": "paris-false",
        "text": "Paris is the capital of Spain. It lies on the Thames.",
        "question": "Where is Paris?",
        "context": ["Paris, the capital of France, lies on the Seine."],
        "samples": ["Paris is the capital of France.", "Paris lies on the Seine in France."],
        "labels": [1, 1],
    },
    {
        "id": "rome-mixed",
        "text": "Rome is the capital of Italy. It lies on the Danube.",
        "question": "Where is Rome?",
        "context": ["Rome, the capital of Italy, lies on the Tiber."],
        "samples": ["Rome is Italy's capital, on the Tiber.", "The Tiber flows through Rome, capital of Italy."],
        "labels": [0, 1],
    },
]


def write_csv(path: Path, rows: list[dict[str, Any]]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        for row in rows:
            writer.writerow({k: json.dumps(v) if isinstance(v, list) else v for k, v in row.items()})
    return path


def test_a_csv_jsonl_dataframe_and_rows_load_alike(tmp_path: Path) -> None:
    jsonl = tmp_path / "answers.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    loaded = [
        load_labelled(write_csv(tmp_path / "answers.csv", ROWS)),
        load_labelled(str(jsonl)),
        load_labelled(pd.DataFrame(ROWS)),
        load_labelled(ROWS),
    ]
    for data in loaded:
        assert [r.id for r in data.rows] == ["paris-true", "paris-false", "rome-mixed"]
        assert data.rows[2].labels == (0, 1) and data.rows[2].answer_label == 1 and data.per_sentence
        assert data.rows[0].inputs["samples"] == ROWS[0]["samples"]
        assert data.rows[1].units == ["Paris is the capital of Spain.", "It lies on the Thames."]
    answer_level = load_labelled([{"text": "One. Two.", "label": "1"}, {"text": "Three.", "label": 0}])
    assert [r.answer_label for r in answer_level.rows] == [1, 0] and not answer_level.per_sentence
    assert [r.id for r in answer_level.rows] == ["0", "1"]  # no id column: the row's position


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([{"text": "One. Two."}], r"the rows, row 1: no label: give 'label'"),
        (
            [{"text": "One. Two.", "labels": [0]}],
            r"row 1, column labels: 1 labels for 2 sentences \('One\.'; 'Two\.'\)",
        ),
        ([{"text": "One.", "labels": [2]}], r"row 1, column labels: a label is 0 \(supported\) or 1"),
        ([{"text": "One.", "label": "yes"}], r"row 1, column label: a label is 0"),
        ([{"text": "One.", "labels": []}], r"row 1, column labels: a JSON list of 0/1"),
        ([{"question": "Q?", "labels": [1]}], r"row 1, column labels: label a 'text'"),
        ([{"text": "One.", "label": 0, "labels": [1]}], r"row 1: label 0 disagrees with labels \[1\]"),
        ([{"id": "a", "text": "X.", "label": 0}, {"id": "a", "text": "Y.", "label": 1}], r"id 'a' names two rows"),
        ([], r"the rows holds no rows"),
    ],
)
def test_rows_that_do_not_fit_are_one_line_naming_the_row_and_column(rows: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_labelled(rows)


def test_files_that_do_not_fit_name_the_file_row_and_column(tmp_path: Path) -> None:
    bad_cell = tmp_path / "bad.csv"
    bad_cell.write_text('text,samples,label\n"One.","[not json",1\n')
    with pytest.raises(ConfigError, match=r"bad.csv, row 1, column samples: not a JSON array"):
        load_labelled(str(bad_cell))
    bad_line = tmp_path / "bad.jsonl"
    bad_line.write_text('{"text": "One.", "label": 1}\n[1, 2]\n')
    with pytest.raises(ConfigError, match=r"bad.jsonl, line 2: a row is a JSON object"):
        load_labelled(str(bad_line))
    with pytest.raises(ConfigError, match=r"give a .csv or .jsonl file"):
        load_labelled(str(tmp_path / "answers.txt"))


def test_bench_mine_scores_a_method_on_your_rows_with_sklearns_metrics(tmp_path: Path) -> None:
    [plan] = mine.mine_plans(write_csv(tmp_path / "answers.csv", ROWS), ["selfcheck-unigram"])
    result = run(plan, tmp_path / "out", progress=False)
    assert result.metrics["n_answers"] == 3 and result.metrics["n_hallucinated"] == 2
    units = [
        (v == "1", s) for item in result.items for v, s in zip(item.record["labels"], item.scores.values(), strict=True)
    ]
    y, s = np.array([u[0] for u in units]), np.array([u[1] for u in units])
    assert result.metrics["sentence_auc_roc"] == pytest.approx(roc_auc_score(y, s) * 100)
    precision, recall, _ = precision_recall_curve(y, s)
    assert result.metrics["sentence_auc_pr"] == pytest.approx(auc(recall, precision) * 100)  # the WikiBio protocol's
    riskiest = [max(item.scores.values()) for item in result.items]
    assert result.metrics["answer_auc_roc"] == pytest.approx(roc_auc_score([0, 1, 1], riskiest) * 100)
    assert set(result.intervals) >= {"answer_auc_roc", "sentence_auc_roc"}
    rows = list(csv.DictReader((tmp_path / "out" / "items.csv").open(encoding="utf-8")))
    assert [r["text"] for r in rows[:2]] == ["Paris is the capital of France.", "It lies on the Seine."]
    assert [r["label"] for r in rows] == ["0", "0", "1", "1", "0", "1"]
    again = run(plan, tmp_path / "out", progress=False)  # resumed from the journal, nothing scored again
    assert again.metrics == result.metrics and BenchResult.read(tmp_path / "out").metrics == result.metrics


def judge(prompt: str, _params: dict[str, Any]) -> str:
    """A scripted grounded judge: a sentence is supported when each of its names is in the context
    (Direct Question, with no context: Yes)."""
    if "Context:" not in prompt:
        return "Yes"
    context = prompt.split("Context:", 1)[1].split("Question the sentence answers:", 1)[0]
    sentence = prompt.split("Sentence:", 1)[1].split("Is the sentence", 1)[0]
    names = [w.strip('."') for w in sentence.split() if w[:1].isupper() and w.strip('."') not in ("It",)]
    return "Yes" if all(name in context for name in names) else "No"


def test_each_column_reaches_the_method_under_its_own_name(tmp_path: Path, gateway: Gateway, scripted: Any) -> None:
    """'context' is grounded's documents, 'question' Direct Question's prompt: the same file serves both."""
    seen: list[str] = []

    def respond(prompt: str, params: dict[str, Any]) -> str:
        seen.append(prompt)
        return judge(prompt, params)

    model = scripted(respond)
    path = write_csv(tmp_path / "answers.csv", ROWS)
    grounded_plan, dq_plan = mine.mine_plans(path, ["grounded", "direct-question"], model=model, gateway=gateway)
    result = run(grounded_plan, tmp_path / "g", progress=False)
    assert [list(i.scores.values()) for i in result.items] == [[0.0, 0.0], [1.0, 1.0], [0.0, 1.0]]
    assert result.metrics["sentence_auc_roc"] == 100.0 and result.meta.calls == 6
    assert any("Rome, the capital of Italy, lies on the Tiber." in p for p in seen)
    run(dq_plan, tmp_path / "dq", progress=False)
    assert any("Where is Rome?" in p for p in seen[6:])  # the question column as DQ's prompt


def test_a_method_that_cannot_run_on_the_rows_is_refused_before_any_call(tmp_path: Path) -> None:
    no_context = [{k: v for k, v in row.items() if k != "context"} for row in ROWS]
    with pytest.raises(ConfigError, match=r"the rows, row 1 \(id paris-true\): grounded needs a 'context' column"):
        mine.mine_plans(no_context, ["grounded"], model="local:smollm2-135m")
    with pytest.raises(ConfigError, match=r"selfcheck-nli needs --opt judge="):
        mine.mine_plans(ROWS, ["selfcheck-nli"])


def test_bench_mine_on_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_csv(tmp_path / "answers.csv", ROWS)
    out = tmp_path / "out"
    assert main(["bench", "mine", "--data", str(path), "--method", "selfcheck-unigram", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "answer AUC-ROC" in printed and "sentence AUC-ROC" in printed
    assert (out / "report.md").is_file() and (out / "report.html").is_file() and (out / "roc.png").is_file()
    curves = json.loads((out / "curves.json").read_text())  # the rows label sentences: their curves too
    assert {"roc", "sentence_roc", "sentence_pr"} <= set(curves) and (out / "sentence_roc.png").is_file()
    assert main(["bench", "mine", "--data", str(tmp_path / "missing.csv"), "--method", "grounded"]) == 2
    assert "cannot read --data" in capsys.readouterr().err


def wikibio_rows(data_dir: Path, passages: int) -> list[dict[str, Any]]:
    """WikiBio passages as a user's labelled answers, as benchmarks/labelled_data.py writes them."""
    return list(load_script("benchmarks/labelled_data.py").wikibio_rows(range(passages), data_dir))


def test_answer_folds_keep_an_answers_sentences_together() -> None:
    from halluscope.tune.calibrate import answer_folds

    groups = np.array(["a", "a", "b", "c", "c", "c", "d", "e"])
    fold = answer_folds(groups, 2)
    for answer in "abcde":
        assert len(set(fold[groups == answer])) == 1
    assert sorted(np.bincount([fold[groups == a][0] for a in "abcde"])) == [2, 3]  # answers dealt round
    assert (answer_folds(groups, 2) == fold).all()  # seeded: the same folds every run


def test_calibrate_on_your_answers_cross_validates_by_answer(tmp_path: Path, data_dir: Path) -> None:
    from halluscope.calibration import Calibration, evaluate, fit
    from halluscope.tune.calibrate import answer_folds, calibrate_labelled

    rows = wikibio_rows(data_dir, 30)
    calibration = calibrate_labelled(["selfcheck-unigram"], rows, tmp_path / "cal.json", progress=False, folds=3)
    report = calibration.report
    units = sum(len(r["labels"]) for r in rows)
    assert report["test"]["units"] == units and report["fit"]["units"] == units
    assert calibration.data["held_out"] == "3-fold cross-validation by answer" and calibration.data["answers"] == 30
    # the out-of-fold AUC-ROC worked again by hand: each fold fitted on the others' answers
    result = BenchResult.read(tmp_path / "cal.runs" / "selfcheck-unigram")
    scores = np.array([s if s is not None else np.inf for i in result.items for s in i.scores.values()])
    labels = np.array([v == "1" for i in result.items for v in i.record["labels"]])
    groups = np.array([i.id for i in result.items for _ in i.record["labels"]])
    fold, oof = answer_folds(groups, 3), np.empty(units)
    for k in range(3):
        kind, params = fit({"selfcheck-unigram": scores[fold != k].tolist()}, labels[fold != k])
        part = Calibration(kind=kind, methods=["selfcheck-unigram"], model=None, prompts=[], params=params)
        oof[fold == k] = part.probabilities({"selfcheck-unigram": scores[fold == k].tolist()})
    assert report["test"]["auc_roc"] == pytest.approx(evaluate(labels, oof, None)["auc_roc"])
    assert report["test"]["brier"] == pytest.approx(evaluate(labels, oof, None)["brier"])
    low, high = report["test_intervals"]["brier"]
    assert low <= report["test"]["brier"] <= high
    assert Calibration.load(tmp_path / "cal.json").kind == "isotonic"
    assert (tmp_path / "cal.reliability.png").is_file()


def test_calibrate_refuses_a_fit_on_too_few_answers_of_a_class(tmp_path: Path, data_dir: Path) -> None:
    from halluscope.tune.calibrate import calibrate_labelled

    rows = [{**r, "labels": [0] * len(r["labels"])} for r in wikibio_rows(data_dir, 6)]
    rows[0]["labels"] = [1] * len(rows[0]["labels"])
    with pytest.raises(ConfigError, match=r"fold \d of 2 trains on one class only|refused to write"):
        calibrate_labelled(["selfcheck-unigram"], rows, tmp_path / "cal.json", progress=False, folds=2)
    assert not (tmp_path / "cal.json").exists()


def test_calibrate_on_your_answers_from_the_command_line(
    tmp_path: Path, data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "answers.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in wikibio_rows(data_dir, 30)))
    argv = ["calibrate", "--data", str(path), "--method", "selfcheck-unigram", "--out", str(tmp_path / "cal.json")]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "held out (5-fold cross-validation by answer)" in printed and "answers resampled" in printed
    assert main(["calibrate", "--method", "selfcheck-unigram", "--out", str(tmp_path / "c2.json")]) == 2
    assert "needs --fit and --test" in capsys.readouterr().err


def test_a_dataframe_read_from_a_csv_is_read_as_the_csv_is(tmp_path: Path) -> None:
    """pd.read_csv leaves a list column's JSON as text: its sentences are read as a list, not character by
    character; a context cell '1990' stays the text '1990' (in the CSV and the DataFrame alike)."""
    import pandas as pd

    from halluscope.labelled import load_labelled

    path = tmp_path / "answers.csv"
    rows = [
        {"text": "It opened in 1990. It is red.", "sentences": json.dumps(["It opened in 1990.", "It is red."]),
         "context": "1990", "labels": json.dumps([0, 1])},
    ]  # fmt: skip
    pd.DataFrame(rows).to_csv(path, index=False)
    for loaded in (load_labelled(pd.read_csv(path)), load_labelled(str(path))):
        [row] = loaded.rows
        assert row.inputs["sentences"] == ["It opened in 1990.", "It is red."] and row.labels == (0, 1)
        assert row.inputs["context"] == "1990"


def test_bench_mine_gates_a_change_on_its_numbers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--fail-under METRIC=VALUE on the estimate or its interval's lower bound, and --max-flag-rate with
    --threshold: exit 1 naming what fell short; the numbers print with their intervals."""
    unseen = [i % 2 == 1 or i % 3 == 0 for i in range(12)]  # every hallucinated answer, and two others
    rows = [
        {"id": f"a{i}", "text": "Paris is in France. " + ("It has bridges." if unseen[i] else "It is in France."),
         "samples": ["Paris is in France. It is in France."] * 3, "labels": [0, i % 2]}
        for i in range(12)
    ]  # fmt: skip
    data = tmp_path / "answers.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    argv = ["bench", "mine", "--data", str(data), "--method", "selfcheck-unigram", "--out", str(tmp_path / "out")]
    assert main([*argv, "--threshold", "5", "--fail-under", "answer_auc_roc=40"]) == 0
    printed = capsys.readouterr().out
    assert "answer AUC-ROC" in printed and "[" in printed.split("answer AUC-ROC", 1)[1].split("answer AUC-PR")[0]
    assert main([*argv, "--fail-under", "answer_auc_roc=101"]) == 1
    assert "gate failed: selfcheck-unigram: answer_auc_roc" in capsys.readouterr().err
    measured = json.loads((tmp_path / "out" / "selfcheck-unigram" / "results.json").read_text())
    point, low = measured["metrics"]["answer_auc_roc"], measured["intervals"]["answer_auc_roc"][0]
    assert point == pytest.approx(100 * (4 + 2 * 0.5) / 6) and low < point  # 2 of 6 accurate answers tie the top
    between = f"answer_auc_roc={(low + point) / 2}"
    assert main([*argv, "--fail-under", between]) == 0  # the estimate clears it
    assert main([*argv, "--fail-under", between, "--gate-on", "lower"]) == 1  # its interval's lower bound does not
    assert "(its interval's lower bound) is under" in capsys.readouterr().err
    assert main([*argv, "--threshold", "0", "--max-flag-rate", "0.5"]) == 1  # every answer flagged at 0
    assert "100.0% of answers flagged, over the ceiling of 50.0%" in capsys.readouterr().err
    assert main([*argv, "--max-flag-rate", "0.5"]) == 2  # no threshold: no flag rate measured
    assert "measured no flag_rate (bench mine measures it with --threshold T)" in capsys.readouterr().err
    assert main([*argv, "--fail-under", "answer_auc_roc=high"]) == 2
