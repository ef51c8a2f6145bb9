"""The rows a results page prints, prepared from its records: which runs a table holds, their labels and
the figures derived from them (seconds a pair, calls an answer). A template loops over these and prints;
it builds no list, composes no record key and computes no figure (tests/test_docs.py holds it so)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

JUDGES = ("1.5b", "0.5b")
ALL_THREE = "rte train, qnli fit part and wikibio 0-119"
QNLI_SPLIT_RUN = "qnli test, split by question and sentence"  # the judges' runs on QNLI's current test part


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
        {"on": on, "run": ck[f"qnli test, refitted on {on}"], "fit": ck[f"refit on {on}"]}
        for on in fitted_on
        if f"qnli test, refitted on {on}" in ck
    ]
    split = record("checker-fit")["runs"]
    qnli_judges = {
        s: split[f"{QNLI_SPLIT_RUN}, grounded with the qwen2.5-coder-{s} judge"]
        for s in JUDGES
        if f"{QNLI_SPLIT_RUN}, grounded with the qwen2.5-coder-{s} judge" in split
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
        "qnli": [{**q, "seconds": _per(q["run"], q["run"]["seconds"])} for q in qnli],
        "qnli_all_three": any(q["on"] == ALL_THREE for q in qnli),
        "qnli_judges": [
            {"size": s, "run": r, "seconds": None if r.get("resumed_items") else r["seconds"] / r["items"]}
            for s, r in qnli_judges.items()
        ],
        "qnli_own_pairs": ck["refit on rte train and qnli fit part"]["pairs"] - ck["refit on rte train"]["pairs"],
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
        "one_hit_points": _one_hit(planted["token-logprob:max-nll qwen2.5-coder-1.5b"]),
    }


def probes(record: Callable[[str], Any]) -> dict[str, Any]:
    """probes.md's figures that join two records or derive from a run's counts: the SEP's fit questions
    on either side of its split, the questions semantic entropy's sampling had not reached and their
    hours at its cost a question, and the ten-sample run's hours and unmeasured questions."""
    runs = record("probes")["runs"]
    sep = runs["TriviaQA SEP (semantic entropy n=5, no gold answers), qwen2.5-coder-1.5b (local:, last layer)"]
    accuracy = runs["TriviaQA, qwen2.5-coder-1.5b (local:, last layer)"]
    five = runs["TriviaQA against semantic entropy (n=5), qwen2.5-coder-1.5b (local:, last layer)"]
    ten = runs["TriviaQA against semantic entropy (n=10), questions 600-674, qwen2.5-coder-1.5b (local:, last layer)"]
    cost = {row["check"]: row for row in next(iter(record("probe-cost")["runs"].values()))["rows"]}
    sep_seconds = cost[f"semantic-entropy n={sep['entropy_samples']}"]["seconds per question"]
    ten_seconds = cost["semantic-entropy n=10"]["seconds per question"]
    questions = five["methods"]["semantic-entropy"]["spread"]["questions"]
    fit = sep["probe"]["data"]["groups"]
    unsampled = accuracy["probe"]["data"]["groups"] - fit
    return {
        "sep_entropy_seconds": sep_seconds,
        "unsampled_questions": unsampled,
        "unsampled_hours": unsampled * sep_seconds / 3600,
        "below_split": round(fit * (1 - sep["probe"]["base_rate"])),
        "above_split": round(fit * sep["probe"]["base_rate"]),
        "ten_samples_hours": ten_seconds * questions / 3600,
        "ten_samples_unmeasured": questions - ten["methods"]["probe"]["metrics"]["n_answers"],
    }


def _one_hit(planted: dict[str, Any]) -> float:
    """Points of the hit rate one biography moves on a planted run."""
    return 100 / planted["metrics"]["biographies"]


