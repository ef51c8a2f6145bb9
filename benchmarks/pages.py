"""The rows a results page prints, prepared from its records: which runs a table holds, their labels and
the figures derived from them (seconds a pair, calls an answer). A template loops over these and prints;
it builds no list, composes no record key and computes no figure (tests/test_docs.py holds it so)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

JUDGES = ("1.5b", "0.5b")
ALL_THREE = "rte train, qnli fit part and wikibio 0-119"


def _per(run: dict[str, Any], value: float) -> float:
    """A run's ``value`` over the items it scored itself (a resumed run's earlier items cost it nothing)."""
    return value / (run["items"] - (run.get("resumed_items") or 0))


def checker(record: Callable[[str], Any]) -> dict[str, Any]:
    """checker.md's rows: each fit and its held-out runs, the judges beside them, WikiBio's table and the
    grounded probe's fits."""
    ck, judges = record("checker")["runs"], record("grounded")["runs"]
    fitted_on = [label.removeprefix("fit on ") for label in ck if label.startswith("fit on ")]
    fits = [{"on": on, "fit": ck[f"fit on {on}"], "rte": ck[f"rte val, fitted on {on}"]} for on in fitted_on]
    for row in fits:
        row["rte_s"] = row["rte"]["seconds"] / row["rte"]["items"]
    rte_judges = [{"size": s, "run": judges[f"rte qwen2.5-coder-{s}"]} for s in JUDGES]
    qnli = [
        {"on": on, "run": ck[f"qnli test, fitted on {on}"]} for on in fitted_on if f"qnli test, fitted on {on}" in ck
    ]
    qnli_judges = {
        s: ck[f"qnli test, grounded with the qwen2.5-coder-{s} judge"]
        for s in JUDGES
        if f"qnli test, grounded with the qwen2.5-coder-{s} judge" in ck
    }
    wikibio = {
        "fitted checker (`nli:`), fitted on rte train and qnli fit part": "fitted on rte train and qnli fit part",
        "fitted checker, fitted on wikibio 0-119": "fitted on wikibio 0-119",
        f"fitted checker, fitted on {ALL_THREE}": f"fitted on {ALL_THREE}",
        "fitted checker, fitted on the 1.5B judge's labels of wikibio 0-119": (
            "fitted on the 1.5b judge's labels of wikibio 0-119"
        ),
        "grounded probe (qwen2.5-coder-0.5b, one forward pass), fitted on wikibio 0-119": (
            "the grounded probe fitted on wikibio 0-119"
        ),
        "grounded, qwen2.5-coder-0.5b judge": "grounded with the qwen2.5-coder-0.5b judge",
        "grounded, qwen2.5-coder-1.5b judge": "grounded with the qwen2.5-coder-1.5b judge",
    }
    wikibio_rows = [
        {"name": name, "run": run, "calls": _per(run, run["calls"]), "seconds": _per(run, run["seconds"])}
        for name, part in wikibio.items()
        if (run := ck.get(f"wikibio 120-237, {part}"))
    ]
    probe_fits = [
        {"on": label.removeprefix("fit of the grounded probe on "), "run": run}
        for label, run in ck.items()
        if label.startswith("fit of the grounded probe on ")
    ]
    for row in probe_fits:
        row["held_out_auc_roc"] = row["run"]["validation"]["per_layer"][str(row["run"]["layer"])]["auc_roc"]
    return {
        "fits": fits,
        "all_three": ALL_THREE,
        "all_three_on_rte": ck.get(f"rte val, fitted on {ALL_THREE}"),
        "rte_judges": [{**j, "seconds": j["run"]["seconds"] / j["run"]["items"]} for j in rte_judges],
        "qnli": [{**q, "seconds": q["run"]["seconds"] / q["run"]["items"]} for q in qnli],
        "qnli_all_three": any(q["on"] == ALL_THREE for q in qnli),
        "qnli_judges": [{"size": s, "run": r, "seconds": r["seconds"] / r["items"]} for s, r in qnli_judges.items()],
        "qnli_judge": qnli_judges,
        "qnli_own_pairs": ck["fit on rte train and qnli fit part"]["pairs"] - ck["fit on rte train"]["pairs"],
        "wikibio": {part: ck.get(f"wikibio 120-237, {part}") for part in wikibio.values()},
        "wikibio_rows": wikibio_rows,
        "probe_fits": probe_fits,
    }


TOKEN_LOGPROB_VARIANTS = ("max-nll", "avg-nll", "avg-entropy", "max-entropy")
FOUR = (
    "token-logprob:avg-nll+token-logprob:max-nll+token-logprob:avg-entropy+token-logprob:max-entropy+selfcheck-unigram"
)


def token_logprob(record: Callable[[str], Any]) -> dict[str, Any]:
    """token-logprob.md's rows: the framing's variants as plain text and as a chat turn and how far the
    framing moves them, how far the other three variants move the stack, and the planted-falsehood runs."""
    framing = record("token-logprob-framing")["runs"]["qwen2.5-coder-1.5b"]
    plain = {row["variant"]: row for row in framing["rows"] if not row["chat"]}
    chat = {row["variant"]: row for row in framing["rows"] if row["chat"]}
    ens = record("token-logprob-ensemble")["runs"]
    stacked = {
        split: abs(
            ens[f"{FOUR} stacked fit {split}"]["auc_roc"]
            - ens[f"token-logprob:avg-nll+selfcheck-unigram stacked fit {split}"]["auc_roc"]
        )
        for split in ("0-39", "0-119")
    }
    planted = record("planted")["runs"]
    return {
        "framing": framing,
        "plain": plain,
        "chat": chat,
        "framing_moves_at_most": max(abs(chat[v]["NonFact AUC-ROC"] - plain[v]["NonFact AUC-ROC"]) for v in chat),
        "three_more_move_at_most": max(stacked.values()),
        "planted": [
            {"variant": v, "run": planted[f"token-logprob:{v} qwen2.5-coder-1.5b"]} for v in TOKEN_LOGPROB_VARIANTS
        ],
    }


def probes(record: Callable[[str], Any]) -> dict[str, Any]:
    """probes.md's figures that join two records: the SEP's semantic-entropy cost a question."""
    sep = record("probes")["runs"][
        "TriviaQA SEP (semantic entropy n=5, no gold answers), qwen2.5-coder-1.5b (local:, last layer)"
    ]
    cost = {row["check"]: row for row in next(iter(record("probe-cost")["runs"].values()))["rows"]}
    return {"sep_entropy_seconds": cost[f"semantic-entropy n={sep['entropy_samples']}"]["seconds per question"]}


PAGES: dict[str, Callable[[Callable[[str], Any]], dict[str, Any]]] = {
    "checker": checker,
    "token-logprob": token_logprob,
    "probes": probes,
}
