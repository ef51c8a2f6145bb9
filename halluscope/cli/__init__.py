"""The `halluscope` command line: a thin layer over the public API. Errors a user can fix print as one
line and exit 2; each command group lives in its own module (detect, bench, admin)."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import re
import sys
import traceback
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn, TextIO

from halluscope.cli.commands import COMMANDS
from halluscope.errors import ConfigError, HalluscopeError, HalluscopeWarning, redact_credentials, unknown
from halluscope.version import __version__

DESCRIPTION = "Measure and detect LLM hallucinations with published methods."


class _Parser(argparse.ArgumentParser):
    """argparse, with a bad flag or value refused in one line (the problem and where to read more), not
    the usage block before it."""

    def error(self, message: str) -> NoReturn:
        found = re.match(r"argument (\S+): invalid choice: '(.*)' \(choose from (.*)\)$", message)
        if found:  # a misspelt command or method: the near names first
            what = "command" if found[1] == "COMMAND" else "method" if found[1] == "METHOD" else found[1]
            message = unknown(what, found[2], re.findall(r"'([^']*)'", found[3]))
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of ``command``'s group (its module's commands), or of every command: a command's
    module is imported only when that command runs, so `--help` and `--version` load no model stack."""
    from halluscope.cli.common import common_parser

    common = common_parser()
    parser = _Parser(prog="halluscope", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"halluscope {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    groups = [COMMANDS[command][0]] if command in COMMANDS else dict.fromkeys(m for m, _ in COMMANDS.values())
    for group in groups:
        importlib.import_module(f"halluscope.cli.{group}").add_parsers(sub, common)
    return parser


def _top_parser() -> argparse.ArgumentParser:
    """`halluscope --help` and `--version`: the commands by name, none of their modules imported."""
    parser = _Parser(prog="halluscope", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"halluscope {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (_module, line) in COMMANDS.items():
        sub.add_parser(name, help=line)
    return parser


class _Redacting:
    """A text stream that redacts credentials from everything written to it (a model spec's URL in an
    error, a progress line, a warning, a printed report), passing everything else to the stream below."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(redact_credentials(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:  # flush, isatty, fileno, encoding ...: the stream's own
        return getattr(self._stream, name)


@contextlib.contextmanager
def _redacted_output() -> Iterator[None]:
    """stdout and stderr redacted for the length of one command."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Redacting(sys.stdout), _Redacting(sys.stderr)  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


@contextlib.contextmanager
def _one_line_warnings() -> Iterator[None]:
    """halluscope's own warnings as one line each, as its errors are ("halluscope: warning: ..."), not
    Python's file:line form, and never inside a progress bar's line."""
    shown = warnings.showwarning

    def show(message: Warning | str, category: type[Warning], *args: Any, **kwargs: Any) -> None:
        if issubclass(category, HalluscopeWarning):
            from tqdm import tqdm

            with tqdm.external_write_mode(file=sys.stderr):  # a progress bar cleared first, then redrawn
                print(f"halluscope: warning: {message}", file=sys.stderr)
        else:
            shown(message, category, *args, **kwargs)

    with warnings.catch_warnings():
        warnings.showwarning = show
        yield


def main(argv: Sequence[str] | None = None) -> int:
    with _redacted_output(), _one_line_warnings():
        return _main(argv)


def _main(argv: Sequence[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    if command not in COMMANDS:  # --help, --version, or an unknown command: argparse says which
        _top_parser().parse_args(argv)
    parser = build_parser(command)
    args = parser.parse_args(argv)
    from halluscope.cli.common import check_counts, check_models

    try:
        check_counts(args)
        check_models(args)
        return int(args.func(args))
    except HalluscopeError as exc:
        said = str(exc)
        if isinstance(exc, ConfigError) and exc.settings:
            from halluscope.cli.flags import as_flags, flags_of

            said = as_flags(said, exc.settings, flags_of(parser, argv))
        print(f"halluscope: error: {redact_credentials(said)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("halluscope: interrupted; finished calls are in the cache", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`halluscope methods | head`): nothing left to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:  # a bug: still one line and exit 2, which --exit-code never means "flagged"
        if os.environ.get("HALLUSCOPE_DEBUG"):
            raise
        where = traceback.extract_tb(exc.__traceback__)[-1]
        print(
            f"halluscope: error: internal error, {type(exc).__name__}: {redact_credentials(str(exc))[:300]} "
            f"(at {Path(where.filename).name}:{where.lineno}; HALLUSCOPE_DEBUG=1 shows its traceback; report it)",
            file=sys.stderr,
        )
        return 2
