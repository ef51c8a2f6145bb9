"""Tool-call arguments checked against the conversation with no model call, on BFCL's live requests
labelled by construction (``halluscope.bench.bfcl``): recall of the planted arguments (a value replaced
by one the request never states, or the request's words for a value taken out), the false positives on
the ground-truth calls (per argument, and per call: the share of right calls a guard would stop), the
precision of a flag in the mix, each by the value's kind and each with an interval that resamples
requests (a request's cases move together); the strict reading (version 1) and the lenient one on the
same cases, with their paired differences; the reasons behind the strict false positives; milliseconds
a call (strict).

    .venv/bin/python benchmarks/tool_args_bfcl.py --out out/rec/tool-args-bfcl

``--parts`` picks BFCL's files (live_simple, live_multiple). A test of the construction, not of any fit:
nothing here is fitted or chosen.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from halluscope.bench.bfcl import PARTS, cases, load_bfcl  # noqa: E402
from halluscope.bench.provenance import envelope  # noqa: E402
from halluscope.bench.report import markdown_table, write_json  # noqa: E402
from halluscope.metrics import bootstrap_metrics  # noqa: E402
from halluscope.scoring.arguments import KINDS, check_arguments  # noqa: E402


def units(data: str, parts: list[str]) -> tuple[list[dict[str, Any]], int, float]:
    """One record per argument that counts: every checked argument of a ground-truth call (negative)
    and the planted argument of a changed call (positive), flagged or not by the strict reading (version
    1) and by the lenient one; with the calls made and the strict reading's total seconds."""
    made, records, spent = cases(load_bfcl(data, parts)), [], 0.0
    for case in made:
        began = time.perf_counter()
        checks = check_arguments(case.arguments, case.function["parameters"], case.texts)
        spent += time.perf_counter() - began
        lenient = {c.path: c for c in check_arguments(case.arguments, case.function["parameters"], case.texts, True)}
        for c in checks:
            if (case.construction == "ground truth" and c.grounded is not None) or c.path == case.planted:
                records.append(
                    {
                        "request": case.id,
                        "case": f"{case.id}/{case.construction}",
                        "construction": case.construction,
                        "kind": c.kind,
                        "planted": case.construction != "ground truth",
                        "flagged": c.grounded is False,
                        "flagged_lenient": lenient[c.path].grounded is False,
                        "reason": c.reason.split(":")[0],
                    }
                )
    return records, len(made), spent


def _share(hits: list[bool]) -> float | None:
    return 100.0 * sum(hits) / len(hits) if hits else None


def reading(records: list[dict[str, Any]], flag: str) -> dict[str, Any]:
    """Recall, false-positive rates (argument and call) and precision of one reading, overall and by
    kind, x100 (``flag``: the record's field that says whether it flagged the argument)."""
    planted = [r for r in records if r["planted"]]
    right = [r for r in records if not r["planted"]]
    calls: dict[str, bool] = {}
    for r in right:
        calls[r["case"]] = calls.get(r["case"], False) or r[flag]
    tp, fp = sum(r[flag] for r in planted), sum(r[flag] for r in right)
    found: dict[str, Any] = {
        "recall": _share([r[flag] for r in planted]),
        "recall_replaced": _share([r[flag] for r in planted if r["construction"] == "replaced"]),
        "recall_removed": _share([r[flag] for r in planted if r["construction"] == "removed"]),
        "argument_false_positive_rate": _share([r[flag] for r in right]),
        "call_false_positive_rate": _share(list(calls.values())),
        "precision": 100.0 * tp / (tp + fp) if tp + fp else None,
    }
    for kind in KINDS:
        found[f"recall_{kind}"] = _share([r[flag] for r in planted if r["kind"] == kind])
        found[f"false_positive_rate_{kind}"] = _share([r[flag] for r in right if r["kind"] == kind])
    return found


HEADLINE = ("recall", "recall_replaced", "recall_removed", "argument_false_positive_rate",
            "call_false_positive_rate", "precision")  # fmt: skip


def summarise(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Both readings (the lenient one's prefixed ``lenient_``), their paired differences on the headline
    rates (``lenient_minus_strict_``), and the counts."""
    strict, lenient = reading(records, "flagged"), reading(records, "flagged_lenient")
    differences = {
        f"lenient_minus_strict_{k}": lenient[k] - strict[k]
        for k in HEADLINE
        if strict[k] is not None and lenient[k] is not None
    }
    counts = {
        "n_planted": sum(r["planted"] for r in records),
        "n_right_arguments": sum(not r["planted"] for r in records),
        "n_right_calls": len({r["case"] for r in records if not r["planted"]}),
    }
    return {**strict, **{f"lenient_{k}": v for k, v in lenient.items()}, **differences, **counts}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parts", default=",".join(PARTS), help="BFCL files, comma-separated (default: both live)")
    ap.add_argument("--data-dir", default=os.environ.get("HALLUSCOPE_DATA", "../shared/data"))
    ap.add_argument("--out", default="out/tool-args-bfcl")
    args = ap.parse_args()
    began = time.perf_counter()
    records, checked, spent = units(args.data_dir, args.parts.split(","))
    metrics = summarise(records)
    intervals = bootstrap_metrics(summarise, records, groups=[r["request"] for r in records])
    reasons = Counter(r["reason"] for r in records if not r["planted"] and r["flagged"])
    by_kind = [
        {
            "kind": kind,
            "planted": sum(r["planted"] and r["kind"] == kind for r in records),
            "recall": metrics[f"recall_{kind}"],
            "right arguments": sum(not r["planted"] and r["kind"] == kind for r in records),
            "false positive rate": metrics[f"false_positive_rate_{kind}"],
            "lenient recall": metrics[f"lenient_recall_{kind}"],
            "lenient false positive rate": metrics[f"lenient_false_positive_rate_{kind}"],
        }
        for kind in KINDS
    ]
    made = envelope(
        models=[],
        items=checked,
        item="tool call",
        calls=0,
        seconds=time.perf_counter() - began,
        prompt_tokens=0,
    )
    out = Path(args.out) / "tool-args-bfcl.json"
    write_json(
        out,
        {
            **made,
            "parts": args.parts.split(","),
            "ms_a_call": 1000 * spent / checked,
            "metrics": metrics,
            "intervals": intervals,
            "by_kind": by_kind,
            "false_positive_reasons": dict(reasons.most_common()),
            "constructions": dict(Counter(r["construction"] for r in records)),
        },
    )
    both = [
        {"reading": name, **{k: metrics[prefix + k] for k in HEADLINE}}
        for name, prefix in (("strict", ""), ("lenient", "lenient_"))
    ]
    print(markdown_table(both, [("reading", "reading"), *((k, k.replace("_", " ")) for k in HEADLINE)], digits=1))
    print(markdown_table(by_kind, [(k, k) for k in by_kind[0]], digits=1))
    print(f"{1000 * spent / checked:.3f} ms a call, {checked:,} calls; false positives by reason: {dict(reasons)}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
