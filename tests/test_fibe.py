"""FIBE (Hirano et al.): exam construction and formulas on the paper's worked example and on
hand-worked numbers; the graph's call counts, cache replay and handling of bad model answers."""

from __future__ import annotations

import json
import math
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from halluscope.backends.gateway import CallStats, Gateway
from halluscope.bench.wikibio import run_bench, sentence_scores
from halluscope.errors import ConfigError
from halluscope.methods import fibe
from halluscope.prompts import parsers
from halluscope.scoring.fibe import (
    build_exam,
    ensemble,
    ensemble_weights,
    fibe_score,
    first_token_probability,
    known_value,
    snowballing_correction,
    variant_scores,
)
from tests import fibe_paper


def canonical(exam: list[str]) -> list[str]:
    """Renumber variables in order of first appearance: compares masking and sharing, not numbering."""
    order: dict[str, str] = {}

    def rename(m: re.Match[str]) -> str:
        var = m.group(1)
        order.setdefault(var, f"{var.rsplit('_', 1)[0]}_{len(order)}")
        return f'"{order[var]}"'

    return [re.sub(r'"(\$[^"]+)"', rename, s) for s in exam]


def test_exam_from_the_papers_create_completion_is_the_papers_exam() -> None:
    created = parsers.fibe_exam(fibe_paper.CREATE_COMPLETION)
    exam = build_exam(fibe_paper.SENTENCES, created)
    assert exam.events == []
    # same blanks masked, same objects sharing one variable ("$university_25" for Georgia in s5, s7,
    # s9, s10), "In 2012," etc. left alone because they stand before the subject
    assert canonical(exam.sentences) == canonical(fibe_paper.PAPER_EXAM)
    assert exam.sentences[7] == 'In 2012, he returned to "$university_23" as the "$profession_10".'
    assert exam.answer_key["$university_23"] == "Georgia"
    assert exam.answer_key["$year_2"] == "1983"


def test_exam_records_what_it_could_not_use() -> None:
    sentences = ["In Paris, Marie Curie won the Nobel Prize in 1903.", "She was born in Warsaw.", "She died."]
    created = [
        {
            "sid": 0,
            "subject": {"object": "Marie Curie", "hypernym": "person"},
            "blanks": [
                {"object": "Paris", "hypernym": "city"},
                {"object": "Nobel Prize", "hypernym": "award"},
                {"object": "1903", "hypernym": "year"},
                {"object": "Stockholm", "hypernym": "city"},
                {"object": "Stockholm", "hypernym": "city"},  # a looping model repeats itself: one event
            ],
        },
        {
            "sid": 1,
            "subject": {"object": "Marie", "hypernym": "person"},
            "blanks": [{"object": "Warsaw", "hypernym": "city"}],
        },
        {"sid": 7, "subject": None, "blanks": []},
    ]
    exam = build_exam(sentences, created)
    assert exam.sentences == [
        'In Paris, Marie Curie won the "$award_0" in "$year_1".',  # Paris precedes the subject: kept
        'She was born in "$city_2".',  # subject not found: every blank is masked
        "She died.",  # create() skipped it: stays as it is
    ]
    assert exam.events == [
        {"sentence": 7, "event": "unknown_sentence"},
        {"sentence": 0, "event": "blank_not_found", "detail": "Stockholm"},
        {"sentence": 1, "event": "subject_not_found", "detail": "Marie"},
        {"sentence": 2, "event": "not_in_exam"},
    ]


def test_exam_masks_whole_words_longest_object_first() -> None:
    created = [
        {
            "sid": 0,
            "subject": {"object": "He", "hypernym": "person"},
            "blanks": [
                {"object": "1", "hypernym": "day"},
                {"object": "Georgia", "hypernym": "state"},
                {"object": "University of Georgia", "hypernym": "university"},
            ],
        },
    ]
    exam = build_exam(["He left the University of Georgia on 1 May 1991 for Georgia."], created)
    assert exam.sentences == ['He left the "$university_0" on "$day_1" May 1991 for "$state_2".']


