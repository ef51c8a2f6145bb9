"""How the command line reads a list (one convention for every flag that takes one), and declared
fields as flags: `detect METHOD` and the benchmarks spell a method's options the way its declaration
does, and a benchmark's settings the way its ``Settings`` dataclass declares them, never redefined.
The only place argparse meets a declaration."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from halluscope.checks import finite_number, numbers
from halluscope.errors import ConfigError
from halluscope.runtime.contract import Flag, Method, Option, options_of

OUTSIDE_BRACKETS = re.compile(r",(?![^\[]*\])")  # a comma not inside [...]


class ListFlag(argparse.Action):
    """The one convention for a list of names, model specs or numbers: comma-separated values, and the
    flag may be repeated (``--method a,b --method c`` is [a, b, c]); a given flag replaces its default.
    A comma inside brackets is a method's own ('grounded[model=nli:DIR;top_k=1],direct-question' is two).
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
            parts = [self.kind(part.strip()) for part in OUTSIDE_BRACKETS.split(str(values)) if part.strip()]
        except ValueError:
            what = "integers" if self.kind is int else "numbers"
            parser.error(f"{flag} takes comma-separated {what}, got {values!r}")
        if not parts:
            parser.error(f"{flag} got no value")
        setattr(namespace, self.dest, [*so_far, *parts])


Declared = Method | type  # a method, or a dataclass of ``arg`` fields (a benchmark's settings)


def _options(declared: Declared) -> list[Option]:
    return declared.fields() if isinstance(declared, Method) else options_of(declared)


def spellings(declared: Declared, names: Collection[str] | None = None) -> list[tuple[str, Flag, str]]:
    """The command-line spellings of the fields (``names``, or all): (field, flag, argparse dest)."""
    return [
        (option.name, flag, f"{option.name}.{k}")
        for option in _options(declared)
        if names is None or option.name in names
        for k, flag in enumerate(option.flags)
    ]


def _typed(kind: Any) -> Any:
    """A flag's type as argparse calls it: a ValueError of our own readers becomes the flag's message
    ('--theta-h: takes a finite number, got 'inf''), the builtins keep argparse's own."""
    if kind in (str, int, float):
        return kind

    def read(text: str) -> Any:
        try:
            return kind(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from exc

    read.__name__ = getattr(kind, "__name__", "value")
    return read


def add_fields(p: argparse.ArgumentParser, declared: Declared, names: Collection[str] | None = None) -> None:
    """The fields (``names``, or all) as flags, each with the field's help; a field without a default
    and one spelling is a required flag."""
    options = {option.name: option for option in _options(declared)}
    for name, flag, dest in spellings(declared, names):
        option = options[name]
        kwargs: dict[str, Any] = {"dest": dest, "help": flag.help or option.help}
        if option.required and len(option.flags) == 1:
            kwargs["required"] = True
        # the value's placeholder: the flag's own, else its name (--text TEXT), never the dest ('TEXT.0')
        metavar = flag.metavar or flag.flags[0].lstrip("-").replace("-", "_").upper()
        if flag.const is not None:
            kwargs |= {"action": "store_const", "const": flag.const}
        elif flag.listed:
            kwargs |= {"action": ListFlag, "kind": _typed(flag.type), "metavar": metavar}
        else:  # choices show themselves ({discrete,prob}) where no placeholder is given
            kwargs |= {"type": _typed(flag.type), "metavar": flag.metavar or (None if flag.choices else metavar)}
            kwargs["choices"] = flag.choices
            if flag.append:
                kwargs["action"] = "append"
        p.add_argument(*flag.flags, **kwargs)


def label_of(declared: Declared) -> Callable[[str], str]:
    """A keyword named as the command line spells it: 'text' -> '--text or --file'."""

    def label(param: str) -> str:
        flags = [flag.flags[0] for name, flag, _ in spellings(declared) if name == param]
        return " or ".join(dict.fromkeys(flags)) or param

    return label


def read_fields(declared: Declared, args: argparse.Namespace, names: Collection[str] | None = None) -> dict[str, Any]:
    """The values the flags of ``add_fields`` gave (files read); two spellings of one field refused."""
    label = label_of(declared)
    values: dict[str, Any] = {}
    for name, flag, dest in spellings(declared, names):
        value = getattr(args, dest, None)
        if value is None:
            continue
        if name in values:
            raise ConfigError(f"give {label(name)}, not both")
        values[name] = flag.read(value, flag.flags[0]) if flag.read is not None else value
    return values


finite = _typed(finite_number)  # a finite number, as a flag's type: 'inf' is refused naming the value


def passage_range(text: str, flag: str) -> range:
    """'0-119' as passages 0 to 119 inclusive."""
    first, sep, last = text.partition("-")
    bounds = numbers(f"{first},{last}" if sep else first, flag, int)
    if len(bounds) == 1:
        bounds *= 2
    if len(bounds) != 2 or bounds[0] < 0 or bounds[1] < bounds[0]:
        raise ConfigError(f"{flag} must be a passage range FIRST-LAST (e.g. 0-119), got {text!r}")
    return range(bounds[0], bounds[1] + 1)


def flags_of(parser: argparse.ArgumentParser, argv: Sequence[str]) -> dict[str, str]:
    """Each setting's flag (by its dest, a declared field's '.N' index dropped: its first long option
    string) in the parser of the command ``argv`` runs, its sub-commands' parsers followed as argv names
    them."""
    found: dict[str, str] = {}
    while True:
        sub = None
        for action in parser._actions:  # argparse keeps its actions there, and nowhere public
            if isinstance(action, argparse._SubParsersAction):
                sub = action
            elif action.option_strings:
                long = [o for o in action.option_strings if o.startswith("--")] or action.option_strings
                found.setdefault(action.dest.split(".")[0], long[0])
        chosen = next((a for a in argv if sub is not None and a in sub.choices), None)
        if sub is None or chosen is None:
            return found
        parser, argv = sub.choices[chosen], argv[list(argv).index(chosen) + 1 :]
        found = {}  # the sub-command's own flags name its settings


def as_flags(message: str, settings: Sequence[str], flags: Mapping[str, str]) -> str:
    """A ConfigError's message as the command line says it: each setting it names spelled as its flag,
    in the form the setting gives: 'force=True' as '--force', 'folds=' (before a value) as '--folds ',
    a bare 'folds' as '--folds' its first time only (a word such as 'data' may recur as a word). A
    setting is found by its flag's dest, or the one dest that ends with it ('key_env' is serve's
    'upstream_key_env'); one with no flag stays as it is."""
    for setting in settings:
        name, sep, value = setting.partition("=")
        form = sep + value  # '', '=' or '=True'
        ending = [flag for dest, flag in flags.items() if dest.endswith(f"_{name}")]
        flag = flags.get(name) or (ending[0] if len(ending) == 1 else None)
        if flag is None:
            continue
        spelled = re.compile(rf"(?<![\w-]){re.escape(name + form)}" + ("" if form else r"(?![\w-])"))
        message = spelled.sub(flag + (" " if form == "=" else ""), message, count=0 if form else 1)
    return message
