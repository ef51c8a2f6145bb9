"""Model strings -> LangChain chat models. Nothing outside backends/ knows a provider.

openai:<model>                        OPENAI_API_KEY (OPENAI_BASE_URL optional)
anthropic:<model>                     ANTHROPIC_API_KEY (ANTHROPIC_BASE_URL optional)
openai-compatible:<base_url>#<model>  vLLM, llama.cpp server, ...; key from
                                      OPENAI_COMPATIBLE_API_KEY if the server wants one
local:<name or path.gguf>             local GGUF models (served by the local-models extra)
<provider>:<model>                    any other provider LangChain's init_chat_model knows (ollama:llama3,
                                      google_genai:gemini-2.5-flash, bedrock_converse:...), through its
                                      integration package (langchain-ollama, ...) and that package's settings
"""

from __future__ import annotations

import importlib.util
import os
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from pydantic import SecretStr

from halluscope.errors import ConfigError, ModelSpecError, redact_credentials

PROVIDERS = ("openai", "anthropic", "openai-compatible", "local")  # halluscope's own routes
_PROVIDER_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


def langchain_providers() -> dict[str, str]:
    """The providers LangChain's init_chat_model builds, each with the module of its integration.
    (langchain keeps the table private; without it, any provider name is passed on as written.)"""
    from langchain.chat_models import base

    table = getattr(base, "_BUILTIN_PROVIDERS", {})
    return {name: entry[0] for name, entry in table.items() if name not in PROVIDERS}


def _inferred_provider(model: str) -> str | None:
    """The provider LangChain infers from a bare model name ('gpt-4o-mini': openai), where it can."""
    from langchain.chat_models import base

    infer = getattr(base, "_attempt_infer_model_provider", None)  # private: without it, no guess
    try:
        return infer(model) if infer is not None else None
    except Exception:  # noqa: BLE001 - a guess for an error message never raises
        return None


def _integration_missing(provider: str, shown: str) -> str | None:
    """The sentence that names the package to install, when the provider's integration is missing."""
    module = langchain_providers().get(provider)
    if module is None or importlib.util.find_spec(module.split(".")[0]) is not None:
        return None
    package = module.split(".")[0].replace("_", "-")
    return f"{shown!r} needs LangChain's {provider} integration: pip install {package}"


@dataclass(frozen=True)
class ModelSpec:
    provider: str
    model: str
    base_url: str | None = None

    @property
    def key(self) -> str:
        """Canonical name: what the cache key, run metadata, results and errors record. Credentials
        written into the base URL are redacted: they never change an answer, and must not be shown."""
        if self.provider == "openai-compatible":
            return redact_credentials(f"openai-compatible:{self.base_url}#{self.model}")
        if self.base_url:
            return redact_credentials(f"{self.provider}:{self.model}@{self.base_url}")
        return f"{self.provider}:{self.model}"


def parse_model_spec(spec: str) -> ModelSpec:
    if not isinstance(spec, str):
        raise ModelSpecError(f"a model is a 'provider:model' string or a chat model object, got {type(spec).__name__}")
    shown = redact_credentials(spec)  # what errors may say of it
    provider, sep, rest = spec.strip().partition(":")
    if not sep or not rest:
        guess = _inferred_provider(spec.strip())
        others = ", ".join(langchain_providers()) or "any installed integration"
        raise ModelSpecError(
            f"model {shown!r} is not 'provider:model'"
            + (f"; did you mean {guess}:{shown}?" if guess else ";")
            + f" providers: {', '.join(PROVIDERS)} "
            "(e.g. openai:gpt-4o-mini, anthropic:claude-sonnet-4-5, "
            "openai-compatible:http://127.0.0.1:8000/v1#my-model, local:qwen2.5-coder-1.5b), "
            f"and through LangChain's init_chat_model: {others}"
        )
    if provider not in PROVIDERS:
        known = langchain_providers()
        if not _PROVIDER_NAME.match(provider) or (known and provider not in known):
            raise ModelSpecError(
                f"unknown provider {provider!r} in {shown!r}; halluscope's: {', '.join(PROVIDERS)}; "
                f"through LangChain's init_chat_model: {', '.join(known) or 'any installed integration'}"
            )
        missing = _integration_missing(provider, shown)
        if missing:
            raise ModelSpecError(missing)
        return ModelSpec(provider, rest)
    if provider == "openai-compatible":
        base_url, hash_sep, model = rest.rpartition("#")
        if not hash_sep or not base_url or not model:
            raise ModelSpecError(
                f"{shown!r}: write openai-compatible:<base_url>#<model>, e.g. openai-compatible:http://127.0.0.1:8000/v1#qwen"
            )
        if not base_url.startswith(("http://", "https://")):
            raise ModelSpecError(f"{shown!r}: the base URL must start with http:// or https://")
        return ModelSpec("openai-compatible", model, base_url.rstrip("/"))
    if provider == "openai":
        return ModelSpec("openai", rest, os.environ.get("OPENAI_BASE_URL") or None)
    if provider == "anthropic":
        return ModelSpec("anthropic", rest, os.environ.get("ANTHROPIC_BASE_URL") or None)
    return ModelSpec(provider, rest)


