"""Calibrated risk: the metrics by hand, the fitted maps equal scikit-learn's own predictions, a
calibration round-trip through a file into a detector, and the refusals of a mismatched one."""

from __future__ import annotations

import asyncio
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import halluscope
from halluscope.backends.gateway import Gateway
from halluscope.bench.runner import BenchResult
from halluscope.calibration import (
    Calibration,
    brier,
    expected_calibration_error,
    fit,
    precision_recall_at,
    threshold_for_precision,
    threshold_for_recall,
)
from halluscope.cli import main
from halluscope.cli.flags import passage_range
from halluscope.errors import ConfigError, HalluscopeWarning
from halluscope.tune.calibrate import WikiBioCalibrationSettings, calibrate_wikibio, describe, quality_problems
from tests.calibrations import line
from tests.scripted import AsyncOnly

Y = np.array([True, False, True, True])
P = np.array([0.9, 0.2, 0.6, 0.95])


def test_brier_ece_and_the_threshold_for_a_precision_by_hand() -> None:
    assert brier(Y, P) == pytest.approx((0.1**2 + 0.2**2 + 0.4**2 + 0.05**2) / 4)  # 0.053125
    # bins: 0.9 and 0.95 in bin 9 (rate 1, mean 0.925), 0.2 in bin 2, 0.6 in bin 6
    assert expected_calibration_error(Y, P) == pytest.approx(2 / 4 * 0.075 + 1 / 4 * 0.2 + 1 / 4 * 0.4)  # 0.1875
    assert threshold_for_precision(Y, P, 0.9) == 0.6  # p >= 0.2 flags everything: precision 0.75
    assert threshold_for_precision(Y, P, 0.75) == 0.2 and threshold_for_precision(~Y, P, 0.9) is None
    assert threshold_for_recall(Y, P, 0.8) == 0.6  # 3 of the 3 positives at p >= 0.6
    assert threshold_for_recall(Y, P, 0.5) == 0.9 and threshold_for_recall(~Y & Y, P, 0.5) is None  # 2 of 3
    assert precision_recall_at(Y, P, 0.9) == (1.0, pytest.approx(2 / 3))
    assert precision_recall_at(Y, P, 0.1) == (0.75, 1.0) and precision_recall_at(Y, P, None) == (None, None)


