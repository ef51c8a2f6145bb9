"""`halluscope checker fit`: a fast grounded checker fine-tuned on this machine's CPU from labelled
(context, sentence, supported?) pairs (``halluscope.tune.checker``), and from unlabelled answers a
teacher judge labels (its p(support) learned as a soft label), saved as safetensors with its
checker.json; use it as ``grounded --model nli:DIR`` (no LLM call). `halluscope checker synth`: pairs
labelled by construction from documents no test reads (``halluscope.tune.synth``), a file fit reads."""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any

from tqdm import tqdm

from halluscope.cli.commands import help_of
from halluscope.cli.common import check_specs, gateway_of, print_json
from halluscope.cli.flags import passage_range
from halluscope.errors import ConfigError
from halluscope.tune import synth
from halluscope.tune.checker import (
    DATASETS,
    DataPart,
    FitSettings,
    fit_checker,
    sources_of,
    taught_pairs,
    training_pairs,
)

PART = re.compile(r"(?P<name>[^:]+)(?::(?P<range>\d+-\d+))?(?::max=(?P<cap>\d+))?")


def data_parts(data: str, items: range | None) -> list[DataPart]:
    """--data's parts: NAME or FILE, each with its own FIRST-LAST and max=N (``wikibio:0-119``,
    ``mnli:max=20000``, ``rte:0-999:max=500``); --items is the range of a part that gives none."""
    parts = []
    for piece in (p.strip() for p in data.split(",")):
        found = PART.fullmatch(piece)
        if found is None:
            raise ConfigError(f"--data takes NAME[:FIRST-LAST][:max=N], comma-separated; got {piece!r}")
        own = passage_range(found["range"], "--data") if found["range"] else items
        parts.append(DataPart(found["name"], own, int(found["cap"]) if found["cap"] else None))
    return parts


def cmd_fit(args: argparse.Namespace) -> int:
    settings = FitSettings(
        epochs=args.epochs,
        seed=args.seed,
        batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        max_length=args.max_length,
        dev=args.dev,
        group_by_length=not args.no_length_groups,
    )
    if args.data is None and args.unlabelled is None:
        raise ConfigError("checker fit needs --data (labelled pairs), --unlabelled with --teacher, or both")
    if (args.teacher is None) != (args.unlabelled is None):
        raise ConfigError("--teacher labels the answers of --unlabelled: give both, or neither")
    check_specs([args.teacher])
    items = passage_range(args.items, "--items") if args.items else None
    pairs = training_pairs(data_parts(args.data, items), data_dir=args.data_dir) if args.data else []
    if args.limit is not None:
        pairs = pairs[: args.limit]
    described = {"data": args.data, "items": args.items, "limit": args.limit}
    if args.unlabelled:
        bar = partial(tqdm, desc="teacher", unit=" answer", file=sys.stderr, disable=args.json)
        taught = taught_pairs(args.unlabelled, args.teacher, gateway_of(args), lambda rows: bar(list(rows)))
        pairs += taught
        described |= {"teacher": args.teacher, "unlabelled": Path(args.unlabelled).name, "taught": len(taught)}
    print(f"fitting on {len(pairs):,} pairs ({sum(p.supported for p in pairs):,} supported)", file=sys.stderr)
    for name, row in sources_of(pairs).items():
        balance = f"{row['pairs']:,} pairs, {row['supported']:,} supported"
        print(f"  {name}: {balance}; licence {row['licence']}", file=sys.stderr)
    fitted = fit_checker(
        pairs,
        args.out,
        settings,
        base=args.base,
        described=described,
        threads=args.threads,
        report=lambda line: print(line, file=sys.stderr),
        force=args.force,
    )
    if args.json:
        print_json(fitted)
    else:
        print(
            f"fitted on {fitted['pairs']:,} pairs in {fitted['fit_seconds']:.0f} s "
            f"(peak memory {fitted['peak_memory_mib']:,.0f} MiB); last epoch's loss {fitted['losses'][-1]:.4f}"
        )
        dev = fitted["dev"]
        if dev["pairs"]:
            aucs = ", ".join("-" if a is None else f"{a:.1f}" for a in dev["auc_roc"])
            print(f"dev part: {dev['pairs']:,} pairs, AUC-ROC by epoch {aucs}: kept epoch {dev['chosen_epoch']}")
        print(f"wrote {args.out} (use it: halluscope check --model nli:{args.out} ... or grounded --model nli:...)")
    return 0


