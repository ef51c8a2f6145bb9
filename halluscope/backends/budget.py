"""A run's call budget: the model calls it may plan, counted before they are made, each retry of a failed
request counted as one more, and a cut that stops a run whose client left or whose time ran out."""

from __future__ import annotations

import threading

from halluscope.errors import ConfigError

MAX_CALLS = 10_000  # a run that plans more model calls than this is refused unless allowed


class BudgetError(ConfigError):
    """A run that plans more model calls than it is allowed: refused before they are made."""


class RunCut(BudgetError):
    """A run whose budget was cut (its client left, its timeout passed): it makes no further call."""


class CallBudget:
    """The model calls a run may plan (None: no limit), or a batch's runs together (``scope``). It rides
    on the run's CallStats: a method announces its calls as soon as it knows them (``stats.plan``),
    before it makes them; the gateway counts each retry of a request as one more. The announcement that
    passes the limit raises, naming the count, what the limit covers and how to allow it. A budget
    ``cut`` refuses every call from then on (the gateway asks it before each request: ``sending``)."""

    def __init__(self, limit: int | None = MAX_CALLS, scope: str = "run", allow: str | None = None) -> None:
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise ConfigError(f"max_calls takes a whole number of at least 1 (or None: no limit), got {limit!r}")
        self.limit = limit
        self.scope = scope
        self.allow = allow  # how to allow more, where the Python and command-line ways do not apply
        self.planned = 0
        self.retries = 0
        self.cut_because: str | None = None
        self._lock = threading.Lock()

    def cut(self, because: str) -> None:
        """No further call: the run's next request, forward pass or plan raises RunCut saying ``because``."""
        self.cut_because = because

    def sending(self) -> None:
        if self.cut_because is not None:
            raise RunCut(f"this {self.scope} was stopped: {self.cut_because}")

    def retrying(self) -> None:
        self.plan(1, retry=True)

    def plan(self, calls: int, retry: bool = False) -> None:
        self.sending()
        with self._lock:
            self.planned += calls
            self.retries += calls if retry else 0
            planned, retries = self.planned, self.retries
        self.check(planned, retries)

    def check(self, planned: int, retries: int) -> None:
        """Refuse a count past the limit (a subclass that counts elsewhere, a cluster's, checks here too)."""
        if self.limit is not None and planned > self.limit:
            counted = f" ({retries} of them retries of failed requests)" if retries else ""
            covers = " (max_calls covers the whole batch)" if self.scope == "batch" else ""
            allow = self.allow or (
                f"allow it with max_calls={planned} or yes=True (on the command line: --max-calls {planned} or --yes)"
            )
            raise BudgetError(
                f"this {self.scope} plans {planned:,} model calls{counted}, more than the limit of {self.limit:,}"
                f"{covers}; {allow}"
            )
