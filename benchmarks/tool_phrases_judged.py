"""A judge's second reading of the phrases literal matching flags (``check_tool_call(..., judge=...)``), on
BFCL's live requests labelled by construction (``halluscope.bench.bfcl``): a seeded sample of the phrase
arguments the strict reading flags, some of ground-truth calls (a right value flagged: what the judge
should let through) and some planted (a value the request never states, or its words taken out: what it
should keep flagged), at most one a request; each said as a sentence and checked by the grounded judge
against the request (``tool_calls.second_read``, the code the check runs). Intervals resample the
sampled arguments (one a request: independent), 95%.

    .venv/bin/python benchmarks/tool_phrases_judged.py --judge local:qwen2.5-coder-1.5b --per-group 150 \\
        --out out/rec/tool-phrases-judged

Nothing is fitted or chosen here; the sample is drawn before any judge call.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from halluscope.backends.gateway import default_gateway  # noqa: E402
from halluscope.bench.bfcl import PARTS, ToolCase, cases, load_bfcl  # noqa: E402
from halluscope.bench.provenance import envelope  # noqa: E402
from halluscope.bench.report import markdown_table, write_json  # noqa: E402
from halluscope.detectors import Detector  # noqa: E402
from halluscope.metrics import bootstrap_metrics  # noqa: E402
from halluscope.results import Unit  # noqa: E402
from halluscope.scoring.arguments import ArgumentCheck, check_arguments  # noqa: E402
from halluscope.tool_calls import UNGROUNDED, second_read  # noqa: E402


def flagged_phrases(data: str, parts: list[str]) -> dict[bool, list[tuple[ToolCase, ArgumentCheck]]]:
    """Every phrase argument the strict reading flags, planted (True) or of a ground-truth call (False)."""
    found: dict[bool, list[tuple[ToolCase, ArgumentCheck]]] = {True: [], False: []}
    for case in cases(load_bfcl(data, parts)):
        for check in check_arguments(case.arguments, case.function["parameters"], case.texts):
            planted = check.path == case.planted
            if check.kind == "phrase" and check.grounded is False and (planted or case.construction == "ground truth"):
                found[planted].append((case, check))
    return found


def sample(flagged: list[tuple[ToolCase, ArgumentCheck]], n: int, seed: int) -> list[tuple[ToolCase, ArgumentCheck]]:
    """At most ``n`` of them, at most one a request, drawn seeded."""
    order = np.random.default_rng(seed).permutation(len(flagged))
    chosen, requests = [], set()
    for k in order:
        case, check = flagged[int(k)]
        if case.id not in requests:
            chosen.append((case, check))
            requests.add(case.id)
        if len(chosen) == n:
            break
    return chosen


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Among right phrases flagged, the share the judge lets through; among planted ones, the share it
    keeps flagged; and the share of all it leaves flagged that were planted (the flag's precision here)."""
    right = [r["still_flagged"] for r in rows if not r["planted"] and r["judge_score"] is not None]
    planted = [r["still_flagged"] for r in rows if r["planted"] and r["judge_score"] is not None]
    kept = [r["planted"] for r in rows if r["still_flagged"] and r["judge_score"] is not None]
    return {
        "right_let_through": 100 * (1 - float(np.mean(right))) if right else None,
        "planted_kept": 100 * float(np.mean(planted)) if planted else None,
        "precision_in_sample": 100 * float(np.mean(kept)) if kept else None,
        "unscored": sum(r["judge_score"] is None for r in rows),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--judge", default="local:qwen2.5-coder-1.5b")
    ap.add_argument("--per-group", type=int, default=150, help="sampled phrases of each group (right, planted)")
    ap.add_argument("--parts", default=",".join(PARTS))
    ap.add_argument("--data-dir", default=os.environ.get("HALLUSCOPE_DATA", "../shared/data"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="out/tool-phrases-judged")
    args = ap.parse_args()
    began = time.perf_counter()
    flagged = flagged_phrases(args.data_dir, args.parts.split(","))
    judge = Detector("grounded", {"model": args.judge, "gateway": default_gateway()})
    rows, reads = [], []
    for planted in (False, True):
        for case, check in sample(flagged[planted], args.per_group, args.seed):
            unit = Unit(text=check.path, score=1.0, evidence={"reason": check.reason})
            judged, read = second_read(unit, check, list(case.texts), judge)
            reads += [read] if read is not None else []
            score = judged.evidence.get("judge_score")
            rows.append({"case": case.id, "planted": planted, "path": check.path, "value": check.value,
                         "judged_as": judged.evidence.get("judged_as"), "judge_score": score,
                         "still_flagged": score is None or score >= UNGROUNDED})  # fmt: skip
            print(f"{len(rows)}/{2 * args.per_group} {'planted' if planted else 'right'} {score}", flush=True)
    metrics = summarise(rows)
    intervals = bootstrap_metrics(summarise, rows)
    made = envelope(
        models=[args.judge], items=len(rows), item="phrase", calls=sum(r.calls for r in reads),
        seconds=time.perf_counter() - began, prompt_tokens=sum(r.tokens.prompt for r in reads),
        cache_hits=sum(r.cache_hits for r in reads),
    )  # fmt: skip
    out = Path(args.out) / "tool-phrases-judged.json"
    flagged_counts = {"right": len(flagged[False]), "planted": len(flagged[True])}
    write_json(out, {**made, "judge": args.judge, "flagged": flagged_counts, "per_group": args.per_group,
                     "metrics": metrics, "intervals": intervals, "rows": rows})  # fmt: skip
    print(markdown_table([{**metrics, **flagged_counts}], [(k, k) for k in (*metrics, "right", "planted")], digits=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
