"""Parsers on the example completions printed in the papers (and the variations models produce)."""

from __future__ import annotations

import pytest

from halluscope.errors import ParseError
from halluscope.prompts import parsers

# FIBE Appendix E.3.1, completion example (first blocks), with the paper's line wrapping.
FIBE_CREATE_COMPLETION = """\
Text=[s0] Bryan McClendon (born April 28, 1983) is an American football coach and
former player.
Subject=<Bryan McClendon:person>
Blanks=<April:month>, <28:day>, <1983:year>, <American:nationality>,
<football coach:profession>, <former player:profession>

Text=[s1] He is currently the offensive coordinator and quarterbacks coach at the
University of Georgia.
Subject=<He:person>
Blanks=<offensive coordinator:profession>, <quarterbacks coach:profession>,
<University of Georgia:university>

Text=[s7] In 2012, he returned to Georgia as the running backs coach.
Subject=<he:person>
Blanks=<2012:year>, <Georgia:university>, <running backs coach:profession>
"""

# FIBE Appendix E.3.2, completion example (excerpt).
FIBE_ANSWER_COMPLETION = """\
[s0] Bryan McClendon (born December 28, 1982) is an American football coach and
former player.
[s1] He is currently the wide receivers coach and passing game coordinator at the
University of Oregon.
[s7] In 2012, he returned to the University of Georgia as the running backs coach.
"""

# Semantic-entropy walkthrough: question generation output.
SE_QUESTIONS = """\
1. What area of research is Joshua Schrier particularly known for? - Computational materials science
2. Which field does Joshua Schrier mainly contribute to? - Materials science
3. What kind of impact has Joshua Schrier had in his field of study? - Significant"""

# FEWL Appendix D.2.
FEWL_D2 = """\
0-th fake answer is: Watermelon seeds will grow inside you.

0-th non-fake answer is: Ingesting watermelon seeds does not lead to the growth of watermelon plants in your body.

1-th fake answer is: Watermelon seeds are poisonous.

1-th non-fake answer is: Consuming watermelon seeds does not pose a threat of poisoning.
"""


def test_fibe_exam_reads_subjects_and_blanks_across_wrapped_lines() -> None:
    exam = parsers.fibe_exam(FIBE_CREATE_COMPLETION)
    assert [e["sid"] for e in exam] == [0, 1, 7]
    assert exam[0]["text"] == "Bryan McClendon (born April 28, 1983) is an American football coach and former player."
    assert exam[0]["subject"] == {"object": "Bryan McClendon", "hypernym": "person"}
    assert [b["object"] for b in exam[0]["blanks"]] == [
        "April",
        "28",
        "1983",
        "American",
        "football coach",
        "former player",
    ]
    assert exam[1]["blanks"][-1] == {"object": "University of Georgia", "hypernym": "university"}
    assert exam[2]["blanks"][0] == {"object": "2012", "hypernym": "year"}


def test_fibe_answers_are_keyed_by_serial_number() -> None:
    answers = parsers.bracket_sentences(
        '"This is a Wikipedia passage about Bryan McClendon:"\n' + FIBE_ANSWER_COMPLETION
    )
    assert sorted(answers) == [0, 1, 7]
    assert (
        answers[1]
        == "He is currently the wide receivers coach and passing game coordinator at the University of Oregon."
    )


def test_fibe_scores_from_the_papers_grader_completion() -> None:
    raw = "[Tom] 0\n [Amy] 100\n[Max] 100\n[Leo] 75\n[Ava] 0"
    assert parsers.bracket_scores(raw) == {"Tom": 0.0, "Amy": 100.0, "Max": 100.0, "Leo": 75.0, "Ava": 0.0}
    assert parsers.bracket_scores("[Tom]: 120, [Amy] - 40.5") == {"Tom": 100.0, "Amy": 40.5}


@pytest.mark.parametrize(
    ("raw", "label"), [("Yes", "yes"), ("No", "no"), (" no.", "no"), ("YES, it is", "yes"), ("**Yes**", "yes")]
)
def test_yes_no(raw: str, label: str) -> None:
    assert parsers.yes_no(raw) == label


@pytest.mark.parametrize("raw", ["Maybe", "The answer is yes", "Nope", ""])
def test_yes_no_failure_keeps_the_raw_text(raw: str) -> None:
    with pytest.raises(ParseError) as info:
        parsers.yes_no(raw)
    assert info.value.raw == raw


@pytest.mark.parametrize(
    ("raw", "label"),
    [
        ("Entailment", "entailment"),
        ("neutral.", "neutral"),
        ("Contradiction - they differ", "contradiction"),
        ("This is an entailment, not a contradiction", "entailment"),
    ],
)
def test_entailment_label(raw: str, label: str) -> None:
    assert parsers.entailment_label(raw) == label


