"""CLUE: the formulas by hand and against the paper's own numbers, the merge, the graph on a scripted
model with a table-driven zero-shot scorer (call counts, cache replay, bad answers), diversity."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from halluscope.backends.entailment import ZeroShot, yes_probability
from halluscope.backends.gateway import CallStats, Gateway
from halluscope.bench.papers.clue import pearson
from halluscope.bench.runner import BenchResult
from halluscope.errors import ConfigError
from halluscope.methods import clue, clue_diversity
from halluscope.scoring import (
    assignment_counts,
    concept_labels,
    concept_uncertainties,
    concept_uncertainty,
    entropy_diversity,
    harmonic_mean_diversity,
)

# ---------------------------------------------------------------- formulas


def test_concept_uncertainty_by_hand() -> None:
    assert concept_uncertainty([0.5, 0.25]) == pytest.approx(1.5 * math.log(2))  # (ln 2 + ln 4) / 2
    assert concept_uncertainty([1.0, 1.0]) == 0.0
    assert concept_uncertainty([0.0, 1.0]) == pytest.approx(-math.log(1e-6) / 2)  # f clipped at 1e-6
    assert concept_uncertainties([[0.9, 0.0], [0.9, 0.05]]) == pytest.approx(
        [-math.log(0.9), (-math.log(1e-6) - math.log(0.05)) / 2]
    )
    with pytest.raises(ValueError, match="probabilities"):
        concept_uncertainty([1.2])
    with pytest.raises(ValueError, match="every output"):
        concept_uncertainties([[0.5, 0.5], [0.5]])


def test_pearson_reproduces_the_papers_table_9() -> None:
    """Table 9 ('Meister'): U(c) against the answer concept scores of D_R, D_L, D_I."""
    u = [0.01, 0.018, 0.062, 0.302, 0.766, 0.876, 1.371]
    d_r = [0.978, 0.976, 0.896, 0.525, 0.226, 0.251, 0.073]
    d_l = [0.419, 0.732, 0.897, 0.889, 0.294, 0.474, 0.471]
    d_i = [0.003, 0.003, 0.005, 0.037, 0.012, 0.012, 0.005]
    assert pearson(u, d_r) == pytest.approx(-0.954, abs=5e-4)
    assert pearson(u, d_l) == pytest.approx(-0.529, abs=5e-4)
    # D_I's scores are printed to 3 decimals at 0.003-0.037, so rounding alone moves r by a few
    # hundredths: the paper's 0.041 is reproduced only as "near 0"
    assert abs(pearson(u, d_i) or 1.0) < 0.05
    assert pearson([1, 2, 3], [0.5, 0.5, 0.5]) is None  # undefined for a constant vector
    assert pearson([1.0], [2.0]) is None


def test_diversity_formulas_by_hand() -> None:
    assert harmonic_mean_diversity([1.0, 2.0, 4.0]) == pytest.approx(3 / 1.75)
    assert harmonic_mean_diversity([0.0, 3.0]) == 0.0
    assert entropy_diversity([600, 100, 100, 100, 100]) == pytest.approx(-(0.6 * math.log(0.6) + 0.4 * math.log(0.1)))
    assert entropy_diversity([200] * 5) == pytest.approx(math.log(5))
    assert entropy_diversity([1000, 0, 0, 0, 0]) == 0.0
    assert assignment_counts([[0.9, 0.1], [0.2, 0.7], [0.5, 0.5]]) == [2, 1]  # a tie goes to the first
    with pytest.raises(ValueError):
        entropy_diversity([0, 0])


TONES = ("happy", "sad", "humorous", "serious", "romantic")


def _stories(counts: Sequence[int], rng: np.random.Generator) -> list[list[float]]:
    """A synthetic score matrix: a story of tone k scores 0.85-0.99 on tone k and 0.001-0.2 on the others."""
    rows = []
    for k, count in enumerate(counts):
        for _ in range(count):
            row = list(rng.uniform(0.001, 0.2, len(TONES)))
            row[k] = float(rng.uniform(0.85, 0.99))
            rows.append(row)
    return rows


def test_diversity_follows_the_papers_table_11_pattern() -> None:
    """Table 10's three story sets (single-class, biased, uniform): both metrics rank them as Table 11."""
    rng = np.random.default_rng(0)
    sets = {"single": (1000, 0, 0, 0, 0), "biased": (600, 100, 100, 100, 100), "uniform": (200,) * 5}
    harmonic, entropy = {}, {}
    for name, counts in sets.items():
        matrix = _stories(counts, rng)
        harmonic[name] = harmonic_mean_diversity(concept_uncertainties(matrix))
        entropy[name] = entropy_diversity(assignment_counts(matrix))
    assert harmonic["single"] < harmonic["biased"] < harmonic["uniform"]
    assert entropy["single"] < entropy["biased"] < entropy["uniform"]
    assert entropy["uniform"] == pytest.approx(math.log(5))  # the paper measures 1.594 with its classifier