def test_fibe_score_on_the_papers_grades_for_s7() -> None:
    grades = parsers.bracket_scores(fibe_paper.S7_GRADES)
    assert list(grades.values()) == [0.0, 100.0, 100.0, 75.0, 0.0]
    assert fibe_score(list(grades.values())) == pytest.approx(1 - 275 / 500)  # 0.45
    assert fibe_score([100, 100]) == 0.0 and fibe_score([0]) == 1.0
    with pytest.raises(ValueError):
        fibe_score([])


def test_known_value_reads_yes_no_and_first_token_probability() -> None:
    assert known_value("yes") == 1.0 and known_value("no") == 0.0 and known_value(None) == 0.0
    assert known_value("yes", 0.8) == 0.8
    assert known_value("no", 0.9) == pytest.approx(0.1)
    assert known_value(None, 0.9) == 0.0  # neither Yes nor No: 0.0 even with log-probs
    logprobs = [{"token": " ", "logprob": -0.01}, {"token": "Yes", "logprob": math.log(0.75)}]
    assert first_token_probability(logprobs) == pytest.approx(0.75)
    assert first_token_probability(None) is None and first_token_probability([]) is None


def test_snowballing_correction_by_hand() -> None:
    # |R| = 4, theta = 0.1; sums before each sentence: 0, 0.2, 0.7, 0.7
    h = [0.2, 0.5, 0.0, 0.9]
    assert snowballing_correction(h) == pytest.approx([0.2, 0.5 + 0.1 / 4, 0.0 + 0.6 / 4, 1.0])  # last clipped
    assert snowballing_correction([0.05, 0.05, 0.3], theta=0.1) == pytest.approx([0.05, 0.05, 0.3])
    assert snowballing_correction([]) == []


def test_ensemble_weights_and_clip_by_hand() -> None:
    assert ensemble_weights(True, False, False) == {"fibe": 1.0, "direct_question": 0.0, "selfcheck": 0.0}
    assert ensemble_weights(True, True, True) == {"fibe": 0.5, "direct_question": 0.2, "selfcheck": 0.5}
    assert ensemble_weights(False, True, True) == {"fibe": 0.0, "direct_question": 0.2, "selfcheck": 1.0}
    # H_+ = clip(0.5 F + 0.2 D + 0.5 P)
    got = ensemble(fibe=[0.4, 1.0], direct_question=[1.0, 1.0], selfcheck=[0.2, 0.8])
    assert got == pytest.approx([0.5 * 0.4 + 0.2 + 0.5 * 0.2, 1.0])
    assert ensemble(fibe=[0.3, 0.9], direct_question=[0.5, 1.0]) == pytest.approx([0.4, 1.0])  # C_F = 1.0
    with pytest.raises(ValueError):
        ensemble(fibe=[0.1], selfcheck=[0.1, 0.2])


def test_a_variants_scores_by_hand() -> None:
    """H_F alone; H_+ of the parts a variant uses; H_S on top with SBC (theta = 0.1, |R| = 2)."""
    assert variant_scores({"fibe": [0.4, 0.3]}, sbc=False) == pytest.approx([0.4, 0.3])
    parts = {"fibe": [0.4, 0.3], "direct_question": [1.0, 0.0], "selfcheck": [0.2, 0.1]}
    assert variant_scores(parts, sbc=False) == pytest.approx([0.5, 0.2])  # 0.5 F + 0.2 D + 0.5 P
    assert variant_scores(parts, sbc=True, theta=0.1) == pytest.approx([0.5, 0.2 + 0.4 / 2])


# ---------------------------------------------------------------- the graph, on scripted models


