"""The committed records under docs/results/: what every published figure rests on.

A record is docs/results/NAME.json: ``{"title": ..., "runs": {LABEL: RUN, ...}}``. Every RUN says how it
was made (``RUN_FIELDS``: the command, the commit, whether a run made it, the models, the items it
rests on, calls, cache hits, prompt tokens, wall seconds) beside its figures (``metrics``,
``intervals``, ``rows``...); a field its run never kept is None, with the reason in ``unknown``. A run
transcribed from an earlier document, not made by a run this round, has ``"recorded": false`` and the
commit of that document; a run that was made but whose command and commit were filled in afterwards
(from its document, and the commit that first committed its figures) has ``"backfilled": true``; a run
made from a checkout with uncommitted changes has a ``+dirty`` commit. Its documents say each.

    .venv/bin/python benchmarks/records.py add grounded "rte 1.5b" out/grounded-rte    # a bench's results.json
    .venv/bin/python benchmarks/records.py add demo default demo.json --run run.json   # a command's JSON
    .venv/bin/python benchmarks/records.py check                                       # every record whole

``add`` reads what the run wrote: a bench's results.json (its meta and provenance), a detection result
(``halluscope demo --json``), or a benchmark script's JSON that carries its ``provenance``; ``--run`` is the
run.json a wrapper wrote when the command itself records no provenance (command, commit, seconds).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
RUN_FIELDS = ("command", "commit", "recorded", "models", "items", "calls", "cache_hits", "prompt_tokens", "seconds")
# a field a run's output never kept (an older run's prompt tokens) is None, and its run's "unknown" says why
NEVER_UNKNOWN = ("command", "commit", "recorded", "models")


def commit() -> str | None:
    """The checkout's commit, ``+dirty`` with uncommitted changes to tracked files, for scripts that run in
    a peer's venv where halluscope (and its bench.provenance) cannot be imported."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True, text=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True)
    except OSError:
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "") if head.returncode == 0 else None


def path_of(name: str) -> Path:
    return RESULTS / f"{name}.json"


def read(name: str) -> dict[str, Any]:
    path = path_of(name)
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {"title": name, "runs": {}}