def test_concept_labels_use_both_thresholds() -> None:
    assert concept_labels([0.95, 0.5, 0.05, 0.9, 0.1], theta_h=0.9, theta_l=0.1) == [0, -1, 1, -1, -1]
    with pytest.raises(ValueError, match="theta_l <= theta_h"):
        concept_labels([0.5], theta_h=0.1, theta_l=0.9)


def test_yes_probability_from_the_first_token() -> None:
    top = [{"token": "Yes", "logprob": math.log(0.6)}, {"token": " no", "logprob": math.log(0.2)}]
    assert yes_probability(
        [{"token": " ", "logprob": 0.0}, {"token": "Yes", "logprob": math.log(0.6), "top_logprobs": top}]
    ) == pytest.approx(0.75)
    assert yes_probability([{"token": "No", "logprob": math.log(0.8)}]) == pytest.approx(0.2)  # no top list
    assert (
        yes_probability([{"token": "Maybe", "logprob": 0.0, "top_logprobs": [{"token": "Maybe", "logprob": 0.0}]}])
        is None
    )
    assert yes_probability(None) is None


# ---------------------------------------------------------------- the graph on scripted answers

QUESTION = "Who founded Apple?"
OUTPUTS = [
    "Steve Jobs and Steve Wozniak founded Apple in 1976.",
    "Apple was founded by Steve Jobs, Steve Wozniak and Ronald Wayne in Cupertino.",
    "Steve Jobs founded Apple in a garage in Los Altos.",
]
CONCEPTS = {
    OUTPUTS[0]: '"Founders of Apple", "Apple\'s founding year"',
    OUTPUTS[1]: "'Apple founders', 'Location of Apple's founding'",
    OUTPUTS[2]: "'founders of apple', 'Garage origin'",
}
SYNONYMS = {frozenset({"Founders of Apple", "Apple founders"})}
ABOUT = {  # f(o_i, c) per concept over the three outputs
    "Founders of Apple": [0.9, 0.9, 0.9],
    "Apple's founding year": [0.8, 0.1, 0.1],
    "Location of Apple's founding": [0.1, 0.8, 0.1],
    "Garage origin": [0.0, 0.05, 0.9],
}
REFERENCE = "Steve Jobs co-founded Apple."


class TableScorer(ZeroShot):
    """Scores from the tables above; counts the pairs it is asked."""

    name = "table"

    def __init__(self) -> None:
        self.asked: list[tuple[str, str]] = []

    def scores(self, pairs: Sequence[tuple[str, str]], stats: CallStats | None = None) -> list[float | None]:
        self.asked.extend(pairs)
        return [self._one(p, h) for p, h in pairs]

    @staticmethod
    def _one(premise: str, hypothesis: str) -> float | None:
        if m := re.fullmatch(r"This concept is similar to (.*)", hypothesis):
            return 0.995 if frozenset({premise, m.group(1)}) in SYNONYMS else 0.1
        if m := re.fullmatch(r"This question is relevant to (.*)", hypothesis):
            return 0.95 if "Founders" in m.group(1) else 0.3
        concept = hypothesis.removeprefix("This example is about ")
        if premise == REFERENCE:
            return 0.97 if "Founders" in concept else 0.02
        if premise == "unreadable":
            return None
        return ABOUT[concept][OUTPUTS.index(premise)]


