"""What one run cost: CallStats counts the calls sent, cache hits, retries, parse failures, tokens and
seconds of a run (safe to share across its threads and tasks); ChatReply is one answer as the gateway
returns it. A run's CallStats carries its call budget (``budget``), so the gateway that counts a call on
them asks the budget first: one object, passed down explicitly with the counters it guards."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from halluscope.results import RunMeta, TokenUsage


class RunGuard(Protocol):
    """What a run's requests answer to (its call budget): a method announces its calls to it before it
    makes them, and the gateway asks it before every request or forward pass it sends, and tells it of
    every retry."""

    def plan(self, calls: int) -> None:
        """``calls`` more are announced: refused (raising) when they pass the run's limit."""

    def sending(self) -> None:
        """Raises once the run is cut (its client left, its timeout passed): no further call is made."""

    def retrying(self) -> None:
        """A failed request is tried again: one more call of the run's budget, which may refuse it."""


class CallStats:
    """Counters of one run, safe to share across threads and tasks of that run."""

    def __init__(
        self,
        on_reply: Callable[[], None] | None = None,
        on_plan: Callable[[int], None] | None = None,
        budget: RunGuard | None = None,
    ) -> None:
        self._lock = threading.Lock()
        self.budget = budget  # the run's call budget (None: none), asked before each call counted here
        self.on_reply = on_reply  # called after each reply or forward pass recorded: drives progress bars
        self.on_plan = on_plan  # called with the calls planned so far when a method announces more: a bar's total
        self.planned = 0
        self.started = time.perf_counter()
        self.calls = 0
        self.cache_hits = 0
        self.retries = 0
        self.parse_failures = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.forward_passes = 0
        self.checker_passes = 0  # an NLI checker's batched forward passes: no LLM call, apart from ``calls``
        self.model_seconds = 0.0
        self.replayed_tokens = 0  # the prompt tokens of the calls replayed from the cache, as they were made
        self.replayed_seconds = 0.0  # the seconds those calls took when made, where the cache kept them
        self.replayed_timed = 0  # how many replayed calls the cache kept the seconds of
        self.evaluated_tokens = 0  # of the sent calls whose provider says what it reused (reported_reuse)
        self.reported_reuse = 0
        self._prefixes: set[int] = set()  # one hash per distinct prompt prefix: the floor of evaluated tokens
        self.floor_elsewhere = 0  # the floors counted in other processes (``add``)
        self.models: set[str] = set()
        self.prompts: set[str] = set()
        self.events: dict[str, int] = {}  # what the plumbing handled (a cache row read again), by kind
        self._whole: CallStats | None = None  # the run this is a part of (``part``), counted there too

    def record(self, reply: ChatReply, seconds: float = 0.0) -> None:
        with self._lock:
            self.models.add(reply.model)
            self.prompts.add(reply.prompt_ref)
            if reply.cached:
                self.cache_hits += 1
                self.replayed_tokens += reply.prompt_tokens
                if reply.made_seconds is not None:
                    self.replayed_seconds += reply.made_seconds
                    self.replayed_timed += 1
            else:
                self.calls += 1
                self.prompt_tokens += reply.prompt_tokens
                self.completion_tokens += reply.completion_tokens
                self.model_seconds += seconds
                self._count_evaluated(reply)
            if reply.parse_error is not None:
                self.parse_failures += 1
        if self.on_reply is not None:
            self.on_reply()
        if self._whole is not None:
            self._whole.record(reply, seconds)

    def _count_evaluated(self, reply: ChatReply) -> None:
        """A sent call's prompt tokens evaluated (those its provider did not hold), and its prompt's
        prefixes: the floor is the distinct tokens of all prompts, a shared prefix counted once."""
        if reply.reused_tokens is None:
            return
        self.reported_reuse += 1
        self.evaluated_tokens += max(0, reply.prompt_tokens - reply.reused_tokens)
        prefix = hash(reply.model)
        for token in reply.prompt_ids or ():
            prefix = hash((prefix, token))
            self._prefixes.add(prefix)

    @property
    def floor_tokens(self) -> int:
        return len(self._prefixes) + self.floor_elsewhere

    def plan(self, calls: int) -> None:
        """A method that now knows ``calls`` more replies of its run (model calls, cached ones included,
        and judge forward passes) announces them, as soon as it knows: the run's budget refuses them
        past its limit, before they are made; else they grow a progress bar's total."""
        if calls <= 0:
            return
        if self.budget is not None:
            self.budget.plan(calls)
        self._planned(calls)

    def _planned(self, calls: int) -> None:
        with self._lock:
            self.planned += calls
            planned = self.planned
        if self.on_plan is not None:
            self.on_plan(planned)
        if self._whole is not None:
            self._whole._planned(calls)

    def part(self, budget: RunGuard | None = None) -> CallStats:
        """Counters of one part of this run (one item of a benchmark, a guard's check inside a host
        agent's run): the part counts its own calls, under ``budget`` (default: this run's), and
        everything it counts is counted here too, so the totals and the progress bar (the hooks) see
        every part."""
        child = CallStats(budget=budget if budget is not None else self.budget)
        child._whole = self
        return child

    def record_forward(self, model: str, prompt_tokens: int, seconds: float, cached: bool = False) -> None:
        """A deterministic forward pass (teacher forcing, a next-token distribution), or one read back
        from the cache (``cached``: a text's token statistics)."""
        with self._lock:
            self.models.add(model)
            if cached:
                self.cache_hits += 1
            else:
                self.calls += 1
                self.forward_passes += 1
                self.prompt_tokens += prompt_tokens
                self.model_seconds += seconds
        if self.on_reply is not None:
            self.on_reply()
        if self._whole is not None:
            self._whole.record_forward(model, prompt_tokens, seconds, cached)

    def record_checker(self, model: str, seconds: float) -> None:
        """One batched forward pass of an NLI checker (a fitted cross-encoder, SelfCheckGPT's DeBERTa): counted
        apart from the LLM calls that results, costs and ``max_calls`` budgets count."""
        with self._lock:
            self.models.add(model)
            self.checker_passes += 1
            self.model_seconds += seconds
        if self.on_reply is not None:
            self.on_reply()
        if self._whole is not None:
            self._whole.record_checker(model, seconds)

    _COUNTERS = (
        "calls",
        "checker_passes",
        "cache_hits",
        "retries",
        "parse_failures",
        "prompt_tokens",
        "completion_tokens",
        "forward_passes",
        "model_seconds",
        "evaluated_tokens",
        "reported_reuse",
        "replayed_tokens",
        "replayed_seconds",
        "replayed_timed",
    )

    def snapshot(self) -> dict[str, Any]:
        """The counters now, as plain data (a worker sends the difference of two to its driver)."""
        with self._lock:
            return {
                **{name: getattr(self, name) for name in self._COUNTERS},
                "floor_tokens": len(self._prefixes) + self.floor_elsewhere,
                "models": sorted(self.models),
                "prompts": sorted(self.prompts),
            }

    def since(self, before: dict[str, Any]) -> dict[str, Any]:
        """What was counted since ``before`` (a snapshot); models and prompts: all those seen so far."""
        now = self.snapshot()
        return {
            **{name: now[name] - before[name] for name in self._COUNTERS + ("floor_tokens",)},
            "models": now["models"],
            "prompts": now["prompts"],
        }

    def add(self, counts: dict[str, Any]) -> None:
        """Counts from elsewhere (another process's ``since``), added to this run's."""
        with self._lock:
            for name in self._COUNTERS:
                setattr(self, name, getattr(self, name) + counts.get(name, 0))
            self.floor_elsewhere += counts.get("floor_tokens", 0)  # each process's own prefixes
            self.models.update(counts.get("models", ()))
            self.prompts.update(counts.get("prompts", ()))

    def _evaluated(self) -> dict[str, int | float]:
        """Prompt tokens evaluated against their floor, where every sent call said what it reused."""
        if not self.reported_reuse or self.reported_reuse < self.calls - self.forward_passes:
            return {}
        floor = self.floor_tokens
        if not floor:  # a provider that says what it cached, but not the prompt's tokens
            return {"evaluated_tokens": self.evaluated_tokens}
        ratio = round(self.evaluated_tokens / floor, 3)
        return {"evaluated_tokens": self.evaluated_tokens, "floor_tokens": floor, "evaluated_ratio": ratio}

    def _replayed(self) -> dict[str, Any]:
        """What the calls replayed from the cache cost when they were made: what prices a run that made
        none of its own (its calls made by an earlier run)."""
        if not self.cache_hits:
            return {}
        timed = self.replayed_timed
        return {
            "replayed": {
                "prompt_tokens": self.replayed_tokens,
                "seconds": round(self.replayed_seconds, 3),
                "timed": timed,
            }
        }

    def event(self, kind: str) -> None:
        """Something the gateway handled on the run's behalf, counted in its result's events."""
        with self._lock:
            self.events[kind] = self.events.get(kind, 0) + 1
        if self._whole is not None:
            self._whole.event(kind)

    def add_retry(self) -> None:
        with self._lock:
            self.retries += 1
        if self._whole is not None:
            self._whole.add_retry()

    def meta(self, method: str, events: dict[str, int] | None = None, **params: Any) -> RunMeta:
        """The run's RunMeta; ``events``: bad model answers the method handled, by kind."""
        with self._lock:
            return RunMeta(
                method=method,
                calls=self.calls,
                cache_hits=self.cache_hits,
                parse_failures=self.parse_failures,
                events={**self.events, **dict(events or {})},
                tokens=TokenUsage(prompt=self.prompt_tokens, completion=self.completion_tokens),
                seconds=round(time.perf_counter() - self.started, 3),
                models=sorted(self.models),
                prompts=sorted(self.prompts),
                params={
                    "retries": self.retries,
                    "model_seconds": round(self.model_seconds, 3),
                    **({"forward_passes": self.forward_passes} if self.forward_passes else {}),
                    **({"checker_passes": self.checker_passes} if self.checker_passes else {}),
                    **self._evaluated(),
                    **self._replayed(),
                    **params,
                },
            )


@dataclass
class ChatReply:
    text: str
    model: str
    prompt_ref: str
    sample_index: int
    cached: bool
    prompt_tokens: int = 0
    completion_tokens: int = 0
    logprobs: list[dict[str, Any]] | None = None
    parsed: Any = None
    parse_error: str | None = None
    reused_tokens: int | None = None  # a sent call's prompt tokens its provider held evaluated (a KV prefix)
    made_seconds: float | None = None  # a replayed call's seconds when it was made (None: the cache kept none)
    prompt_ids: list[int] | None = None  # a sent call's prompt token ids, where its provider gives them

    @property
    def ok(self) -> bool:
        return self.parse_error is None
