"""How the command line reads a list or numbers (one convention for every flag that takes them), and a
method's fields as flags: `detect METHOD` and the benchmarks spell a method's options the way its
declaration does, never redefined."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Collection, Sequence
from typing import Any

import yaml

from halluscope.errors import ConfigError
from halluscope.runtime.contract import Flag, Method


class ListFlag(argparse.Action):
    """The one convention for a list of names, model specs or numbers: comma-separated values, and the
    flag may be repeated (``--method a,b --method c`` is [a, b, c]); a given flag replaces its default.
    Free text, paths and KEY=VALUE pairs may hold commas: those flags repeat, one value each."""

    def __init__(self, *args: Any, kind: type = str, **kwargs: Any) -> None:
        self.kind = kind
        super().__init__(*args, **kwargs)

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, flag: Any = None
    ) -> None:
        so_far = getattr(namespace, self.dest, None)
        so_far = [] if so_far is None or so_far is self.default else so_far
        try:
            parts = [self.kind(part.strip()) for part in str(values).split(",") if part.strip()]
        except ValueError:
            what = "integers" if self.kind is int else "numbers"
            parser.error(f"{flag} takes comma-separated {what}, got {values!r}")
        if not parts:
            parser.error(f"{flag} got no value")
        setattr(namespace, self.dest, [*so_far, *parts])


def numbers(text: str, flag: str, kind: type[int] | type[float]) -> list[Any]:
    """A comma-separated --flag value as numbers of one kind; a bad one names the flag."""
    try:
        return [kind(part) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        what = "integers" if kind is int else "numbers"
        raise ConfigError(f"{flag} must be comma-separated {what}, got {text!r}") from exc


def spellings(method: Method, names: Collection[str] | None = None) -> list[tuple[str, Flag, str]]:
    """The command-line spellings of the method's fields (``names``, or all): (field, flag, argparse dest)."""
    return [
        (option.name, flag, f"{option.name}.{k}")
        for option in method.fields()
        if names is None or option.name in names
        for k, flag in enumerate(option.flags)
    ]


def add_fields(p: argparse.ArgumentParser, method: Method, names: Collection[str] | None = None) -> None:
    """The method's fields (``names``, or all) as flags, each with the field's help."""
    helps = {option.name: option.help for option in method.fields()}
    for name, flag, dest in spellings(method, names):
        kwargs: dict[str, Any] = {"dest": dest, "help": flag.help or helps[name]}
        # the value's placeholder: the flag's own, else its name (--text TEXT), never the dest ('TEXT.0')
        metavar = flag.metavar or flag.flags[0].lstrip("-").replace("-", "_").upper()
        if flag.const is not None:
            kwargs |= {"action": "store_const", "const": flag.const}
        elif flag.listed:
            kwargs |= {"action": ListFlag, "kind": flag.type, "metavar": metavar}
        else:  # choices show themselves ({discrete,prob}) where no placeholder is given
            kwargs |= {"type": flag.type, "metavar": flag.metavar or (None if flag.choices else metavar)}
            kwargs["choices"] = flag.choices
            if flag.append:
                kwargs["action"] = "append"
        p.add_argument(*flag.flags, **kwargs)


def label_of(method: Method) -> Callable[[str], str]:
    """A keyword named as the command line spells it: 'text' -> '--text or --file'."""

    def label(param: str) -> str:
        flags = [flag.flags[0] for name, flag, _ in spellings(method) if name == param]
        return " or ".join(dict.fromkeys(flags)) or param

    return label


def read_fields(method: Method, args: argparse.Namespace, names: Collection[str] | None = None) -> dict[str, Any]:
    """The values the flags of ``add_fields`` gave (files read); two spellings of one field refused."""
    label = label_of(method)
    values: dict[str, Any] = {}
    for name, flag, dest in spellings(method, names):
        value = getattr(args, dest, None)
        if value is None:
            continue
        if name in values:
            raise ConfigError(f"give {label(name)}, not both")
        values[name] = flag.read(value, flag.flags[0]) if flag.read is not None else value
    return values


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
