"""What a guard costs an agent on every answer: each check of the planted biographies, per sentence
against one call per answer, on one local model.

Each of the demo's 8 biographies (one planted falsehood each, `halluscope bench planted`) is checked
as an agent's guard checks an answer: the detector's item made from the answer, its question and its
documents (``Detector.answer_item``), then ``detect``. Nothing is cached: every call and forward pass
is sent, so the latency is the check's own. Per check: planted sentences ranked riskiest (a hit), and
at the check's own decision the planted and the true sentences flagged (a judge's No, score >= 0.5; a
calibrated stack's p >= 0.5; token-logprob alone has no decision without a calibration), calls,
forward passes and prompt tokens sent and evaluated per answer, and the latency per answer (p50, p95:
with 8 answers the p95 is the second slowest). `grounded` reads each biography's true sentences and
the planted detail stated right, as `bench planted --method grounded` does.

`token-logprob` reads the answer's own log-probs, as a generation with ``logprobs=True,
top_logprobs=5`` returns them (made here by one forward pass of the model, the answers not being its
own: ``token_logprob_guard.generated_logprobs``). ``--stack CAL`` adds the ensemble a stacked
calibration names (e.g. the one-call Direct Question with token-logprob's max-nll and avg-nll, fitted
by `halluscope calibrate --data wikibio-0-119.jsonl`), whose token-logprob members read the text by one
forward pass of the model.

    .venv/bin/python benchmarks/guard_cost.py [--model local:qwen2.5-coder-1.5b] [--stack CAL] --out DIR
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import halluscope  # noqa: E402
from benchmarks.token_logprob_guard import generated_logprobs  # noqa: E402
from halluscope.backends.gateway import Gateway  # noqa: E402
from halluscope.backends.providers.llama_cpp import LlamaCppLogProbModel  # noqa: E402
from halluscope.bench.planted import BIOGRAPHIES, Biography, riskiest  # noqa: E402
from halluscope.bench.provenance import envelope  # noqa: E402
from halluscope.bench.report import markdown_table, write_json  # noqa: E402
from halluscope.results import DetectionResult  # noqa: E402

DECISION = 0.5  # a judge's No (p(Yes) below a half), a calibrated probability of a half


def checks(model: str, gateway: Gateway, stack: str | None) -> dict[str, tuple[halluscope.Detector, str | None]]:
    """Each check by name, and what it decides on (None: no decision without a calibration)."""

    def det(method: str, **options: Any) -> halluscope.Detector:
        return halluscope.detector(method, gateway=gateway, max_calls=None, **options)

    found: dict[str, tuple[halluscope.Detector, str | None]] = {
        "direct-question, per sentence": (det("direct-question", model=model), "score"),
        "direct-question:batch, one call": (det("direct-question", model=model, batch=True), "score"),
        "grounded, per sentence": (det("grounded", model=model), "score"),
        "grounded:batch, one call": (det("grounded", model=model, batch=True), "score"),
        "token-logprob max-nll, the answer's log-probs": (det("token-logprob", variant="max-nll"), None),
        "token-logprob avg-nll, the answer's log-probs": (det("token-logprob", variant="avg-nll"), None),
    }
    if stack:
        found[f"stack ({stack})"] = (det("ensemble", model=model, calibration=stack), "probability")
    return found


def check_one(det: halluscope.Detector, bio: Biography, message: AIMessage) -> tuple[DetectionResult, float]:
    item = det.answer_item(str(message.content), bio.prompt, bio.documents, message)
    started = time.perf_counter()
    result = det.detect(**item)
    return result, time.perf_counter() - started


def row(name: str, on: str | None, runs: list[tuple[Biography, DetectionResult, float]]) -> dict[str, Any]:
    """One check's line: what it found, what it flagged, what it cost per answer."""
    answers = len(runs)
    hits = sum(riskiest([u.score for u in r.units]) == [b.planted] for b, r, _ in runs)
    planted_flagged = true_flagged = "n/a"
    if on is not None:
        flagged = [{i for i, u in enumerate(r.units) if (getattr(u, on) or 0.0) >= DECISION} for _, r, _ in runs]
        planted = sum(b.planted in f for (b, _, _), f in zip(runs, flagged, strict=True))
        true = sum(len(f) for f in flagged) - planted
        planted_flagged = f"{planted} of {answers}"
        true_flagged = f"{true} of {sum(len(r.units) - 1 for _, r, _ in runs)}"
    seconds = sorted(s for _, _, s in runs)

    def per_answer(total: float) -> float:
        return round(total / answers, 1)

    return {
        "check": name,
        "planted ranked riskiest": f"{hits} of {answers}",
        "planted flagged": planted_flagged,
        "true flagged": true_flagged,
        "calls / answer": per_answer(sum(r.meta.calls for _, r, _ in runs)),
        "forward passes / answer": per_answer(sum(r.meta.params.get("forward_passes", 0) for _, r, _ in runs)),
        "prompt tokens sent / answer": per_answer(sum(r.meta.tokens.prompt for _, r, _ in runs)),
        "prompt tokens evaluated / answer": per_answer(
            sum(r.meta.params.get("evaluated_tokens", 0) for _, r, _ in runs)
        ),
        "fallbacks": sum(r.meta.events.get("asked_alone", 0) for _, r, _ in runs),
        "p50 ms": round(1000 * statistics.median(seconds)),
        "p95 ms": round(1000 * seconds[min(answers - 1, round(0.95 * (answers - 1)))]),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="local:qwen2.5-coder-1.5b")
    p.add_argument("--stack", help="a stacked calibration file: its ensemble is measured too")
    p.add_argument("--out", default="benchmarks/results")
    args = p.parse_args()
    began = time.perf_counter()
    gateway = Gateway(cache=None)  # every call and forward pass sent: latencies are the work's own
    lm = gateway.logprob_model(args.model)
    if not isinstance(lm, LlamaCppLogProbModel):
        raise SystemExit("the answers' log-probs are read from a local: model")
    messages = {}
    for bio in BIOGRAPHIES:
        text = " ".join(bio.sentences)
        entries = generated_logprobs(lm, bio.prompt, text)
        messages[bio.person] = AIMessage(content=text, response_metadata={"logprobs": {"content": entries}})
    rows, per_biography, calls, prompt_tokens = [], {}, 0, 0
    for name, (det, on) in checks(args.model, gateway, args.stack).items():
        runs = [(bio, *check_one(det, bio, messages[bio.person])) for bio in BIOGRAPHIES]
        rows.append(row(name, on, runs))
        calls += sum(r.meta.calls for _, r, _ in runs)
        prompt_tokens += sum(r.meta.tokens.prompt for _, r, _ in runs)
        per_biography[name] = [
            {"person": b.person, "scores": [u.score for u in r.units], "seconds": round(s, 3), "cost": r.meta.cost()}
            for b, r, s in runs
        ]
        print(rows[-1], file=sys.stderr)
    print(f"guard cost, the planted biographies, {args.model}")
    print(markdown_table(rows, [(k, k) for k in rows[0]]))
    made = envelope(
        models=[args.model],
        items=len(BIOGRAPHIES),
        item="biography",
        calls=calls,
        seconds=time.perf_counter() - began,
        prompt_tokens=prompt_tokens,
    )
    path = Path(args.out) / "guard_cost.json"
    write_json(path, {**made, "stack": args.stack, "rows": rows, "per_biography": per_biography})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
