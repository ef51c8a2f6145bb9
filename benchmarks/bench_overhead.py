"""What a benchmark costs besides its model calls: the 238-passage SelfCheck-Unigram WikiBio bench (no
model calls: tokenising, the journal, the metrics, the bootstrap intervals, the plots and report.html),
the same bench resumed from its journal, and `calibrate` on passages 0-29 / 30-49 run again (scoring
replayed: what is left is the post-scoring work).

Each command runs in a fresh process, so import time is in every row. ``--source DIR`` runs the code
of another checkout of halluscope (e.g. a worktree of an older commit) with this venv: the before and
after of a change, measured the same way on the same machine.

    .venv/bin/python benchmarks/bench_overhead.py [--source DIR ...] [--data DIR] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from halluscope.bench.provenance import commit as _commit
from halluscope.bench.provenance import envelope
from halluscope.bench.report import markdown_table, write_json

REPO = Path(__file__).resolve().parents[1]
COMMANDS = {
    "unigram bench, 238 passages": ["bench", "wikibio", "--method", "selfcheck-unigram", "--out", "{out}/bench"],
    "the same bench, resumed": ["bench", "wikibio", "--method", "selfcheck-unigram", "--out", "{out}/bench"],
    "calibrate 0-29 / 30-49": ["calibrate", "--method", "selfcheck-unigram", "--fit", "0-29", "--test", "30-49"],
    "calibrate again (scores replayed)": [
        "calibrate",
        "--method",
        "selfcheck-unigram",
        "--fit",
        "0-29",
        "--test",
        "30-49",
    ],
}


# the CLI of the checkout named first: its folder ahead of the path, the venv's editable finder (which
# maps halluscope to this checkout whatever the path says) left out
RUN_FROM = (
    "import sys; source = sys.argv.pop(1); "
    "sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, '__module__', '').startswith('__editable__')]; "
    "sys.path.insert(0, source); from halluscope.cli import main; sys.exit(main())"
)


def timed(source: Path, argv: list[str], data: str) -> dict[str, float]:
    """Wall and CPU seconds of ``halluscope ARGV`` run from ``source``'s code."""
    env = {**os.environ, "HALLUSCOPE_DATA": data}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", RUN_FROM, str(source), *argv, "--json"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed in {source}:\n{done.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2)}


def measure(source: Path, data: str) -> dict[str, dict[str, float]]:
    work = Path(tempfile.mkdtemp(prefix="bench-overhead-"))
    try:
        rows = {}
        for name, argv in COMMANDS.items():
            filled = [a.format(out=work) for a in argv]
            if filled[0] == "calibrate":
                filled += ["--out", str(work / "calibration.json")]
            rows[name] = timed(source, filled, data)
        return rows
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", action="append", default=[], help="another checkout to measure (repeatable)")
    ap.add_argument("--data", default=os.environ.get("HALLUSCOPE_DATA", str(REPO.parent / "shared" / "data")))
    ap.add_argument("--out", default="benchmarks/results")
    args = ap.parse_args()
    sources = [Path(s).resolve() for s in args.source] + [REPO]
    measured: dict[str, Any] = {}
    began = time.perf_counter()
    for source in sources:
        label = "this checkout" if source == REPO else str(source)
        measured[label] = measure(source, args.data)
        print(f"measured {label}", file=sys.stderr)
    rows = [
        {
            "command": name,
            **{label: f"{m[name]['wall_s']:.1f} s ({m[name]['cpu_s']:.1f} CPU s)" for label, m in measured.items()},
        }
        for name in COMMANDS
    ]
    print(markdown_table(rows, [("command", "command"), *((label, label) for label in measured)]))
    machine = {"cpus": os.cpu_count(), "python": platform.python_version(), "machine": platform.machine()}
    made = envelope(models=[], items=238, item="passage", calls=0, seconds=time.perf_counter() - began,
                    prompt_tokens=0)  # fmt: skip
    sources_at = {label: _commit(source) for label, source in zip(measured, sources, strict=True)}
    write_json(
        Path(args.out) / "bench_overhead.json", {**made, "machine": machine, "sources": sources_at, "runs": measured}
    )


if __name__ == "__main__":
    main()