def calibrated_risk(record: Callable[[str], Any]) -> dict[str, Any]:
    """calibrated-risk.md's held-out base rate, the Brier score of predicting it, and one planted hit."""
    v1 = record("calibrated-risk")["runs"]["selfcheck-prompt isotonic fit 0-39"]
    base = v1["test_inaccurate"] / v1["test_sentences"]
    planted = record("planted")["runs"]["direct-question qwen2.5-coder-1.5b"]
    return {"base_rate": base, "base_rate_brier": base * (1 - base), "one_hit_points": _one_hit(planted)}


def clue(record: Callable[[str], Any]) -> dict[str, Any]:
    """clue.md's cost a question of the QNLI run."""
    run = record("clue")["runs"]["qnli theta 0.6 / 0.2"]
    questions = run["metrics"]["questions"]
    return {
        "calls_per_question": round(run["calls"] / questions),
        "minutes_per_question": run["seconds"] / 60 / questions,
    }


def delimit(record: Callable[[str], Any]) -> dict[str, Any]:
    """delimit.md's calls on 40 passages (a sentence and sample each) and the passages the resumed v1 run scored."""
    v40 = record("delimit")["runs"]["first 40, v1"]
    return {
        "calls_40": v40["metrics"]["n_sentences"] * v40["params"]["n"],
        "scored_40": v40["items"] - v40["resumed_items"],
    }


FEWL_PAPER_ROWS = {  # our variant: its row of the paper's Table 3 (or 10)
    "single": ("Table 3", "single + no penalty"),
    "single+penalty": ("Table 3", "single + penalty"),
    "multi": ("Table 3", "multi + no penalty"),
    "fewl": ("Table 3", "FEWL"),
    "fewl-uniform": ("Table 10", "FEWL (uniform lambda)"),
}


def fewl(record: Callable[[str], Any]) -> dict[str, Any]:
    """fewl.md's paper column: the share of Table 3's questions where each variant's best answer is the
    highest of all, for the GPT-3.5 and GPT-4 references."""
    tables = record("papers")["papers"]["fewl"]["tables"]
    questions = tables["Table 3"]["questions"]
    paper = {}
    for variant, (table, row) in FEWL_PAPER_ROWS.items():
        counts = tables[table]["rows"][row]
        paper[variant] = {ref: 100 * counts[ref] / questions for ref in ("gpt_3_5", "gpt_4")}
    return {"paper": paper}


def grounded(record: Callable[[str], Any]) -> dict[str, Any]:
    """grounded.md's counts and rates derived from its runs: RTE's entailed pairs and those openevals did
    not score, the SmolLM2 record's missing calls and their tokens, WikiBio's checks and resumed
    sentences, and passages 0-59's inaccurate sentences, cost a check and hours for all 238 passages."""
    g, cmp = record("grounded")["runs"], record("grounded-compared")["runs"]
    rte, wb = cmp["rte"], cmp["wikibio 0-9"]
    smol, earlier = g["rte smollm2-135m"], g["rte smollm2-135m, the earlier record"]
    missing = earlier["items"] - earlier["calls"]
    dq = g["wikibio 0-9 direct-question qwen2.5-coder-1.5b"]
    g60 = g["wikibio 0-59 grounded top_k=1 qwen2.5-coder-1.5b"]
    base = g60["metrics"]["random_auc_pr_nonfact"] / 100
    return {
        "rte_entailed": rte["items"] - rte["positives"],
        "openevals_unscored": rte["items"] - rte["rows"]["openevals-continuous"]["scored_items"],
        "smol_missing": missing,
        "smol_missing_tokens": (smol["prompt_tokens"] - earlier["prompt_tokens"]) / missing,
        "smol_tokens_per_call": smol["prompt_tokens"] / smol["calls"],
        "dq_resumed": wb["items"] - dq["calls"] - dq["cache_hits"],
        "wb_inaccurate_share": 100 * wb["positives"] / wb["items"],
        "g60_inaccurate": g60["metrics"]["n_sentences"] * base,
        "g60_base_rate": base,
        "g60_seconds_per_check": g60["seconds"] / g60["calls"],
        "g60_tokens_per_check": g60["prompt_tokens"] / g60["calls"],
        "all_passages_hours": g60["seconds"] / g60["calls"] * ALL_WIKIBIO_SENTENCES / 3600,
        "all_wikibio_sentences": ALL_WIKIBIO_SENTENCES,
    }


