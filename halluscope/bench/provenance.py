"""How a run was made: the command, the code's commit, the machine. Every results.json and every
benchmark script's JSON carries it, so a number published from them can say where it came from
(docs/results holds such files as records; benchmarks/render_docs.py renders the documents from them)."""

from __future__ import annotations

import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from halluscope.errors import redact_credentials
from halluscope.version import __version__


def _load() -> float | None:
    return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None


# a benchmark script imports this module as it starts: its envelope, written at its end, reports the load,
# time and commit of then, not its own last minute of work or an edit made while it ran
SCRIPT_STARTED: dict[str, Any] = {"load": _load(), "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def provenance(argv: list[str] | None = None, program: str | None = None) -> dict[str, Any]:
    """The command that is running (``program`` and ``argv``, credentials redacted), the commit of the
    checkout halluscope runs from (None outside a git checkout; ``+dirty`` when it has uncommitted
    changes to tracked files), halluscope's version, the machine, its 1-minute load as the run starts (a
    speed ratio divides only runs made alone) and the start time (UTC)."""
    args = sys.argv[1:] if argv is None else argv
    name = program or _program()
    return {
        "command": redact_credentials(shlex.join([name, *args])),
        "commit": commit(),
        "halluscope": __version__,
        "machine": machine(),
        "load": _load(),  # others at work: was it alone
        "python": platform.python_version(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def machine() -> str:
    """The cores and architecture numbers were measured on ('2 cores, x86_64')."""
    return f"{os.cpu_count()} cores, {platform.machine()}"


def commit(where: Path | None = None) -> str | None:
    """HEAD's short hash of the checkout holding halluscope (``+dirty`` with uncommitted changes to
    tracked files), or None where halluscope is not run from a git checkout."""
    root = where or Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return None
    try:
        head = _git(root, "rev-parse", "--short=12", "HEAD")
        dirty = _git(root, "status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{head}+dirty" if dirty else head


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=10, check=True)
    return done.stdout.strip()


SCRIPT_STARTED["commit"] = commit()  # the code the script runs: what was checked out as it started


def _program() -> str:
    """How the running program was called: 'halluscope' for the CLI, else the script's path."""
    first = Path(sys.argv[0]) if sys.argv and sys.argv[0] else Path("python")
    if first.name in ("halluscope", "__main__.py"):
        return "halluscope"
    return str(first) if first.suffix == ".py" else first.name


def envelope(
    *,
    models: list[str],
    items: int,
    item: str,
    calls: int,
    seconds: float,
    prompt_tokens: int | None,
    unknown: dict[str, str] | None = None,
    **cost: Any,
) -> dict[str, Any]:
    """What a benchmark script's JSON says of itself, so that it can be committed as a record run
    (benchmarks/records.py add): how it was made, what it rests on and what it cost. Every run says what
    its calls sent (``prompt_tokens``, its CallStats' count) or, as None, why that is not known
    (``unknown``, by field, as a record says it); calls whose models reported no usage say so, never 0.
    Its provenance's commit, load and start are the script's as it started (``SCRIPT_STARTED``), not
    its end's."""
    said = dict(unknown or {})
    if calls and not prompt_tokens:
        prompt_tokens = None
        said.setdefault("prompt_tokens", f"the models reported no token usage for these {calls} calls")
    return {
        "provenance": provenance() | SCRIPT_STARTED,  # the commit, load and time as the script started
        "models": models,
        "items": items,
        "item": item,
        "calls": calls,
        "prompt_tokens": prompt_tokens,
        **({"unknown": said} if said else {}),
        "seconds": round(seconds, 1),
        **cost,
    }
