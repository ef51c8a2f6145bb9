"""One retry policy for every model call (chat, completion and log-prob requests alike): which faults
can pass, how long to wait (exponential backoff with full jitter, or the server's Retry-After, capped
by the policy), and the one sentence a user reads when the tries run out."""

from __future__ import annotations

import email.utils
import json
import math
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import httpx
from langchain_core.exceptions import ModelConnectionError, ModelRateLimitError
from tenacity import AsyncRetrying, RetryCallState, Retrying, retry_if_exception, stop_after_attempt
from tenacity.wait import wait_random_exponential

from halluscope.errors import ConfigError, ModelUnavailableError, redact_credentials

T = TypeVar("T")
TRANSIENT_STATUS = {408, 409, 425, 429}


class BadReplyError(Exception):
    """A reply that is not a real answer: an unreadable body, no choices, empty content, or no log-probs
    when they were asked for. Transient (retried), and never cached."""


def env_number(name: str, default: float, *, whole: bool = False, minimum: float = 0.0) -> Any:
    """A number from the environment, or ``default``; a malformed or too small value is a ConfigError
    that names the variable, not a ValueError traceback."""
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value: float = int(raw) if whole else float(raw)
    except ValueError:
        kind = "a whole number" if whole else "a number"
        raise ConfigError(f"{name} must be {kind}, got {raw!r}") from None
    if not math.isfinite(value) or value < minimum:
        raise ConfigError(f"{name} must be at least {minimum:g}, got {raw!r}")
    return value


@dataclass(frozen=True)
class RetryPolicy:
    """Up to ``attempts`` tries; wait ~ U(0, min(cap, initial * 2^attempt)), or the server's Retry-After
    when it gives one, never more than ``cap``."""

    attempts: int = 6
    initial: float = 1.0
    cap: float = 60.0

    def __post_init__(self) -> None:
        if self.attempts < 1 or self.initial < 0 or self.cap < 0:
            raise ConfigError(f"a retry policy needs attempts >= 1 and waits >= 0, got {self}")

    @classmethod
    def from_env(cls) -> RetryPolicy:
        return cls(
            attempts=env_number("HALLUSCOPE_MAX_ATTEMPTS", cls.attempts, whole=True, minimum=1),
            initial=env_number("HALLUSCOPE_RETRY_INITIAL", cls.initial),
            cap=env_number("HALLUSCOPE_RETRY_CAP", cls.cap),
        )


class Faults(Protocol):
    """What a provider's adapter (``backends.providers.Provider``) says of its client's faults."""

    key_variable: str | None

    def connection_errors(self) -> tuple[type[BaseException], ...]: ...

    def unreadable_errors(self) -> tuple[type[BaseException], ...]: ...


def _connection_errors(faults: Faults | None) -> tuple[type[BaseException], ...]:
    """Dropped connections and timeouts: langchain-core's provider-neutral classes (ModelTimeoutError is
    one), the transport's, and those the provider declares for its own client."""
    neutral = (ModelConnectionError, ModelRateLimitError, httpx.TransportError, ConnectionError, TimeoutError)
    return neutral + (faults.connection_errors() if faults is not None else ())


def _unreadable(faults: Faults | None) -> tuple[type[BaseException], ...]:
    """A 200 whose body the client could not read."""
    return (BadReplyError, json.JSONDecodeError, *(faults.unreadable_errors() if faults is not None else ()))


def status_of(exc: BaseException) -> int | None:
    status = getattr(exc, "status_code", None)
    return status if isinstance(status, int) else None


def is_transient(exc: BaseException, faults: Faults | None = None) -> bool:
    """Faults that can pass: rate limits, timeouts, 5xx (529 overloaded included), dropped connections
    (the provider's own client's among them, as ``faults`` declares them), and 200 replies that are not
    a real answer."""
    if isinstance(exc, _unreadable(faults)):
        return True
    status = status_of(exc)
    if status is not None:
        return status in TRANSIENT_STATUS or status >= 500
    return isinstance(exc, _connection_errors(faults))


def retry_after(exc: BaseException) -> float | None:
    """Seconds the server asked us to wait: ``retry-after-ms``, or ``Retry-After`` in seconds or as an
    HTTP date; looked up on the error and the errors it wraps."""
    seen: BaseException | None = exc
    while seen is not None:
        response = getattr(seen, "response", None)
        headers = getattr(response, "headers", None)
        if headers is not None:
            if (ms := headers.get("retry-after-ms")) is not None:
                try:
                    return max(0.0, float(ms) / 1000)
                except ValueError:
                    pass
            if (value := headers.get("retry-after")) is not None:
                return _seconds_from(value)
        seen = seen.__cause__ or seen.__context__
    return None