def _responder(prompt: str, params: dict[str, Any]) -> str:
    if prompt.startswith("Answer the question in one single sentence"):
        return OUTPUTS[params["seed"]]  # seed 0 + sample index
    if prompt.startswith("Extract high-level concepts"):
        return CONCEPTS[prompt.rsplit("paragraph: ", 1)[1].removesuffix("\nconcepts:").strip()]
    raise AssertionError(f"unexpected prompt: {prompt[:80]}")


def test_clue_graph_samples_extracts_merges_and_scores(gateway: Gateway, scripted: Any) -> None:
    model = scripted(_responder)
    scorer = TableScorer()
    stats = CallStats()
    result = clue.detect(
        QUESTION, model=model, judge=scorer, n=3, references={"D_R": REFERENCE}, gateway=gateway, stats=stats
    )
    unit = {u.text: u for u in result.units}

    assert result.evidence["outputs"] == OUTPUTS
    assert stats.calls == 3 + 3  # N samples + N extractions
    # 'founders of apple' equals 'Founders of Apple' but for case: pooled once, without a scorer call
    pool = ["Founders of Apple", "Apple's founding year", "Location of Apple's founding", "Garage origin"]
    assert sorted(unit) == sorted(pool)
    assert {c: u.evidence["merged"] for c, u in unit.items() if u.evidence["merged"]} == {
        "Founders of Apple": ["Apple founders"]
    }
    # greedy against the kept concepts: year 1 pair, 'Apple founders' 1, location 2, garage 3 = 7 pairs;
    # only the synonym passes forward, so it alone costs a backward score
    assert result.meta.params["merge_pairs"] == 7
    merge_calls = [p for p in scorer.asked if p[1].startswith("This concept is similar")]
    assert len(merge_calls) == 8
    assert len(scorer.asked) == 8 + 3 * 4 + 4 + 4  # merge + outputs x pool + reference + baseline
    assert [unit[c].evidence["scores"] for c in pool] == [[ABOUT[c][i] for i in range(3)] for c in pool]
    assert [unit[c].score for c in pool] == pytest.approx(
        [
            -math.log(0.9),
            -(math.log(0.8) + 2 * math.log(0.1)) / 3,
            -(math.log(0.8) + 2 * math.log(0.1)) / 3,
            -(math.log(1e-6) + math.log(0.05) + math.log(0.9)) / 3,  # f = 0 clipped
        ]
    )
    assert [unit[c].evidence["references"] for c in pool] == [{"D_R": s} for s in (0.97, 0.02, 0.02, 0.02)]
    assert [unit[c].evidence["question_relevance"] for c in pool] == [0.95, 0.3, 0.3, 0.3]
    assert result.meta.events == {}

    again = CallStats()
    replay = clue.detect(
        QUESTION, model=model, judge=scorer, n=3, references={"D_R": REFERENCE}, gateway=gateway, stats=again
    )
    assert again.calls == 0 and again.cache_hits == 6  # samples and extractions replay from the cache
    assert [(u.text, u.score) for u in replay.units] == [(u.text, u.score) for u in result.units]


def test_detect_sorts_concepts_by_uncertainty_and_records_bad_answers(gateway: Gateway, scripted: Any) -> None:
    def respond(prompt: str, params: dict[str, Any]) -> str:
        if "paragraph: unreadable" in prompt:
            return "concepts:"  # nothing to parse
        return _responder(prompt, params)

    result = clue.detect(
        QUESTION, model=scripted(respond), outputs=[*OUTPUTS, "unreadable"], judge=TableScorer(), gateway=gateway
    )
    texts = [u.text for u in result.units]
    assert texts[0] == "Garage origin" and texts[-1] == "Founders of Apple"
    assert texts[1:3] == ["Apple's founding year", "Location of Apple's founding"]  # a tie keeps pool order
    assert result.units[-1].evidence["merged"] == ["Apple founders"]
    assert len(result.units[0].evidence["scores"]) == 4  # the unreadable output is still scored
    # the unreadable output's extraction is unparsed, and its scores come back as None -> 0.5
    assert result.meta.events == {"concepts_unparsed": 1, "scores_unscored": 4}
    assert result.meta.calls == 4 and result.meta.params["concepts_kept"] == 4
    assert result.meta.params["n"] == 4 and result.meta.params["outputs_given"] is True


