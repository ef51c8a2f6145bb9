"""Anthropic's Messages API through langchain-anthropic: no token log-probs, no seed."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from pydantic import SecretStr

from halluscope.backends.providers import LOGPROB_METHODS, ModelSpec, Provider, require_env, sdk_errors
from halluscope.errors import ConfigError

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

    from halluscope.backends.logprobs import LogProbModel
    from halluscope.backends.retry import RetryPolicy


class Anthropic(Provider):
    name = "anthropic"
    about = "Anthropic's API: ANTHROPIC_API_KEY; ANTHROPIC_BASE_URL optional. No log-probabilities"
    key_variable = "ANTHROPIC_API_KEY"
    spec_env = ("ANTHROPIC_BASE_URL",)
    integration = "langchain_anthropic"

    def spec(self, rest: str, shown: str) -> ModelSpec:
        return ModelSpec(self.name, rest, os.environ.get("ANTHROPIC_BASE_URL") or None)

    def chat_model(self, spec: ModelSpec, timeout: float) -> BaseChatModel:
        from langchain_anthropic import ChatAnthropic

        return ChatAnthropic(
            model=spec.model,
            api_key=SecretStr(require_env("ANTHROPIC_API_KEY", spec)),
            base_url=spec.base_url,
            max_retries=0,
            timeout=timeout,
            cache=False,
            disable_streaming=True,
        )

    def logprob_model(self, spec: ModelSpec, retry: RetryPolicy, timeout: float) -> LogProbModel:
        raise ConfigError(
            f"{spec.key}: Anthropic gives no log-probabilities; {LOGPROB_METHODS} need local:, transformers: "
            "or openai-compatible: models"
        )

    def call_params(self, spec: ModelSpec, params: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in params.items() if k != "seed"}  # the Messages API has no seed

    def connection_errors(self) -> tuple[type[BaseException], ...]:
        return sdk_errors("anthropic", "APIConnectionError")

    def unreadable_errors(self) -> tuple[type[BaseException], ...]:
        return sdk_errors("anthropic", "APIResponseValidationError")

    def bad_reply(self, exc: BaseException) -> str | None:
        # langchain-anthropic reads a 200 without 'content' with a TypeError
        return f"sent a reply its client could not read ({exc})" if isinstance(exc, TypeError) else None


PROVIDERS = (Anthropic(),)
