"""One call to check (issue 44, parts 3 and 5): `halluscope.check` picks grounded with documents and
Direct Question without, draws the verdict, and carries a Document's metadata into the evidence;
`halluscope check` reads the answer on standard input and gates with --exit-code; the pytest helpers
fail with the flagged sentences, their scores and evidence."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from langchain_core.documents import Document

import halluscope
from halluscope.backends.gateway import Gateway
from halluscope.cli import main
from halluscope.errors import ConfigError
from halluscope.testing import assert_not_hallucinated, assert_supported
from tests.calibrations import line
from tests.stub_servers import StubAPI

ANSWER = "Canberra is the capital of Australia. It lies in Sydney."
DOCS = [Document(page_content="Canberra is the capital of Australia.", metadata={"source": "atlas.pdf", "page": 3})]


def supported_when_named(prompt: str, _params: dict[str, Any]) -> str:
    """A scripted judge: with a context, Yes when the sentence's names are all in it; without one (Direct
    Question), No for a sentence about Sydney."""
    if "Context:" in prompt:
        context = prompt.split("Context:", 1)[1].split("Question the sentence answers:", 1)[0]
        sentence = prompt.split("Sentence:", 1)[1].split("Is the sentence", 1)[0]
        names = [w.strip('."') for w in sentence.split() if w[:1].isupper() and w.strip('."') != "It"]
        return "Yes" if all(n in context for n in names) else "No"
    return "No" if "Sydney" in prompt.split("Claim:")[-1] else "Yes"


def test_check_picks_grounded_with_documents_and_direct_question_without(gateway: Gateway, scripted: Any) -> None:
    model = scripted(supported_when_named)
    grounded = halluscope.check(ANSWER, context=DOCS, question="Where is Canberra?", model=model, gateway=gateway)
    assert grounded.method == "grounded" and grounded.verdict is not None
    assert grounded.verdict.flagged == [1] and grounded.verdict.threshold == 0.5
    assert grounded.units[1].evidence["best_chunk_metadata"] == {"source": "atlas.pdf", "page": 3}
    open_answer = halluscope.check(ANSWER, question="Where is Canberra?", model=model, gateway=gateway)
    assert open_answer.method == "direct-question" and open_answer.verdict.flagged == [1]
    assert halluscope.check(ANSWER, model=model, gateway=gateway, threshold=1.5 - 0.5).verdict.count == 1


def test_check_refuses_what_it_cannot_mean() -> None:
    with pytest.raises(ConfigError, match="selfcheck-unigram's raw scores have no default decision"):
        halluscope.check(ANSWER, method="selfcheck-unigram", samples=["Canberra is in Australia."])
    with pytest.raises(ConfigError, match="direct-question reads no context"):
        halluscope.check(ANSWER, method="direct-question", context=["x"])
    with pytest.raises(ConfigError, match="threshold 1.5 flags nothing"):
        halluscope.check(ANSWER, threshold=1.5)
    with pytest.raises(ConfigError, match=r"check scores an answer's sentences; semantic-entropy does not"):
        halluscope.check(ANSWER, method="semantic-entropy")


def test_the_check_command_reads_stdin_and_gates_with_its_exit_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    documents = tmp_path / "docs.json"
    documents.write_text(json.dumps([{"page_content": DOCS[0].page_content, "metadata": {"source": "atlas.pdf"}}]))
    with StubAPI(answer="Yes") as stub:
        stub.answers_by_content["It lies in Sydney."] = "No"
        model = f"openai-compatible:{stub.base_url}/v1#judge"
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(ANSWER.encode())))
        argv = ["check", "--model", model, "--context-file", str(documents), "--exit-code", "--json"]
        assert main(argv) == 1  # a sentence flagged
        result = halluscope.DetectionResult.from_json(capsys.readouterr().out)
        assert result.verdict is not None and result.verdict.flagged == [1]
        assert result.units[1].evidence["best_chunk_metadata"] == {"source": "atlas.pdf"}
        true_only = ["check", "--model", model, "--text", "Canberra is the capital of Australia."]
        assert main([*true_only, "--context-file", str(documents), "--exit-code"]) == 0
        assert "verdict: 0 of 1 units flagged" in capsys.readouterr().out
    assert main(["check", "--text", ANSWER, "--method", "selfcheck-unigram", "--exit-code"]) == 2
    assert "selfcheck-unigram's raw scores have no default decision" in capsys.readouterr().err


def test_the_pytest_helpers_fail_with_the_flagged_sentences_and_their_evidence(gateway: Gateway, scripted: Any) -> None:
    model = scripted(supported_when_named)
    with pytest.raises(AssertionError) as failed:
        assert_supported(ANSWER, DOCS, question="Where is Canberra?", model=model, gateway=gateway)
    message = str(failed.value)
    assert message.startswith("1 of 2 sentences not supported by its documents (grounded, score >= 0.5):")
    assert "[1] score 1.000 >= 0.5: It lies in Sydney." in message and '"source": "atlas.pdf"' in message
    passed = assert_supported("Canberra is the capital of Australia.", DOCS, model=model, gateway=gateway)
    assert passed.verdict is not None and passed.verdict.count == 0
    with pytest.raises(AssertionError, match=r"\[1\] score 1.000 >= 0.5: It lies in Sydney\."):
        assert_not_hallucinated(ANSWER, question="Where is Canberra?", model=model, gateway=gateway)
    history = " ".join(f"In {1900 + i} the city held its {i}th fair." for i in range(30))  # 1,000 characters first
    long = [f"{history} Canberra lies in the Australian Capital Territory."]
    with pytest.raises(AssertionError) as failed:
        assert_supported(ANSWER, long, model=model, gateway=gateway)
    assert "closest in the documents: Canberra lies in the Australian Capital Territory." in str(failed.value)


def test_direct_question_without_a_model_runs_on_the_default_local_model(
    gateway: Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    """check, its pytest helper and `check` without documents or a model: Direct Question on the strongest
    local model (here SmolLM2 stands in for it: the test asserts which model ran, not its quality)."""
    from halluscope import check_answer

    monkeypatch.setattr(check_answer, "default_spec", lambda: "local:smollm2-135m")
    result = halluscope.check("Canberra is the capital of Australia.", question="Where is Canberra?", gateway=gateway)
    assert result.method == "direct-question" and result.error is None
    assert result.meta.models == ["local:smollm2-135m"] and result.meta.calls == 1


def test_check_takes_the_force_calibration_its_refusal_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fitted = line("selfcheck-unigram", (0.0, 10.0), (0.1, 0.9), settings={"selfcheck-unigram": {"n": 20}})
    fitted = fitted.save(tmp_path / "calibration.json")
    argv = ["check", "--text", ANSWER, "--calibration", str(fitted), "--opt", 'samples=["Canberra is in Australia."]']
    assert main(argv) == 2
    assert "--force-calibration" in capsys.readouterr().err  # fitted on 20 samples, given 1
    assert main([*argv, "--force-calibration", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["method"] == "selfcheck-unigram"
