"""Probes measured on held-out data against the methods a user would otherwise run: a probe fitted on
one range of items (`halluscope probe fit`'s own ``fit``), then `halluscope choose` on a disjoint range
with the probe among the candidates, so every candidate is scored on the same items with the same
model, its metrics (AUC-ROC and AUC-PR with bootstrap intervals over answers, from each run) and the
stacks `choose` cross-validates by answer.

- ``wikibio``: a sentence probe (WikiBio's annotations: minor or major inaccurate is 1) fitted on
  passages 0-119, against ``selfcheck-unigram`` (WikiBio's 20 GPT-3 samples) and ``token-logprob``
  (read by the same forward pass) on passages 120-237;
- ``triviaqa``: an accuracy probe (the answer at temperature 0.1 is wrong) fitted on questions 0-599,
  against ``token-logprob`` and ``direct-question`` on the question and answer, on questions 600-899,
  and with ``--samples N`` against ``semantic-entropy`` with N answers too (its sampling and judging
  are the hours: a ``--test`` range it has filled can be measured while the rest fills);
- ``triviaqa-sep``: a semantic entropy probe (its label: semantic entropy of ``--samples`` answers,
  judged by the model, split as the paper does) fitted on questions 0-599, predicting the same wrong
  answers as the accuracy probe on questions 600-899, against ``semantic-entropy`` with as many
  samples (hours on 2 cores: it resumes through the cache and its ``choose`` folder);
- ``truthfulqa``: a truth probe (a sentence probe on TruthfulQA's correct and incorrect answers read
  after their question) fitted on questions 0-199, against ``direct-question`` on questions 200-259,
  and on the demo's planted biographies (planted sentences ranked riskiest).

The ranges above are each kind's defaults; ``--fit`` and ``--test`` take others, and every record
states the ranges its run used (the SEP's was fitted on the fit questions semantic entropy had scored,
0-311; the truth probe tested on questions 200-229).

Each also stacks the probe with one other method whatever `choose` keeps (``calibrate``'s stacked
logistic regression, cross-validated by answer on the test items).

Everything goes through one cache (``--cache``): a run that stops resumes, and a rerun replays.

``cost`` times what each check costs per TriviaQA question with nothing cached, one method at a time:
the accuracy probe and ``token-logprob`` (one forward pass each), ``direct-question`` on the answer,
and ``semantic-entropy`` with 5 and 10 samples (its samples and entailment judgements), each given
the question's answer at temperature 0.1 made beforehand (not counted).

    .venv/bin/python benchmarks/probes.py wikibio --model local:qwen2.5-coder-1.5b --cache DIR --out DIR
    .venv/bin/python benchmarks/probes.py cost --probe DIR/probe.json --test 600-604 --cache DIR --out DIR
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import halluscope  # noqa: E402
from halluscope.backends.cache import open_cache  # noqa: E402
from halluscope.backends.gateway import CallStats, Gateway  # noqa: E402
from halluscope.bench.planted import BIOGRAPHIES, riskiest  # noqa: E402
from halluscope.bench.provenance import envelope  # noqa: E402
from halluscope.bench.report import write_json  # noqa: E402
from halluscope.bench.wikibio import load_wikibio  # noqa: E402
from halluscope.cli.flags import passage_range  # noqa: E402
from halluscope.prompts.registry import PromptRegistry  # noqa: E402
from halluscope.runtime import registry
from halluscope.tune import probe_fit as probes  # noqa: E402
from halluscope.tune.calibrate import calibrate_labelled  # noqa: E402
from halluscope.tune.choose import ChooseSettings, choose  # noqa: E402

SETS: dict[str, dict[str, Any]] = {
    "wikibio": {
        "kind": "sentence",
        "fit": "0-119",
        "test": "120-237",
        "against": ["selfcheck-unigram", "token-logprob:max-nll", "token-logprob:avg-nll"],
        "stack": ["probe", "selfcheck-unigram"],
    },
    "triviaqa": {
        "kind": "accuracy",
        "fit": "0-599",
        "test": "600-899",
        "against": ["token-logprob:max-nll", "token-logprob:avg-nll", "direct-question"],
        "stack": ["probe", "token-logprob:max-nll"],
    },
    "triviaqa-sep": {
        "kind": "sep",
        "data": "triviaqa",
        "fit": "0-599",
        "test": "600-899",
        "against": ["semantic-entropy", "token-logprob:max-nll"],
        "stack": ["probe", "semantic-entropy"],
    },
    "truthfulqa": {
        "kind": "sentence",
        "fit": "0-199",
        "test": "200-259",
        "against": ["direct-question"],
        "stack": ["probe", "direct-question"],
    },
}
PER_RUN = ("sentence_auc_roc", "sentence_auc_pr", "answer_auc_roc", "answer_auc_pr", "n_answers", "n_units")


def test_rows(name: str, items: range, examples: list[probes.Example]) -> list[dict[str, Any]]:
    """The held-out items as `choose` reads them: WikiBio's passages with their sentences, samples and
    labels; TruthfulQA's answers, one sentence each; TriviaQA's answers with their grade."""
    if name == "wikibio":
        return [
            {
                "id": f"wikibio-{p.index}",
                "text": p.text,
                "sentences": p.sentences,
                "question": p.prompt,
                "samples": p.samples,
                "labels": [int(label != "accurate") for label in p.labels],
            }
            for p in load_wikibio()
            if p.index in items
        ]
    return [  # TruthfulQA's answers, several a question, grouped by it; TriviaQA's, one a question
        {
            "id": f"{ex.group} answer {k}",
            "group": ex.group,
            "text": ex.text,
            "question": ex.question,
            "label": ex.labels[0],
        }
        for k, ex in enumerate(examples)
        if ex.text
    ]


def planted_hits(probe_path: Path, gateway: Gateway) -> dict[str, Any]:
    """The truth probe on the demo's planted biographies: how often the planted sentence ranks riskiest."""
    detector = halluscope.detector("probe", probe=str(probe_path), gateway=gateway)
    hits = 0
    for bio in BIOGRAPHIES:
        result = detector.detect(text=" ".join(bio.sentences), sentences=list(bio.sentences), question=bio.prompt)
        hits += int(riskiest([u.score for u in result.units]) == [bio.planted])
    return {"planted_riskiest": hits, "biographies": len(BIOGRAPHIES)}


