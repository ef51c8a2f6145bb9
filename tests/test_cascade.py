"""A cascade on `grounded`: the fast check scores every sentence, and only a sentence whose fast score
lies in the band is checked again by the judge, its score replaced by the judge's; each unit says
whether it was escalated, and the calls are the escalated sentences' alone."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

import halluscope
from halluscope.backends.entailment import Entailment, Judgement
from halluscope.backends.gateway import CallStats, Gateway
from halluscope.errors import ConfigError

CONTEXT = "Ada Lovelace was born in London in 1815. She wrote notes on the Analytical Engine."
TEXT = "Ada Lovelace was born in London. She was born in Paris. She wrote about the engine."


class SureAndUnsure(Entailment):
    """A fast checker stand-in: sure of London (supported) and Paris (not), unsure of anything else."""

    name = "nli:stand-in"

    def __init__(self) -> None:
        self.pairs: list[tuple[str, str]] = []

    def judge_many(
        self, pairs: Sequence[tuple[str, str]], question: str | None = None, stats: CallStats | None = None
    ) -> list[Judgement]:
        self.pairs += pairs
        support = [0.95 if "London" in b else 0.05 if "Paris" in b else 0.5 for _, b in pairs]
        return [Judgement("entailment", {"entailment": p}) for p in support]


def test_only_the_sentences_the_fast_check_is_unsure_of_reach_the_judge(gateway: Gateway, scripted: Any) -> None:
    asked: list[str] = []
    judge = scripted(lambda prompt, params: asked.append(prompt) or "Yes")
    fast = SureAndUnsure()
    result = halluscope.detector("grounded", model=judge, fast=fast, gateway=gateway).detect(
        text=TEXT, context=[CONTEXT]
    )
    escalated = [u.evidence["escalated"] for u in result.units]
    assert escalated == [False, False, True]
    assert [u.evidence["fast_score"] for u in result.units] == pytest.approx([0.05, 0.95, 0.5])
    assert [u.score for u in result.units] == pytest.approx([0.05, 0.95, 0.0])  # the judge's Yes replaces 0.5
    assert len(asked) == 1 and "She wrote about the engine." in asked[0]  # one chunk, the one unsure sentence
    assert len(fast.pairs) == 3 and result.meta.calls == 1 and result.meta.params["escalated"] == 1
    assert result.meta.params["band"] == [0.2, 0.8]


def test_a_band_that_holds_every_score_escalates_every_sentence_and_an_empty_one_none(
    gateway: Gateway, scripted: Any
) -> None:
    judge = scripted(lambda prompt, params: "No")
    every = halluscope.detector("grounded", model=judge, fast=SureAndUnsure(), band=(0.0, 1.0), gateway=gateway)
    result = every.detect(text=TEXT, context=[CONTEXT])
    assert all(u.evidence["escalated"] for u in result.units) and [u.score for u in result.units] == [1.0] * 3
    none = halluscope.detector("grounded", model=judge, fast=SureAndUnsure(), band="0.6,0.6", gateway=gateway)
    result = none.detect(text=TEXT, context=[CONTEXT])
    assert not any(u.evidence["escalated"] for u in result.units) and result.meta.calls == 0


def test_a_cascade_refuses_what_it_cannot_run(gateway: Gateway, scripted: Any) -> None:
    judge = scripted(lambda prompt, params: "Yes")
    refused = {
        "band is LOW,HIGH with 0 <= LOW <= HIGH <= 1": {"band": (0.9, 0.1)},
        "band is LOW,HIGH \\(two numbers\\)": {"band": "0.2"},
        "no decompose, no batch": {"decompose": True},
        "fast takes a fitted checker or NLI model": {"fast": judge},
    }
    for message, given in refused.items():
        options = {"model": judge, "fast": SureAndUnsure(), **given}
        with pytest.raises(ConfigError, match=message):
            halluscope.detector("grounded", gateway=gateway, **options).detect(text=TEXT, context=[CONTEXT])


def test_the_cost_benchmark_counts_escalations_and_divides_one_runs_times(gateway: Gateway, scripted: Any) -> None:
    """benchmarks/fast_path_cost.py's row: a cascade's escalated share is its escalated units over all
    its units, its calls the judge's; and verdicts.py draws the speed ratio and the calls' share from
    the rows of that one run (one commit and load for every path)."""
    from tests.scripts import load_script

    cost, verdicts = load_script("benchmarks/fast_path_cost.py"), load_script("benchmarks/verdicts.py")
    judge = scripted(lambda prompt, params: "Yes")
    det = halluscope.detector("grounded", model=judge, fast=SureAndUnsure(), gateway=gateway)
    results = [det.detect(text=TEXT, context=[CONTEXT]) for _ in range(2)]  # the second from the cache
    row = cost.row("cascade", "rte", results, 3.0)
    assert (row["units"], row["escalated_share"], row["seconds_an_item"]) == (6, 0.333, 1.5)  # 2 of 6, rounded
    assert row["calls"] == 1  # the cache answered the second item's escalation
    rows = [
        {**row, "path": "checker", "seconds": 0.1, "units": 6, "calls": 0},
        {**row, "path": "judge", "seconds": 6.0, "units": 6, "calls": 6},
        {**row, "seconds": 3.0, "calls": 2},
    ]
    assert cost.ratios(rows) == [
        {"path": "checker", "dataset": "rte", "times_less_than_the_judge": 60.0},
        {"path": "cascade", "dataset": "rte", "times_less_than_the_judge": 2.0},
    ]
    run = {"commit": "abc", "load": 0.2, "rows": rows}
    records = {"checker-fit": {"runs": {verdicts.FAST_PATH_COST: run}}}
    faster = verdicts.fast_path_faster("checker", "rte", "RTE pairs")(records.__getitem__)
    assert faster["verdict"] == "holds" and faster["ratio"] == pytest.approx(60.0)
    assert verdicts.fast_path_faster("cascade", "rte", "RTE pairs")(records.__getitem__)["verdict"] == "falls short"
    calls = verdicts.cascade_calls("rte", "RTE pairs")(records.__getitem__)
    assert calls["verdict"] == "falls short" and calls["ratio"] == pytest.approx(2 / 6)
    run["load"] = 1.5  # started under load: no ratio is drawn
    assert verdicts.fast_path_faster("checker", "rte", "RTE pairs")(records.__getitem__)["verdict"] == "not decided"


def test_a_cascade_composed_from_two_runs_is_the_judge_at_a_full_band_and_the_checker_at_an_empty_one() -> None:
    """benchmarks/cascade_composed.py on the committed RTE and WikiBio runs: a band that holds every score
    sends every unit to the judge (the judge's ranking, every call), one that holds none sends none
    (the checker's, no call); WikiBio's calls weigh each sentence by its passage's chunks."""
    from tests.scripts import load_script

    composed = load_script("benchmarks/cascade_composed.py").composed
    full, empty = composed("rte", (0.0, 1.0), {}), composed("rte", (2.0, 2.0), {})
    assert full["metrics"]["cascade"] == full["metrics"]["judge"] and full["judge_calls"] == full["units"] == 277
    assert empty["metrics"]["cascade"] == empty["metrics"]["checker"] and empty["judge_calls"] == 0
    chunks = {"wikibio-120": 3}
    wikibio = composed("wikibio", (0.0, 1.0), chunks)
    first = len(wikibio["rows"][0]["labels"])
    assert wikibio["judge_alone_calls"] == wikibio["units"] + 2 * first  # passage 120's sentences check 3 chunks


def test_ragtruths_cascade_composes_from_the_committed_runs_at_the_earlier_sets_band() -> None:
    """benchmarks/cascade_composed.py on RAGTruth: the band reused from a committed composed run (refused for
    another share); a full band gives the judge's response-level figures, the same as its own bench run
    gave them (the same draws of sources), and every call; an empty band the checker's and none."""
    from tests.scripts import load_script

    script = load_script("benchmarks/cascade_composed.py")
    label = "checker-fit:the cascade on rte, composed, its band fitted on wikibio 0-119"
    band, about = script.fitted_band(label, 0.3)
    assert band == (0.3776, 0.6221) and about["as_in"] == label and about["units"] == 969
    with pytest.raises(SystemExit, match="was fitted for a share of 0.3, not 0.5"):
        script.fitted_band(label, 0.5)
    full, empty = script.composed_ragtruth((0.0, 1.0)), script.composed_ragtruth((2.0, 2.0))
    assert full["metrics"]["cascade"] == full["metrics"]["judge"] and full["judge_calls"] == full["judge_alone_calls"]
    assert empty["metrics"]["cascade"] == empty["metrics"]["checker"] and empty["judge_calls"] == 0
    judged = script.run_of(*script.RAGTRUTH[1])
    for key in ("response_precision", "response_recall", "response_f1", "auc_roc", "qa_response_f1"):
        assert full["metrics"]["judge"]["metrics"][key] == pytest.approx(judged["metrics"][key])
        assert full["metrics"]["judge"]["intervals"][key] == pytest.approx(judged["intervals"][key])
