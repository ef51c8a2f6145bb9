"""The cascade's ranking against the 1.5B judge alone, composed from the committed runs of both: a
cascade (``grounded[fast=nli:DIR;band=LOW,HIGH]``) scores a unit as the judge did when the checker's
score lies in the band and as the checker did elsewhere (``tune.cascades.cascaded``: the same pairs, the
same judge), so its scores on RTE validation, WikiBio 120-237, QNLI's test part and RAGTruth's judged
responses follow from the checker's and the judge's runs there with no new call.

    .venv/bin/python benchmarks/cascade_composed.py \\
        --band-from out/rec/mine-wb0-nli/grounded_model=nli_out_rec_checker-nli_/results.json \\
        --share 0.3 --out out/rec/cascade-composed
    .venv/bin/python benchmarks/cascade_composed.py --sets ragtruth --out out/rec/cascade-composed \\
        --band-from "checker-fit:the cascade on rte, composed, its band fitted on wikibio 0-119"

The band is fitted for ``--share`` of units on the checker's scores of answers no test uses (WikiBio
0-119's sentences, a ``bench mine`` run of the checker): never on a test's scores or labels. Per set:
the units escalated, the share of the judge's calls the cascade makes (a unit checks every chunk of its
documents, so WikiBio's are weighed by its passage's chunks), and the composed rows, which
``verdicts.py`` pairs against the judge's: OUT/SET.json, one run a set. ``RECORD:LABEL`` reuses the band
a committed composed run was fitted with, so a set composed later (RAGTruth's, once its judge ran) shares
the earlier sets' band. RAGTruth's run gives the response level only: its records keep no spans.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from halluscope.bench.provenance import envelope  # noqa: E402
from halluscope.bench.ragtruth import load_ragtruth, responses_resampled  # noqa: E402
from halluscope.bench.report import markdown_table, write_json  # noqa: E402
from halluscope.metrics import auc_roc, bootstrap_metrics, unresampled  # noqa: E402
from halluscope.text import chunks_of  # noqa: E402
from halluscope.tune.calibrate import held_out_interval  # noqa: E402
from halluscope.tune.cascades import band_for_share, cascaded  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from verdicts import units_of  # noqa: E402 - beside this script: one reading of a run's rows

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"
SETS = {  # each set's checker run and judge run, as (record, label)
    "rte": (("checker-fit", "rte val, fitted on the nli mix"), ("grounded", "rte qwen2.5-coder-1.5b")),
    "wikibio": (
        ("checker-fit", "wikibio 120-237, fitted on the nli mix"),
        ("checker", "wikibio 120-237, grounded with the qwen2.5-coder-1.5b judge"),
    ),
    "qnli": (
        ("checker-fit", "qnli test, fitted on the nli mix"),
        ("checker-fit", "qnli test, split by question and sentence, grounded with the qwen2.5-coder-1.5b judge"),
    ),
}
RAGTRUTH = (  # the checker's run holds every response the judge's stratified part does
    ("checker-fit", "ragtruth test, fitted on the nli mix"),
    ("checker-fit", "ragtruth test, 150 stratified, grounded with the qwen2.5-coder-1.5b judge"),
)


@functools.cache
def record_of(record: str) -> dict[str, Any]:
    """A committed record, read once however many of its runs are asked for."""
    return json.loads((RESULTS / f"{record}.json").read_text(encoding="utf-8"))


def run_of(record: str, label: str) -> dict[str, Any]:
    return record_of(record)["runs"][label]


def chunk_counts(labelled: str) -> dict[str, int]:
    """How many chunks grounded reads of each labelled answer's documents: a unit's judge calls."""
    rows = [json.loads(line) for line in Path(labelled).read_text(encoding="utf-8").splitlines() if line.strip()]
    return {row["id"]: len(chunks_of(list(row["context"]))) for row in rows}


def ranking(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The rows' unit AUC-ROC (x100) and its 95% interval, resampling rows (a pair, or a passage with all
    its sentences), read as verdicts.py reads them."""
    groups, labels, scores = units_of(rows)
    order = {str(row["id"]): k for k, row in enumerate(rows)}  # rows in their run's order: its bootstrap's draws
    y, s = np.array(labels, dtype=bool), np.array(scores, dtype=np.float64)
    return {"auc_roc": auc_roc(y, s), "interval": held_out_interval(y, s, np.array([order[g] for g in groups]))}


