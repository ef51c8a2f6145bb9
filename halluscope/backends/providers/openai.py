"""OpenAI, and any OpenAI-compatible server (vLLM, llama.cpp's server, ...): chat through
langchain-openai, token log-probs in chat replies, and a server's completions as a LogProbModel."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import astuple
from typing import TYPE_CHECKING, Any

from pydantic import SecretStr

from halluscope.backends.logprobs import (
    LogProbMismatchError,
    LogProbModel,
    Sample,
    Sampling,
)
from halluscope.backends.providers import ModelSpec, Provider, require_env, sdk_errors, split_query
from halluscope.backends.retry import BadReplyError, Faults, RetryPolicy, call_with_retries
from halluscope.errors import ModelSpecError, ModelUnavailableError, redact_credentials

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel


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
        base_url, query = split_query(str(spec.base_url))
        return OpenAICompatibleLogProbModel(
            base_url, spec.model, self.api_key(spec), timeout, retry, query=query, faults=self
        )


class OpenAICompatibleLogProbModel(LogProbModel):
    """A completions server that echoes prompt log-probs (vLLM, llama.cpp's server).

    Every echoed row is checked against the same row's top log-probs: llama-cpp-python 0.3.36's
    server was seen echoing prompt log-probs that disagree with its own top rows (and with local
    teacher forcing of the same model); such numbers raise LogProbMismatchError, never a score.
    """

    TOLERANCE = 1e-3

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str = "not-needed",
        timeout: float = 120.0,
        retry: RetryPolicy | None = None,
        *,
        query: dict[str, str] | None = None,
        faults: Faults | None = None,
    ) -> None:
        """``base_url`` without its query string, which comes as ``query`` (the client appends its paths to
        the URL); ``faults``: the provider's adapter, for the retry policy."""
        import openai

        self.name = redact_credentials(f"openai-compatible:{base_url}#{model}")
        self.model = model
        self.retry = retry or RetryPolicy.from_env()
        self.faults = faults
        # the client's own retries are off: the one retry policy (HALLUSCOPE_MAX_ATTEMPTS) applies here too
        self._client = openai.OpenAI(
            base_url=base_url, api_key=api_key, max_retries=0, timeout=timeout, default_query=query or None
        )

    def _complete(self, **kwargs: Any) -> Any:
        def attempt() -> Any:
            resp = self._client.completions.create(model=self.model, **kwargs)
            if not getattr(resp, "choices", None):
                raise BadReplyError("sent a completion without choices")
            return resp

        return call_with_retries(attempt, self.retry, self.name, self.faults)

    def score_many(self, prompt: str, continuations: Sequence[str]) -> list[float]:
        out = []
        for continuation in continuations:
            if not continuation:
                out.append(0.0)
                continue
            resp = self._complete(prompt=prompt + continuation, max_tokens=1, temperature=0.0, echo=True, logprobs=1)
            lp = resp.choices[0].logprobs
            if lp is None or not lp.token_logprobs:
                raise ModelUnavailableError(f"{self.name} returned no echoed prompt log-probs (echo + logprobs)")
            generated = resp.usage.completion_tokens if resp.usage else 1
            rows = list(zip(lp.tokens, lp.token_logprobs, lp.top_logprobs or [None] * len(lp.tokens), strict=False))
            rows = rows[: len(rows) - generated]
            # Servers count text offsets over their own detokenisation (llama.cpp drops special
            # tokens), so the continuation is found from the end: the echoed tokens covering its text.
            total, covered = 0.0, 0
            for tok, value, top in reversed(rows):
                if covered >= len(continuation):
                    break
                if value is None:
                    raise ModelUnavailableError(f"{self.name} echoed no log-prob for token {tok!r}")
                if top and tok in top and abs(top[tok] - value) > self.TOLERANCE:
                    raise LogProbMismatchError(
                        f"{self.name} echoed log-prob {value:.2f} for token {tok!r} but lists it at {top[tok]:.2f} "
                        "in the same row's top log-probs: its prompt log-probs are wrong (seen with "
                        "llama-cpp-python 0.3.36's server); score with local:<model> or a vLLM server instead"
                    )
                total += float(value)
                covered += len(tok)
            out.append(total)
        return out

    def draw(self, prompt: str, how: Sampling) -> list[Sample]:
        n, max_tokens, temperature, top_p, stop, seed = astuple(how)
        samples = []
        for i in range(n):
            resp = self._complete(
                prompt=prompt,
                max_tokens=max_tokens,
                temperature=temperature,
                top_p=top_p,
                stop=list(stop) or None,
                seed=None if seed is None else seed + i,
                logprobs=1,
            )
            choice = resp.choices[0]
            lp = choice.logprobs
            values = [float(v) for v in (lp.token_logprobs if lp else []) if v is not None and not math.isnan(v)]
            samples.append(Sample(choice.text, values, list(lp.tokens) if lp else []))
        return samples


PROVIDERS = (OpenAI(), OpenAICompatible())
