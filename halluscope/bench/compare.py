"""Prompt iteration: one benchmark, two versions of a prompt, one side-by-side report.

Both runs share the disk cache, so a stage whose prompt did not change is replayed, not recalled;
the report says how many calls each run made and how many it replayed, which metrics moved, which
items' scores moved most, and the diff of the two prompts.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from halluscope.bench.report import write_json, write_text
from halluscope.bench.runner import RESULTS, BenchResult
from halluscope.errors import ConfigError
from halluscope.prompts.registry import PromptRegistry, PromptTemplate, parse_ref, prompt_diff

Scores = dict[str, float]


def _numbers(obj: Any, prefix: str = "") -> Iterator[tuple[str, float]]:
    """Every finite number under ``obj`` with its dotted path (lists by index, or by 'variant' / 'method')."""
    if isinstance(obj, bool) or obj is None:
        return
    if isinstance(obj, int | float):
        if math.isfinite(obj):
            yield prefix, float(obj)
    elif isinstance(obj, dict):
        for key, value in obj.items():
            yield from _numbers(value, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            keyed = isinstance(value, dict)
            name = (value.get("variant") or value.get("method") or value.get("model")) if keyed else None
            yield from _numbers(value, f"{prefix}[{name or i}]")


def load_results(out: Path) -> list[BenchResult]:
    """The run's BenchResults: OUT/results.json, or one per method (OUT/METHOD/results.json)."""
    if (out / RESULTS).is_file():
        return [BenchResult.read(out)]
    found = [BenchResult.read(d) for d in sorted(out.iterdir()) if (d / RESULTS).is_file()]
    if not found:
        raise ConfigError(f"{out} holds no {RESULTS}")
    return found


def summary_metrics(results: list[BenchResult]) -> Scores:
    if len(results) == 1:
        return dict(_numbers(results[0].metrics, "metrics"))
    return dict(_numbers({r.params["method"]: r.metrics for r in results}))


def item_scores(results: list[BenchResult]) -> Scores:
    """Each item's score(s) by a stable name: method, item id and score name."""
    return {
        f"{r.params['method']} {item.id} {name}": value
        for r in results
        for item in r.items
        for name, value in item.scores.items()
        if value is not None and math.isfinite(value)
    }


def prompt_pair(registry: PromptRegistry, a: str | None, b: str) -> tuple[PromptTemplate, PromptTemplate]:
    """Version A (default: the prompt's current default) and version B of one prompt id."""
    b_id, b_version = parse_ref(b)
    if b_version is None:
        raise ConfigError(f"compare_prompt needs ID@VERSION, got {b!r}", settings=("compare_prompt",))
    if a is not None and parse_ref(a)[0] != b_id:
        raise ConfigError(
            f"prompt {a} and compare_prompt {b} name different prompts", settings=("prompt", "compare_prompt")
        )
    return registry.get(a or b_id), registry.get(b)


def _calls(results: list[BenchResult]) -> tuple[int, int]:
    return sum(r.meta.calls for r in results), sum(r.meta.cache_hits for r in results)


def compare_runs(
    bench: str,
    prompts: tuple[PromptTemplate, PromptTemplate],
    outs: tuple[Path, Path],
    out: Path,
    top: int = 20,
) -> dict[str, Any]:
    """Read the two runs' results.json and write compare.json and compare.md into ``out``."""
    loaded = [load_results(o) for o in outs]
    metrics = [summary_metrics(r) for r in loaded]
    items = [item_scores(r) for r in loaded]
    calls = [_calls(r) for r in loaded]
    metric_rows = [
        {"metric": k, "a": metrics[0].get(k), "b": metrics[1].get(k)}
        for k in sorted(metrics[0].keys() | metrics[1].keys())
    ]
    shared = sorted(items[0].keys() & items[1].keys())
    changes: list[dict[str, Any]] = [
        {"item": k, "a": items[0][k], "b": items[1][k], "change": items[1][k] - items[0][k]} for k in shared
    ]
    changes.sort(key=lambda row: -abs(row["change"]))
    diff = prompt_diff(*prompts)
    report = {
        "bench": bench,
        "a": {"prompt": prompts[0].ref, "out": str(outs[0]), "calls": calls[0][0], "replayed": calls[0][1]},
        "b": {"prompt": prompts[1].ref, "out": str(outs[1]), "calls": calls[1][0], "replayed": calls[1][1]},
        "metrics": metric_rows,
        "items_compared": len(shared),
        "items_changed": sum(1 for row in changes if row["change"] != 0),
        "item_changes": changes,
        "prompt_diff": diff,
    }
    write_json(out / "compare.json", report)
    write_text(out / "compare.md", _markdown(report, top))
    return report


def _cell(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4g}"


def _markdown(report: dict[str, Any], top: int) -> str:
    a, b = report["a"], report["b"]
    lines = [
        f"# {report['bench']}: {a['prompt']} vs {b['prompt']}",
        "",
        f"- A: {a['calls']} model calls made, {a['replayed']} replayed from the cache ({a['out']})",
        f"- B: {b['calls']} model calls made, {b['replayed']} replayed from the cache ({b['out']})",
        "",
        "## Metrics",
        "",
        "| metric | A | B | B - A |",
        "| --- | --- | --- | --- |",
    ]
    for row in report["metrics"]:
        delta = None if row["a"] is None or row["b"] is None else row["b"] - row["a"]
        lines.append(f"| {row['metric']} | {_cell(row['a'])} | {_cell(row['b'])} | {_cell(delta)} |")
    lines += [
        "",
        f"## Item scores: {report['items_changed']} of {report['items_compared']} changed; largest {top}",
        "",
        "| item | A | B | B - A |",
        "| --- | --- | --- | --- |",
    ]
    lines += [
        f"| {r['item']} | {_cell(r['a'])} | {_cell(r['b'])} | {_cell(r['change'])} |"
        for r in report["item_changes"][:top]
    ]
    diff = report["prompt_diff"] or "(the two versions are identical)\n"
    lines += ["", "## Prompt diff", "", "```diff", diff.rstrip("\n"), "```", ""]
    return "\n".join(lines)