def mcclendon_model(seen: list[str]) -> Callable[[str, dict[str, Any]], str]:
    """Answers each FIBE prompt by content with the paper's completions; student j's [s7] is the
    paper's j-th student answer, so the grader's completion for [s7] is the paper's too."""
    lock = threading.Lock()

    def respond(prompt: str, params: dict[str, Any]) -> str:
        with lock:
            seen.append(prompt)
        if "Fill-in-the-blank Questions: (from [s0]" in prompt:
            return fibe_paper.CREATE_COMPLETION
        if "world champion in English quizzes" in prompt:
            name = fibe.STUDENTS[params["seed"]]
            return re.sub(r"\[s7\] [^\n]*", f"[s7] {fibe_paper.S7_STUDENTS[name]}", fibe_paper.ANSWER_COMPLETION)
        if "English test grader" in prompt:
            if "Correct answer: In 2012, he returned to Georgia" in prompt:
                return fibe_paper.S7_GRADES
            return "\n".join(f"[{name}] 50" for name in re.findall(r"^\[(\w+)\] ", prompt, re.MULTILINE))
        if "responds using only your prior knowledge" in prompt:
            claim = prompt.split("Claim:")[1]
            return "No" if "2016" in claim else ("Maybe" if "2018" in claim else "Yes")
        if "Is the sentence supported" in prompt:
            return "No" if "Sentence: In 2014" in prompt else "Yes"
        raise AssertionError(f"unexpected prompt: {prompt[:200]}")

    return respond


def test_fibe_on_the_papers_example_makes_1_plus_n_plus_r_calls_and_a_rerun_none(
    gateway: Gateway, scripted: Any
) -> None:
    seen: list[str] = []
    model = scripted(mcclendon_model(seen))
    stats = CallStats()
    result = fibe.detect(
        sentences=fibe_paper.SENTENCES, prompt=fibe_paper.PROMPT, model=model, n=5, gateway=gateway, stats=stats
    )
    r = len(fibe_paper.SENTENCES)
    assert result.meta.calls == 1 + 5 + r and len(seen) == 1 + 5 + r
    assert stats.planned == 1 + 5 + r  # announced before the first call: the progress bar's total
    # the create prompt carries the quoted original prompt, the numbered sentences and their ids
    create = next(p for p in seen if "Fill-in-the-blank Questions: (from [s0]" in p)
    assert f'"{fibe_paper.PROMPT}"\n[s0] Bryan McClendon (born April 28, 1983)' in create
    assert create.endswith("(from [s0],[s1],[s2],[s3],[s4],[s5],[s6],[s7],[s8],[s9],[s10])")
    answer = next(p for p in seen if "world champion" in p)
    assert '[s7] In 2012, he returned to "$university_23" as the "$profession_10".' in answer
    assert answer.endswith(f'Fill-in-the-blank Answers: (up to [s10])\n"{fibe_paper.PROMPT}"\n')
    grade = next(p for p in seen if "Correct answer: In 2012" in p)
    for name, student in fibe_paper.S7_STUDENTS.items():
        assert f"[{name}] {student}" in grade
    s7 = result.units[7]
    assert s7.score == pytest.approx(0.45) and s7.evidence["grades"] == {
        "Tom": 0.0,
        "Amy": 100.0,
        "Max": 100.0,
        "Leo": 75.0,
        "Ava": 0.0,
    }
    assert s7.evidence["answers"]["Leo"] == fibe_paper.S7_STUDENTS["Leo"]
    assert [u.score for i, u in enumerate(result.units) if i != 7] == [0.5] * (r - 1)
    assert result.meta.events == {} and all(u.parsed for u in result.units)
    assert sorted(result.meta.prompts) == sorted(
        gateway.registry.get(p).ref for p in (fibe.CREATE, fibe.ANSWER, fibe.SCORE)
    )
    again = fibe.detect(sentences=fibe_paper.SENTENCES, prompt=fibe_paper.PROMPT, model=model, n=5, gateway=gateway)
    assert again.meta.calls == 0 and again.meta.cache_hits == 1 + 5 + r and len(seen) == 1 + 5 + r
    assert [u.score for u in again.units] == [u.score for u in result.units]


