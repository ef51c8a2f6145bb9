"""Which model writes better pairs for `checker synth`: each file's claims checked by a judge twice, with
``grounded``: against the one sentence the claim should rest on (it should be supported: the claim says
what its sentence says) and against its document without that sentence (it should not be: else the
pair labelled unsupported is mislabelled, the claim resting on another sentence too). A claim both hold
for makes a clean pair of pairs. The files were made from the same documents with the same seed, so
they hold the same sentences and are paired by document.

    .venv/bin/python benchmarks/synth_quality.py out/rec/synth/wb-0-19-0.5b.jsonl \\
        out/rec/synth/wb-0-19-1.5b.jsonl --judge local:qwen2.5-coder-1.5b --out out/rec/synth-quality

Per file: claims, the share resting on their sentence, the share whose removal holds, the clean share,
the share copied from the sentence word for word; the rows (per claim, both scores) for verdicts.py;
and what the judge's calls cost. The judge is a model, not a person: its verdicts are a proxy.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from halluscope.backends.gateway import default_gateway  # noqa: E402
from halluscope.backends.stats import CallStats  # noqa: E402
from halluscope.bench.provenance import envelope  # noqa: E402
from halluscope.bench.report import markdown_table, write_json  # noqa: E402
from halluscope.tune import synth  # noqa: E402


def words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def claims_of(path: str) -> list[dict[str, Any]]:
    """A synth file's claims: each supported row with the context its unsupported twin holds."""
    rows = [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
    twins = {r["id"].rsplit("/", 1)[0]: r for r in rows if r["labels"] == [1]}
    return [{**r, "without": twins[r["id"].rsplit("/", 1)[0]]["context"][0]} for r in rows if r["labels"] == [0]]


def checked(claims: list[dict[str, Any]], judge: str, stats: CallStats) -> list[dict[str, Any]]:
    """Each claim's two judge scores (``synth.verifier``, the check `checker synth --verify` keeps a claim
    by), and whether it copies its sentence; ``stats`` counts the calls."""
    verified = synth.verifier(judge, default_gateway(), stats)
    rows = []
    for number, claim in enumerate(claims, 1):
        held = verified(claim["text"], claim["rests_on"], claim["without"])
        rows.append(
            {
                "id": claim["id"].rsplit("/", 1)[0],
                "document": claim["document"],
                "claim": claim["text"],
                "sentence": claim["rests_on"],
                "score_against_sentence": held.against_sentence,
                "score_without_sentence": held.without_sentence,
                "rests_on_its_sentence": held.rests_on_its_sentence,
                "removal_holds": held.removal_holds,
                "clean": held.why_dropped is None,
                "copied": words(claim["text"]) == words(claim["rests_on"]),
            }
        )
        print(f"  {number}/{len(claims)} {rows[-1]['id']}: clean={rows[-1]['clean']}", file=sys.stderr)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", help="checker synth's .jsonl files, made from the same documents")
    ap.add_argument("--judge", default="local:qwen2.5-coder-1.5b")
    ap.add_argument("--out", default="out/synth-quality")
    args = ap.parse_args()
    for path in args.files:
        began, stats = time.perf_counter(), CallStats()
        made = json.loads(Path(path).with_suffix(".json").read_text(encoding="utf-8"))
        rows = checked(claims_of(path), args.judge, stats)
        share = {k: sum(r[k] for r in rows) / len(rows) for k in ("rests_on_its_sentence", "removal_holds", "clean")}
        summary = {
            "file": path,
            "writer": made["models"][0],
            "claims": len(rows),
            **share,
            "copied": sum(r["copied"] for r in rows) / len(rows),
            "writer_seconds_a_claim": made["seconds"] / max(1, made["calls"]),
            "writer_load": made["provenance"]["load"],
        }
        record = envelope(
            models=[args.judge], items=len(rows), item="claim", seconds=time.perf_counter() - began,
            calls=stats.calls, cache_hits=stats.cache_hits, prompt_tokens=stats.prompt_tokens,
        )  # fmt: skip
        out = Path(args.out) / f"{Path(path).stem}.json"
        write_json(out, {**record, "judge": args.judge, "threshold": synth.SUPPORTED_BELOW, **summary, "rows": rows})
        print(markdown_table([summary], [(k, k) for k in summary]))
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
