"""A provider lives in one place (issue 43): a provider declared in a module of its own and registered the
documented way (an entry point of the 'halluscope.providers' group) works for `detect`, chat and
completion log-probs, retry classification and `models list`, with nothing else edited; halluscope's own
routes are adapters of the same contract."""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

import halluscope
from halluscope.backends import providers
from halluscope.backends.chat import load_logprob_model, parse_model_spec
from halluscope.backends.gateway import Gateway
from halluscope.backends.retry import explain, is_transient
from halluscope.cli import main
from halluscope.errors import ConfigError, ModelSpecError
from halluscope.prompts.registry import PromptRegistry
from tests.conftest import FAST_RETRY

TOY = '''
"""A toy provider: answers Yes (No where the prompt mentions the moon), with log-probs; its client's
dropped connection is its own error class."""

from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from halluscope.backends.logprobs import LogProbModel, Sample
from halluscope.backends.providers import ModelSpec, Provider


class ToyDropped(Exception):
    """The toy client's dropped connection."""


class ToyRefused(Exception):
    status_code = 401


class ToyChat(BaseChatModel):
    model: str
    drops: int = 0  # how many calls drop before one is answered

    @property
    def _llm_type(self) -> str:
        return "toy"

    def _generate(self, messages, stop=None, run_manager=None, **kwargs: Any) -> ChatResult:
        if self.drops > 0:
            object.__setattr__(self, "drops", self.drops - 1)
            raise ToyDropped("the toy line dropped")
        prompt = " ".join(m.text for m in messages)
        answer = "No" if "moon" in prompt.lower() else "Yes"
        metadata = {"logprobs": [{"token": answer, "logprob": -0.25}]} if kwargs.get("logprobs") else {}
        message = AIMessage(
            content=answer,
            response_metadata=metadata,
            usage_metadata={"input_tokens": 7, "output_tokens": 1, "total_tokens": 8},
        )
        return ChatResult(generations=[ChatGeneration(message=message)])


class ToyLogProbs(LogProbModel):
    def __init__(self, name: str) -> None:
        self.name = name

    def sample(self, prompt, n=1, max_tokens=64, temperature=1.0, top_p=1.0, stop=(), seed=None):
        return [Sample("toy", [-0.5]) for _ in range(n)]

    def score_many(self, prompt, continuations):
        return [-0.1 * len(c) for c in continuations]


class Toy(Provider):
    name = "toy"
    about = "a toy provider from a package of its own"
    key_variable = "TOY_API_KEY"
    chat_logprobs = True

    def chat_model(self, spec: ModelSpec, timeout: float) -> BaseChatModel:
        return ToyChat(model=spec.model, drops=1 if spec.model == "flaky" else 0)

    def logprob_model(self, spec, retry, timeout):
        return ToyLogProbs(spec.key)

    def connection_errors(self):
        return (ToyDropped,)

    def models(self):
        return [{"spec": "toy:yes", "installed": True, "about": "says Yes"}]

    decodes_samples_together = True  # toy:batch's samples; it declines every other model's

    def sample_together(self, chat, messages, seeds, params):
        if chat.model != "batch":
            return None
        usage = {"input_tokens": 7, "output_tokens": 2, "total_tokens": 9}
        return [AIMessage(content=f"sample {seed}", usage_metadata=usage) for seed in seeds]
'''


