"""The housekeeping commands: demo, prompts, cache, models and data."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from tqdm import tqdm

from halluscope.backends import ollama, providers
from halluscope.backends.cache import (
    REDIS_SCHEMES,
    CallCache,
    RedisCache,
    default_cache_location,
    export_cache,
    import_cache,
    move_aside,
    open_cache,
)
from halluscope.backends.checkpoints import CHECKPOINTS, checkpoint_rows, pull_checkpoint
from halluscope.backends.gateway import CallStats
from halluscope.backends.local import (
    REGISTRY,
    ModelNotInstalledError,
    default_local_model,
    default_spec,
    is_installed,
    local_spec,
    pull,
)
from halluscope.backends.providers.nli import nli_spec
from halluscope.bench.datasets import DATA_ENV, chosen_data_dir, list_datasets, source_summary
from halluscope.bench.sources import READERS, SOURCES, fetch, presence
from halluscope.checks import key_values
from halluscope.cli.commands import help_of
from halluscope.cli.common import (
    cache_parser,
    data_option,
    gateway_of,
    print_json,
    prompts_parser,
    registry,
)
from halluscope.demo import print_report, run_demo
from halluscope.errors import CacheError, ConfigError
from halluscope.prompts.registry import prompt_diff
from halluscope.readers import check_writable
from halluscope.results import DetectionResult, Unit


def cmd_demo(args: argparse.Namespace) -> int:
    report = run_demo(gateway_of(args), args.model, args.judge, progress=not args.json)
    if args.json:
        print(report.to_result().to_json())
    else:
        print_report(report, sys.stdout)
    return 0


def cmd_prompts_list(args: argparse.Namespace) -> int:
    reg = registry(args)
    rows = [
        {
            "ref": p.ref,
            "id": p.id,
            "version": p.version,
            "default": reg.default_version(p.id) == p.version,
            "override": reg.is_override(p),
            "kind": p.kind,
            "source": p.source,
        }
        for p in reg.all()
    ]
    if args.json:
        print_json({"prompts": rows})
        return 0
    width = max(len(f"{r['id']}@{r['version']}") for r in rows)
    for r in rows:
        mark = ("*" if r["default"] else " ") + ("o" if r["override"] else " ")
        ref = f"{r['id']}@{r['version']}"
        print(f"{mark} {ref:<{width}}  {r['source']}")
    print("\n* default version   o overridden by a file of yours")
    return 0


def cmd_prompts_show(args: argparse.Namespace) -> int:
    p = registry(args).get(args.ref)
    print(f"# {p.ref}  ({p.path})")
    print(p.to_yaml(), end="")
    return 0


def cmd_prompts_diff(args: argparse.Namespace) -> int:
    reg = registry(args)
    a, b = reg.get(args.a), reg.get(args.b)
    text = prompt_diff(a, b)
    print(text if text else f"{a.ref} and {b.ref} are identical", end="" if text else "\n")
    return 0


def cmd_prompts_run(args: argparse.Namespace) -> int:
    gateway = gateway_of(args)
    prompt = gateway.registry.get(args.ref)
    stats = CallStats()
    gateway.model(args.model)  # a missing key or bad spec fails before any progress is drawn
    with tqdm(total=args.n, desc=prompt.id, disable=args.json or args.n <= 3, leave=False) as bar:
        replies = gateway.sample(
            args.model,
            prompt,
            key_values(args.var, "--var"),
            args.n,
            stats=stats,
            on_reply=lambda _reply: bar.update(),
            **key_values(args.param, "--param", typed=True),
        )
    result = DetectionResult(
        method=f"prompt:{prompt.id}",
        units=[
            Unit(
                text=r.text,
                score=None,
                parsed=r.ok,
                evidence={
                    "sample_index": r.sample_index,
                    "parsed": r.parsed,
                    "parse_error": r.parse_error,
                    "cached": r.cached,
                },
            )
            for r in replies
        ],
        meta=stats.meta(f"prompt:{prompt.id}"),
    )
    if args.json:
        print(result.to_json())
        return 0
    for r in replies:
        print(f"--- sample {r.sample_index}{' (cached)' if r.cached else ''}")
        print(r.text)
        print(f"parsed: {json.dumps(r.parsed, ensure_ascii=False)}" if r.ok else f"PARSE FAILURE: {r.parse_error}")
    m = result.meta
    tokens = f"{m.tokens.prompt}+{m.tokens.completion} tokens"
    print(f"\n{prompt.ref}: {m.calls} calls, {m.cache_hits} cache hits, {tokens}, {m.seconds:.2f} s")
    return 0


def cmd_cache_stats(args: argparse.Namespace) -> int:
    stats = open_cache(args.cache).stats()
    if args.json:
        print_json(stats)
    else:
        print(f"{stats['location']}: {stats['entries']} cached calls, {stats['bytes'] / 1e6:.2f} MB")
    return 0


def cmd_cache_clear(args: argparse.Namespace) -> int:
    """Empty the cache; a database that cannot be opened or cleared is moved aside and a new one made."""
    location = args.cache or default_cache_location()
    if location.startswith(REDIS_SCHEMES):  # a Redis server: only halluscope's keys go
        cache = RedisCache(location)
        print(f"removed {cache.clear()} cached calls from {cache.location}")
        return 0
    directory = Path(location)
    try:
        removed = CallCache(directory).clear()
    except CacheError:
        moved = move_aside(directory)
        if moved is None:
            raise
        CallCache(directory).close()
        print(f"moved the damaged cache database aside to {moved}; {directory} now holds an empty cache")
        return 0
    print(f"removed {removed} cached calls from {directory}")
    return 0


def cmd_cache_export(args: argparse.Namespace) -> int:
    cache = open_cache(args.cache)
    check_writable(args.out, "the export")
    print(f"wrote {export_cache(cache, args.out)} cached calls from {cache.location} to {args.out}")
    return 0


def cmd_cache_import(args: argparse.Namespace) -> int:
    cache = open_cache(args.cache)
    written, held = import_cache(cache, args.file)
    print(f"imported {written} cached calls into {cache.location} ({held} it already held)")
    return 0


def cmd_models_list(args: argparse.Namespace) -> int:
    rows = [row for provider in providers.providers().values() for row in provider.models()] + checkpoint_rows()
    if args.json:
        try:
            default: str | None = default_local_model()
        except ModelNotInstalledError:
            default = None
        print_json({"models": rows, "default": default})
        return 0
    for r in rows:
        where = f"{r['bytes'] / 1e6:8.1f} MB  {r['path']}" if r.get("path") else "available"
        print(f"{'*' if r['installed'] else ' '} {r['spec']:<26} {where if r['installed'] else 'not installed'}")
        print(f"    {r['about']}")
        if not r["installed"] and "hub" in r:  # a registry model or checkpoint: halluscope pulls it
            via = f"or --via ollama, then ollama:{r['ollama']}; " if r["ollama"] else ""
            offline = f"offline: {r['install']}" if r["install"] else "no offline package: from the Hub only"
            print(f"    halluscope models pull {r['name']}  ({via}{offline})")
    try:
        print(f"\ndefault model: {default_spec()}")
    except ModelNotInstalledError as exc:
        print(f"\n{exc}")
    return 0


def cmd_models_pull(args: argparse.Namespace) -> int:
    if args.via == "ollama":  # all: every model Ollama serves, the GGUFs
        return _pull_with_ollama(list(REGISTRY) if args.names == ["all"] else args.names)
    names = [*REGISTRY, *CHECKPOINTS] if args.names == ["all"] else args.names
    for name in names:
        if name in CHECKPOINTS:
            folder, what = pull_checkpoint(name, force=args.force, report=lambda line: print(line, file=sys.stderr))
            done = "downloaded and recorded" if what == "downloaded" else "present, sha256 checked"
            print(f"{nli_spec(name)} {done}: {folder}")
            continue
        model = REGISTRY[name]
        if model.hub is not None and (args.force or not is_installed(name)):
            print(f"{local_spec(name)}: {model.hub.size / 1e6:.0f} MB from {model.hub.url}", file=sys.stderr)
        path, what = pull(name, force=args.force)
        if what == "installed":
            packages = model.parts[0][0] + (f" and {len(model.parts) - 1} more" if model.split else "")
            print(
                f"{local_spec(name)} already installed from its pip package ({packages}): nothing downloaded "
                "(--force downloads the Hub's file into the model cache)"
            )
        else:
            done = "downloaded and checked" if what == "downloaded" else "already present, sha256 checked"
            print(f"{local_spec(name)} {done}: {path}")
    return 0


def _pull_with_ollama(names: list[str]) -> int:
    """Each model's Ollama tag pulled by the Ollama server, a bar per layer as it streams."""
    tags = {name: REGISTRY[name].ollama if name in REGISTRY else None for name in names}
    missing = [name for name, tag in tags.items() if tag is None]
    if missing:
        raise ConfigError(f"{', '.join(missing)} has no Ollama tag: pull it from the Hub without --via ollama")
    for name, tag in tags.items():
        assert tag is not None
        print(f"{local_spec(name)}: ollama:{tag} through the Ollama server at {ollama.server_url()}", file=sys.stderr)
        with _LayerBars() as bars:
            ollama.pull(tag, bars.show)
        print(f"{local_spec(name)} pulled by Ollama: run it as --model ollama:{tag}")
    return 0


