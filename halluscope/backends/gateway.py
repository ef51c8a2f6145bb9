"""The one place every chat call goes through: render, cache, retry, limit, count.

A graph asks the gateway for ``call(model, prompt, variables, sample_index=...)``; the gateway renders
the versioned prompt, answers from the disk cache when it can, otherwise calls the provider under one
concurrency limit per model with exponential backoff and jitter on transient errors, parses the answer
with the prompt's parser (a parse failure is recorded, not raised), and adds calls, tokens, cache hits
and time to the run's ``CallStats``.

Its parts live by job: ``stats`` (CallStats, ChatReply), ``limits`` (ModelLimiter), ``retry`` (the
policy and the give-up sentence), ``cache`` (the disk cache); this module composes them and sends one
chat call. A sent request and its reply are ``sending``'s, a model's name and key ``models``'s; many calls
at once are ``fanout``'s (``call_all`` and ``sample`` hand this gateway to it); a LogProbModel's forward
passes, token readings, hidden states and continuations are ``readings``'s, through this gateway.
"""

from __future__ import annotations

import functools
import os
import pickle
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from langchain_core.language_models import BaseChatModel

from halluscope.backends import fanout
from halluscope.backends.cache import CallCache, RedisCache, call_key, open_cache
from halluscope.backends.chat import load_logprob_model, resolve, runs_in_process
from halluscope.backends.fanout import Ask, samples
from halluscope.backends.limits import Limiter, ModelLimiter, shared_limiter
from halluscope.backends.logprobs import LogProbModel
from halluscope.backends.models import INSTANCE, ModelLike, ResolvedChat, instance_key
from halluscope.backends.providers import Provider, check_call_params
from halluscope.backends.retry import RetryPolicy, env_number
from halluscope.backends.sending import SENT, Request, Send, provider_kwargs, real_answer, sending
from halluscope.backends.stats import CallStats, ChatReply
from halluscope.backends.steps import Blocking, Sleep, Steps, afinish, finish
from halluscope.errors import ConfigError, ParseError, PromptError
from halluscope.prompts.registry import DELIMIT_SUFFIX, PromptRegistry, PromptTemplate, fence, to_langchain

DEFAULT_TIMEOUT = 120.0  # seconds one request may take before it counts as a (retried) timeout
FLIGHT_POLL_S, FLIGHT_POLL_MAX_S = 0.05, 1.0  # how often a process waiting on another's call looks again
_WAIT = object()  # another process asks this call now: look again soon
MADE_SECONDS = "seconds"  # a cached reply's seconds when it was made: what its replays cost