def message_logprobs(message: BaseMessage) -> list[Any] | None:
    """A chat reply's token log-probs as providers put them in ``response_metadata`` (OpenAI's
    ``{"content": [...]}``, or the list itself); None where it carries none."""
    found = (message.response_metadata or {}).get("logprobs")
    found = found.get("content") if isinstance(found, dict) else found
    return list(found) if found else None


def split_query(url: str) -> tuple[str, dict[str, str]]:
    """A base URL's query string (a proxy's ``?api_key=``, Azure's ``?api-version=``) apart from it: the
    OpenAI client appends its paths to the base URL, and would write them after the query."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(query="")), dict(parse_qsl(parts.query, keep_blank_values=True))


def _require_env(name: str, spec: ModelSpec) -> str:
    value = os.environ.get(name)
    if not value:
        raise ConfigError(f"{spec.key} needs an API key: set {name} in the environment")
    return value


def make_chat_model(spec: ModelSpec, timeout: float = 120.0) -> BaseChatModel:
    """Build the provider's chat model with its own retries off (the gateway retries, once) and
    streaming off: the gateway caches whole replies, and a LangChain event stream (astream_events)
    would otherwise switch the client to streaming."""
    if spec.provider in ("openai", "openai-compatible"):
        from langchain_openai import ChatOpenAI

        if spec.provider == "openai":
            api_key = _require_env("OPENAI_API_KEY", spec)
        else:
            api_key = os.environ.get("OPENAI_COMPATIBLE_API_KEY") or "not-needed"
        base_url, query = split_query(spec.base_url) if spec.base_url else (None, {})
        return ChatOpenAI(
            model=spec.model,
            api_key=SecretStr(api_key),
            base_url=base_url,
            default_query=query or None,
            max_retries=0,
            timeout=timeout,
            cache=False,
            disable_streaming=True,
        )
    if spec.provider == "anthropic":
        from langchain_anthropic import ChatAnthropic

        return ChatAnthropic(
            model=spec.model,
            api_key=SecretStr(_require_env("ANTHROPIC_API_KEY", spec)),
            base_url=spec.base_url,
            max_retries=0,
            timeout=timeout,
            cache=False,
            disable_streaming=True,
        )
    if spec.provider == "local":
        from halluscope.backends.local import LocalChatModel, model_file

        return LocalChatModel(model_path=str(model_file(spec.model)), model_id=spec.key)
    return _init_chat_model(spec, timeout)


def _init_chat_model(spec: ModelSpec, timeout: float) -> BaseChatModel:
    """Any other provider, through LangChain's init_chat_model: its credentials and endpoint come from
    the integration's own settings (OLLAMA_HOST, GOOGLE_API_KEY ...). Built once to learn its class's
    fields, then with its own retries and streaming off and the timeout set where it has those fields."""
    from langchain.chat_models import init_chat_model

    try:
        fields = type(init_chat_model(spec.model, model_provider=spec.provider)).model_fields
        settings: dict[str, Any] = {"max_retries": 0, "timeout": timeout, "disable_streaming": True}
        settings = {name: value for name, value in settings.items() if name in fields}
        return init_chat_model(spec.model, model_provider=spec.provider, **settings)
    except ImportError as exc:  # the integration package is missing (its message names it)
        raise ModelSpecError(f"{spec.key}: {exc}") from exc
    except ValueError as exc:  # a provider init_chat_model does not know, or settings it refuses
        raise ModelSpecError(f"{spec.key}: {redact_credentials(str(exc)).splitlines()[0]}") from exc