class FakeEmbedder:
    """Cosine 1 for the synonym pair and for a concept with itself, 0 otherwise."""

    def similarity(self, a: Sequence[str], b: Sequence[str]) -> np.ndarray:
        return np.array([[1.0 if x == y or frozenset({x, y}) in SYNONYMS else 0.0 for y in b] for x in a])


def test_the_prefilter_asks_only_plausible_pairs() -> None:
    pool = ["Founders of Apple", "Apple's founding year", "Apple founders", "Garage origin"]
    exact = clue.merge_concepts(pool, TableScorer())
    scorer = TableScorer()
    filtered = clue.merge_concepts(pool, scorer, prefilter=0.5, embedder=FakeEmbedder())  # type: ignore[arg-type]
    assert (
        filtered[:2]
        == exact[:2]
        == (
            ["Founders of Apple", "Apple's founding year", "Garage origin"],
            {"Founders of Apple": ["Apple founders"]},
        )
    )
    assert exact[2] == 1 + 1 + 2 and filtered[2] == 1 and len(scorer.asked) == 2
    with pytest.raises(ConfigError, match="embedder"):
        clue.merge_concepts(pool, scorer, prefilter=0.5)


def test_bad_input_is_named(gateway: Gateway, scripted: Any) -> None:
    with pytest.raises(ConfigError, match="question"):
        clue.detect(" ", model=scripted(_responder), outputs=OUTPUTS, judge=TableScorer(), gateway=gateway)
    with pytest.raises(ConfigError, match=r"outputs\[0\] must be a non-empty text"):
        clue.detect(QUESTION, model=scripted(_responder), outputs=[" "], judge=TableScorer(), gateway=gateway)
    with pytest.raises(ConfigError, match="clue needs model"):
        clue.detect(QUESTION, outputs=OUTPUTS, judge=TableScorer(), gateway=gateway)
    with pytest.raises(ConfigError, match="threshold"):
        clue.build(None, TableScorer(), gateway, threshold=1.5)
    with pytest.raises(ConfigError, match="are taken"):
        clue.detect(
            QUESTION,
            model=scripted(_responder),
            judge=TableScorer(),
            references={"output:0": REFERENCE},
            gateway=gateway,
        )


def test_diversity_counts_each_output_once() -> None:
    class ToneScorer(ZeroShot):
        name = "tone"

        def scores(self, pairs: Sequence[tuple[str, str]], stats: CallStats | None = None) -> list[float | None]:
            return [0.9 if h.endswith(p.split()[0] + " tone") else 0.05 for p, h in pairs]

    stories = ["happy story", "happy tale", "sad story"]
    result = clue_diversity.detect(
        outputs=stories, subconcepts=["happy tone", "sad tone", "humorous tone"], concept="tone", judge=ToneScorer()
    )
    out = result.evidence
    assert [u.evidence["assigned"] for u in result.units] == [2, 1, 0]
    assert out["entropy"] == pytest.approx(-(2 / 3) * math.log(2 / 3) - (1 / 3) * math.log(1 / 3))
    u = [unit.score for unit in result.units]
    assert u[0] == pytest.approx(-(2 * math.log(0.9) + math.log(0.05)) / 3)
    assert out["harmonic_mean"] == pytest.approx(3 / sum(1 / x for x in u))
    with pytest.raises(ConfigError, match="two lower-level"):
        clue_diversity.detect(outputs=stories, subconcepts=["happy tone"], judge=ToneScorer())


# ---------------------------------------------------------------- the QNLI bench and the CLI


class OverlapScorer(ZeroShot):
    """A deterministic stand-in scorer: the share of the hypothesis' concept words found in the premise."""

    name = "overlap"

    def scores(self, pairs: Sequence[tuple[str, str]], stats: CallStats | None = None) -> list[float | None]:
        out: list[float | None] = []
        for premise, hypothesis in pairs:
            concept = set(re.findall(r"\w+", hypothesis.lower())) - {"this", "example", "is", "about", "question"}
            words = set(re.findall(r"\w+", premise.lower()))
            out.append(min(0.99, max(0.01, len(concept & words) / max(1, len(concept)))))
        return out


