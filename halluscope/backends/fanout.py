"""Many chat calls at once through the gateway: ``Ask`` (one call as data), N samples of one prompt, the
calls run together on threads or on the event loop (replies in order), and samples of one prompt sent
together to a provider that decodes them together (each still cached under its own key).

The gateway sends one call; this module fans calls out. It takes any object with the gateway's call
path (``Sends``), so it imports nothing above it.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from langchain_core.language_models import BaseChatModel
from langchain_core.runnables.config import ContextThreadPoolExecutor

from halluscope.backends.limits import Limiter
from halluscope.backends.models import ModelLike
from halluscope.backends.providers import Provider
from halluscope.backends.sending import reply_data
from halluscope.backends.stats import CallStats, ChatReply
from halluscope.backends.steps import Step
from halluscope.errors import ConfigError
from halluscope.prompts.registry import PromptTemplate


@dataclass(frozen=True)
class Ask:
    """One chat call as data (what ``Gateway.call`` takes), so a graph node names its calls once and
    runs them either way: ``call_all`` on threads, ``acall_all`` on the event loop."""

    model: ModelLike
    prompt: str | PromptTemplate
    variables: Mapping[str, Any] | None = None
    params: Mapping[str, Any] = field(default_factory=dict)  # sample_index and the call parameters


class Sends(Protocol):
    """What fan-out needs of the gateway: its one-call path, step by step."""

    concurrency: int

    call: Callable[..., ChatReply]  # Gateway.call
    acall: Callable[..., Awaitable[ChatReply]]  # Gateway.acall

    def provider(self, model: ModelLike) -> Provider: ...

    def limiter(self, key: str) -> Limiter: ...

    begin: Callable[..., ChatReply | Any]  # Gateway.begin: the cached reply, or the request to send

    def flight(self, req: Any, stats: CallStats | None) -> ChatReply | object | None: ...

    def finish_request(self, req: Any, data: dict[str, Any], seconds: float, stats: CallStats | None) -> ChatReply: ...

    def land(self, req: Any) -> None: ...


def samples(
    model: ModelLike,
    prompt: str | PromptTemplate,
    variables: Mapping[str, Any] | None,
    n: int,
    params: Mapping[str, Any],
) -> list[Ask]:
    """N calls that differ only in their sample index (0..N-1): N samples of one prompt."""
    if n < 1:
        raise ConfigError(f"n must be at least 1, got {n}")
    return [Ask(model, prompt, variables, {**params, "sample_index": i}) for i in range(n)]


def call_all(
    via: Sends,
    asks: Sequence[Ask],
    stats: CallStats | None = None,
    on_reply: Callable[[ChatReply], None] | None = None,
) -> list[ChatReply]:
    """The calls run concurrently (at most ``concurrency`` threads), their replies in order;
    ``on_reply`` is called as each reply arrives (to drive a progress bar)."""

    def one(ask: Ask) -> ChatReply:
        reply = via.call(ask.model, ask.prompt, ask.variables, stats=stats, **ask.params)
        if on_reply is not None:
            on_reply(reply)
        return reply

    replies: dict[int, ChatReply] = {}
    for group in _sample_groups(via, asks):
        for i, reply in zip(group, _sample_together(via, [asks[i] for i in group], stats), strict=True):
            replies[i] = reply
            if on_reply is not None:
                on_reply(reply)
    rest = [i for i in range(len(asks)) if i not in replies]
    if len(rest) <= 1:
        replies.update((i, one(asks[i])) for i in rest)
    else:
        with ContextThreadPoolExecutor(max_workers=min(len(rest), via.concurrency)) as pool:
            replies.update(zip(rest, pool.map(one, [asks[i] for i in rest]), strict=True))
    return [replies[i] for i in range(len(asks))]


async def acall_all(via: Sends, asks: Sequence[Ask], stats: CallStats | None = None) -> list[ChatReply]:
    """``call_all`` on the event loop: the calls await the provider's async client together (the
    model's limiter still bounds how many are in flight); samples of one prompt to a provider that
    decodes them together, together (on a thread)."""
    replies: dict[int, ChatReply] = {}
    for group in _sample_groups(via, asks):
        together = await asyncio.to_thread(_sample_together, via, [asks[i] for i in group], stats)
        replies.update(zip(group, together, strict=True))
    rest = [i for i in range(len(asks)) if i not in replies]
    sent = await asyncio.gather(
        *(via.acall(asks[i].model, asks[i].prompt, asks[i].variables, stats=stats, **asks[i].params) for i in rest)
    )
    replies.update(zip(rest, sent, strict=True))
    return [replies[i] for i in range(len(asks))]


def _sample_groups(via: Sends, asks: Sequence[Ask]) -> list[list[int]]:
    """The asks that differ only in their sample index, to a provider that decodes samples of one
    prompt together: groups of two or more (positions in ``asks``)."""
    groups: dict[str, list[int]] = {}
    for i, ask in enumerate(asks):
        if "sample_index" not in ask.params or isinstance(ask.model, BaseChatModel):
            continue
        if not via.provider(ask.model).decodes_samples_together:
            continue
        rest = {k: v for k, v in ask.params.items() if k != "sample_index"}
        prompt = ask.prompt if isinstance(ask.prompt, str) else ask.prompt.ref
        same = json.dumps([ask.model, prompt, dict(ask.variables or {}), rest], sort_keys=True, default=str)
        groups.setdefault(same, []).append(i)
    return [group for group in groups.values() if len(group) > 1]


def _sample_together(via: Sends, asks: Sequence[Ask], stats: CallStats | None) -> list[ChatReply]:
    """Samples of one prompt (``asks`` differ only in their sample index): the cache answers those it
    holds, the provider decodes the rest together, and each is cached under its own key, as one call
    would be. A sample another process is asking now is asked alone (it waits for that answer), as
    is every sample the provider declines to decode together (it answers None)."""
    got: dict[int, ChatReply] = {}
    claimed: list[tuple[int, Any]] = []
    for i, ask in enumerate(asks):
        params = {k: v for k, v in ask.params.items() if k != "sample_index"}
        begun = via.begin(ask.model, ask.prompt, ask.variables, params, ask.params["sample_index"], stats)
        flight = begun if isinstance(begun, ChatReply) else via.flight(begun, stats)
        if isinstance(flight, ChatReply):
            got[i] = flight
        elif flight is None:
            claimed.append((i, begun))
    try:
        if claimed:
            first = claimed[0][1]
            seeds = [r.kwargs.get("seed") for _, r in claimed]
            params = {k: v for k, v in first.kwargs.items() if k != "seed"}
            started = time.perf_counter()
            with via.limiter(first.model.key).slot():
                messages = first.model.adapter.sample_together(first.model.chat, first.messages, seeds, params)
            seconds = (time.perf_counter() - started) / len(claimed)
            for (i, req), message in zip(claimed, messages, strict=True) if messages is not None else ():
                got[i] = via.finish_request(req, reply_data(req, message), seconds, stats)
    finally:
        for _, req in claimed:
            via.land(req)
    return [
        got[i] if i in got else via.call(a.model, a.prompt, a.variables, stats=stats, **a.params)
        for i, a in enumerate(asks)
    ]


@dataclass(frozen=True)
class Calls(Step):
    """Chat calls through the gateway, run together: their replies in order (the reply, for one Ask)."""

    gateway: Sends
    asks: Ask | list[Ask]

    def run(self, stats: CallStats | None) -> Any:
        return self._shaped(call_all(self.gateway, self._listed(), stats))

    async def arun(self, stats: CallStats | None) -> Any:
        return self._shaped(await acall_all(self.gateway, self._listed(), stats))

    def _listed(self) -> list[Ask]:
        return self.asks if isinstance(self.asks, list) else [self.asks]

    def _shaped(self, replies: list[ChatReply]) -> ChatReply | list[ChatReply]:
        return replies if isinstance(self.asks, list) else replies[0]
