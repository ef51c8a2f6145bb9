"""Anthropic's Messages API through langchain-anthropic: no token log-probs, no seed."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

from pydantic import SecretStr

from halluscope.backends.providers import LOGPROB_METHODS, ModelSpec, Provider, require_env
from halluscope.errors import ConfigError

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

    from halluscope.backends.logprobs import LogProbModel
    from halluscope.backends.retry import RetryPolicy


def _sdk(name: str) -> tuple[type[BaseException], ...]:
    """The anthropic SDK's error class ``name`` once the SDK is loaded: importing it costs every process ~2 s."""
    module = sys.modules.get("anthropic")
    return (getattr(module, name),) if module is not None else ()


class Anthropic(Provider):
    name = "anthropic"
    about = "Anthropic's API: ANTHROPIC_API_KEY; ANTHROPIC_BASE_URL optional. No log-probabilities"
    key_variable = "ANTHROPIC_API_KEY"
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
        return _sdk("APIConnectionError")

    def unreadable_errors(self) -> tuple[type[BaseException], ...]:
        return _sdk("APIResponseValidationError")

    def bad_reply(self, exc: BaseException) -> str | None:
        # langchain-anthropic reads a 200 without 'content' with a TypeError
        return f"sent a reply its client could not read ({exc})" if isinstance(exc, TypeError) else None


PROVIDERS = (Anthropic(),)
