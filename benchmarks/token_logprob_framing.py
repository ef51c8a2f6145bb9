"""Does the framing of token-logprob's proxy reading matter? Each WikiBio passage read as the model's own
chat reply to its prompt (chat=True, the default) or after the prompt as plain text (chat=False), every
variant, on passages 0-39 (344 sentences). The chat=True rows replay `bench wikibio`'s cached reading.

    .venv/bin/python benchmarks/token_logprob_framing.py [--model local:qwen2.5-coder-1.5b] [--out out/framing]
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from halluscope.bench.report import markdown_table, write_json
from halluscope.bench.runner import run
from halluscope.bench.wikibio import wikibio_plans
from halluscope.scoring.token_probability import VARIANTS


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="local:qwen2.5-coder-1.5b")
    p.add_argument("--passages", type=int, default=40)
    p.add_argument("--out", default="out/framing")
    args = p.parse_args()
    rows: list[dict[str, Any]] = []
    for chat in (False, True):
        for variant in VARIANTS:
            options = {"chat": chat, "variant": variant}
            plan = wikibio_plans(["token-logprob"], model=args.model, only=set(range(args.passages)), options=options)[
                0
            ]
            result = run(plan, Path(args.out) / f"chat-{chat}-{variant}", progress=False)
            m = result.metrics
            rows.append(
                {
                    "chat": chat,
                    "variant": variant,
                    "NonFact AUC-ROC": round(m["auc_roc_nonfact"], 2),
                    "NonFact AUC-PR": round(m["auc_pr_nonfact"], 2),
                    "Pearson": round(m["pearson"], 2),
                    "sentences": m["n_sentences"],
                    "forward passes": result.meta.calls,
                }
            )
    print(markdown_table(rows, [(k, k) for k in rows[0]]))
    write_json(Path(args.out) / "framing.json", {"model": args.model, "rows": rows})


if __name__ == "__main__":
    main()
