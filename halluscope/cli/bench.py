"""`halluscope bench ...`: every protocol's Benchmark (its flags, its run, its lines) through one
command, and --compare-prompt around any of them."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

from halluscope.bench.benchmark import Benchmark, Settings
from halluscope.bench.gates import GATE_ON, shortfalls
from halluscope.bench.html import REPORT
from halluscope.bench.registry import BENCHMARKS, LOCAL_CLUSTER, run_benchmark
from halluscope.bench.runner import RESULTS, BenchResult, checked_out
from halluscope.calibration import KINDS, Calibration
from halluscope.checks import finite_number, key_values
from halluscope.cli.commands import help_of
from halluscope.cli.common import data_option, gateway_of, print_json, registry, report_failures
from halluscope.cli.flags import ListFlag, add_fields, finite, label_of, passage_range, read_fields
from halluscope.errors import ConfigError
from halluscope.labelled import load_labelled
from halluscope.prompts.registry import parse_ref
from halluscope.scale import RAY_INSTALL
from halluscope.tune import calibrate, choose


def cmd_bench(benchmark: Benchmark, args: argparse.Namespace) -> int:
    """Run it; print its lines (or one JSON object: the bench, OUT, and its BenchResults without their
    items) and each failed item on stderr; the exit code says whether any failed or a gate fell short."""
    if getattr(args, "compare_prompt", None):  # the exactness check has no prompts to compare
        return cmd_bench_compare(args)
    if args.workers is not None and args.ray is None:
        raise ConfigError("--workers sizes the Ray actor pool: give it with --ray")
    settings = settings_of(benchmark, args)
    floors = {k: _floor(k, v) for k, v in key_values(args.fail_under, "--fail-under").items()}  # before any work
    results: Sequence[BenchResult] = run_benchmark(
        benchmark,
        settings,
        partial(gateway_of, args),
        args.out,
        progress=not args.json,
        ray=args.ray,
        workers=args.workers,
        fresh=args.fresh,
    )
    status = report_failures([f for r in results for f in r.failures], results[0].bench)
    gates = shortfalls(results, floors, args.gate_on, args.max_flag_rate)
    for line in gates:
        print(f"halluscope: gate failed: {line}", file=sys.stderr)
    status = GATE_FAILED if gates else status
    if args.json:
        shown = [r.model_dump(mode="json", exclude={"items"}) for r in results]
        print_json({"bench": benchmark.name, "out": args.out, "results": shown})
        return status
    print(benchmark.describe(results, settings))
    saved = dict.fromkeys(str(benchmark.out_dir(r.meta.method, args.out) / RESULTS) for r in results)
    plots = sorted(p.name for p in Path(args.out).glob("*.png"))
    drawn = f", plots ({', '.join(plots)})" if plots else ""
    print(f"wrote {Path(args.out) / REPORT} (open it in a browser), report.md{drawn}; results: {', '.join(saved)}")
    return status


GATE_FAILED = 1  # a bench whose measured numbers fall short of --fail-under or --max-flag-rate


def _floor(metric: str, value: str) -> float:
    try:
        return finite_number(value)
    except ValueError:
        raise ConfigError(f"--fail-under {metric}={value}: the floor must be a number") from None


def gate_options(p: argparse.ArgumentParser) -> None:
    """--fail-under, --gate-on and --max-flag-rate: exit 1 when the measured numbers fall short."""
    g = p.add_argument_group("gate a change on the measured numbers (exit 1 when they fall short)")
    g.add_argument(
        "--fail-under",
        action="append",
        default=[],
        metavar="METRIC=VALUE",
        help="a metric as results.json names it and its floor, e.g. answer_auc_roc=75 (repeat for several)",
    )
    g.add_argument(
        "--gate-on",
        choices=GATE_ON,
        default="point",
        help="gate on the estimate (point, the default) or on its 95%% interval's lower bound (lower)",
    )
    g.add_argument(
        "--max-flag-rate",
        type=finite,
        metavar="R",
        help="the largest share of answers flagged (bench mine with --threshold T), e.g. 0.2",
    )


def settings_of(benchmark: Benchmark, args: argparse.Namespace) -> Settings:
    """The benchmark's settings from its parsed flags: its own, --data (unless it declares its own), and
    the fields of its method, refused as that method refuses them."""
    values = read_fields(benchmark.settings, args)
    values.setdefault("data", getattr(args, "data", None))
    if benchmark.fields_of is not None:
        method, names = benchmark.fields_of
        options = read_fields(method, args, names)
        problem = method.check(options, label_of(method)) if method.check is not None else None
        if problem:
            raise ConfigError(problem)
        values["method_options"] = options
    return benchmark.settings(**values)


def cmd_bench_compare(args: argparse.Namespace) -> int:
    """The benchmark with prompt version A, then B, on the same items and the same cache; then the report."""
    from halluscope.bench.compare import compare_runs, prompt_pair

    prompt_id = parse_ref(args.compare_prompt)[0]
    chosen = [r for r in args.prompt if parse_ref(r)[0] == prompt_id]
    if len(chosen) > 1:
        raise ConfigError(f"--prompt names {prompt_id} more than once; give version A once")
    a, b = prompt_pair(registry(args), chosen[0] if chosen else None, args.compare_prompt)
    others = [r for r in args.prompt if parse_ref(r)[0] != prompt_id]
    out = Path(args.out)
    outs = (out / "A", out / "B")
    for label, prompt, run_out in (("A", a, outs[0]), ("B", b, outs[1])):
        print(f"== {label}: {prompt.ref}", file=sys.stderr)
        run_args = argparse.Namespace(**{**vars(args), "prompt": [*others, f"{prompt.id}@{prompt.version}"]})
        run_args.out, run_args.compare_prompt, run_args.json = str(run_out), None, False
        with contextlib.redirect_stdout(sys.stderr):  # stdout holds the comparison alone (one JSON object)
            args.func(run_args)
    report = compare_runs(args.bench_command, (a, b), outs, out)
    if args.json:
        print_json({k: v for k, v in report.items() if k != "item_changes"})
        return 0
    for label in ("a", "b"):
        side = report[label]
        print(f"{label.upper()} {side['prompt']}: {side['calls']} calls made, {side['replayed']} replayed (cache)")
    moved = [r for r in report["metrics"] if r["a"] is not None and r["b"] is not None and r["a"] != r["b"]]
    for row in moved[:12]:
        print(f"  {row['metric']}: {row['a']:.4g} -> {row['b']:.4g}")
    print(
        f"{report['items_changed']} of {report['items_compared']} item scores changed; "
        f"wrote {out}/compare.md and compare.json"
    )
    return 0


def cmd_choose(args: argparse.Namespace) -> int:
    checked_out(args.out)
    target = (
        ("recall", args.target_recall)
        if args.target_recall is not None
        else ("precision", args.target_precision or 0.8)
    )
    settings = choose.ChooseSettings(
        methods=args.method,
        max_calls_per_answer=args.max_calls_per_answer,
        target=target,
        folds=args.folds,
        options=key_values(args.opt, "--opt", typed=True),
        cascade_share=None if args.no_cascades else args.cascade_share,
    )
    labelled = load_labelled(args.data, limit=args.limit)
    choice = choose.choose(
        labelled, settings, args.out, model=args.model, gateway=gateway_of(args), progress=not args.json
    )
    if args.json:
        print_json(dataclasses.asdict(choice))
    else:
        print(choose.describe(choice, args.model))
        print(f"wrote {args.out}/choose.md, choose.json" + (" and calibration.json" if choice.calibration else ""))
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    if calibrate.labelled_file(args.data):
        calibration = calibrate.calibrate_labelled(
            args.method,
            load_labelled(args.data, limit=args.limit),
            args.out,
            model=args.model,
            gateway=gateway_of(args),
            kind=args.kind,
            folds=args.folds,
            target_precision=args.target_precision,
            options=key_values(args.opt, "--opt", typed=True),
            progress=not args.json,
            force=args.force,
        )
        return _print_calibration(calibration, args)
    if args.limit is not None:
        raise ConfigError("--limit takes the first K answers of --data FILE; on WikiBio give --limit-passages K")
    if args.fit is None or args.test is None:
        raise ConfigError(
            "calibrate on WikiBio needs --fit and --test passage ranges (or --data FILE: your own answers)"
        )
    settings = calibrate.WikiBioCalibrationSettings(
        methods=args.method,
        fit_passages=passage_range(args.fit, "--fit"),
        test_passages=passage_range(args.test, "--test"),
        n=args.n,
        kind=args.kind,
        target_precision=args.target_precision,
        data=args.data,
        limit_passages=args.limit_passages,
        force=args.force,
    )
    calibration = calibrate.calibrate_wikibio(
        settings, args.out, model=args.model, gateway=gateway_of(args), progress=not args.json
    )
    return _print_calibration(calibration, args)


def _print_calibration(calibration: Calibration, args: argparse.Namespace) -> int:
    if args.json:
        print(calibration.model_dump_json(indent=2))
        return 0
    print(calibrate.describe(calibration))
    print(f"wrote {args.out} and {Path(args.out).with_suffix('.reliability.png')}")
    return 0


def scale_options(p: argparse.ArgumentParser) -> None:
    """--ray, --workers and --fresh: where the items run, and whether finished ones are scored again."""
    g = p.add_argument_group("scale out and resume")
    g.add_argument(
        "--ray",
        nargs="?",
        const=LOCAL_CLUSTER,
        metavar="ADDRESS",
        help="score the items on a Ray cluster: ADDRESS 'auto' or ray://HOST:PORT, none to start one here "
        f"(needs {RAY_INSTALL})",
    )
    g.add_argument("--workers", type=int, metavar="N", help="Ray worker actors (default: the cluster's CPUs)")
    g.add_argument(
        "--fresh",
        action="store_true",
        help="score every item again (through the cache) instead of resuming the items OUT/items.jsonl holds",
    )


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    """`bench BENCHMARK` for each protocol."""
    bench = sub.add_parser("bench", help=help_of("bench")).add_subparsers(
        dest="bench_command", required=True, metavar="BENCHMARK"
    )
    for benchmark in BENCHMARKS.values():
        parents = [common] if benchmark.calls_models else []
        p = bench.add_parser(benchmark.name, parents=parents, help=benchmark.help, description=benchmark.description)
        add_fields(p, benchmark.settings)
        if benchmark.fields_of is not None:
            add_fields(p, *benchmark.fields_of)
        p.add_argument(
            "--out", default=f"out/{benchmark.name}", help=f"output directory (default out/{benchmark.name})"
        )
        p.add_argument("--json", action="store_true")
        scale_options(p)
        gate_options(p)
        if benchmark.calls_models:  # the exactness check reads no data and calls no model
            if not benchmark.own_data:
                data_option(p)
            p.add_argument(
                "--compare-prompt",
                metavar="ID@VERSION",
                help="run the benchmark twice, with --prompt ID@A (or the default version) and with this version, "
                "and write a side-by-side report (OUT/compare.md; the runs in OUT/A and OUT/B)",
            )
        p.set_defaults(func=partial(cmd_bench, benchmark))

    choose_arguments(sub.add_parser("choose", parents=[common], help=help_of("choose"), description=choose.__doc__))

    p = sub.add_parser(
        "calibrate",
        parents=[common],
        help=help_of("calibrate"),
        description=calibrate.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    calibrate_arguments(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_calibrate)


def choose_arguments(p: argparse.ArgumentParser) -> None:
    """`choose`'s flags: the answers, the candidates, the budget, the operating point, the folds, cascades."""
    p.add_argument(
        "--data", required=True, metavar="FILE", help="your labelled answers (.csv or .jsonl), as bench mine"
    )
    p.add_argument("--method", action=ListFlag, required=True, help="the candidates: methods and presets")
    p.add_argument("--model", help="the model of every candidate that calls one")
    p.add_argument("--limit", type=int, metavar="K", help="only the first K answers of the file")
    p.add_argument("--max-calls-per-answer", type=finite, metavar="K", help="the call budget per answer")
    target = p.add_mutually_exclusive_group()
    target.add_argument("--target-precision", type=finite, metavar="P", help="operating point (default 0.8)")
    target.add_argument("--target-recall", type=finite, metavar="R", help="operating point: a recall instead")
    p.add_argument("--folds", type=int, default=calibrate.FOLDS, help="cross-validation folds by answer")
    p.add_argument("--opt", action="append", default=[], metavar="KEY=VALUE", help="a method option (judge=...)")
    cascade = p.add_mutually_exclusive_group()
    cascade.add_argument(
        "--cascade-share",
        type=finite,
        default=choose.CASCADE_SHARE,
        metavar="S",
        help="a cascade of a fitted checker (grounded[model=nli:DIR]) and the judge (grounded) among the candidates "
        "sends this share of units to the judge (default %(default)s)",
    )
    cascade.add_argument("--no-cascades", action="store_true", help="try no cascade")
    p.add_argument("--out", default="out/choose", help="where the runs, choose.md and calibration.json go")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_choose)


