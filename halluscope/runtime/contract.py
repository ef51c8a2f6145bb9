"""The method contract: what every method module exports (``METHOD``), declared once.

A method declares two dataclasses: its ``Inputs`` (what an item gives: the text, the question, samples
...) and its ``Options`` (how it runs: the model, ``n``, the judge ...), each field with its type, its
default, one line of help and its command-line spellings (``arg``). From them come ``detect``'s and
``adetect``'s signature, the type checks, the ``detect`` subcommand's flags, the evaluators' and
Studio's options and the docs' option table. A method's work is two functions: ``prepare`` turns the
options into what a run uses (judges and references from spec strings, the graph built), once per
detector, Studio graph or benchmark; ``run`` scores one item as steps (``backends.steps.Steps``), so the same
code runs on threads (``detect``) and on the event loop (``adetect``). Every method accepts the same
run settings (``RUN_SETTINGS``: the gateway, the call counters, the concurrency, the progress hook, the
call budget).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import inspect
import math
import sys
import types
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Union, cast, get_args, get_origin, get_type_hints

from langchain_core.documents import Document
from langchain_core.messages import BaseMessage
from langgraph.graph.state import CompiledStateGraph

from halluscope.backends.budget import CallBudget
from halluscope.backends.gateway import CallStats, Gateway, default_gateway
from halluscope.backends.steps import Step, Steps, afinish, finish
from halluscope.checks import check_value, describe
from halluscope.errors import ConfigError
from halluscope.results import DetectionResult, RunMeta
from halluscope.runtime.nodes import arun_streamed, run_streamed
from halluscope.text import checked_text, checked_texts, ends_sentence, spans_of, unicode_text

Reader = Callable[[str, str], Any]  # (the command-line value, its flag) -> the keyword's value
Refers = Literal["model", "file"]  # what a field's value names outside the request: see ``arg``


@dataclass(frozen=True)
class Flag:
    """One command-line spelling of a field: ``flags`` name it (``--samples-file``), ``read`` turns the
    flag's text into the value (a file read into ``samples``), ``append`` collects a repeated flag into
    a list (free text), ``listed`` takes names comma-separated or repeated; a flag with a ``const``
    takes no value and sets the field to it (``--strict`` sets ``mode='strict'``). ``help``: this
    spelling's own line, where it differs from the field's."""

    flags: tuple[str, ...]
    help: str | None = None
    read: Reader | None = None
    type: Any = str
    choices: tuple[str, ...] | None = None
    append: bool = False
    listed: bool = False
    const: Any = None
    metavar: str | None = None


def arg(
    default: Any = None,
    *,
    help: str,  # noqa: A002
    flags: Sequence[Flag] = (),
    shown: bool = True,
    most: int | None = None,
    refers: Refers | None = None,
) -> Any:
    """A field of a method's ``Inputs`` or ``Options``: its default, its help, its command-line
    spellings; ``shown=False`` keeps a default out of the help (a default computed at run time);
    ``most``: the largest whole number it takes (FIBE's students); ``refers``: the field names a model
    (a spec, whose provider is called with the process's keys) or a file (read from the process's disk),
    which only a server's operator may choose (``serve``)."""
    metadata = {"help": help, "flags": tuple(flags), "shown": shown, "most": most, "refers": refers}
    return field(default=default, metadata=metadata)


@dataclass(frozen=True)
class Option:
    """A field as the command line and the docs read it: its name, its help (with its default) and
    its spellings."""

    name: str
    help: str
    flags: tuple[Flag, ...]
    default: Any
    hint: Any
    required: bool = False


def options_of(declared: type) -> list[Option]:
    """The ``arg`` fields of a dataclass (a method's inputs or options, a benchmark's settings) as the
    command line and the docs read them; a field without a default is required."""
    hints = get_type_hints(declared)
    found = []
    for f in dataclasses.fields(declared):
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        default = f.default if f.default is not dataclasses.MISSING else None
        shown = f.metadata.get("shown", True) and default not in (None, (), [], {})
        line = f.metadata.get("help", "") + (f" (default {default!r})" if shown else "")
        found.append(Option(f.name, line, f.metadata.get("flags", ()), default, hints[f.name], required))
    return found


class Need:
    """One dependency a run cannot start without, declared by name (as LM-Polygraph's estimators name
    the statistics they need): any of ``names`` meets it. ``why`` says, per name, what it is for
    ('model': 'to sample answers'); the unmet sentence names each keyword through the caller's label,
    so one declaration reads right in Python (``model``) and on the command line (``--model``)."""

    __slots__ = ("names", "why")

    def __init__(self, *names: str, **why: str) -> None:
        unknown = why.keys() - set(names)
        if not names or unknown:
            raise TypeError(f"Need: give one or more names, and why only for them (not {sorted(unknown)})")
        self.names, self.why = names, types.MappingProxyType(why)

    def met(self, kwargs: Mapping[str, Any]) -> bool:
        """Whether ``kwargs`` gives any of the names (a blank text or an empty list gives nothing)."""
        return any(_given(kwargs.get(name)) for name in self.names)

    def sentence(self, label: Callable[[str], str]) -> str:
        """The alternatives as a person reads them: '--model to sample answers, or --answers-file'."""
        return ", or ".join(f"{label(name)} {self.why.get(name, '')}".rstrip() for name in self.names)

    def __repr__(self) -> str:
        return f"Need({', '.join(map(repr, self.names))})"


# What every method's detect accepts besides its inputs and options, with the same meaning everywhere.
RUN_SETTINGS: dict[str, Any] = {
    "gateway": Gateway | None,  # the process's by default: one cache, one limit per model
    "stats": CallStats | None,  # the run's counters (a benchmark passes one for all its items)
    "max_concurrency": int | None,  # the graph's fan-out at once (LangGraph's max_concurrency)
    "on_step": Callable[[str], None] | None,  # hears each node run (a progress bar)
    "budget": CallBudget | None,  # the calls the run may plan (default MAX_CALLS; a batch's shared one)
}


def python_label(param: str) -> str:
    return param


@dataclass(frozen=True)
class Prepared:
    """What ``prepare`` made of a method's options: its graph, where it runs one (Studio serves it), the
    options themselves, and whatever else its runs read (a judge, references, a calibration), in a
    subclass of its own."""

    graph: CompiledStateGraph | None = None
    options: Any = None


# What a method module names its declaration's parts, in Method's order (``Method.from_module``).
MODULE_PARTS = ("NAME", "SUMMARY", "Inputs", "Options", "prepare", "run")
BARE_WORDS = (
    3  # an answer of this many words or fewer with no sentence ending is an entity ("New Delhi"), not run-on claims
)


@dataclass(frozen=True, eq=False)
class Method:
    """A method as the rest of halluscope sees it.

    ``inputs`` / ``options``: its two declarations (dataclasses of ``arg`` fields); ``prepare`` and
    ``run``: its work (above). ``question_field``: where the user's question (the prompt an answer
    answered) goes; ``answer_field``: where the answer to check goes; ``model_field``: where
    ``detector(model=...)`` goes; ``positional``: the inputs ``detect`` also takes by position;
    ``context_field``: where the documents an answer should rest on go (a grounded method's);
    ``logprobs_field``: where the answer's own token log-probs go (a token-probability method's: the
    guard and the evaluators give it the answer's message when that carries them);
    ``needs``: what a run cannot start without, and ``check`` what else it refuses, both checked before
    any model is loaded; ``describe``: the lines a person reads for one result; ``presets``: options
    by name ('selfcheck-prompt:prob'); ``combines``: it runs other methods (no member of an ensemble);
    ``scores``: the range every score lies in, where it is bounded (a threshold outside it is refused:
    it would flag nothing or everything); ``draws_samples``: what it consumes when no samples are given,
    the regeneration (concept, question) it would draw them with from its inputs, so a host running
    several methods on one text (the ensemble) draws each set once and hands it to every member."""

    name: str
    summary: str
    inputs: type
    options: type
    prepare: Callable[[Any, RunContext], Prepared]
    run: Callable[[Any, Any, RunContext], Steps[DetectionResult]]
    question_field: str | None = "question"  # most methods check an answer to a question
    answer_field: str | None = "text"
    model_field: str = "model"
    context_field: str | None = None
    logprobs_field: str | None = None
    positional: tuple[str, ...] = ("text",)
    needs: tuple[Need, ...] = ()
    check: Callable[[Mapping[str, Any], Callable[[str], str]], str | None] | None = None
    describe: Callable[[DetectionResult], str] = field(default=lambda result: result.report())
    presets: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    combines: bool = False
    scores: tuple[float, float] | None = None
    draws_samples: Callable[[Mapping[str, Any]], tuple[str, str | None]] | None = None
    detect: Callable[..., DetectionResult] = field(init=False)
    adetect: Callable[..., Awaitable[DetectionResult]] = field(init=False)

    @classmethod
    def from_module(cls, module: str, **declared: Any) -> Method:
        """A method module's declaration, its six parts read from the module by the names every method
        module gives them (``NAME``, ``SUMMARY``, ``Inputs``, ``Options``, ``prepare``, ``run``), the rest
        as keywords: ``METHOD = Method.from_module(__name__, needs=(Need("text"),))``."""
        found = vars(sys.modules[module])
        missing = [part for part in MODULE_PARTS if part not in found]
        if missing:
            raise TypeError(f"{module}: a method module defines {', '.join(MODULE_PARTS)} (missing {missing})")
        return cls(*(found[part] for part in MODULE_PARTS), **declared)

    def __post_init__(self) -> None:
        declared = [need for need in self.needs if not isinstance(need, Need)]
        if declared:
            raise TypeError(f"{self.name}: each of needs is a Need('text', 'sentences', ...), got {declared[0]!r}")
        object.__setattr__(self, "detect", self._entry(self._detect, asynchronous=False))
        object.__setattr__(self, "adetect", self._entry(self._adetect, asynchronous=True))

    # -- the declaration, read

    @functools.cached_property
    def hints(self) -> dict[str, Any]:
        """Every keyword's type: the inputs', the options' and the run settings'."""
        return {**get_type_hints(self.inputs), **get_type_hints(self.options), **RUN_SETTINGS}

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(self.inputs))

    @property
    def option_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(self.options))

    def needs_input(self, name: str) -> bool:
        """Whether some need names ``name`` (a run may still meet that need another way)."""
        return any(name in need.names for need in self.needs)

    def fields(self) -> list[Option]:
        """The inputs, then the options, as the command line and the docs read them."""
        return [*options_of(self.inputs), *options_of(self.options)]

    @functools.cached_property
    def refers(self) -> dict[str, Refers]:
        """The options that name a model or a file (``arg``'s ``refers``): what a server's operator alone chooses."""
        return {f.name: f.metadata["refers"] for f in dataclasses.fields(self.options) if f.metadata.get("refers")}

    def most(self, name: str) -> int | None:
        """The largest value a whole-number field takes, where it has one."""
        found = {
            f.name: f.metadata.get("most")
            for f in (*dataclasses.fields(self.inputs), *dataclasses.fields(self.options))
        }
        return found.get(name)

    def text_fields(self) -> tuple[str, ...]:
        """The inputs that are one text (a blank one is refused before any call)."""
        return tuple(n for n in self.input_names if _is_text(self.hints[n]))

    def list_fields(self) -> tuple[str, ...]:
        """The inputs that are lists of texts (a lone string, None or a blank item is refused)."""
        return tuple(n for n in self.input_names if _is_text_list(self.hints[n]))

    def takes_list(self, name: str) -> bool:
        """Whether a keyword takes a list (of texts, of models): one answer or model goes in as [it]."""
        return any(get_origin(member) in (list, tuple, Sequence) for member in _members(self.hints[name]))

    @property
    def signature(self) -> inspect.Signature:
        """``detect``'s: the positional inputs, then every other input, option and run setting by keyword."""
        defaults = {f.name: f.default for f in (*dataclasses.fields(self.inputs), *dataclasses.fields(self.options))}
        params = [
            inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=defaults[name], annotation=hint)
            for name, hint in ((n, self.hints[n]) for n in self.positional)
        ]
        params += [
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=defaults.get(name), annotation=hint)
            for name, hint in self.hints.items()
            if name not in self.positional
        ]
        return inspect.Signature(params, return_annotation=DetectionResult)

    def problem(self, kwargs: Mapping[str, Any], label: Callable[[str], str] = python_label) -> str | None:
        """What keeps ``kwargs`` from running, as a sentence naming the keywords through ``label``
        (the Python name, or the command-line flag): the first unmet need, then the method's own
        ``check``; None when it can run."""
        for need in self.needs:
            if not need.met(kwargs):
                return f"{self.name} needs {need.sentence(label)}"
        return self.check(kwargs, label) if self.check is not None else None

    def threshold_problem(self, threshold: float | None, calibrated: bool) -> str | None:
        """Why a threshold cannot mean what its user wants (None when it can): a probability threshold
        outside [0, 1], or a raw one outside the range this method's scores lie in."""
        if threshold is None:
            return None
        low, high = (0.0, 1.0) if calibrated else (self.scores or (-math.inf, math.inf))
        if low <= threshold <= high:
            return None
        what = "a probability, in [0, 1]" if calibrated else f"{self.name}'s scores lie in [{low:g}, {high:g}]"
        return f"threshold {threshold:g} flags {'nothing' if threshold > high else 'everything'}: {what}"

    # -- running it

    def bind(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple[Any, Any, RunContext]:
        """``detect``'s arguments as the method's inputs, options and run context; a wrong name or type
        is a ConfigError naming it."""
        try:
            given = dict(self.signature.bind(*args, **kwargs).arguments)
        except TypeError as exc:
            raise ConfigError(f"{self.name}: {exc}") from exc
        given = {name: self.plain(name, value) for name, value in given.items()}
        self.validate(given)
        inputs = self.inputs(**{k: v for k, v in given.items() if k in self.input_names})
        options = self.options(**{k: v for k, v in given.items() if k in self.option_names})
        settings = {k: v for k, v in given.items() if k in RUN_SETTINGS}
        return inputs, options, start(**settings)

    def plain(self, name: str, value: Any) -> Any:
        """A text input as a plain str: a chat message or a Document is its text, and a str subclass (LangChain's
        ``AIMessage.text`` is one) a str, which a tokenizer written in C insists on; lists alike. The documents
        of a grounded method stay Documents, whose metadata its evidence names."""
        if name == self.context_field:
            if isinstance(value, list | tuple):
                return [v if isinstance(v, Document) else _plain_text(v) for v in value]
            return value if isinstance(value, Document) else _plain_text(value)
        if name in self.list_fields() and isinstance(value, list | tuple):
            return [_plain_text(v) for v in value]
        if name in self.text_fields():
            return _plain_text(value)
        return value

    def validate(self, given: Mapping[str, Any], label: Callable[[str], str] = python_label) -> None:
        """Everything a run checks before any model loads: a user's texts as texts, every other value
        against its type and range, then the needs (named through ``label``); one ConfigError."""
        self.validate_fields(given)
        problem = self.problem(given, label)
        if problem:
            raise ConfigError(problem)

    def validate_fields(self, given: Mapping[str, Any]) -> None:
        """Each value given, on its own: texts as texts, documents as documents, every other value against
        its type and range (a served graph's input is checked so, whatever keys its graph takes)."""
        texts, lists = self.text_fields(), self.list_fields()
        for name, value in given.items():
            if value is None or name not in self.hints:
                continue
            if name == self.context_field:
                checked_documents(value, name)
            elif name in texts and isinstance(value, str | bytes | bytearray | int | float):
                checked_text(value, name)
            elif name in lists:
                checked_texts(value, name)
            else:
                check_value(self.name, name, value, self.hints[name])
            most = self.most(name)
            if most is not None and isinstance(value, int) and not 1 <= value <= most:
                raise ConfigError(f"{self.name}: {name} takes 1 to {most}, got {value}")

    def scorer(self, options: Any, ctx: RunContext) -> Callable[[Any], DetectionResult]:
        """Prepared once (a benchmark's options and run), then one item (its ``Inputs``) per call: what a
        benchmark scores its items with."""
        prepared = self.prepare(options, ctx)

        def score(inputs: Any) -> DetectionResult:
            item = dataclasses.replace(ctx, stats=ctx.stats.part(CallBudget(ctx.budget.limit)))  # its own budget
            return self.noted(finish(self.run(prepared, inputs, item), item.stats), inputs)

        return score

    def _detect(self, *args: Any, **kwargs: Any) -> DetectionResult:
        inputs, options, ctx = self.bind(args, kwargs)
        return self.noted(finish(self.run(self.prepare(options, ctx), inputs, ctx), ctx.stats), inputs)

    async def _adetect(self, *args: Any, **kwargs: Any) -> DetectionResult:
        inputs, options, ctx = self.bind(args, kwargs)
        prepared = await asyncio.to_thread(self.prepare, options, ctx)  # loads models, opens files
        return self.noted(await afinish(self.run(prepared, inputs, ctx), ctx.stats), inputs)

    def noted(self, result: DetectionResult, inputs: Any) -> DetectionResult:
        """What was checked, where a reader could mistake it: each unit's spans in the answer's characters
        (``text.spans_of``), and a text of several words with no sentence ending is one unit, checked whole
        (a verdict on "Einstein born Ulm 1879" is on all of it; a bare entity, "New Delhi", is said nothing of)."""
        text = getattr(inputs, self.answer_field, None) if self.answer_field else None
        given = getattr(inputs, "sentences", None)
        if text is None and isinstance(given, list) and given:  # an answer given as its sentences alone
            text = " ".join(given)
        if isinstance(text, str) and result.units:
            for unit, spans in zip(result.units, spans_of([u.text for u in result.units], text), strict=True):
                unit.spans = spans
        split_here = given is None
        bare = isinstance(text, str) and len(text.split()) <= BARE_WORDS  # "Delhi": a short answer is one unit
        if isinstance(text, str) and split_here and len(result.units) == 1 and not ends_sentence(text) and not bare:
            result.meta.warnings.append(
                f"the {self.answer_field} has no sentence ending (. ! ?): it was checked whole, as one unit"
            )
        return result

    def _entry(self, body: Callable[..., Any], asynchronous: bool) -> Callable[..., Any]:
        """``detect`` / ``adetect`` as functions of their own, with the declared signature."""
        if asynchronous:

            async def entry(*args: Any, **kwargs: Any) -> DetectionResult:
                return await body(*args, **kwargs)

        else:

            def entry(*args: Any, **kwargs: Any) -> DetectionResult:
                return body(*args, **kwargs)

        entry.__signature__ = self.signature  # type: ignore[attr-defined]
        entry.__name__ = "adetect" if asynchronous else "detect"
        entry.__qualname__ = f"{self.name}.{entry.__name__}"
        entry.__doc__ = f"{self.summary}{' (on the event loop)' if asynchronous else ''}."
        return entry


# a grounded method's context: a text, texts, or LangChain Documents (their metadata named in the evidence)
Documents = str | Document | list[str | Document]


def checked_documents(value: Any, name: str = "context") -> list[tuple[str, dict[str, Any]]]:
    """A context as (text, metadata) per document: a text or a Document is one document, a list holds
    several; anything else, an empty list or a blank document is a ConfigError naming it."""
    given = list(value) if isinstance(value, list | tuple) else [value]
    if not given:
        raise ConfigError(f"{name} is empty: give the documents the answer should rest on")
    out = []
    for i, item in enumerate(given):
        where = f"{name}[{i}]" if isinstance(value, list | tuple) else name
        if isinstance(item, Document):
            text, metadata = item.page_content, dict(item.metadata)
        elif isinstance(item, str):
            text, metadata = item, {}
        else:
            raise ConfigError(f"{where} must be a text or a LangChain Document, got {type(item).__name__}")
        if not text.strip():
            raise ConfigError(f"{where} must be a non-empty text")
        out.append((unicode_text(text, where), metadata))
    return out


def _plain_text(value: Any) -> Any:
    if isinstance(value, BaseMessage):
        value = value.text
    elif isinstance(value, Document):  # a retriever's result: its text
        value = value.page_content
    return str(value) if isinstance(value, str) and type(value) is not str else value


def _given(value: Any) -> bool:
    if value is None:
        return False
    if isinstance(value, str):
        return bool(value.strip())
    if isinstance(value, Sequence):
        return len(value) > 0
    return True


def _members(hint: Any) -> tuple[Any, ...]:
    return get_args(hint) if get_origin(hint) in (Union, types.UnionType) else (hint,)


def _is_text(hint: Any) -> bool:
    return str in _members(hint)


def _is_text_list(hint: Any) -> bool:
    for member in _members(hint):
        if get_origin(member) in (list, tuple, Sequence) and get_args(member)[:1] == (str,):
            return True
    return False


@dataclass
class RunContext:
    """The setup every run shares: the gateway (the process's by default), the run's call counters with
    the calls it may plan on them (``stats.budget``), its concurrency and the progress hook; ``stream``
    runs a built graph."""

    gateway: Gateway
    stats: CallStats
    max_concurrency: int | None = None
    on_step: Callable[[str], None] | None = None

    @property
    def budget(self) -> CallBudget:
        return cast(CallBudget, self.stats.budget)

    def stream(self, graph: CompiledStateGraph, state: Mapping[str, Any]) -> dict[str, Any]:
        return run_streamed(graph, state, self.stats, self.max_concurrency, self.on_step)

    async def astream(self, graph: CompiledStateGraph, state: Mapping[str, Any]) -> dict[str, Any]:
        return await arun_streamed(graph, state, self.stats, self.max_concurrency, self.on_step)

    def plan(self, calls: int) -> None:
        """Calls a method that runs no graph now knows it will make (``runtime.nodes.plan_calls``'s rule)."""
        self.stats.plan(calls)

    def meta(self, method: str, events: Mapping[str, int] | None = None, **params: Any) -> RunMeta:
        return self.stats.meta(method, dict(events or {}), **params)


@dataclass(frozen=True)
class Streamed(Step):
    """A method's graph run on one input state: ``ctx.stream`` on threads, ``ctx.astream`` on the loop."""

    ctx: RunContext
    graph: CompiledStateGraph
    state: Mapping[str, Any]

    def run(self, stats: CallStats | None) -> dict[str, Any]:
        return self.ctx.stream(self.graph, self.state)

    async def arun(self, stats: CallStats | None) -> dict[str, Any]:
        return await self.ctx.astream(self.graph, self.state)


@dataclass(frozen=True)
class Together(Step):
    """Runs of other methods at once (an ensemble's members): each ``detect`` in turn on threads, every
    ``adetect`` together on the event loop."""

    runs: tuple[tuple[Method, Mapping[str, Any]], ...]

    def run(self, stats: CallStats | None) -> list[DetectionResult]:
        return [method.detect(**kwargs) for method, kwargs in self.runs]

    async def arun(self, stats: CallStats | None) -> list[DetectionResult]:
        return list(await asyncio.gather(*(method.adetect(**kwargs) for method, kwargs in self.runs)))


def start(
    gateway: Gateway | None = None,
    stats: CallStats | None = None,
    max_concurrency: int | None = None,
    on_step: Callable[[str], None] | None = None,
    budget: CallBudget | None = None,
) -> RunContext:
    """A run on ``gateway`` (default: the process's) counting into ``stats`` (default: its own), planning
    at most the calls ``budget`` allows (default: its own of MAX_CALLS; a batch passes its shared one).
    The run counts on a part of ``stats`` that carries the budget down to the gateway."""
    run_stats = (stats or CallStats()).part(budget if budget is not None else CallBudget())
    return RunContext(gateway or default_gateway(), run_stats, max_concurrency, on_step)


def option_table(method: Method) -> str:
    """The method's inputs and options as a markdown table (docs/methods.md is made of these)."""
    rows = ["| keyword | flags | type | what it is |", "| --- | --- | --- | --- |"]
    for option in method.fields():
        flags = ", ".join(f"`{f}`" for flag in option.flags for f in flag.flags) or "`--opt`"
        rows.append(f"| `{option.name}` | {flags} | {describe(option.hint)} | {option.help} |")
    return "\n".join(rows)