def test_decomposition_bullets_join_wrapped_lines() -> None:
    raw = (
        "- Joshua Schrier is an American computational chemist.\n"
        "- He is a Professor of Chemistry\n  at Fordham University.\n* He develops algorithms."
    )
    assert parsers.bullet_list(raw) == [
        "Joshua Schrier is an American computational chemist.",
        "He is a Professor of Chemistry at Fordham University.",
        "He develops algorithms.",
    ]
    with pytest.raises(ParseError):
        parsers.bullet_list("no list here")


def test_numbered_questions_and_answers() -> None:
    pairs = parsers.numbered_qa(
        SE_QUESTIONS + "\n4. Where does he teach? \u2013 Fordham University\n5. A line without an answer"
    )
    assert pairs[0] == {
        "question": "What area of research is Joshua Schrier particularly known for?",
        "answer": "Computational materials science",
    }
    assert pairs[3] == {"question": "Where does he teach?", "answer": "Fordham University"}
    assert len(pairs) == 4


def test_clue_concepts_in_the_papers_formats() -> None:
    table7 = "\"'Basketball's origins', 'Evolution of basketball', 'Modern era of basketball'\""
    assert parsers.concept_list(table7) == [
        "Basketball's origins",
        "Evolution of basketball",
        "Modern era of basketball",
    ]
    table8 = (
        "\u201cSaliva production and yawning\u201d, \u201cMuscles involved in yawning\u201d, "
        "\u201cNormal bodily reaction\u201d"
    )
    assert parsers.concept_list(table8) == [
        "Saliva production and yawning",
        "Muscles involved in yawning",
        "Normal bodily reaction",
    ]
    listed = "1. Sun composition\n2. Nuclear fusion\n\nparagraph: a model that kept going"
    assert parsers.concept_list(listed) == ["Sun composition", "Nuclear fusion"]
    assert parsers.concept_list("Sun, nuclear fusion, sun") == ["Sun", "nuclear fusion"]


def test_fewl_pairs_from_appendix_d2_and_the_d1_template() -> None:
    assert parsers.iw_co_pairs(FEWL_D2) == [
        {
            "wrong": "Watermelon seeds will grow inside you.",
            "corrected": "Ingesting watermelon seeds does not lead to the growth of watermelon plants in your body.",
        },
        {
            "wrong": "Watermelon seeds are poisonous.",
            "corrected": "Consuming watermelon seeds does not pose a threat of poisoning.",
        },
    ]
    template_style = (
        "1. Wrong Answer: Birds are mammals. 1. Non-Wrong Answer: Birds don't belong to the mammalian class.\n"
        "2. Wrong Answer: Birds have teeth.\n2. Non-Wrong Answer: Birds lack teeth.\n"
        "3. Wrong Answer: Birds are fish."  # cut off: a short list is data, not a failure
    )
    assert parsers.iw_co_pairs(template_style) == [
        {"wrong": "Birds are mammals.", "corrected": "Birds don't belong to the mammalian class."},
        {"wrong": "Birds have teeth.", "corrected": "Birds lack teeth."},
    ]


def test_fewl_pairs_read_incorrect_answer_as_wrong() -> None:
    small_model = (
        "1. Birds are mammals.\n2. Non-Wrong Answer: Seeds are nuts.\n"
        "3. Incorrect Answer: X is y.\n4. Non-Wrong Answer: X is z."
    )
    assert parsers.iw_co_pairs(small_model) == [{"wrong": "X is y.", "corrected": "X is z."}]


def test_choice_letter() -> None:
    for raw, letter in [
        ("B", "B"),
        ("(c) The seeds", "C"),
        ("Answer: d.", "D"),
        ("The answer is E", "E"),
        ("A\nso", "A"),
    ]:
        assert parsers.choice_letter(raw) == letter
    for raw in ["I think it is B", "A good question", "12"]:
        with pytest.raises(ParseError):
            parsers.choice_letter(raw)


def test_icl_example_and_label() -> None:
    assert parsers.icl_example(" the film drags on .\nLabel: subjective\n\nInput: next") == {
        "x": "the film drags on .",
        "y": "subjective",
    }
    assert parsers.icl_example("Input: a b\nLabel: objective") == {"x": "a b", "y": "objective"}
    with pytest.raises(ParseError):
        parsers.icl_example("Label missing")
    assert parsers.icl_label(" objective\nInput:") == "objective"


def test_every_parser_refuses_empty_text() -> None:
    for name, parse in parsers.PARSERS.items():
        with pytest.raises(ParseError):
            parse("   ")
            pytest.fail(f"{name} accepted empty text")
