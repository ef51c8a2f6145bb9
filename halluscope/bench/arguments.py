"""How a benchmark meets the command line: the ``Benchmark`` protocol (its flags, a run from the
parsed flags, the lines a person reads) and the flags several protocols share."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from halluscope.backends.gateway import Gateway
from halluscope.bench.runner import BenchResult, Plan
from halluscope.cli.flags import ListFlag
from halluscope.errors import ConfigError
from halluscope.scoring import CLUSTER_RULES


def _no_shared_report(_results: Sequence[BenchResult], _out: Path) -> None:
    """Each plan's own report is all there is."""


@dataclass(frozen=True)
class Benchmark:
    """One `halluscope bench NAME`: ``arguments`` adds its flags, ``plans`` prepares its runs from the
    parsed flags (``gateway()`` builds the gateway from the shared call flags; the same flags give the
    same plans in a Ray worker), ``describe`` prints its results. ``finish`` writes what the plans share
    once all ran; ``by_method``: each plan writes OUT/METHOD. ``calls_models``: it takes the cache,
    prompt and call flags (the exactness check calls none)."""

    name: str
    help: str
    description: str
    arguments: Callable[[argparse.ArgumentParser], None]
    plans: Callable[[argparse.Namespace, Callable[[], Gateway]], list[Plan]]
    describe: Callable[[Sequence[BenchResult], argparse.Namespace], str]
    finish: Callable[[Sequence[BenchResult], Path], None] = _no_shared_report
    by_method: bool = False
    calls_models: bool = True

    def out_dir(self, plan: Plan, out: str | Path) -> Path:
        return Path(out) / plan.method if self.by_method else Path(out)


def judge_options(p: argparse.ArgumentParser, who: str, strictness: bool) -> None:
    """--judge, and optionally --strict / --lax and --cluster-rule, for entailment clustering."""
    p.add_argument("--judge", metavar="SPEC", help=f"{who}: entailment judge, a model spec or nli:PATH")
    if strictness:
        group = p.add_mutually_exclusive_group()
        group.add_argument("--strict", action="store_true", help="equivalence = entailment both ways (the default)")
        group.add_argument("--lax", action="store_true", help="equivalence = no contradiction, not both neutral")
        p.add_argument("--cluster-rule", choices=CLUSTER_RULES, default="paper", help="first (paper) or last match")


def mode_of(args: argparse.Namespace, default: str) -> Any:
    """--strict / --lax, else the method's own default."""
    return "strict" if args.strict else "lax" if args.lax else default


def fewl_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--reference", action=ListFlag, metavar="SPEC", help="reference models (comma-separated, repeatable)"
    )
    p.add_argument("--diversify", dest="n", type=int, metavar="N", help="ask the one reference model for N answers")
    p.add_argument("--neighbours", type=int, default=5, metavar="K", help="nearest questions of the penalty (5)")
    p.add_argument("--wrong-model", metavar="SPEC", help="the model that writes IW/CO answers (default: 1st reference)")


def fewl_options(args: argparse.Namespace) -> dict[str, Any]:
    """The reference side of FEWL, shared by both TruthfulQA benchmarks."""
    refs = args.reference or []
    if args.n is not None and len(refs) > 1:
        raise ConfigError(f"--diversify asks one --reference model for N answers; {len(refs)} references given")
    return {"references": refs, "n": args.n, "neighbours": args.neighbours, "wrong_model": args.wrong_model}