ALL_WIKIBIO_SENTENCES = 1908  # WikiBio's 238 passages (SOURCE.md)

ONE_CALL_GAPS = {  # a method: its (version 1, one call) run pairs on the same items
    "direct-question": [
        (
            "wikibio 40-79, direct-question, qwen2.5-coder-1.5b",
            "wikibio 40-79, direct-question:batch, qwen2.5-coder-1.5b",
        )
    ],
    "grounded": [
        ("wikibio 0-59, grounded, qwen2.5-coder-1.5b", "wikibio 0-59, grounded:batch, qwen2.5-coder-1.5b"),
        ("rte val, grounded, qwen2.5-coder-1.5b", "rte val, grounded:batch, qwen2.5-coder-1.5b"),
    ],
    "selfcheck-prompt:prob": [
        (
            "wikibio 40-79, selfcheck-prompt:prob, qwen2.5-coder-1.5b",
            "wikibio 40-79, selfcheck-prompt:prob-batch, qwen2.5-coder-1.5b",
        )
    ],
}
POSITIONS = 6  # the first sentences of a passage, by position, in one-call.md's table


def one_call(record: Callable[[str], Any]) -> dict[str, Any]:
    """one-call.md's point differences (one call minus version 1, sentence AUC-ROC) and, by a sentence's
    position in its passage, the sentences both Direct Question runs scored, the share inaccurate and
    each run's mean score."""
    oc = record("one-call")["runs"]
    auc = {label: run["metrics"].get("sentence_auc_roc") for label, run in oc.items()}
    gaps = {
        method: [{"run": one.split(",")[0], "points": auc[one] - auc[v1]} for v1, one in pairs]
        for method, pairs in ONE_CALL_GAPS.items()
    }
    [(v1_label, one_label)] = ONE_CALL_GAPS["direct-question"]
    v1, one = oc[v1_label], oc[one_label]
    positions = []
    for p in range(POSITIONS):
        key = f"unit {p}"
        both = [
            (row["labels"][p] != "0", row["scores"][key], other["scores"][key])
            for row, other in zip(v1["rows"], one["rows"], strict=True)
            if row["scores"].get(key) is not None and other["scores"].get(key) is not None
        ]
        n = len(both)
        positions.append(
            {
                "position": p + 1,
                "sentences": n,
                "inaccurate_share": 100 * sum(b[0] for b in both) / n,
                "v1_mean": sum(b[1] for b in both) / n,
                "one_mean": sum(b[2] for b in both) / n,
            }
        )
    return {"gaps": gaps, "positions": positions}


def phr(record: Callable[[str], Any]) -> dict[str, Any]:
    """phr.md's truncation at the largest n: how far Algorithm 1's PHR falls below Definition 4's and its
    aleatoric entropy rises above the reference."""
    last = record("phr")["runs"]["synthetic"]["metrics"]["rows"][-1]
    return {
        "phr_low_by": last["reference_phr"] - last["phr"],
        "aleatoric_high_by": last["aleatoric"] - last["aleatoric_reference"],
    }


def ray_scale(record: Callable[[str], Any]) -> dict[str, Any]:
    """ray-scale.md's calls an item."""
    ray = next(iter(record("ray-scale")["runs"].values()))
    return {"calls_per_item": ray["rows"][0]["calls"] / ray["items"]}


def semantic_entropy(record: Callable[[str], Any]) -> dict[str, Any]:
    """semantic-entropy.md's answers right, checks a passage of the paragraph runs, how far paragraph
    semantic entropy's AUC-PR sits above random, and its rerun's hours."""
    m = record("semantic-entropy")["runs"]["triviaqa qwen2.5-coder-0.5b"]["metrics"]
    ten = record("wikibio-10")
    se = ten["runs"]["semantic-entropy-paragraph"]
    return {
        "correct": round(m["accuracy"] * m["questions"]),
        "checks_per_passage": {
            name: round((run["calls"] + (run["cache_hits"] or 0)) / run["items"]) for name, run in ten["runs"].items()
        },
        "above_random": se["metrics"]["auc_pr_nonfact"] - ten["random"]["auc_pr_nonfact"],
        "paragraph_rerun_hours": se["minutes_per_passage"] * se["items"] / 60,
    }