def entropy_spread(found: dict[str, Any], n: int) -> dict[str, int]:
    """How many questions' n answers all differ in meaning (semantic entropy at its largest, ln n) and
    how many all agree (0): where most sit at ln n, semantic entropy has little left to rank them by,
    and the SEP's high/low split has few questions on its low side."""
    scores = [s for item in found["items"] for s in item["scores"].values() if s is not None]
    return {
        "questions": len(scores),
        "all_different": sum(math.isclose(s, math.log(n)) for s in scores),
        "all_same": sum(s == 0 for s in scores),
    }


COSTED: dict[str, dict[str, Any]] = {
    "probe": {},
    "token-logprob": {},
    "direct-question": {},
    "semantic-entropy n=5": {"n": 5},
    "semantic-entropy n=10": {"n": 10},
}


def costs(args: argparse.Namespace) -> None:
    """Calls and seconds per question of each check, nothing cached (the answers made first, through
    ``--cache``, and not counted)."""
    began = time.perf_counter()
    cached = Gateway(cache=open_cache(args.cache), registry=PromptRegistry())
    fresh = Gateway(cache=None, registry=PromptRegistry())
    items = passage_range(args.test or "600-604", "--test")
    answered = probes.answered_examples(
        "accuracy",
        "triviaqa",
        items,
        None,
        answerer=args.model,
        gateway=cached,
        stats=CallStats(),
        n=0,
        judge=None,
        progress=lambda x: x,
    )
    rows = []
    for name, extra in COSTED.items():
        method = name.split()[0]
        options: dict[str, Any] = {"model": args.model, **extra}
        if method == "probe":
            options["probe"] = args.probe
        if method == "semantic-entropy":
            options["judge"] = args.model
        detector = halluscope.detector(method, gateway=fresh, max_calls=None, **options)
        spec = registry.get(method)  # each names the question its own way (direct-question: prompt)
        calls, seconds, tokens = [], [], 0
        for ex in answered:
            item = {spec.question_field: ex.question}
            if spec.answer_field is not None:
                item[spec.answer_field] = ex.text
            started = time.perf_counter()
            result = detector.detect(**item)
            seconds.append(time.perf_counter() - started)
            calls.append(result.meta.calls)
            tokens += result.meta.tokens.prompt
        rows.append(
            {
                "check": name,
                "questions": len(answered),
                "calls per question": sum(calls) / len(calls),
                "seconds per question": sum(seconds) / len(seconds),
                "prompt_tokens": tokens,
            }
        )
        last = rows[-1]
        print(f"{name:24} {last['calls per question']:6.1f} calls {last['seconds per question']:7.2f} s a question")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_json(
        out / "cost.json",
        {
            **envelope(
                models=[args.model],
                items=len(answered),
                item="question",
                calls=int(sum(r["calls per question"] * r["questions"] for r in rows)),
                seconds=time.perf_counter() - began,
                prompt_tokens=sum(r["prompt_tokens"] for r in rows),
            ),
            "test": f"{items.start}-{items.stop - 1}",
            "rows": rows,
        },
    )
    print(f"wrote {out / 'cost.json'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dataset", choices=[*sorted(SETS), "cost"])
    ap.add_argument("--probe", help="cost: the accuracy probe to time")
    ap.add_argument("--model", default="local:qwen2.5-coder-1.5b")
    ap.add_argument("--fit", help="the items to fit on, FIRST-LAST (default: the dataset's)")
    ap.add_argument("--test", help="the items to test on, FIRST-LAST (default: the dataset's)")
    ap.add_argument("--layer", help="layers to choose from (default: probe fit's)")
    ap.add_argument(
        "--samples",
        type=int,
        help="semantic entropy's answers per question: triviaqa-sep's label (default 5); "
        "triviaqa: semantic-entropy with this many is set against the probe",
    )
    ap.add_argument("--cache", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    if args.dataset == "cost":
        costs(args)
        return
    setup = SETS[args.dataset]
    data = setup.get("data", args.dataset)
    samples = args.samples or (5 if setup["kind"] == "sep" else None)
    entropy = {"n": samples, "judge": args.model} if samples else {}
    against = list(setup["against"])
    if samples and "semantic-entropy" not in against:
        against.append("semantic-entropy")
    began = time.perf_counter()
    gateway = Gateway(cache=open_cache(args.cache), registry=PromptRegistry())
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stats = CallStats()
    fit_items = passage_range(args.fit or setup["fit"], "--fit")
    test_items = passage_range(args.test or setup["test"], "--test")

    def bar(it: Any) -> Any:
        return tqdm(list(it), file=sys.stderr, leave=False)

    layers = [int(x) for x in args.layer.split(",")] if args.layer else None
    sep = setup["kind"] == "sep" and entropy
    settings = probes.ProbeFitSettings(
        kind=setup["kind"],
        data=data,
        model=args.model,
        layers=layers,
        items=fit_items,
        **({"n": samples} if sep else {}),
    )
    judge = {"judge": entropy["judge"]} if sep else {}
    fitted, _ = probes.fit(settings, gateway, stats=stats, progress=bar, **judge)
    probe_path = out / "probe.json"
    fitted.save(probe_path)
    print(probes.summary(fitted))
    held: list[probes.Example] = []
    if args.dataset == "truthfulqa":
        held = probes.sentence_examples("truthfulqa", test_items, None)
    elif data == "triviaqa":
        held = probes.answered_examples(
            "accuracy",
            "triviaqa",
            test_items,
            None,
            answerer=args.model,
            gateway=gateway,
            stats=stats,
            n=0,
            judge=None,
            progress=bar,
        )
    rows = test_rows(data, test_items, held)
    choice = choose(
        rows,
        ChooseSettings(methods=["probe", *against], options={"probe": str(probe_path), **entropy}),
        out / "choose",
        model=args.model,
        gateway=gateway,
    )
    runs: dict[str, Any] = {}
    for name in ["probe", *against]:
        found = json.loads((out / "choose" / "runs" / name / "results.json").read_text())
        runs[name] = {
            "metrics": {k: found["metrics"].get(k) for k in PER_RUN},
            "intervals": {k: found["intervals"].get(k) for k in PER_RUN if k in found["intervals"]},
            "calls": found["meta"]["calls"],
            "cache_hits": found["meta"]["cache_hits"],
            "prompt_tokens": found["meta"]["tokens"]["prompt"],
        }
        if name == "semantic-entropy" and samples:
            runs[name]["spread"] = entropy_spread(found, samples)
    chosen = json.loads((out / "choose" / "choose.json").read_text())
    stacked = calibrate_labelled(
        setup["stack"],
        rows,
        out / "stack" / "calibration.json",
        model=args.model,
        gateway=gateway,
        kind="stacked",
        options={"probe": str(probe_path), **entropy},
        progress=False,
        force=True,  # kept whatever its quality: the number is what is reported
    ).report
    stack = {
        "methods": setup["stack"],
        "auc_roc": stacked["test"]["auc_roc"],
        "auc_roc_interval": stacked["quality"]["auc_roc_interval"],
        "auc_pr": stacked["test"]["auc_pr"],
        "held_out": "5-fold cross-validation by answer on the test items",
    }
    extra = planted_hits(probe_path, gateway) if args.dataset == "truthfulqa" else {}
    report = {
        **envelope(
            models=[args.model],
            items=len(rows),
            item="passage" if args.dataset == "wikibio" else "answer",
            calls=stats.calls + sum(r["calls"] for r in runs.values()),
            seconds=time.perf_counter() - began,
            cache_hits=stats.cache_hits + sum(r["cache_hits"] for r in runs.values()),
            prompt_tokens=stats.prompt_tokens + sum(r["prompt_tokens"] for r in runs.values()),
        ),
        "dataset": args.dataset,
        "fit": f"{fit_items.start}-{fit_items.stop - 1}",
        "test": f"{test_items.start}-{test_items.stop - 1}",
        "entropy_samples": samples,
        "probe": fitted.model_dump(mode="json", exclude={"weights", "mean", "scale"}),
        "methods": runs,
        "candidates": chosen["candidates"],
        "stack": stack,
        "recommended": chosen["recommended"],
        **extra,
    }
    write_json(out / "probes.json", report)
    for name, run in runs.items():
        m, ci = run["metrics"], run["intervals"]
        key = "sentence_auc_roc" if m.get("sentence_auc_roc") is not None else "answer_auc_roc"
        print(f"{name:28} AUC-ROC {m[key]:.1f} {[round(x, 1) for x in ci.get(key, [])]}")
    for c in chosen["candidates"]:
        print(f"choose: {c['name']:50} held-out AUC-ROC {c['auc_roc']}")
    print(f"stack {'+'.join(stack['methods'])}: out-of-fold AUC-ROC {stack['auc_roc']:.1f}")
    if extra:
        print(f"planted biographies: {extra['planted_riskiest']} of {extra['biographies']} ranked riskiest")
    print(f"wrote {out / 'probes.json'} (choose recommends {choice.recommended})")


if __name__ == "__main__":
    main()
