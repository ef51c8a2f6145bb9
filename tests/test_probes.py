"""Probes: hidden states read once and cached, a probe fitted, saved as JSON and refused where it does
not belong, the SEP binarisation against numbers worked by hand, and the `probe` method on SmolLM2."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import numpy as np
import pytest

import halluscope
from halluscope.backends import readings
from halluscope.backends.cache import open_cache
from halluscope.backends.gateway import Gateway
from halluscope.backends.providers.transformers import TransformersLogProbModel
from halluscope.backends.stats import CallStats
from halluscope.cli import main
from halluscope.errors import ConfigError
from halluscope.probing import Probe, best_split, fit_probe, load_probe, validation_groups
from halluscope.prompts.registry import PromptRegistry
from tests.scripts import load_script

SMOL = "local:smollm2-135m"
TRUE = [
    "Paris is the capital of France.",
    "Water boils at 100 degrees Celsius at sea level.",
    "The Moon orbits the Earth.",
    "Dogs are mammals.",
    "The Pacific is an ocean.",
    "Berlin is in Germany.",
    "A week has seven days.",
    "Ice is frozen water.",
]
FALSE = [
    "Paris is the capital of Japan.",
    "Water boils at 10 degrees Celsius at sea level.",
    "The Earth orbits the Moon.",
    "Dogs are reptiles.",
    "The Pacific is a desert.",
    "Berlin is in Brazil.",
    "A week has three days.",
    "Ice is frozen sand.",
]


def _gateway(tmp_path: Path) -> Gateway:
    return Gateway(cache=open_cache(str(tmp_path / "cache")), registry=PromptRegistry())


def test_best_split_is_the_papers_least_squares_binarisation() -> None:
    """Worked by hand: of 100 thresholds from ~0 to the largest, the first whose low and high groups
    have the least summed squared error around their own means."""
    values = [0.0, 0.1, 1.0, 1.1]
    split = best_split(values)
    # thresholds 1e-10 + k (1.1 - 1e-10) / 99; {0, 0.1} and {1.0, 1.1} (2 * 0.05**2 each side, 0.01 in
    # all) is the least, first reached at k = 9, just above 0.1
    assert split == pytest.approx(1e-10 + 9 * (1.1 - 1e-10) / 99, abs=1e-12) and split > 0.1
    assert [int(v >= split) for v in values] == [0, 0, 1, 1]
    assert best_split([0.0, 0.0, 0.0, 1.0, 1.0, 1.0]) == 1e-10  # the first threshold already splits them
    with pytest.raises(ConfigError, match="finite"):
        best_split([0.0, float("nan")])


def test_the_benchmark_counts_questions_whose_answers_all_differ_or_all_agree() -> None:
    """benchmarks/probes.py's spread of semantic entropy over a `choose` run's items: ln n is n answers
    of n meanings, 0 one meaning; a failed item (no score) is not counted."""
    bench = load_script("benchmarks/probes.py")
    scores = [math.log(5), math.log(5), 0.0, 1.0549, None]
    found = {"items": [{"scores": {"unit 0": s}} for s in scores]}
    assert bench.entropy_spread(found, 5) == {"questions": 4, "all_different": 2, "all_same": 1}
    assert bench.entropy_spread(found, 10) == {"questions": 4, "all_different": 0, "all_same": 1}


def test_validation_holds_out_whole_groups() -> None:
    groups = [f"passage {i // 3}" for i in range(30)]  # 10 passages of 3 sentences
    held = validation_groups(groups)
    assert held.sum() == 6  # 20% of 10 passages, each with its 3 sentences
    for i in range(0, 30, 3):
        assert len(set(held[i : i + 3].tolist())) == 1


def _probe(**changes: object) -> Probe:
    fields = {
        "kind": "sentence",
        "model": SMOL,
        "model_file": "a" * 64,
        "layer": 30,
        "positions": ["sentence"],
        "prompt": None,
        "weights": [1.0, -1.0],
        "bias": 0.0,
        "mean": [0.0, 0.0],
        "scale": [1.0, 2.0],
        "base_rate": 0.5,
    }
    return Probe.model_validate({**fields, **changes})


def test_a_probe_is_logistic_regression_on_standardised_states(tmp_path: Path) -> None:
    probe = _probe()
    # z = 1 * (2 - 0) / 1 - 1 * (2 - 0) / 2 = 1
    assert probe.probabilities(np.array([[2.0, 2.0]]))[0] == pytest.approx(1 / (1 + np.exp(-1.0)))
    path = tmp_path / "probe.json"
    probe.save(path)
    assert load_probe(path) == probe
    with pytest.raises(ConfigError, match="reads 2 numbers at layer 30, the model gave 3"):
        probe.probabilities(np.zeros((1, 3)))
    (tmp_path / "bad.json").write_text(json.dumps({**probe.model_dump(), "scale": [1.0, 0.0]}))
    with pytest.raises(ConfigError, match="scale must be positive"):
        load_probe(tmp_path / "bad.json")
    (tmp_path / "pickle.json").write_bytes(b"\x80\x04K\x01.")  # never unpickled: refused as text
    with pytest.raises(ConfigError, match="is not UTF-8 text"):
        load_probe(tmp_path / "pickle.json")
    (tmp_path / "calibration.json").write_text(json.dumps({"kind": "isotonic", "methods": ["grounded"]}))
    with pytest.raises(ConfigError, match="not a probe written by `halluscope probe fit`"):
        load_probe(tmp_path / "calibration.json")


def test_a_probe_refuses_other_weights_and_other_prompt_versions() -> None:
    probe = _probe(kind="accuracy", positions=["question", "answer"], prompt="semantic_entropy.answer@1#abc")
    probe.check(SMOL, "a" * 64, "semantic_entropy.answer@1#abc")
    probe.check("local:/elsewhere/smollm2.gguf", "a" * 64, "semantic_entropy.answer@1#abc")  # the same file
    with pytest.raises(ConfigError, match="fitted on local:smollm2-135m's hidden states .* not local:qwen"):
        probe.check("local:qwen2.5-coder-0.5b", "b" * 64, "semantic_entropy.answer@1#abc")
    with pytest.raises(ConfigError, match="not another file of it"):
        probe.check(SMOL, "b" * 64, "semantic_entropy.answer@1#abc")
    with pytest.raises(ConfigError, match="fitted with prompt semantic_entropy.answer@1#abc, not semantic_entropy"):
        probe.check(SMOL, "a" * 64, "semantic_entropy.answer@2#def")
    with pytest.raises(ConfigError, match="reads at question, answer, not sentence"):
        _probe(kind="accuracy").checked()


@pytest.mark.slow
def test_hidden_states_are_read_once_then_replayed_from_the_cache(tmp_path: Path) -> None:
    gateway = _gateway(tmp_path)
    lm = gateway.logprob_model(SMOL)
    text = "Paris is the capital of France. It has the Eiffel Tower."
    prompt = lm.chat_prompt([{"role": "user", "content": "Tell me about Paris."}])
    stats = CallStats()
    fresh = readings.hidden_states(gateway, lm, prompt, text, [0, 31, len(text)], [lm.n_layers], stats)
    assert stats.forward_passes == 1 and fresh[30].shape == (3, 576)
    again = readings.hidden_states(gateway, lm, prompt, text, [len(text), 31], [30], stats)
    assert stats.forward_passes == 1 and stats.cache_hits == 1  # no forward pass: read back
    assert np.array_equal(again[30], fresh[30][[2, 1]])
    # the same pass cached the text's token statistics: token-logprob reads them without a pass
    readings.token_stats(gateway, lm, prompt, text, stats)
    assert stats.forward_passes == 1 and stats.cache_hits == 2
    # a position not asked before: one more pass, the union kept
    readings.hidden_states(gateway, lm, prompt, text, [5], [30], stats)
    readings.hidden_states(gateway, lm, prompt, text, [0, 5, len(text)], [30], stats)
    assert stats.forward_passes == 2 and stats.cache_hits == 3
    with pytest.raises(ConfigError, match="gives the last layer's hidden state only \\(layer 30\\)"):
        readings.hidden_states(gateway, lm, prompt, text, [0], [12])


@pytest.mark.slow
def test_transformers_reads_any_layer_and_its_last_is_llama_cpps(smollm2_hf_dir: Path, tmp_path: Path) -> None:
    """Layer L is the last layer's output after the final norm in both backends (the GGUF quantised)."""
    gateway = _gateway(tmp_path)
    hf = TransformersLogProbModel(smollm2_hf_dir, threads=1)
    text = "Dogs are mammals. Ice is frozen water."
    states = readings.hidden_states(gateway, hf, "", text, [17, len(text)], [8, 30])
    assert set(states) == {8, 30} and states[8].shape == (2, 576)
    local = readings.hidden_states(gateway, SMOL, "", text, [17, len(text)], [30])
    for row in range(2):
        assert np.corrcoef(states[30][row], local[30][row])[0, 1] > 0.99
    assert hf.file_hash != gateway.logprob_model(SMOL).file_hash