def calibrate_arguments(p: argparse.ArgumentParser) -> None:
    """`halluscope calibrate`'s own flags."""
    p.add_argument("--method", action=ListFlag, required=True, help="one method, or several to stack")
    p.add_argument(
        "--data",
        metavar="FILE|DIR",
        help="your labelled answers (a .csv or .jsonl file, as bench mine reads it: cross-validated by answer), "
        "or the benchmark data directory of --bench wikibio (default: HALLUSCOPE_DATA, else `data fetch`'s)",
    )
    p.add_argument(
        "--bench", default="wikibio", choices=("wikibio",), help="labelled data to fit on without --data FILE"
    )
    p.add_argument("--fit", metavar="FIRST-LAST", help="WikiBio passages to fit on, e.g. 0-119")
    p.add_argument("--test", metavar="FIRST-LAST", help="held-out WikiBio passages, e.g. 120-237")
    folds = calibrate.FOLDS
    p.add_argument("--folds", type=int, default=folds, help=f"--data FILE: cross-validation folds (default {folds})")
    p.add_argument(
        "--opt",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="--data FILE: a method option, given to each method that has it (e.g. judge=nli:deberta-v3-large-mnli)",
    )
    p.add_argument("--model", help="model spec the methods use, e.g. local:qwen2.5-coder-1.5b")
    p.add_argument("--limit", type=int, metavar="K", help="--data FILE: only the first K answers")
    p.add_argument("--limit-passages", type=int, metavar="K", help="WikiBio: only the first K passages of each split")
    p.add_argument("--samples", dest="n", type=int, help="as bench wikibio --samples")
    p.add_argument("--kind", default="isotonic", choices=KINDS, help="one method's fit (several: stacked)")
    p.add_argument(
        "--target-precision", type=finite, default=calibrate.TARGET_PRECISION, help="for the reported threshold"
    )
    p.add_argument("--out", default="out/calibration.json", help="the calibration file (default out/calibration.json)")
    p.add_argument(
        "--force",
        action="store_true",
        help="write a fit that fails its held-out check (too few sentences of a class, or an AUC-ROC interval "
        "holding 50), its report saying so",
    )