T = TypeVar("T")


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
        self._models: dict[str, ResolvedChat] = {}  # by model key
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

    def model(self, model: ModelLike) -> ResolvedChat:
        """A model string's resolved spec (``chat.resolve``: parsed and checked once per process) with the
        client this gateway built for it on first use; every later call reads them."""
        if isinstance(model, BaseChatModel):
            key = getattr(model, "model_id", None) or instance_key(model)
            with self._lock:
                return self._models.setdefault(key, ResolvedChat(key, model, INSTANCE))
        resolved = resolve(model)
        found = self._models.get(resolved.key)
        if found is not None:
            return found
        with self._lock:
            if resolved.key not in self._models:
                chat = resolved.adapter.chat_model(resolved.spec, self.timeout)
                self._models[resolved.key] = ResolvedChat(resolved.key, chat, resolved.adapter, resolved.spec)
            return self._models[resolved.key]

    def warm(self, model: ModelLike) -> None:
        """The model resolved and loaded now (a server's, before it says it is ready)."""
        resolved = self.model(model)
        resolved.adapter.warm(resolved.chat)

    def chat_model(self, model: ModelLike) -> BaseChatModel:
        """The LangChain chat model a spec names, the one this gateway's calls use (a local GGUF loaded
        once): for a chain of your own beside a detector, e.g. ``prompt | gateway.chat_model(spec)``."""
        return self.model(model).chat

    def provider(self, model: ModelLike) -> Provider:
        """The adapter of the provider that answers ``model`` (what it can do)."""
        return self.model(model).adapter

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
    ) -> tuple[ResolvedChat, PromptTemplate, list[dict[str, str]], dict[str, Any]]:
        check_call_params(params)
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

    def begin(
        self,
        model: ModelLike,
        prompt: str | PromptTemplate,
        variables: Mapping[str, Any] | None,
        params: Mapping[str, Any],
        sample_index: int,
        stats: CallStats | None,
    ) -> ChatReply | Request:
        """Render and key the call; answer it from the cache when possible."""
        m, tpl, messages, merged = self._prepare(model, prompt, variables or {}, params)
        key = call_key(m.key, {**merged, "n": 1}, messages, sample_index)
        if (cached := self.cached(key, m.key, tpl, sample_index, bool(merged.get("logprobs")), stats)) is not None:
            return cached
        return Request(
            m,
            tpl,
            self.prompt_ref(tpl),
            key,
            sample_index,
            provider_kwargs(m, merged, sample_index),
            to_langchain(messages),
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
        req = yield Blocking(functools.partial(self.begin, model, prompt, variables, params, sample_index))
        if isinstance(req, ChatReply):
            return req
        delay = FLIGHT_POLL_S
        while (answered := (yield Blocking(functools.partial(self.flight, req)))) is _WAIT:
            yield Sleep(delay)  # another process asks it now
            delay = min(2 * delay, FLIGHT_POLL_MAX_S)
        if isinstance(answered, ChatReply):
            return answered
        try:
            started = time.perf_counter()
            data = yield Send(self.limiter(req.model.key), self.retry, req)
            return (yield Blocking(functools.partial(self.finish_request, req, data, time.perf_counter() - started)))
        finally:
            yield Blocking(lambda _stats: self.land(req))

    def flight(self, req: Request, stats: CallStats | None) -> ChatReply | object | None:
        """Single-flight across the processes (and threads) sharing the cache: claim the call and ask it
        (None), or, while another holds it, ``_WAIT``; the answer once the holder has cached it (a
        reply). A claim lasts one request timeout, so a holder that crashed blocks no one longer."""
        if self.cache is None:
            return None
        claimed = self.cache.claim(req.key, self.timeout)
        logprobs = bool(req.kwargs.get("logprobs"))
        answered = self.cached(req.key, req.model.key, req.prompt, req.sample_index, logprobs, stats)
        if answered is not None:  # answered while this process looked (or before it claimed)
            if claimed:
                self.cache.release(req.key)
            return answered
        return None if claimed else _WAIT

    def land(self, req: Request) -> None:
        """The claimed call is answered and cached, or failed for good: others may ask it now."""
        if self.cache is not None:
            self.cache.release(req.key)

    def finish_request(self, req: Request, data: dict[str, Any], seconds: float, stats: CallStats | None) -> ChatReply:
        asked = bool(req.kwargs.get("logprobs"))
        return self.answered(req.key, req.model.key, req.prompt, req.sample_index, data, asked, seconds, stats)

    def cached(
        self, key: str, model_key: str, tpl: PromptTemplate, sample_index: int, logprobs: bool, stats: CallStats | None
    ) -> ChatReply | None:
        """A call's cached answer, counted; None on a miss or on an entry that is no real answer."""
        hit = self.cache.get(key) if self.cache is not None else None
        if hit is None or not real_answer(hit, logprobs):
            return None
        reply = self._reply(model_key, tpl, sample_index, True, hit)
        if stats is not None:
            stats.record(reply)
        return reply

    def answered(
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
        if self.cache is not None and real_answer(data, logprobs):
            self.cache.set(key, {**data, MADE_SECONDS: round(seconds, 3)})  # what a replay of it cost to make
        reply = self._reply(model_key, tpl, sample_index, False, data)
        reply.reused_tokens, reply.prompt_ids = reused, ids
        if stats is not None:
            stats.record(reply, seconds)
        return reply

    def limited(self, key: str, compute: Callable[[], T], stats: CallStats | None) -> T:
        """``compute()`` holding one of the model's concurrency slots, unless the run was cut (asked once the
        slot is held: a run cut while its call waited for one makes none)."""
        sending(stats)
        with self.limiter(key).slot():
            sending(stats)
            return compute()

    # -- many calls at once (backends.fanout), through this gateway

    def call_all(
        self, asks: Sequence[Ask], stats: CallStats | None = None, on_reply: Callable[[ChatReply], None] | None = None
    ) -> list[ChatReply]:
        """``fanout.call_all``: the calls run concurrently, their replies in order."""
        return fanout.call_all(self, asks, stats, on_reply)

    async def acall_all(self, asks: Sequence[Ask], stats: CallStats | None = None) -> list[ChatReply]:
        """``fanout.acall_all``: ``call_all`` on the event loop."""
        return await fanout.acall_all(self, asks, stats)

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
