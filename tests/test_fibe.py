"""FIBE (Hirano et al.): exam construction and formulas on the paper's worked example and on
hand-worked numbers; the graph's call counts, cache replay and handling of bad model answers."""

from __future__ import annotations

import math
import re

import pytest

from halluscope.prompts import parsers
from halluscope.scoring.fibe import (
    build_exam,
    ensemble,
    ensemble_weights,
    fibe_score,
    first_token_probability,
    known_value,
    snowballing_correction,
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
