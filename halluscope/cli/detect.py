"""`halluscope detect METHOD`: one subcommand per method contract, its flags read from the contract,
run through ``halluscope.detector`` and printed as the method describes its result."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text
from tqdm import tqdm

from halluscope.backends.budget import MAX_CALLS
from halluscope.backends.gateway import CallStats
from halluscope.bench.report import csv_text, write_csv
from halluscope.calibration import Calibration
from halluscope.checks import key_values
from halluscope.cli.commands import help_of
from halluscope.cli.common import check_samples, check_specs, gateway_of
from halluscope.cli.flags import add_fields, finite, label_of, read_fields
from halluscope.detectors import detector
from halluscope.errors import ConfigError
from halluscope.readers import check_writable
from halluscope.results import DEFAULT_PROBABILITY_THRESHOLD, ROW_COLUMNS, DetectionResult, Verdict
from halluscope.runtime import registry
from halluscope.runtime.contract import Method


def arguments(method: Method, args: argparse.Namespace) -> dict[str, Any]:
    """The method's keywords from its flags (files read, values checked) and --opt KEY=VALUE; a model
    spec that cannot be read is refused here, before any progress shows."""
    label = label_of(method)
    kwargs = read_fields(method, args)
    extra = key_values(args.opt, "--opt", typed=True)
    taken = sorted(extra.keys() & kwargs.keys())
    if taken:
        raise ConfigError(f"--opt {', '.join(taken)} repeats a flag of {method.name}; give it once")
    kwargs |= extra
    check_samples(kwargs.get("n"), label("n"), yes=True)  # how many a run may make is --max-calls's rule
    method.validate(kwargs, label)  # types, ranges and needs: before the progress bar, as detect would
    check_specs(kwargs.get(name) for name in (method.model_field, "judge"))
    return kwargs


# More units than this and the terminal shows the riskiest and the flagged ones, not every unit (--all)
LONG = 12


def fitted_threshold(kwargs: dict[str, Any], args: argparse.Namespace) -> float | None:
    """The threshold a run decides at: --threshold, else a calibration's own (moved with a prior); the
    calibration's options reach the run through ``detector``."""
    if args.threshold is not None or kwargs["calibration"] is None:
        return args.threshold
    fitted = Calibration.load(kwargs["calibration"])
    prior = getattr(args, "prior", None)
    return (fitted.with_prior(prior) if prior is not None else fitted).decides_at()


def cmd_detect(args: argparse.Namespace) -> int:
    method = registry.get(args.method)
    kwargs = arguments(method, args)
    calibrated = kwargs.get("calibration") is not None or getattr(args, "calibration", None) is not None
    to_stdout = args.csv == "-"
    if to_stdout and args.json:
        raise ConfigError("--csv - and --json both write to standard output: give --csv a file")
    if args.csv and not to_stdout:
        check_writable(args.csv, "--csv")
    problem = method.threshold_problem(args.threshold, calibrated)
    if problem:
        raise ConfigError(f"--threshold: {problem}")
    if args.exit_code and args.threshold is None and not calibrated:
        raise ConfigError(
            "--exit-code gates on a verdict: give --threshold T (raw scores have no default), or --calibration"
        )
    if "calibration" not in kwargs:  # the ensemble's is a method option (its stacking), already in kwargs
        kwargs["calibration"] = getattr(args, "calibration", None)
    threshold = fitted_threshold(kwargs, args)
    if getattr(args, "force_calibration", False):
        kwargs["force_calibration"] = True
    if getattr(args, "prior", None) is not None:
        kwargs["prior"] = args.prior
    found = detector(method.name, gateway=gateway_of(args), max_calls=args.max_calls, yes=args.yes, **kwargs)
    # drawn on a terminal only: in a log a cleared bar is still there, on the line before an error or a warning
    with tqdm(desc=method.name, unit=" call", leave=False, disable=args.json or not sys.stderr.isatty()) as bar:

        def planned(total: int) -> None:  # the method announces its calls as it learns them
            bar.total = max(total, bar.n)
            bar.refresh()

        def replied() -> None:
            bar.update()
            if bar.total is not None and bar.n > bar.total:  # a retry or re-ask the plan did not count
                bar.total = bar.n

        result = found.detect(stats=CallStats(on_reply=replied, on_plan=planned))
    verdict = result.decide(threshold)
    status = 1 if args.exit_code and verdict is not None and verdict.count else 0
    if args.csv and not to_stdout:
        write_csv(Path(args.csv), result.rows(), ROW_COLUMNS)
        print(f"wrote {len(result.units)} units to {args.csv}", file=sys.stderr)
    try:
        if to_stdout:
            sys.stdout.write(csv_text(result.rows(), ROW_COLUMNS))
        elif args.json:
            print(result.to_json())
        else:
            long = len(result.units) > LONG and not args.all
            print(f"{result.summary(top=5)}\n{result.meta.cost()}" if long else method.describe(result))
            show_verdict(result, verdict, coloured=not long)
        sys.stdout.flush()
    except BrokenPipeError:  # the reader went away (`| head`, `| true`): the verdict is still the exit status
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return status