def test_fibe_sbc_dq_adds_r_direct_questions_and_combines_by_the_papers_formulas(
    gateway: Gateway, scripted: Any
) -> None:
    seen: list[str] = []
    stats = CallStats()
    result = fibe.detect(
        sentences=fibe_paper.SENTENCES,
        prompt=fibe_paper.PROMPT,
        model=scripted(mcclendon_model(seen)),
        variant="fibe+sbc+dq",
        n=5,
        gateway=gateway,
        stats=stats,
    )
    r = len(fibe_paper.SENTENCES)
    assert result.meta.calls == stats.planned == 1 + 5 + r + r
    dq = next(p for p in seen if "prior knowledge" in p)
    assert f'"{fibe_paper.PROMPT}"\nClaim:' in dq
    h_f = [0.5] * 7 + [0.45] + [0.5] * 3
    h_d = [0.0] * 9 + [1.0, 1.0]  # No for 2016; Maybe (neither) for 2018: known = 0.0
    assert [u.evidence["h_fibe"] for u in result.units] == pytest.approx(h_f)
    assert [u.evidence["h_direct_question"] for u in result.units] == h_d
    expected = snowballing_correction([min(1.0, f + 0.2 * d) for f, d in zip(h_f, h_d, strict=True)], 0.1)
    assert [u.score for u in result.units] == pytest.approx(expected)
    assert expected[1] == pytest.approx(0.5 + (0.5 - 0.1) / 11)  # by hand: sum before s1 is 0.5
    assert result.units[10].evidence["direct_question"]["answer"] is None
    assert result.meta.params["weights"] == {"fibe": 1.0, "direct_question": 0.2, "selfcheck": 0.0}


def test_fibe_selfcheck_ensemble_scores_given_samples(gateway: Gateway, scripted: Any) -> None:
    samples = ["Bryan McClendon coached at Georgia.", "He coached running backs.", "He played receiver."]
    stats = CallStats()
    result = fibe.detect(
        stats=stats,
        sentences=fibe_paper.SENTENCES,
        prompt=fibe_paper.PROMPT,
        samples=samples,
        model=scripted(mcclendon_model([])),
        variant="fibe+selfcheck+sbc+dq",
        n=3,
        gateway=gateway,
    )
    r = len(fibe_paper.SENTENCES)
    assert result.meta.calls == stats.planned == (1 + 3 + r) + r + 3 * r  # FIBE + DQ + SCGP on given samples
    h_p = [u.evidence["h_selfcheck"] for u in result.units]
    assert h_p == [0.0] * 8 + [1.0, 0.0, 0.0]  # SCGP: No for the 2014 sentence against every sample
    plus = [
        min(1.0, 0.5 * u.evidence["h_fibe"] + 0.2 * u.evidence["h_direct_question"] + 0.5 * p)
        for u, p in zip(result.units, h_p, strict=True)
    ]
    assert [u.score for u in result.units] == pytest.approx(snowballing_correction(plus))
    assert result.evidence["samples"] == samples and result.units[8].evidence["supported"] == ["no"] * 3


def test_bad_model_answers_are_recorded_and_handled_never_a_crash(gateway: Gateway, scripted: Any) -> None:
    sentences = ["Ada Lovelace was born in London.", "She wrote the first program in 1843.", "She died in 1852."]

    def respond(prompt: str, params: dict[str, Any]) -> str:
        if "Fill-in-the-blank Questions: (from" in prompt:
            return (
                "Text=[s0] Ada Lovelace was born in London.\nSubject=<Ada Lovelace:person>\n"
                "Blanks=<London:city>, <Paris:city>\n\n"
                "Text=[s1] She wrote the first program in 1843.\nSubject=<She:person>\nBlanks=<1843:year>\n"
            )
        if "world champion" in prompt:
            if params["seed"] == 1:
                return "[s0] Ada Lovelace was born in Paris."  # s1 and s2 missing
            return "[s0] Ada Lovelace was born in London.\n[s1] She wrote the first program in 1843.\n[s2] She died."
        if "English test grader" in prompt:
            if "Correct answer: She died in 1852." in prompt:
                return "I cannot grade this."
            if "London" in prompt:
                return "[Tom] 100\n[Amy] 0"  # Max left out
            return "[Tom] 100\n[Max] 80"
        raise AssertionError(prompt[:200])

    result = fibe.detect(sentences=sentences, prompt="Ada Lovelace", model=scripted(respond), n=3, gateway=gateway)
    assert result.meta.calls == 1 + 3 + 3
    assert result.meta.events == {
        "blank_not_found": 1,
        "not_in_exam": 1,
        "missing_answer": 2,
        "grade_missing": 1,
        "grade_unparsed": 1,
        "ungraded": 1,
    }
    assert result.evidence["exam"][0] == 'Ada Lovelace was born in "$city_0".'
    assert result.units[0].score == pytest.approx(0.5)  # Tom 100, Amy 0: Max's grade is missing
    assert result.units[1].score == pytest.approx(1 - 180 / 200)  # answer 1 lacked s1
    assert result.units[2].score == fibe.UNGRADED and not result.units[2].parsed
    assert result.meta.parse_failures == 1  # the grader's unreadable answer


