"""PHR on a language model doing in-context learning: the TextICL CGM and the LangGraph graph.

Graph tests use a fake LogProbModel whose next-token distribution is a Dirichlet(1, 1, 1) predictive
over three tokens given the labels already in the prompt, so every number can be worked by hand; the
real-model tests check the log-prob paths the fake stands in for on Qwen2.5-Coder-0.5B."""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest

from halluscope.backends import readings
from halluscope.backends.cache import CallCache
from halluscope.backends.chat import load_logprob_model
from halluscope.backends.gateway import CallStats, Gateway
from halluscope.backends.logprobs import LogProbModel, Sample
from halluscope.backends.providers.llama_cpp import LlamaCppLogProbModel
from halluscope.bench.papers.icl import ICLSettings, balanced_context, load_icl_task, phr_plan
from halluscope.bench.runner import BenchResult
from halluscope.bench.runner import run as bench
from halluscope.errors import ConfigError, PromptError
from halluscope.methods import phr
from halluscope.prompts.registry import PromptRegistry
from halluscope.scoring.phr import categorical_entropy

VOCAB = [" positive", " negative", " other"]
CONTEXT = [("a warm film .", "positive"), ("a dull film .", "negative")]
LABEL = re.compile(r"Label: (\w+)")


class DirichletICL(LogProbModel):
    """p(next token | prompt) = (count of the label in the prompt + 1) / (labels + 3); imagined pairs
    come from ``continue_with(prompt, seed)``; single-token samples from the distribution."""

    def __init__(self, continue_with: Callable[[str, int], str], name: str = "fake:dirichlet-icl") -> None:
        self.name = name  # the cache key: fakes that answer differently need different names
        self.continue_with = continue_with
        self.passes = 0

    def next_token_logprobs(self, prompt: str) -> np.ndarray:
        self.passes += 1
        labels = LABEL.findall(prompt)
        counts = np.array([labels.count(v.strip()) for v in VOCAB], dtype=np.float64)
        counts[2] += len(labels) - counts.sum()  # any other label
        return np.log((counts + 1) / (len(labels) + 3))

    def sample(
        self,
        prompt: str,
        n: int = 1,
        max_tokens: int = 64,
        temperature: float = 1.0,
        top_p: float = 1.0,
        stop: Sequence[str] = (),
        seed: int | None = None,
    ) -> list[Sample]:
        if max_tokens == 1:
            log_probs = self.next_token_logprobs(prompt)
            token = int(np.random.default_rng(seed).choice(3, p=np.exp(log_probs)))
            return [Sample(VOCAB[token], [float(log_probs[token])], [VOCAB[token]])]
        text = self.continue_with(prompt, seed or 0)
        for s in stop:
            text = text.split(s)[0]
        return [Sample(text, [-1.0], [text])]

    def score_many(self, prompt: str, continuations: Sequence[str]) -> list[float]:
        log_probs = self.next_token_logprobs(prompt)
        return [float(log_probs[VOCAB.index(c)]) for c in continuations]

    def first_token(self, prompt: str, continuation: str) -> int:
        return VOCAB.index(continuation)

    def token_text(self, token: int) -> str:
        return VOCAB[token]

    def count_tokens(self, text: str) -> int:
        return len(text.split())


def positive_pairs(prompt: str, seed: int) -> str:
    return f"Input: imagined {seed}\nLabel: positive\n\nInput: next"


@pytest.fixture
def gw(cache: CallCache) -> Gateway:
    return Gateway(cache=cache, registry=PromptRegistry())


def h(*p: float) -> float:
    return -sum(q * math.log(q) for q in p)


