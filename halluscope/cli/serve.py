"""`halluscope serve`: the MCP server (``halluscope.serve``) on standard input and output, or over HTTP.
Only these flags choose the models, judge and files a request runs with (``--allow-model`` names the
further specs a request may ask for); beyond loopback a token is required. Several serve processes given
one ``--cache redis://...`` share its answers and each API model's ``--concurrency`` limit."""

from __future__ import annotations

import argparse
import os
from typing import Any

from halluscope.backends.budget import MAX_CALLS
from halluscope.backends.cache import RedisCache
from halluscope.backends.limits import LEASE_GRACE_S, redis_limits, use_shared_limits
from halluscope.calibration import Calibration
from halluscope.cli.commands import help_of
from halluscope.cli.common import check_specs, gateway_of
from halluscope.cli.flags import finite
from halluscope.errors import ConfigError
from halluscope.runtime.serving import refuse_unnamed_models
from halluscope.serve import DEFAULT_TIMEOUT_S, HttpSettings, ServerSettings, serve_http, serve_stdio
from halluscope.serve.http import DEFAULT_MAX_BODY, TOKEN_ENV
from halluscope.serve.proxy import DEFAULT_STREAM_IDLE_S, ProxySettings


def address(text: str) -> tuple[str, int]:
    """'HOST:PORT', '[IPv6]:PORT' (or ':PORT', 127.0.0.1) as a bind address."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"--http takes HOST:PORT (e.g. 127.0.0.1:8765, [::1]:8765), got {text!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def proxy_of(args: argparse.Namespace, token: str | None) -> ProxySettings | None:
    """The proxy's settings from ``--proxy`` and its flags, which are refused without it."""
    if args.proxy:
        return ProxySettings(
            args.proxy,
            args.upstream_key_env,
            tuple(args.context_from.split(",")),
            args.on_flag,
            args.on_error,
            args.stream_idle_timeout,
            check_tool_calls=args.check_tool_calls,
            check_actions=args.check_actions,
            judge_actions=args.judge_actions,
        ).checked_with(token)
    if (
        args.check_tool_calls
        or args.check_actions
        or args.judge_actions
        or args.upstream_key_env
        or args.on_flag != "annotate"
        or args.on_error is not None
        or args.context_from != "tool,system"
        or args.stream_idle_timeout != DEFAULT_STREAM_IDLE_S
    ):
        raise ConfigError(
            "--upstream-key-env, --context-from, --on-flag, --on-error, --stream-idle-timeout, "
            "--check-tool-calls, --check-actions and --judge-actions are for --proxy"
        )
    return None


def cmd_serve(args: argparse.Namespace) -> int:
    if args.mcp == bool(args.http):
        raise ConfigError("serve over one transport: --mcp (standard input and output) or --http HOST:PORT")
    check_specs([args.model, args.judge, *args.allow_model])
    if args.max_calls < 1:
        raise ConfigError(f"--max-calls takes a whole number of at least 1, got {args.max_calls}")
    if args.request_timeout <= 0:
        raise ConfigError(f"--request-timeout takes a number of seconds above 0, got {args.request_timeout:g}")
    token = args.token or os.environ.get(TOKEN_ENV) or None
    http = None
    if args.http:
        host, port = address(args.http)
        http = HttpSettings(host, port, token, args.max_body, tuple(args.allow_host), tuple(args.allow_origin))
    elif token or args.allow_host or args.allow_origin or args.max_body != DEFAULT_MAX_BODY or args.proxy:
        raise ConfigError(
            "--token, --allow-host, --allow-origin, --max-body and --proxy are for --http; stdio has no network"
        )
    proxy = proxy_of(args, token)
    gateway = gateway_of(args)
    if isinstance(gateway.cache, RedisCache):  # the processes behind one address hold each API model's limit together
        use_shared_limits(redis_limits(gateway.cache, gateway.timeout + LEASE_GRACE_S))
    calibration = Calibration.load(args.calibration) if args.calibration else None
    if calibration is not None:  # refused at start, not per request
        refuse_unnamed_models(calibration, [args.model, args.judge, *args.allow_model], "--model or --allow-model")
    settings = ServerSettings(
        gateway,
        args.model,
        args.max_calls,
        args.request_timeout,
        args.judge,
        args.allow_model,
        calibration,
    )
    if http is None:
        serve_stdio(settings)
    else:
        serve_http(settings, http, proxy)
    return 0


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("serve", parents=[common], help=help_of("serve"), description=__doc__)
    p.add_argument("--mcp", action="store_true", help="MCP on standard input and output (what a desktop client starts)")
    p.add_argument("--http", metavar="HOST:PORT", help="MCP over streamable HTTP at /mcp, POST /check and GET /health")
    p.add_argument("--model", help="the model of every request's method (default: the method's own)")
    p.add_argument("--judge", metavar="SPEC", help="the judge of every request whose method has one")
    p.add_argument(
        "--allow-model",
        action="append",
        default=[],
        metavar="SPEC",
        help="a model spec a request may name in its options (repeatable); no other is run",
    )
    add_http_flags(p)
    p.add_argument(
        "--max-calls",
        type=int,
        default=MAX_CALLS,
        metavar="N",
        help=f"a request's call ceiling (default {MAX_CALLS:,})",
    )
    p.add_argument(
        "--calibration",
        metavar="FILE",
        help="a file from `choose` or `calibrate`: every check runs it as it was fitted (its methods, options, "
        "model and threshold) and answers with probabilities",
    )
    p.add_argument(
        "--request-timeout",
        type=finite,
        default=DEFAULT_TIMEOUT_S,
        metavar="S",
        help=f"a request's wall-clock limit in seconds (default {DEFAULT_TIMEOUT_S:g}; --timeout is one model call's)",
    )
    add_proxy_flags(p)
    p.set_defaults(func=cmd_serve)