def _data(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = rng.random(300) < 0.4
    a = rng.normal(y * 1.0, 1.0)
    b = rng.normal(y * 0.5, 1.0)
    return y, a, b


def test_each_fitted_map_equals_scikit_learns_prediction() -> None:
    from sklearn.isotonic import IsotonicRegression
    from sklearn.linear_model import LogisticRegression, LogisticRegressionCV

    y, a, b = _data()
    probe = np.linspace(-3, 4, 50)

    def calibration(kind: str, scores: dict[str, Any]) -> Calibration:
        fitted_kind, params = fit(scores, y.tolist(), kind)
        return Calibration(kind=fitted_kind, methods=list(scores), model=None, prompts=[], params=params)

    iso = calibration("isotonic", {"m": a})
    expected = IsotonicRegression(y_min=0, y_max=1, out_of_bounds="clip").fit(a, y).predict(probe)
    assert [iso.probability({"m": x}) for x in probe] == pytest.approx(expected.tolist())
    platt = calibration("platt", {"m": a})
    expected = LogisticRegression().fit(a[:, None], y).predict_proba(probe[:, None])[:, 1]
    assert [platt.probability({"m": x}) for x in probe] == pytest.approx(expected.tolist())
    stacked = calibration("isotonic", {"m": a, "k": b})  # several methods are always stacked
    assert stacked.kind == "stacked"
    cv = LogisticRegressionCV(
        cv=5, scoring="neg_log_loss", l1_ratios=(0.0,), use_legacy_attributes=False, random_state=0
    )
    expected = cv.fit(np.column_stack([a, b]), y).predict_proba(np.column_stack([probe, probe]))[:, 1]
    assert [stacked.probability({"m": x, "k": x}) for x in probe] == pytest.approx(expected.tolist())
    assert stacked.probability({"m": 1.0, "k": None}) is None
    with pytest.raises(ConfigError, match="both hallucinated and accurate"):
        fit({"m": a}, [True] * len(a))


def test_a_calibration_round_trip_from_the_benchmark_into_a_detector(tmp_path: Path, data_dir: Path) -> None:
    """SelfCheck-Unigram needs no model: fit on passages 0-9, report on 10-19, then a detector with
    the file gives each unit the probability of its score."""
    path = tmp_path / "cal.json"
    cal = calibrate_wikibio(
        WikiBioCalibrationSettings(
            methods=["selfcheck-unigram"], fit_passages=range(0, 10), test_passages=range(10, 20), data=data_dir
        ),
        path,
        progress=False,
    )
    assert cal.kind == "isotonic" and cal.data["fit_passages"] == [0, 9] and cal.report["test"]["units"] > 0
    assert {"auc_roc", "auc_pr", "brier", "ece"} <= cal.report["test"].keys()
    assert path.with_suffix(".reliability.png").read_bytes()[:4] == b"\x89PNG"
    assert Calibration.load(path) == cal
    assert cal.settings == {"selfcheck-unigram": {"n": 20}}  # the dataset's 20 samples per passage
    det = halluscope.detector("selfcheck-unigram", calibration=path)
    text = "Einstein was born in Ulm. He played the violin in Paris."
    with pytest.warns(HalluscopeWarning, match="2 of 2 units scored outside"):  # a toy text's scores are low
        result = det.detect(text=text, samples=["Einstein was born in Ulm.", "He played the violin."] * 10)
    assert [u.probability for u in result.units] == [
        cal.probability({"selfcheck-unigram": u.score}) for u in result.units
    ]
    cap = cal.params["cap"]["selfcheck-unigram"]  # an unseen token's +inf reads as the cap
    assert cal.probability({"selfcheck-unigram": math.inf}) == cal.probability({"selfcheck-unigram": cap})
    assert all(0.0 <= (u.probability or 0.0) <= 1.0 for u in result.units) and "p=" in result.report()
    with pytest.raises(ConfigError, match="overlap"):
        calibrate_wikibio(
            WikiBioCalibrationSettings(
                methods=["selfcheck-unigram"], fit_passages=range(0, 10), test_passages=range(5, 15), data=data_dir
            ),
            path,
            progress=False,
        )
    assert passage_range("120-237", "--test") == range(120, 238)
    with pytest.raises(ConfigError, match="FIRST-LAST"):
        passage_range("9-3", "--fit")


def test_limit_passages_scores_only_the_first_passages_of_each_split(tmp_path: Path, data_dir: Path) -> None:
    """--limit-passages 3 on 0-9 / 100-109 scores six passages, not the 110 up to the last split's end."""
    path = tmp_path / "cal.json"
    cal = calibrate_wikibio(  # forced: three passages a split is a look at the plumbing, not a fit to keep
        WikiBioCalibrationSettings(
            methods=["selfcheck-unigram"],
            fit_passages=range(0, 10),
            test_passages=range(100, 110),
            data=data_dir,
            limit_passages=3,
            force=True,
        ),
        path,
        progress=False,
    )
    assert cal.data["fit_passages"] == [0, 2] and cal.data["test_passages"] == [100, 102]
    run = BenchResult.read(tmp_path / "cal.runs" / "selfcheck-unigram")
    assert [item.id for item in run.items] == [f"passage {i}" for i in (0, 1, 2, 100, 101, 102)]
    assert run.params["passages"] == [0, 1, 2, 100, 101, 102]
    with pytest.raises(ConfigError, match="there is no passage 238"):
        calibrate_wikibio(
            WikiBioCalibrationSettings(
                methods=["selfcheck-unigram"], fit_passages=range(0, 3), test_passages=range(236, 240), data=data_dir
            ),
            path,
            progress=False,
        )
    with pytest.raises(ConfigError, match="limit_passages must be at least 1"):
        calibrate_wikibio(
            WikiBioCalibrationSettings(
                methods=["selfcheck-unigram"],
                fit_passages=range(0, 3),
                test_passages=range(3, 6),
                data=data_dir,
                limit_passages=0,
            ),
            path,
        )


def test_a_calibration_for_another_method_model_or_prompt_version_is_refused(
    tmp_path: Path, gateway: Any, scripted: Any
) -> None:
    cal = Calibration(
        kind="platt",
        methods=["direct-question"],
        model="local:qwen2.5-coder-1.5b",
        prompts=["fibe.direct_question@1#0000000000"],
        params={"coef": [1.0], "intercept": 0.0, "cap": {"direct-question": 2.0}},
    )
    with pytest.raises(ConfigError, match="fitted for direct-question, not selfcheck-prompt"):
        halluscope.detector("selfcheck-prompt", calibration=cal)
    with pytest.raises(ConfigError, match="fitted on local:qwen2.5-coder-1.5b's scores, not local:smollm2-135m's"):
        halluscope.detector("direct-question", model="local:smollm2-135m", calibration=cal)
    mine = cal.model_copy(update={"model": "scripted:dq"})  # the same model, an older prompt version
    det = halluscope.detector(
        "direct-question", model=scripted(lambda p, k: "Yes", "scripted:dq"), calibration=mine, gateway=gateway
    )
    with pytest.raises(ConfigError, match="fit it again for these prompt versions"):
        det.detect(text="The sky is blue.")
    cal.check_prompts(["selfcheck.regenerate@1#abc"])  # a prompt the fit never used is no version change
    huge = cal.model_copy(update={"params": {"coef": [1000.0], "intercept": 0.0, "cap": {"direct-question": 2.0}}})
    assert huge.probability({"direct-question": -1.0}) == pytest.approx(0.0)  # no overflow far out
    bad = tmp_path / "bad.json"
    bad.write_text('{"kind": "magic"}')
    with pytest.raises(ConfigError, match="is not a halluscope calibration file"):
        halluscope.detector("direct-question", calibration=bad)


def test_calibrate_and_detect_with_it_from_the_command_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, data_dir: Path
) -> None:
    """The fit used the dataset's 20 samples: a run on 2 is refused in one line naming both, and
    --force-calibration runs it with one warning line."""
    out = tmp_path / "u.json"
    argv = ["calibrate", "--method", "selfcheck-unigram", "--fit", "0-19", "--test", "20-39", "--kind", "platt"]
    assert main([*argv, "--out", str(out), "--data", str(data_dir)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("platt calibration of selfcheck-unigram") and "test:" in printed
    samples = tmp_path / "s.txt"
    samples.write_text("Einstein was born in Ulm.\n---\nHe played the violin.\n")
    argv = ["detect", "selfcheck-unigram", "--text", "Einstein was born in Ulm.", "--samples-file", str(samples)]
    assert main([*argv, "--calibration", str(out)]) == 2
    err = capsys.readouterr().err.split("\r")[-1]  # after the progress bar's last redraw
    assert err.startswith(
        "halluscope: error: this calibration of selfcheck-unigram was fitted on scores made with n=20"
    )
    assert "made with n=2" in err and "--force-calibration" in err and err.count("\n") == 1
    assert main([*argv, "--calibration", str(out), "--force-calibration"]) == 0
    printed = capsys.readouterr()
    assert "p=" in printed.out
    said = re.findall(r"halluscope: warning: ([^\n]*)\n", printed.err)
    assert said[0].startswith("this calibration of selfcheck-unigram") and said[0].endswith("(forced)")


def test_a_calibration_refuses_the_settings_it_was_not_fitted_with(tmp_path: Path, data_dir: Path) -> None:
    """Fitted with the dataset's 20 samples, asked for 3: refused before any work when the option says
    so, on the result when the samples given do; forced, the result carries one warning."""
    path = tmp_path / "cal.json"
    calibrate_wikibio(
        WikiBioCalibrationSettings(
            methods=["selfcheck-unigram"], fit_passages=range(0, 10), test_passages=range(10, 20), data=data_dir
        ),
        path,
        progress=False,
    )
    with pytest.raises(ConfigError, match="fitted on scores made with n=20, and these are made with n=3"):
        halluscope.detector("selfcheck-unigram", calibration=path, n=3)
    text = "Einstein was born in Ulm. He played the violin in Paris."
    three = ["Einstein was born in Ulm.", "He played the violin.", "He lived in Bern."]
    with pytest.raises(ConfigError, match=r"made with n=3: .*; fit it again .*force_calibration=True"):
        halluscope.detector("selfcheck-unigram", calibration=path).detect(text=text, samples=three)
    forced = halluscope.detector("selfcheck-unigram", calibration=path, force_calibration=True)
    with pytest.warns(HalluscopeWarning) as caught:
        result = forced.detect(text=text, samples=three)
    forced_notes = [str(w.message) for w in caught if "(forced)" in str(w.message)]
    assert len(forced_notes) == 1 and forced_notes[0] in result.meta.warnings
    assert all(u.probability is not None for u in result.units)


def test_scores_outside_the_fitted_range_give_one_warning_per_run(tmp_path: Path) -> None:
    """A probability beyond the fitted scores is the fit's edge value: one warning per detect naming how
    many units fell outside, and one for a whole batch."""
    text = "Einstein was born in Ulm. He played the violin in Paris."
    samples = ["Einstein was born in Ulm.", "He played the violin."]
    raw = halluscope.detector("selfcheck-unigram").detect(text=text, samples=samples)
    low, high = sorted(u.score for u in raw.units if u.score is not None)
    cal = Calibration(
        kind="platt",
        methods=["selfcheck-unigram"],
        model=None,
        prompts=[],
        params={
            "coef": [1.0],
            "intercept": 0.0,
            "cap": {"selfcheck-unigram": 20.0},
            "range": {"selfcheck-unigram": [low - 1, low]},
        },
        settings={"selfcheck-unigram": {"n": 2}},
    )
    det = halluscope.detector("selfcheck-unigram", calibration=cal)
    with pytest.warns(HalluscopeWarning) as caught:
        result = det.detect(text=text, samples=samples)
    assert [str(w.message) for w in caught] == result.meta.warnings
    assert len(caught) == 1 and str(caught[0].message).startswith("1 of 2 units scored outside the range")
    with pytest.warns(HalluscopeWarning) as caught:
        det.detect_many([{"text": text, "samples": samples}] * 3, progress=False)
    assert len(caught) == 1 and str(caught[0].message).startswith("3 of 6 units scored outside the range")
    inside = cal.model_copy(update={"params": {**cal.params, "range": {"selfcheck-unigram": [low, high]}}})
    assert (
        halluscope.detector("selfcheck-unigram", calibration=inside).detect(text=text, samples=samples).meta.warnings
        == []
    )


def test_calibrate_says_when_the_base_rate_already_meets_the_precision_target(data_dir: Path, tmp_path: Path) -> None:
    """On passages 0-9 most sentences are inaccurate, so flagging all of them reaches precision 0.8: the
    report says so instead of recommending p >= 0, and lists the operating points."""
    cal = calibrate_wikibio(
        WikiBioCalibrationSettings(
            methods=["selfcheck-unigram"], fit_passages=range(0, 10), test_passages=range(10, 20), data=data_dir
        ),
        tmp_path / "c.json",
        progress=False,
    )
    assert cal.report["base_rate_fit"] >= 0.8
    text = describe(cal)
    assert "none to recommend" in text and "flagging every one already reaches it" in text
    assert "p >= 0.000" not in text
    rows = {row["target"]: row for row in cal.report["operating_points"]}
    assert list(rows) == ["precision 0.8", "precision 0.9", "recall 0.8", "recall 0.9"]
    assert rows["precision 0.8"]["everything"] and rows["precision 0.8"]["threshold"] is None
    assert rows["precision 0.8"]["fit_precision"] == cal.report["base_rate_fit"] == 76 / 89
    assert all(rows[k]["fit_recall"] >= float(k.split()[1]) for k in ("recall 0.8", "recall 0.9"))
    assert "recall 0.9" in text and "held out" in text


def test_the_learned_ensemble_stacks_its_members_with_their_calibration(
    tmp_path: Path, data_dir: Path, gateway: Any, scripted: Any
) -> None:
    """Unigram and DQ stacked on WikiBio passages 0-9 (a DQ model that doubts sentences with a digit),
    then the ensemble on a new text: one DQ call per sentence, and each sentence's probability is the
    stacked calibration of the two members' scores."""
    seen: list[str] = []

    def doubts_digits(prompt: str, _params: dict[str, Any]) -> str:
        seen.append(prompt)
        claim = prompt.split("Claim:")[1].split("\n")[0]
        return "No" if any(ch.isdigit() for ch in claim) else "Yes"

    model = scripted(doubts_digits, "scripted:dq")
    path = tmp_path / "stack.json"
    methods = ["selfcheck-unigram", "direct-question"]
    cal = calibrate_wikibio(
        WikiBioCalibrationSettings(
            methods=methods, fit_passages=range(0, 10), test_passages=range(10, 20), data=data_dir
        ),
        path,
        model=model,
        gateway=gateway,
        progress=False,
    )
    assert cal.kind == "stacked" and cal.methods == methods and cal.model == "scripted:dq"
    assert set(cal.report["raw_scores_test"]) == set(methods)
    det = halluscope.detector("ensemble", model=model, calibration=path, gateway=gateway)
    text = "Ada Lovelace was born in 1815. She wrote about the Analytical Engine."
    samples = ["Ada Lovelace was born in London.", "She wrote notes on the Analytical Engine."] * 10  # fitted on 20
    before = len(seen)
    result = det.detect(text=text, prompt="This is a Wikipedia passage about Ada Lovelace:", samples=samples)
    assert len(seen) - before == 2 and result.meta.params["methods"] == methods
    for unit in result.units:
        scores = unit.evidence["scores"]
        assert unit.probability == unit.score == pytest.approx(cal.probability(scores))
    assert result.units[0].evidence["scores"]["direct-question"] == 1.0  # 'born in 1815' doubted
    # true async: the members run on the event loop, their calls through the async client only
    async_model = AsyncOnly(respond=doubts_digits, model_id="scripted:dq")
    det_async = halluscope.detector("ensemble", model=async_model, calibration=path, gateway=Gateway(cache=None))
    awaited = asyncio.run(
        det_async.adetect(text=text, prompt="This is a Wikipedia passage about Ada Lovelace:", samples=samples)
    )
    assert [u.probability for u in awaited.units] == [u.probability for u in result.units]
    assert awaited.meta.calls == 2
    with pytest.raises(
        ConfigError, match="of selfcheck-unigram was fitted on scores made with n=20, and these .* n=2:"
    ):
        det.detect(text=text, prompt="This is a Wikipedia passage about Ada Lovelace:", samples=samples[:2])
    with pytest.raises(ConfigError, match="this calibration stacks selfcheck-unigram, direct-question, not"):
        halluscope.detector("ensemble", model=model, calibration=path, methods=["direct-question"]).detect(text=text)
    with pytest.raises(ConfigError, match="ensemble needs calibration"):
        halluscope.detector("ensemble", model=model).detect(text=text)


def test_a_fit_that_fails_its_held_out_check_is_refused_unless_forced(
    tmp_path: Path, data_dir: Path, capsys: pytest.CaptureFixture[str], gateway: Any, scripted: Any
) -> None:
    """Passages 0-3 hold 1 accurate sentence of 34 (97% inaccurate, as the fit the issue saw), and 4-5
    too few to say more than chance: the fit is refused in one line naming why (it was written, and then
    made true sentences p=1.00 with no word); --force writes it, its report and every detect with it
    saying so."""
    path = tmp_path / "cal.json"
    argv = ["calibrate", "--method", "selfcheck-unigram", "--fit", "0-3", "--test", "4-5", "--data", str(data_dir)]
    assert main([*argv, "--out", str(path)]) == 2
    err = capsys.readouterr().err.splitlines()[-1]  # after the scoring's finished progress bar
    assert err.startswith(f"halluscope: error: refused to write {path}")
    assert "accurate sentences (at least 10 needed)" in err and "--force" in err and not path.exists()
    assert main([*argv, "--out", str(path), "--force"]) == 0
    assert "KEPT WITH --force although the fit split has" in capsys.readouterr().out
    cal = Calibration.load(path)
    assert cal.report["quality"]["forced"] and cal.report["quality"]["problems"]
    assert cal.forced_note() is not None and cal.forced_note().startswith("this calibration was kept with --force")
    assert cal.base_rate() is not None and cal.base_rate() > 0.9
    det = halluscope.detector("selfcheck-unigram", calibration=cal)
    with pytest.warns(HalluscopeWarning) as caught:
        result = det.detect(text="Einstein was born in Ulm.", samples=["Einstein was born in Ulm."] * 20)
    said = [str(w.message) for w in caught]
    assert any(
        "fitted where" in note and "hallucinated: its probabilities carry that base rate" in note for note in said
    )
    assert any(note.startswith("this calibration was kept with --force") for note in said)
    assert result.meta.warnings == said


def test_quality_problems_by_hand() -> None:
    y = np.array([True] * 30 + [False] * 30)
    assert quality_problems(y, y, [60.0, 80.0]) == []
    assert quality_problems(y, y, [45.0, 70.0]) == [
        "its held-out AUC-ROC interval [45.0, 70.0] holds 50: no better than chance"
    ]
    few = np.array([True] * 30 + [False] * 9)
    assert quality_problems(few, y, [60.0, 80.0]) == ["the fit split has 9 accurate sentences (at least 10 needed)"]
    assert "one class only" in quality_problems(y, y, None)[0]
    assert quality_problems(y, y, [35.4, 48.7]) == [  # significantly below chance: the wrong way round
        "its held-out AUC-ROC interval [35.4, 48.7] lies below 50: it ranks hallucinated units as the least likely "
        "(a calibration cannot turn it round)"
    ]


GOOD = {
    "kind": "isotonic",
    "methods": ["selfcheck-unigram"],
    "model": None,
    "prompts": [],
    "params": {"x": [0.0, 1.0, 2.0], "y": [0.1, 0.5, 0.9], "cap": {"selfcheck-unigram": 3.0}},
}


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"params": {}}, "params has no x, y, cap"),
        ({"kind": "platt", "params": {"intercept": 0.0, "cap": {"selfcheck-unigram": 3.0}}}, "params has no coef"),
        ({"params": {**GOOD["params"], "y": [0.1, 0.5]}}, "params.x and params.y must be lists of one length"),
        ({"kind": "stacked", "params": {"coef": [1, 2, 3], "intercept": 0, "cap": {"selfcheck-unigram": 3.0}}},
         "params.coef has 3 coefficients for 1 method"),
        ({"params": {**GOOD["params"], "x": ["a", "b", "c"]}}, "params.x[0] is 'a', not a number"),
        ({"params": {**GOOD["params"], "y": [0.1, float("nan"), 0.9]}}, "params.y[1] is nan, not a finite number"),
        ({"params": {**GOOD["params"], "y": [5, 7, 9]}}, "params.y[0] is 5, not a probability in [0, 1]"),
        ({"params": {**GOOD["params"], "y": [-0.1, 0.5, 0.9]}}, "params.y[0] is -0.1, not a probability"),
        ({"params": {**GOOD["params"], "x": [0.0, 1e400, 2.0]}}, "params.x[1] is inf, not a finite number"),
        ({"params": {**GOOD["params"], "x": [2.0, 1.0, 0.0]}}, "params.x is not sorted"),
        ({"params": {**GOOD["params"], "cap": {}}}, "params.cap must give each method"),
    ],
)  # fmt: skip
def test_a_calibration_file_that_cannot_be_used_is_refused_in_one_line(
    change: dict[str, Any], said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each was a traceback (params {}: KeyError 'x') or, worse, used: NaN gave p=nan and '0 of 2 units
    flagged', so --exit-code passed; y = [5, 7] printed p=5.00 and p=7.00."""
    import json

    path = tmp_path / "cal.json"
    path.write_text(json.dumps({**GOOD, **change}).replace("Infinity", "1e400"))
    with pytest.raises(ConfigError, match=re.escape(said)):
        Calibration.load(path)
    samples = tmp_path / "s.txt"
    samples.write_text("Einstein was born in Ulm.\n---\nHe played the violin.\n")
    argv = ["detect", "selfcheck-unigram", "--text", "He was born in Ulm.", "--samples-file", str(samples)]
    assert main([*argv, "--calibration", str(path), "--exit-code"]) == 2
    err = capsys.readouterr().err.splitlines()[-1]
    assert err.startswith(f"halluscope: error: {path} cannot be used: ") and said in err
    with pytest.raises(ConfigError, match=re.escape(said)):
        halluscope.detector("selfcheck-unigram", calibration=Calibration.model_validate({**GOOD, **change}))
    assert Calibration.load(_written(tmp_path, GOOD)).problem() is None


def _written(folder: Path, content: dict[str, Any]) -> Path:
    import json

    path = folder / "good.json"
    path.write_text(json.dumps(content))
    return path


def test_the_ensembles_selfcheck_members_share_one_draw_of_samples() -> None:
    """With the cache off, SelfCheck-Prompt and -Unigram on a regenerated question drew their n samples
    once each (2n); members that would draw alike now share one draw (n), the ensemble's meta says so."""
    asked: list[str] = []

    def respond(prompt: str, _params: dict[str, Any]) -> str:
        asked.append(prompt)
        return "Yes" if "Answer Yes or No" in prompt else "Paris is the capital of France."

    from tests.scripted import ScriptedChatModel

    model = ScriptedChatModel(respond=respond, model_id="scripted:shared")
    methods = ["selfcheck-prompt", "selfcheck-unigram"]
    cal = Calibration(
        kind="stacked",
        methods=methods,
        model="scripted:shared",
        prompts=[],
        params={"coef": [1.0, 0.1], "intercept": -0.5, "cap": {m: 10.0 for m in methods}},
    )
    det = halluscope.detector("ensemble", model=model, calibration=cal, n=3, gateway=Gateway(cache=None))
    result = det.detect(text="Paris is in France. It is large.", prompt="Where is Paris?")
    questions = [p for p in asked if "Where is Paris?" in p and "Answer Yes or No" not in p]
    assert len(questions) == 3 and result.meta.params["sample_draws"] == 1
    assert result.meta.calls == 3 + 3 * 2  # the draw, then SelfCheck-Prompt's 3 samples x 2 sentences
    assert all(u.probability is not None for u in result.units)


def test_a_prior_corrects_the_probabilities_to_your_base_rate_worked_by_hand() -> None:
    """Fitted where 20% of units were hallucinated, a p of 0.5 is odds 1; at your base rate of 50% the
    odds are multiplied by (0.5/0.5) / (0.2/0.8) = 4: p = 4/5 = 0.8. At the fit's own rate nothing moves."""
    cal = line("selfcheck-unigram", (0.0, 1.0), (0.0, 1.0), cap=2.0, report={"base_rate_fit": 0.2})
    assert cal.probability({"selfcheck-unigram": 0.5}) == pytest.approx(0.5)
    assert cal.with_prior(0.5).probability({"selfcheck-unigram": 0.5}) == pytest.approx(0.8)
    assert cal.with_prior(0.2).probability({"selfcheck-unigram": 0.5}) == pytest.approx(0.5)
    assert cal.with_prior(0.05).probability({"selfcheck-unigram": 1.0}) == 1.0  # certainty stays certain
    for bad in (0.0, 1.0, 1.5, "half"):
        with pytest.raises(ConfigError, match="prior is the share of hallucinated units"):
            cal.with_prior(bad)  # type: ignore[arg-type]
    unrated = cal.model_copy(update={"report": {}})
    with pytest.raises(ConfigError, match="records no base rate"):
        unrated.with_prior(0.5)
    with pytest.raises(ConfigError, match="prior is 7.0, not a base rate"):
        Calibration.model_validate({**cal.model_dump(), "prior": 7.0}).checked()
    det = halluscope.detector("selfcheck-unigram", calibration=cal, prior=0.5)
    result = det.detect(text="Paris is in France.", samples=["Paris is in France."])
    assert result.evidence["calibration"] == {"fitted_base_rate": 0.2, "prior": 0.5}
    with pytest.raises(ConfigError, match="prior corrects a calibration's probabilities"):
        halluscope.detector("selfcheck-unigram", prior=0.5)


def test_the_command_line_shows_the_base_rate_its_probabilities_carry(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cal = line("selfcheck-unigram", (0.0, 10.0), (0.0, 1.0), cap=20.0, report={"base_rate_fit": 0.2})
    path = cal.save(tmp_path / "cal.json")
    samples = tmp_path / "samples.json"
    samples.write_text('["Paris is in France."]')
    argv = ["detect", "selfcheck-unigram", "--text", "Paris is in Spain.", "--samples-file", str(samples)]
    assert main([*argv, "--calibration", str(path)]) == 0
    assert "carry the base rate the calibration was fitted at, 20% hallucinated (--prior P: yours)" in (
        capsys.readouterr().out
    )
    assert main([*argv, "--calibration", str(path), "--prior", "0.5"]) == 0
    assert "probabilities corrected to your base rate 50% (fitted at 20%)" in capsys.readouterr().out


def test_a_stacks_flagged_unit_comes_with_the_document_text_it_was_checked_against(
    gateway: Gateway, scripted: Any
) -> None:
    from tests.test_grounded import judge

    grounded_judge = judge([])

    def respond(prompt: str, params: dict[str, Any]) -> str:
        return grounded_judge(prompt, params) if "Context: " in prompt else "Yes"

    stack = Calibration(
        kind="stacked", methods=["grounded", "direct-question"], model=None, prompts=[],
        params={"coef": [4.0, 0.1], "intercept": -2.0, "cap": {"grounded": 1.0, "direct-question": 1.0}},
    )  # fmt: skip
    answer = "Canberra is the capital of Australia. It lies in Melbourne."
    docs = ["Canberra is the capital city of Australia. It lies in the Australian Capital Territory."]
    result = halluscope.check(answer, context=docs, calibration=stack, model=scripted(respond), gateway=gateway)
    brief = result.brief()
    assert [u["position"] for u in brief["flagged"]] == [1]
    assert brief["flagged"][0]["evidence"] == ["It lies in the Australian Capital Territory."]


def test_a_check_resolves_its_calibration_once_load_and_prior_alike(
    gateway: Gateway, scripted: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """check -> deployable loaded the file, detector() loaded it again, and each applied the prior: one
    resolution now (check_answer.deployable), every door reading the same detector and threshold."""
    from tests.test_grounded import judge

    grounded_judge = judge([])
    stack = Calibration(
        kind="stacked", methods=["grounded", "direct-question"], model=None, prompts=[],
        params={"coef": [4.0, 0.1], "intercept": -2.0, "cap": {"grounded": 1.0, "direct-question": 1.0}},
        report={"base_rate_fit": 0.2},
    )  # fmt: skip
    path = tmp_path / "stack.json"
    stack.save(path)
    counts = {"load": 0, "with_prior": 0}
    load, with_prior = Calibration.load, Calibration.with_prior

    def counted_load(cls: type[Calibration], *args: Any, **kwargs: Any) -> Calibration:
        counts["load"] += 1
        return load(*args, **kwargs)

    def counted_prior(self: Calibration, prior: float | None) -> Calibration:
        counts["with_prior"] += 1
        return with_prior(self, prior)

    monkeypatch.setattr(Calibration, "load", classmethod(counted_load))
    monkeypatch.setattr(Calibration, "with_prior", counted_prior)
    model = scripted(lambda prompt, params: grounded_judge(prompt, params) if "Context: " in prompt else "Yes")
    docs = ["Canberra is the capital city of Australia. It lies in the Australian Capital Territory."]
    result = halluscope.check(
        "It lies in Melbourne.", context=docs, calibration=str(path), prior=0.5, model=model, gateway=gateway
    )
    assert counts == {"load": 1, "with_prior": 1}
    assert result.units and result.units[0].probability is not None


def test_from_calibration_and_serve_resolve_as_check_does(
    gateway: Gateway, scripted: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """from_calibration loaded its file, read its method, then handed it to detector(), which read it
    again, and serve named its method on its own: each door now resolves through check_answer.resolved,
    the file read once and its method once; a method other than the calibration's is refused alike."""
    from halluscope import check_answer, detectors
    from halluscope.serve.service import ServerSettings
    from tests.test_grounded import judge

    path = tmp_path / "cal.json"
    Calibration(
        kind="platt", methods=["grounded"], model=None, prompts=[],
        params={"coef": [4.0], "intercept": -2.0, "cap": {"grounded": 1.0}}, settings={"grounded": {"top_k": 1}},
    ).save(path)  # fmt: skip
    counts = {"load": 0, "deployed": 0}
    load, deployed = Calibration.load, detectors.deployed

    def counted_load(cls: type[Calibration], *args: Any, **kwargs: Any) -> Calibration:
        counts["load"] += 1
        return load(*args, **kwargs)

    def counted_deployed(calibration: Calibration) -> tuple[str, dict[str, Any]]:
        counts["deployed"] += 1
        return deployed(calibration)

    monkeypatch.setattr(Calibration, "load", classmethod(counted_load))
    for module in (check_answer, detectors):
        monkeypatch.setattr(module, "deployed", counted_deployed)
    det = halluscope.from_calibration(path, scripted(judge([])), gateway=gateway)
    assert counts == {"load": 1, "deployed": 1}
    assert det.method == "grounded" and det.options["top_k"] == 1 and det.calibration is not None
    with pytest.raises(ConfigError, match="fitted for grounded, not direct-question"):
        check_answer.method_of("direct-question", Calibration.load(path), grounded=True)
    assert ServerSettings(calibration=str(path)).runs() == "grounded"
