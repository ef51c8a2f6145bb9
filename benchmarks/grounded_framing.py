"""grounded.support@2 (the sentence framed as quoted data: benchmarks/prompts/) against @1 on RTE's
validation pairs, the same model, the same pairs: each prompt's AUC-ROC (not entailed = unsupported) and
the seconds a pair; benchmarks/verdicts.py draws the paired verdict from the rows it keeps. What a prompt
that resists an instruction planted in the sentence (benchmarks/injection_flip.py) costs in ranking.

    .venv/bin/python benchmarks/grounded_framing.py --model local:qwen2.5-coder-1.5b --data ../shared/data

Every call goes through the gateway's cache, so a rerun replays; the record says how many were sent.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from injection_flip import CANDIDATES  # noqa: E402 - beside this script
from records import read, write  # noqa: E402

import halluscope  # noqa: E402
from halluscope.backends.cache import open_cache  # noqa: E402
from halluscope.backends.gateway import CallStats, Gateway  # noqa: E402
from halluscope.bench.grounded import UNSUPPORTED, load_rte  # noqa: E402
from halluscope.bench.provenance import provenance  # noqa: E402
from halluscope.metrics import auc_roc, bootstrap_ci, paired_difference  # noqa: E402
from halluscope.prompts.registry import PromptRegistry  # noqa: E402

VERSIONS = (1, 2)


def scored(model: str, version: int, pairs: list[Any]) -> tuple[list[float], dict[str, Any]]:
    """Each pair's grounded score (1 - p(Yes)) under grounded.support@version, and the run's counts."""
    registry = PromptRegistry([str(CANDIDATES)], [f"grounded.support@{version}"])
    det = halluscope.detector("grounded", model=model, gateway=Gateway.from_env(cache=open_cache(), registry=registry))
    stats, scores, began = CallStats(), [], time.perf_counter()
    for pair in pairs:
        result = det.detect(text=pair.hypothesis, sentences=[pair.hypothesis], context=[pair.premise], stats=stats)
        scores.append(float(result.units[0].score if result.units[0].score is not None else 0.5))
    meta = stats.meta("grounded")
    counts = {"models": meta.models, "calls": meta.calls, "cache_hits": meta.cache_hits,
              "prompt_tokens": meta.tokens.prompt, "seconds": round(time.perf_counter() - began, 1),
              "prompts": meta.prompts}  # fmt: skip
    return scores, counts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="local:qwen2.5-coder-1.5b")
    ap.add_argument("--data", help="the benchmark data directory (or HALLUSCOPE_DATA)")
    ap.add_argument("--limit", type=int, help="the first N validation pairs (default: all 277)")
    ap.add_argument("--record", default="grounded-framing", help="the record's name under docs/results")
    args = ap.parse_args()
    pairs = load_rte(args.data)[: args.limit]
    labels = [int(p.label in UNSUPPORTED) for p in pairs]
    record = read(args.record)
    record["title"] = "grounded.support@2 (the sentence as quoted data) against @1 on RTE validation, by model"
    made = provenance()
    scores: dict[int, list[float]] = {}
    for version in VERSIONS:
        scores[version], counts = scored(args.model, version, pairs)
        y, s = np.asarray(labels), np.asarray(scores[version])
        low_high = bootstrap_ci(auc_roc, y, s)
        name = f"grounded.support@{version} on {args.model}"
        record["runs"][name] = {
            **{k: made[k] for k in ("command", "commit", "machine")},
            "recorded": True,
            **counts,
            "items": len(pairs),
            "item": "RTE validation pair",
            "auc_roc": float(auc_roc(y, s) or 0.0),
            "auc_roc_interval": list(low_high) if low_high else None,
            "seconds_per_pair": counts["seconds"] / len(pairs),
            "rows": [  # a bench's row shape, so benchmarks/verdicts.py pairs the two versions pair by pair
                {"id": str(p.index), "labels": [lab], "scores": {"grounded": x}}
                for p, lab, x in zip(pairs, labels, s.tolist(), strict=True)
            ],
        }
        print(f"{name}: AUC-ROC {record['runs'][name]['auc_roc']:.1f}")
    print(f"@2 - @1 on {args.model}, paired by pair: {paired_difference(labels, scores[2], scores[1]).shown()}")
    print(f"wrote {write(args.record, record)} (benchmarks/verdicts.py decides what it shows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
