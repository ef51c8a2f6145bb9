"""Python values checked against a signature's type hints before a run starts: ``n="5"``, ``n=2.5``,
``n=True`` or ``gateway="x"`` is one ``ConfigError`` naming the parameter, the type it got and what it
takes, instead of a TypeError deep inside a graph (or a run that silently reads True as 1)."""

from __future__ import annotations

import collections.abc
import inspect
import math
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Union, get_args, get_origin

import yaml

from halluscope.errors import ConfigError


def check_arguments(owner: str, values: Mapping[str, Any], hints: Mapping[str, Any]) -> None:
    """Each of ``values`` against its type hint; the first mismatch is a ConfigError."""
    for name, value in values.items():
        if name in hints:
            check_value(owner, name, value, hints[name])


def check_value(owner: str, name: str, value: Any, hint: Any) -> None:
    """``value`` must be of type ``hint``: else one error, e.g. "selfcheck-prompt: n takes a whole
    number, got str '5'"."""
    if not _matches(value, hint):
        shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
        raise ConfigError(f"{owner}: {name} takes {describe(hint)}, got {type(value).__name__} {shown}")


def _matches(value: Any, hint: Any) -> bool:
    if hint is Any or hint is inspect.Parameter.empty or isinstance(hint, typing.TypeVar):
        return True
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        return any(_matches(value, member) for member in get_args(hint))
    if hint is None or hint is type(None):
        return value is None
    if origin is Literal:
        return value in get_args(hint)
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:  # a whole number is a number; NaN is none
        return isinstance(value, int | float) and not isinstance(value, bool) and not math.isnan(value)
    if hint is str:
        return isinstance(value, str)
    if origin in (list, tuple, collections.abc.Sequence):
        if isinstance(value, str | bytes) or not isinstance(value, list | tuple):
            return False
        item = get_args(hint)[:1]
        return not item or item[0] is Ellipsis or all(_matches(v, item[0]) for v in value)
    if origin in (dict, collections.abc.Mapping):
        return isinstance(value, Mapping)
    if origin is collections.abc.Callable or hint is collections.abc.Callable:
        return callable(value)
    if origin is not None:
        return isinstance(value, origin) if isinstance(origin, type) else True
    if isinstance(hint, type) and not typing.is_typeddict(hint):
        return isinstance(value, hint)
    return True  # a hint this check does not read (a TypedDict, a forward reference): the method checks it


def describe(hint: Any) -> str:
    """What a hint takes, in words: 'a whole number', 'a list of texts', "one of 'discrete', 'prob'"."""
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        return " or ".join(dict.fromkeys(describe(member) for member in get_args(hint)))
    if hint is None or hint is type(None):
        return "None"
    if origin is Literal:
        return "one of " + ", ".join(repr(v) for v in get_args(hint))
    words = {bool: "True or False", int: "a whole number", float: "a number", str: "a text"}
    if hint in words:
        return words[hint]
    if origin in (list, tuple, collections.abc.Sequence):
        item = get_args(hint)[:1]
        if not item or item[0] is Ellipsis:
            return "a list"
        return "a list of texts" if item[0] is str else f"a list of ({describe(item[0])})"
    if origin in (dict, collections.abc.Mapping):
        return "a dict"
    if origin is collections.abc.Callable:
        return "a function"
    return getattr(hint, "__name__", str(hint))


def finite_number(text: str) -> float:
    """A number given as text (a flag's value): 'inf', 'nan' and words are refused, naming the value."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise ValueError(f"takes a finite number, got {text!r}")
    return value


def numbers(text: str, flag: str, kind: type[int] | type[float]) -> list[Any]:
    """A comma-separated --flag value as numbers of one kind; a bad one names the flag."""
    try:
        return [kind(part) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        what = "integers" if kind is int else "numbers"
        raise ConfigError(f"{flag} must be comma-separated {what}, got {text!r}") from exc


def key_values(pairs: Sequence[str], what: str, typed: bool = False) -> dict[str, Any]:
    """KEY=VALUE pairs of a repeated flag; ``typed`` reads each value as YAML (3 -> 3, true -> True, [1, 2]
    -> a list): a value that is not valid YAML, or carries a tag (!!python/...), is refused, never
    passed on as a string."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"{what} {pair!r} must be KEY=VALUE")
        if not typed:
            out[key] = value
            continue
        try:
            if any(isinstance(token, yaml.TagToken) for token in yaml.scan(value, Loader=yaml.SafeLoader)):
                raise ConfigError(f"{what} {key}: {value!r} carries a YAML tag; give a plain value")
            out[key] = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            problem = str(exc).splitlines()[0]
            raise ConfigError(
                f"{what} {key}: {value!r} is not valid YAML ({problem}); quote a text: {what} '{key}=\"...\"'"
            ) from exc
    return out