def write(name: str, record: dict[str, Any]) -> Path:
    path = path_of(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def script_run(
    *,
    models: list[str],
    items: int,
    item: str,
    calls: int,
    seconds: float,
    prompt_tokens: int,
    cache_hits: int = 0,
    **figures: Any,
) -> dict[str, Any]:
    """A benchmark script's run as a record run: how it was made (this process's command, the checkout's
    commit, the machine) and what it cost, beside its figures."""
    import os
    import platform
    import shlex

    return {
        "command": shlex.join([".venv/bin/python", *sys.argv]),
        "commit": commit(),
        "recorded": True,
        "machine": f"{os.cpu_count()} cores, {platform.machine()}",
        "models": models,
        "items": items,
        "item": item,
        "calls": calls,
        "cache_hits": cache_hits,
        "prompt_tokens": prompt_tokens,
        "seconds": round(seconds, 1),
        **figures,
    }


def add_run(name: str, label: str, run: dict[str, Any], title: str) -> Path:
    """Add (or replace) one run of docs/results/NAME.json."""
    record = read(name)
    record["title"] = title
    record.setdefault("runs", {})[label] = run
    return write(name, record)


def bench_run(results: dict[str, Any], keep_items: bool) -> dict[str, Any]:
    """A run from a bench's results.json: its provenance and cost, params, metrics and intervals (and,
    with ``keep_items``, each item's id, labels and scores: ``kept_row``)."""
    meta, made = results["meta"], results.get("provenance") or {}
    run: dict[str, Any] = {
        "command": made.get("command"),
        "commit": made.get("commit"),
        "recorded": True,
        "machine": made.get("machine"),
        "load": made.get("load"),  # the 1-minute load as it started: a speed ratio divides runs made alone
        "models": meta.get("models", []),
        "items": len(results["items"]) + len(results["failures"]),
        "item": results.get("item"),
        "failures": len(results["failures"]),
        "resumed_items": meta.get("params", {}).get("resumed_items", 0),  # scored by an earlier run: no calls here
        "calls": meta["calls"],
        "cache_hits": meta["cache_hits"],
        "prompt_tokens": meta["tokens"]["prompt"],
        "completion_tokens": meta["tokens"]["completion"],
        "seconds": meta["seconds"],
        **evaluated(meta),
        "prompts": meta.get("prompts", []),
        "events": meta.get("events", {}),
        "params": results["params"],
        "metrics": results["metrics"],
        "intervals": results["intervals"],
    }
    if keep_items:
        run["rows"] = [
            kept_row({"id": item["id"], "scores": item["scores"], **item["record"]}) for item in results["items"]
        ]
    return run


ROW_FIELDS = ("id", "index", "labels", "answer_label", "group", "task", "scores")  # what a paired verdict reads


def kept_row(row: dict[str, Any]) -> dict[str, Any]:
    """An item as a record keeps it: its id (and dataset index), labels and scores; its texts, spans and
    evidence stay in the bench's own results, so a record of a thousand sentences stays small."""
    return {k: row[k] for k in ROW_FIELDS if k in row}


def result_run(result: dict[str, Any], wrapper: dict[str, Any], items: int) -> dict[str, Any]:
    """A run from a DetectionResult's JSON (``detect --json``, ``demo --json``) and the wrapper's run.json."""
    meta = result["meta"]
    return {
        **_from_wrapper(wrapper),
        "models": meta.get("models", []),
        "items": items,
        "calls": meta["calls"],
        "cache_hits": meta["cache_hits"],
        "prompt_tokens": meta["tokens"]["prompt"],
        "completion_tokens": meta["tokens"]["completion"],
        **evaluated(meta),
        "prompts": meta.get("prompts", []),
        "evidence": result.get("evidence", {}),
    }


def evaluated(meta: dict[str, Any]) -> dict[str, Any]:
    """The prompt tokens a run's model evaluated against their floor, where the run counted them."""
    params = meta.get("params", {})
    return {k: params[k] for k in ("evaluated_tokens", "floor_tokens", "evaluated_ratio") if k in params}


def made_run(data: dict[str, Any]) -> dict[str, Any]:
    """A run from a script's JSON that says how it was made (its ``provenance``) and what it cost."""
    made = data["provenance"]
    models = data.get("models") or ([data["model"]] if data.get("model") else [])
    return {
        **{k: made.get(k) for k in ("command", "commit", "machine", "load")},
        "recorded": True,
        "models": models,
        "cache_hits": data.get("cache_hits", 0),
        "prompt_tokens": _sent(data),
        **{k: v for k, v in data.items() if k != "provenance"},
    }


def _sent(data: dict[str, Any]) -> int | None:
    """The prompt tokens a script's run says its calls sent (None where its ``unknown`` says why)."""
    if "prompt_tokens" not in data:
        raise SystemExit("this run's JSON records no prompt_tokens: it was made before its script counted them")
    return data["prompt_tokens"]


def _from_wrapper(wrapper: dict[str, Any]) -> dict[str, Any]:
    if not wrapper:
        raise SystemExit("this output records no provenance of its own: give --run RUN.JSON (command, commit, seconds)")
    if wrapper.get("rc"):
        raise SystemExit(f"the run exited {wrapper['rc']}: a failed run is not a record")
    return {
        "command": wrapper["command"],
        "commit": wrapper["commit"],
        "recorded": True,
        "machine": wrapper.get("machine", "2 cores, x86_64"),
        "seconds": wrapper["seconds"],
    }


def problems(name: str, record: Any, commits: bool = True) -> list[str]:
    """What keeps a record from being one: each run must say how it was made (its command one that could
    have made it; with ``commits``, its commit one of this repository's history); each figure quoted from
    a paper (docs/results/papers.json) names its table and where it was read."""
    if isinstance(record, dict) and "papers" in record:
        return [
            f"{name} / {paper} / {table}: no rows, or no 'read_from'"
            for paper, quoted in record["papers"].items()
            for table, figures in quoted["tables"].items()
            if not figures.get("rows") or not figures.get("read_from")
        ]
    if not isinstance(record, dict) or not isinstance(record.get("runs"), dict) or not record["runs"]:
        return [f"{name}: not a record (no runs)"]
    found = []
    for label, run in record["runs"].items():
        missing = [f for f in RUN_FIELDS if f not in run]
        if missing:
            found.append(f"{name} / {label}: no {', '.join(missing)}")
            continue
        said = run.get("unknown") or {}
        unknown = [f for f in RUN_FIELDS if run[f] is None and (f in NEVER_UNKNOWN or not said.get(f))]
        if unknown:
            found.append(f"{name} / {label}: {', '.join(unknown)} unknown, and its 'unknown' does not say why")
        if run["calls"] and run["prompt_tokens"] == 0:
            found.append(
                f"{name} / {label}: {run['calls']} calls sent 0 prompt tokens: record what they sent, or None "
                "with why in its 'unknown'"
            )
        if not isinstance(run["recorded"], bool):
            found.append(f"{name} / {label}: recorded is not true or false")
        if "backfilled" in run and (run["backfilled"] is not True or run["recorded"] is not True):
            found.append(f"{name} / {label}: backfilled is true of a recorded run, or absent")
        if commits and run["commit"] is not None and not commit_exists(str(run["commit"]).removesuffix("+dirty")):
            found.append(f"{name} / {label}: commit {run['commit']} is not in this repository's history")
        wrong = command_problem(run["command"]) if isinstance(run["command"], str) else None
        if wrong:
            found.append(f"{name} / {label}: its command {wrong}")
    return found


_COMMITS: dict[str, bool] = {}


def history() -> str | None:
    """Why this checkout cannot say which commits exist (None: it can): not a git repository, or a shallow clone."""
    found = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=ROOT, capture_output=True, text=True)
    if found.returncode != 0:
        return "this checkout is not a git repository"
    return "this checkout is a shallow clone" if found.stdout.strip() == "true" else None


