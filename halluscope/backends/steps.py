"""Work written once as steps and run both ways: a generator yields each ``Step`` it waits on and is
sent its result; ``finish`` runs the steps on the caller's thread, ``afinish`` awaits them on the event
loop (where a provider's async client is awaited). One interpreter for the gateway's calls and for the
methods' graph nodes: a step's error is thrown back into the steps, so a ``finally`` of theirs runs
before it goes on."""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from halluscope.backends.stats import CallStats

T = TypeVar("T")


class Step(ABC):
    """Work the steps wait on, in both forms: ``run`` on the caller's thread, ``arun`` on the event
    loop. Both are given the run's CallStats."""

    @abstractmethod
    def run(self, stats: CallStats | None) -> Any: ...

    @abstractmethod
    async def arun(self, stats: CallStats | None) -> Any: ...


Steps = Generator[Step, Any, T]  # yields the steps it waits on, is sent each one's result, returns T


@dataclass(frozen=True)
class Blocking(Step):
    """Work that has no async form (disk or Redis I/O, a classifier's or a proxy model's forward pass):
    ``work(stats)`` in place (``run``), or on a thread off the event loop (``arun``)."""

    work: Callable[[CallStats | None], Any]

    def run(self, stats: CallStats | None) -> Any:
        return self.work(stats)

    async def arun(self, stats: CallStats | None) -> Any:
        return await asyncio.to_thread(self.work, stats)


@dataclass(frozen=True)
class Sleep(Step):
    """A pause: ``time.sleep`` in place, ``asyncio.sleep`` on the event loop."""

    seconds: float

    def run(self, stats: CallStats | None) -> None:
        time.sleep(self.seconds)

    async def arun(self, stats: CallStats | None) -> None:
        await asyncio.sleep(self.seconds)


def finish(steps: Steps[T], stats: CallStats | None = None) -> T:
    """Run steps to their end on this thread: each step's result (or error) is sent back into them."""
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            step = steps.throw(error) if error is not None else steps.send(value)
        except StopIteration as done:
            return cast(T, done.value)
        try:
            value, error = step.run(stats), None
        except BaseException as exc:  # noqa: BLE001 - handed back to the steps, which raise it on
            value, error = None, exc


async def afinish(steps: Steps[T], stats: CallStats | None = None) -> T:
    """``finish`` on the event loop."""
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            step = steps.throw(error) if error is not None else steps.send(value)
        except StopIteration as done:
            return cast(T, done.value)
        try:
            value, error = await step.arun(stats), None
        except BaseException as exc:  # noqa: BLE001 - handed back to the steps, which raise it on
            value, error = None, exc
