"""Any Hugging Face causal-LM directory as a LogProbModel (``transformers:<directory>``): the log-prob
route of a model with no GGUF. Chat goes through local: or a server."""

from __future__ import annotations

from typing import TYPE_CHECKING

from halluscope.backends.providers import ModelSpec, Provider
from halluscope.errors import ModelSpecError

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

    from halluscope.backends.logprobs import LogProbModel
    from halluscope.backends.retry import RetryPolicy


class Transformers(Provider):
    name = "transformers"
    in_process = True
    about = "a Hugging Face causal-LM directory, for log-probabilities (transformers:<directory>)"

    def chat_model(self, spec: ModelSpec, timeout: float) -> BaseChatModel:
        raise ModelSpecError(
            f"{spec.key}: transformers: models read log-probabilities (PHR, token-logprob's proxy); "
            "chat with local:<name or path.gguf> or an openai-compatible: server"
        )

    def logprob_model(self, spec: ModelSpec, retry: RetryPolicy, timeout: float) -> LogProbModel:
        from halluscope.backends.logprobs import TransformersLogProbModel

        return TransformersLogProbModel(spec.model)


PROVIDERS = (Transformers(),)