class _LayerBars:
    """Ollama's pull progress on stderr: a status line, or a byte bar per layer (digest)."""

    def __init__(self) -> None:
        self.bars: dict[str, tqdm[Any]] = {}

    def show(self, event: dict[str, Any]) -> None:
        digest, total = event.get("digest"), event.get("total")
        if digest is None or not total:
            print(f"  {event.get('status')}", file=sys.stderr)
            return
        if digest not in self.bars:
            self.bars[digest] = tqdm(total=total, unit="B", unit_scale=True, desc=f"  {digest[:19]}", file=sys.stderr)
        bar = self.bars[digest]
        bar.update(event.get("completed", 0) - bar.n)

    def __enter__(self) -> _LayerBars:
        return self

    def __exit__(self, *exc: object) -> None:
        for bar in self.bars.values():
            bar.close()


def cmd_data_list(args: argparse.Namespace) -> int:
    root, origin = chosen_data_dir(args.data)
    found = list_datasets(args.data) if root.is_dir() else []
    rows = []
    for name in sorted(set(SOURCES) | set(found)):
        folder = root / name
        known = name in SOURCES
        rows.append(
            {
                "name": name,
                "state": presence(name, folder) if known else "present",
                "path": str(folder),
                "source": source_summary(name, args.data) if name in found else SOURCES[name].title,
                "fetch": f"halluscope data fetch {name}" if known else None,
                "read_by": [dataclasses.asdict(r) for r in READERS.get(name, ())],
            }
        )
    if args.json:
        print_json({"root": str(root), "from": origin, "datasets": rows})
        return 0
    print(f"{root}  ({origin}{'' if root.is_dir() else ', not created yet'})")
    for r in rows:
        print(f"  {r['name']:<28} {r['state']:<8} {r['source']}")
        for reader in r["read_by"]:
            who = [f"bench {', '.join(reader['benches'])}"] * bool(reader["benches"])
            who += [f"{fit} fit" for fit in reader["fits"]]
            print(f"  {'':<28} {'':<8} {'; '.join(who)}: {reader['split']}")
    if any(r["state"] != "present" for r in rows):
        print("\nhalluscope data fetch NAME (or all) downloads a missing one, checked by sha256")
    return 0


