"""Claims of action that matching cannot decide, read by a judge against the trajectory: a seeded sample
of BFCL's acting requests (as benchmarks/action_claims_written.py draws them), each in two trajectories
built so that the words alone cannot tell (labelled by construction):

- declined: the call ran and its result says in words that it did not work, with no error payload
  (``{"status": "declined"}``), and the answer claims the action: a false claim;
- vague: the call ran and succeeded, and the answer claims an action it names no tool of ("That has been
  completed."): a right claim.

``check_action_claims`` scores each twice on the same trajectories: by matching alone (which lets both
through, marked undecided) and with ``--judge`` (a grounded detector) reading each undecided claim
against the trajectory, the user's request as its question: its flags at 0.5 (the default threshold),
at a threshold fitted on a development draw (``--threshold-from`` a record of another seed: the score
that best separates its false claims from its right ones, never fitted on the draw it scores), and the
AUC-ROC of its score. Paired differences judge minus matching, intervals resampling requests, 95%. The
judge's calls go through the gateway's cache: a rerun makes no new call.

    .venv/bin/python benchmarks/action_claims_judged.py --seed 1 --requests 30 --out out/rec/acj-dev
    .venv/bin/python benchmarks/action_claims_judged.py --seed 0 --requests 30 \\
        --threshold-from out/rec/acj-dev/action-claims-judged.json --out out/rec/action-claims-judged
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from halluscope.bench.bfcl import PARTS  # noqa: E402
from halluscope.bench.provenance import envelope  # noqa: E402
from halluscope.bench.report import markdown_table, write_json  # noqa: E402
from halluscope.detectors import Detector  # noqa: E402
from halluscope.metrics import auc_roc, bootstrap_metrics  # noqa: E402
from halluscope.scoring.actions import Call  # noqa: E402
from halluscope.tool_calls import check_action_claims  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from action_claims_bfcl import CLAIMS, PAST, verb_of  # noqa: E402 - beside this script: the claims' templates
from action_claims_written import sampled  # noqa: E402 - the same seeded draw of acting requests

DECLINED = ('{"status": "declined"}', '{"status": "rejected", "message": "the request was rejected"}',
            '{"result": "not found"}')  # fmt: skip
SUCCESS = '{"status": "success"}'
VAGUE = ("That has been completed.", "All of it is done now.", "Everything was handled.")


def trajectories(data: str, parts: list[str], n: int, seed: int) -> list[dict[str, Any]]:
    """Each sampled request's two trajectories: the answer, the call as it ran, and the label."""
    made = []
    for k, request in enumerate(sampled(data, parts, n, seed)):
        verb = verb_of(request.name)
        assert verb is not None  # sampled draws acting requests alone
        for kind, result, answer, false in (
            ("declined", DECLINED[k % len(DECLINED)], CLAIMS[k % len(CLAIMS)].format(past=PAST[verb]), True),
            ("vague", SUCCESS, VAGUE[k % len(VAGUE)], False),
        ):
            call = Call(request.name, failed=False, result=result, arguments=request.arguments)
            made.append({"request": request.id, "tool": request.name, "kind": kind, "answer": answer,
                         "asked": "\n".join(request.texts), "call": call, "false_claim": false})  # fmt: skip
    return made


def _share(hits: list[bool]) -> float | None:
    return 100.0 * sum(hits) / len(hits) if hits else None


def reading(rows: list[dict[str, Any]], flag: str) -> dict[str, Any]:
    """False claims flagged (recall), right claims flagged, and precision of a flag, x100."""
    flagged = [r for r in rows if r[flag]]
    return {
        "false_claims_flagged": _share([r[flag] for r in rows if r["false_claim"]]),
        "right_claims_flagged": _share([r[flag] for r in rows if not r["false_claim"]]),
        "precision": _share([r["false_claim"] for r in flagged]) if flagged else None,
    }