def test_unreadable_exam_leaves_sentences_unmasked(gateway: Gateway, scripted: Any) -> None:
    def respond(prompt: str, params: dict[str, Any]) -> str:
        if "Fill-in-the-blank Questions: (from" in prompt:
            return "Sorry, I can't."
        if "world champion" in prompt:
            return "nothing useful"
        raise AssertionError(prompt[:200])

    result = fibe.detect("Ada was born in London. She died.", model=scripted(respond), n=2, gateway=gateway)
    assert result.meta.calls == 1 + 2  # nothing to grade
    assert result.meta.events == {"create_unparsed": 1, "not_in_exam": 2, "missing_answer": 4, "ungraded": 2}
    assert [u.score for u in result.units] == [fibe.UNGRADED] * 2


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"variant": "fibe+magic"}, "unknown FIBE variant"),
        ({"n": 11}, "fibe: n takes 1 to 10, got 11"),
        ({"variant": "fibe+selfcheck+sbc"}, "needs samples, or prompt to regenerate"),
        ({"text": "   "}, "fibe needs text, or sentences"),
    ],
)
def test_bad_input_is_a_clear_error(gateway: Gateway, scripted: Any, kwargs: dict[str, Any], message: str) -> None:
    args = {"text": "Ada was born in London.", **kwargs}
    with pytest.raises(ConfigError, match=message):
        fibe.detect(model=scripted(lambda p, q: "Yes"), gateway=gateway, **args)


def test_direct_question_reads_p_yes_from_a_local_models_log_probs(gateway: Gateway) -> None:
    """The log-prob path end to end on the tiny local model: known = p_1 for Yes, 1 - p_1 for No."""
    result = fibe.detect(
        "Paris is the capital of France. The Moon is made of cheese.",
        prompt="Facts about the world:",
        model="local:smollm2-135m",
        variant="fibe+dq",
        n=1,
        gateway=gateway,
    )
    for unit in result.units:
        dq = unit.evidence["direct_question"]
        assert dq["p_first"] is not None and 0.0 < dq["p_first"] <= 1.0
        if dq["answer"] == "yes":
            assert dq["known"] == pytest.approx(dq["p_first"])
        elif dq["answer"] == "no":
            assert dq["known"] == pytest.approx(1.0 - dq["p_first"])
        else:
            assert dq["known"] == 0.0
        assert unit.evidence["h_direct_question"] == pytest.approx(1.0 - dq["known"])


def generic_model(seen: list[str]) -> Callable[[str, dict[str, Any]], str]:
    """Any passage: blanks the last word of each sentence; students fill in "X"; the grader gives Tom
    50 and everyone else 100; DQ and SCGP say Yes."""
    lock = threading.Lock()

    def respond(prompt: str, params: dict[str, Any]) -> str:
        with lock:
            seen.append(prompt)
        if "Fill-in-the-blank Questions: (from" in prompt:
            texts = prompt.rsplit("Texts:", 1)[1]
            blocks = []
            for sid, sentence in re.findall(r"^\[s(\d+)\] (.*)$", texts, re.MULTILINE):
                words = sentence.rstrip(".").split()
                blocks.append(f"Text=[s{sid}] {sentence}\nSubject=<{words[0]}:thing>\nBlanks=<{words[-1]}:thing>")
            return "\n\n".join(blocks)
        if "world champion" in prompt:
            exam = prompt.rsplit("Fill-in-the-blank Questions:", 1)[1]
            return re.sub(r'"\$[^"]+"', "X", exam.split("Fill-in-the-blank Answers:")[0])
        if "English test grader" in prompt:
            names = re.findall(r"^\[(\w+)\] ", prompt, re.MULTILINE)
            return "\n".join(f"[{name}] {50 if name == 'Tom' else 100}" for name in names)
        return "Yes"

    return respond


