"""An application's answers checked in its own test suite, on the default local model (offline).

    .venv/bin/python -m pytest examples/test_answers_with_pytest.py

The first two tests pass; the third checks a planted falsehood and is expected to fail (xfail): run
it with ``--runxfail`` to see the message a failing check shows a developer, the flagged sentence with
its score and the document it was checked against. halluscope's own tests run the same helpers on a
scripted judge (tests/test_check.py); this file is not part of them (pytest reads tests/ only).
"""

from __future__ import annotations

import pytest
from langchain_core.documents import Document

from halluscope.testing import assert_not_hallucinated, assert_supported

MODEL = "local:qwen2.5-coder-1.5b"
DOCS = [
    Document(
        page_content="Canberra is the capital city of Australia. It was purpose-built as the capital and "
        "lies in the Australian Capital Territory, between Sydney and Melbourne.",
        metadata={"source": "atlas.txt"},
    )
]


def answer(question: str) -> str:
    """Stands for your application (a RAG chain, an agent): here, fixed answers."""
    return {
        "Where is Canberra?": "Canberra is the capital of Australia. It lies in the Australian Capital Territory.",
        "What is Canberra?": "Canberra is the capital city of Australia.",
        "Where is Canberra, planted?": "Canberra is the capital of Australia. It lies on the coast of Queensland.",
    }[question]


def test_the_answer_rests_on_its_documents() -> None:
    assert_supported(answer("Where is Canberra?"), DOCS, question="Where is Canberra?", model=MODEL)


def test_a_short_answer_is_not_flagged_without_documents() -> None:
    assert_not_hallucinated(answer("What is Canberra?"), question="What is Canberra?", model=MODEL)


@pytest.mark.xfail(reason="a planted falsehood: this failure's message is the point", strict=True)
def test_a_planted_falsehood_fails_with_its_sentence() -> None:
    assert_supported(answer("Where is Canberra, planted?"), DOCS, question="Where is Canberra?", model=MODEL)