def wikibio_selfcheck_fibe(record: Callable[[str], Any]) -> dict[str, Any]:
    """wikibio-selfcheck-fibe.md's passages where SelfCheckGPT's unigram agrees with ours, and the prefix
    runs' seconds a generated token."""
    peer = record("peers/selfcheckgpt-unigram")["runs"]["selfcheckgpt 0.1.7"]
    prefix = record("fibe-prefix-reuse")["runs"]["qwen2.5-coder-1.5b"]
    return {
        "agreeing_passages": peer["passages"] - peer["differing_passages"],
        "prefix_rows": [
            {**row, "seconds_per_token": row["seconds_total"] / row["completion_tokens"]} for row in prefix["rows"]
        ],
    }


NLI_MIX = "the nli mix"
RAGTRUTH_TASKS = ("qa", "summary", "data2txt")


def published_ragtruth(papers: dict[str, Any]) -> list[dict[str, Any]]:
    """The published detectors' RAGTruth response-level F1, each with where it was read."""
    return [
        {"detector": name, "f1": row["f1"], "cite": papers[paper]["cite"], "table": table, "what": quoted["what"]}
        for paper in ("lettucedetect", "tinylettuce")
        for table, quoted in papers[paper]["tables"].items()
        for name, row in quoted["rows"].items()
    ]


RAGTRUTH_COLUMNS = ("response_precision", "response_recall", "response_f1", "auc_roc", "span_f1")
RAGTRUTH_JUDGED = "ragtruth test, 150 stratified, grounded with the qwen2.5-coder-{size} judge"
RAGTRUTH_COMPOSED = "the cascade on ragtruth, composed, its band fitted on wikibio 0-119"


def ragtruth_tasks(metrics: dict[str, Any]) -> list[dict[str, Any]]:
    """A RAGTruth run's metrics per task (None where the run gave none: a composed run keeps no spans)."""
    return [{"task": task, **{k: metrics.get(f"{task}_{k}") for k in RAGTRUTH_COLUMNS}} for task in RAGTRUTH_TASKS]


def ragtruth_judged(runs: dict[str, Any]) -> list[dict[str, Any]]:
    """The checks on the judges' stratified responses: the checker and the cascade as the composed run
    scored them there, and each judge's own run, with its metrics per task."""
    composed = runs.get(RAGTRUTH_COMPOSED)
    found = [
        {"name": name, "run": composed, **composed["metrics"][key]}
        for key, name in (
            ("checker", "fitted checker, the NLI mix"),
            ("cascade", "the cascade (1.5B judge in its band)"),
        )
        if composed
    ]
    for size in ("1.5b", "0.5b"):
        run = runs.get(RAGTRUTH_JUDGED.format(size=size))
        if run:
            found.append({"name": f"grounded, qwen2.5-coder-{size} judge", "run": run, "metrics": run["metrics"],
                          "intervals": run["intervals"]})  # fmt: skip
    return [
        {
            **row,
            "tasks": ragtruth_tasks(row["metrics"]),
            "fresh": row["run"]["items"] - row["run"].get("resumed_items", 0),
        }
        for row in found
    ]


def published_wice(papers: dict[str, Any]) -> list[dict[str, Any]]:
    """The LLM-AggreFact leaderboard's WiCE rows, each with where and when it was read."""
    quoted = papers["llm-aggrefact"]
    return [
        {"detector": name, "balanced_accuracy": row["balanced_accuracy"], "cite": quoted["cite"], "table": table}
        for table, rows in quoted["tables"].items()
        for name, row in rows["rows"].items()
    ]