def test_phr_mhr_error_and_entropies_match_the_hand_worked_predictives(gw: Gateway) -> None:
    """D_n = 1 positive + 1 negative: p_n = (2/5, 2/5, 1/5). Each completion adds 2 positives:
    p_D = (4/7, 2/7, 1/7). At epsilon 0.5 the quantile of log p_D is log 4/7 (cdf 1/7 + 2/7 < 0.5), so
    negative and other are hallucinations: THR = p_n(negative) + p_n(other) = 0.6 for every completion.
    D_eval of 3 negatives: p = (2/8, 5/8, 1/8), quantile log 5/8, MHR = p_n(positive) + p_n(other) = 0.6.
    Error rate for the true 'positive' = 1 - 2/5."""
    model = DirichletICL(positive_pairs)
    result = phr.detect(
        CONTEXT,
        "a fine film .",
        model=model,
        truth="positive",
        evaluation=[("e1", "negative"), ("e2", "negative"), ("e3", "negative")],
        n=3,
        n_imagined=2,
        epsilon=0.5,
        gateway=gw,
    )
    ev = result.units[0].evidence
    assert result.units[0].score == pytest.approx(0.6) and ev["thr"] == pytest.approx([0.6] * 3)
    assert ev["mhr"] == pytest.approx(0.6)
    assert ev["error_rate"] == pytest.approx(0.6) and ev["correct"] is True  # argmax ties break to positive
    assert ev["total_entropy"] == pytest.approx(h(0.4, 0.4, 0.2))
    assert ev["aleatoric_entropy"] == pytest.approx(h(4 / 7, 2 / 7, 1 / 7))
    assert ev["mutual_information"] == pytest.approx(h(0.4, 0.4, 0.2) - h(4 / 7, 2 / 7, 1 / 7))
    assert ev["imagined"][0] == [("imagined 0", "positive"), ("imagined 0", "positive")]
    assert sorted(r["token"] for r in ev["top_responses"][:2]) == [" negative", " positive"]
    assert [r["p"] for r in ev["top_responses"]] == [0.4, 0.4, 0.2]
    # M x (N - n) imagined pairs sampled; every distribution one forward pass: D_n + x, 3 completions, D_eval
    assert result.meta.calls == 6 + 5 and result.meta.params["forward_passes"] == 5 == model.passes


def test_queries_sharing_a_context_replay_its_completions_from_the_cache(gw: Gateway) -> None:
    model = DirichletICL(positive_pairs)
    first = phr.detect(CONTEXT, "query one", model=model, n=2, n_imagined=3, gateway=gw)
    second = phr.detect(CONTEXT, "query two", model=model, n=2, n_imagined=3, gateway=gw)
    assert first.meta.calls == 6 + 3 and first.meta.cache_hits == 0
    assert second.meta.cache_hits == 6 and second.meta.calls == second.meta.params["forward_passes"] == 3
    assert second.units[0].evidence["imagined"] == first.units[0].evidence["imagined"]


def test_malformed_continuations_are_drawn_again_then_dropped_and_counted(gw: Gateway) -> None:
    # sample index = completion * 3 + attempt, seed 0: completion 0's first attempt is malformed
    flaky = DirichletICL(
        lambda prompt, seed: "no pair here" if seed == 0 else positive_pairs(prompt, seed), name="fake:flaky"
    )
    result = phr.detect(CONTEXT, "q", model=flaky, n=2, n_imagined=1, gateway=gw)
    assert result.meta.events == {"imagined_unparsed": 1}
    assert [len(p) for p in result.units[0].evidence["imagined"]] == [1, 1]

    broken = DirichletICL(lambda prompt, seed: "never a pair", name="fake:broken")
    result = phr.detect(CONTEXT, "q", model=broken, n=2, n_imagined=2, gateway=gw)
    assert result.meta.events == {"imagined_unparsed": 12, "imagined_dropped": 4}
    # with nothing imagined D = D_n: the quantile of p_n's own log-probs leaves its lowest 5% below
    assert result.units[0].evidence["imagined"] == [[], []] and result.units[0].score == pytest.approx(0.0)


def test_sampled_responses_estimate_what_the_distribution_gives_exactly(gw: Gateway) -> None:
    model = DirichletICL(positive_pairs)
    kwargs = {"model": model, "n": 2, "n_imagined": 2, "epsilon": 0.5, "gateway": gw, "truth": "negative"}
    exact = phr.detect(CONTEXT, "q", **kwargs).units[0].evidence  # type: ignore[arg-type]
    stats = CallStats()
    sampled = phr.detect(CONTEXT, "q", responses="sampled", exact=False, k=400, stats=stats, **kwargs)  # type: ignore[arg-type]
    ev = sampled.units[0].evidence
    assert abs(ev["phr"] - exact["phr"]) < 4 * math.sqrt(0.24 / 800)
    assert abs(ev["error_rate"] - exact["error_rate"]) < 4 * math.sqrt(0.24 / 400)
    assert ev["total_entropy"] == pytest.approx(exact["total_entropy"], abs=0.1)
    # the imagined pairs come from the first run's cache; K one-token samples per draw: 2 per
    # completion (given D, given D_n), 1 for the total entropy, 1 for the error rate
    assert sampled.meta.cache_hits == 4
    assert sampled.meta.calls - sampled.meta.params["forward_passes"] == 400 * (2 * 2 + 1 + 1)
    with pytest.raises(ConfigError, match="exact PHR needs the whole next-token distribution"):
        phr.detect(CONTEXT, "q", model=model, responses="sampled", gateway=gw)


