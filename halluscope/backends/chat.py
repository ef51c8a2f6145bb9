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

from typing import TYPE_CHECKING

from langchain_core.language_models import BaseChatModel

from halluscope.backends.providers import ModelSpec, Provider, message_logprobs, providers
from halluscope.backends.providers import get as declared_provider
from halluscope.backends.providers.langchain import PROVIDER_NAME, LangChain, inferred_provider, langchain_providers
from halluscope.backends.retry import RetryPolicy
from halluscope.errors import ModelSpecError, redact_credentials

if TYPE_CHECKING:
    from halluscope.backends.logprobs import LogProbModel

__all__ = ["ModelSpec", "adapter", "load_logprob_model", "make_chat_model", "message_logprobs", "parse_model_spec"]


def own_providers() -> list[str]:
    """halluscope's own routes and the installed packages' (not init_chat_model's)."""
    return [name for name, p in providers().items() if p.halluscopes_own]


def adapter(name: str) -> Provider:
    """The adapter of a spec's provider: a declared one, else init_chat_model's route of that name."""
    return declared_provider(name) or LangChain(name)


def runs_in_process(model: object) -> bool:
    """Whether a model spec's provider runs the model inside this process (llama.cpp, transformers):
    each worker loads its own, computes on its own CPUs and keeps its own concurrency limit."""
    if not isinstance(model, str):
        return False
    provider, sep, _ = model.strip().partition(":")
    declared = declared_provider(provider) if sep else None  # init_chat_model's routes never run in process
    return declared is not None and declared.in_process


def parse_model_spec(spec: str) -> ModelSpec:
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
    parsed = parse_model_spec(spec)
    return adapter(parsed.provider).logprob_model(parsed, retry or RetryPolicy.from_env(), timeout)
