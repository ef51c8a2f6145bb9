"""SelfCheckGPT's own SelfCheckNLI beside halluscope's selfcheck-nli, sentence by sentence, on every WikiBio
passage: ``SelfCheckNLI(nli_model=FOLDER).predict`` on the dataset's GPT-3 samples, against the scores a
halluscope bench wrote to its results.json, both with the same classifier.

The classifier is a tiny DeBERTa-v2 two-way model built offline in the layout of SelfCheckGPT's
potsawee/deberta-v3-large-mnli (``tests/tiny_nli.build_tiny_deberta``: random weights drawn wide enough
that its scores spread over most of [0, 1], a SentencePiece vocabulary trained on the GPT-3 passages,
inputs truncated at 512 tokens, every character of the data in its vocabulary): it tests that the two
compute the same formula from the same model, so
the record keeps the spread of the scores (``score_spread``) beside their largest difference; it cannot
tell how well either detects, nor what the real checkpoint gives (it needs the Hub).

    .venv/bin/python benchmarks/peer_selfcheckgpt_nli.py build /tmp/tiny-deberta --data ../shared/data
    .venv/bin/halluscope bench wikibio --method selfcheck-nli --judge nli:/tmp/tiny-deberta --samples 3 \
        --no-cache --out out/nli
    python3 -m venv /tmp/peer-nli
    /tmp/peer-nli/bin/pip install torch==2.13.0 selfcheckgpt==0.1.7 sentencepiece protobuf "transformers<5"
    /tmp/peer-nli/bin/python benchmarks/peer_selfcheckgpt_nli.py compare out/nli/selfcheck-nli/results.json \\
        --classifier /tmp/tiny-deberta --data ../shared/data --record peers/selfcheckgpt-nli

One difference is a documented choice of the tokenizers, not of the formula: a pair longer than the
model's window is truncated by the tokenizer, and SelfCheckGPT's slow DeBERTa tokenizer keeps one more
token of the sentence than the fast one halluscope's transformers uses when both texts must be cut; the
record counts each passage's truncated pairs and the largest difference where none is.

selfcheckgpt 0.1.7 calls ``tokenizer.batch_encode_plus``, which transformers 5 removed: its venv keeps
transformers 4 (4.57.6 here; halluscope's has 5). ``build`` runs in halluscope's venv and ``compare`` in
the peer's (halluscope is never imported there, nor SelfCheckGPT in halluscope's); the record keeps how
the classifier was built and the sha256 of each of its files, so a test builds the same bytes again and
checks today's scores against the peer's.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shlex
import sys
import time
from importlib.metadata import version
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from records import commit, write  # noqa: E402 - beside this script; stdlib only, as the peer's venv needs

FILE = Path("wikibio_gpt3_hallucination") / "wikibio_gpt3_hallucination.json"
BUILDER = {
    "seed": 0,
    "vocab": 1000,
    "positions": 512,
    "initializer_range": 0.5,
    "character_coverage": 1.0,
    "repeat": 1,
    "words": "every passage's gpt3_text and GPT-3 samples, joined by spaces",
}


def vocabulary_text(data: Path) -> str:
    """What the classifier's SentencePiece vocabulary is trained on: the 238 GPT-3 passages and their
    samples, every character of which it holds (an unknown character before punctuation tokenizes one
    way under transformers 4, which SelfCheckGPT needs, and another under 5: 5 of 238 passages differed
    by up to 0.18 until no character was unknown)."""
    rows = json.loads((data / FILE).read_text(encoding="utf-8"))
    return " ".join(text for p in rows for text in [p["gpt3_text"], *p["gpt3_text_samples"]])


def digests(folder: Path) -> dict[str, str]:
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(folder.iterdir()) if f.is_file()}


def build(folder: Path, data: Path) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.tiny_nli import build_tiny_deberta

    settings = {k: v for k, v in BUILDER.items() if k != "words"}
    build_tiny_deberta(folder, vocabulary_text(data), **settings)
    print(json.dumps(digests(folder), indent=1))


def compare(results: Path, folder: Path, data: Path, name: str) -> None:
    from selfcheckgpt.modeling_selfcheck import SelfCheckNLI

    ours = json.loads(results.read_text(encoding="utf-8"))
    rows = json.loads((data / FILE).read_text(encoding="utf-8"))
    samples = ours["params"]["n"]  # the dataset samples each sentence was checked against
    peer = SelfCheckNLI(nli_model=str(folder), device=None)
    began = time.perf_counter()
    per_passage, worst, worst_whole, sentences, low, high = [], 0.0, 0.0, 0, 1.0, 0.0
    window = peer.tokenizer.model_max_length
    for item in ours["items"]:
        index = item["record"]["index"]
        row = rows[index]
        theirs = [float(x) for x in peer.predict(row["gpt3_sentences"], row["gpt3_text_samples"][:samples])]
        mine = list(item["scores"].values())
        if len(theirs) != len(mine):
            raise SystemExit(f"passage {index}: {len(theirs)} peer scores, {len(mine)} of ours")
        differences = [abs(a - b) for a, b in zip(mine, theirs, strict=True)]
        sentences += len(differences)
        low, high = min(low, *theirs), max(high, *theirs)
        cut = sum(  # pairs longer than the window: the tokenizer truncates them (its own way: see the record)
            len(peer.tokenizer(sentence, sample)["input_ids"]) > window
            for sentence in row["gpt3_sentences"]
            for sample in row["gpt3_text_samples"][:samples]
        )
        per_passage.append(
            {"passage": index, "selfcheckgpt": theirs, "max_abs_difference": max(differences), "truncated_pairs": cut}
        )
        worst = max(worst, max(differences))
        worst_whole = worst_whole if cut else max(worst_whole, max(differences))
    run = {
        "command": shlex.join([sys.executable, *sys.argv]),
        "commit": commit(),
        "recorded": True,
        "machine": "2 cores, x86_64",
        "models": [f"a tiny DeBERTa-v2 two-way classifier built offline ({folder.name})"],
        "items": len(per_passage),
        "item": "passage",
        "sentences": sentences,
        "calls": 0,
        "cache_hits": 0,
        "prompt_tokens": 0,
        "seconds": round(time.perf_counter() - began, 1),
        "peer": {"selfcheckgpt": version("selfcheckgpt"), "transformers": version("transformers")},
        "halluscope_results": {"command": (ours.get("provenance") or {}).get("command"), "samples": samples},
        "classifier": {"builder": "tests/tiny_nli.build_tiny_deberta", **BUILDER, "sha256": digests(folder)},
        "max_abs_difference": worst,
        "max_abs_difference_untruncated": worst_whole,  # passages whose every pair fits the window
        "window": window,
        "score_spread": high - low,  # what a difference is measured against: the scores' own range
        "per_passage": per_passage,
    }
    title = "SelfCheckGPT's own SelfCheckNLI beside halluscope's selfcheck-nli, on the same classifier"
    written = write(name, {"title": title, "runs": {f"selfcheckgpt {version('selfcheckgpt')}": run}})
    print(
        f"{len(per_passage)} passages, {sentences} sentences: scores spread over {high - low:.3g}, largest "
        f"|difference| {worst:.3g} ({worst_whole:.3g} where no pair is truncated); wrote {written}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="step", required=True)
    b = sub.add_parser("build", help="the tiny classifier, in halluscope's venv")
    b.add_argument("folder", type=Path)
    b.add_argument("--data", required=True, type=Path)
    c = sub.add_parser("compare", help="SelfCheckGPT's scores against ours, in the peer's venv")
    c.add_argument("results", type=Path, help="results.json of `halluscope bench wikibio --method selfcheck-nli`")
    c.add_argument("--classifier", required=True, type=Path)
    c.add_argument("--data", required=True, type=Path)
    c.add_argument("--record", required=True, help="the record's name under docs/results (peers/selfcheckgpt-nli)")
    args = ap.parse_args()
    if args.step == "build":
        build(args.folder, args.data)
    else:
        compare(args.results, args.classifier, args.data, args.record)


if __name__ == "__main__":
    main()