@pytest.fixture
def toy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The toy module and a distribution that declares it under the 'halluscope.providers' entry point
    group, on the path: what `pip install` of a package with the documented pyproject entry does."""
    (tmp_path / "toy_provider.py").write_text(textwrap.dedent(TOY))
    info = tmp_path / "toy_provider-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-provider\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[halluscope.providers]\ntoy = toy_provider:Toy\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    providers.forget()
    yield "toy"
    monkeypatch.delitem(sys.modules, "toy_provider", raising=False)
    providers.forget()


def _gateway() -> Gateway:
    return Gateway(cache=None, registry=PromptRegistry(), retry=FAST_RETRY)


def test_a_provider_registered_the_documented_way_works_everywhere(
    toy: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert parse_model_spec("toy:yes").key == "toy:yes"
    text = "The sun is hot. The moon is cheese."
    samples = ["The sun is a hot star.", "The sun warms the earth."]
    result = halluscope.detector("selfcheck-prompt", model="toy:yes", gateway=_gateway()).detect(
        text=text, samples=samples
    )
    assert [u.score for u in result.units] == [0.0, 1.0] and result.meta.calls == 4
    (tmp_path / "samples.json").write_text(json.dumps(samples))
    argv = [
        "detect",
        "selfcheck-prompt",
        "--model",
        "toy:yes",
        "--text",
        text,
        "--samples-file",
        str(tmp_path / "samples.json"),
    ]
    assert main(argv) == 0
    assert "1.00  The moon is cheese." in capsys.readouterr().out
    # log-probs: in chat replies, and a LogProbModel, because it declares both
    gateway = _gateway()
    assert gateway.gives_logprobs("toy:yes")
    assert gateway.call("toy:yes", "selfcheck.prompt", {"context": "c", "sentence": "s"}, logprobs=True).logprobs == [
        {"token": "Yes", "logprob": -0.25}
    ]
    assert load_logprob_model("toy:yes").score("Q: ", "four") == pytest.approx(-0.4)
    # retry classification: its own dropped connection is transient, its refused key names its variable
    from toy_provider import ToyDropped, ToyRefused

    toy_adapter = providers.get("toy")
    assert is_transient(ToyDropped("dropped"), toy_adapter) and not is_transient(ToyDropped("dropped"))
    assert "check TOY_API_KEY" in str(explain(ToyRefused("no"), "toy:yes", toy_adapter, 1, 0.1))
    flaky = gateway.call("toy:flaky", "selfcheck.prompt", {"context": "c", "sentence": "s"})
    assert flaky.ok and flaky.parsed == "yes"
    assert main(["models", "list"]) == 0
    listed = capsys.readouterr().out
    assert "toy:yes" in listed and "says Yes" in listed


def test_a_retried_toy_call_is_counted_as_one_retry(toy: str) -> None:
    from halluscope.backends.stats import CallStats

    stats = CallStats()
    reply = _gateway().call("toy:flaky", "selfcheck.prompt", {"context": "c", "sentence": "s"}, stats=stats)
    assert reply.ok and stats.retries == 1 and stats.calls == 1


def test_a_provider_entry_point_that_clashes_or_is_not_a_provider_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "bad_provider.py").write_text("from halluscope.backends.providers.openai import OpenAI\nNOT = 3\n")
    info = tmp_path / "bad_provider-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: bad-provider\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[halluscope.providers]\nopenai = bad_provider:OpenAI\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    providers.forget()
    try:
        with pytest.raises(ConfigError, match="declares provider 'openai', which is already declared"):
            providers.providers()
    finally:
        providers.forget()


def test_every_own_route_is_an_adapter_of_the_one_contract() -> None:
    found = providers.providers()
    assert list(found)[:5] == ["openai", "openai-compatible", "anthropic", "local", "transformers"]
    assert [name for name, p in found.items() if p.chat_logprobs] == ["openai", "openai-compatible", "local"]
    assert found["anthropic"].call_params(parse_model_spec("anthropic:c"), {"seed": 1, "temperature": 0}) == {
        "temperature": 0
    }
    with pytest.raises(ConfigError, match="Anthropic gives no log-probabilities"):
        load_logprob_model("anthropic:claude")
    with pytest.raises(ModelSpecError, match="transformers: models read log-probabilities"):
        _gateway().model("transformers:/nowhere")


def test_samples_a_provider_decodes_together_are_cached_one_by_one_and_those_it_declines_are_asked_alone(
    toy: str, tmp_path: Path
) -> None:
    from halluscope.backends.cache import CallCache
    from halluscope.backends.stats import CallStats

    gateway = Gateway(cache=CallCache(tmp_path / "calls"), registry=PromptRegistry(), retry=FAST_RETRY)
    question = {"question": "Who?"}
    stats = CallStats()
    together = gateway.sample("toy:batch", "semantic_entropy.answer", question, 3, stats=stats, seed=10)
    assert [r.text for r in together] == ["sample 10", "sample 11", "sample 12"] and stats.calls == 3
    again = CallStats()
    replay = gateway.sample("toy:batch", "semantic_entropy.answer", question, 3, stats=again, seed=10)
    assert [r.text for r in replay] == [r.text for r in together] and again.cache_hits == 3 and again.calls == 0
    declined = CallStats()
    alone = gateway.sample("toy:yes", "semantic_entropy.answer", question, 3, stats=declined, seed=10)
    assert [r.text for r in alone] == ["Yes"] * 3 and declined.calls == 3  # each its own ToyChat call
