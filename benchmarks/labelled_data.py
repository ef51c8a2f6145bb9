"""Benchmarks as a user's labelled answers (the files `halluscope choose`, `calibrate --data` and `bench
mine` read): RTE's pairs (the hypothesis the answer, the premise its context and its one sample, one
label) and WikiBio's passages (each passage with its prompt, its Wikipedia text as context, its 20
samples, a label per sentence: minor or major inaccurate is 1).

    .venv/bin/python benchmarks/labelled_data.py rte --split val --out out/labelled/rte-val.jsonl
    .venv/bin/python benchmarks/labelled_data.py wikibio --passages 0-119 --out out/labelled/wikibio-0-119.jsonl
    .venv/bin/python benchmarks/labelled_data.py wikibio --passages 40-79 --samples 3 \
        --out out/labelled/wikibio-40-79-s3.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from halluscope.bench.grounded import UNSUPPORTED, load_rte  # noqa: E402
from halluscope.bench.wikibio import load_wikibio  # noqa: E402
from halluscope.cli.flags import passage_range  # noqa: E402


def rte_rows(split: str) -> list[dict[str, object]]:
    return [
        {
            "id": f"rte-{split}-{pair.index}",
            "text": pair.hypothesis,
            "sentences": [pair.hypothesis],
            "context": [pair.premise],
            "samples": [pair.premise],
            "labels": [int(pair.label in UNSUPPORTED)],
        }
        for pair in load_rte(split=split)
    ]


def wikibio_rows(passages: range, data: str | Path | None = None, samples: int = 20) -> list[dict[str, object]]:
    return [
        {
            "id": f"wikibio-{p.index}",
            "text": p.text,
            "sentences": p.sentences,
            "question": p.prompt,
            "context": [p.wiki_text],
            "samples": p.samples[:samples],
            "labels": [int(label != "accurate") for label in p.labels],
        }
        for p in load_wikibio(data)
        if p.index in passages
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dataset", choices=("rte", "wikibio"))
    ap.add_argument("--split", default="val", choices=("val", "train"), help="RTE's split")
    ap.add_argument("--passages", default="0-119", help="WikiBio's passages, FIRST-LAST")
    ap.add_argument("--samples", type=int, default=20, help="WikiBio's samples kept per passage, the first N of 20")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    rows = (
        rte_rows(args.split)
        if args.dataset == "rte"
        else wikibio_rows(passage_range(args.passages, "--passages"), samples=args.samples)
    )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    print(f"wrote {len(rows)} answers to {out}")


if __name__ == "__main__":
    main()