def _qnli_responder(prompt: str, params: dict[str, Any]) -> str:
    if prompt.startswith("Answer the question in one single sentence"):
        question = prompt.rsplit(":", 1)[1].strip()
        words = re.findall(r"\w+", question)
        return f"It is about {' '.join(words[params['seed'] : params['seed'] + 3])} and more."
    paragraph = prompt.rsplit("paragraph: ", 1)[1].removesuffix("\nconcepts:")
    words = re.findall(r"\w+", paragraph)
    return ", ".join(f"'{w} topic'" for w in words[3:6])


def test_bench_clue_on_real_qnli_questions(gateway: Gateway, scripted: Any, data_dir: Any, tmp_path: Any) -> None:
    from halluscope.bench.papers.clue import clue_plan, load_qnli
    from halluscope.bench.runner import run as bench

    items = load_qnli(data_dir, limit=3)
    assert [i.question for i in items][:1] == ["What is the minimum required if you want to teach in Canada?"]
    assert all(i.irrelevant not in (i.relevant, i.less_relevant) for i in items)
    model = scripted(_qnli_responder)
    run = bench(clue_plan(model=model, scorer=OverlapScorer(), gateway=gateway, data=data_dir, limit=2, n=3), tmp_path)
    assert run.metrics["questions"] == 2 and run.meta.calls == 2 * (3 + 3)  # N samples + N extractions per question
    first = run.records[0]
    assert set(first["answer_scores"]) == {"D_R", "D_L", "D_I"}
    assert len(first["uncertainty"]) == len(first["concepts"]) == len(first["answer_scores"]["D_R"])
    assert first["labels"] == concept_labels(first["answer_scores"]["D_R"], 0.6, 0.2)
    assert first["baseline_risk"] == pytest.approx([1 - s for s in first["question_relevance"]])
    for key in ("D_R", "D_L", "D_I"):
        expected = pearson(first["uncertainty"], first["answer_scores"][key])
        assert first["correlation"][key] == (pytest.approx(expected) if expected is not None else None)
    assert set(run.metrics["detection"]) == {"CLUE", "baseline"}
    for name in ("results.json", "report.md", "correlation.png", "roc.png", "pr.png"):
        assert (tmp_path / name).is_file()
    assert set(json.loads((tmp_path / "results.json").read_text())) == set(BenchResult.model_fields)
    report = (tmp_path / "report.md").read_text()
    assert "theta_h = 0.6, theta_l = 0.2" in report and "-0.488" in report
    again_out = tmp_path / "again"  # another folder: no items to resume, every call from the cache
    again = bench(
        clue_plan(model=model, scorer=OverlapScorer(), gateway=gateway, data=data_dir, limit=2, n=3), again_out
    )
    assert again.meta.calls == 0 and again.meta.cache_hits == 12
    with pytest.raises(ValueError, match="theta"):
        clue_plan(model=model, scorer=OverlapScorer(), gateway=gateway, data=data_dir, theta_h=0.1, theta_l=0.5)


def test_clue_end_to_end_on_the_tiny_local_model(gateway: Gateway) -> None:
    """SmolLM2 extracts and scores (no claim about quality): every kept concept gets a probability
    from a real p(Yes) for every output, and a rerun replays every call from the cache."""
    from halluscope.backends.entailment import LLMZeroShot

    model = "local:smollm2-135m"
    outputs = OUTPUTS[:2]
    result = clue.detect(
        QUESTION,
        model=model,
        outputs=outputs,
        judge=LLMZeroShot(model, gateway=gateway, prompt="clue.zero_shot"),
        gateway=gateway,
    )
    kept = result.meta.params["concepts_kept"]
    assert kept == len(result.units) >= 1
    for unit in result.units:
        scores = unit.evidence["scores"]
        assert len(scores) == 2 and all(0.0 < s < 1.0 for s in scores)
        assert unit.score == pytest.approx(-sum(math.log(s) for s in scores) / 2)
    merge_calls = result.meta.params["merge_pairs"]  # at least one score per pair asked
    assert result.meta.calls >= 2 + merge_calls + 2 * kept
    again = clue.detect(
        QUESTION,
        model=model,
        outputs=outputs,
        judge=LLMZeroShot(model, gateway=gateway, prompt="clue.zero_shot"),
        gateway=gateway,
    )
    assert again.meta.calls == 0 and [u.score for u in again.units] == [u.score for u in result.units]
