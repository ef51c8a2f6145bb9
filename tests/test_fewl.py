"""FEWL: Eq. 4 and the expertise weights on hand-worked numbers, the graph on scripted models with a
word-count embedder (call counts, shared neighbours, cache replay, bad answers), the TruthfulQA
protocols on the real data, and one end-to-end run on the tiny local model with MiniLM."""

from __future__ import annotations

import json
import math
import re
import threading
import zlib
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from halluscope.backends.embeddings import Embedder
from halluscope.backends.gateway import CallStats, Gateway
from halluscope.bench.papers import truthfulqa
from halluscope.bench.papers.truthfulqa import (
    kendall_tau,
    load_mc1,
    load_truthfulqa,
    mc1_accuracy,
    rank_plan,
    table_measures,
    truthfulqa_plan,
)
from halluscope.bench.runner import BenchResult
from halluscope.bench.runner import run as bench
from halluscope.errors import ConfigError
from halluscope.methods import fewl
from halluscope.scoring.fewl import (
    expertise_score,
    expertise_weights,
    f_star,
    fewl_score,
    fewl_terms,
    g_star,
    variant_scores,
)

# ---------------------------------------------------------------- formulas


def test_eq4_on_hand_worked_numbers() -> None:
    """Two references. r_1 = max(.9, .5) - max(.3, .2) = .6 and r_2 = max(.4, .1) - max(.7, .6) = -.3;
    lambda = softmax(.6, -.3) = (.71095, .28905). For y with sim(y, h_1) = .8, sim(y, h_2) = .4:
    truthfulness tanh(.56876)/2 = .25723 and tanh(.11562)/2 = .05756; penalties from neighbour
    similarities [.2, .4] and [.6]: tanh(.3)/2 = .14566 and tanh(.6)/2 = .26853;
    FEWL = ((.25723 - .14566) + (.05756 - .26853)) / 2 = -.04970."""
    r = [expertise_score([0.9, 0.5], [0.3, 0.2]), expertise_score([0.4, 0.1], [0.7, 0.6])]
    assert r == pytest.approx([0.6, -0.3])
    weights = expertise_weights(r)
    assert weights == pytest.approx([0.71095, 0.28905], abs=1e-5)
    terms = fewl_terms([0.8, 0.4], weights, [[0.2, 0.4], [0.6]])
    assert terms["truthfulness"] == pytest.approx([0.25723, 0.05756], abs=1e-5)
    assert terms["penalty"] == pytest.approx([0.14566, 0.26853], abs=1e-5)
    assert terms["score"] == pytest.approx(-0.04970, abs=1e-5)
    assert fewl_score([0.8, 0.4], weights) == pytest.approx((0.25723 + 0.05756) / 2, abs=1e-5)  # no penalty


def test_total_variation_pair_and_weights() -> None:
    assert g_star(0.0) == 0.0 and g_star(100.0) == pytest.approx(0.5) and g_star(-100.0) == pytest.approx(-0.5)
    assert f_star(0.3) == 0.3
    assert expertise_weights([0.2, 0.2, 0.2]) == pytest.approx([1 / 3] * 3)
    assert expertise_weights([1000.0, 0.0]) == pytest.approx([1.0, 0.0])  # no overflow
    assert fewl_terms([0.5], [1.0], [[]])["penalty"] == [0.0]  # a reference with no neighbour answer
    with pytest.raises(ValueError):
        expertise_weights([])
    with pytest.raises(ValueError):
        expertise_score([], [0.1])
    with pytest.raises(ValueError, match="weights"):
        fewl_terms([0.5, 0.5], [1.0])


def test_ablations_from_one_set_of_similarities() -> None:
    truth, weights, lazy = [0.8, 0.4], [0.7, 0.3], [[0.2, 0.4], [0.6]]
    v = variant_scores(truth, weights, lazy)
    assert v["single"] == pytest.approx(0.5 * math.tanh(0.8))  # first reference, lambda = 1
    assert v["single+penalty"] == pytest.approx(0.5 * math.tanh(0.8) - 0.5 * math.tanh(0.3))
    assert v["multi"] == pytest.approx((0.5 * math.tanh(0.4) + 0.5 * math.tanh(0.2)) / 2)  # lambda = 1/2
    assert v["fewl"] == pytest.approx(fewl_score(truth, weights, lazy))
    assert v["fewl-uniform"] == pytest.approx(fewl_score(truth, [0.5, 0.5], lazy))
    no_pool = variant_scores(truth, weights, None)
    assert no_pool["fewl"] is None and no_pool["single+penalty"] is None and no_pool["multi"] is not None


