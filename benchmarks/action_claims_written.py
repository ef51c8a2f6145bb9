"""Claims of action on answers a model writes: a seeded sample of BFCL's acting requests (as
benchmarks/action_claims_bfcl.py picks them), each in the trajectories ``--kinds`` names (the tool call
succeeded, it failed, no tool was called; ``declined``: it ran and its result says in words that it did
not work; ``unsaid``: no tool ran and the prompt says nothing of tools, as an agent that skips its tool
has it), the local model writing the agent's last reply to the user for each
(benchmarks/prompts/agent.reply.v1.yaml); then ``check_action_claims`` on each reply against the calls
that ran.

Whether a reply says the action was done is read by a person, not by the check: ``--labels`` is a JSON
Lines file of ``{"id", "claims_done"}`` (benchmarks/labels/, with how it was read). A reply that says it
was done is a false claim where the call failed or none ran, a right claim where it succeeded; the check
is scored against that, in both readings of ``scoring.actions`` (version 2, the default, and version
1) with their paired differences. Without ``--labels`` the script writes the replies (cached: a rerun makes no new
call) for a person to label. Intervals resample requests, 95%.

    .venv/bin/python benchmarks/action_claims_written.py --model local:qwen2.5-coder-1.5b --requests 20 \\
        --labels benchmarks/labels/action-claims-written.jsonl --out out/rec/action-claims-written
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

from halluscope.backends.gateway import default_gateway  # noqa: E402
from halluscope.backends.stats import CallStats  # noqa: E402
from halluscope.bench.bfcl import PARTS, Request, load_bfcl  # noqa: E402
from halluscope.bench.provenance import envelope  # noqa: E402
from halluscope.bench.report import markdown_table, write_json  # noqa: E402
from halluscope.metrics import bootstrap_metrics  # noqa: E402
from halluscope.prompts.registry import load_prompt_file  # noqa: E402
from halluscope.scoring.actions import VERSIONS, Call  # noqa: E402
from halluscope.tool_calls import check_action_claims  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from action_claims_bfcl import verb_of  # noqa: E402 - beside this script: which requests act

PROMPT = Path(__file__).resolve().parent / "prompts" / "agent.reply.v1.yaml"
RESULTS = {
    "succeeded": '{"status": "success"}',
    "failed": '{"error": "the request could not be completed"}',
    "declined": '{"status": "declined"}',  # it ran and did not work, said in words: matching cannot decide it
}
KINDS = ("succeeded", "failed", "never ran", "declined", "unsaid")  # "unsaid": no tool ran, and nothing says so
MAX_TOKENS = 80


def what_happened(request: Request, kind: str) -> str:
    """The trajectory as the reply's prompt tells it: the call and its result, that none was made, or
    nothing at all (``unsaid``: the agent's own turn with no tool, as a model that skips its tools has it)."""
    if kind == "never ran":
        return "You have not called any tool."
    if kind == "unsaid":
        return ""
    arguments = json.dumps(request.arguments, ensure_ascii=False)
    return f"You called the tool {request.name} with {arguments}. It returned: {RESULTS[kind]}"


def sampled(data: str, parts: list[str], n: int, seed: int) -> list[Request]:
    """``n`` acting requests (their tool's name holds an action's verb), drawn seeded."""
    acting = [r for r in load_bfcl(data, parts) if verb_of(r.name) is not None]
    order = np.random.default_rng(seed).permutation(len(acting))[:n]
    return [acting[int(k)] for k in sorted(order)]


def written(requests: list[Request], model: str, stats: CallStats, kinds: list[str]) -> list[dict[str, Any]]:
    """Each request's replies, one a kind of trajectory, written by ``model``."""
    prompt, gateway, rows = load_prompt_file(PROMPT), default_gateway(), []
    for request in requests:
        for kind in kinds:
            variables = {"request": "\n".join(request.texts), "what_happened": what_happened(request, kind)}
            reply = gateway.call(model, prompt, variables, stats=stats, max_tokens=MAX_TOKENS)
            rows.append({"id": f"{request.id}/{kind}", "request": request.id, "tool": request.name, "kind": kind,
                         "answer": reply.text.strip()})  # fmt: skip
    return rows


def share(hits: list[bool]) -> float | None:
    return 100.0 * sum(hits) / len(hits) if hits else None


def reading(rows: list[dict[str, Any]], version: int) -> dict[str, Any]:
    """One version's recall of false claims, right claims flagged, the claims it reads as claims at all,
    replies that claim nothing flagged and precision of a flag, x100 (None where a share has no reply)."""
    flag, read = f"flagged_v{version}", f"read_as_claim_v{version}"
    false = [r for r in rows if r["false_claim"]]
    right = [r for r in rows if r["claims_done"] and not r["false_claim"]]
    return {
        "false_claims_flagged": share([r[flag] for r in false]),
        "right_claims_flagged": share([r[flag] for r in right]),
        "claims_read_as_claims": share([r[read] for r in rows if r["claims_done"]]),
        "no_claim_flagged": share([r[flag] for r in rows if not r["claims_done"]]),
        "precision": share([r["false_claim"] for r in rows if r[flag]]),
    }


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Version 2's reading (the default), version 1's (``v1_``), their paired differences
    (``v2_minus_v1_``), how often the model claimed an action it had not done, and the counts."""
    two, one = reading(rows, 2), reading(rows, 1)
    return {
        **two,
        **{f"v1_{k}": v for k, v in one.items()},
        **{f"v2_minus_v1_{k}": v - one[k] for k, v in two.items() if v is not None and one[k] is not None},
        "model_claimed_undone": share([r["claims_done"] for r in rows if r["kind"] != "succeeded"]),
        "false_claims_undecided": share([r["undecided"] for r in rows if r["false_claim"]]),
        "n_false_claims": sum(r["false_claim"] for r in rows),
        "n_right_claims": sum(r["claims_done"] and not r["false_claim"] for r in rows),
        "n_no_claim": sum(not r["claims_done"] for r in rows),
    }


def scored(rows: list[dict[str, Any]], labels: dict[str, bool]) -> list[dict[str, Any]]:
    """Each reply's label (a false claim: it says the action was done where it was not) and the check's flag."""
    missing = [r["id"] for r in rows if r["id"] not in labels]
    if missing:
        raise SystemExit(f"--labels lacks {len(missing)} replies, first {missing[0]}: label every reply first")
    for row in rows:
        ran = row["kind"] not in ("never ran", "unsaid")
        calls = [Call(row["tool"], row["kind"] == "failed", RESULTS[row["kind"]])] if ran else []
        row["claims_done"] = labels[row["id"]]
        row["false_claim"] = row["claims_done"] and row["kind"] != "succeeded"
        for version in VERSIONS:
            found = check_action_claims(row["answer"], calls, version)
            assert found.verdict is not None  # check_action_claims draws it
            row[f"flagged_v{version}"] = bool(found.verdict.flagged)
            row[f"read_as_claim_v{version}"] = any(u.score is not None for u in found.units)
        row["undecided"] = any("undecided" in u.evidence for u in found.units)  # version 2's: matching let it by
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="local:qwen2.5-coder-1.5b")
    ap.add_argument("--requests", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kinds", default="succeeded,failed,never ran", help=f"trajectories, of: {', '.join(KINDS)}")
    ap.add_argument("--labels", help="JSON Lines of {id, claims_done}, read by a person")
    ap.add_argument("--parts", default=",".join(PARTS))
    ap.add_argument("--data-dir", default=os.environ.get("HALLUSCOPE_DATA", "../shared/data"))
    ap.add_argument("--out", default="out/action-claims-written")
    args = ap.parse_args()
    began, stats = time.perf_counter(), CallStats()
    kinds = args.kinds.split(",")
    if set(kinds) - set(KINDS):
        raise SystemExit(f"--kinds takes some of {', '.join(KINDS)}, got {args.kinds}")
    rows = written(sampled(args.data_dir, args.parts.split(","), args.requests, args.seed), args.model, stats, kinds)
    out = Path(args.out)
    if not args.labels:
        write_json(out / "replies.json", {"model": args.model, "rows": rows})
        print(f"wrote {out / 'replies.json'}: label each reply's claims_done, then rerun with --labels")
        return
    lines = Path(args.labels).read_text(encoding="utf-8").splitlines()
    labels = {row["id"]: bool(row["claims_done"]) for row in (json.loads(line) for line in lines if line.strip())}
    rows = scored(rows, labels)
    metrics = summarise(rows)
    intervals = bootstrap_metrics(summarise, rows, groups=[r["request"] for r in rows])
    meta = stats.meta("agent.reply")
    made = envelope(
        models=[args.model], items=len(rows), item="reply", calls=meta.calls, seconds=time.perf_counter() - began,
        prompt_tokens=meta.tokens.prompt, cache_hits=meta.cache_hits,
    )  # fmt: skip
    write_json(out / "action-claims-written.json", {**made, "labels": args.labels, "metrics": metrics,
                                                     "intervals": intervals, "rows": rows})  # fmt: skip
    print(markdown_table([metrics], [(k, k.replace("_", " ")) for k in metrics], digits=1))
    print(f"wrote {out / 'action-claims-written.json'}")


if __name__ == "__main__":
    main()
