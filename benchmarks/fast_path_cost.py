"""What a check costs on the fast paths against the judge: the fitted checker, the 1.5B judge and the
cascade (the checker first, the judge only for units in its uncertainty band), each run on the same
items by the same code in this one process, one after the other, nothing cached.

    .venv/bin/python benchmarks/fast_path_cost.py --checker out/rec/checker-nli --out out/fast-path-cost

RTE's first validation pairs (``--rte N``: a pair is one premise and one hypothesis, one unit) and
WikiBio 120-237's first labelled answers (``--labelled``, as benchmarks/labelled_data.py writes them;
RTE is read from HALLUSCOPE_DATA) (``--wikibio K``: an answer's sentences against its Wikipedia
text, read in chunks) are checked by ``grounded`` on each path. Each path's models are loaded and
warmed on an item outside the timed ones first, so a time is the checks' own. Per path and dataset:
milliseconds a unit, seconds an item, calls an item, and for the cascade the share of units escalated;
the ratios divide the judge's time by each fast path's, runs of this one commit and process.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import halluscope  # noqa: E402
from halluscope.backends.gateway import Gateway  # noqa: E402
from halluscope.bench.grounded import load_rte  # noqa: E402
from halluscope.bench.provenance import envelope  # noqa: E402
from halluscope.bench.report import markdown_table, write_json  # noqa: E402
from halluscope.results import DetectionResult  # noqa: E402

BAND = (0.2, 0.8)  # the cascade's default band (grounded's own)


@dataclass(frozen=True)
class Item:
    """One check's keywords (an answer and its documents) and how many units it scores."""

    text: str
    context: list[str]


def rte_items(count: int) -> list[Item]:
    """RTE validation's first pairs plus one to warm on: each hypothesis against its premise."""
    return [Item(p.hypothesis, [p.premise]) for p in load_rte(limit=count + 1)]


def wikibio_items(labelled: str, count: int) -> list[Item]:
    """The labelled WikiBio answers' first rows plus one to warm on: each answer against its documents."""
    rows = [json.loads(line) for line in Path(labelled).read_text(encoding="utf-8").splitlines()[: count + 1]]
    return [Item(row["text"], list(row["context"])) for row in rows]


def paths(checker: str, judge: str, band: tuple[float, float]) -> dict[str, dict[str, Any]]:
    """Each path's grounded options, its models named as a run's record names them."""
    fast = f"nli:{checker}"
    return {
        "checker": {"model": fast},
        "judge": {"model": judge},
        "cascade": {"model": judge, "fast": fast, "band": band},
    }


def timed(options: dict[str, Any], items: Sequence[Item]) -> tuple[list[DetectionResult], float]:
    """Each item checked on a gateway with no cache, after one warm-up item; the timed items' seconds."""
    det = halluscope.detector("grounded", gateway=Gateway(cache=None), max_calls=None, **options)
    det.detect(text=items[0].text, context=items[0].context)  # loads and warms every model of the path
    started = time.perf_counter()
    results = [det.detect(text=item.text, context=item.context) for item in items[1:]]
    return results, time.perf_counter() - started


def row(path: str, dataset: str, results: list[DetectionResult], seconds: float) -> dict[str, Any]:
    """One path's cost on one dataset, per unit and per item."""
    units = sum(len(r.units) for r in results)
    escalated = sum(int(r.meta.params.get("escalated", 0)) for r in results)
    calls = sum(r.meta.calls for r in results)
    return {
        "path": path,
        "dataset": dataset,
        "items": len(results),
        "units": units,
        "seconds": round(seconds, 2),
        "ms_a_unit": round(1000 * seconds / units, 1),
        "seconds_an_item": round(seconds / len(results), 3),
        "calls": calls,
        "calls_an_item": round(calls / len(results), 2),
        "prompt_tokens": sum(r.meta.tokens.prompt for r in results),
        "escalated_share": round(escalated / units, 3) if path == "cascade" else None,
    }


def ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The judge's seconds a unit over each fast path's, per dataset (runs of this process and commit)."""
    judge = {r["dataset"]: r for r in rows if r["path"] == "judge"}
    return [
        {
            "path": r["path"],
            "dataset": r["dataset"],
            "times_less_than_the_judge": round(judge[r["dataset"]]["seconds"] / r["seconds"], 1),
        }  # fmt: skip
        for r in rows
        if r["path"] != "judge"
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checker", required=True, help="a fitted checker's folder (halluscope checker fit)")
    ap.add_argument("--judge", default="local:qwen2.5-coder-1.5b")
    ap.add_argument("--band", default=f"{BAND[0]},{BAND[1]}", help="the cascade's band, LOW,HIGH")
    ap.add_argument("--rte", type=int, default=60, help="RTE validation pairs timed")
    ap.add_argument("--wikibio", type=int, default=6, help="WikiBio 120-237 answers timed")
    ap.add_argument("--labelled", default="out/labelled/wikibio-120-237.jsonl", help="benchmarks/labelled_data.py's")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    low, high = (float(x) for x in args.band.split(","))
    began = time.perf_counter()
    datasets: dict[str, Callable[[], list[Item]]] = {
        "rte": lambda: rte_items(args.rte),
        "wikibio": lambda: wikibio_items(args.labelled, args.wikibio),
    }
    rows = []
    for dataset, items in datasets.items():
        loaded = items()
        for path, options in paths(args.checker, args.judge, (low, high)).items():
            results, seconds = timed(options, loaded)
            rows.append(row(path, dataset, results, seconds))
            print(json.dumps(rows[-1]), file=sys.stderr)
    columns = [(k, k) for k in ("path", "dataset", "items", "units", "ms_a_unit", "seconds_an_item", "calls_an_item",
                                "escalated_share")]  # fmt: skip
    print(markdown_table(rows, columns))
    shown = ratios(rows)
    print(markdown_table(shown, [(k, k) for k in ("path", "dataset", "times_less_than_the_judge")]))
    made = envelope(
        models=[args.judge, f"nli:{args.checker}"], items=sum(r["items"] for r in rows), item="check",
        calls=sum(r["calls"] for r in rows), seconds=time.perf_counter() - began,
        prompt_tokens=sum(r["prompt_tokens"] for r in rows),
    )  # fmt: skip
    out = Path(args.out)
    write_json(out / "fast-path-cost.json", {**made, "band": [low, high], "rows": rows, "ratios": shown})
    print(f"wrote {out / 'fast-path-cost.json'}")


if __name__ == "__main__":
    main()
