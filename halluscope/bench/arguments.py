"""How a benchmark meets the command line: the ``Benchmark`` protocol (its flags, a run from the
parsed flags, the lines a person reads). A method's options are spelled as its declaration spells
them (``cli.flags.add_fields``), never redefined here."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from halluscope.backends.gateway import Gateway
from halluscope.bench.flags import ListFlag
from halluscope.bench.runner import BenchResult, Plan


def _no_shared_report(_results: Sequence[BenchResult], _out: Path) -> None:
    """Each plan's own report is all there is."""


@dataclass(frozen=True)
class Benchmark:
    """One `halluscope bench NAME`: ``arguments`` adds its flags, ``plans`` prepares its runs from the
    parsed flags (``gateway()`` builds the gateway from the shared call flags; the same flags give the
    same plans in a Ray worker), ``describe`` prints its results. ``finish`` writes what the plans share
    once all ran; ``by_method``: each plan writes OUT/METHOD. ``calls_models``: it takes the cache,
    prompt and call flags (the exactness check calls none). ``own_data``: its --data is the user's own
    file, not the benchmark data directory."""

    name: str
    help: str
    description: str
    arguments: Callable[[argparse.ArgumentParser], None]
    plans: Callable[[argparse.Namespace, Callable[[], Gateway]], list[Plan]]
    describe: Callable[[Sequence[BenchResult], argparse.Namespace], str]
    finish: Callable[[Sequence[BenchResult], Path], None] = _no_shared_report
    by_method: bool = False
    calls_models: bool = True
    own_data: bool = False

    def out_dir(self, method: str, out: str | Path) -> Path:
        """Where a plan of ``method`` writes results.json: OUT/METHOD when the bench runs several, else OUT."""
        return Path(out) / method if self.by_method else Path(out)


def add_context_sizes(p: argparse.ArgumentParser, default: Sequence[int]) -> None:
    """--sizes: PHR's context sizes; --n, the paper's letter for them, is the same flag."""
    shown = ",".join(map(str, default))
    p.add_argument(
        "--sizes",
        "--n",
        dest="sizes",
        action=ListFlag,
        kind=int,
        default=list(default),
        help=f"context sizes n (default {shown}); --n, the paper's letter, is the same flag",
    )