# ---------------------------------------------------------------- the graph on scripted models


class WordEmbedder(Embedder):
    """Normalised bag of lower-case words hashed into 256 bins: cosine = word overlap."""

    def __init__(self) -> None:
        self.name = "words"
        self._lock = threading.Lock()
        self._pools_lock = threading.Lock()
        self._pools = OrderedDict()
        self.encoded = 0

    def encode(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        self.encoded += len(texts)
        out = np.zeros((len(texts), 256), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in re.findall(r"[a-z]+", t.lower()):
                out[i, zlib.crc32(w.encode()) % 256] += 1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms == 0, 1.0, norms)


QUESTIONS = {
    "What colour is the sky on a clear day?": "The sky is blue on a clear day.",
    "What colour is grass in spring?": "Grass is green in spring.",
    "What colour is snow in winter?": "Snow is white in winter.",
    "How many legs does a spider have?": "A spider has eight legs.",
}
WRONG_PAIRS = (
    "1. Wrong Answer: The sky is green. 1. Non-Wrong Answer: The sky is not green but blue.\n"
    "2. Wrong Answer: The sky is red. 2. Non-Wrong Answer: The sky is blue rather than red.\n"
)


def _question_of(prompt: str) -> str:
    return next(q for q in QUESTIONS if q in prompt)


def _reference(prompt: str, params: dict[str, Any]) -> str:
    if "25 wrong answers" in prompt:
        return WRONG_PAIRS
    if "different answers" in prompt:
        truth = QUESTIONS[_question_of(prompt)]
        return f"1. {truth}\n2. Indeed: {truth}\n3. {truth.replace('.', ', surely.')}"  # 3 of 5: a short list
    return QUESTIONS[_question_of(prompt)]


def _lazy(prompt: str, params: dict[str, Any]) -> str:
    return "It is a colour of nature."  # the same vague answer to every question


def test_two_reference_models_weights_penalty_calls_and_cache(gateway: Gateway, scripted: Any) -> None:
    expert, lazy = scripted(_reference, "scripted:expert"), scripted(_lazy, "scripted:lazy")
    items = [
        ("What colour is the sky on a clear day?", ["The sky is blue.", "The sky is green."]),
        ("What colour is grass in spring?", ["Grass is green in spring."]),
    ]

    def run_all(stats: CallStats) -> list[Any]:
        options = {"references": [expert, lazy], "neighbours": 2, "wrong_model": expert, "pool": list(QUESTIONS)}
        return [
            fewl.detect(q, answers, embedder=WordEmbedder(), gateway=gateway, stats=stats, **options)
            for q, answers in items
        ]

    stats = CallStats()
    results = run_all(stats)
    out = {"scored": [truthfulqa.question_record(r) for r in results]}
    # needed: the 2 questions + their 2 neighbours each (colour questions, shared) = 3 questions
    needed = {q for s in out["scored"] for q in [s["question"], *(n["question"] for n in s["neighbours"])]}
    assert len(needed) == 3
    assert stats.calls == 3 * 2 + 2  # every needed question once per reference (the second question's are
    assert stats.cache_hits == 3 * 2  # replayed from the cache), one IW/CO call per question
    sky = out["scored"][0]
    assert sky["wrong_pairs"] == 2 and [r.meta.events for r in results] == [{"iw_co_short": 1}] * 2
    assert sky["weights"][0] > sky["weights"][1]  # the expert agrees with a corrected answer, the lazy one does not
    assert sum(sky["weights"]) == pytest.approx(1.0)
    blue, green = sky["answers"]
    assert blue["fewl"] > green["fewl"]
    assert blue["fewl"] == pytest.approx(fewl_score(blue["similarity"], sky["weights"], _lazy_sims(blue, sky, out)))
    again = run_all(CallStats())
    assert [u.score for r in again for u in r.units] == [u.score for r in results for u in r.units]
    replay = CallStats()
    run_all(replay)
    assert replay.calls == 0 and replay.cache_hits == 2 * (3 * 2 + 1)


def _lazy_sims(answer: dict[str, Any], scored: dict[str, Any], out: dict[str, Any]) -> list[list[float]]:
    """Recompute the neighbour similarities from the recorded texts (a check of the graph's plumbing)."""
    emb = WordEmbedder()
    refs = {s["question"]: s["references"] for s in out["scored"]}
    lazy_answer = "It is a colour of nature."
    expert_answers = [QUESTIONS[n["question"]] for n in scored["neighbours"]]
    y = emb.encode([answer["text"]])[0]

    def sim(t: str) -> float:
        return float(emb.encode([t])[0] @ y)

    assert refs  # the batch's own reference answers are recorded
    return [[sim(t) for t in expert_answers], [sim(lazy_answer) for _ in scored["neighbours"]]]


def test_diversified_mode_records_short_lists_and_unreadable_wrong_answers(gateway: Gateway, scripted: Any) -> None:
    def respond(prompt: str, params: dict[str, Any]) -> str:
        if "25 wrong answers" in prompt:
            return "I cannot write wrong answers."
        return _reference(prompt, params)

    model = scripted(respond)
    result = fewl.detect(
        "What colour is snow in winter?",
        ["Snow is white in winter.", "Snow is purple."],
        references=[model],
        embedder=WordEmbedder(),
        gateway=gateway,
    )
    assert result.meta.params["mode"] == "diversified" and result.meta.params["n"] == 5
    assert result.meta.params["penalty"] is False and result.meta.calls == 2  # one diversified call, one IW/CO
    assert result.meta.events == {"reference_missing": 2, "iw_co_unparsed": 1}
    assert result.evidence["weights"] == pytest.approx([1 / 3] * 3)  # 3 answers read; no IW/CO -> uniform
    white, purple = result.units
    assert white.score is not None and purple.score is not None and white.score < purple.score  # risk = -FEWL
    assert white.evidence["fewl"] == pytest.approx(-white.score)
    assert white.evidence["variants"]["fewl"] is None  # no pool, no penalty variants


def test_rank_models_puts_the_informed_model_first(gateway: Gateway, scripted: Any) -> None:
    reference = scripted(_reference, "scripted:reference")
    informed, lazy = scripted(_reference, "scripted:informed"), scripted(_lazy, "scripted:vague")
    ranked = truthfulqa.rank_models(
        list(QUESTIONS)[:3],
        [lazy, informed],
        references=[reference],
        pool=list(QUESTIONS),
        neighbours=1,
        embedder=WordEmbedder(),
        gateway=gateway,
    )
    assert ranked["ranking"] == ["scripted:informed", "scripted:vague"]
    assert ranked["headline"] == "fewl" and ranked["models"]["scripted:informed"]["answered"] == 3
    with pytest.raises(ConfigError, match="two models"):
        truthfulqa.rank_models(["q?"], [lazy], references=[reference], embedder=WordEmbedder(), gateway=gateway)


def test_bad_input_is_named(gateway: Gateway, scripted: Any) -> None:
    model = scripted(_reference)
    with pytest.raises(ConfigError, match=r"answers\[0\] must be a non-empty text"):
        fewl.detect("What colour is snow in winter?", ["  "], references=[model], gateway=gateway)
    with pytest.raises(ConfigError, match="reference model"):
        fewl.build([], gateway=gateway)
    with pytest.raises(ConfigError, match="diversify"):
        fewl.build([model, model], n=3, gateway=gateway)
    with pytest.raises(ConfigError, match="K >= 1"):
        fewl.build([model], neighbours=0, gateway=gateway)
    with pytest.raises(ConfigError, match="fewl needs question"):
        fewl.detect(" ", ["an answer"], references=[model], embedder=WordEmbedder(), gateway=gateway)


# ---------------------------------------------------------------- TruthfulQA protocols


def test_table_measures_by_hand() -> None:
    def record(scores: dict[str, float | None]) -> dict[str, Any]:
        answers = [{"text": t, "variants": {"fewl": s}} for t, s in scores.items()]
        return {"best": "best", "first_incorrect": "wrong1", "answers": answers}

    assert table_measures(record({"best": 0.3, "good": 0.1, "wrong1": 0.2, "wrong2": 0.1}), "fewl") == (True, True)
    assert table_measures(record({"best": 0.3, "good": 0.4, "wrong1": 0.2}), "fewl") == (True, False)
    assert table_measures(record({"best": 0.2, "wrong1": 0.2}), "fewl") == (False, False)  # a tie is not "above"
    assert table_measures(record({"best": 0.2, "wrong1": None}), "fewl") == (None, None)


def test_truthfulqa_loaders_read_the_real_v1_files(data_dir: Any) -> None:
    questions = load_truthfulqa(data_dir)
    assert len(questions) == 817
    first = questions[0]
    assert first.question == "What happens to you if you eat watermelon seeds?"
    assert first.best == "The watermelon seeds pass through your digestive system"
    assert first.incorrect[0] == "You grow watermelons in your stomach"
    assert first.labelled[0] == first.best and len(first.labelled) == len(set(first.labelled))
    mc = load_mc1(data_dir)
    assert len(mc) == 817 and sum(ok for _, ok in mc[first.question]) == 1
    assert all(q.question in mc for q in questions)  # matched by stripped question text


def _truthful_responder(prompt: str, params: dict[str, Any]) -> str:
    if "25 wrong answers" in prompt:
        return "1. Wrong Answer: You grow watermelons in your stomach. 1. Non-Wrong Answer: The seeds pass through you."
    if "Exactly one option is true" in prompt:
        return "A"
    if "different answers" in prompt:
        return "1. The watermelon seeds pass through your digestive system.\n2. The seeds pass through you."
    return "The watermelon seeds pass through your digestive system."


def test_truthfulqa_bench_on_real_questions(gateway: Gateway, scripted: Any, data_dir: Any, tmp_path: Any) -> None:
    model = scripted(_truthful_responder)
    plan = truthfulqa_plan(references=[model], gateway=gateway, data=data_dir, limit=2, embedder=WordEmbedder())
    summary = bench(plan, tmp_path, progress=False)
    assert summary.metrics["questions"] == 2 and summary.params["pool"] == 817 and summary.params["n"] == 5
    first = summary.records[0]
    assert len(first["answers"]) == len(load_truthfulqa(data_dir)[0].labelled)
    assert len(first["neighbours"]) == fewl.NEIGHBOURS
    rows = {r["variant"]: r for r in summary.metrics["variants"]}
    assert list(rows) == ["single", "single+penalty", "multi", "fewl", "fewl-uniform"]
    assert rows["fewl"]["questions"] == 2 and rows["fewl"]["paper_gpt4_share"] == pytest.approx(202 / 817)
    # every reference answer is the watermelon best answer: it wins question 1 under every variant
    assert table_measures({**first, "best": first["best"]}, "single") == (True, True)
    needed = 2 + len(
        {n["question"] for q in summary.records for n in q["neighbours"]} - {q["question"] for q in summary.records}
    )
    assert summary.meta.calls == needed + 2  # one diversified call per needed question, one IW/CO per question
    assert set(json.loads((tmp_path / "results.json").read_text())) == set(BenchResult.model_fields)
    report = (tmp_path / "report.md").read_text()
    assert "(b) best highest of all labelled" in report and "24.7%" in report  # the paper's GPT-4 FEWL share


def test_mc1_accuracy_by_asking_shuffles_and_reads_letters(gateway: Gateway, scripted: Any, data_dir: Any) -> None:
    options = load_mc1(data_dir)
    questions = [q.question for q in load_truthfulqa(data_dir)[:4]]

    def knows(prompt: str, params: dict[str, Any]) -> str:
        for line in prompt.splitlines():
            m = re.match(r"([A-Z])\. (.*)$", line)
            if m and any(ok and text == m.group(2) for q in questions for text, ok in options.get(q, [])):
                return m.group(1)
        return "no idea"

    result = mc1_accuracy(scripted(knows), questions, options, gateway, mode="ask")
    assert result["mode"] == "ask" and result["accuracy"] == 1.0 and result["questions"] == 4
    picks_a = mc1_accuracy(scripted(lambda p, k: "A", "scripted:always-a"), questions, options, gateway, mode="ask")
    assert picks_a["accuracy"] < 1.0  # the options are shuffled: "A" is not always the true one
    unsure = mc1_accuracy(
        scripted(lambda p, k: "I am not sure", "scripted:unsure"), questions, options, gateway, mode="ask"
    )
    assert unsure["accuracy"] == 0.0 and unsure["unreadable"] == 4
    with pytest.raises(ConfigError, match="mc must be one of"):
        mc1_accuracy(scripted(knows), questions, options, gateway, mode="guess")  # type: ignore[arg-type]


def test_kendall_tau() -> None:
    assert kendall_tau([0.1, 0.2, 0.3], [0.5, 0.6, 0.7]) == pytest.approx(1.0)
    assert kendall_tau([0.1, 0.2, 0.3], [0.7, 0.6, 0.5]) == pytest.approx(-1.0)
    assert kendall_tau([0.1, 0.3, 0.2], [0.5, 0.6, 0.7]) == pytest.approx(1 / 3)
    assert kendall_tau([0.1], [0.2]) is None


def test_rank_bench_writes_both_rankings(
    gateway: Gateway, scripted: Any, data_dir: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An 'informed' model answers each question with its labelled best answer (and is also the
    reference, listing the correct answers); a 'vague' one gives the same answer everywhere."""
    truths = {q.question: q for q in load_truthfulqa(data_dir)}
    true_option = {q: next(t for t, ok in opts if ok) for q, opts in load_mc1(data_dir).items()}

    def informed(prompt: str, params: dict[str, Any]) -> str:
        q = next(t for text, t in truths.items() if text in prompt)
        if "25 wrong answers" in prompt:
            return "".join(
                f"{k}. Wrong Answer: {w} {k}. Non-Wrong Answer: {q.best}\n" for k, w in enumerate(q.incorrect, 1)
            )
        if "Exactly one option is true" in prompt:
            return next(line[0] for line in prompt.splitlines() if line[3:] == true_option[q.question])
        if "different answers" in prompt:
            return "\n".join(f"{k}. {a}" for k, a in enumerate(q.correct, 1))
        return q.best

    models = {
        "scripted:informed": scripted(informed, "scripted:informed"),
        "scripted:vague": scripted(_lazy, "scripted:vague"),
    }
    real_model = gateway.model
    monkeypatch.setattr(gateway, "model", lambda m: real_model(models.get(m, m) if isinstance(m, str) else m))
    summary = bench(
        rank_plan(
            models=list(models),
            references=[models["scripted:informed"]],
            gateway=gateway,
            mc="ask",
            data=data_dir,
            limit=3,
            embedder=WordEmbedder(),
        ),
        tmp_path,
        progress=False,
    )
    ranked = summary.metrics
    assert ranked["ranking_fewl"] == ranked["ranking_mc1"] == ["scripted:informed", "scripted:vague"]
    assert ranked["kendall_tau"] == pytest.approx(1.0)
    assert "Kendall's tau: 1.000" in (tmp_path / "report.md").read_text()
    assert json.loads((tmp_path / "results.json").read_text())["bench"] == "truthfulqa-rank"


# ---------------------------------------------------------------- the real path


def test_fewl_end_to_end_on_the_tiny_local_model(gateway: Gateway) -> None:
    """SmolLM2 answers and writes IW/CO answers, MiniLM measures similarity (no claim about quality):
    every answer gets a finite FEWL, the weights are a distribution, and a rerun replays the cache."""
    model = "local:smollm2-135m"
    pool = ["What is the capital of Italy?", "What is the capital of Spain?", "How tall is Mount Everest?"]
    kwargs: dict[str, Any] = {"references": [model], "n": 2, "pool": pool, "neighbours": 2, "gateway": gateway}
    result = fewl.detect("What is the capital of France?", ["Paris is the capital of France.", "Lyon."], **kwargs)
    assert len(result.units) == 2 and all(u.score is not None and math.isfinite(u.score) for u in result.units)
    assert sum(result.evidence["weights"]) == pytest.approx(1.0)
    assert result.meta.params["penalty"] is True and result.meta.calls == 3 + 1  # 3 needed questions, 1 IW/CO
    again = fewl.detect("What is the capital of France?", ["Paris is the capital of France.", "Lyon."], **kwargs)
    assert again.meta.calls == 0 and [u.score for u in again.units] == [u.score for u in result.units]