def _seconds_from(value: str) -> float | None:
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class _Wait:
    """The policy's backoff, replaced by the server's Retry-After (capped) when the fault carries one."""

    def __init__(self, policy: RetryPolicy) -> None:
        self.policy = policy
        self.backoff = wait_random_exponential(multiplier=policy.initial, max=policy.cap)

    def __call__(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome is not None else None
        asked = retry_after(exc) if exc is not None else None
        return min(asked, self.policy.cap) if asked is not None else float(self.backoff(state))


def _tenacity_args(policy: RetryPolicy, on_retry: Callable[[], None] | None, faults: Faults | None) -> dict[str, Any]:
    def before_sleep(_state: RetryCallState) -> None:
        if on_retry is not None:
            on_retry()

    return {
        "retry": retry_if_exception(lambda exc: is_transient(exc, faults)),
        "wait": _Wait(policy),
        "stop": stop_after_attempt(policy.attempts),
        "reraise": True,
        "before_sleep": before_sleep,
    }


def explain(exc: BaseException, spec: str, faults: Faults | None, tries: int, seconds: float) -> ModelUnavailableError:
    """The sentence a user reads for a provider's final fault (credentials in URLs redacted); a refused
    key names the variable the provider reads it from."""
    status = status_of(exc)
    detail = redact_credentials(str(exc))
    if status in (401, 403):
        variable = faults.key_variable if faults is not None else None
        where = f"check {variable}" if variable else "check the key this provider reads"
        return ModelUnavailableError(f"{spec} refused the API key ({status}): {where}")
    if not is_transient(exc, faults):
        if status is not None:
            return ModelUnavailableError(f"{spec} refused the call ({status}): {detail}")
        return ModelUnavailableError(f"{spec}: {type(exc).__name__}: {detail}")
    gave_up = f"gave up after {tries} {'try' if tries == 1 else 'tries'} over {seconds:.1f} s"
    if status is None and isinstance(exc, _connection_errors(faults)):
        return ModelUnavailableError(
            f"cannot reach {spec}: {gave_up} ({type(exc).__name__}: {detail}); "
            "is the server running and the base URL right?"
        )
    if status is not None:
        what = f"{status} {detail}"
    elif isinstance(exc, BadReplyError):
        what = detail
    elif isinstance(exc, _unreadable(faults)):
        what = f"sent an unreadable reply ({type(exc).__name__}: {detail})"
    else:
        what = f"{type(exc).__name__}: {detail}"
    return ModelUnavailableError(f"{spec}: {gave_up}: {what}")


def _raise_explained(
    exc: Exception, statistics: dict[str, Any], started: float, spec: str, faults: Faults | None
) -> None:
    """A provider's final fault raises as the one sentence ``explain`` writes; anything else returns."""
    if is_transient(exc, faults) or status_of(exc) is not None:
        tries = int(statistics.get("attempt_number", 1))
        raise explain(exc, spec, faults, tries, time.monotonic() - started) from exc


def call_with_retries(
    fn: Callable[[], T],
    policy: RetryPolicy,
    spec: str,
    faults: Faults | None = None,
    on_retry: Callable[[], None] | None = None,
) -> T:
    """``fn()`` under the policy (``faults``: the provider's adapter, which names its client's transient
    errors and its key's variable); a provider's final fault becomes a ModelUnavailableError that says
    what went wrong, where, and after how many tries; any other error raises as it is."""
    retrying = Retrying(**_tenacity_args(policy, on_retry, faults))
    started = time.monotonic()
    try:
        for attempt in retrying:
            with attempt:
                return fn()
    except Exception as exc:
        _raise_explained(exc, retrying.statistics, started, spec, faults)
        raise
    raise AssertionError("tenacity returned without an outcome")  # pragma: no cover


async def acall_with_retries(
    fn: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    spec: str,
    faults: Faults | None = None,
    on_retry: Callable[[], None] | None = None,
) -> T:
    """The async twin of ``call_with_retries``."""
    retrying = AsyncRetrying(**_tenacity_args(policy, on_retry, faults))
    started = time.monotonic()
    try:
        async for attempt in retrying:
            with attempt:
                return await fn()
    except Exception as exc:
        _raise_explained(exc, retrying.statistics, started, spec, faults)
        raise
    raise AssertionError("tenacity returned without an outcome")  # pragma: no cover