@pytest.mark.slow
def test_a_probe_fitted_on_a_few_labelled_sentences_separates_them(tmp_path: Path) -> None:
    gateway = _gateway(tmp_path)
    lm = gateway.logprob_model(SMOL)
    rows = [readings.hidden_states(gateway, lm, "", s, [len(s)], [30])[30][0] for s in TRUE + FALSE]
    labels = [0] * len(TRUE) + [1] * len(FALSE)
    probe = fit_probe(
        {30: np.array(rows)},
        labels,
        [f"fact {i % len(TRUE)}" for i in range(len(labels))],  # a fact's true and false forms held out together
        kind="sentence",
        model=lm.name,
        model_file=lm.file_hash,
        prompt=None,
        data={"source": "toy"},
    )
    p = probe.probabilities(np.array(rows))
    assert p[len(TRUE) :].min() > p[: len(TRUE)].max()
    assert probe.validation["per_layer"]["30"]["auc_roc"] is not None and probe.base_rate == 0.5
    path = tmp_path / "probe.json"
    probe.save(path)
    # through the detector: the fitted items read again (from the cache) score as in the fit
    detector = halluscope.detector("probe", probe=str(path), gateway=gateway)
    alone = [detector.detect(text=s).units[0].score for s in (TRUE[0], FALSE[1])]
    assert alone == pytest.approx([p[0], p[len(TRUE) + 1]], abs=1e-9) and alone[1] > alone[0]
    # a passage: one forward pass for all its sentences, then none
    first = detector.detect(text=f"{TRUE[0]} {FALSE[1]}")
    assert [u.text for u in first.units] == [TRUE[0], FALSE[1]]
    assert [u.evidence["read_at"] for u in first.units] == [len(TRUE[0]), len(TRUE[0]) + 1 + len(FALSE[1])]
    assert first.meta.calls == 1
    second = asyncio.run(detector.adetect(text=f"{TRUE[0]} {FALSE[1]}"))
    assert second.meta.calls == 0 and second.meta.cache_hits == 1
    assert [u.score for u in second.units] == [u.score for u in first.units]
    # another model is refused with one line, before anything is read
    with pytest.raises(ConfigError, match="fitted on local:smollm2-135m's hidden states"):
        halluscope.detector("probe", probe=str(path), model="local:qwen2.5-coder-0.5b", gateway=gateway).detect(
            text="Dogs are mammals."
        )