def test_completions_are_cached_by_sample_index_with_the_prompts_parser(gw: Gateway) -> None:
    model = DirichletICL(positive_pairs)
    stats = CallStats()
    first = [readings.complete(gw, model, "phr.example", "ctx", sample_index=i, stats=stats, seed=7) for i in range(2)]
    assert [r.parsed for r in first] == [{"x": "imagined 7", "y": "positive"}, {"x": "imagined 8", "y": "positive"}]
    again = readings.complete(gw, model, "phr.example", "ctx", sample_index=1, stats=stats, seed=7)
    assert again.cached and again.text == first[1].text and (stats.calls, stats.cache_hits) == (2, 1)
    assert first[0].prompt_ref.startswith("phr.example@1#") and first[0].logprobs == [
        {"token": first[0].text, "logprob": -1.0}
    ]
    with pytest.raises(PromptError, match="chat prompt"):
        readings.complete(gw, model, "semantic_entropy.answer", "ctx")
    with pytest.raises(ConfigError, match="unknown call parameter"):
        readings.complete(gw, model, "phr.example", "ctx", temprature=1.0)


def test_bad_input_and_models_without_log_probs_are_clear_errors(gw: Gateway, monkeypatch: pytest.MonkeyPatch) -> None:
    model = DirichletICL(positive_pairs)
    with pytest.raises(ConfigError, match="phr needs query"):
        phr.detect(CONTEXT, " ", model=model, gateway=gw)
    with pytest.raises(ConfigError, match="phr needs context"):
        phr.detect([], "q", model=model, gateway=gw)
    with pytest.raises(ConfigError, match="non-empty"):
        phr.detect([("x", "")], "q", model=model, gateway=gw)
    with pytest.raises(ConfigError, match="epsilon"):
        phr.detect(CONTEXT, "q", model=model, epsilon=1.0, gateway=gw)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    with pytest.raises(ConfigError, match="Anthropic gives no log-probabilities"):
        phr.detect(CONTEXT, "q", model="anthropic:claude-sonnet-4-5", gateway=gw)


@pytest.fixture(scope="module")
def qwen05() -> LlamaCppLogProbModel:
    model = load_logprob_model("local:qwen2.5-coder-0.5b")
    assert isinstance(model, LlamaCppLogProbModel)
    return model


SST2 = [("one long string of cliches .", "negative"), ("a gorgeous , witty , seductive movie .", "positive")]


@pytest.mark.slow
def test_the_next_token_distribution_is_teacher_forcing_of_every_token(qwen05: LlamaCppLogProbModel) -> None:
    cgm = phr.TextICL(qwen05, Gateway(cache=None, registry=PromptRegistry()))
    x = "an utterly charming film ."
    prompt = cgm.prompt(x, SST2)
    assert prompt.endswith("Label: positive\n\nInput: an utterly charming film .\nLabel:")
    log_probs = cgm.distribution(x, SST2)
    assert np.exp(log_probs).sum() == pytest.approx(1.0)
    positive, negative = cgm.label_response("positive"), cgm.label_response("negative")
    assert qwen05.token_text(int(positive)) == " positive"
    assert log_probs[positive] > log_probs[negative]
    assert log_probs[positive] == pytest.approx(qwen05.score(prompt, " positive"), abs=0.02)
    # the same distribution with the prompt's prefix evaluated afresh
    qwen05.reuse_prefix = False
    try:
        again = qwen05.next_token_logprobs(prompt)
    finally:
        qwen05.reuse_prefix = True
    assert np.abs(np.exp(again) - np.exp(log_probs)).max() < 0.01
    assert categorical_entropy(log_probs) < math.log(len(log_probs))


