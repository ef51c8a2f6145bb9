"""The local models as judges of entailment: the twelve binary probes of tests/test_entailment.py (a
question, an answer and a second answer that means the same or contradicts it), each asked of each
model's LLM judge (``semantic_entropy.entailment``), nothing cached; how many it gets right, what it
answers, and the seconds a pair.

    .venv/bin/python benchmarks/entailment_probes.py --out out/entailment-probes
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from halluscope.backends.entailment import LLMEntailment  # noqa: E402
from halluscope.backends.gateway import CallStats, Gateway  # noqa: E402
from halluscope.bench.provenance import envelope  # noqa: E402
from halluscope.bench.report import markdown_table, write_json  # noqa: E402
from tests.test_entailment import PROBES  # noqa: E402

MODELS = ("local:qwen2.5-coder-1.5b", "local:qwen2.5-coder-0.5b", "local:smollm2-135m")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--note", help="what the record should say of how it ran (other work beside it)")
    ap.add_argument("--out", default="benchmarks/results")
    args = ap.parse_args()
    began = time.perf_counter()
    rows, calls, tokens = [], 0, 0
    for model in args.models.split(","):
        stats = CallStats()
        judge = LLMEntailment(model, gateway=Gateway(cache=None), prompt="semantic_entropy.entailment")
        started = time.perf_counter()
        labels = [judge.judge(a, b, q, stats).label or "unreadable" for q, a, b, _ in PROBES]
        seconds = time.perf_counter() - started
        calls += stats.calls
        tokens += stats.prompt_tokens
        right = sum(label == gold for label, (*_, gold) in zip(labels, PROBES, strict=True))
        rows.append(
            {
                "model": model,
                "correct": right,
                "probes": len(PROBES),
                "answers": dict(Counter(labels)),
                "calls": stats.calls,
                "seconds_per_pair": round(seconds / len(PROBES), 2),
            }
        )
        print(rows[-1], file=sys.stderr)
    print(markdown_table(rows, [(k, k) for k in rows[0]]))
    made = envelope(
        models=list(args.models.split(",")), items=len(PROBES), item="probe", calls=calls,
        seconds=time.perf_counter() - began, prompt_tokens=tokens,
    )  # fmt: skip
    path = Path(args.out) / "entailment_probes.json"
    write_json(path, {**made, "rows": rows, **({"note": args.note} if args.note else {})})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