def checker_fit(record: Callable[[str], Any]) -> dict[str, Any]:
    """checker-fit.md's rows: the fit's sources, its held-out runs beside the 1.5B judge and the earlier
    checker on the same items, the batching run's two halves, RAGTruth's tasks and the composed cascades."""
    runs = record("checker-fit")["runs"]
    fit = runs.get(f"fit on {NLI_MIX}")
    earlier, judges = record("checker")["runs"], record("grounded")["runs"]
    held = [
        {"name": name, "run": run, "seconds": run["seconds"] / run["items"]}
        for name, run in (
            ("fitted checker, the NLI mix", runs.get(f"rte val, fitted on {NLI_MIX}")),
            ("fitted checker, RTE and QNLI (earlier)", earlier["rte val, fitted on rte train and qnli fit part"]),
            ("grounded, qwen2.5-coder-1.5b judge", judges["rte qwen2.5-coder-1.5b"]),
        )
        if run
    ]
    wikibio = [
        {"name": name, "run": run, "seconds": run["seconds"] / (run["items"] - (run.get("resumed_items") or 0))}
        for name, run in (
            ("fitted checker, the NLI mix", runs.get(f"wikibio 120-237, fitted on {NLI_MIX}")),
            (
                "fitted checker, RTE and QNLI (earlier)",
                earlier["wikibio 120-237, fitted on rte train and qnli fit part"],
            ),
            (
                "grounded, qwen2.5-coder-1.5b judge",
                earlier["wikibio 120-237, grounded with the qwen2.5-coder-1.5b judge"],
            ),
        )
        if run
    ]
    ragtruth = runs.get(f"ragtruth test, fitted on {NLI_MIX}")
    batching = runs["batches grouped by length against plain, one epoch"]
    one_window = runs.get(f"ragtruth summaries, fitted on {NLI_MIX}, one window")
    long_documents = [
        {"what": what, "run": run, "auc_roc": run["metrics"][key], "interval": run["intervals"][key]}
        for what, run, key in (
            ("RAGTruth summaries, chunks (response AUC-ROC)", ragtruth, "summary_auc_roc"),
            ("RAGTruth summaries, one truncated window (response AUC-ROC)", one_window, "summary_auc_roc"),
            ("WikiBio 120-237, chunks (sentence AUC-ROC)", runs.get(f"wikibio 120-237, fitted on {NLI_MIX}"),
             "sentence_auc_roc"),
            ("WikiBio 120-237, one truncated window (sentence AUC-ROC)",
             runs.get(f"wikibio 120-237, fitted on {NLI_MIX}, one window"), "sentence_auc_roc"),
        )
        if run
    ]  # fmt: skip
    return {
        "long_documents": long_documents,
        "fit": fit,
        "sources": list((fit or {}).get("sources", {}).items()),
        "rte": held,
        "wikibio": wikibio,
        "qnli": runs.get(f"qnli test, fitted on {NLI_MIX}"),
        "qnli_judge": runs.get(f"{QNLI_SPLIT_RUN}, grounded with the qwen2.5-coder-1.5b judge"),
        "cost": runs.get("the fast paths' cost"),
        "synth": [
            {
                "writer": size,
                "made": runs[made],
                "quality": runs[f"{made}, judged by the 1.5B"],
                "seconds_a_claim": runs[made]["seconds"] / runs[made]["calls"],
            }
            for size, made in ((s, f"synthetic pairs from wikibio 0-19, written by the {s}") for s in ("0.5B", "1.5B"))
            if made in runs and f"{made}, judged by the 1.5B" in runs
        ],  # fmt: skip
        "synth_sample": [
            {
                "label": "unsupported" if row["labels"] == [1] else "supported",
                "claim": row["text"],
                "rests_on": row["rests_on"],
                "context": " ".join(row["context"][0].split()[:14]) + " ...",
            }
            for row in runs.get("synthetic pairs from wikibio 0-19, written by the 1.5B", {}).get("sample", [])
        ],  # fmt: skip
        "composed": [
            {
                "set": label,
                "run": run,
                "escalated_share": run["escalated"] / run["units"],
                "calls_share": run["judge_calls"] / run["judge_alone_calls"],
            }
            for label, run in (
                (label, runs.get(f"the cascade on {name}, composed, its band fitted on wikibio 0-119"))
                for name, label in (("rte", "RTE validation"), ("wikibio", "WikiBio 120-237"), ("qnli", "QNLI test"))
            )
            if run
        ],  # fmt: skip
        "published": published_ragtruth(record("papers")["papers"]),
        "published_wice": published_wice(record("papers")["papers"]),
        "wice": runs.get(f"wice test, fitted on {NLI_MIX}"),
        "ragtruth": ragtruth,
        "ragtruth_tasks": ragtruth_tasks(ragtruth["metrics"]) if ragtruth else [],
        "ragtruth_judged": ragtruth_judged(runs),
        "ragtruth_composed": runs.get(RAGTRUTH_COMPOSED),
        "ragtruth_composed_shares": {
            "calls": runs[RAGTRUTH_COMPOSED]["judge_calls"] / runs[RAGTRUTH_COMPOSED]["judge_alone_calls"],
            "escalated": runs[RAGTRUTH_COMPOSED]["escalated"] / runs[RAGTRUTH_COMPOSED]["units"],
        },
        "ragtruth_absent": runs[RAGTRUTH_JUDGED.format(size="1.5b")]["params"]["absent"],
        "batching": batching,
        "batching_rows": batching["rows"],
    }