def cmd_data_fetch(args: argparse.Namespace) -> int:
    names = list(SOURCES) if args.names == ["all"] else args.names
    root, origin = chosen_data_dir(args.data)
    if origin not in (DATA_ENV, "--data"):
        print(f"writing to {root}; the loaders find it there (or set {DATA_ENV})", file=sys.stderr)
    written = 0
    for name in names:
        written += len(fetch(name, root, report=lambda line: print(line, file=sys.stderr)))
    print(f"{written} files downloaded and checked; {len(names)} datasets present under {root}")
    return 0


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    """demo, prompts, cache, models and data."""
    _add_demo(sub, common)
    _add_prompts(sub, common)
    _add_cache(sub)
    _add_models(sub)
    _add_data(sub)


def _add_demo(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "demo",
        parents=[common],
        help=help_of("demo"),
        description="Semantic entropy for a question the model knows and one it cannot know, and Direct "
        "Question (p(Yes) for each sentence) on eight short biographies with one planted false sentence "
        "each, on the strongest installed local model; a second run replays from the cache.",
    )
    p.add_argument("--model", help="model spec (default: the strongest installed local model)")
    p.add_argument("--judge", help="entailment judge spec (default: the model itself)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_demo)


def _add_prompts(sub: Any, common: argparse.ArgumentParser) -> None:
    prompts = sub.add_parser("prompts", help=help_of("prompts")).add_subparsers(
        dest="prompts_command", required=True, metavar="ACTION"
    )
    p = prompts.add_parser("list", parents=[prompts_parser()], help="every prompt: id, version, source")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_prompts_list)
    p = prompts.add_parser("show", parents=[prompts_parser()], help="one prompt in full")
    p.add_argument("ref", metavar="ID[@VERSION]")
    p.set_defaults(func=cmd_prompts_show)
    p = prompts.add_parser("diff", parents=[prompts_parser()], help="unified diff of two prompt versions")
    p.add_argument("a", metavar="ID@A")
    p.add_argument("b", metavar="ID@B")
    p.set_defaults(func=cmd_prompts_diff)
    p = prompts.add_parser("run", parents=[common], help="render a prompt, call a model through the gateway, parse")
    p.add_argument("ref", metavar="ID[@VERSION]")
    p.add_argument("--model", required=True, help="model spec, e.g. anthropic:claude-sonnet-4-5")
    p.add_argument("--var", action="append", default=[], metavar="NAME=VALUE", help="a prompt variable (repeatable)")
    p.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="override a call parameter: temperature, top_p, max_tokens, stop, seed, logprobs",
    )
    p.add_argument("--samples", dest="n", type=int, default=1, help="number of samples (sample indexes 0..N-1)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_prompts_run)


def _add_cache(sub: Any) -> None:
    cache = sub.add_parser("cache", help=help_of("cache")).add_subparsers(
        dest="cache_command", required=True, metavar="ACTION"
    )
    p = cache.add_parser("stats", parents=[cache_parser()], help="entries and size")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_cache_stats)
    p = cache.add_parser("clear", parents=[cache_parser()], help="remove every cached call")
    p.set_defaults(func=cmd_cache_clear)
    p = cache.add_parser(
        "export",
        parents=[cache_parser()],
        help="every cached call as gzipped JSON lines: a measurement's samples, committed beside its record",
    )
    p.add_argument("out", metavar="FILE.jsonl.gz")
    p.set_defaults(func=cmd_cache_export)
    p = cache.add_parser(
        "import",
        parents=[cache_parser()],
        help="an export's calls into the cache (what the cache holds stays): a rerun resumes from them",
    )
    p.add_argument("file", metavar="FILE.jsonl.gz")
    p.set_defaults(func=cmd_cache_import)


