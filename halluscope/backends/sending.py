"""A call that missed the cache, sent: its record (``Request``), the step that sends it under the retry
policy holding one of its model's slots per try (``Send``), the parameters its provider's client takes,
the data its reply holds, and whether that is a real answer (the only kind ever cached)."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import BaseMessage

from halluscope.backends.limits import Limiter
from halluscope.backends.models import ResolvedChat
from halluscope.backends.providers import bad_replies
from halluscope.backends.retry import BadReplyError, RetryPolicy, acall_with_retries, call_with_retries
from halluscope.backends.stats import CallStats
from halluscope.backends.steps import Step
from halluscope.prompts.registry import PromptTemplate

SENT = "sent"  # a fresh reply's (prompt tokens reused, prompt token ids): counted, never cached


@dataclass
class Request:
    """A call that missed the cache: everything needed to send it and to cache its answer."""

    model: ResolvedChat
    prompt: PromptTemplate
    ref: str  # the prompt as results record it (gateway.prompt_ref)
    key: str
    sample_index: int
    kwargs: dict[str, Any]
    messages: list[BaseMessage]


def provider_kwargs(m: ResolvedChat, params: Mapping[str, Any], sample_index: int) -> dict[str, Any]:
    """A call's parameters as its provider's client takes them: seeds stepped by sample index, log-probs
    asked in the form every server answers."""
    kwargs = dict(params)
    if kwargs.get("seed") is not None:
        kwargs["seed"] = int(kwargs["seed"]) + sample_index  # N seeded samples must differ
    if kwargs.get("logprobs") is False:
        kwargs.pop("logprobs")
    elif kwargs.get("logprobs") and kwargs.get("top_logprobs") is None:
        kwargs["top_logprobs"] = 0  # llama.cpp's server returns no log-probs without it; OpenAI accepts 0
    return m.adapter.call_params(m.spec, kwargs) if m.spec is not None else kwargs


def reply_data(req: Request, message: BaseMessage) -> dict[str, Any]:
    """The reply's cacheable data; a reply that is not a real answer raises BadReplyError (retried):
    empty content, or no log-probs when they were asked for. A local model's empty answer is
    returned (its engine would give the same again) but, being empty, never cached."""
    prompt_tokens, completion_tokens = req.model.adapter.usage(message)
    data = {  # text as a plain str (LangChain gives a TextAccessor), as the cache gives it back
        "text": str(message.text) if isinstance(message.text, str) else str(message.content),
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "logprobs": req.model.adapter.reply_logprobs(message),
        "prompt_ref": req.ref,
        SENT: req.model.adapter.prompt_reuse(message),  # this call's own, never cached
    }
    if not data["text"].strip():
        if req.model.adapter.empty_reply_is_answer:
            return data
        raise BadReplyError("sent an empty reply (no content)")
    if req.kwargs.get("logprobs") and not data["logprobs"]:
        raise BadReplyError("sent no token log-probs although they were asked for")
    return data


def real_answer(data: Mapping[str, Any], logprobs: bool) -> bool:
    """Whether a reply (fresh, or read from the cache) is an answer worth keeping: non-empty text, and
    the log-probs when they were asked for. Anything else is never cached, nor replayed when an older
    version cached it."""
    text = data.get("text")
    return isinstance(text, str) and bool(text.strip()) and (not logprobs or bool(data.get("logprobs")))


@dataclass(frozen=True)
class Send(Step):
    """A request that missed the cache, sent to its provider under the retry policy, holding one of the
    model's concurrency slots per try: the client's ``invoke``, or its ``ainvoke``. Each try asks the
    run's budget first (on its stats), and each retry is counted on the run's stats and budget."""

    limiter: Limiter
    retry: RetryPolicy
    req: Request

    def run(self, stats: CallStats | None) -> dict[str, Any]:
        req = self.req

        def attempt() -> dict[str, Any]:
            sending(stats)
            with self.limiter.slot(), bad_replies(req.model.adapter):
                sending(stats)  # again once the slot is held: the run may have been cut while it waited
                chat, kwargs = req.model.adapter.invocation(req.model.chat, req.kwargs)
                message = chat.invoke(req.messages, **kwargs)
            return reply_data(req, message)

        retried = functools.partial(retrying, stats)
        return call_with_retries(attempt, self.retry, req.model.key, req.model.adapter, retried)

    async def arun(self, stats: CallStats | None) -> dict[str, Any]:
        req = self.req

        async def attempt() -> dict[str, Any]:
            sending(stats)
            async with self.limiter.aslot():
                sending(stats)  # again once the slot is held: the run may have been cut while it waited
                with bad_replies(req.model.adapter):
                    chat, kwargs = req.model.adapter.invocation(req.model.chat, req.kwargs)
                    message = await chat.ainvoke(req.messages, **kwargs)
            return reply_data(req, message)

        retried = functools.partial(retrying, stats)
        return await acall_with_retries(attempt, self.retry, req.model.key, req.model.adapter, retried)


def sending(stats: CallStats | None) -> None:
    """Before a request or forward pass: the run's budget refuses it once the run is cut."""
    if stats is not None and stats.budget is not None:
        stats.budget.sending()


def retrying(stats: CallStats | None) -> None:
    """A failed request tried again: one more retry on the run's stats, one more call of its budget."""
    if stats is not None:
        stats.add_retry()
        if stats.budget is not None:
            stats.budget.retrying()
