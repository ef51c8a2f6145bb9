"""`halluscope check`: one answer checked in one command (``halluscope.check``): the answer on standard
input, from --text or --file; its documents from --context or --context-file (texts, or LangChain-style
Documents whose metadata travels into the evidence); the verdict printed, or as JSON, and with
--exit-code as the exit status (1 flagged, 0 none, 2 an error)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from halluscope.backends.budget import MAX_CALLS
from halluscope.calibration import Calibration
from halluscope.check_answer import WITH_CONTEXT, WITHOUT_CONTEXT, check
from halluscope.checks import key_values
from halluscope.cli.commands import help_of
from halluscope.cli.common import check_specs, gateway_of
from halluscope.cli.detect import show_verdict
from halluscope.cli.flags import finite
from halluscope.errors import ConfigError
from halluscope.readers import load_json, read_file, read_texts
from halluscope.runtime.serving import refuse_unnamed_models


def read_documents(path: str) -> list[Any]:
    """--context-file: a JSON list of texts or of {"page_content", "metadata"} objects (Documents), or
    plain text, documents separated by '---' lines."""
    text = read_file(path, "--context-file")
    if text.lstrip()[:1] != "[":
        return list(read_texts(path, "--context-file", "documents"))
    found = load_json(text, "--context-file", path)
    if not isinstance(found, list) or not found:
        raise ConfigError(f"--context-file {path} must hold a non-empty JSON list of documents")
    from langchain_core.documents import Document

    documents: list[Any] = []
    for position, item in enumerate(found):
        if isinstance(item, str):
            documents.append(item)
        elif isinstance(item, dict) and isinstance(item.get("page_content"), str):
            metadata = item.get("metadata") or {}
            if not isinstance(metadata, dict):
                raise ConfigError(f"--context-file {path}: document {position}'s metadata is not an object")
            documents.append(Document(page_content=item["page_content"], metadata=metadata))
        else:
            raise ConfigError(f"--context-file {path}: document {position} is neither a text nor a page_content object")
    return documents


def answer_of(args: argparse.Namespace) -> str:
    if args.text is not None and args.file is not None:
        raise ConfigError("give the answer once: --text, --file, or standard input")
    if args.text is not None:
        return str(args.text)
    if args.file is None and sys.stdin.isatty():
        raise ConfigError("no answer: pipe it on standard input, or give --text or --file")
    return read_file(args.file or "-", "--file")


def cmd_check(args: argparse.Namespace) -> int:
    answer = answer_of(args)
    if not answer.strip():
        raise ConfigError("the answer is empty")
    if args.context and args.context_file:
        raise ConfigError("give the documents once: --context (repeated) or --context-file")
    context = read_documents(args.context_file) if args.context_file else (args.context or None)
    check_specs([args.model])
    calibration = Calibration.load(args.calibration) if args.calibration else None
    if calibration is not None:
        refuse_unnamed_models(calibration, [args.model])
    result = check(
        answer,
        context=context,
        question=args.question,
        method=args.method,
        model=args.model,
        calibration=calibration,
        threshold=args.threshold,
        prior=args.prior,
        max_calls=None if args.yes else args.max_calls,
        force_calibration=args.force_calibration,
        gateway=gateway_of(args),
        **key_values(args.opt, "--opt", typed=True),
    )
    verdict = result.verdict
    status = 1 if args.exit_code and verdict is not None and verdict.count else 0
    try:
        if args.json:
            print(result.to_json())
        else:
            print(result.report())
            show_verdict(result, verdict, coloured=True)
        sys.stdout.flush()
    except BrokenPipeError:  # the reader went away: the verdict is still the exit status
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return status


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("check", parents=[common], help=help_of("check"), description=__doc__)
    p.add_argument("--text", help="the answer (default: standard input)")
    p.add_argument("--file", metavar="FILE", help="a file holding the answer ('-': standard input)")
    p.add_argument("--question", help="the question the answer answers")
    p.add_argument("--context", action="append", metavar="TEXT", help="a document (repeat for several)")
    p.add_argument(
        "--context-file",
        metavar="FILE",
        help="documents: a JSON list of texts or of {page_content, metadata} objects, or texts separated by '---'",
    )
    p.add_argument("--method", help=f"the method (default: {WITH_CONTEXT} with documents, {WITHOUT_CONTEXT} without)")
    p.add_argument("--model", help="the model spec (default: the method's, the strongest local model)")
    p.add_argument(
        "--calibration",
        metavar="FILE",
        help="a file from `choose` or `calibrate`: runs its method or stack as fitted (options, model, threshold) "
        "and gives probabilities",
    )
    p.add_argument(
        "--threshold",
        type=finite,
        metavar="T",
        help="flag units at or above T (default: a calibration's threshold, else p >= 0.5; 0.5 on the default "
        "methods' 0-1 scores)",
    )
    p.add_argument(
        "--prior", type=finite, metavar="P", help="your base rate: corrects --calibration's probabilities to it"
    )
    p.add_argument(
        "--force-calibration",
        action="store_true",
        help="apply --calibration although this run's settings are not those it was fitted with (a warning)",
    )
    p.add_argument("--opt", action="append", default=[], metavar="KEY=VALUE", help="a method option (e.g. top_k=2)")
    p.add_argument("--max-calls", type=int, default=MAX_CALLS, metavar="N", help="refuse a check planning more calls")
    p.add_argument("--exit-code", action="store_true", help="exit 1 when a unit is flagged, 0 when none (2: an error)")
    p.add_argument("--json", action="store_true", help="print the result as JSON, its verdict included")
    p.set_defaults(func=cmd_check)