def show_verdict(result: DetectionResult, verdict: Verdict | None, coloured: bool) -> None:
    """The verdict under the method's report. ``coloured`` on a terminal: the text again as a person
    reads it, each unit coloured by risk and the flagged ones marked '!'; otherwise each flagged unit
    is listed with its position and score. Then one line saying what was flagged."""
    if result.error or not result.units:
        return
    console = Console(highlight=False, soft_wrap=True)
    flagged = set(verdict.flagged) if verdict else set()
    drawn = coloured and console.is_terminal
    if drawn:
        scores = [u.score for u in result.units if u.score is not None]
        low, high = (min(scores), max(scores)) if scores else (0.0, 0.0)
        console.print()
        for i, unit in enumerate(result.units):
            if verdict is not None:
                style = "bold red" if i in flagged else "green"
            else:  # no verdict to draw: the colour ranks this result's units from least to most risky
                rank = 0.5 if unit.score is None or high == low else (unit.score - low) / (high - low)
                style = "red" if rank > 2 / 3 else "yellow" if rank > 1 / 3 else "green"
            console.print(Text(f"{'!' if i in flagged else ' '} {unit.text}", style=style))
    if verdict is None:
        console.print(
            f"verdict: {len(result.units)} units ranked by score; give --threshold to flag "
            f"(or --calibration for probabilities, which flag at {DEFAULT_PROBABILITY_THRESHOLD:g})"
        )
        return
    on = "p(hallucinated)" if verdict.on == "probability" else "score"
    unread = [i for i, u in enumerate(result.units) if not u.parsed]
    note = (
        f"; {len(unread)} scored from a reply the judge gave no readable verdict in (the method's rule for one)"
        if unread
        else ""
    )
    console.print(f"verdict: {verdict.count} of {verdict.units} units flagged ({on} >= {verdict.threshold:g}){note}")
    rate = result.evidence.get("calibration") or {}
    if verdict.on == "probability" and rate.get("prior") is not None:
        console.print(
            f"probabilities corrected to your base rate {rate['prior']:.0%} (fitted at {rate['fitted_base_rate']:.0%})"
        )
    elif verdict.on == "probability" and rate.get("fitted_base_rate") is not None:
        console.print(
            f"probabilities carry the base rate the calibration was fitted at, {rate['fitted_base_rate']:.0%} "
            "hallucinated (--prior P: yours)"
        )
    if not drawn and verdict.flagged:
        console.print("units are numbered from 0, as --json, --csv and decide() number them")
        for i in verdict.flagged:
            unit = result.units[i]
            value = unit.probability if verdict.on == "probability" else unit.score
            console.print(Text(f"! unit {i} ({value:.3f}): {unit.text}", style="bold red"))


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    """`detect METHOD` for every method contract."""
    detect = sub.add_parser("detect", help=help_of("detect")).add_subparsers(
        dest="method", required=True, metavar="METHOD"
    )
    for name, method in registry.methods().items():
        p = detect.add_parser(name, parents=[common], help=method.summary, description=method.summary)
        add_fields(p, method)
        p.add_argument(
            "--opt",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="any other keyword of the method's detect, the value read as YAML (e.g. theta=0.3)",
        )
        if "calibration" not in method.option_names:
            _add_calibration_flags(p)
        _add_verdict_flags(p)
        p.set_defaults(func=cmd_detect)


def _add_calibration_flags(p: argparse.ArgumentParser) -> None:
    """A method's calibration flags, where it takes no calibration option of its own."""
    p.add_argument(
        "--calibration", metavar="FILE", help="a file from `halluscope calibrate`: each unit gets a probability"
    )
    p.add_argument(
        "--prior",
        type=finite,
        metavar="P",
        help="the share of hallucinated units where you use it: the calibration's probabilities are "
        "corrected to it from the base rate it was fitted at",
    )
    p.add_argument(
        "--force-calibration",
        action="store_true",
        help="apply the calibration although this run's settings (--samples, scoring, judge ...) are not "
        "those it was fitted with: a warning instead of a refusal",
    )


def _add_verdict_flags(p: argparse.ArgumentParser) -> None:
    """How a detect run decides and prints: its threshold, its call limit, its exit code, its output."""
    p.add_argument(
        "--threshold",
        type=finite,
        metavar="T",
        help="flag the units whose probability (calibrated) or score is at least T "
        f"(default: {DEFAULT_PROBABILITY_THRESHOLD:g} on probabilities; none on raw scores)",
    )
    p.add_argument(
        "--max-calls",
        type=int,
        default=MAX_CALLS,
        metavar="N",
        help=f"refuse a run that plans more model calls than N before its first (default {MAX_CALLS:,}; "
        "--yes lifts the limit)",
    )
    p.add_argument(
        "--exit-code",
        action="store_true",
        help="exit 1 when any unit is flagged and 0 when none (as git diff --exit-code does; an error "
        "exits 2): needs --threshold, or --calibration",
    )
    p.add_argument(
        "--all", action="store_true", help=f"print every unit of a long result (over {LONG} units: the riskiest)"
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON, its verdict included")
    p.add_argument(
        "--csv",
        metavar="FILE",
        help="also write the units as CSV: item, method, unit, text, score, probability, flagged, evidence",
    )
