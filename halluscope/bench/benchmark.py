"""What a benchmark is: its settings declared as a dataclass of ``arg`` fields (a method's options are
declared the same way), the plans it prepares from them, the lines a person reads. The command line
turns the declaration into flags (``cli.flags``); Python and a Ray worker build the same settings
directly, so a run is the same from either side."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from halluscope.backends.gateway import Gateway
from halluscope.bench.runner import BenchResult, Plan
from halluscope.runtime.contract import Flag, Method, arg


@dataclass(frozen=True, kw_only=True)
class Settings:
    """What every benchmark's settings hold besides its own flags: ``data``, the benchmark data
    directory (the command line's --data; a bench whose data is the user's own file declares its own),
    and ``method_options``, the fields of ``Benchmark.fields_of``'s method as that method spells them."""

    data: str | None = None
    method_options: dict[str, Any] = field(default_factory=dict)


def _no_shared_report(_results: Sequence[BenchResult], _out: Path) -> None:
    """Each plan's own report is all there is."""


@dataclass(frozen=True)
class Benchmark:
    """One `halluscope bench NAME`: ``settings`` declares its flags, ``plans`` prepares its runs from
    them (``gateway()`` builds the gateway from the shared call flags; the same settings give the same
    plans in a Ray worker), ``describe`` prints its results. ``fields_of``: a method whose fields
    (those named) the bench takes as flags spelled as the method spells them. ``finish`` writes what
    the plans share once all ran; ``by_method``: each plan writes OUT/METHOD. ``calls_models``: it
    takes the cache, prompt and call flags (the exactness check calls none). ``own_data``: its --data
    is the user's own file, not the benchmark data directory."""

    name: str
    help: str
    description: str
    settings: type[Settings]
    plans: Callable[[Any, Callable[[], Gateway]], list[Plan]]
    describe: Callable[[Sequence[BenchResult], Any], str]
    fields_of: tuple[Method, tuple[str, ...]] | None = None
    finish: Callable[[Sequence[BenchResult], Path], None] = _no_shared_report
    by_method: bool = False
    calls_models: bool = True
    own_data: bool = False

    def out_dir(self, method: str, out: str | Path) -> Path:
        """Where a plan of ``method`` writes results.json: OUT/METHOD when the bench runs several, else OUT."""
        return Path(out) / method if self.by_method else Path(out)


REQUIRED: Any = object()  # a setting without a default: the command line requires its flag


def _declared(default: Any, help: str, flags: tuple[Flag, ...], shown: bool = True) -> Any:  # noqa: A002
    declared = arg(None if default is REQUIRED else default, help=help, flags=flags, shown=shown)
    return field(metadata=declared.metadata) if default is REQUIRED else declared


def context_sizes(default: tuple[int, ...]) -> Any:
    """--sizes: PHR's context sizes; --n, the paper's letter for them, is the same flag."""
    flag = Flag(("--sizes", "--n"), listed=True, type=int)
    return _declared(default, "context sizes n; --n, the paper's letter, is the same flag", (flag,))


def listed(default: Any, help: str, *flags: str, metavar: str | None = None) -> Any:  # noqa: A002
    """A list of names or specs: comma-separated, and the flag may be repeated."""
    return _declared(default, help, (Flag(flags, listed=True, metavar=metavar),))


def option(default: Any, help: str, *flags: str, type: Any = str, **flag: Any) -> Any:  # noqa: A002
    """One flag of one value (``type`` reads it; ``choices``, ``metavar`` as argparse takes them)."""
    return _declared(default, help, (Flag(flags, type=type, **flag),))


def switch(help: str, *flags: str) -> Any:  # noqa: A002
    """A flag that takes no value and turns a setting on."""
    return _declared(False, help, (Flag(flags, const=True),), shown=False)