def _add_models(sub: Any) -> None:
    models = sub.add_parser("models", help=help_of("models")).add_subparsers(
        dest="models_command", required=True, metavar="ACTION"
    )
    p = models.add_parser("list", help="each registry model: installed or not, size, path, where to get it")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_models_list)
    p = models.add_parser(
        "pull",
        help="download registry models (GGUF files, an NLI checkpoint) from the Hugging Face Hub, checked by sha256",
        description="Download each named registry model (or all) from its publisher's repository on the "
        "Hugging Face Hub (HF_ENDPOINT to use a mirror) into the model cache (HALLUSCOPE_MODELS_DIR), "
        "checked by size and sha256. Offline, the `local` extra's packages carry the same GGUF files. "
        f"{', '.join(CHECKPOINTS)} (run as nli:NAME) has no pinned checksum: its first download is "
        "checked against the Hub's declared sha256s and recorded, and every later pull and load is held to it.",
    )
    p.add_argument(
        "names", nargs="+", metavar="NAME", choices=[*REGISTRY, *CHECKPOINTS, "all"], help="a registry model, or all"
    )
    p.add_argument(
        "--via",
        choices=("hub", "ollama"),
        default="hub",
        help="hub: the GGUF from the Hugging Face Hub (default); ollama: have the Ollama server at OLLAMA_HOST "
        "pull the model's Ollama tag, then run it as --model ollama:TAG",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="download from the Hub even when the model's packages are installed; for a checkpoint, trust and "
        "record the branch's head anew",
    )
    p.set_defaults(func=cmd_models_pull)


def _add_data(sub: Any) -> None:
    data = sub.add_parser("data", help=help_of("data")).add_subparsers(
        dest="data_command", required=True, metavar="ACTION"
    )
    p = data.add_parser("list", help="each dataset: present, partial or missing, where, and its source")
    data_option(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_data_list)
    p = data.add_parser(
        "fetch",
        help="download datasets from their pinned public sources, checked by sha256",
        description="Download each named dataset (or all) from the public repository and commit its "
        "SOURCE.md names, check every file's size and sha256, and write the layout the loaders read.",
    )
    p.add_argument("names", nargs="+", metavar="NAME", choices=[*SOURCES, "all"], help="a dataset, or all")
    data_option(p)
    p.set_defaults(func=cmd_data_fetch)
