"""What every command shares: the prompts, cache and call flags, the gateway they build, count checks,
JSON output and per-item failure lines."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from typing import Any

from halluscope.backends.cache import open_cache
from halluscope.backends.chat import resolve
from halluscope.backends.entailment import judge_target
from halluscope.backends.gateway import DEFAULT_TIMEOUT, Gateway
from halluscope.cli.flags import ListFlag, finite
from halluscope.errors import ConfigError, redact_credentials
from halluscope.prompts.registry import PromptRegistry


def data_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--data",
        metavar="DIR",
        help="benchmark data directory (default: HALLUSCOPE_DATA, else the one `data fetch` fills)",
    )


def _prompt_flags(g: Any) -> None:
    g.add_argument(
        "--prompts",
        action="append",
        default=[],
        metavar="DIR",
        help="directory of your own prompt YAML files (adds versions or overrides; also HALLUSCOPE_PROMPTS)",
    )
    g.add_argument(
        "--prompt",
        action=ListFlag,
        default=[],
        metavar="ID@VERSION",
        help="use these prompt versions, e.g. fibe.create@2,fibe.check@2",
    )


def _cache_flag(g: Any) -> None:
    g.add_argument(
        "--cache",
        "--cache-dir",
        metavar="DIR|URL",
        help="model-call cache: a directory, or redis://HOST:PORT/DB shared by a cluster "
        "(default: HALLUSCOPE_CACHE_URL, HALLUSCOPE_CACHE_DIR or the user cache dir)",
    )


def prompts_parser() -> argparse.ArgumentParser:
    """The flags of a command that reads prompts and calls no model (prompts list, show, diff)."""
    p = argparse.ArgumentParser(add_help=False)
    _prompt_flags(p.add_argument_group("prompts"))
    return p


def cache_parser() -> argparse.ArgumentParser:
    """The flag of a command on the cache itself (cache stats, clear)."""
    p = argparse.ArgumentParser(add_help=False)
    _cache_flag(p.add_argument_group("cache"))
    return p


def common_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    g = common.add_argument_group("prompts, cache and calls")
    _prompt_flags(g)
    _cache_flag(g)
    g.add_argument("--no-cache", action="store_true", help="neither read nor write the model-call cache")
    g.add_argument("--concurrency", type=int, help="concurrent calls per model (default: HALLUSCOPE_CONCURRENCY or 4)")
    g.add_argument(
        "--yes",
        action="store_true",
        help=f"run even when it is large: detect, past --max-calls planned calls; bench, past {SAMPLES_WITHOUT_YES} "
        "samples per item",
    )
    g.add_argument(
        "--delimit",
        action="store_true",
        help="fence the user text in every prompt in triple quotes (a text cannot pose as the prompt); "
        "off by default: version 1 prompts are the papers' own (HALLUSCOPE_DELIMIT=1 turns it on)",
    )
    g.add_argument(
        "--timeout",
        type=finite,
        metavar="SECONDS",
        help="seconds one model request may take before it is retried "
        f"(default: HALLUSCOPE_TIMEOUT or {DEFAULT_TIMEOUT:g})",
    )
    return common


SOME_FAILED = 1  # exit code of a benchmark that finished with some items failed (listed in its results)
SAMPLES_WITHOUT_YES = 100  # more samples per item than this is likely a typo: it needs --yes


def check_counts(args: argparse.Namespace) -> None:
    """--samples and --limit must be >= 1 (0 once meant 'the default' and --limit -1 'all but the last');
    a sample count that would run for days needs --yes."""
    for limit in given(args, "limit"):
        if limit < 1:
            raise ConfigError(f"--limit must be at least 1, got {limit}")
    for n in given(args, "n"):  # every sample count is n
        check_samples(n, "--samples", getattr(args, "yes", False))


def given(args: argparse.Namespace, name: str) -> list[Any]:
    """The values given to a field by any of its flags: its own dest, or a declared field's (``n.0``,
    ``n.1`` ...: one dest per spelling)."""
    return [v for dest, v in vars(args).items() if v is not None and (dest == name or dest.startswith(f"{name}."))]


def check_models(args: argparse.Namespace) -> None:
    """A malformed or unknown --model (and a --judge that is a model spec) is refused before any work:
    a run would otherwise load data and show progress before its first call found it."""
    check_specs(value for flag in ("model", "judge") for value in given(args, flag))


def check_specs(values: Iterable[Any]) -> None:
    """Each model or judge spec among ``values`` (comma-separated strings, or lists of them) parses, read
    as a judge is read (``judge_target``: an NLI checkpoint is left to its loader); objects are left
    alone."""
    for value in values:
        specs = value if isinstance(value, list | tuple) else [value]
        for spec in (part.strip() for s in specs if isinstance(s, str) for part in s.split(",")):
            if not spec:
                continue
            nli, target = judge_target(spec, "an Entailment")
            if not nli:
                resolve(target)  # what the gateway will read: the spec is parsed once


def check_samples(n: object, flag: str, yes: bool) -> None:
    """A sample count is at least 1, and more than SAMPLES_WITHOUT_YES per item needs --yes."""
    if not isinstance(n, int):
        return
    if n < 1:
        raise ConfigError(f"{flag} must be at least 1, got {n}")
    if n > SAMPLES_WITHOUT_YES and not yes:
        raise ConfigError(
            f"{flag} {n} asks for {n:,} model samples per item (more than {SAMPLES_WITHOUT_YES}); "
            "pass --yes to run it anyway"
        )


def report_failures(failed: list[dict[str, Any]], what: str) -> int:
    """Each item a benchmark could not score, one line on stderr; the exit code says whether any failed."""
    for f in failed:
        print(f"halluscope: {what} {f['item']} failed: {redact_credentials(f['error'])}", file=sys.stderr)
    return SOME_FAILED if failed else 0


def registry(args: argparse.Namespace) -> PromptRegistry:
    return PromptRegistry.from_env(args.prompts, args.prompt)


def gateway_of(args: argparse.Namespace) -> Gateway:
    cache = None if args.no_cache else open_cache(args.cache)
    if args.timeout is not None and not args.timeout > 0:
        raise ConfigError(f"--timeout must be a positive number of seconds, got {args.timeout:g}")
    if args.concurrency is not None and args.concurrency < 1:
        raise ConfigError(f"--concurrency must be at least 1, got {args.concurrency}")
    return Gateway.from_env(cache, registry(args), args.concurrency, args.timeout, args.delimit)


def print_json(obj: Any) -> None:
    print(redact_credentials(json.dumps(obj, indent=2, ensure_ascii=False)))