@pytest.mark.slow
def test_probe_fit_and_detect_from_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "labelled.jsonl"
    rows = [{"id": f"t{i}", "text": s, "label": 0} for i, s in enumerate(TRUE)]
    rows += [{"id": f"f{i}", "text": s, "label": 1} for i, s in enumerate(FALSE)]
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    out, cache = tmp_path / "probe.json", str(tmp_path / "cache")
    fitting = ["probe", "fit", "--kind", "sentence", "--data", str(data), "--model", SMOL, "--out", str(out)]
    assert main([*fitting, "--cache", cache]) == 2  # 16 sentences: its 3 held out have one label only
    assert "the 3 rows held out to choose the layer" in capsys.readouterr().err and not out.exists()
    assert main([*fitting, "--cache", cache, "--force"]) == 0
    printed = capsys.readouterr().out
    assert "sentence probe on local:smollm2-135m layer 30" in printed and "16 rows from 16 groups" in printed
    assert "warning: its held-out AUC-ROC cannot be computed (the held-out rows hold one label)" in printed
    probe = load_probe(out)
    assert probe.data["source"] == "labelled.jsonl" and probe.data["examples"] == 16
    assert main(["detect", "probe", "--probe", str(out), "--text", FALSE[3], "--cache", cache, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["meta"]["calls"] == 0 and result["meta"]["cache_hits"] == 1  # read while fitting
    fit_accuracy = ["probe", "fit", "--kind", "accuracy", "--data", "wikibio", "--model", SMOL, "--out", str(out)]
    assert main([*fit_accuracy, "--cache", cache]) == 2
    assert "wikibio labels sentences: fit a sentence probe on it" in capsys.readouterr().err


@pytest.mark.slow
def test_a_probe_is_calibrated_stacked_and_chosen_like_any_sentence_method(tmp_path: Path) -> None:
    """The doors a labelled-data user goes through: `calibrate` stacks the probe with token-logprob,
    the ensemble reads the probe file it is given, and `choose` ranks it among the candidates."""
    from halluscope.tune.calibrate import calibrate_labelled
    from halluscope.tune.choose import ChooseSettings, choose

    gateway = _gateway(tmp_path)
    lm = gateway.logprob_model(SMOL)
    rows = [readings.hidden_states(gateway, lm, "", s, [len(s)], [30])[30][0] for s in TRUE + FALSE]
    labels = [0] * len(TRUE) + [1] * len(FALSE)
    groups = [f"fact {i % len(TRUE)}" for i in range(len(labels))]
    probe = fit_probe(
        {30: np.array(rows)},
        labels,
        groups,
        kind="sentence",
        model=lm.name,
        model_file=lm.file_hash,
        prompt=None,
        data={},
    )
    path = str(tmp_path / "probe.json")
    probe.save(path)
    data = [{"id": f"s{i}", "text": s, "label": y} for i, (s, y) in enumerate(zip(TRUE + FALSE, labels, strict=True))]
    members = ["probe", "token-logprob:max-nll"]
    cal = calibrate_labelled(
        members,
        data,
        tmp_path / "cal.json",
        model=SMOL,
        gateway=gateway,
        kind="stacked",
        folds=2,
        options={"probe": path},
        progress=False,
        force=True,  # 16 sentences: fewer than a calibration is kept on without saying so
    )
    assert cal.methods == members and cal.settings["probe"]["probe"] == path
    stacked = halluscope.detector("ensemble", calibration=cal, probe=path, model=SMOL, gateway=gateway)
    found = stacked.detect(text=FALSE[2])
    assert found.units[0].probability is not None and set(found.units[0].evidence["scores"]) == set(members)
    choice = choose(
        data,
        ChooseSettings(methods=members, options={"probe": path}, folds=2),
        tmp_path / "choose",
        model=SMOL,
        gateway=gateway,
        progress=False,
    )
    assert {c.name for c in choice.candidates} >= set(members)
    assert next(c for c in choice.candidates if c.name == "probe").auc_roc is not None


QUESTIONS = [
    "What is the capital of France?",
    "How many legs does a spider have?",
    "Who wrote Hamlet?",
    "What colour is the sky on a clear day?",
    "What is the largest planet in the Solar System?",
    "What is the boiling point of water in Celsius?",
]


@pytest.mark.slow
def test_accuracy_and_sep_probes_read_the_question_and_the_answer(tmp_path: Path) -> None:
    """An accuracy probe fitted on a labelled file of questions and answers, and a SEP on unlabelled
    questions (their semantic entropy split as the paper does), each read at the question's last token
    and the answer's, the question framed by semantic entropy's answer prompt."""
    from halluscope.tune.probe_fit import ProbeFitSettings, fit

    gateway = _gateway(tmp_path)
    data = tmp_path / "answers.jsonl"
    answers = ["Paris", "Eight", "Shakespeare", "Blue", "Jupiter", "100 degrees"]
    rows = [{"question": q, "text": a, "label": 0} for q, a in zip(QUESTIONS, answers, strict=True)]
    rows += [{"question": q, "text": a, "label": 1} for q, a in zip(QUESTIONS, reversed(answers), strict=True)]
    data.write_text("\n".join(json.dumps({"id": str(i), **r}) for i, r in enumerate(rows)) + "\n")
    accuracy, examples = fit(
        ProbeFitSettings(kind="accuracy", data=str(data), model=SMOL, force=True), gateway
    )  # 12 answers: too few to hold out
    assert accuracy.positions == ["question", "answer"] and len(accuracy.weights) == 2 * 576
    assert accuracy.prompt == gateway.registry.get("semantic_entropy.answer").ref and len(examples) == 12
    detector = halluscope.detector("probe", probe=accuracy, gateway=gateway)
    result = detector.detect(text="Paris", question=QUESTIONS[0])
    assert len(result.units) == 1 and result.units[0].evidence["read_at"] == [0, 5] and result.meta.calls == 0
    with pytest.raises(ConfigError, match="a accuracy probe reads the question before the answer|reads the question"):
        detector.detect(text="Paris")

    questions = tmp_path / "questions.txt"
    questions.write_text("\n".join(QUESTIONS) + "\n")
    stats = CallStats()
    sep, examples = fit(
        ProbeFitSettings(kind="sep", data=str(questions), model=SMOL, n=3, force=True), gateway, judge=SMOL, stats=stats
    )
    entropies = [ex.entropy for ex in examples]
    assert sep.threshold == best_split(entropies)
    assert [ex.labels[0] for ex in examples] == [int(e >= sep.threshold) for e in entropies]
    assert sep.data["n"] == 3 and sep.kind == "sep"
    calls = stats.calls
    fit(
        ProbeFitSettings(kind="sep", data=str(questions), model=SMOL, n=3, force=True), gateway, judge=SMOL, stats=stats
    )  # all from the cache
    assert stats.calls == calls


def test_hidden_states_beyond_float16_are_kept_as_float32_never_infinite() -> None:
    """Some layers carry a few massive activations: rounded to float16 they would read back as inf."""
    from halluscope.backends.readings import _packed, _rounded, _state_rows

    massive = np.array([[1.5, 70000.0], [2.0, -3.0]], dtype=np.float32)
    ordinary = np.array([[1.5, 7.0]], dtype=np.float32)
    assert _rounded(massive).dtype == np.float32 and _rounded(ordinary).dtype == np.float16
    read = _state_rows({"ends": [3, 9], "layers": {"12": _packed(_rounded(massive))}}, 2)
    assert read is not None and np.array_equal(read[1][12], massive)
    assert _state_rows({"ends": [3], "layers": {"12": _packed(_rounded(massive))}}, 2) is None  # rows != positions


@pytest.mark.slow
def test_a_question_whose_answer_fails_is_left_out_of_the_fit_not_the_whole_fit(tmp_path: Path, data_dir: Path) -> None:
    """TriviaQA's questions answered by a scripted model (right on even questions, wrong on odd ones,
    failing for good on one): that question is counted as not read, the others are fitted."""
    from halluscope.bench.papers.qa import load_qa
    from halluscope.tune.probe_fit import ProbeFitSettings, fit
    from tests.scripted import ScriptedChatModel

    questions = {q.question: q for q in load_qa("triviaqa", data_dir) if q.index < 12}

    def respond(prompt: str, params: dict[str, object]) -> str:
        q = next(q for text, q in questions.items() if text in prompt)
        if q.index == 5:
            raise ConfigError("this question's answer failed for good")
        return q.answers[0] if q.index % 2 == 0 else "I do not know."

    answerer = ScriptedChatModel(respond=respond)
    with pytest.warns(UserWarning, match="question 5 left out of the fit"):
        probe, examples = fit(
            ProbeFitSettings(kind="accuracy", data="triviaqa", model=SMOL, items=range(12), data_dir=data_dir),
            _gateway(tmp_path),
            answerer=answerer,
        )
    assert len(examples) == 12 and probe.data["not_read"] == 1 and probe.data["rows"] == 11
    assert [ex.labels for ex in examples[:2]] == [(0,), (1,)]


GROUNDED_FACTS = [  # (context, a sentence it supports, one it contradicts)
    ("The meeting was moved to Friday at noon.", "The meeting is on Friday.", "The meeting is on Monday."),
    ("Anna Berg was born in Oslo in 1950.", "Anna Berg was born in Oslo.", "Anna Berg was born in Rome."),
    ("The bridge is 300 metres long.", "The bridge is 300 metres long.", "The bridge is 9 metres long."),
    ("Tom's car is red and old.", "Tom's car is red.", "Tom's car is blue."),
    ("The shop opens at 9 and closes at 5.", "The shop opens at 9.", "The shop opens at 11."),
]


@pytest.mark.slow
def test_a_grounded_probe_reads_the_answer_after_its_context_when_fitted_and_when_detecting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The fit and the method frame the answer alike (the context fenced in ``probe.grounded``), so a
    detect of a fitted answer reads it back from the cache; another context is another reading."""
    data = tmp_path / "grounded.jsonl"
    rows = []
    for i, (context, good, bad) in enumerate(GROUNDED_FACTS):
        rows.append({"id": f"f{i}", "text": f"{good} {bad}", "context": [context], "labels": [0, 1]})
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    out, cache = tmp_path / "probe.json", str(tmp_path / "cache")
    fitting = ["probe", "fit", "--kind", "grounded", "--data", str(data), "--model", SMOL, "--out", str(out)]
    assert main([*fitting, "--cache", cache, "--force"]) == 0
    assert "grounded probe on local:smollm2-135m layer 30" in capsys.readouterr().out
    probe = load_probe(out)
    assert probe.kind == "grounded" and probe.positions == ["sentence"] and probe.data["rows"] == 10
    assert probe.prompt is not None and probe.prompt.startswith("probe.grounded@1#")
    context, good, bad = GROUNDED_FACTS[1]
    detect = ["detect", "probe", "--probe", str(out), "--text", f"{good} {bad}", "--cache", cache, "--json"]
    assert main([*detect, "--context", context]) == 0
    fitted = json.loads(capsys.readouterr().out)
    assert fitted["meta"]["calls"] == 0 and fitted["meta"]["cache_hits"] == 1  # read while fitting
    assert [u["text"] for u in fitted["units"]] == [good, bad]
    assert main([*detect, "--context", "Anna Berg was born in Rome in 1950."]) == 0
    other = json.loads(capsys.readouterr().out)
    assert other["meta"]["calls"] == 1 and [u["score"] for u in other["units"]] != [u["score"] for u in fitted["units"]]
    assert main(detect) == 2  # no context: refused in one line
    assert "a grounded probe reads the answer after its context: give context" in capsys.readouterr().err


def test_grounded_probe_data_rte_hypotheses_after_their_premises_and_refusals(tmp_path: Path, data_dir: Path) -> None:
    from halluscope.tune.probe_fit import ProbeFitSettings, fit, grounded_examples

    rte = grounded_examples("rte", range(10), data_dir)
    assert len(rte) == 10 and all(len(ex.context) == 1 and ex.sentences == (ex.text,) for ex in rte)
    assert {ex.labels for ex in rte} == {(0,), (1,)}  # entailed: 0, not entailed: 1
    wikibio = grounded_examples("wikibio", range(2), data_dir)
    assert [ex.group for ex in wikibio] == ["passage 0", "passage 1"] and all(ex.context[0] for ex in wikibio)
    no_context = tmp_path / "plain.jsonl"
    no_context.write_text(json.dumps({"id": "a1", "text": "Dogs bark. Cats fly.", "labels": [0, 1]}) + "\n")
    with pytest.raises(ConfigError, match="answer a1: a grounded probe fits on a context and a label per sentence"):
        grounded_examples(str(no_context), None, data_dir)
    gateway = _gateway(tmp_path)
    with pytest.raises(ConfigError, match="truthfulqa has no context"):
        fit(ProbeFitSettings(kind="grounded", data="truthfulqa", model=SMOL, data_dir=data_dir), gateway)
    with pytest.raises(ConfigError, match="fit a grounded probe on it"):
        fit(ProbeFitSettings(kind="sentence", data="rte", model=SMOL, data_dir=data_dir), gateway)
    with pytest.raises(ConfigError, match="rte labels sentences: fit a grounded probe"):
        fit(ProbeFitSettings(kind="accuracy", data="rte", model=SMOL, data_dir=data_dir), gateway)
