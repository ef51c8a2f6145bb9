"""`halluscope serve`: the MCP server (``halluscope.serve``) on standard input and output, or over HTTP."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from halluscope.checks import finite_number
from halluscope.cli.commands import help_of
from halluscope.cli.common import check_specs, gateway_of
from halluscope.errors import ConfigError
from halluscope.graphs.stages import MAX_CALLS
from halluscope.serve import DEFAULT_TIMEOUT_S, ServerSettings, build


def address(text: str) -> tuple[str, int]:
    """'HOST:PORT' (or ':PORT', 127.0.0.1) as a bind address."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"--http takes HOST:PORT (e.g. 127.0.0.1:8765), got {text!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def cmd_serve(args: argparse.Namespace) -> int:
    if args.mcp == bool(args.http):
        raise ConfigError("serve over one transport: --mcp (standard input and output) or --http HOST:PORT")
    check_specs([args.model])
    settings = ServerSettings(gateway_of(args), args.model, args.max_calls, args.request_timeout)
    if args.mcp:
        build(settings).run(transport="stdio")
        return 0
    host, port = address(args.http)
    print(f"halluscope MCP server on http://{host}:{port}/mcp (POST /check too); Ctrl-C stops it", file=sys.stderr)
    build(settings, host, port).run(transport="streamable-http")
    return 0


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("serve", parents=[common], help=help_of("serve"), description=__doc__)
    p.add_argument("--mcp", action="store_true", help="MCP on standard input and output (what a desktop client starts)")
    p.add_argument("--http", metavar="HOST:PORT", help="MCP over streamable HTTP at /mcp, and POST /check")
    p.add_argument("--model", help="the model of every request's method (default: the method's own)")
    p.add_argument(
        "--max-calls",
        type=int,
        default=MAX_CALLS,
        metavar="N",
        help=f"a request's call ceiling (default {MAX_CALLS:,})",
    )
    p.add_argument(
        "--request-timeout",
        type=finite_number,
        default=DEFAULT_TIMEOUT_S,
        metavar="S",
        help=f"a request's wall-clock limit in seconds (default {DEFAULT_TIMEOUT_S:g}; --timeout is one model call's)",
    )
    p.set_defaults(func=cmd_serve)
