"""The one place every chat call goes through: render, cache, retry, limit, count.

A graph asks the gateway for ``call(model, prompt, variables, sample_index=...)`` (chat models) or
``complete(model, prompt, text, sample_index=...)`` (a LogProbModel continuing a raw text); the gateway
renders the versioned prompt, answers from the disk cache when it can, otherwise calls the provider
under one concurrency limit per model with exponential backoff and jitter on transient errors, parses
the answer with the prompt's parser (a parse failure is recorded, not raised), and adds calls,
tokens, cache hits and time to the run's ``CallStats``.

Its parts live by job: ``stats`` (CallStats, ChatReply), ``limits`` (ModelLimiter), ``retry`` (the
policy and the give-up sentence), ``cache`` (the disk cache); this module composes them.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
import hashlib
import json
import os
import pickle
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from langchain_core.runnables.config import ContextThreadPoolExecutor

from halluscope.backends.cache import CallCache, RedisCache, call_key, open_cache
from halluscope.backends.chat import load_logprob_model, resolve, runs_in_process
from halluscope.backends.limits import Limiter, ModelLimiter, shared_limiter
from halluscope.backends.logprobs import LogProbModel, Reading, token_count
from halluscope.backends.providers import ModelSpec, Provider
from halluscope.backends.retry import (
    BadReplyError,
    RetryPolicy,
    acall_with_retries,
    call_with_retries,
    env_number,
)
from halluscope.backends.stats import CallStats, ChatReply
from halluscope.backends.steps import Blocking, Sleep, Step, Steps, afinish, finish
from halluscope.errors import ConfigError, ParseError, PromptError, redact_credentials
from halluscope.prompts.registry import DELIMIT_SUFFIX, PromptRegistry, PromptTemplate, fence, to_langchain
from halluscope.scoring.token_probability import TokenStat

DEFAULT_TIMEOUT = 120.0  # seconds one request may take before it counts as a (retried) timeout
FLIGHT_POLL_S, FLIGHT_POLL_MAX_S = 0.05, 1.0  # how often a process waiting on another's call looks again
_WAIT = object()  # another process asks this call now: look again soon
CALL_PARAMS = ("temperature", "top_p", "max_tokens", "stop", "seed", "logprobs", "top_logprobs")
SENT = "sent"  # a fresh reply's (prompt tokens reused, prompt token ids): counted, never cached
MADE_SECONDS = "seconds"  # a cached reply's seconds when it was made: what its replays cost
TOKEN_STATS = "token-stats@1"  # the cache's name for a text's token statistics (a new layout, a new name)
HIDDEN_STATES = "hidden-states@1"  # and for the hidden states read at a text's positions
ModelLike = str | BaseChatModel


def model_name(model: ModelLike) -> str:
    """How results name a model: its spec (credentials in its URL redacted), or a chat model object's id or
    class (never its repr)."""
    name = model if isinstance(model, str) else (getattr(model, "model_id", None) or type(model).__name__)
    return redact_credentials(str(name))


T = TypeVar("T")


# ---------------------------------------------------------------- the gateway


@dataclass(frozen=True)
class Ask:
    """One chat call as data (what ``Gateway.call`` takes), so a graph node names its calls once and
    runs them either way: ``call_all`` on threads, ``acall_all`` on the event loop."""

    model: ModelLike
    prompt: str | PromptTemplate
    variables: Mapping[str, Any] | None = None
    params: Mapping[str, Any] = field(default_factory=dict)  # sample_index and the call parameters


INSTANCE = Provider()  # a user's own chat model object: its parameters passed as they are
INSTANCE.name = "instance"


@dataclass
class _Model:
    key: str
    chat: BaseChatModel
    adapter: Provider
    spec: ModelSpec | None = None  # None: a chat model object

    @property
    def provider(self) -> str:
        return self.adapter.name


@dataclass
class _Request:
    """A call that missed the cache: everything needed to send it and to cache its answer."""

    model: _Model
    prompt: PromptTemplate
    key: str
    sample_index: int
    kwargs: dict[str, Any]
    messages: list[BaseMessage]


class Gateway:
    """Shared by every graph of a process: one cache, one limiter per model, one prompt registry."""

    def __init__(
        self,
        cache: CallCache | RedisCache | None = None,
        registry: PromptRegistry | None = None,
        retry: RetryPolicy | None = None,
        concurrency: int = 4,
        timeout: float = DEFAULT_TIMEOUT,
        delimit: bool = False,
    ) -> None:
        self.cache = cache
        self.registry = registry or PromptRegistry.from_env()
        self.retry = retry or RetryPolicy.from_env()
        self.concurrency = concurrency
        self.timeout = timeout
        self.delimit = delimit  # fence the user text in every chat prompt (prompts.registry.fence)
        self._models: dict[str, _Model] = {}  # by model key
        self._logprob_models: dict[str, LogProbModel] = {}
        self._limiters: dict[str, ModelLimiter] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_env(
        cls,
        cache: CallCache | RedisCache | None,
        registry: PromptRegistry | None = None,
        concurrency: int | None = None,
        timeout: float | None = None,
        delimit: bool = False,
    ) -> Gateway:
        """A gateway whose settings not given come from the environment: HALLUSCOPE_CONCURRENCY (4),
        HALLUSCOPE_TIMEOUT (seconds, 120), HALLUSCOPE_DELIMIT=1; a malformed value is a ConfigError."""
        return cls(
            cache=cache,
            registry=registry,
            concurrency=concurrency or env_number("HALLUSCOPE_CONCURRENCY", 4, whole=True, minimum=1),
            timeout=timeout or env_number("HALLUSCOPE_TIMEOUT", DEFAULT_TIMEOUT, minimum=0.001),
            delimit=delimit or os.environ.get("HALLUSCOPE_DELIMIT", "") not in ("", "0"),
        )

    def prompt_fingerprint(self) -> str:
        """What the prompts make of a call: their versions and texts, and whether user text is fenced
        (a resumed benchmark must not mix items scored with other prompts)."""
        return self.registry.fingerprint() + ("+delimit" if self.delimit else "")

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """A gateway crosses to another process (a Ray worker) as its settings: the cache's location, the
        prompts, the retry policy and the limits. The worker builds its own gateway from them (one per
        process), with its own clients, models and connections."""
        location = None if self.cache is None else self.cache.location
        if isinstance(self.cache, RedisCache):
            location = self.cache.url  # the worker needs the password the shown location hides
        settings = (location, self.registry, self.retry, self.concurrency, self.timeout, self.delimit)
        return (_gateway_in_process, settings)

    # -- models

    def model(self, model: ModelLike) -> _Model:
        """A model string's resolved spec (``chat.resolve``: parsed and checked once per process) with the
        client this gateway built for it on first use; every later call reads them."""
        if isinstance(model, BaseChatModel):
            key = getattr(model, "model_id", None) or _instance_key(model)
            with self._lock:
                return self._models.setdefault(key, _Model(key, model, INSTANCE))
        resolved = resolve(model)
        found = self._models.get(resolved.key)
        if found is not None:
            return found
        with self._lock:
            if resolved.key not in self._models:
                chat = resolved.adapter.chat_model(resolved.spec, self.timeout)
                self._models[resolved.key] = _Model(resolved.key, chat, resolved.adapter, resolved.spec)
            return self._models[resolved.key]

    def warm(self, model: ModelLike) -> None:
        """The model resolved and loaded now (a server's, before it says it is ready)."""
        resolved = self.model(model)
        resolved.adapter.warm(resolved.chat)

    def chat_model(self, model: ModelLike) -> BaseChatModel:
        """The LangChain chat model a spec names, the one this gateway's calls use (a local GGUF loaded
        once): for a chain of your own beside a detector, e.g. ``prompt | gateway.chat_model(spec)``."""
        return self.model(model).chat

    def gives_logprobs(self, model: ModelLike) -> bool:
        """Whether to ask this model for token log-probs by default: where its provider declares them
        (local, OpenAI and OpenAI-compatible do; Anthropic and init_chat_model's providers do not here,
        and a chat model instance may not take the parameter)."""
        return self.model(model).adapter.chat_logprobs

    def logprob_model(self, model: str | LogProbModel) -> LogProbModel:
        """Resolve a LogProbModel once per gateway (an ``anthropic:`` spec is a clear 'needs log-probs' error)."""
        if isinstance(model, LogProbModel):
            return model
        with self._lock:
            if model not in self._logprob_models:
                self._logprob_models[model] = load_logprob_model(model, retry=self.retry, timeout=self.timeout)
            return self._logprob_models[model]

    def limiter(self, key: str) -> Limiter:
        """The model's limit: the cluster's under Ray (an API model), else this gateway's own (a model that
        runs in the process: each worker has its own)."""
        shared = None if runs_in_process(key) else shared_limiter(key, self.concurrency)
        if shared is not None:
            return shared
        with self._lock:
            return self._limiters.setdefault(key, ModelLimiter(self.concurrency))

    def prompt(self, prompt: str | PromptTemplate) -> PromptTemplate:
        tpl = self.registry.get(prompt) if isinstance(prompt, str) else prompt
        if tpl.kind != "chat":
            raise PromptError(f"{tpl.id} is a completion prompt; it is run by a LogProbModel, not a chat model")
        return tpl

    # -- one call

    def _prepare(
        self, model: ModelLike, prompt: str | PromptTemplate, variables: Mapping[str, Any], params: Mapping[str, Any]
    ) -> tuple[_Model, PromptTemplate, list[dict[str, str]], dict[str, Any]]:
        _check_params(params)
        m = self.model(model)
        tpl = self.prompt(prompt)
        fenced = variables.keys() if self.delimit else tpl.fenced  # --delimit fences every prompt's user text
        messages = tpl.render(**{k: fence(v) if k in fenced else v for k, v in variables.items()})
        merged = {**tpl.params, **{k: v for k, v in params.items() if v is not None}}
        if merged.get("logprobs") and not m.adapter.chat_logprobs and m.adapter is not INSTANCE:
            raise ConfigError(
                f"{m.key} gives no log-probabilities here; methods that need them (Direct Question probabilities, "
                "likelihood semantic entropy, PHR, CLUE's offline scorer) need a local, openai or "
                "openai-compatible model"
            )
        return m, tpl, messages, merged

    @staticmethod
    def _provider_kwargs(m: _Model, params: Mapping[str, Any], sample_index: int) -> dict[str, Any]:
        kwargs = dict(params)
        if kwargs.get("seed") is not None:
            kwargs["seed"] = int(kwargs["seed"]) + sample_index  # N seeded samples must differ
        if kwargs.get("logprobs") is False:
            kwargs.pop("logprobs")
        elif kwargs.get("logprobs") and kwargs.get("top_logprobs") is None:
            kwargs["top_logprobs"] = 0  # llama.cpp's server returns no log-probs without it; OpenAI accepts 0
        return m.adapter.call_params(m.spec, kwargs) if m.spec is not None else kwargs

    def prompt_ref(self, tpl: PromptTemplate) -> str:
        """The prompt as results record it: id@version#hash, with +delimit when its user text was fenced."""
        return tpl.ref + DELIMIT_SUFFIX if self.delimit and tpl.kind == "chat" else tpl.ref

    def _reply(
        self, model_key: str, tpl: PromptTemplate, sample_index: int, cached: bool, data: Mapping[str, Any]
    ) -> ChatReply:
        reply = ChatReply(
            text=data["text"],
            model=model_key,
            prompt_ref=self.prompt_ref(tpl),
            sample_index=sample_index,
            cached=cached,
            prompt_tokens=data.get("prompt_tokens", 0),
            completion_tokens=data.get("completion_tokens", 0),
            logprobs=data.get("logprobs"),
            made_seconds=data.get(MADE_SECONDS) if cached else None,
        )
        try:
            reply.parsed = tpl.parse(reply.text)
        except ParseError as exc:
            reply.parse_error = str(exc)
        return reply

    def _begin(
        self,
        model: ModelLike,
        prompt: str | PromptTemplate,
        variables: Mapping[str, Any] | None,
        params: Mapping[str, Any],
        sample_index: int,
        stats: CallStats | None,
    ) -> ChatReply | _Request:
        """Render and key the call; answer it from the cache when possible."""
        m, tpl, messages, merged = self._prepare(model, prompt, variables or {}, params)
        key = call_key(m.key, {**merged, "n": 1}, messages, sample_index)
        if (cached := self._cached(key, m.key, tpl, sample_index, bool(merged.get("logprobs")), stats)) is not None:
            return cached
        return _Request(
            m, tpl, key, sample_index, self._provider_kwargs(m, merged, sample_index), to_langchain(messages)
        )

    def call(
        self,
        model: ModelLike,
        prompt: str | PromptTemplate,
        variables: Mapping[str, Any] | None = None,
        *,
        sample_index: int = 0,
        stats: CallStats | None = None,
        **params: Any,
    ) -> ChatReply:
        return finish(self._call_steps(model, prompt, variables, params, sample_index), stats)

    async def acall(
        self,
        model: ModelLike,
        prompt: str | PromptTemplate,
        variables: Mapping[str, Any] | None = None,
        *,
        sample_index: int = 0,
        stats: CallStats | None = None,
        **params: Any,
    ) -> ChatReply:
        """``call`` on the event loop: the provider's async client; the cache's disk (or Redis) I/O and a
        model's first use (building its client) on a thread."""
        return await afinish(self._call_steps(model, prompt, variables, params, sample_index), stats)

    def _call_steps(
        self,
        model: ModelLike,
        prompt: str | PromptTemplate,
        variables: Mapping[str, Any] | None,
        params: Mapping[str, Any],
        sample_index: int,
    ) -> Steps[ChatReply]:
        """One call, written once as the steps it waits on (run by ``call`` in place, by ``acall`` on the
        event loop, each given the run's stats): the cache, single flight across processes, the provider
        under retries, the answer."""
        req = yield Blocking(functools.partial(self._begin, model, prompt, variables, params, sample_index))
        if isinstance(req, ChatReply):
            return req
        delay = FLIGHT_POLL_S
        while (answered := (yield Blocking(functools.partial(self._flight, req)))) is _WAIT:
            yield Sleep(delay)  # another process asks it now
            delay = min(2 * delay, FLIGHT_POLL_MAX_S)
        if isinstance(answered, ChatReply):
            return answered
        try:
            started = time.perf_counter()
            data = yield _Send(self, req)
            return (yield Blocking(functools.partial(self._finish, req, data, time.perf_counter() - started)))
        finally:
            yield Blocking(lambda _stats: self._land(req))

    def _flight(self, req: _Request, stats: CallStats | None) -> ChatReply | object | None:
        """Single-flight across the processes (and threads) sharing the cache: claim the call and ask it
        (None), or, while another holds it, ``_WAIT``; the answer once the holder has cached it (a
        reply). A claim lasts one request timeout, so a holder that crashed blocks no one longer."""
        if self.cache is None:
            return None
        claimed = self.cache.claim(req.key, self.timeout)
        logprobs = bool(req.kwargs.get("logprobs"))
        answered = self._cached(req.key, req.model.key, req.prompt, req.sample_index, logprobs, stats)
        if answered is not None:  # answered while this process looked (or before it claimed)
            if claimed:
                self.cache.release(req.key)
            return answered
        return None if claimed else _WAIT

    def _land(self, req: _Request) -> None:
        """The claimed call is answered and cached, or failed for good: others may ask it now."""
        if self.cache is not None:
            self.cache.release(req.key)

    def _read(self, req: _Request, message: BaseMessage) -> dict[str, Any]:
        """The reply's cacheable data; a reply that is not a real answer raises BadReplyError (retried):
        empty content, or no log-probs when they were asked for. A local model's empty answer is
        returned (its engine would give the same again) but, being empty, never cached."""
        prompt_tokens, completion_tokens = req.model.adapter.usage(message)
        data = {  # text as a plain str (LangChain gives a TextAccessor), as the cache gives it back
            "text": str(message.text) if isinstance(message.text, str) else str(message.content),
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "logprobs": req.model.adapter.reply_logprobs(message),
            "prompt_ref": self.prompt_ref(req.prompt),
            SENT: req.model.adapter.prompt_reuse(message),  # this call's own, never cached
        }
        if not data["text"].strip():
            if req.model.adapter.empty_reply_is_answer:
                return data
            raise BadReplyError("sent an empty reply (no content)")
        if req.kwargs.get("logprobs") and not data["logprobs"]:
            raise BadReplyError("sent no token log-probs although they were asked for")
        return data

    def _finish(self, req: _Request, data: dict[str, Any], seconds: float, stats: CallStats | None) -> ChatReply:
        asked = bool(req.kwargs.get("logprobs"))
        return self._answered(req.key, req.model.key, req.prompt, req.sample_index, data, asked, seconds, stats)

    def _cached(
        self, key: str, model_key: str, tpl: PromptTemplate, sample_index: int, logprobs: bool, stats: CallStats | None
    ) -> ChatReply | None:
        """A call's cached answer, counted; None on a miss or on an entry that is no real answer."""
        hit = self.cache.get(key) if self.cache is not None else None
        if hit is None or not _real_answer(hit, logprobs):
            return None
        reply = self._reply(model_key, tpl, sample_index, True, hit)
        if stats is not None:
            stats.record(reply)
        return reply

    def _answered(
        self,
        key: str,
        model_key: str,
        tpl: PromptTemplate,
        sample_index: int,
        data: dict[str, Any],
        logprobs: bool,
        seconds: float,
        stats: CallStats | None,
    ) -> ChatReply:
        """A fresh answer: cached when it is a real one, then parsed and counted."""
        reused, ids = data.pop(SENT, (None, None))
        if self.cache is not None and _real_answer(data, logprobs):
            self.cache.set(key, {**data, MADE_SECONDS: round(seconds, 3)})  # what a replay of it cost to make
        reply = self._reply(model_key, tpl, sample_index, False, data)
        reply.reused_tokens, reply.prompt_ids = reused, ids
        if stats is not None:
            stats.record(reply, seconds)
        return reply

    def _limited(self, key: str, compute: Callable[[], T], stats: CallStats | None) -> T:
        """``compute()`` holding one of the model's concurrency slots, unless the run was cut (asked once the
        slot is held: a run cut while its call waited for one makes none)."""
        _sending(stats)
        with self.limiter(key).slot():
            _sending(stats)
            return compute()

    # -- completions of raw texts by a LogProbModel

    def complete(
        self,
        model: str | LogProbModel,
        prompt: str | PromptTemplate,
        text: str,
        *,
        sample_index: int = 0,
        stats: CallStats | None = None,
        **params: Any,
    ) -> ChatReply:
        """One sampled continuation of ``text`` (already rendered with the completion prompt), with the
        prompt's parameters and parser, cached by sample index like a chat call; the reply's
        ``logprobs`` hold each token's raw log-prob."""
        lm = self.logprob_model(model)
        tpl = self.registry.get(prompt) if isinstance(prompt, str) else prompt
        if tpl.kind != "completion":
            raise PromptError(f"{tpl.id} is a chat prompt; a LogProbModel continues completion texts")
        _check_params(params)
        merged = {**tpl.params, **{k: v for k, v in params.items() if v is not None}}
        key = call_key(lm.name, merged, [{"role": "text", "content": text}], sample_index)
        if (cached := self._cached(key, lm.name, tpl, sample_index, True, stats)) is not None:
            return cached  # a continuation is read for its log-probs: one without them is no answer
        seed = merged.get("seed")
        started = time.perf_counter()
        sample = self._limited(
            lm.name,
            lambda: lm.sample(
                text,
                n=1,
                max_tokens=int(merged.get("max_tokens", 64)),
                temperature=float(merged.get("temperature", 1.0)),
                top_p=float(merged.get("top_p", 1.0)),
                stop=tuple(merged.get("stop") or ()),
                seed=None if seed is None else int(seed) + sample_index,
            )[0],
            stats,
        )
        data = {
            "text": sample.text,
            "prompt_tokens": token_count(lm, text),
            "completion_tokens": len(sample.token_logprobs),
            "logprobs": [
                {"token": t, "logprob": lp}
                for t, lp in zip(sample.tokens or [""] * len(sample.token_logprobs), sample.token_logprobs, strict=True)
            ],
            "prompt_ref": tpl.ref,
        }
        return self._answered(key, lm.name, tpl, sample_index, data, True, time.perf_counter() - started, stats)

    # -- forward passes of a LogProbModel

    def forward(self, model: LogProbModel, prompt: str, compute: Callable[[], T], stats: CallStats | None = None) -> T:
        """``compute()``, a forward pass of ``model`` over ``prompt`` (teacher forcing, a next-token
        distribution), under the model's concurrency limit and counted on ``stats``; deterministic, so
        recomputed rather than cached."""
        started = time.perf_counter()
        out = self._limited(model.name, compute, stats)
        if stats is not None:
            stats.record_forward(model.name, token_count(model, prompt), time.perf_counter() - started)
        return out

    def token_stats(
        self, model: str | LogProbModel, prompt: str, text: str, stats: CallStats | None = None
    ) -> list[TokenStat]:
        """Each token of ``text`` as ``model`` reads it after ``prompt``: its log-prob and its position's
        entropy, from one forward pass. Unlike other forward passes these are cached (JSON rows): a
        passage costs seconds on a CPU, and a rerun, another variant or a calibration reads them back."""
        lm = self.logprob_model(model)
        messages = [{"role": "prompt", "content": prompt}, {"role": "text", "content": text}]
        key = call_key(lm.name, {"read": TOKEN_STATS}, messages, 0)
        hit = self.cache.get(key) if self.cache is not None else None
        found = _token_rows(hit)
        if found:
            if stats is not None:
                stats.record_forward(lm.name, 0, 0.0, cached=True)
            return found
        started = time.perf_counter()
        found = self._limited(lm.name, lambda: lm.token_stats(prompt, text), stats)
        if stats is not None:
            stats.record_forward(lm.name, token_count(lm, prompt + text), time.perf_counter() - started)
        self._keep_token_stats(key, found)
        return found

    def _keep_token_stats(self, key: str, found: Sequence[TokenStat]) -> None:
        if found and self.cache is not None:  # a text that adds no token is no answer
            self.cache.set(key, {"tokens": [[t.start, t.logprob, t.entropy] for t in found]})

    def hidden_states(
        self,
        model: str | LogProbModel,
        prompt: str,
        text: str,
        ends: Sequence[int],
        layers: Sequence[int],
        stats: CallStats | None = None,
    ) -> dict[int, np.ndarray]:
        """The hidden state of the token ending at each of ``ends`` (character offsets into ``text``; 0: the
        prompt's last token) at each of ``layers``, as ``model`` reads ``text`` after ``prompt``: one
        forward pass, whose token statistics are cached too (token-logprob reads them back). Cached as
        JSON, only the positions and layers asked for, rounded to float16 (fresh ones too, so a replay
        gives the same numbers); a request for more positions or layers reads the text again and keeps
        the union."""
        lm = self.logprob_model(model)
        messages = [{"role": "prompt", "content": prompt}, {"role": "text", "content": text}]
        key = call_key(lm.name, {"read": HIDDEN_STATES}, messages, 0)
        hit = self.cache.get(key) if self.cache is not None else None
        held = _state_rows(hit, lm.width) if hit is not None else None
        if hit is not None and held is None and stats is not None:
            stats.event(UNREADABLE_STATES)
        want_ends, want_layers = [int(e) for e in ends], sorted({int(layer) for layer in layers})
        if held is not None and set(want_ends) <= set(held[0]) and set(want_layers) <= set(held[1]):
            if stats is not None:
                stats.record_forward(lm.name, 0, 0.0, cached=True)
            rows = [held[0].index(e) for e in want_ends]
            return {layer: held[1][layer][rows] for layer in want_layers}
        all_ends = sorted(set(want_ends) | set(held[0] if held else ()))
        all_layers = sorted(set(want_layers) | set(held[1] if held else ()))
        started = time.perf_counter()
        reading: Reading = self._limited(lm.name, lambda: lm.read(prompt, text, all_ends, all_layers), stats)
        if stats is not None:
            stats.record_forward(lm.name, token_count(lm, prompt + text), time.perf_counter() - started)
        states = {layer: _rounded(reading.states[layer]) for layer in all_layers}
        if self.cache is not None:
            self.cache.set(key, {"ends": all_ends, "layers": {str(k): _packed(v) for k, v in states.items()}})
            self._keep_token_stats(call_key(lm.name, {"read": TOKEN_STATS}, messages, 0), reading.stats)
        rows = [all_ends.index(e) for e in want_ends]
        return {layer: states[layer][rows].astype(np.float32) for layer in want_layers}

    # -- many calls at once

    def call_all(
        self,
        asks: Sequence[Ask],
        stats: CallStats | None = None,
        on_reply: Callable[[ChatReply], None] | None = None,
    ) -> list[ChatReply]:
        """The calls run concurrently (at most ``concurrency`` threads), their replies in order;
        ``on_reply`` is called as each reply arrives (to drive a progress bar)."""

        def one(ask: Ask) -> ChatReply:
            reply = self.call(ask.model, ask.prompt, ask.variables, stats=stats, **ask.params)
            if on_reply is not None:
                on_reply(reply)
            return reply

        replies: dict[int, ChatReply] = {}
        for group in self._sample_groups(asks):
            for i, reply in zip(group, self._sample_together([asks[i] for i in group], stats), strict=True):
                replies[i] = reply
                if on_reply is not None:
                    on_reply(reply)
        rest = [i for i in range(len(asks)) if i not in replies]
        if len(rest) <= 1:
            replies.update((i, one(asks[i])) for i in rest)
        else:
            with ContextThreadPoolExecutor(max_workers=min(len(rest), self.concurrency)) as pool:
                replies.update(zip(rest, pool.map(one, [asks[i] for i in rest]), strict=True))
        return [replies[i] for i in range(len(asks))]

    def _sample_groups(self, asks: Sequence[Ask]) -> list[list[int]]:
        """The asks that differ only in their sample index, to a provider that decodes samples of one
        prompt together: groups of two or more (positions in ``asks``)."""
        groups: dict[str, list[int]] = {}
        for i, ask in enumerate(asks):
            if "sample_index" not in ask.params or isinstance(ask.model, BaseChatModel):
                continue
            if not self.model(ask.model).adapter.decodes_samples_together:
                continue
            rest = {k: v for k, v in ask.params.items() if k != "sample_index"}
            prompt = ask.prompt if isinstance(ask.prompt, str) else ask.prompt.ref
            same = json.dumps([ask.model, prompt, dict(ask.variables or {}), rest], sort_keys=True, default=str)
            groups.setdefault(same, []).append(i)
        return [group for group in groups.values() if len(group) > 1]

    def _sample_together(self, asks: Sequence[Ask], stats: CallStats | None) -> list[ChatReply]:
        """Samples of one prompt (``asks`` differ only in their sample index): the cache answers those it
        holds, the provider decodes the rest together, and each is cached under its own key, as one call
        would be. A sample another process is asking now is asked alone (it waits for that answer), as
        is every sample the provider declines to decode together (it answers None)."""
        got: dict[int, ChatReply] = {}
        claimed: list[tuple[int, _Request]] = []
        for i, ask in enumerate(asks):
            params = {k: v for k, v in ask.params.items() if k != "sample_index"}
            begun = self._begin(ask.model, ask.prompt, ask.variables, params, ask.params["sample_index"], stats)
            flight = begun if isinstance(begun, ChatReply) else self._flight(begun, stats)
            if isinstance(flight, ChatReply):
                got[i] = flight
            elif flight is None:
                claimed.append((i, begun))  # type: ignore[arg-type]
        try:
            if claimed:
                first = claimed[0][1]
                seeds = [r.kwargs.get("seed") for _, r in claimed]
                params = {k: v for k, v in first.kwargs.items() if k != "seed"}
                started = time.perf_counter()
                with self.limiter(first.model.key).slot():
                    messages = first.model.adapter.sample_together(first.model.chat, first.messages, seeds, params)
                seconds = (time.perf_counter() - started) / len(claimed)
                for (i, req), message in zip(claimed, messages, strict=True) if messages is not None else ():
                    got[i] = self._finish(req, self._read(req, message), seconds, stats)
        finally:
            for _, req in claimed:
                self._land(req)
        return [
            got[i] if i in got else self.call(a.model, a.prompt, a.variables, stats=stats, **a.params)
            for i, a in enumerate(asks)
        ]

    async def acall_all(self, asks: Sequence[Ask], stats: CallStats | None = None) -> list[ChatReply]:
        """``call_all`` on the event loop: the calls await the provider's async client together (the
        model's limiter still bounds how many are in flight); samples of one prompt to a provider that
        decodes them together, together (on a thread)."""
        replies: dict[int, ChatReply] = {}
        for group in self._sample_groups(asks):
            together = await asyncio.to_thread(self._sample_together, [asks[i] for i in group], stats)
            replies.update(zip(group, together, strict=True))
        rest = [i for i in range(len(asks)) if i not in replies]
        sent = await asyncio.gather(
            *(self.acall(asks[i].model, asks[i].prompt, asks[i].variables, stats=stats, **asks[i].params) for i in rest)
        )
        replies.update(zip(rest, sent, strict=True))
        return [replies[i] for i in range(len(asks))]

    def sample(
        self,
        model: ModelLike,
        prompt: str | PromptTemplate,
        variables: Mapping[str, Any] | None,
        n: int,
        *,
        stats: CallStats | None = None,
        on_reply: Callable[[ChatReply], None] | None = None,
        **params: Any,
    ) -> list[ChatReply]:
        """N answers with sample indexes 0..N-1, each its own cache entry, run concurrently.

        ``on_reply`` is called as each answer arrives (to drive a progress bar)."""
        return self.call_all(samples(model, prompt, variables, n, params), stats, on_reply)

    async def asample(
        self,
        model: ModelLike,
        prompt: str | PromptTemplate,
        variables: Mapping[str, Any] | None,
        n: int,
        *,
        stats: CallStats | None = None,
        **params: Any,
    ) -> list[ChatReply]:
        """``sample`` on the event loop."""
        return await self.acall_all(samples(model, prompt, variables, n, params), stats)


@dataclass(frozen=True)
class _Send(Step):
    """A request that missed the cache, sent to its provider under the retry policy, holding one of the
    model's concurrency slots per try: the client's ``invoke``, or its ``ainvoke``. Each try asks the
    run's budget first (on its stats), and each retry is counted on the run's stats and budget."""

    gateway: Gateway
    req: _Request

    def run(self, stats: CallStats | None) -> dict[str, Any]:
        req = self.req

        def attempt() -> dict[str, Any]:
            _sending(stats)
            with self.gateway.limiter(req.model.key).slot(), _bad_replies(req.model.adapter):
                _sending(stats)  # again once the slot is held: the run may have been cut while it waited
                chat, kwargs = req.model.adapter.invocation(req.model.chat, req.kwargs)
                message = chat.invoke(req.messages, **kwargs)
            return self.gateway._read(req, message)

        retried = functools.partial(_retrying, stats)
        return call_with_retries(attempt, self.gateway.retry, req.model.key, req.model.adapter, retried)

    async def arun(self, stats: CallStats | None) -> dict[str, Any]:
        req = self.req
        limiter = self.gateway.limiter(req.model.key)

        async def attempt() -> dict[str, Any]:
            _sending(stats)
            async with limiter.aslot():
                _sending(stats)  # again once the slot is held: the run may have been cut while it waited
                with _bad_replies(req.model.adapter):
                    chat, kwargs = req.model.adapter.invocation(req.model.chat, req.kwargs)
                    message = await chat.ainvoke(req.messages, **kwargs)
            return self.gateway._read(req, message)

        retried = functools.partial(_retrying, stats)
        return await acall_with_retries(attempt, self.gateway.retry, req.model.key, req.model.adapter, retried)


@dataclass(frozen=True)
class Calls(Step):
    """Chat calls through the gateway, run together: their replies in order (the reply, for one Ask)."""

    gateway: Gateway
    asks: Ask | list[Ask]

    def run(self, stats: CallStats | None) -> Any:
        return self._shaped(self.gateway.call_all(self._listed(), stats))

    async def arun(self, stats: CallStats | None) -> Any:
        return self._shaped(await self.gateway.acall_all(self._listed(), stats))

    def _listed(self) -> list[Ask]:
        return self.asks if isinstance(self.asks, list) else [self.asks]

    def _shaped(self, replies: list[ChatReply]) -> ChatReply | list[ChatReply]:
        return replies if isinstance(self.asks, list) else replies[0]


def _sending(stats: CallStats | None) -> None:
    """Before a request or forward pass: the run's budget refuses it once the run is cut."""
    if stats is not None and stats.budget is not None:
        stats.budget.sending()


def _retrying(stats: CallStats | None) -> None:
    """A failed request tried again: one more retry on the run's stats, one more call of its budget."""
    if stats is not None:
        stats.add_retry()
        if stats.budget is not None:
            stats.budget.retrying()


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


def _token_rows(hit: Mapping[str, Any] | None) -> list[TokenStat]:
    """A cached text's token statistics; none (a miss) for an entry that is not rows of three numbers."""
    rows = hit.get("tokens") if hit is not None else None
    if not isinstance(rows, list):
        return []
    found = []
    for row in rows:
        if not (isinstance(row, list) and len(row) == 3 and all(isinstance(v, int | float) for v in row)):
            return []
        found.append(TokenStat(int(row[0]), float(row[1]), float(row[2])))
    return found


FLOAT16_MAX = float(np.finfo(np.float16).max)


def _rounded(rows: np.ndarray) -> np.ndarray:
    """Hidden states at float16 precision, or float32 where a value lies beyond float16's range (some
    layers carry a few massive activations), never an infinity."""
    return rows.astype(np.float16 if not rows.size or np.abs(rows).max() < FLOAT16_MAX else np.float32)


def _packed(rows: np.ndarray) -> dict[str, Any]:
    """Rows as JSON: their shape, and their little-endian bytes in base64 under their dtype's name."""
    dtype = "float16" if rows.dtype == np.float16 else "float32"
    return {
        "shape": list(rows.shape),
        dtype: base64.b64encode(rows.astype(f"<f{rows.itemsize}").tobytes()).decode("ascii"),
    }


UNREADABLE_STATES = "hidden_states_reread"  # an event: a cached row was not what was written, read again


def _state_rows(hit: Any, width: int) -> tuple[list[int], dict[int, np.ndarray]] | None:
    """A cached text's positions and its states per layer; None for an entry that is not what
    ``hidden_states`` writes: distinct whole-number positions, and for each layer a (positions, width)
    array of float16 or float32 whose every value is finite. A row written otherwise (by another version,
    a damaged disk, a hand) is read again, never handed to a probe."""
    if not isinstance(hit, Mapping):
        return None
    ends, packed_layers = hit.get("ends"), hit.get("layers")
    if not isinstance(ends, list) or not isinstance(packed_layers, dict) or not packed_layers:
        return None
    if not all(type(e) is int for e in ends) or len(set(ends)) != len(ends):
        return None
    layers = {}
    try:
        for layer, packed in packed_layers.items():
            dtype = next((d for d in ("float16", "float32") if d in packed), None)
            if dtype is None or set(packed) != {"shape", dtype}:
                return None
            shape = tuple(packed["shape"])
            if shape != (len(ends), width):
                return None
            values = np.frombuffer(
                base64.b64decode(packed[dtype], validate=True), dtype="<f2" if dtype == "float16" else "<f4"
            )
            values = values.reshape(shape).astype(np.float32)
            if not np.isfinite(values).all():
                return None
            layers[int(layer)] = values
    except (KeyError, TypeError, ValueError, binascii.Error):
        return None
    return list(ends), layers


def _check_params(params: Mapping[str, Any]) -> None:
    unknown = set(params) - set(CALL_PARAMS)
    if unknown:
        raise ConfigError(f"unknown call parameter(s) {', '.join(sorted(unknown))}; known: {', '.join(CALL_PARAMS)}")


def _real_answer(data: Mapping[str, Any], logprobs: bool) -> bool:
    """Whether a reply (fresh, or read from the cache) is an answer worth keeping: non-empty text, and
    the log-probs when they were asked for. Anything else is never cached, nor replayed when an older
    version cached it."""
    text = data.get("text")
    return isinstance(text, str) and bool(text.strip()) and (not logprobs or bool(data.get("logprobs")))


@contextmanager
def _bad_replies(provider: Provider) -> Iterator[None]:
    """A 200 with an empty ``choices`` list surfaces as LangChain's IndexError on ``generations[0]``, and
    one its client could not read (``{}``, no ``choices`` or ``content``) as the error its provider's
    adapter recognises (``Provider.bad_reply``, raised inside its integration): a bad reply (retried),
    not a crash. The same errors raised anywhere else are left alone."""
    try:
        yield
    except IndexError as exc:
        if _raised_in(exc, "langchain_core"):
            raise BadReplyError("sent a reply with no choices") from exc
        raise
    except TypeError as exc:
        what = provider.bad_reply(exc)
        if what is not None and provider.integration and _raised_in(exc, provider.integration):
            raise BadReplyError(what) from exc
        raise


def _raised_in(exc: BaseException, package: str) -> bool:
    """Whether the innermost frame of ``exc``'s traceback is ``package``'s code."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and package in tb.tb_frame.f_code.co_filename


# fields that hold secrets, clients or run-time plumbing: they never change an answer
_NOT_ANSWER_FIELDS = re.compile(
    r"key|secret|token$|password|credential|headers|client|callback|cache|metadata|tags|verbose|"
    r"rate_limiter|stream|retries|timeout"
)


def _instance_key(model: BaseChatModel) -> str:
    """A user's own chat model, keyed by everything that changes its answers: its class and every plain
    field (model, base URL, sampling parameters, ...); secrets, clients and callbacks are left out."""
    fields: dict[str, Any] = {}
    for name in sorted(type(model).model_fields):
        if _NOT_ANSWER_FIELDS.search(name):
            continue
        value = getattr(model, name, None)
        if isinstance(value, str):
            value = redact_credentials(value)
        if value is None or isinstance(value, str | int | float | bool) or _plain(value):
            fields[name] = value
    cls = f"{type(model).__module__}.{type(model).__qualname__}"
    body = json.dumps({"class": cls, "fields": fields}, sort_keys=True)
    return f"instance:{type(model).__name__}:{hashlib.sha256(body.encode()).hexdigest()[:16]}"


def _plain(value: Any) -> bool:
    """JSON data (lists and dicts of numbers and strings), not objects whose text would change per process."""
    if not isinstance(value, list | dict | tuple):
        return False
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


_default: Gateway | None = None
_default_lock = threading.Lock()
_rebuilt: dict[bytes, Gateway] = {}


def _gateway_in_process(
    cache: str | None,
    registry: PromptRegistry,
    retry: RetryPolicy,
    concurrency: int,
    timeout: float,
    delimit: bool,
) -> Gateway:
    """The gateway of these settings in this process, built once (a worker scores many items with it)."""
    settings = (cache, registry, retry, concurrency, timeout, delimit)
    key = pickle.dumps(settings)
    with _default_lock:
        if key not in _rebuilt:
            store = None if cache is None else open_cache(cache)
            _rebuilt[key] = Gateway(store, registry, retry, concurrency, timeout, delimit)
        return _rebuilt[key]


def default_gateway() -> Gateway:
    """The process-wide gateway (cache from HALLUSCOPE_CACHE_URL or HALLUSCOPE_CACHE_DIR; concurrency
    HALLUSCOPE_CONCURRENCY; request timeout in seconds HALLUSCOPE_TIMEOUT; HALLUSCOPE_DELIMIT=1 fences user
    text)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Gateway.from_env(cache=None if os.environ.get("HALLUSCOPE_NO_CACHE") else open_cache())
        return _default