def composed(name: str, band: tuple[float, float], chunks: dict[str, int]) -> dict[str, Any]:
    """One set's cascade: its rows (the checker's rows, the escalated units' scores the judge's), the units
    escalated and the judge calls it makes against the judge alone's."""
    fast_run, judge_run = (run_of(*where) for where in SETS[name])
    judged = {str(r["id"]): r for r in judge_run["rows"]}
    rows, escalated, units, calls, all_calls = [], 0, 0, 0, 0
    for row in fast_run["rows"]:
        other = judged[str(row["id"])]
        if list(other["scores"]) != list(row["scores"]):
            raise SystemExit(f"{name}: {row['id']} holds other units in the judge's run")
        scores, chosen = cascaded(row["scores"], other["scores"], band)
        per_unit = chunks.get(str(row["id"]), 1)  # a pair's premise is one chunk (RTE, QNLI)
        escalated, units = escalated + len(chosen), units + len(scores)
        calls, all_calls = calls + per_unit * len(chosen), all_calls + per_unit * len(scores)
        rows.append({"id": row["id"], "labels": row["labels"], "scores": scores})
    return {
        "set": name,
        "checker_run": list(SETS[name][0]),
        "judge_run": list(SETS[name][1]),
        "units": units,
        "escalated": escalated,
        "judge_calls": calls,
        "judge_alone_calls": all_calls,
        "metrics": {
            "cascade": ranking(rows),
            "judge": ranking([judged[str(r["id"])] for r in fast_run["rows"]]),
            "checker": ranking(fast_run["rows"]),
        },
        "rows": rows,
    }


def responses_summary(records: list[dict[str, Any]], threshold: float) -> dict[str, Any]:
    """RAGTruth's response-level metrics of composed records, unresampled."""
    return unresampled(functools.partial(responses_resampled, records, threshold=threshold), len(records))


def response_level(records: list[dict[str, Any]], threshold: float) -> dict[str, Any]:
    """RAGTruth's response-level metrics of composed records and their intervals, resampling sources as
    ``bench ragtruth`` does."""
    summarise = functools.partial(responses_summary, threshold=threshold)
    resampled = functools.partial(responses_resampled, threshold=threshold)
    groups = [r["group"] for r in records]
    intervals = bootstrap_metrics(summarise, records, resampled=resampled, groups=groups)
    return {"metrics": summarise(records), "intervals": intervals}


def composed_ragtruth(band: tuple[float, float], data: str | None = None) -> dict[str, Any]:
    """RAGTruth's cascade on the judge's responses: each response's units as ``composed`` takes them, a unit's
    judge calls its prompt's chunks; response-level metrics only (the records keep no spans) for the
    cascade, the judge and the checker on the same responses, at their runs' shared threshold."""
    fast_run, judge_run = (run_of(*where) for where in RAGTRUTH)
    threshold = judge_run["params"]["threshold"]
    if fast_run["params"]["threshold"] != threshold:
        raise SystemExit("the checker's and the judge's RAGTruth runs decide at different thresholds")
    fast, about = {r["id"]: r for r in fast_run["rows"]}, {r.id: r for r in load_ragtruth(data)}
    rows, escalated, units, calls, all_calls = [], 0, 0, 0, 0
    records: dict[str, list[dict[str, Any]]] = {"cascade": [], "judge": [], "checker": []}
    for row in judge_run["rows"]:
        quick = fast[row["id"]]
        if list(quick["scores"]) != list(row["scores"]):
            raise SystemExit(f"ragtruth: {row['id']} holds other units in the checker's run")
        scores, chosen = cascaded(quick["scores"], row["scores"], band)
        per_unit = len(chunks_of(list(about[row["id"]].documents)))
        escalated, units = escalated + len(chosen), units + len(scores)
        calls, all_calls = calls + per_unit * len(chosen), all_calls + per_unit * len(scores)
        kept = {k: row[k] for k in ("id", "labels", "answer_label", "group", "task")}
        rows.append({**kept, "scores": scores})
        for name, given in (("cascade", scores), ("judge", row["scores"]), ("checker", quick["scores"])):
            records[name].append({**kept, "model": about[row["id"]].model, "scores": given})
    return {
        "set": "ragtruth",
        "checker_run": list(RAGTRUTH[0]),
        "judge_run": list(RAGTRUTH[1]),
        "threshold": threshold,
        "units": units,
        "escalated": escalated,
        "judge_calls": calls,
        "judge_alone_calls": all_calls,
        "metrics": {name: response_level(found, threshold) for name, found in records.items()},
        "rows": rows,
    }


