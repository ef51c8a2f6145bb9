"""How the command line reads a list or numbers, one convention for every flag that takes them."""

from __future__ import annotations

import argparse
from typing import Any

from halluscope.errors import ConfigError


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
