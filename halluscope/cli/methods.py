"""`halluscope methods` (every method, its inputs and options: the docs' reference) and `halluscope
studio config` (langgraph.json), both read from the method registry."""

from __future__ import annotations

import argparse
import json
from typing import Any

from halluscope.cli.commands import help_of
from halluscope.cli.common import print_json
from halluscope.runtime import registry, studio
from halluscope.runtime.contract import option_table

REFERENCE_HEAD = (
    "# Methods: inputs and options\n\n"
    "Every method's keywords, as `halluscope.detector(METHOD, ...)`, the method's own `detect` and "
    "`halluscope detect METHOD` take them (`--opt KEY=VALUE` for a keyword without a flag). Written by "
    "`halluscope methods --markdown` from each method's declaration; a test fails when this page is stale.\n"
)


def reference() -> str:
    """docs/methods.md: each method's summary and its inputs and options."""
    parts = [REFERENCE_HEAD]
    for name, method in registry.methods().items():
        parts.append(f"## `{name}`\n\n{method.summary}.\n\n{option_table(method)}\n")
    return "\n".join(parts)


def cmd_methods(args: argparse.Namespace) -> int:
    if args.markdown:
        print(reference(), end="")
        return 0
    rows = [{"name": n, "summary": m.summary, "inputs": list(m.input_names)} for n, m in registry.methods().items()]
    if args.json:
        print_json({"methods": rows})
        return 0
    width = max(len(r["name"]) for r in rows)
    for row in rows:
        print(f"{row['name']:{width}}  {row['summary']}")
    return 0


def cmd_studio_config(args: argparse.Namespace) -> int:
    text = json.dumps(studio.config(), indent=2) + "\n"
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text)
        print(f"wrote {args.out}: {len(studio.config()['graphs'])} graphs")
    else:
        print(text, end="")
    return 0


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    """methods and studio."""
    p = sub.add_parser("methods", help=help_of("methods"))
    p.add_argument("--markdown", action="store_true", help="every method's inputs and options (docs/methods.md)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_methods)
    studio_commands = sub.add_parser("studio", help=help_of("studio")).add_subparsers(
        dest="studio_command", required=True, metavar="ACTION"
    )
    p = studio_commands.add_parser("config", help="langgraph.json: every registered method's graph")
    p.add_argument("--out", metavar="FILE", help="write it here (default: print it)")
    p.set_defaults(func=cmd_studio_config)
