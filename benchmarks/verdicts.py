"""The verdicts the results pages state, decided here in code from the committed records and written into
them (``verdicts`` in docs/results/NAME.json), so a template only prints them.

A verdict between two methods ("better", "adds", "within 3 points", "the one to use") is drawn from the
paired bootstrap interval of their difference on the same items (``halluscope.metrics.paired_difference``,
resampling the unit of independence: a passage's sentences, a biography): "met" only where the whole
interval clears the margin, "not met" where it lies wholly on the other side, else "no detectable
difference", the interval given. Where a run kept no per-item scores, no paired interval can be drawn:
the verdict says so ("not decided") and names what would decide it. A claim about one run against a
fixed mark (chance, a goal of 80) reads that run's own interval; a fact of a run (every pair flagged)
is checked and stated.

    .venv/bin/python benchmarks/verdicts.py            # decide every claim, write it into its record
    .venv/bin/python benchmarks/verdicts.py --check    # exit 1 naming each record whose verdicts are stale
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from records import read, write  # noqa: E402

from halluscope.bench.grounded import QNLI_SPLIT  # noqa: E402
from halluscope.metrics import (  # noqa: E402
    MIN_BOOTSTRAP_GROUPS,
    PairedDifference,
    paired_difference,
    paired_mean_difference,
)

NONFACT = ("minor_inaccurate", "major_inaccurate", "not_entailment", "1", 1)  # a unit labelled so is positive


@dataclass(frozen=True)
class Claim:
    """One sentence a results page states: the record its verdict is written into, its name there, and
    how it is decided from the records (``decide(load) -> verdict``)."""

    record: str
    name: str
    decide: Callable[[Callable[[str], dict[str, Any]]], dict[str, Any]]


def ci(interval: Any) -> str:
    return "-" if not interval else f"[{interval[0]:.1f}, {interval[1]:.1f}]"


def paired(
    found: PairedDifference, measure: str, what_a: str, what_b: str, margin: float, claim: str, unit: str
) -> dict[str, Any]:
    """A paired verdict and the sentence that states it."""
    verdict = found.verdict(margin)
    shown = f"{measure}, {what_a} minus {what_b}: {found.difference:+.1f} {ci(found.interval)}"
    against = f"the margin {margin:+g}" if margin else "zero"
    few = ""
    if found.groups < MIN_BOOTSTRAP_GROUPS:  # the interval is shown, and decides nothing on so few
        exact = f"; exact McNemar p = {found.exact_p:.3f}" if found.exact_p is not None else ""
        few = f"; on fewer than {MIN_BOOTSTRAP_GROUPS} {unit} the interval decides nothing{exact}"
    text = (
        f"**{verdict}** ({claim}: {shown}, paired over {found.groups} {unit}, "
        f"{found.level:.0%} interval, against {against}{few})"
    )
    return {**found.as_record(margin), "claim": claim, "text": text}


def not_decided(claim: str, why: str, shown: str) -> dict[str, Any]:
    return {"verdict": "not decided", "claim": claim, "text": f"**not decided** ({claim}: {shown}; {why})"}


def against_mark(value: float, interval: Any, mark: float, claim: str, above: bool) -> dict[str, Any]:
    """One run's own interval against a fixed mark (chance's 50, a goal): met when it clears it."""
    if not interval:
        return not_decided(claim, "its run kept no interval", f"{value:.1f}")
    low, high = interval
    verdict = (
        ("met" if low > mark else "not met" if high < mark else "no detectable difference")
        if above
        else ("met" if high < mark else "not met" if low > mark else "no detectable difference")
    )
    text = f"**{verdict}** ({claim}: {value:.1f} {ci(interval)} against {mark:g})"
    return {"verdict": verdict, "claim": claim, "value": value, "interval": list(interval), "mark": mark, "text": text}


def fact(holds: bool, claim: str, shown: str) -> dict[str, Any]:
    """A fact of a run, checked: rendering fails while the record no longer shows it."""
    if not holds:
        raise SystemExit(f"a results page states {claim!r}, which its record no longer shows ({shown})")
    return {"verdict": "holds", "claim": claim, "text": shown}


def units_of(rows: list[dict[str, Any]]) -> tuple[list[str], list[int], list[float]]:
    """A bench's item rows as units: each sentence's passage (its group), label (1: inaccurate), score."""
    groups, labels, scores = [], [], []
    for row in rows:
        for label, score in zip(row["labels"], row["scores"].values(), strict=True):
            groups.append(str(row["id"]))
            labels.append(int(label in NONFACT))
            scores.append(float(score))
    return groups, labels, scores


def rows_paired(run_a: dict[str, Any], run_b: dict[str, Any]) -> tuple[list[str], list[int], list[float], list[float]]:
    groups, labels, a = units_of(run_a["rows"])
    groups_b, labels_b, b = units_of(run_b["rows"])
    if (groups, labels) != (groups_b, labels_b):
        raise SystemExit("two runs compared unit by unit must hold the same units with the same labels")
    return groups, labels, a, b


def hits(per_biography: list[dict[str, Any]]) -> dict[str, int]:
    return {row["person"]: int(row["hit"]) for row in per_biography}


def hit_difference(a: dict[str, int], b: dict[str, int], what_a: str, what_b: str, claim: str) -> dict[str, Any]:
    people = sorted(a)
    if sorted(b) != people:
        raise SystemExit(f"{claim}: the two runs checked different biographies")
    found = paired_mean_difference([a[p] for p in people], [b[p] for p in people])
    return paired(found, "hit rate", what_a, what_b, 0.0, claim, "biographies")


# ---------------------------------------------------------------- the claims, page by page

PROBE_SE = "TriviaQA against semantic entropy (n=5), qwen2.5-coder-1.5b (local:, last layer)"
PROBE_SEP = "TriviaQA SEP (semantic entropy n=5, no gold answers), qwen2.5-coder-1.5b (local:, last layer)"
PROBE_SE10 = "TriviaQA against semantic entropy (n=10), questions 600-674, qwen2.5-coder-1.5b (local:, last layer)"
PROBE_SEP75 = (
    "TriviaQA SEP (semantic entropy n=5, no gold answers), questions 600-674, qwen2.5-coder-1.5b (local:, last layer)"
)
NO_ROWS = "its run kept no per-question scores, so no paired interval of the difference could be drawn"


def probe_goal(
    run_label: str, se_label: str | None = None, samples: int | None = None
) -> Callable[..., dict[str, Any]]:
    """The probes issue's goal for a probe against semantic entropy: within 3 points at 5x cheaper."""

    def decide(load: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
        run = load("probes")["runs"][run_label]
        se_run = load("probes")["runs"][se_label] if se_label else run
        se = se_run["methods"]["semantic-entropy"]
        probe = run["methods"]["probe"]
        n = samples or run.get("entropy_samples")
        cost = {row["check"]: row for row in next(iter(load("probe-cost")["runs"].values()))["rows"]}
        ratio = cost[f"semantic-entropy n={n}"]["seconds per question"] / cost["probe"]["seconds per question"]
        shown = (
            f"the probe {probe['metrics']['answer_auc_roc']:.1f} {ci(probe['intervals'].get('answer_auc_roc'))}, "
            f"semantic entropy with {n} samples {se['metrics']['answer_auc_roc']:.1f} "
            f"{ci(se['intervals'].get('answer_auc_roc'))}, at 1/{ratio:.0f} of its time a question"
        )
        return not_decided("within 3 points of semantic entropy at 5x cheaper", NO_ROWS, shown) | {"cost_ratio": ratio}

    return decide


def probe_stack(load: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    run = load("probes")["runs"]["WikiBio, qwen2.5-coder-0.5b (local:, last layer)"]
    stacks = [c for c in run["candidates"] if "+" in c["name"]]
    unigram = next(c for c in run["candidates"] if c["name"] == "selfcheck-unigram")
    best = stacks[0]
    shown = f"{best['name']} {best['auc_roc']:.1f} {ci(best['auc_roc_interval'])}, the unigram {unigram['auc_roc']:.1f}"
    why = "choose kept each candidate's held-out AUC-ROC, not its per-sentence probabilities: no paired interval"
    return not_decided("the stack better than the unigram alone", why, shown) | {"stack": best["name"]}


def probe_goal_80(load: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    runs = {label: r for label, r in load("probes")["runs"].items() if r.get("dataset") == "wikibio"}
    label = max(runs, key=lambda name: runs[name]["methods"]["probe"]["metrics"]["sentence_auc_roc"])
    probe = runs[label]["methods"]["probe"]
    found = against_mark(
        probe["metrics"]["sentence_auc_roc"], probe["intervals"].get("sentence_auc_roc"), 80.0,
        "the best WikiBio sentence probe at 80 or more", above=True,
    )  # fmt: skip
    return found | {"run": label}


def token_variants_below_chance(load: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    """Each variant's own interval against chance's 50: below it, or no detectable difference."""
    below, unclear = [], []
    for run in load("token-logprob")["runs"].values():
        for name, variant in run["variants"].items():
            interval = variant["intervals"]["auc_roc_nonfact"]
            shown = f"{name} on {run['models'][0].split(':')[-1]} {ci(interval)}"
            (below if interval[1] < 50 else unclear).append(shown)
    verdict = "met" if not unclear else "not met" if not below else "met for some"
    text = f"**below chance** for {len(below)} of {len(below) + len(unclear)} variants (their intervals lie under 50)"
    if unclear:
        text += f"; **no detectable difference** from chance for {', '.join(unclear)}"
    return {
        "verdict": verdict,
        "claim": "every variant ranks below chance",
        "below": below,
        "unclear": unclear,
        "text": text,
    }


def token_stack(load: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    ens = load("token-logprob-ensemble")["runs"]
    rows = []
    for split in ("0-39", "0-119"):
        stack = ens[f"token-logprob:avg-nll+selfcheck-unigram stacked fit {split}"]
        alone = ens[f"selfcheck-unigram isotonic fit {split}"]
        rows.append(f"fit {split}: {stack['auc_roc']:.1f} against {alone['auc_roc']:.1f}")
    why = "the calibration runs kept each fit's held-out AUC-ROC, not its per-sentence probabilities"
    return not_decided("Avg(-log p) stacked with the unigram better than the unigram alone", why, "; ".join(rows))


def token_platt(load: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    ens = load("token-logprob-ensemble")["runs"]
    values = [ens[f"token-logprob:avg-nll platt fit {s}"]["auc_roc"] for s in ("0-39", "0-119")]
    why = "the calibration runs kept no interval of the held-out AUC-ROC"
    return not_decided("Platt scaling turns Avg(-log p) above chance", why, f"{values[0]:.1f} and {values[1]:.1f}")


def guard_runs(load: Callable[[str], dict[str, Any]]) -> dict[str, dict[str, int]]:
    per = next(iter(load("token-logprob-guard")["runs"].values()))["per_biography"]
    return {name: hits(rows) for name, rows in per.items()}


def token_guard_variant(load: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    planted = load("planted")["runs"]
    nll = hits(planted["token-logprob:max-nll qwen2.5-coder-1.5b"]["rows"])
    ent = hits(planted["token-logprob:max-entropy qwen2.5-coder-1.5b"]["rows"])
    return hit_difference(nll, ent, "Max(-log p)", "Max(H)", "Max(-log p) finds more planted falsehoods than Max(H)")


def token_own_vs_proxy(load: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    g = guard_runs(load)
    return hit_difference(
        g["token-logprob max-nll, the answer's log-probs"], g["token-logprob max-nll, proxy forward pass"],
        "max-nll from the answer's own log-probs", "from a proxy's pass",
        "the answer's own max-nll finds as many as the proxy's",
    )  # fmt: skip


def token_dq_vs_own(load: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    g = guard_runs(load)
    return hit_difference(
        g["token-logprob max-nll, the answer's log-probs"], g["direct-question"],
        "max-nll from the answer's own log-probs", "Direct Question",
        "the answer's own max-nll finds more than Direct Question",
    )  # fmt: skip


def grounded_top1(load: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    runs = load("grounded")["runs"]
    groups, labels, top1, full = rows_paired(
        runs["wikibio 0-9 grounded top_k=1 qwen2.5-coder-1.5b"], runs["wikibio 0-9 grounded qwen2.5-coder-1.5b"]
    )
    found = paired_difference(labels, top1, full, groups)
    claim = "top_k=1 better than every chunk"
    return paired(found, "NonFact AUC-ROC", "top_k=1", "every chunk", 0.0, claim, "passages")


def grounded_small_models_flag_all(load: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    runs = load("grounded")["runs"]
    recalls = [runs[f"rte {model}"]["metrics"]["recall"] for model in ("qwen2.5-coder-0.5b", "smollm2-135m")]
    shown = "both small models flag every pair at their own decision (recall 100)"
    return fact(all(r == 100 for r in recalls), "both small models flag every pair", shown)


def grounded_earlier_smollm(load: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    runs = load("grounded")["runs"]
    now, earlier = runs["rte smollm2-135m"], runs["rte smollm2-135m, the earlier record"]
    same = now["metrics"]["auc_roc"] == earlier["metrics"]["auc_roc"]
    return fact(same, "the rerun has the earlier run's metrics", "with the same metrics")


def grounded_openevals_flags_all(load: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    rows = load("grounded-compared")["runs"]["wikibio 0-9"]["rows"]
    shown = 'openevals answered "not grounded" for every sentence (recall 100, balanced accuracy 50)'
    return fact(rows["openevals"]["metrics"]["recall"] == 100, "openevals flags every sentence", shown)


def grounded_smollm_flags_true(load: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    smol = load("rag-guard")["runs"]["planted smollm2-135m"]
    shown = "SmolLM2 flags every sentence, true ones included, so it is no judge"
    return fact(smol["true_flagged"] == smol["true_sentences"], "SmolLM2 flags every true sentence", shown)


def one_call_within_2(load: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    runs = load("one-call")["runs"]
    groups, labels, batch, alone = rows_paired(
        runs["wikibio 40-79, direct-question:batch, qwen2.5-coder-1.5b"],
        runs["wikibio 40-79, direct-question, qwen2.5-coder-1.5b"],
    )
    found = paired_difference(labels, batch, alone, groups)
    claim = "direct-question:batch within 2 points of version 1"
    return paired(found, "sentence AUC-ROC", "the one-call version", "version 1", -2.0, claim, "passages")


CHECKER_RTE = "rte val, fitted on rte train"


def checker_within_3_of_the_judge(run: str) -> Callable[[Callable[[str], dict[str, Any]]], dict[str, Any]]:
    """A fitted checker against grounded's 1.5B judge on RTE's 277 validation pairs (issue 61's goal)."""

    def decide(load: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
        checker = load("checker")["runs"][run]
        judge = load("grounded")["runs"]["rte qwen2.5-coder-1.5b"]
        groups, labels, fast, slow = rows_paired(checker, judge)
        found = paired_difference(labels, fast, slow, groups)
        claim = f"the checker {run.removeprefix('rte val, ')} within 3 points of the 1.5B judge on RTE"
        return paired(found, "AUC-ROC", "the checker", "the 1.5B judge", -3.0, claim, "pairs")

    return decide


def checker_qnli_helps_on_rte(load: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    """Whether adding QNLI's fit part to RTE's training pairs changes the checker on RTE's validation pairs."""
    runs = load("checker")["runs"]
    groups, labels, both, alone = rows_paired(runs[CHECKER_RTE + " and qnli fit part"], runs[CHECKER_RTE])
    found = paired_difference(labels, both, alone, groups)
    claim = "fitting on RTE and QNLI better than on RTE alone, on RTE"
    return paired(found, "AUC-ROC", "RTE and QNLI", "RTE alone", 0.0, claim, "pairs")


ALONE_LOAD = 1.0  # a run started on a machine whose 1-minute load was below this ran alone


def comparable(fast: dict[str, Any], slow: dict[str, Any]) -> str | None:
    """Why two runs' times do not make a speed ratio (None where they do): a ratio divides two runs of the
    same code, each made alone (its recorded starting load below ALONE_LOAD)."""
    problems = []
    if str(fast["commit"]).removesuffix("+dirty") != str(slow["commit"]).removesuffix("+dirty"):
        problems.append(f"they ran different code (commits {fast['commit']} and {slow['commit']})")
    loads = [run.get("load") for run in (fast, slow)]
    if any(load is None for load in loads):
        problems.append("a run recorded no load, so neither is known to have run alone")
    elif any(load >= ALONE_LOAD for load in loads):
        problems.append(f"a run started under load ({', '.join(f'{load:.2f}' for load in loads)})")
    return "; ".join(problems) or None


def speed_ratio(fast: dict[str, Any], slow: dict[str, Any], per: Callable[[dict[str, Any]], float], claim: str,
                shown: str, goal: float = 20.0) -> dict[str, Any]:  # fmt: skip
    """How many times less time a unit ``fast`` takes than ``slow`` against ``goal``: "holds" or "falls
    short" where the runs are comparable, else "not decided" naming why (the ratio shown, indicative)."""
    ratio = per(slow) / per(fast)
    stated = shown.format(ratio=f"{ratio:,.1f}")
    problem = comparable(fast, slow)
    if problem is not None:
        return not_decided(claim, f"{problem}: a rerun of both on one commit, each alone, decides it", stated)
    verdict = "holds" if ratio >= goal else "falls short"
    return {"verdict": verdict, "claim": claim, "ratio": ratio, "text": f"**{verdict}** ({claim}: {stated})"}


def seconds_a_pair(run: dict[str, Any]) -> float:
    return run["seconds"] / run["items"]


def checker_20x_faster(
    checker: str, judge: tuple[str, str]
) -> Callable[[Callable[[str], dict[str, Any]]], dict[str, Any]]:
    """How many times less time a pair than the 1.5B judge (``judge``: its record and run), against the
    goal of 20, where the two runs are comparable."""

    def decide(load: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
        fast, slow = load("checker")["runs"][checker], load(judge[0])["runs"][judge[1]]
        shown = (
            "{ratio} times less time a pair than the 1.5B judge, each run's wall time over its "
            + f"{fast['items']:,} pairs"
        )
        return speed_ratio(fast, slow, seconds_a_pair, "the checker at least 20 times faster a pair", shown)

    return decide


WIKIBIO_JUDGE = "wikibio 120-237, grounded with the qwen2.5-coder-1.5b judge"
CHECKER_WIKIBIO = "wikibio 120-237, fitted on rte train and qnli fit part"
GPROBE_WIKIBIO = "wikibio 120-237, the grounded probe fitted on wikibio 0-119"
RTE_JUDGE = "rte val as a labelled file, grounded with the qwen2.5-coder-1.5b judge"
CHECKER_RTE_FILE = "rte val as a labelled file, fitted on rte train and qnli fit part"
GPROBE_RTE = "rte val as a labelled file, the grounded probe fitted on rte train 0-599"
CHECKER_OWN_WIKIBIO = "wikibio 120-237, fitted on wikibio 0-119"
CHECKER_TAUGHT_WIKIBIO = "wikibio 120-237, fitted on the 1.5b judge's labels of wikibio 0-119"
WIKIBIO_SMALL_JUDGE = "wikibio 120-237, grounded with the qwen2.5-coder-0.5b judge"
WIKIBIO_SENTENCES = "WikiBio 120-237's sentences"
QNLI_CHECKER = ("checker", "qnli test, refitted on rte train and qnli fit part")  # refitted on the current split
QNLI_CHECKER_RTE = ("checker", "qnli test, refitted on rte train")
QNLI_CHECKER_ALL = ("checker", "qnli test, refitted on rte train, qnli fit part and wikibio 0-119")
QNLI_JUDGE = ("checker-fit", "qnli test, split by question and sentence, grounded with the qwen2.5-coder-1.5b judge")
QNLI_SMALL_JUDGE = (
    "checker-fit",
    "qnli test, split by question and sentence, grounded with the qwen2.5-coder-0.5b judge",
)
ALL_THREE = "fitted on rte train, qnli fit part and wikibio 0-119"


def seconds_an_answer(run: dict[str, Any]) -> float:
    """A run's wall time over the answers it scored itself (a resumed run's earlier items are not in it)."""
    return run["seconds"] / (run["items"] - (run.get("resumed_items") or 0))


def nearness(margin: float) -> str:
    """How a claim names its margin: within so many points of the other, or better than it (margin 0)."""
    return f"within {-margin:g} point{'' if margin == -1 else 's'} of" if margin else "better than"


def fast_against(
    run: str, other: str, what: str, other_what: str, margin: float, where: str, unit: str
) -> Callable[[Callable[[str], dict[str, Any]]], dict[str, Any]]:
    """``across`` two runs of checker.json: a fast candidate against another check (the 1.5B judge, or
    the other fast one) on the same units."""
    return across(("checker", run), ("checker", other), what, other_what, margin, where, unit)


def on_wikibio(run: str, other: str, what: str, other_what: str, margin: float) -> Callable[..., dict[str, Any]]:
    """``fast_against`` on WikiBio 120-237's sentences, paired by passage."""
    return fast_against(run, other, what, other_what, margin, WIKIBIO_SENTENCES, "passages")


def on_qnli(
    run: tuple[str, str], other: tuple[str, str], what: str, other_what: str, margin: float
) -> Callable[..., dict[str, Any]]:
    """``across`` on QNLI's test part, paired by pair, where both runs tested the current split."""
    paired_on_qnli = across(run, other, what, other_what, margin, "QNLI's test part", "pairs")

    def decide(load: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
        found = paired_on_qnli(load)
        current = all(
            load(name)["runs"][label].get("params", {}).get("qnli_parts") == QNLI_SPLIT for name, label in (run, other)
        )
        return found if current else earlier_qnli_split(found)

    return decide


def earlier_qnli_split(found: dict[str, Any]) -> dict[str, Any]:
    """A QNLI verdict of runs made on the earlier split by question alone: a sentence of the test part
    could be in the fit part too, so it decides nothing (what the runs showed is kept in its text)."""
    why = (
        "made on the earlier split by question alone, whose test pairs shared sentences with the fit part: "
        "a rerun on the current split (by question and sentence) decides it"
    )
    shown = found["text"].split("(", 1)[1].rsplit(")", 1)[0].removeprefix(f"{found['claim']}: ")
    return not_decided(found["claim"], why, shown)


def faster_on_wikibio(run: str, what: str) -> Callable[[Callable[[str], dict[str, Any]]], dict[str, Any]]:
    """How many times less time an answer than the 1.5B judge, against the goal of 20, where the two runs
    are comparable (a fact of two wall times, no interval: it holds or falls short, never "met")."""

    def decide(load: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
        runs = load("checker")["runs"]
        claim = f"{what} at least 20 times faster an answer on WikiBio 120-237"
        shown = "{ratio} times less time an answer than the 1.5B judge, each run's wall time over its own answers"
        return speed_ratio(runs[run], runs[WIKIBIO_JUDGE], seconds_an_answer, claim, shown)

    return decide


def checker_against_probe_speed(load: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    """How many times less time an answer the checker takes than the grounded probe on WikiBio 120-237."""
    runs = load("checker")["runs"]
    claim = "the checker faster an answer than the grounded probe on WikiBio 120-237"
    shown = "the checker takes {ratio} times less time an answer than the probe"
    return speed_ratio(runs[CHECKER_WIKIBIO], runs[GPROBE_WIKIBIO], seconds_an_answer, claim, shown, goal=1.0)


def calibrated_dq_vs_scgp(load: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    planted = load("planted")["runs"]
    dq = hits(planted["direct-question qwen2.5-coder-1.5b"]["rows"])
    scgp = hits(planted["selfcheck-prompt qwen2.5-coder-1.5b"]["rows"])
    return hit_difference(dq, scgp, "Direct Question", "SelfCheck-Prompt", "on the planted set DQ finds more than SCGP")


def calibrated_stack(load: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    runs = load("calibrated-risk")["runs"]
    stack = runs["selfcheck-prompt:prob+direct-question+selfcheck-unigram stacked fit 0-39"]
    best = runs["selfcheck-prompt:prob isotonic fit 0-39"]
    shown = f"held-out AUC-ROC {stack['auc_roc']:.1f} against {best['auc_roc']:.1f}"
    why = "the calibration runs kept no per-sentence scores, so no paired interval"
    return not_decided("the three-method stack better than SelfCheck-Prompt prob alone", why, shown)


def calibrated_prob_vs_v1(load: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    runs = load("calibrated-risk")["runs"]
    prob, v1 = runs["selfcheck-prompt:prob isotonic fit 0-39"], runs["selfcheck-prompt isotonic fit 0-39"]
    shown = (
        f"raw AUC-ROC {prob['raw_auc_roc']['selfcheck-prompt:prob']:.1f} against "
        f"{v1['raw_auc_roc']['selfcheck-prompt']:.1f}, Brier {prob['brier']:.3f} against {v1['brier']:.3f}"
    )
    why = "the calibration runs kept no per-sentence scores, so no paired interval"
    return not_decided("selfcheck-prompt:prob better than version 1", why, shown)


def wikibio_pair(method: str, against: str, star: bool = False) -> Callable[..., dict[str, Any]]:
    """Two methods of the ten-passage table, paired by sentence over passages, where the run kept rows.
    NonFact* (``star``): the major-inaccurate sentences against the rest, the passages that are wholly
    major-inaccurate left out, as the protocol reads it (``bench.wikibio.nonfact_star_mask``)."""
    measure = "auc_roc_nonfact_star" if star else "auc_roc_nonfact"

    def decide(load: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
        runs = load("wikibio-10")["runs"]
        a, b = runs[method], runs[against]
        claim = f"{method} better than {against}" + (" on NonFact*" if star else "")
        if "rows" not in a or "rows" not in b:
            shown = f"{measure} {a['metrics'][measure]:.1f} against {b['metrics'][measure]:.1f}"
            return not_decided(claim, "the run was transcribed without its per-sentence scores", shown)
        groups, labels, sa, sb = rows_paired(a, b)
        if star:
            kept = [r for r in a["rows"] if not all(lab == "major_inaccurate" for lab in r["labels"])]
            keep = {str(r["id"]) for r in kept}
            major = [int(lab == "major_inaccurate") for r in a["rows"] for lab in r["labels"]]
            chosen = [i for i, g in enumerate(groups) if g in keep]
            groups, labels = [groups[i] for i in chosen], [major[i] for i in chosen]
            sa, sb = [sa[i] for i in chosen], [sb[i] for i in chosen]
        found = paired_difference(labels, sa, sb, groups)
        name = "NonFact* AUC-ROC" if star else "NonFact AUC-ROC"
        return paired(found, name, method, against, 0.0, claim, "passages")

    return decide


def wikibio_fibe_chance(load: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    run = load("wikibio-10")["runs"]["fibe"]
    interval = (run.get("intervals") or {}).get("auc_roc_nonfact")
    return against_mark(run["metrics"]["auc_roc_nonfact"], interval, 50.0, "FIBE above chance", above=True)


def delimit_pair(load: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    runs = load("delimit")["runs"]
    fenced, v1 = runs["first 40, v1 + --delimit"], runs["first 40, v1"]
    claim = "fenced prompts rank the sentences better than v1"
    if "rows" not in fenced or "rows" not in v1:
        shown = (
            f"NonFact AUC-ROC {fenced['metrics']['auc_roc_nonfact']:.1f} against {v1['metrics']['auc_roc_nonfact']:.1f}"
        )
        return not_decided(claim, "the runs were transcribed without their per-sentence scores", shown)
    groups, labels, a, b = rows_paired(fenced, v1)
    return paired(paired_difference(labels, a, b, groups), "NonFact AUC-ROC", "fenced", "v1", 0.0, claim, "passages")


def choose_against_best_single(name: str) -> Callable[..., dict[str, Any]]:
    def decide(load: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
        run = next(iter(load(name)["runs"].values()))
        scored = [c for c in run["candidates"] if c.get("auc_roc") is not None]
        chosen = next(c for c in scored if c["name"] == run["recommended"])
        best = max((c for c in scored if "+" not in c["name"]), key=lambda c: c["auc_roc"])
        if chosen is best:
            return fact(True, "the recommendation is the best single method", "it is the best single method")
        shown = (
            f"{chosen['name']} {chosen['auc_roc']:.1f} {ci(chosen['auc_roc_interval'])}, the best single method "
            f"({best['name']}) {best['auc_roc']:.1f} {ci(best['auc_roc_interval'])}"
        )
        why = "choose kept each candidate's out-of-fold AUC-ROC, not its per-unit scores: no paired interval"
        return not_decided(f"{chosen['name']} better than {best['name']}", why, shown) | {"best_single": best["name"]}

    return decide


def clue_ordering(load: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    """CLUE's Table 2 ordering of mean correlations, D_R < D_L < D_I: the run kept only each split's mean
    over its questions, so no interval can say whether the order is more than chance."""
    corr = load("clue")["runs"]["qnli theta 0.6 / 0.2"]["metrics"]["correlation"]
    means = {split: corr[split]["mean"] for split in ("D_R", "D_L", "D_I")}
    questions = min(corr[split]["questions"] for split in means)
    order = " < ".join(sorted(means, key=means.__getitem__))
    listed = ", ".join(f"{k} {v:+.3f}" for k, v in means.items())
    shown = f"means {listed}, in the order {order}, over {questions} questions"
    why = (
        f"the run kept no per-question correlations to resample, and {questions} questions are fewer than "
        f"{MIN_BOOTSTRAP_GROUPS}: a larger run with its rows decides it"
    )
    return not_decided("the paper's ordering D_R < D_L < D_I", why, shown)


def phr_tracks_definition(load: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    rows = load("phr")["runs"]["synthetic"]["metrics"]["rows"]
    worst = max(r["abs_error"] for r in rows)
    shown = f"mean absolute error at most {worst:.4f} at every n"
    return fact(worst < 0.02, "Algorithm 1 within about a hundredth of Definition 4 at every n", shown)


def phr_icl_follows(load: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    runs = load("phr-icl")["runs"]
    sst, rte = runs["sst2"]["metrics"]["rows"], runs["rte"]["metrics"]["rows"]
    mhr, err, rte_err = (
        max(r[k] for r in rows) for rows, k in ((sst, "mae_mhr"), (sst, "mae_error"), (rte, "mae_error"))
    )
    shown = (
        f"on SST-2 the PHR follows the MHR (MAE at most {mhr:.3f}) and the error rate (at most {err:.3f}); "
        f"on RTE it misses the error rate (MAE up to {rte_err:.3f})"
    )
    return fact(mhr < 0.01 and err < 0.1 and rte_err > 0.3, "the PHR follows MHR and error on SST-2, misses RTE", shown)


def written_replies_hold_no_false_claim(load: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    """The model-written replies: none says an action was done after a call that failed or none ran."""
    run = load("tool-calls")["runs"]["bfcl acting requests, claims of action in replies the qwen2.5-coder-1.5b wrote"]
    shown = (
        "The model claimed no action it had not done: every reply that says an action was done follows a call "
        "that succeeded"
    )
    return fact(run["metrics"]["n_false_claims"] == 0, "no false claim in the written replies", shown)


def judge_ranks_undecided_claims(load: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    run = load("tool-calls")["runs"][
        "bfcl acting requests, claims matching cannot decide, read by the qwen2.5-coder-1.5b judge"
    ]
    claim = "the judge ranks undecided false claims above right ones"
    return against_mark(run["metrics"]["judge_auc_roc"], run["intervals"].get("judge_auc_roc"), 50.0, claim, above=True)


def unigram_peer_no_unseen(load: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    peer = next(iter(load("peers/selfcheckgpt-unigram")["runs"].values()))
    shown = "No sentence has an unseen token in either"
    return fact(peer["unseen_token_sentences"] == 0, "no sentence has an unseen token", shown)


def framing_against_v1(model: str, margin: float) -> Callable[[Callable[[str], dict[str, Any]]], dict[str, Any]]:
    """grounded.support@2 (the sentence as quoted data) against @1 on RTE validation, one model, paired by
    pair: within ``-margin`` points of it, or better (margin 0)."""

    def decide(load: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
        runs = load("grounded-framing")["runs"]
        groups, labels, two, one = rows_paired(
            runs[f"grounded.support@2 on {model}"], runs[f"grounded.support@1 on {model}"]
        )
        found = paired_difference(labels, two, one, groups)
        near = nearness(margin)
        claim = f"grounded.support@2 {near} @1 on RTE validation, {model}"
        return paired(found, "AUC-ROC", "@2", "@1", margin, claim, "pairs")

    return decide


NLI_MIX = "the nli mix"  # issue 72's checker: mnli, fever, factcg, wice dev, rte train and qnli fit part
NLI_MIX_RTE = f"rte val, fitted on {NLI_MIX}"
NLI_MIX_WIKIBIO = f"wikibio 120-237, fitted on {NLI_MIX}"
MIX_WHAT = "the checker fitted on the NLI mix"
NLI_MIX_RAGTRUTH = f"ragtruth test, fitted on {NLI_MIX}"
NLI_MIX_ONE_WINDOW_RAGTRUTH = f"ragtruth summaries, fitted on {NLI_MIX}, one window"
NLI_MIX_ONE_WINDOW_WIKIBIO = f"wikibio 120-237, fitted on {NLI_MIX}, one window"
RAGTRUTH_JUDGE = "ragtruth test, 150 stratified, grounded with the qwen2.5-coder-{size} judge"
RAGTRUTH_JUDGED = "RAGTruth's 150 judged responses"


def across(
    run: tuple[str, str], other: tuple[str, str], what: str, other_what: str, margin: float, where: str, unit: str
) -> Callable[[Callable[[str], dict[str, Any]]], dict[str, Any]]:
    """A run of one record against a run of another (each ``(record, label)``) on the same units, paired
    by ``unit``: within ``-margin`` points of it, or better (margin 0)."""

    def decide(load: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
        groups, labels, a, b = rows_paired(load(run[0])["runs"][run[1]], load(other[0])["runs"][other[1]])
        found = paired_difference(labels, a, b, groups)
        near = nearness(margin)
        return paired(found, "AUC-ROC", what, other_what, margin, f"{what} {near} {other_what} on {where}", unit)

    return decide


def responses_of(run: dict[str, Any]) -> tuple[list[str], list[int], list[float]]:
    """A RAGTruth run's responses as units: each one's source (its group), label (it holds a labelled
    span) and score (its riskiest sentence's)."""
    rows = run["rows"]
    return (
        [str(r["group"]) for r in rows],
        [int(r["answer_label"]) for r in rows],
        [max(float(v) for v in r["scores"].values()) for r in rows],
    )


def on_ragtruth_responses(
    run: str, other: str, what: str, other_what: str, margin: float, where: str
) -> Callable[[Callable[[str], dict[str, Any]]], dict[str, Any]]:
    """``run`` against ``other``, two RAGTruth runs of checker-fit.json, on the responses of the narrower
    (a smaller stratified part, or one task), which the wider must all hold; response AUC-ROC paired by
    source: within ``-margin`` points, or better (margin 0)."""

    def decide(load: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
        runs = load("checker-fit")["runs"]
        a, b = ({r["id"]: r for r in runs[label]["rows"]} for label in (run, other))
        ids = list(min(a, b, key=len))
        lacking = [i for i in ids if i not in a or i not in b]
        if lacking:
            raise SystemExit(f"{run!r} and {other!r}: {len(lacking)} responses in one only, first {lacking[0]}")
        groups, labels, first = responses_of({"rows": [a[i] for i in ids]})
        _, labels_b, second = responses_of({"rows": [b[i] for i in ids]})
        if labels != labels_b:
            raise SystemExit(f"{run!r} and {other!r} label the same responses differently")
        found = paired_difference(labels, first, second, groups)
        claim = f"{what} {nearness(margin)} {other_what}, on {where}"
        return paired(found, "response AUC-ROC", what, other_what, margin, claim, "sources")

    return decide


def length_groups_faster(load: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    """One epoch with batches grouped by length against plain batches: the two halves of one run of one
    commit, started alone, on the same pairs (their fit seconds)."""
    run = load("checker-fit")["runs"]["batches grouped by length against plain, one epoch"]
    plain, grouped = ({**run, "seconds": row["fit_seconds"], "items": 1} for row in run["rows"])
    shown = "{ratio} times less time an epoch than plain batches, " + f"{run['items']:,} pairs, one run of both"
    return speed_ratio(grouped, plain, seconds_a_pair, "batches grouped by length at least twice as fast", shown, 2.0)


FAST_PATH_COST = "the fast paths' cost"  # benchmarks/fast_path_cost.py: every path timed in one run
NLI_MIX_QNLI = f"qnli test, fitted on {NLI_MIX}"


def cost_row(run: dict[str, Any], path: str, dataset: str) -> dict[str, Any]:
    """One path's timed row of the fast-path cost run, as a run of its own (the run's commit and load)."""
    row = next(r for r in run["rows"] if r["path"] == path and r["dataset"] == dataset)
    return {**run, "seconds": row["seconds"], "items": row["units"], "calls": row["calls"]}


def fast_path_faster(
    path: str, dataset: str, where: str
) -> Callable[[Callable[[str], dict[str, Any]]], dict[str, Any]]:
    """How many times less time a unit ``path`` takes than the 1.5B judge, both timed in one run of one
    commit on the same units (benchmarks/fast_path_cost.py), against the goal of 20."""

    def decide(load: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
        run = load("checker-fit")["runs"][FAST_PATH_COST]
        fast, slow = cost_row(run, path, dataset), cost_row(run, "judge", dataset)
        shown = "{ratio} times less time " + f"a unit than the 1.5B judge on {fast['items']:,} {where}, one run of both"
        return speed_ratio(fast, slow, seconds_a_pair, f"the {path} at least 20 times faster than the judge", shown)

    return decide


def cascade_calls(
    dataset: str, where: str, share: float = 0.3
) -> Callable[[Callable[[str], dict[str, Any]]], dict[str, Any]]:
    """The cascade's judge calls against the judge alone's on the same units: at most ``share`` of them."""

    def decide(load: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
        run = load("checker-fit")["runs"][FAST_PATH_COST]
        cascade, judge = cost_row(run, "cascade", dataset), cost_row(run, "judge", dataset)
        claim = f"the cascade at most {share:.0%} of the judge's calls"
        return calls_share(claim, cascade["calls"], judge["calls"], f"{judge['items']:,} {where}", share)

    return decide


def calls_share(claim: str, calls: int, alone: int, on: str, share: float) -> dict[str, Any]:
    """A cascade's judge calls against the judge alone's on the same units: holds at most ``share``."""
    ratio = calls / alone
    verdict = "holds" if ratio <= share else "falls short"
    shown = f"{calls:,} judge calls against {alone:,} on {on}, {100 * ratio:.1f}%"
    return {"verdict": verdict, "claim": claim, "ratio": ratio, "text": f"**{verdict}** ({claim}: {shown})"}


def ahead_of_published(
    detector: str, paper: str, table: str, run: str = NLI_MIX_RAGTRUTH, member: str | None = None
) -> Callable[[Callable[[str], dict[str, Any]]], dict[str, Any]]:
    """A RAGTruth run's response F1 (its interval resampling sources) against a published figure; ``member``:
    which check of a composed run (its ``metrics`` hold each check's own metrics and intervals)."""

    def decide(load: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
        found = load("checker-fit")["runs"][run]
        scored = found["metrics"][member] if member else found
        mark = load("papers")["papers"][paper]["tables"][table]["rows"][detector]["f1"]
        claim = f"response F1 ahead of {detector}'s published {mark:g}"
        value, interval = scored["metrics"]["response_f1"], scored["intervals"]["response_f1"]
        return against_mark(value, interval, mark, claim, above=True)

    return decide


def composed_cascade(name: str) -> str:
    """The label of benchmarks/cascade_composed.py's run on one set in checker-fit.json."""
    return f"the cascade on {name}, composed, its band fitted on wikibio 0-119"


def composed_calls(name: str, where: str, share: float = 0.3) -> Callable[..., dict[str, Any]]:
    """The composed cascade's judge calls against the judge alone's on the same units: at most ``share``."""

    def decide(load: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
        run = load("checker-fit")["runs"][composed_cascade(name)]
        claim = f"the cascade at its fitted band at most {share:.0%} of the judge's calls"
        return calls_share(claim, run["judge_calls"], run["judge_alone_calls"], f"{run['units']:,} {where}", share)

    return decide


SYNTH = "synthetic pairs from wikibio 0-19, written by the {size}"  # checker synth's runs, and their quality
SYNTH_QUALITY = "synthetic pairs from wikibio 0-19, written by the {size}, judged by the 1.5B"


def synth_cleaner(load: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    """Which writer's claims make clean pairs more often (the judge finds each supported by its sentence
    and not by the document without it): the share of a document's claims, paired by document."""
    runs = load("checker-fit")["runs"]
    shares = []
    for size in ("1.5B", "0.5B"):
        by_document: dict[str, list[bool]] = {}
        for row in runs[SYNTH_QUALITY.format(size=size)]["rows"]:
            by_document.setdefault(row["document"], []).append(row["clean"])
        shares.append({d: sum(v) / len(v) for d, v in by_document.items()})
    documents = sorted(shares[0])
    if sorted(shares[1]) != documents:
        raise SystemExit("the two writers' quality runs must hold the same documents")
    found = paired_mean_difference([shares[0][d] for d in documents], [shares[1][d] for d in documents])
    claim = "the 1.5B writes clean pairs more often than the 0.5B"
    return paired(found, "clean share", "the 1.5B", "the 0.5B", 0.0, claim, "documents")


def synth_faster(load: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    """How many times less time a document the 0.5B takes to write its claims than the 1.5B."""
    runs = load("checker-fit")["runs"]
    fast, slow = runs[SYNTH.format(size="0.5B")], runs[SYNTH.format(size="1.5B")]
    shown = "{ratio} times less time a document, each run's wall time over its " + f"{fast['items']:,} documents"
    return speed_ratio(fast, slow, seconds_a_pair, "the 0.5B writes faster than the 1.5B", shown, goal=1.0)


QWEN15, QWEN05 = "local:qwen2.5-coder-1.5b", "local:qwen2.5-coder-0.5b"

CLAIMS = (
    Claim("checker-fit", "length groups twice as fast", length_groups_faster),
    Claim(
        "checker-fit",
        "one window against chunks on ragtruth summaries",
        on_ragtruth_responses(
            NLI_MIX_ONE_WINDOW_RAGTRUTH, NLI_MIX_RAGTRUTH, "one window", "chunks", 0.0, "RAGTruth's summaries"
        ),
    ),
    Claim(
        "checker-fit",
        "one window against chunks on wikibio",
        across(
            ("checker-fit", NLI_MIX_ONE_WINDOW_WIKIBIO),
            ("checker-fit", NLI_MIX_WIKIBIO),
            "one window",
            "chunks",
            0.0,
            WIKIBIO_SENTENCES,
            "passages",
        ),
    ),
    Claim("checker-fit", "the nli mix 20 times faster on rte", fast_path_faster("checker", "rte", "RTE pairs")),
    Claim(
        "checker-fit",
        "the nli mix 20 times faster on wikibio",
        fast_path_faster("checker", "wikibio", "WikiBio sentences"),
    ),
    Claim(
        "checker-fit",
        "the nli mix within 3 points of the 1.5B judge on qnli",
        across(
            ("checker-fit", NLI_MIX_QNLI),
            QNLI_JUDGE,
            MIX_WHAT,
            "the 1.5B judge",
            -3.0,
            "QNLI's test part",
            "pairs",
        ),
    ),
    Claim(
        "checker-fit",
        "the nli mix ahead of tinylettuce-17m on ragtruth",
        ahead_of_published("TinyLettuce-17M", "tinylettuce", "Results (RAGTruth)"),
    ),
    Claim(
        "checker-fit",
        "the nli mix within 3 points of the 1.5B judge on ragtruth",
        on_ragtruth_responses(
            NLI_MIX_RAGTRUTH, RAGTRUTH_JUDGE.format(size="1.5b"), MIX_WHAT, "the 1.5B judge", -3.0, RAGTRUTH_JUDGED
        ),
    ),
    Claim(
        "checker-fit",
        "the composed cascade within 1 point of the 1.5B judge on ragtruth",
        on_ragtruth_responses(
            composed_cascade("ragtruth"),
            RAGTRUTH_JUDGE.format(size="1.5b"),
            "the cascade",
            "the 1.5B judge",
            -1.0,
            RAGTRUTH_JUDGED,
        ),
    ),
    Claim("checker-fit", "the composed cascade's calls on ragtruth", composed_calls("ragtruth", "RAGTruth sentences")),
    Claim(
        "checker-fit",
        "the nli mix against the 0.5B judge on ragtruth",
        on_ragtruth_responses(
            NLI_MIX_RAGTRUTH, RAGTRUTH_JUDGE.format(size="0.5b"), MIX_WHAT, "the 0.5B judge", 0.0, RAGTRUTH_JUDGED
        ),
    ),
    Claim(
        "checker-fit",
        "the composed cascade ahead of tinylettuce-17m on ragtruth",
        ahead_of_published(
            "TinyLettuce-17M", "tinylettuce", "Results (RAGTruth)", composed_cascade("ragtruth"), "cascade"
        ),
    ),
    Claim("checker-fit", "the 1.5B writes cleaner pairs", synth_cleaner),
    Claim("checker-fit", "the 0.5B writes faster", synth_faster),
    Claim("checker-fit", "the cascade's calls on rte", cascade_calls("rte", "RTE pairs")),
    Claim("checker-fit", "the cascade's calls on wikibio", cascade_calls("wikibio", "WikiBio sentences")),
    *(
        Claim("checker-fit", f"the composed cascade's calls on {name}", composed_calls(name, where))
        for name, where in (("rte", "RTE pairs"), ("wikibio", "WikiBio sentences"), ("qnli", "QNLI pairs"))
    ),
    *(
        Claim(
            "checker-fit",
            f"the composed cascade within 1 point of the 1.5B judge on {name}",
            across(
                ("checker-fit", composed_cascade(name)),
                judge,
                "the cascade",
                "the 1.5B judge",
                -1.0,
                where,
                unit,
            ),
        )
        for name, judge, where, unit in (
            ("rte", ("grounded", "rte qwen2.5-coder-1.5b"), "RTE", "pairs"),
            ("wikibio", ("checker", WIKIBIO_JUDGE), WIKIBIO_SENTENCES, "passages"),
            ("qnli", QNLI_JUDGE, "QNLI's test part", "pairs"),
        )
    ),
    Claim(
        "checker-fit",
        "the nli mix within 3 points of the 1.5B judge on rte",
        across(
            ("checker-fit", NLI_MIX_RTE),
            ("grounded", "rte qwen2.5-coder-1.5b"),
            MIX_WHAT,
            "the 1.5B judge",
            -3.0,
            "RTE",
            "pairs",
        ),
    ),
    Claim(
        "checker-fit",
        "the nli mix against rte and qnli on rte",
        across(
            ("checker-fit", NLI_MIX_RTE),
            ("checker", CHECKER_RTE + " and qnli fit part"),
            MIX_WHAT,
            "the checker fitted on RTE and QNLI",
            0.0,
            "RTE",
            "pairs",
        ),
    ),
    Claim(
        "checker-fit",
        "the nli mix within 3 points of the 1.5B judge on wikibio",
        across(
            ("checker-fit", NLI_MIX_WIKIBIO),
            ("checker", WIKIBIO_JUDGE),
            MIX_WHAT,
            "the 1.5B judge",
            -3.0,
            WIKIBIO_SENTENCES,
            "passages",
        ),
    ),
    Claim(
        "checker-fit",
        "the nli mix against rte and qnli on wikibio",
        across(
            ("checker-fit", NLI_MIX_WIKIBIO),
            ("checker", CHECKER_WIKIBIO),
            MIX_WHAT,
            "the checker fitted on RTE and QNLI",
            0.0,
            WIKIBIO_SENTENCES,
            "passages",
        ),
    ),
    Claim("probes", "accuracy probe goal", probe_goal(PROBE_SE)),
    Claim("probes", "sep goal", probe_goal(PROBE_SEP)),
    Claim("probes", "sep goal, ten samples", probe_goal(PROBE_SEP75, PROBE_SE10, samples=10)),
    Claim("probes", "stack on the 0.5B", probe_stack),
    Claim("probes", "wikibio goal of 80", probe_goal_80),
    Claim("token-logprob", "every variant below chance", token_variants_below_chance),
    Claim("token-logprob", "stack with the unigram", token_stack),
    Claim("token-logprob", "platt turns it round", token_platt),
    Claim("token-logprob", "max-nll against max-entropy", token_guard_variant),
    Claim("token-logprob", "own log-probs against the proxy", token_own_vs_proxy),
    Claim("token-logprob", "own max-nll against direct question", token_dq_vs_own),
    Claim("grounded", "top_k=1 against every chunk", grounded_top1),
    Claim("grounded-framing", "@2 within 3 points of @1, 1.5B", framing_against_v1(QWEN15, -3.0)),
    Claim("grounded-framing", "@2 within 3 points of @1, 0.5B", framing_against_v1(QWEN05, -3.0)),
    Claim("grounded-framing", "@2 against @1, 1.5B", framing_against_v1(QWEN15, 0.0)),
    Claim("grounded-framing", "@2 against @1, 0.5B", framing_against_v1(QWEN05, 0.0)),
    Claim("grounded", "small models flag every pair", grounded_small_models_flag_all),
    Claim("grounded", "the smollm2 rerun has the earlier metrics", grounded_earlier_smollm),
    Claim("grounded", "openevals flags every sentence", grounded_openevals_flags_all),
    Claim("grounded", "smollm2 flags every true sentence", grounded_smollm_flags_true),
    Claim("one-call", "direct-question one call within 2 points", one_call_within_2),
    Claim("checker", "within 3 points of the 1.5B judge on rte", checker_within_3_of_the_judge(CHECKER_RTE)),
    Claim(
        "checker",
        "fitted on rte and qnli, within 3 points of the 1.5B judge on rte",
        checker_within_3_of_the_judge(CHECKER_RTE + " and qnli fit part"),
    ),
    Claim("checker", "20 times faster on rte", checker_20x_faster(CHECKER_RTE, ("grounded", "rte qwen2.5-coder-1.5b"))),
    Claim("checker", "qnli added helps on rte", checker_qnli_helps_on_rte),
    Claim(
        "checker",
        "within 3 points of the 1.5B judge on wikibio",
        on_wikibio(CHECKER_WIKIBIO, WIKIBIO_JUDGE, "the checker fitted on RTE and QNLI", "the 1.5B judge", -3.0),
    ),
    Claim("checker", "20 times faster on wikibio", faster_on_wikibio(CHECKER_WIKIBIO, "the checker")),
    Claim("checker", "faster than the grounded probe on wikibio", checker_against_probe_speed),
    Claim(
        "checker",
        "the grounded probe within 3 points of the 1.5B judge on wikibio",
        on_wikibio(GPROBE_WIKIBIO, WIKIBIO_JUDGE, "the grounded probe", "the 1.5B judge", -3.0),
    ),
    Claim(
        "checker",
        "the grounded probe 20 times faster on wikibio",
        faster_on_wikibio(GPROBE_WIKIBIO, "the grounded probe"),
    ),
    Claim(
        "checker",
        "the grounded probe within 3 points of the 1.5B judge on rte",
        fast_against(GPROBE_RTE, RTE_JUDGE, "the grounded probe", "the 1.5B judge", -3.0, "RTE", "pairs"),
    ),
    Claim(
        "checker",
        "the grounded probe against the checker on rte",
        fast_against(GPROBE_RTE, CHECKER_RTE_FILE, "the grounded probe", "the checker", 0.0, "RTE", "pairs"),
    ),
    Claim(
        "checker",
        "the grounded probe against the checker on wikibio",
        on_wikibio(GPROBE_WIKIBIO, CHECKER_WIKIBIO, "the grounded probe", "the checker", 0.0),
    ),
    Claim(
        "checker",
        "fitted on wikibio, within 3 points of the 1.5B judge on wikibio",
        on_wikibio(CHECKER_OWN_WIKIBIO, WIKIBIO_JUDGE, "the checker fitted on WikiBio 0-119", "the 1.5B judge", -3.0),
    ),
    Claim(
        "checker",
        "fitted on wikibio, 20 times faster on wikibio",
        faster_on_wikibio(CHECKER_OWN_WIKIBIO, "the checker fitted on WikiBio 0-119"),
    ),
    Claim(
        "checker",
        "wikibio's labels against rte and qnli, on wikibio",
        on_wikibio(
            CHECKER_OWN_WIKIBIO,
            CHECKER_WIKIBIO,
            "the checker fitted on WikiBio 0-119",
            "the checker fitted on RTE and QNLI",
            0.0,
        ),
    ),
    Claim(
        "checker",
        "the teacher's labels against wikibio's, on wikibio",
        on_wikibio(
            CHECKER_TAUGHT_WIKIBIO,
            CHECKER_OWN_WIKIBIO,
            "the checker fitted on the 1.5B judge's labels",
            "the checker fitted on WikiBio's own labels",
            0.0,
        ),
    ),
    Claim(
        "checker",
        "the teacher's labels, within 3 points of the 1.5B judge on wikibio",
        on_wikibio(
            CHECKER_TAUGHT_WIKIBIO,
            WIKIBIO_JUDGE,
            "the checker fitted on the 1.5B judge's labels",
            "the 1.5B judge",
            -3.0,
        ),
    ),
    Claim(
        "checker",
        "fitted on wikibio, within 3 points of the 0.5B judge on wikibio",
        on_wikibio(
            CHECKER_OWN_WIKIBIO, WIKIBIO_SMALL_JUDGE, "the checker fitted on WikiBio 0-119", "the 0.5B judge", -3.0
        ),
    ),
    Claim(
        "checker",
        "fitted on rte and qnli, against the 0.5B judge on qnli",
        on_qnli(QNLI_CHECKER, QNLI_SMALL_JUDGE, "the checker fitted on RTE and QNLI", "the 0.5B judge", 0.0),
    ),
    Claim(
        "checker",
        "fitted on rte and qnli, within 3 points of the 1.5B judge on qnli",
        on_qnli(QNLI_CHECKER, QNLI_JUDGE, "the checker fitted on RTE and QNLI", "the 1.5B judge", -3.0),
    ),
    Claim("checker", "20 times faster on qnli", checker_20x_faster(QNLI_CHECKER[1], QNLI_JUDGE)),
    Claim(
        "checker", "qnli added helps on qnli", on_qnli(QNLI_CHECKER, QNLI_CHECKER_RTE, "RTE and QNLI", "RTE alone", 0.0)
    ),
    Claim(
        "checker",
        "fitted on all three, within 3 points of the 1.5B judge on rte",
        checker_within_3_of_the_judge("rte val, " + ALL_THREE),
    ),
    Claim(
        "checker",
        "wikibio added to rte and qnli, on rte",
        fast_against(
            "rte val, " + ALL_THREE,
            CHECKER_RTE + " and qnli fit part",
            "the checker fitted on all three",
            "the checker fitted on RTE and QNLI",
            0.0,
            "RTE",
            "pairs",
        ),
    ),
    Claim(
        "checker",
        "wikibio added to rte and qnli, on qnli",
        on_qnli(
            QNLI_CHECKER_ALL,
            QNLI_CHECKER,
            "the checker fitted on all three",
            "the checker fitted on RTE and QNLI",
            0.0,
        ),
    ),
    Claim(
        "checker",
        "fitted on all three, within 3 points of the 1.5B judge on wikibio",
        on_wikibio(
            "wikibio 120-237, " + ALL_THREE, WIKIBIO_JUDGE, "the checker fitted on all three", "the 1.5B judge", -3.0
        ),
    ),
    Claim(
        "checker",
        "rte and qnli added to wikibio, on wikibio",
        on_wikibio(
            "wikibio 120-237, " + ALL_THREE,
            CHECKER_OWN_WIKIBIO,
            "the checker fitted on all three",
            "the checker fitted on WikiBio 0-119",
            0.0,
        ),
    ),
    Claim("calibrated-risk", "planted: direct-question against selfcheck-prompt", calibrated_dq_vs_scgp),
    Claim("calibrated-risk", "selfcheck-prompt:prob against version 1", calibrated_prob_vs_v1),
    Claim("calibrated-risk", "the stack against its best member", calibrated_stack),
    Claim("wikibio-10", "fibe against selfcheck-prompt", wikibio_pair("fibe", "selfcheck-prompt")),
    Claim("wikibio-10", "fibe against chance", wikibio_fibe_chance),
    Claim(
        "wikibio-10",
        "semantic-entropy-paragraph against selfcheck-prompt",
        wikibio_pair("semantic-entropy-paragraph", "selfcheck-prompt"),
    ),
    Claim(
        "wikibio-10",
        "fibe+selfcheck+sbc against selfcheck-prompt",
        wikibio_pair("fibe+selfcheck+sbc", "selfcheck-prompt", star=True),
    ),
    Claim("delimit", "fenced against v1", delimit_pair),
    *(
        Claim(name, "recommended against the best single method", choose_against_best_single(name))
        for name in ("choose-rte", "choose-wikibio", "stack-wikibio", "choose-wikibio-checker")
    ),
    Claim("phr", "algorithm 1 tracks definition 4", phr_tracks_definition),
    Claim("clue", "the paper's ordering D_R < D_L < D_I", clue_ordering),
    Claim("phr-icl", "follows sst-2, misses rte", phr_icl_follows),
    Claim("peers/selfcheckgpt-unigram", "no unseen token", unigram_peer_no_unseen),
    Claim("tool-calls", "no false claim in the written replies", written_replies_hold_no_false_claim),
    Claim("tool-calls", "the judge ranks undecided false claims above right ones", judge_ranks_undecided_claims),
)


def decided() -> dict[str, dict[str, Any]]:
    """Every claim's verdict, by record."""
    found: dict[str, dict[str, Any]] = {}
    for claim in CLAIMS:
        found.setdefault(claim.record, {})[claim.name] = _plain(claim.decide(read))
    return found


def _plain(value: Any) -> Any:
    """JSON values (tuples as lists, numpy numbers as floats), as the record stores them."""
    return json.loads(json.dumps(value, default=lambda v: float(v) if isinstance(v, np.floating) else list(v)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 naming each record that is stale")
    args = ap.parse_args(argv)
    stale = []
    for name, verdicts in decided().items():
        record = read(name)
        if record.get("verdicts") == verdicts:
            continue
        stale.append(name)
        if not args.check:
            write(name, {**record, "verdicts": verdicts})
    if args.check and stale:
        print(f"stale verdicts in {', '.join(stale)}: run benchmarks/verdicts.py")
        return 1
    for claim in CLAIMS:
        print(f"{claim.record} / {claim.name}: {read(claim.record)['verdicts'][claim.name]['verdict']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
