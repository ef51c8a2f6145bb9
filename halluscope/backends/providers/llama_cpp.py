"""Local GGUF models through llama-cpp-python: chat with the GGUF's own template, token log-probs from raw
logits, the model registry's files (`models list`, `models pull`), no key, no network."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from halluscope.backends.providers import ModelSpec, Provider

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import BaseMessage

    from halluscope.backends.logprobs import LogProbModel
    from halluscope.backends.retry import RetryPolicy


class Local(Provider):
    name = "local"
    in_process = True
    about = "a registry model (`halluscope models list`) or any GGUF file, offline through llama-cpp-python"
    chat_logprobs = True
    empty_reply_is_answer = True  # its engine would give the same again: returned, never cached
    decodes_samples_together = True  # n samples of a prompt: one batch, the prompt evaluated once

    def chat_model(self, spec: ModelSpec, timeout: float) -> BaseChatModel:
        from halluscope.backends.local import LocalChatModel, model_file

        return LocalChatModel(model_path=str(model_file(spec.model)), model_id=spec.key)

    def warm(self, chat: BaseChatModel) -> None:
        from pathlib import Path

        from halluscope.backends.local import LocalChatModel, load_llama

        if isinstance(chat, LocalChatModel):  # the context p(Yes) and log-probs read (grounded's and DQ's)
            load_llama(Path(chat.model_path), logits_all=True, n_ctx=chat.n_ctx)

    def sample_together(
        self, chat: BaseChatModel, messages: list[BaseMessage], seeds: list[int | None], params: dict[str, Any]
    ) -> list[BaseMessage] | None:
        from halluscope.backends.local import LocalChatModel

        return chat.sample_together(messages, seeds, **params) if isinstance(chat, LocalChatModel) else None

    def logprob_model(self, spec: ModelSpec, retry: RetryPolicy, timeout: float) -> LogProbModel:
        from halluscope.backends.logprobs import LlamaCppLogProbModel

        return LlamaCppLogProbModel(spec.model)

    def models(self) -> list[dict[str, Any]]:
        from halluscope.backends.local import registry_rows

        return registry_rows()


PROVIDERS = (Local(),)
