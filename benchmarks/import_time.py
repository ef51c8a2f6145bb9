"""What halluscope costs to import: `import halluscope`, the CLI's --version and --help, `detect --help`
(every method's flags) and a first detector, each in a fresh process, with `python -X importtime`'s
total and the modules it loaded (torch, spaCy, LangChain ...). ``--source DIR`` measures another
checkout of halluscope with this venv (a before and an after in one table).

    .venv/bin/python benchmarks/import_time.py [--source DIR ...] [--runs 5] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from halluscope.bench.report import markdown_table, write_json

REPO = Path(__file__).resolve().parents[1]
WATCHED = ("langchain_core", "langgraph", "numpy", "spacy", "torch", "transformers", "sklearn", "ray")
CLI = "from halluscope.cli import main\ntry:\n    main({!r})\nexcept SystemExit:\n    pass"
CASES = {
    "import halluscope": "import halluscope",
    "halluscope --version": CLI.format(["--version"]),
    "halluscope --help": CLI.format(["--help"]),
    "halluscope detect --help": CLI.format(["detect", "--help"]),
    "halluscope.detector(...)": "import halluscope\nhalluscope.detector('selfcheck-unigram')",
}
# the checkout named first: its folder ahead of the path, the venv's editable finder left out
FROM = (
    "import sys\nsys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, '__module__', '').startswith("
    "'__editable__')]\nsys.path.insert(0, {source!r})\n"
)


def measure(source: Path, code: str, runs: int) -> dict[str, Any]:
    """The median of ``runs`` -X importtime totals (ms) of ``code``, and the watched modules it loaded."""
    probe = (
        FROM.format(source=str(source))
        + code
        + f"\nprint('loaded:', ','.join(m for m in {WATCHED!r} if m in sys.modules))"
    )
    totals, loaded = [], ""
    for _ in range(runs):
        done = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", probe], capture_output=True, text=True, env=dict(os.environ)
        )
        if done.returncode != 0:
            raise SystemExit(f"failed in {source}:\n{done.stderr[-2000:]}")
        # -X importtime lines: 'import time: self | cumulative | name'; the top-level ones are not indented
        tops = [int(m[1]) for m in re.finditer(r"import time:\s+\d+ \|\s+(\d+) \| (\S)", done.stderr)]
        totals.append(sum(tops) / 1000)
        loaded = done.stdout.strip().splitlines()[-1].removeprefix("loaded:").strip()
    return {"ms": round(statistics.median(totals), 1), "loaded": loaded or "-"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", action="append", default=[], help="another checkout to measure (repeatable)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out", default="benchmarks/results")
    args = ap.parse_args()
    sources = [Path(s).resolve() for s in args.source] + [REPO]
    measured = {
        ("this checkout" if s == REPO else str(s)): {case: measure(s, code, args.runs) for case, code in CASES.items()}
        for s in sources
    }
    rows = [
        {"case": case, **{label: f"{m[case]['ms']:.0f} ms ({m[case]['loaded']})" for label, m in measured.items()}}
        for case in CASES
    ]
    print(markdown_table(rows, [("case", "what"), *((label, label) for label in measured)]))
    machine = {"cpus": os.cpu_count(), "python": platform.python_version(), "machine": platform.machine()}
    write_json(Path(args.out) / "import_time.json", {"machine": machine, "runs": args.runs, "measured": measured})


if __name__ == "__main__":
    main()