def fitted_band(band_from: str, share: float) -> tuple[tuple[float, float], dict[str, Any]]:
    """The band for ``share`` of a ``bench mine`` run's unit scores (results.json), or the band a committed
    composed run was fitted with (``RECORD:LABEL``: its own ``band_from`` kept)."""
    if band_from.endswith(".json"):
        fitted_on = json.loads(Path(band_from).read_text(encoding="utf-8"))
        scores = [s for item in fitted_on["items"] for s in item["scores"].values()]
        about = {"results": band_from, "units": len(scores), "method": fitted_on["params"].get("method")}
        return band_for_share(scores, share), about
    record, _, label = band_from.partition(":")
    earlier = run_of(record, label)
    if earlier["share"] != share:
        raise SystemExit(f"{band_from} was fitted for a share of {earlier['share']:g}, not {share:g}")
    return (earlier["band"][0], earlier["band"][1]), {**earlier["band_from"], "as_in": band_from}


def summary_row(s: dict[str, Any]) -> dict[str, Any]:
    """One set's line of the printed table: units, escalations, judge calls and each ranking."""
    ranked = {k: v if "auc_roc" in v else {"auc_roc": v["metrics"]["auc_roc"], "interval": v["intervals"]["auc_roc"]}
              for k, v in s["metrics"].items()}  # fmt: skip
    return {
        "set": s["set"],
        "units": s["units"],
        "escalated": f"{s['escalated']} ({100 * s['escalated'] / s['units']:.1f}%)",
        "judge calls": f"{s['judge_calls']} of {s['judge_alone_calls']} "
        f"({100 * s['judge_calls'] / s['judge_alone_calls']:.1f}%)",
        **{
            f"{k} AUC-ROC": f"{v['auc_roc']:.1f} [{v['interval'][0]:.1f}, {v['interval'][1]:.1f}]"
            for k, v in ranked.items()
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--band-from", required=True, help="a bench mine results.json of the checker on untested "
                    "answers, or RECORD:LABEL of a composed run whose band to reuse")  # fmt: skip
    ap.add_argument("--share", type=float, default=0.3, help="the share of those units the band holds")
    ap.add_argument("--sets", default=",".join(SETS), help=f"among {', '.join([*SETS, 'ragtruth'])}")
    ap.add_argument("--labelled", default="out/labelled/wikibio-120-237.jsonl", help="WikiBio's documents, chunked")
    ap.add_argument("--out", default="out/cascade-composed")
    args = ap.parse_args()
    began = time.perf_counter()
    band, band_from = fitted_band(args.band_from, args.share)
    names = args.sets.split(",")
    unknown = [n for n in names if n not in SETS and n != "ragtruth"]
    if unknown:
        raise SystemExit(f"no composed set {', '.join(unknown)}: the sets are {', '.join([*SETS, 'ragtruth'])}")
    chunks = chunk_counts(args.labelled) if "wikibio" in names else {}
    sets = [composed_ragtruth(band) if n == "ragtruth" else composed(n, band, chunks if n == "wikibio" else {})
            for n in names]  # fmt: skip
    table = [summary_row(s) for s in sets]
    print(f"band {band[0]:g} to {band[1]:g}, fitted for {args.share:g} of {band_from['units']} units of "
          f"{band_from['results']}")  # fmt: skip
    print(markdown_table(table, [(k, k) for k in table[0]]))
    read = [run_of(*where) for s in sets for where in (s["checker_run"], s["judge_run"])]
    made = envelope(
        models=sorted({m for run in read for m in run["models"]}),
        items=sum(s["units"] for s in sets), item="unit", calls=0, seconds=time.perf_counter() - began,
        prompt_tokens=0,
    )  # fmt: skip
    for s in sets:  # a run each, so verdicts.py pairs its rows with the judge's
        path = Path(args.out) / f"{s['set']}.json"
        write_json(path, {**made, "band": list(band), "share": args.share, "band_from": band_from, **s})
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