def commit_exists(sha: str) -> bool:
    """Whether ``sha`` names a commit of this repository (asked of git once per commit)."""
    if sha not in _COMMITS:
        asked = subprocess.run(["git", "cat-file", "-e", f"{sha}^{{commit}}"], cwd=ROOT, capture_output=True)
        _COMMITS[sha] = asked.returncode == 0
    return _COMMITS[sha]


def command_problem(command: str) -> str | None:
    """Why a run's command could not have made it (None: it could): a halluscope command the CLI's parser
    refuses, a script that is not in the repository, or a flag the script does not define. ``bash -c``'s
    command is read inside; environment assignments and a redirection are not part of it."""
    import contextlib
    import io
    import re
    import shlex

    try:
        argv = shlex.split(command)
    except ValueError:
        return "cannot be read (unbalanced quotes)"
    while argv and re.match(r"^[A-Z_][A-Z0-9_]*=", argv[0]):
        argv = argv[1:]
    if argv[:2] == ["bash", "-c"] and len(argv) > 2:
        return command_problem(argv[2])
    argv = argv[: argv.index(">")] if ">" in argv else argv
    if not argv:
        return "is empty"
    if argv[0].endswith("halluscope") or argv[1:3] == ["-m", "halluscope.cli"]:
        rest = argv[1:] if argv[0].endswith("halluscope") else argv[3:]
        from halluscope.cli import build_parser

        said = io.StringIO()
        try:
            with contextlib.redirect_stderr(said):
                build_parser(rest[0] if rest else None).parse_args(rest)
        except SystemExit:
            return f"is refused by the CLI ({said.getvalue().strip().splitlines()[-1][:160]})"
        return None
    script = next((a for a in argv if a.endswith(".py")), None)
    if script is None:
        return "runs no script of the repository"
    path = ROOT / script
    if not path.is_file():
        return f"runs {script}, which is not in the repository"
    source = path.read_text(encoding="utf-8")
    unknown = [a.split("=")[0] for a in argv[argv.index(script) + 1 :] if a.startswith("--")]
    unknown = [flag for flag in unknown if f'"{flag}"' not in source]
    return f"passes {', '.join(unknown)}, which {script} does not define" if unknown else None


