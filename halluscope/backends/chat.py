"""Model strings -> LangChain chat models, each through its provider's adapter (backends/providers/).

openai:<model>                        OPENAI_API_KEY (OPENAI_BASE_URL optional)
anthropic:<model>                     ANTHROPIC_API_KEY (ANTHROPIC_BASE_URL optional)
openai-compatible:<base_url>#<model>  vLLM, llama.cpp server, ...; key from
                                      OPENAI_COMPATIBLE_API_KEY if the server wants one
local:<name or path.gguf>             local GGUF models (served by the local-models extra)
<provider>:<model>                    a provider a package declares, or any other LangChain's init_chat_model
                                      knows (ollama:llama3, google_genai:gemini-2.5-flash, bedrock_converse:...),
                                      through its integration package and that package's settings
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from langchain_core.language_models import BaseChatModel

from halluscope.backends.providers import ModelSpec, Provider, message_logprobs, providers
from halluscope.backends.providers import get as declared_provider
from halluscope.backends.providers.langchain import PROVIDER_NAME, LangChain, inferred_provider, langchain_providers
from halluscope.backends.retry import RetryPolicy
from halluscope.errors import ModelSpecError, redact_credentials

if TYPE_CHECKING:
    from halluscope.backends.logprobs import LogProbModel

__all__ = [
    "ModelSpec",
    "ResolvedModel",
    "adapter",
    "load_logprob_model",
    "make_chat_model",
    "message_logprobs",
    "parse_model_spec",
    "resolve",
]


def own_providers() -> list[str]:
    """halluscope's own routes and the installed packages' (not init_chat_model's)."""
    return [name for name, p in providers().items() if p.halluscopes_own]


def adapter(name: str) -> Provider:
    """The adapter of a spec's provider: a declared one, else init_chat_model's route of that name."""
    return declared_provider(name) or LangChain(name)


def runs_in_process(model: object) -> bool:
    """Whether a model spec's provider runs the model inside this process (llama.cpp, transformers):
    each worker loads its own, computes on its own CPUs and keeps its own concurrency limit. Anything
    that is not a spec (a chat model object, an instance key) does not."""
    if not isinstance(model, str) or declared_provider(model.strip().partition(":")[0]) is None:
        return False  # an object, an instance's key, or an init_chat_model route: never in process
    try:
        return resolve(model).in_process
    except ModelSpecError:
        return False


@dataclass(frozen=True)
class ResolvedModel:
    """A model spec parsed and checked once: its canonical spec and its provider's adapter, which says
    what the provider can do (runs in process, gives log-probs, decodes samples together)."""

    spec: ModelSpec
    adapter: Provider

    @property
    def key(self) -> str:
        return self.spec.key

    @property
    def in_process(self) -> bool:
        return self.adapter.in_process

    @property
    def gives_logprobs(self) -> bool:
        return self.adapter.chat_logprobs


_RESOLVED: dict[tuple[str, tuple[str | None, ...]], ResolvedModel] = {}
_RESOLVED_LOCK = threading.Lock()


def resolve(spec: str) -> ResolvedModel:
    """A spec parsed and checked once per process: the door that refuses a bad one before any work (the
    CLI, serve, a detector) and the gateway that later calls it read the same ResolvedModel. The
    environment variables a provider reads into its spec (``spec_env``: OPENAI_BASE_URL ...) are part
    of what is remembered, so a changed variable is read again."""
    if not isinstance(spec, str):
        raise ModelSpecError(f"a model is a 'provider:model' string or a chat model object, got {type(spec).__name__}")
    declared = declared_provider(spec.strip().partition(":")[0])
    key = (spec, tuple(os.environ.get(name) for name in (declared.spec_env if declared else ())))
    found = _RESOLVED.get(key)
    if found is None:
        parsed = parse_model_spec(spec)
        with _RESOLVED_LOCK:
            found = _RESOLVED.setdefault(key, ResolvedModel(parsed, adapter(parsed.provider)))
    return found


def parse_model_spec(spec: str) -> ModelSpec:
    """The spec's grammar, read afresh (``resolve`` reads it once per process and is what callers use)."""
    if not isinstance(spec, str):
        raise ModelSpecError(f"a model is a 'provider:model' string or a chat model object, got {type(spec).__name__}")
    shown = redact_credentials(spec)  # what errors may say of it
    provider, sep, rest = spec.strip().partition(":")
    own = own_providers()
    if not sep or not rest:
        guess = inferred_provider(spec.strip())
        others = ", ".join(langchain_providers(set(own))) or "any installed integration"
        raise ModelSpecError(
            f"model {shown!r} is not 'provider:model'"
            + (f"; did you mean {guess}:{shown}?" if guess else ";")
            + f" providers: {', '.join(own)} "
            "(e.g. openai:gpt-4o-mini, anthropic:claude-sonnet-4-5, "
            "openai-compatible:http://127.0.0.1:8000/v1#my-model, local:qwen2.5-coder-1.5b), "
            f"and through LangChain's init_chat_model: {others}"
        )
    declared = declared_provider(provider)
    if declared is None:
        known = langchain_providers(set(own))
        if not PROVIDER_NAME.match(provider) or (known and provider not in known):
            raise ModelSpecError(
                f"unknown provider {provider!r} in {shown!r}; halluscope's: {', '.join(own)}; "
                f"through LangChain's init_chat_model: {', '.join(known) or 'any installed integration'}"
            )
    return adapter(provider).spec(rest, shown)


def make_chat_model(spec: ModelSpec, timeout: float = 120.0) -> BaseChatModel:
    """The provider's chat model, its own retries and streaming off (the gateway retries, once, and
    caches whole replies; a LangChain event stream would otherwise switch the client to streaming)."""
    return adapter(spec.provider).chat_model(spec, timeout)


def load_logprob_model(spec: str, retry: RetryPolicy | None = None, timeout: float = 120.0) -> LogProbModel:
    """The LogProbModel a spec names, built by its provider's adapter: ``local:<name|path.gguf>``,
    ``transformers:<directory>``, ``openai-compatible:<url>#<model>``, or a package's provider that
    declares one (``retry`` and ``timeout`` apply to a server's requests)."""
    resolved = resolve(spec)
    return resolved.adapter.logprob_model(resolved.spec, retry or RetryPolicy.from_env(), timeout)