def add_http_flags(p: argparse.ArgumentParser) -> None:
    """What guards the HTTP server's door: its token, body limit, and the Host and Origin values served."""
    p.add_argument(
        "--token",
        help=f"the token every HTTP request must send as 'Authorization: Bearer <token>' (or {TOKEN_ENV}, which "
        "keeps it out of the process list); required beyond loopback",
    )
    p.add_argument(
        "--max-body",
        type=int,
        default=DEFAULT_MAX_BODY,
        metavar="BYTES",
        help=f"the largest request body (default {DEFAULT_MAX_BODY:,}); a larger one is refused (413) unread",
    )
    p.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="HOST[:PORT]",
        help="a Host header served besides loopback's (a name behind a proxy; 'name:*' takes any port)",
    )
    p.add_argument(
        "--allow-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="a browser Origin served (default: loopback's on a loopback bind, none beyond)",
    )


def add_proxy_flags(p: argparse.ArgumentParser) -> None:
    """The guard proxy's flags (``serve.proxy``)."""
    p.add_argument(
        "--proxy",
        metavar="UPSTREAM_BASE_URL",
        help="also serve /v1/chat/completions (and /v1/models): forwarded to this OpenAI-compatible base URL "
        "(e.g. https://api.openai.com/v1), the reply returned with its answer's check added",
    )
    p.add_argument(
        "--upstream-key-env",
        metavar="NAME",
        help="the variable holding the upstream's key, sent only to the upstream (without it the client's "
        "Authorization is forwarded; required with --token)",
    )
    p.add_argument(
        "--context-from",
        default="tool,system",
        metavar="ROLES",
        help="which of a request's messages are its answer's documents: tool, system, developer (default tool,system)",
    )
    p.add_argument(
        "--on-flag",
        choices=("annotate", "block"),
        default="annotate",
        help="a flagged answer: the reply as it came with the verdict (annotate), or its text replaced and never "
        "sent (block: a stream is then held until its check is done)",
    )
    p.add_argument(
        "--on-error",
        choices=("pass", "block"),
        default=None,
        help="an answer the proxy could not check (no documents, a judge error, a timeout, a broken stream): "
        "passed with the verdict saying why (pass), or blocked as a flagged one is (block; the default with "
        "--on-flag block)",
    )
    p.add_argument(
        "--stream-idle-timeout",
        type=finite,
        default=DEFAULT_STREAM_IDLE_S,
        metavar="S",
        help=f"the longest silence of an upstream's stream (default {DEFAULT_STREAM_IDLE_S:g} s); a stream's "
        "whole time is bounded by --request-timeout",
    )
    add_action_flags(p)


def add_action_flags(p: argparse.ArgumentParser) -> None:
    """The proxy's checks of an agent's actions: its tool calls, and its answer's claims of having acted."""
    p.add_argument(
        "--check-tool-calls",
        action="store_true",
        help="check each tool call of a reply, streamed or not, before the client sees it: its arguments against the "
        "request's messages and tools' schemas, no model call (an ungrounded one is blocked under --on-flag block)",
    )
    p.add_argument(
        "--check-actions",
        action="store_true",
        help="check an answer's claims of action (\"I have cancelled your order\") against the request's tool calls "
        "and their results, no model call: a claim with no call that ran, or whose call failed, is annotated",
    )
    p.add_argument(
        "--judge-actions",
        action="store_true",
        help="with --check-actions, the judge reads each claim that matching cannot decide (it names no tool; "
        "the call ran but its result says in words that it failed) against the calls and results, one call each",
    )