def kind(run: dict[str, Any]) -> str:
    """How a run's provenance stands: recorded (made by a run that wrote it down), backfilled (made, its
    command and commit filled in afterwards), from a dirty tree, or unrecorded (transcribed)."""
    if not run.get("recorded"):
        return "unrecorded"
    if run.get("backfilled"):
        return "backfilled"
    return "dirty" if "+dirty" in str(run.get("commit")) else "recorded"


def tally() -> dict[str, list[str]]:
    """Every run by ``kind``: 'record / label' lists."""
    found: dict[str, list[str]] = {"recorded": [], "backfilled": [], "dirty": [], "unrecorded": []}
    for name, record in all_records().items():
        for label, run in (record.get("runs") or {}).items():
            found[kind(run)].append(f"{name} / {label}")
    return found


def all_records() -> dict[str, Any]:
    return {
        p.relative_to(RESULTS).with_suffix("").as_posix(): json.loads(p.read_text(encoding="utf-8"))
        for p in sorted(RESULTS.rglob("*.json"))
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    add = sub.add_parser("add", help="add (or replace) one run of a record from what the run wrote")
    add.add_argument("record", help="the record's name: docs/results/NAME.json")
    add.add_argument("label", help="the run's label inside the record")
    add.add_argument("source", type=Path, help="a bench's --out folder, or a JSON file the command wrote")
    add.add_argument("--run", type=Path, help="the wrapper's run.json (command, commit, seconds)")
    add.add_argument("--items", action="store_true", help="keep every item's scores (a bench's results.json)")
    add.add_argument("--title", help="the record's title, when it is new")
    out = sub.add_parser("add-output", help="add what a command printed (an example transcript) from a wrapper's run")
    out.add_argument("record")
    out.add_argument("label")
    out.add_argument("run", type=Path, help="a folder with the wrapper's run.json and the command's stdout.txt")
    out.add_argument("--models", action="append", default=[], help="the models the command used")
    out.add_argument("--title")
    sub.add_parser("check", help="exit 1 naming every run that does not say how it was made")
    args = ap.parse_args(argv)
    if args.command == "add-output":
        wrapper = json.loads((args.run / "run.json").read_text(encoding="utf-8"))
        run = {
            **_from_wrapper(wrapper),
            "models": args.models,
            "items": 1,
            "item": "command",
            "calls": None,
            "cache_hits": None,
            "prompt_tokens": None,
            "unknown": {
                k: "a transcript: what the command printed says it" for k in ("calls", "cache_hits", "prompt_tokens")
            },
            "cache": wrapper.get("cache"),
            "stdout": (args.run / "stdout.txt").read_text(encoding="utf-8"),
        }
        print(f"wrote {add_run(args.record, args.label, run, args.title or args.record).relative_to(ROOT)}")
        return 0
    if args.command == "check":
        found = [p for name, record in all_records().items() for p in problems(name, record)]
        if found:
            print("\n".join(found))
            return 1
        runs = tally()
        print(f"{len(all_records())} records, every run says how it was made: {len(runs['recorded'])} recorded")
        for what, said in (
            ("backfilled", "made by a run; command and commit filled in afterwards"),
            ("dirty", "made from a checkout with uncommitted changes"),
            ("unrecorded", "transcribed from an earlier document"),
        ):
            print(f"{len(runs[what])} {what} ({said})" + "".join(f"\n  {run}" for run in runs[what]))
        return 0
    source: Path = args.source
    wrapper = json.loads(args.run.read_text()) if args.run else {}
    data = json.loads((source / "results.json" if source.is_dir() else source).read_text(encoding="utf-8"))
    if "bench" in data and "meta" in data:
        run = bench_run(data, args.items)
    elif "units" in data and "meta" in data:
        run = result_run(data, wrapper, items=len(data["units"]))
    elif "provenance" in data and all(k in data for k in ("items", "calls", "seconds")):
        run = made_run(data)
    else:
        raise SystemExit(
            f"{source}: neither a bench's results.json, a detection result nor a script's JSON with its provenance, "
            "items, calls and seconds"
        )
    record = read(args.record)
    if args.title:
        record["title"] = args.title
    record.setdefault("runs", {})[args.label] = run
    print(f"wrote {write(args.record, record).relative_to(ROOT)}: {args.label}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