TOOL_CALL_HEADLINE = (
    ("recall", "planted arguments flagged"),
    ("recall_replaced", "replaced values flagged"),
    ("recall_removed", "values taken out of the request flagged"),
    ("precision", "precision of a flag (planted among the flagged)"),
    ("argument_false_positive_rate", "right arguments flagged"),
    ("call_false_positive_rate", "right calls with a flag"),
)


def tool_calls(record: Callable[[str], Any]) -> dict[str, Any]:
    """tool-calls.md's rows: the headline rates of both readings with their intervals and their paired
    differences, the rates by kind of value, and why the strict reading flagged the right calls."""
    run = record("tool-calls")["runs"]["bfcl live, arguments at zero calls"]
    m, ci = run["metrics"], run["intervals"]
    difference = "lenient_minus_strict_"
    return {
        "run": run,
        "headline": [
            {
                "what": what,
                "strict": m[key],
                "strict_ci": ci.get(key),
                "lenient": m[f"lenient_{key}"],
                "lenient_ci": ci.get(f"lenient_{key}"),
                "difference": m.get(difference + key),
                "difference_ci": ci.get(difference + key),
            }
            for key, what in TOOL_CALL_HEADLINE
        ],
        "kinds": [
            {**row, "recall_ci": ci.get(f"recall_{row['kind']}"), "fp_ci": ci.get(f"false_positive_rate_{row['kind']}")}
            for row in run["by_kind"]
            if row["planted"] or row["right arguments"]
        ],
        "reasons": list(run["false_positive_reasons"].items()),
        "claims": claims_rows(record("tool-calls")["runs"].get("bfcl acting requests, claims of action at zero calls")),
        "judged": record("tool-calls")["runs"].get(PHRASES_JUDGED),
        "written": written_rows(record("tool-calls")["runs"].get(CLAIMS_WRITTEN)),
        "undecided": undecided_rows(
            record("tool-calls")["runs"].get(CLAIMS_JUDGED), record("tool-calls")["runs"].get(CLAIMS_JUDGED_DEV)
        ),
    }


PHRASES_JUDGED = "bfcl live, flagged phrases read again by the qwen2.5-coder-1.5b judge"
CLAIMS_WRITTEN = "bfcl acting requests, claims of action in replies the qwen2.5-coder-1.5b wrote"
WRITTEN_ROWS = (
    ("false_claims_flagged", "false claims flagged"),
    ("precision", "precision of a flag"),
    ("right_claims_flagged", "right claims flagged"),
    ("claims_read_as_claims", "claims (as a person read them) the check reads as claims of action"),
    ("no_claim_flagged", "replies that claim nothing, flagged"),
)