@pytest.mark.slow
def test_imagined_pairs_continue_the_context_on_a_real_model(qwen05: LlamaCppLogProbModel, gw: Gateway) -> None:
    cgm = phr.TextICL(qwen05, gw, stats=CallStats())
    pairs, events = cgm.imagine_counted(SST2, 2, 0)
    assert len(pairs) + events["imagined_dropped"] == 2
    assert all(x.strip() and y.strip() and "\n\n" not in x for x, y in pairs)


# ---------------------------------------------------------------- the ICL tasks and `bench phr`


@pytest.mark.parametrize(
    ("name", "labels", "pool", "queries"),
    [
        ("sst2", ("positive", "negative"), 6920, 872),
        ("subj", ("subjective", "objective"), 8000, 2000),
        ("agnews", ("World", "Sports", "Business", "Science"), 6080, 1520),
        ("rte", ("entailment", "not"), 2490, 277),
        ("wnli", ("entailment", "not"), 635, 71),
        ("mqp", ("similar", "dissimilar"), 2438, 610),
    ],
)
def test_each_task_loads_with_the_papers_labels(
    data_dir: Path, name: str, labels: tuple[str, ...], pool: int, queries: int
) -> None:
    task = load_icl_task(name, data_dir)
    assert task.labels == labels and (len(task.pool), len(task.queries)) == (pool, queries)
    assert {y for _, y in task.pool} == set(labels) == {y for _, y in task.queries}
    assert all(x.strip() and "\n\n" not in x for x, _ in task.pool + task.queries)
    if name in ("rte", "wnli", "mqp"):  # pair tasks: the two texts on two lines
        assert all(x.count("\n") == 1 for x, _ in task.queries)
    short = task.filtered(lambda text: len(text.split()), limit=20)
    assert 0 < len(short.queries) < len(task.queries) and all(len(x.split()) <= 20 for x, _ in short.queries)


def test_mqp_queries_share_no_question_with_the_demonstrations(data_dir: Path) -> None:
    task = load_icl_task("mqp", data_dir)
    assert not {x.split("\n")[0] for x, _ in task.pool} & {x.split("\n")[0] for x, _ in task.queries}


def test_contexts_are_response_balanced(data_dir: Path) -> None:
    task = load_icl_task("agnews", data_dir)
    rng = np.random.default_rng(0)
    context = balanced_context(task.pool, task.labels, 8, rng)
    assert Counter(y for _, y in context) == dict.fromkeys(task.labels, 2)
    odd = Counter(y for _, y in balanced_context(task.pool, task.labels, 6, rng))
    assert sorted(odd.values()) == [1, 1, 2, 2]
    with pytest.raises(ConfigError, match="unknown ICL task"):
        load_icl_task("imdb", data_dir)


def test_bench_phr_writes_the_table_records_and_plot(data_dir: Path, gw: Gateway, tmp_path: Path) -> None:
    model = DirichletICL(positive_pairs)
    settings = ICLSettings(task="sst2", model=model, sizes=(2, 4), contexts=2, queries=3, M=2, data=str(data_dir))
    plan = phr_plan(settings, gw)
    result = bench(plan, tmp_path, progress=False)
    assert [r["n"] for r in result.metrics["rows"]] == [2, 4] and len(result.records) == 12
    assert sum(r["calls"] for r in result.records) == result.meta.calls
    row = result.metrics["rows"][0]
    # the fake ignores x: n = 2 balanced gives p_n = (2/5, 2/5, 1/5) for every query
    assert row["error_rate"] == pytest.approx(0.6) and row["queries"] == 6
    assert set(row) >= {"phr_low", "mhr_low", "mae_mhr", "r2_mhr", "phr_high", "mae_error", "accuracy"}
    # 2 contexts x M = 2 completions x 5 imagined pairs per n, shared by each context's 3 queries
    assert result.meta.calls - result.meta.params["forward_passes"] == 2 * 2 * 2 * 5
    saved = json.loads((tmp_path / "results.json").read_text())
    assert set(saved) == set(BenchResult.model_fields) and saved["bench"] == "phr"
    assert saved["metrics"]["rows"] == result.metrics["rows"] and (tmp_path / "phr_icl.png").stat().st_size > 0
    assert "| n | queries |" in (tmp_path / "report.md").read_text()