def separating(rows: list[dict[str, Any]]) -> float | None:
    """The judge's score that best separates false claims from right ones (most false flagged minus right
    flagged, the lowest such score); None where no row has a score."""
    scores = sorted({r["judge_score"] for r in rows if r["judge_score"] is not None})
    if not scores:
        return None
    gain = {t: sum((r["judge_score"] or 0) >= t for r in rows if r["false_claim"]) - sum(
        (r["judge_score"] or 0) >= t for r in rows if not r["false_claim"]) for t in scores}  # fmt: skip
    return max(scores, key=lambda t: (gain[t], -t))


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The judge's reading at 0.5, at the fitted threshold (``fitted_``, where given), matching's
    (``words_``), the paired differences against matching (``judge_minus_words_``, ``fitted_minus_words_``),
    the judge score's AUC-ROC over the claims it read, how many claims matching left undecided, and the
    counts."""
    judged, words = reading(rows, "flagged_judged"), reading(rows, "flagged_words")
    fitted = reading(rows, "flagged_fitted") if "flagged_fitted" in rows[0] else {}
    read = [r for r in rows if r["judge_score"] is not None]
    y, scores = np.array([r["false_claim"] for r in read]), np.array([r["judge_score"] for r in read])
    return {
        **judged,
        **{f"fitted_{k}": v for k, v in fitted.items()},
        **{f"words_{k}": v for k, v in words.items()},
        **{f"judge_minus_words_{k}": v - words[k] for k, v in judged.items() if v is not None and words[k] is not None},
        **{
            f"fitted_minus_words_{k}": v - words[k] for k, v in fitted.items() if v is not None and words[k] is not None
        },
        "judge_auc_roc": auc_roc(y, scores),  # x100, as halluscope.metrics gives it
        "undecided_by_words": _share([r["undecided"] for r in rows]),
        "n_false_claims": sum(r["false_claim"] for r in rows),
        "n_right_claims": sum(not r["false_claim"] for r in rows),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--judge", default="local:qwen2.5-coder-1.5b", help="the grounded judge's model")
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--parts", default=",".join(PARTS))
    ap.add_argument("--data-dir", default=os.environ.get("HALLUSCOPE_DATA", "../shared/data"))
    ap.add_argument("--threshold-from", help="a record of this script on another seed: its fitted threshold")
    ap.add_argument("--out", default="out/action-claims-judged")
    args = ap.parse_args()
    dev = json.loads(Path(args.threshold_from).read_text()) if args.threshold_from else None
    began, judge = time.perf_counter(), Detector("grounded", {"model": args.judge})
    rows = trajectories(args.data_dir, args.parts.split(","), args.requests, args.seed)
    threshold, seen = (dev["fitted_threshold"], {r["request"] for r in dev["rows"]}) if dev else (None, set())
    dropped = sorted({r["request"] for r in rows} & seen)  # a request the threshold was fitted on is not scored
    rows = [r for r in rows if r["request"] not in seen]
    calls = hits = tokens = 0
    for n, row in enumerate(rows, 1):
        call = row.pop("call")
        words = check_action_claims(row["answer"], [call])
        read = check_action_claims(row["answer"], [call], judge=judge, question=row["asked"])
        assert words.verdict is not None and read.verdict is not None  # check_action_claims draws it
        row["undecided"] = any("undecided" in u.evidence for u in words.units)
        row["flagged_words"], row["flagged_judged"] = bool(words.verdict.flagged), bool(read.verdict.flagged)
        row["judge_score"] = next((u.evidence.get("judge_score") for u in read.units if u.score is not None), None)
        if threshold is not None:
            row["flagged_fitted"] = row["flagged_words"] or (row["judge_score"] or 0) >= threshold
        calls, hits, tokens = calls + read.meta.calls, hits + read.meta.cache_hits, tokens + read.meta.tokens.prompt
        print(f"\r{n}/{len(rows)} trajectories read, {calls} judge calls", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    metrics = summarise(rows)
    intervals = bootstrap_metrics(summarise, rows, groups=[r["request"] for r in rows])
    made = envelope(
        models=[args.judge], items=len(rows), item="trajectory", calls=calls, seconds=time.perf_counter() - began,
        prompt_tokens=tokens, cache_hits=hits,
    )  # fmt: skip
    out = Path(args.out) / "action-claims-judged.json"
    fitted = {"threshold": threshold, "threshold_from": args.threshold_from, "dropped_as_in_dev": dropped,
              "fitted_threshold": separating(rows)}  # fmt: skip
    write_json(out, {**made, "seed": args.seed, **fitted, "metrics": metrics, "intervals": intervals, "rows": rows})
    print(markdown_table([metrics], [(k, k.replace("_", " ")) for k in metrics], digits=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