CLAIMS_JUDGED = "bfcl acting requests, claims matching cannot decide, read by the qwen2.5-coder-1.5b judge"
CLAIMS_JUDGED_DEV = "bfcl acting requests, claims matching cannot decide, the judge's development draw"
JUDGED_ROWS = (
    ("false_claims_flagged", "false claims flagged (declined in words)"),
    ("right_claims_flagged", "right claims flagged (naming no tool)"),
    ("precision", "precision of a flag"),
)


def undecided_rows(run: dict[str, Any] | None, dev: dict[str, Any] | None) -> dict[str, Any] | None:
    """The undecided claims' rates by matching alone, by the judge at 0.5 and at the threshold fitted on
    the development draw, each judge reading's paired difference against matching; None before it ran."""
    if run is None:
        return None
    m, ci = run["metrics"], run["intervals"]
    rows = [
        {"what": w, "words": m[f"words_{k}"], "judge": m[k], "judge_interval": ci.get(k),
         "fitted": m.get(f"fitted_{k}"), "fitted_interval": ci.get(f"fitted_{k}"),
         "judge_difference": m.get(f"judge_minus_words_{k}"),
         "judge_difference_interval": ci.get(f"judge_minus_words_{k}"),
         "fitted_difference": m.get(f"fitted_minus_words_{k}"),
         "fitted_difference_interval": ci.get(f"fitted_minus_words_{k}")}
        for k, w in JUDGED_ROWS
    ]  # fmt: skip
    requests = len({r["request"] for r in run["rows"]})
    return {"run": run, "dev": dev, "rows": rows, "requests": requests, "dropped": len(run["dropped_as_in_dev"])}


def written_rows(run: dict[str, Any] | None) -> dict[str, Any] | None:
    """The written-claims run's rates with their intervals, and its replies by trajectory, or None before it ran."""
    if run is None:
        return None
    return {"run": run, "rows": by_version(run, WRITTEN_ROWS), "requests": len({r["request"] for r in run["rows"]})}


def by_version(run: dict[str, Any], rows: tuple[tuple[str, str], ...]) -> list[dict[str, Any]]:
    """Each rate in both readings of claims (version 2, version 1) and their paired difference."""
    m, ci = run["metrics"], run["intervals"]
    return [
        {"what": w, "value": m[k], "interval": ci.get(k), "v1": m.get(f"v1_{k}"), "v1_interval": ci.get(f"v1_{k}"),
         "difference": m.get(f"v2_minus_v1_{k}"), "difference_interval": ci.get(f"v2_minus_v1_{k}")}
        for k, w in rows
    ]  # fmt: skip


ACTION_CLAIM_ROWS = (
    ("recall", "false claims flagged"),
    ("recall_failed_call", "claims of a call that failed, flagged"),
    ("recall_no_call", "claims of a call that never ran, flagged"),
    ("precision", "precision of a flag"),
    ("right_claims_flagged", "right claims flagged"),
    ("offers_read_as_claims", "offers read as claims"),
)


def claims_rows(run: dict[str, Any] | None) -> dict[str, Any] | None:
    """The action-claim run's rates with their intervals, or None before it ran."""
    if run is None:
        return None
    return {"run": run, "rows": by_version(run, ACTION_CLAIM_ROWS)}


PAGES: dict[str, Callable[[Callable[[str], Any]], dict[str, Any]]] = {
    "calibrated-risk": calibrated_risk,
    "checker": checker,
    "checker-fit": checker_fit,
    "clue": clue,
    "delimit": delimit,
    "fewl": fewl,
    "grounded": grounded,
    "one-call": one_call,
    "phr": phr,
    "probes": probes,
    "ray-scale": ray_scale,
    "semantic-entropy": semantic_entropy,
    "token-logprob": token_logprob,
    "tool-calls": tool_calls,
    "wikibio-selfcheck-fibe": wikibio_selfcheck_fibe,
}