def cmd_synth(args: argparse.Namespace) -> int:
    settings = synth.SynthSettings(per_document=args.per_document, min_words=args.min_words, seed=args.seed)
    check_specs([args.model] + ([args.verify] if args.verify else []))
    documents = synth.wikibio_documents(passage_range(args.documents, "--documents"), args.data_dir)
    bar = tqdm(total=len(documents), desc="synth", unit=" document", file=sys.stderr, disable=args.json)
    made = synth.synthesize(
        documents,
        settings,
        args.out,
        model=args.model,
        gateway=gateway_of(args),
        judge=args.verify,
        progress=lambda done, total: bar.update(1),
    )
    bar.close()
    if args.json:
        print_json(made)
        return 0
    print(
        f"{made['claims']:,} claims from {made['documents']:,} documents: {made['pairs']:,} pairs, half supported; "
        f"{made['calls']:,} calls, {made['cache_hits']:,} from the cache, {made['seconds']:.0f} s"
    )
    if made["judge"]:
        whys = Counter(d["why"] for d in made["dropped"])
        dropped = "; ".join(f"{n:,} {why}" for why, n in sorted(whys.items())) or "none"
        print(f"{made['judge']} kept {made['claims']:,} of {made['written']:,} claims written (dropped: {dropped})")
    for line in made["unwritten"][:5]:
        print(f"  no claim: {line}")
    print(f"wrote {args.out} (fit on it: halluscope checker fit --data {args.out},... --out DIR)")
    return 0


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("checker", help=help_of("checker"), description=__doc__)
    verbs = p.add_subparsers(dest="verb", required=True)
    f = verbs.add_parser("fit", parents=[common], help="fit a checker and save it", description=__doc__)
    f.add_argument(
        "--data",
        metavar="NAME|FILE",
        help=f"{', '.join(DATASETS)} (binary MNLI and FEVER-NLI, ANLI, FactCG, WiCE's dev claims, RTE's training "
        "split, QNLI's fit part, WikiBio passages), or your labelled CSV/JSONL file (a context and a label per "
        "sentence, or one label for a one-sentence answer, as `choose` reads it); several, comma-separated, each "
        "with its own range and cap: wikibio:0-119, mnli:max=20000",
    )
    f.add_argument(
        "--items",
        metavar="FIRST-LAST",
        help="the pairs, passages or rows to fit on, in each of several --data (WikiBio's default: 0-119)",
    )
    f.add_argument("--limit", type=int, metavar="N", help="at most N labelled pairs (the first)")
    f.add_argument(
        "--teacher",
        metavar="SPEC",
        help="a judge whose p(support) labels --unlabelled's sentences (grounded's prompt; cached and resumable)",
    )
    f.add_argument(
        "--unlabelled",
        metavar="FILE",
        help="answers with their documents, no labels (JSON Lines: 'text' or 'sentences', 'context', 'question')",
    )
    f.add_argument("--base", metavar="DIR", help="the encoder to fine-tune (default: all-MiniLM-L6-v2, installed)")
    f.add_argument("--epochs", type=int, default=3, help="passes over the pairs (default 3)")
    f.add_argument("--batch-size", type=int, default=16, metavar="N", help="pairs a step (default 16)")
    f.add_argument("--learning-rate", type=float, default=5e-5, metavar="LR", help="AdamW's peak rate (default 5e-5)")
    f.add_argument(
        "--max-length", type=int, default=512, metavar="TOKENS", help="a pair's tokens at most (default 512)"
    )
    f.add_argument(
        "--dev",
        type=float,
        default=0.05,
        metavar="SHARE",
        help="the share of contexts held out to choose the epoch on (default 0.05; 0: keep the last epoch)",
    )
    f.add_argument(
        "--no-length-groups",
        action="store_true",
        help="batches in plain shuffled order (default: pairs of like length batched together, less padding)",
    )
    f.add_argument("--seed", type=int, default=0, help="the head's initialisation, the order and dropout (default 0)")
    f.add_argument("--threads", type=int, metavar="N", help="torch's threads (default: every core)")
    f.add_argument("--data-dir", metavar="DIR", help="benchmark data directory (default: HALLUSCOPE_DATA)")
    f.add_argument("--out", required=True, metavar="DIR", help="where to save the checker (resumes a fit left there)")
    f.add_argument("--json", action="store_true", help="print checker.json")
    f.add_argument(
        "--force",
        action="store_true",
        help="write the checker even when its last epoch's loss is not below chance (ln 2: it learned nothing)",
    )
    f.set_defaults(func=cmd_fit)
    synth_arguments(verbs.add_parser("synth", parents=[common], help="write pairs labelled by construction"))


VERIFY_HELP = (
    "a judge that checks each claim: kept where it finds it supported by its sentence and not by the document "
    "without it (grounded's check; the rest are counted, with why)"
)


def synth_arguments(p: argparse.ArgumentParser) -> None:
    """`checker synth`'s flags: the documents, the model that writes the claims, how many, the file."""
    p.description = synth.__doc__
    p.add_argument(
        "--documents",
        default="0-119",
        metavar="FIRST-LAST",
        help="WikiBio passages whose Wikipedia texts the claims come from (default 0-119: no test reads them)",
    )
    p.add_argument("--model", required=True, metavar="SPEC", help="the model that writes the claims")
    p.add_argument("--verify", metavar="SPEC", help=VERIFY_HELP)
    p.add_argument("--per-document", type=int, default=2, metavar="K", help="claims a document (default 2)")
    p.add_argument("--min-words", type=int, default=8, metavar="N", help="a claim's sentence has N words at least")
    p.add_argument("--seed", type=int, default=0, help="which sentences are chosen (default 0)")
    p.add_argument("--data-dir", metavar="DIR", help="benchmark data directory (default: HALLUSCOPE_DATA)")
    p.add_argument("--out", required=True, metavar="FILE.jsonl", help="the pairs, as a labelled file fit reads")
    p.add_argument("--json", action="store_true", help="print what was made and what it cost")
    p.set_defaults(func=cmd_synth)
