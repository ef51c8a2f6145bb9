"""The `halluscope` command line: a thin layer over the public API. Errors a user can fix print as one
line and exit 2; each command group lives in its own module (detect, bench, admin)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from halluscope import __version__
from halluscope.cli import admin, bench, detect
from halluscope.cli.common import check_counts, check_models, common_parser
from halluscope.errors import HalluscopeError, redact_credentials


def build_parser() -> argparse.ArgumentParser:
    common = common_parser()
    parser = argparse.ArgumentParser(
        prog="halluscope", description="Measure and detect LLM hallucinations with published methods."
    )
    parser.add_argument("--version", action="version", version=f"halluscope {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    admin.add_parsers(sub, common)
    detect.add_parsers(sub, common)
    bench.add_parsers(sub, common)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        check_counts(args)
        check_models(args)
        if getattr(args, "compare_prompt", None):
            return bench.cmd_bench_compare(args)
        return int(args.func(args))
    except HalluscopeError as exc:
        print(f"halluscope: error: {redact_credentials(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("halluscope: interrupted; finished calls are in the cache", file=sys.stderr)
        return 130
