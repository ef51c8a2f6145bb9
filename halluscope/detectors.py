"""One public API for every method: ``halluscope.detector(method, model=..., **options)``.

A detector is configuration only (the method, its model and options), so one instance is safe to
share across threads and concurrent graph runs: every ``detect`` builds its own graph and counts its
own calls, and model calls meet in the process's gateway (one cache, one limit per model). It is a
LangChain Runnable: ``invoke``/``batch``/``with_config`` and ``|`` in a chain, one root run per item
in a trace, named after the method.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import time
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Union

from langchain_core.messages import BaseMessage
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.runnables.config import ContextThreadPoolExecutor, get_config_list, patch_config
from pydantic import BaseModel, Field, create_model
from tqdm.auto import tqdm

from halluscope.backends.budget import MAX_CALLS, CallBudget
from halluscope.backends.chat import message_logprobs
from halluscope.backends.gateway import DEFAULT_TIMEOUT
from halluscope.backends.models import ModelLike, model_name
from halluscope.calibration import FORCED, Calibration
from halluscope.checks import check_arguments, check_value
from halluscope.errors import ConfigError, HalluscopeError, HalluscopeWarning, redact_credentials
from halluscope.results import DetectionResult, RunMeta
from halluscope.runtime import registry
from halluscope.runtime.contract import RUN_SETTINGS, Method
from halluscope.text import checked_text, checked_texts

# Every method by name, FIBE's variants included ('fibe+sbc+dq'), as the registry finds them: one
# dict, kept current by the registry
METHODS: dict[str, Method] = registry.methods()

# What a detector takes as a Runnable: the method's keyword arguments, or the text to check.
DetectorInput = Union[Mapping[str, Any], str, BaseMessage]  # noqa: UP007 (a runtime alias)


@dataclass(frozen=True, eq=False)
class Detector(Runnable[DetectorInput, DetectionResult]):
    """A method with its model and options bound; ``detect(**item)`` runs it on one item, and as a
    Runnable ``invoke(item, config)`` does, under the config's callbacks, tags and run name."""

    method: str
    options: Mapping[str, Any] = field(default_factory=dict)
    calibration: Calibration | None = None  # gives every unit a probability beside its score
    max_calls: int | None = MAX_CALLS  # the model calls one run may plan (None: no limit)
    force_calibration: bool = False  # apply a calibration to scores of other settings, with a warning
    spec: Method = field(init=False, repr=False)  # the method's contract, looked up once

    def __post_init__(self) -> None:
        object.__setattr__(self, "method", registry.name_of(self.method))
        object.__setattr__(self, "spec", registry.get(self.method))
        object.__setattr__(self, "options", MappingProxyType(dict(self.options)))
        CallBudget(self.max_calls)  # a bad limit is refused now, not at the first run
        self._check_names(self.options, "option")
        check_arguments(self.method, self.options, self.spec.hints)
        if self.calibration is not None:
            self.calibration.checked()  # a Calibration built in Python is checked as a file is
            model = self.options.get(self.spec.model_field)
            self.calibration.check(self.method, model_name(model) if isinstance(model, ModelLike) else None)
            self.calibration.settings_note(self._scale_options(), self.force_calibration)  # n=3 on a fit on 20

    def accepted(self) -> dict[str, inspect.Parameter]:
        """The keyword arguments the method's ``detect`` takes (options and item fields alike)."""
        return dict(self.spec.signature.parameters)

    def _check_names(self, names: Iterable[str], what: str) -> None:
        accepted = self.accepted()
        unknown = sorted(set(names) - accepted.keys())
        if unknown:
            raise ConfigError(
                f"{self.method} has no {what} {', '.join(map(repr, unknown))}; it accepts: "
                + ", ".join(name for name in accepted if name not in RUN_SETTINGS)  # not the gateway, stats ...
            )

    def arguments(self, item: Mapping[str, Any]) -> dict[str, Any]:
        """The keyword arguments of one run: the detector's options, then the item's fields (an item
        may override an option); blank text inputs are refused here, before any model call."""
        if not isinstance(item, Mapping):
            raise ConfigError(f"an item must be a dict of {self.method} keyword arguments, got {type(item).__name__}")
        self._check_names(item, "argument")
        spec = self.spec
        kwargs = {name: spec.plain(name, value) for name, value in {**self.options, **item}.items()}
        required = {spec.answer_field, spec.question_field, *spec.positional} & set(spec.text_fields())
        for name in sorted(required - {None}):  # a blank one is a clear per-item failure, never a model call
            value = kwargs.get(name)
            if value is not None and not checked_text(value, f"{self.method}: the {name}").strip():
                raise ConfigError(f"{self.method}: the {name} is empty")
        for name in spec.list_fields():  # a lone string, None or a blank item is refused
            if kwargs.get(name) is not None:
                checked_texts(kwargs[name], f"{self.method}: {name}")
        check_arguments(self.method, {name: kwargs[name] for name in item}, spec.hints)
        problem = self.spec.problem(kwargs)
        if problem:
            raise ConfigError(problem)
        return kwargs

    def answer_item(
        self, answer: str | None, question: str | None, context: Any = None, message: Any = None
    ) -> dict[str, Any]:
        """The item that checks ``answer`` to ``question`` with this method: the answer goes where the
        method reads it (a one-answer list for FEWL), the question where it reads one; methods that
        measure the model's own uncertainty (semantic entropy, CLUE) read only the question; the
        documents the answer should rest on (``context``) go to a method that reads them (a grounded
        one, or an ensemble with a grounded member); the answer's ``message``, where it carries its
        token log-probs, to a method that reads them (token-logprob: no call)."""
        spec = self.spec
        if spec.question_field is None and spec.answer_field is None:
            raise ConfigError(f"{self.method} scores an in-context learning query, not an answer to a question")
        item: dict[str, Any] = {}
        if spec.answer_field is not None:
            if answer is None:
                raise ConfigError(f"{self.method} needs the answer to check")
            item[spec.answer_field] = [answer] if spec.takes_list(spec.answer_field) else answer
        if question is not None and spec.question_field is not None:
            item[spec.question_field] = question
        if context is not None and spec.context_field is not None:
            item[spec.context_field] = context
        if spec.logprobs_field is not None and isinstance(message, BaseMessage) and message_logprobs(message):
            item[spec.logprobs_field] = message
        return item

    def detect(self, **item: Any) -> DetectionResult:
        """Run the method on one item (the same keyword arguments as the method's own ``detect``); what
        its result's ``meta.warnings`` say is also given as a ``HalluscopeWarning``."""
        return self._warned(self._detect(item))

    def _detect(self, item: Mapping[str, Any], budget: CallBudget | None = None) -> DetectionResult:
        return self._calibrated(self.spec.detect(**self._budgeted(item, budget)))

    def _budgeted(self, item: Mapping[str, Any], budget: CallBudget | None) -> dict[str, Any]:
        """One run's arguments with its call budget: a batch's shared one, one the caller passed (an
        item's or an option's ``budget``), else its own of the detector's ``max_calls``."""
        kwargs = self.arguments(item)
        if budget is not None:
            kwargs["budget"] = budget
        elif kwargs.get("budget") is None:
            kwargs["budget"] = CallBudget(self.max_calls)
        return kwargs

    # -- as a LangChain Runnable

    def get_name(self, suffix: str | None = None, *, name: str | None = None) -> str:
        """A trace's root run is named after the method (or the config's run_name)."""
        name = name or self.method
        return f"{name}{suffix}" if suffix else name

    @property
    def InputType(self) -> Any:  # noqa: N802 (LangChain's name)
        return DetectorInput

    @property
    def OutputType(self) -> type[DetectionResult]:  # noqa: N802 (LangChain's name)
        return DetectionResult

    def get_input_schema(self, config: RunnableConfig | None = None) -> type[BaseModel]:
        """The method's inputs, as the fields of an item (what a tool call, Studio or a chain fills)."""
        inputs = [f for f in self.spec.fields() if f.name in self.spec.input_names]
        fields: dict[str, Any] = {f.name: (f.hint | None, Field(None, description=f.help)) for f in inputs}
        title = "".join(part.capitalize() for part in self.method.replace("+", "-").split("-")) + "Input"
        return create_model(title, **fields)

    def invoke(self, input: DetectorInput, config: RunnableConfig | None = None, **kwargs: Any) -> DetectionResult:  # noqa: A002
        """``detect`` on one item: a dict of the method's arguments, or the text to check (a string or
        a chat message: the answer for a method that checks one, else the question)."""
        budget = _batch_budget(config)
        return self._call_with_config(
            lambda value: self._warned(self._detect(self.item(value), budget)),
            input,
            _item_config(config),
            run_type="chain",
        )

    async def ainvoke(
        self,
        input: DetectorInput,  # noqa: A002
        config: RunnableConfig | None = None,
        **kwargs: Any,
    ) -> DetectionResult:
        """``adetect`` on one item, under the config's callbacks, tags and run name."""
        budget = _batch_budget(config)
        return await self._acall_with_config(
            lambda value: self._adetect(self.item(value), budget), input, _item_config(config), run_type="chain"
        )

    def batch(
        self,
        inputs: list[DetectorInput],
        config: RunnableConfig | list[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[DetectionResult]:
        """``invoke`` on every input, the detector's ``max_calls`` covering the whole batch (as in
        ``detect_many``): five items of two calls under max_calls=3 once sent all ten."""
        configs = self._sharing_a_budget(config, len(inputs))
        return super().batch(inputs, configs, return_exceptions=return_exceptions, **kwargs)

    async def abatch(
        self,
        inputs: list[DetectorInput],
        config: RunnableConfig | list[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[DetectionResult]:
        """``batch`` on the event loop, under one budget alike."""
        configs = self._sharing_a_budget(config, len(inputs))
        return await super().abatch(inputs, configs, return_exceptions=return_exceptions, **kwargs)

    def _sharing_a_budget(self, config: RunnableConfig | list[RunnableConfig] | None, n: int) -> list[RunnableConfig]:
        """Each input's config, all carrying one budget of the batch (its configurable ``budget``)."""
        budget = CallBudget(self.max_calls, scope="batch")
        return [
            patch_config(c, configurable={**(c.get("configurable") or {}), BUDGET_KEY: budget})
            for c in get_config_list(config, n)
        ]

    def item(self, value: DetectorInput) -> dict[str, Any]:
        """The keyword arguments a Runnable input stands for."""
        if isinstance(value, Mapping):
            return dict(value)
        if isinstance(value, BaseMessage):
            value = str(value.text)
        if not isinstance(value, str):
            raise ConfigError(
                f"{self.method} takes a dict of its arguments or the text to check, got {type(value).__name__}"
            )
        if self.spec.answer_field is None and self.spec.question_field is not None:
            return {self.spec.question_field: value}
        return self.answer_item(value, None)

    def _calibrated(self, result: DetectionResult) -> DetectionResult:
        return result if self.calibration is None else self.calibration.apply(result, self.force_calibration)

    def _scale_options(self) -> dict[str, Any]:
        """The options given that a run records as they are (those with a plain default: ``n``,
        ``scoring``, ``theta`` ...); a judge is resolved at run time, and compared on the result."""
        plain = {
            f.name for f in dataclasses.fields(self.spec.options) if isinstance(f.default, str | int | float | bool)
        }
        return {name: value for name, value in self.options.items() if name in plain}

    def _warned(self, result: DetectionResult) -> DetectionResult:
        for note in result.meta.warnings:
            warnings.warn(note, HalluscopeWarning, stacklevel=3)
        return result

    async def adetect(self, **item: Any) -> DetectionResult:
        """``detect`` on the event loop: the method's model calls await the provider's async client
        (a local model's work, PHR's forward passes and a local NLI judge, runs on a thread)."""
        return await self._adetect(item)

    async def _adetect(self, item: Mapping[str, Any], budget: CallBudget | None = None) -> DetectionResult:
        return self._warned(self._calibrated(await self.spec.adetect(**self._budgeted(item, budget))))

    def detect_many(
        self,
        items: Iterable[Mapping[str, Any]],
        concurrency: int = 4,
        progress: bool = True,
        *,
        executor: str = "thread",
        address: str | None = None,
        workers: int | None = None,
    ) -> list[DetectionResult]:
        """Every item, results in input order. An item that fails (bad input, a provider error, an
        unreadable answer) comes back as a result whose ``error`` says why, and the others go on; calls
        already answered stay in the cache.

        ``executor="thread"``: ``concurrency`` items at a time in this process. ``executor="ray"``: the
        items spread over ``workers`` Ray actors (default: the cluster's CPUs), ``concurrency`` at a time
        in each; ``address`` is an existing cluster ('auto', 'ray://host:port'), None starts a local one.
        The detector travels to the workers as settings, so its models must be spec strings."""
        if isinstance(items, str | bytes | Mapping) or not isinstance(items, Iterable):
            raise ConfigError(
                f"detect_many takes a list of items (dicts of {self.method} arguments), got {type(items).__name__}"
            )
        batch = list(items)
        check_value("detect_many", "concurrency", concurrency, int)
        if concurrency < 1:
            raise ConfigError(f"concurrency must be at least 1, got {concurrency}")
        if executor not in EXECUTORS:
            raise ConfigError(f"executor must be one of {', '.join(EXECUTORS)}, got {executor!r}")
        results: list[DetectionResult | None] = [None] * len(batch)
        bar = tqdm(total=len(batch), desc=f"{self.method}", unit="item", disable=not progress)

        def done(index: int, result: DetectionResult) -> None:
            results[index] = result
            bar.update(1)

        with bar:
            if executor == "ray":
                self._on_ray(batch, done, concurrency, address, workers)
            else:
                budget = CallBudget(self.max_calls, scope="batch")
                with ContextThreadPoolExecutor(max_workers=concurrency) as pool:
                    list(pool.map(lambda i: done(i, self.scored(batch[i], budget)), range(len(batch))))
        finished = [r for r in results if r is not None]
        if len(finished) != len(batch):  # every item is scored or recorded as failed: none may be lost
            raise RuntimeError(f"detect_many lost {len(batch) - len(finished)} of {len(batch)} items")
        if self.calibration is not None:  # one warning for the batch, not one per item
            forced = dict.fromkeys(note for r in finished for note in r.meta.warnings if note.endswith(FORCED))
            outside = self.calibration.outside_note(u for r in finished for u in r.units)
            for note in [*forced, *([outside] if outside else [])]:
                warnings.warn(note, HalluscopeWarning, stacklevel=2)
        return finished

    def scored(self, item: Mapping[str, Any], budget: CallBudget | None = None) -> DetectionResult:
        """``detect(**item)`` (under ``budget``, a batch's), with a bad input or a provider that gave up
        recorded on the result."""
        started = time.monotonic()
        try:
            return self._detect(item, budget)
        except HalluscopeError as exc:
            return self._failed(exc, time.monotonic() - started)

    async def ascored(self, item: Mapping[str, Any]) -> DetectionResult:
        """``scored`` on the event loop."""
        started = time.monotonic()
        try:
            return await self._adetect(item)
        except HalluscopeError as exc:
            return self._failed(exc, time.monotonic() - started)

    def _failed(self, exc: Exception, seconds: float) -> DetectionResult:
        meta = RunMeta(method=self.method, seconds=seconds)
        return DetectionResult(
            method=self.method, units=[], meta=meta, error=redact_credentials(f"{type(exc).__name__}: {exc}")
        )

    def _on_ray(
        self,
        batch: list[Mapping[str, Any]],
        done: Callable[[int, Any], None],
        concurrency: int,
        address: str | None,
        workers: int | None,
    ) -> None:
        from halluscope import scale

        try:  # before any cluster starts
            scale.ray_module().cloudpickle.dumps(self)
        except Exception as exc:  # a client, a loaded model or a lock among the options
            raise ConfigError(
                f"the ray executor sends the {self.method} detector to its workers, and one of its options "
                f"cannot travel ({type(exc).__name__}: {exc}); give models and judges as spec strings"
            ) from exc

        def arrived(index: int, value: DetectionResult | scale.WorkerLost) -> None:
            done(index, self._failed(value, 0.0) if isinstance(value, scale.WorkerLost) else value)

        budget = scale.budget_actor() if self.max_calls is not None else None
        scale.ray_map(
            _DetectJob(self, budget),
            batch,
            arrived,
            workers=workers,
            per_worker=concurrency,
            cpus_per_worker=scale.cpus_for(self.options.get(self.spec.model_field)),
            request_timeout=float(getattr(self.options.get("gateway"), "timeout", DEFAULT_TIMEOUT)),
            address=address,
        )

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return (Detector, (self.method, dict(self.options), self.calibration, self.max_calls, self.force_calibration))


EXECUTORS = ("thread", "ray")
BUDGET_KEY = "budget"  # a batch's shared CallBudget, in each input's configurable


def _batch_budget(config: RunnableConfig | None) -> CallBudget | None:
    """The budget a batch shares across its inputs (``Detector.batch``), if this run is one of them."""
    return ((config or {}).get("configurable") or {}).get(BUDGET_KEY)


def _item_config(config: RunnableConfig | None) -> RunnableConfig | None:
    """An item's config without ``max_concurrency``: that bounds the items a batch runs at once, and
    inherited by the method's graph it would bound its fan-out too (one branch at a time never ends: the
    graph's streaming waiter holds the one worker)."""
    if not config or "max_concurrency" not in config:
        return config
    return RunnableConfig(**{k: v for k, v in config.items() if k != "max_concurrency"})  # type: ignore[typeddict-item]


@dataclass(frozen=True)
class _DetectJob:
    """A Ray worker's share of detect_many: the detector, scored item by item, every run's calls counted
    on the batch's one budget actor."""

    detector: Detector
    budget: Any = None  # the batch's BatchBudget actor (scale.budget_actor); None: no limit

    def build(self) -> Callable[[Mapping[str, Any]], DetectionResult]:
        if self.budget is None:
            return self.detector.scored
        shared = _ClusterBudget(self.detector.max_calls, self.budget)

        return functools.partial(self.detector.scored, budget=shared)


class _ClusterBudget(CallBudget):
    """A batch's budget whose count lives in a Ray actor: every worker's runs plan against one total."""

    def __init__(self, limit: int | None, actor: Any) -> None:
        super().__init__(limit, scope="batch")
        self.actor = actor

    def plan(self, calls: int, retry: bool = False) -> None:
        from halluscope import scale

        self.check(*scale.ray_module().get(self.actor.plan.remote(calls, retry)))


def loaded(
    calibration: str | Path | Calibration | None, prior: float | None
) -> tuple[Calibration | None, Calibration | None]:
    """A calibration loaded once, as fitted and with its probabilities corrected to ``prior`` (the same
    where none is given); a prior with no calibration is refused."""
    if calibration is not None and not isinstance(calibration, Calibration):
        calibration = Calibration.load(calibration)
    if prior is not None and calibration is None:
        raise ConfigError("prior corrects a calibration's probabilities: give a calibration too")
    return calibration, (
        calibration.with_prior(prior) if calibration is not None and prior is not None else calibration
    )


def deployed(calibration: Calibration) -> tuple[str, dict[str, Any]]:
    """What a calibration runs, as it was fitted: its one method with the options it was fitted with (a
    preset's among them, top_k, n ...), or the ensemble of its methods (which runs each member with the
    options the calibration records for it)."""
    if len(calibration.methods) > 1:
        return "ensemble", {}
    member = calibration.methods[0]
    name, own = registry.configured(member)
    spec = registry.get(name)
    fitted = calibration.settings.get(member, {})
    kept = {k: v for k, v in fitted.items() if k in spec.option_names and k != spec.model_field}
    return spec.name, kept | own  # its own model ('grounded[model=nli:DIR]') runs it, not the calibration's


def detector(
    method: str,
    model: Any = None,
    calibration: str | Path | Calibration | None = None,
    *,
    max_calls: int | None = MAX_CALLS,
    yes: bool = False,
    force_calibration: bool = False,
    prior: float | None = None,
    **options: Any,
) -> Detector:
    """A detector for ``method`` (e.g. 'fibe', 'semantic-entropy', 'fewl') on ``model`` (a model spec
    such as 'local:qwen2.5-coder-1.5b' or 'openai:gpt-4o-mini', or a chat model); options are the
    method's own ``detect`` keywords (``n``, ``variant``, ``judge``, ``gateway`` ...). ``calibration``:
    a file from `halluscope calibrate` (or a Calibration) fitted for this method and model; a run with
    other settings than it was fitted with (``n``, ``scoring``, the judge ...) is refused unless
    ``force_calibration=True``, which warns instead. ``prior``: the share of hallucinated units where you
    use it, to which the calibration's probabilities are corrected from the base rate it was fitted at.
    ``max_calls``: a run that plans more model calls is refused before its first (default 10,000);
    ``yes=True`` lifts the limit."""
    check_value("detector", "calibration", calibration, str | Path | Calibration | None)
    check_value("detector", "yes", yes, bool)
    fitted, corrected = loaded(calibration, prior)
    runs, settings = deployed(fitted) if fitted is not None else (None, {})
    return bound(method, model, corrected, runs, settings, None if yes else max_calls, force_calibration, options)


def bound(
    method: str,
    model: Any,
    calibration: Calibration | None,
    fitted_for: str | None,
    fitted: Mapping[str, Any],
    max_calls: int | None,
    force_calibration: bool,
    options: dict[str, Any],
) -> Detector:
    """The detector of a deployment resolved once (``detector``, ``check_answer.deployable``): its model
    and options bound, a calibration (its prior applied) run with the options it was fitted with where
    none is given (``fitted``, for the method ``fitted_for``), the ensemble's stacking handed to it."""
    spec = registry.get(method)
    check_value("detector", "force_calibration", force_calibration, bool)
    if model is not None:
        options[spec.model_field] = [model] if spec.takes_list(spec.model_field) else model
    if fitted_for == spec.name:  # run as it was fitted: its options where none is given
        options = {**fitted, **options}
    if calibration is not None and "calibration" in spec.option_names:  # the ensemble's own stacking
        options["calibration"], calibration = calibration, None
    return Detector(method, options, calibration, max_calls, force_calibration)
