"""What a served request may choose, for every door that serves requests from clients the operator does
not control (`halluscope serve`'s MCP tools and POST /check, the LangGraph server's configurable).

A model spec names a provider that is called with the process's own keys and a base URL it is sent to;
a file path is read from the process's disk. So only the operator chooses them: the server's own flags
(``--model``, ``--judge``) fix them, and a request's option that names a model is refused unless the
operator allowed that exact spec (``--allow-model SPEC``); one that names a file always is. A request
names only the method's own inputs and options (never a run setting such as the gateway), and plans at
most the server's ceiling of calls. Refusals name the option, never its value (a spec may hold a key).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from halluscope.backends.budget import MAX_CALLS
from halluscope.backends.chat import resolve
from halluscope.backends.entailment import judge_target
from halluscope.checks import check_value
from halluscope.errors import ConfigError, redact_credentials
from halluscope.runtime import registry
from halluscope.runtime.contract import Method

if TYPE_CHECKING:
    from halluscope.calibration import Calibration

MODEL_ENV = "HALLUSCOPE_SERVE_MODEL"  # the LangGraph server's operator: the model of every run
JUDGE_ENV = "HALLUSCOPE_SERVE_JUDGE"  # ... the judge of every run whose method has one
ALLOW_ENV = "HALLUSCOPE_SERVE_ALLOW_MODEL"  # ... further specs a run's configurable may name, comma-separated
SHARED_ENV = "HALLUSCOPE_SERVE_SHARED"  # =1: the LangGraph server is shared, its configurable is a client's
MAX_CALLS_ENV = "HALLUSCOPE_SERVE_MAX_CALLS"  # the most calls a served run may plan (default MAX_CALLS)


@dataclass(frozen=True)
class Operator:
    """The choices a served process's operator made: the model and judge of every request, the specs a
    request may name besides (``allowed``), and the most calls one request may plan. ``how`` says,
    in a refusal, where the operator makes these choices (the flags, or the environment)."""

    model: str | None = None
    judge: str | None = None
    allowed: frozenset[str] = field(default_factory=frozenset)
    max_calls: int = MAX_CALLS
    how: str = "the operator's --model, --judge or --allow-model SPEC"
    shared: bool = True  # False: the process serves its own user (``langgraph dev``), whose requests choose freely

    def __post_init__(self) -> None:
        if isinstance(self.max_calls, bool) or not isinstance(self.max_calls, int) or self.max_calls < 1:
            raise ConfigError(f"a server's call ceiling takes a whole number of at least 1, got {self.max_calls!r}")

    @classmethod
    def from_env(cls) -> Operator:
        """The LangGraph server's operator, from its environment. It is shared (a run's configurable held
        to the operator's choices) with ``HALLUSCOPE_SERVE_SHARED=1`` or once it fixes a model; otherwise
        ``langgraph dev`` on one's own machine, where Studio's form chooses the model."""
        from halluscope.backends.retry import env_number

        model, judge = os.environ.get(MODEL_ENV) or None, os.environ.get(JUDGE_ENV) or None
        allowed = frozenset(s.strip() for s in os.environ.get(ALLOW_ENV, "").split(",") if s.strip())
        ceiling = int(env_number(MAX_CALLS_ENV, MAX_CALLS, whole=True, minimum=1))
        shared = os.environ.get(SHARED_ENV, "") not in ("", "0") or bool(model or judge or allowed)
        return cls(model, judge, allowed, ceiling, f"the server's {MODEL_ENV}, {JUDGE_ENV} or {ALLOW_ENV}", shared)

    @property
    def models(self) -> frozenset[str]:
        """Every spec a request may run: the operator's model and judge, and those allowed."""
        return frozenset(m for m in (self.model, self.judge) if m) | self.allowed

    def limit(self, asked: Any, set_by: str = "") -> int:
        """A request's call budget: the one it asks for (a whole number), at most the server's ceiling
        (``set_by``: where the operator sets it, for the refusal)."""
        if asked is None:
            return self.max_calls
        check_value("the request", "max_calls", asked, int)
        if not 1 <= asked <= self.max_calls:
            raise ConfigError(
                f"max_calls takes 1 to this server's ceiling of {self.max_calls:,}{set_by}, got {asked:,}"
            )
        return int(asked)

    def inputs(self, method: Method, given: Mapping[str, Any]) -> dict[str, Any]:
        """A request's inputs: the method's own, nothing else (an option passed as an input is refused
        here, so it cannot get past ``options``)."""
        if not isinstance(given, Mapping):
            raise ConfigError(f"inputs must be an object of {method.name}'s inputs")
        unknown = sorted(set(given) - set(method.input_names))
        if unknown:
            raise ConfigError(
                f"{method.name} takes no input {', '.join(map(repr, unknown))}; its inputs: "
                + ", ".join(method.input_names)
            )
        return dict(given)

    def options(self, method: Method, given: Mapping[str, Any] | None) -> dict[str, Any]:
        """A request's options checked against the operator's choices, the operator's model and judge
        filled in where the request names none."""
        if not isinstance(given or {}, Mapping):
            raise ConfigError(f"options must be an object of {method.name}'s options")
        chosen = dict(given or {})
        unknown = sorted(set(chosen) - set(method.option_names))
        if unknown:
            raise ConfigError(
                f"{method.name} has no option {', '.join(map(repr, unknown))}; its options: "
                + ", ".join(method.option_names)
            )
        for name, refers in method.refers.items():
            if chosen.get(name) is not None:
                self._check_named(name, refers, chosen[name])
        if self.model is not None and method.model_field in method.option_names:
            chosen.setdefault(method.model_field, self.model)
        if self.judge is not None and "judge" in method.refers:
            chosen.setdefault("judge", self.judge)
        return chosen

    def _check_named(self, name: str, refers: str, value: Any) -> None:
        if refers == "file":
            raise ConfigError(
                f"option {name!r} names a file: a served request may not; the server's operator chooses its files"
            )
        specs = value if isinstance(value, list | tuple) else [value]
        if not all(isinstance(spec, str) and spec in self.models for spec in specs):
            raise ConfigError(
                f"option {name!r} names a model this server's operator did not allow; it runs the models "
                f"chosen by {self.how}"
            )


def calibration_specs(calibration: Calibration) -> list[str]:
    """Every model spec a calibration would send its checks to: the model it was fitted on, and each
    member's model options (in its name's brackets, 'grounded[model=...]', and in its recorded settings)."""
    found = [calibration.model] if isinstance(calibration.model, str) else []
    for member in calibration.methods:
        name, own = registry.configured(member)
        method = registry.get(name)
        options = {**calibration.settings.get(member, {}), **own}
        for option, refers in method.refers.items():
            value = options.get(option)
            if refers == "model" and value is not None:
                found += [v for v in (value if isinstance(value, list | tuple) else [value]) if isinstance(v, str)]
    return found


def refuse_unnamed_models(calibration: Calibration, named: Iterable[str | None], flag: str = "--model") -> None:
    """A calibration names methods and options, never where calls go: each spec it would call beyond this
    process (an API, a server; not a local GGUF or NLI checkpoint, which send nothing anywhere) must be
    one the operator named, or the file is refused in one line before any call."""
    allowed = {spec for spec in named if spec}
    for spec in calibration_specs(calibration):
        nli, target = judge_target(spec, "an Entailment")
        if nli or spec in allowed or resolve(target).adapter.in_process:
            continue
        raise ConfigError(
            f"the calibration names the model {redact_credentials(spec)}, which would be sent every checked answer; "
            f"a calibration chooses methods, not where calls go: name that model yourself ({flag}) to run it"
        )