def test_bench_runs_fibe_variants_and_shares_their_calls_through_the_cache(
    scripted: Any, gateway: Gateway, tmp_path: Path, data_dir: Path
) -> None:
    seen: list[str] = []
    runs = run_bench(
        ["fibe", "fibe+sbc+dq", "fibe+selfcheck+sbc"],
        tmp_path,
        data_dir,
        limit=3,
        n=2,
        progress=False,
        model=scripted(generic_model(seen), "scripted:fibe"),
        gateway=gateway,
    )
    plain, dq, ensemble_run = runs
    r = plain.metrics["n_sentences"]
    assert plain.meta.calls == 3 * (1 + 2) + r  # per passage 1 + N + |R|
    assert dq.meta.calls == r and dq.meta.cache_hits == plain.meta.calls  # only DQ is new
    assert ensemble_run.meta.calls == 2 * r  # only SCGP on the dataset's 2 samples is new
    assert len(seen) == plain.meta.calls + dq.meta.calls + ensemble_run.meta.calls
    # Tom 50, Amy 100: H_F = 1 - 150 / 200 for every sentence
    assert all(x == pytest.approx(0.25) for s in sentence_scores(plain) for x in s)
    assert plain.meta.events == {} and plain.metrics["auc_pr_nonfact"] > 0
    summary = [
        json.loads((tmp_path / m / "results.json").read_text()) for m in ("fibe", "fibe+sbc+dq", "fibe+selfcheck+sbc")
    ]
    assert not (tmp_path / "results.json").exists()  # several methods: one results.json each
    assert [x["params"]["method"] for x in summary] == ["fibe", "fibe+sbc+dq", "fibe+selfcheck+sbc"]
    assert "| fibe+sbc+dq |" in (tmp_path / "report.md").read_text()


def test_every_fibe_variant_is_a_detector_method(scripted: Any, gateway: Gateway) -> None:
    """detector('fibe+sbc+dq') runs the variant, as `detect fibe+sbc+dq` does (it was refused)."""
    import halluscope

    seen: list[str] = []
    model = scripted(generic_model(seen), "scripted:fibe")
    text = "Albert Einstein was a physicist. He was born in Ulm."
    for variant in fibe.VARIANTS:
        det = halluscope.detector(variant, model=model, n=2, gateway=gateway)
        samples = {"samples": ["x."]} if fibe.VARIANTS[variant].selfcheck else {}  # only +selfcheck reads them
        result = det.detect(text=text, prompt="This is a Wikipedia passage about Albert Einstein:", **samples)
        assert det.method == variant == result.method == result.meta.method and len(result.units) == 2


def test_bench_wikibio_runs_fibe_on_its_own_default_samples(
    scripted: Any, gateway: Gateway, tmp_path: Path, data_dir: Path
) -> None:
    """`bench wikibio --method fibe` without --samples answers the exam once per student (it failed on
    its own default of 20); without an exam method the default stays the dataset's 20."""
    model = scripted(generic_model([]), "scripted:fibe")
    (run,) = run_bench(["fibe"], tmp_path, data_dir, limit=1, progress=False, model=model, gateway=gateway)
    assert run.params["n"] == len(fibe.STUDENTS) == 10
    (unigram,) = run_bench(["selfcheck-unigram"], tmp_path / "u", data_dir, limit=1, progress=False)
    assert unigram.params["n"] == 20
