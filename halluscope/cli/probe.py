"""`halluscope probe fit`: a linear probe on a local model's hidden states (``halluscope.tune.probe_fit``),
written as JSON for the ``probe`` method: its layer chosen on held-out data unless given, each layer's
held-out AUC-ROC printed."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from tqdm import tqdm

from halluscope.checks import numbers
from halluscope.cli.commands import help_of
from halluscope.cli.common import check_specs, gateway_of, print_json
from halluscope.cli.flags import passage_range
from halluscope.probing import KINDS
from halluscope.readers import check_writable
from halluscope.tune.probe_fit import GROUNDED_DATA, QA_DATA, SENTENCE_DATA, ProbeFitSettings, fit, summary


def cmd_fit(args: argparse.Namespace) -> int:
    check_specs([args.model, args.answer_model, args.judge])
    check_writable(args.out, "--out")
    settings = ProbeFitSettings(
        kind=args.kind,
        data=args.data,
        model=args.model,
        layers=numbers(args.layer, "--layer", int) if args.layer else None,
        items=passage_range(args.items, "--items") if args.items else None,
        data_dir=args.data_dir,
        n=args.samples,
        force=args.force,
    )
    fitted, examples = fit(
        settings,
        gateway_of(args),
        answerer=args.answer_model,
        judge=args.judge,
        progress=lambda it: tqdm(list(it), desc=f"{args.kind} probe", file=sys.stderr, disable=args.json, leave=False),
    )
    fitted.save(args.out)
    if args.json:
        print_json(fitted.model_dump(mode="json", exclude={"weights", "mean", "scale"}))
    else:
        print(summary(fitted))
        print(f"wrote {args.out} (use it: halluscope detect probe --probe {args.out} --text ...)")
    return 0


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("probe", help=help_of("probe"), description=__doc__)
    verbs = p.add_subparsers(dest="verb", required=True)
    f = verbs.add_parser("fit", parents=[common], help="fit a probe and write it as JSON", description=__doc__)
    f.add_argument(
        "--kind",
        required=True,
        choices=KINDS,
        help="sentence, grounded (read after the answer's context), accuracy or sep (semantic entropy)",
    )
    f.add_argument(
        "--data",
        required=True,
        metavar="NAME|FILE",
        help=f"{', '.join(SENTENCE_DATA)} (sentence), {', '.join(GROUNDED_DATA)} (grounded), {', '.join(QA_DATA)} "
        "(accuracy, sep), or your labelled CSV/JSONL file (grounded: with a context; sep: a .txt of questions will do)",
    )
    f.add_argument("--items", metavar="FIRST-LAST", help="the passages, questions or rows to fit on (default: all)")
    f.add_argument(
        "--model", required=True, help="the model whose hidden states are read: local:... or transformers:..."
    )
    f.add_argument(
        "--layer",
        metavar="L[,L...]",
        help="the layer (or layers to choose from on held-out data; default: every fourth and the last; local: "
        "models give their last only)",
    )
    f.add_argument("--answer-model", metavar="SPEC", help="answers the questions (default: --model)")
    f.add_argument(
        "--samples", type=int, default=10, metavar="N", help="sep: answers sampled per question (default 10)"
    )
    f.add_argument("--judge", metavar="SPEC", help="sep: semantic entropy's entailment judge (default: its own)")
    f.add_argument("--data-dir", metavar="DIR", help="benchmark data directory (default: HALLUSCOPE_DATA)")
    f.add_argument("--out", required=True, metavar="FILE", help="where to write the probe (JSON)")
    f.add_argument("--json", action="store_true", help="print the probe (without its weights) as JSON")
    f.add_argument(
        "--force", action="store_true", help="write a probe whose held-out AUC-ROC is at or below chance, or unknown"
    )
    f.set_defaults(func=cmd_fit)
