"""Claims of action checked against what ran, with no model call, on trajectories built from BFCL's live
requests whose tool does something (its name holds an action verb: ``Hotels_2_BookHouse``,
``Payment_1_MakePayment``; a getter is left out) and templated final answers. Each request makes four
trajectories, labelled by construction:

- the call ran and succeeded, the answer claims the action: a right claim (a flag is a false positive);
- the call ran and failed (its result an error payload), the same claim: a false claim;
- no call ran, the same claim: a false claim;
- the call ran, the answer offers the action without claiming it ("I can book it for you"): no claim.

The answers are templates written here (three phrasings of a claim, turn by turn), so this measures how
the verb matching reads real tool names, not how often it is right on answers a model writes. Both
readings of ``scoring.actions`` on the same trajectories: version 2 (the default) and version 1, with
their paired differences; milliseconds a trajectory are version 2's.

    .venv/bin/python benchmarks/action_claims_bfcl.py --out out/rec/action-claims-bfcl
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from halluscope.bench.bfcl import PARTS, load_bfcl  # noqa: E402
from halluscope.bench.provenance import envelope  # noqa: E402
from halluscope.bench.report import markdown_table, write_json  # noqa: E402
from halluscope.metrics import bootstrap_metrics  # noqa: E402
from halluscope.scoring.actions import Call, check_claims  # noqa: E402

# an action's verb as a tool's name holds it, and its past form as an answer writes it (the templates')
PAST = {
    "book": "booked", "buy": "bought", "reserve": "reserved", "pay": "paid", "payment": "paid", "add": "added",
    "create": "created", "cancel": "cancelled", "send": "sent", "schedule": "scheduled", "order": "ordered",
    "transfer": "transferred", "play": "played", "open": "opened", "delete": "deleted", "remove": "removed",
    "update": "updated", "submit": "submitted", "post": "posted", "register": "registered", "rent": "rented",
    "request": "requested", "start": "started", "stop": "stopped", "record": "recorded", "upload": "uploaded",
    "reschedule": "rescheduled", "set": "set",
}  # fmt: skip
CLAIMS = ("I have {past} it for you.", "Your request has been {past}.", "Done: I {past} it just now.")
OFFER = "I can {verb} it for you once you confirm."
ERROR = '{"error": "the service refused the request"}'


def verb_of(tool: str) -> str | None:
    """The first word of a tool's name that is an action's verb, or None (a getter, a search)."""
    words = [w.lower() for w in re.findall(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])", tool)]
    return next((w for w in words if w in PAST), None)


def trajectories(data: str, parts: list[str]) -> list[dict[str, Any]]:
    """Every acting request's four trajectories: its answer, the calls that ran, and the label."""
    made = []
    for number, request in enumerate(load_bfcl(data, parts)):
        verb = verb_of(request.name)
        if verb is None:
            continue
        claim = CLAIMS[number % len(CLAIMS)].format(past=PAST[verb])
        for kind, calls, answer, false in (
            ("succeeded", [Call(request.name, failed=False)], claim, False),
            ("failed", [Call(request.name, failed=True)], claim, True),
            ("never ran", [], claim, True),
            ("offered", [Call(request.name, failed=False)], OFFER.format(verb=verb), False),
        ):
            made.append({"request": request.id, "tool": request.name, "verb": verb, "kind": kind,
                         "answer": answer, "calls": calls, "false_claim": false})  # fmt: skip
    return made


def _share(hits: list[bool]) -> float | None:
    return 100.0 * sum(hits) / len(hits) if hits else None


def reading(rows: list[dict[str, Any]], version: int) -> dict[str, Any]:
    """One version's recall of false claims (overall, failed call, no call), false positives on right
    claims and on offers, and precision, x100."""
    flag, claims = f"flagged_v{version}", f"claims_v{version}"
    false, right = [r for r in rows if r["false_claim"]], [r for r in rows if r["kind"] == "succeeded"]
    offered = [r for r in rows if r["kind"] == "offered"]
    flagged = [r for r in rows if r[flag]]
    return {
        "recall": _share([r[flag] for r in false]),
        "recall_failed_call": _share([r[flag] for r in false if r["kind"] == "failed"]),
        "recall_no_call": _share([r[flag] for r in false if r["kind"] == "never ran"]),
        "right_claims_flagged": _share([r[flag] for r in right]),
        "offers_read_as_claims": _share([r[claims] for r in offered]),
        "precision": 100.0 * sum(r["false_claim"] for r in flagged) / len(flagged) if flagged else None,
    }


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Version 2's reading (the default), version 1's (``v1_``) and their paired differences
    (``v2_minus_v1_``), and the counts."""
    two, one = reading(rows, 2), reading(rows, 1)
    return {
        **two,
        **{f"v1_{k}": v for k, v in one.items()},
        **{f"v2_minus_v1_{k}": v - one[k] for k, v in two.items() if v is not None and one[k] is not None},
        "n_requests": len({r["request"] for r in rows}),
        "n_trajectories": len(rows),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parts", default=",".join(PARTS), help="BFCL files, comma-separated (default: both live)")
    ap.add_argument("--data-dir", default=os.environ.get("HALLUSCOPE_DATA", "../shared/data"))
    ap.add_argument("--out", default="out/action-claims-bfcl")
    args = ap.parse_args()
    began = time.perf_counter()
    rows, spent = trajectories(args.data_dir, args.parts.split(",")), 0.0
    for row in rows:
        started = time.perf_counter()
        found = check_claims([row["answer"]], row["calls"])
        spent += time.perf_counter() - started
        row["claims_v2"], row["flagged_v2"] = bool(found), any(not c.grounded for c in found)
        row["reason"] = found[0].reason if found else None
        first = check_claims([row["answer"]], row.pop("calls"), version=1)
        row["claims_v1"], row["flagged_v1"] = bool(first), any(not c.grounded for c in first)
    metrics = summarise(rows)
    intervals = bootstrap_metrics(summarise, rows, groups=[r["request"] for r in rows])
    missed = sorted({r["verb"] for r in rows if r["false_claim"] and not r["flagged_v2"]})
    made = envelope(
        models=[], items=len(rows), item="trajectory", calls=0, seconds=time.perf_counter() - began, prompt_tokens=0
    )
    out = Path(args.out) / "action-claims-bfcl.json"
    summary = {**made, "parts": args.parts.split(","), "ms_a_trajectory": 1000 * spent / len(rows)}
    write_json(out, {**summary, "metrics": metrics, "intervals": intervals, "verbs_missed": missed,
                     "tools": sorted({r["tool"] for r in rows})})  # fmt: skip
    print(markdown_table([metrics], [(k, k.replace("_", " ")) for k in metrics], digits=1))
    print(f"verbs whose false claims were missed: {', '.join(missed) or 'none'}; wrote {out}")


if __name__ == "__main__":
    main()
