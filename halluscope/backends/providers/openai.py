"""OpenAI, and any OpenAI-compatible server (vLLM, llama.cpp's server, ...): chat through
langchain-openai, token log-probs in chat replies, and a server's completions as a LogProbModel."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from pydantic import SecretStr

from halluscope.backends.providers import ModelSpec, Provider, require_env, sdk_errors, split_query
from halluscope.errors import ModelSpecError

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

    from halluscope.backends.logprobs import LogProbModel
    from halluscope.backends.retry import RetryPolicy


class OpenAI(Provider):
    name = "openai"
    about = "OpenAI's API: OPENAI_API_KEY; OPENAI_BASE_URL optional"
    key_variable = "OPENAI_API_KEY"
    spec_env = ("OPENAI_BASE_URL",)
    integration = "langchain_openai"
    chat_logprobs = True

    def spec(self, rest: str, shown: str) -> ModelSpec:
        return ModelSpec(self.name, rest, os.environ.get("OPENAI_BASE_URL") or None)

    def api_key(self, spec: ModelSpec) -> str:
        return require_env("OPENAI_API_KEY", spec)

    def chat_model(self, spec: ModelSpec, timeout: float) -> BaseChatModel:
        from langchain_openai import ChatOpenAI

        base_url, query = split_query(spec.base_url) if spec.base_url else (None, {})
        return ChatOpenAI(
            model=spec.model,
            api_key=SecretStr(self.api_key(spec)),
            base_url=base_url,
            default_query=query or None,
            max_retries=0,
            timeout=timeout,
            cache=False,
            disable_streaming=True,
        )

    def logprob_model(self, spec: ModelSpec, retry: RetryPolicy, timeout: float) -> LogProbModel:
        raise ModelSpecError(
            f"{spec.key}: OpenAI's chat models give sampled-token log-probs but cannot score a given continuation; "
            "use local:, transformers: or openai-compatible: for a LogProbModel"
        )

    def call_params(self, spec: ModelSpec, params: dict[str, Any]) -> dict[str, Any]:
        if params.get("max_tokens") is not None and spec.base_url:
            # langchain-openai sends max_completion_tokens, which llama.cpp's server ignores
            params = {**params, "extra_body": {"max_tokens": params["max_tokens"]}}
        return params

    def connection_errors(self) -> tuple[type[BaseException], ...]:
        return sdk_errors("openai", "APIConnectionError")

    def unreadable_errors(self) -> tuple[type[BaseException], ...]:
        return sdk_errors("openai", "APIResponseValidationError")

    def bad_reply(self, exc: BaseException) -> str | None:
        # langchain-openai reads a 200 without 'choices' ({}) with a TypeError
        return "sent a reply with no choices" if isinstance(exc, TypeError) and "'choices'" in str(exc) else None


class OpenAICompatible(OpenAI):
    name = "openai-compatible"
    about = "a vLLM / llama.cpp / any OpenAI-compatible server: openai-compatible:<base_url>#<model>"
    key_variable = "OPENAI_COMPATIBLE_API_KEY"
    spec_env = ()  # its base URL is in the spec

    def spec(self, rest: str, shown: str) -> ModelSpec:
        base_url, hash_sep, model = rest.rpartition("#")
        if not hash_sep or not base_url or not model:
            raise ModelSpecError(
                f"{shown!r}: write openai-compatible:<base_url>#<model>, e.g. openai-compatible:http://127.0.0.1:8000/v1#qwen"
            )
        if not base_url.startswith(("http://", "https://")):
            raise ModelSpecError(f"{shown!r}: the base URL must start with http:// or https://")
        return ModelSpec(self.name, model, base_url.rstrip("/"))

    def api_key(self, spec: ModelSpec) -> str:
        return os.environ.get("OPENAI_COMPATIBLE_API_KEY") or "not-needed"

    def logprob_model(self, spec: ModelSpec, retry: RetryPolicy, timeout: float) -> LogProbModel:
        from halluscope.backends.logprobs import OpenAICompatibleLogProbModel

        base_url, query = split_query(str(spec.base_url))
        return OpenAICompatibleLogProbModel(
            base_url, spec.model, self.api_key(spec), timeout, retry, query=query, faults=self
        )


PROVIDERS = (OpenAI(), OpenAICompatible())
