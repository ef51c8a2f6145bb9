"""The command line: every command, its JSON shape, and one-line errors (exit 2, no stack trace)."""

from __future__ import annotations

import io
import json
import math
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas
import pytest

import halluscope
from halluscope.bench.planted import BIOGRAPHIES
from halluscope.bench.runner import BenchResult
from halluscope.cli import build_parser, main
from halluscope.results import DetectionResult, RunMeta, Unit
from tests.stub_servers import StubAPI
from tests.test_prompts import V1_HASHES

REPO = Path(__file__).resolve().parents[1]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.slow
def test_demo_on_a_local_model_twice_second_run_replays_from_the_cache(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["demo", "--model", "local:smollm2-135m", "--json"]
    code, out, _ = run(capsys, *argv)
    first = DetectionResult.from_json(out)
    sentences = sum(len(b.sentences) for b in BIOGRAPHIES)  # the planted-falsehood biographies
    assert code == 0 and first.method == "demo" and len(first.units) == 2 + sentences
    assert first.meta.calls > 20
    assert first.evidence["model"] == "local:smollm2-135m"
    _, out, _ = run(capsys, *argv)
    second = DetectionResult.from_json(out)
    assert second.meta.calls == 0 and second.meta.cache_hits == first.meta.calls + first.meta.cache_hits
    assert [u.score for u in second.units] == [u.score for u in first.units]
    body = json.loads(out)
    assert {"method", "units", "meta"} <= body.keys()
    assert {"calls", "cache_hits", "tokens", "seconds", "models", "prompts"} <= body["meta"].keys()
    assert any(p.startswith("semantic_entropy.answer@1#") for p in body["meta"]["prompts"])
    _, out, _ = run(capsys, "demo", "--model", "local:smollm2-135m")
    assert out.startswith("halluscope demo on local:smollm2-135m") and "semantic entropy:" in out
    assert "planted falsehood ranked riskiest in" in out and "Every answer came from the disk cache" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["demo", "--model", "openai:gpt-4o-mini"], "set OPENAI_API_KEY"),
        (["demo", "--model", "local:qwen-70b"], "unknown local model 'qwen-70b'"),
        (["demo", "--model", "mistral:large"], "unknown provider 'mistral'"),
        (["prompts", "show", "fibe.nothing"], "unknown prompt 'fibe.nothing'"),
        (["prompts", "list", "--prompts", "/nonexistent/dir"], "does not exist"),
        (["prompts", "list", "--prompt", "fibe.create@9"], "has no version 9"),
        (
            ["bench", "wikibio", "--method", "selfcheck-unigram", "--limit", "1"],
            "give --data DIR, set HALLUSCOPE_DATA, or download a dataset with `halluscope data fetch NAME`",
        ),
    ],
)
def test_user_errors_are_one_line_with_exit_code_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, argv: list[str], message: str
) -> None:
    monkeypatch.delenv("HALLUSCOPE_DATA", raising=False)
    code, _, err = run(capsys, *argv)
    assert code == 2
    assert err.startswith("halluscope: error: ") and message in err
    assert "Traceback" not in err and err.count("\n") == 1


def test_prompts_list_show_and_diff(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    _, out, _ = run(capsys, "prompts", "list", "--json")
    rows = json.loads(out)["prompts"]
    assert {f"{r['id']}@{r['version']}" for r in rows} == set(V1_HASHES) and all(r["default"] for r in rows)
    _, out, _ = run(capsys, "prompts", "list")
    assert "fibe.create@1" in out and "Appendix E.3.1" in out
    _, out, _ = run(capsys, "prompts", "show", "fibe.score@1")
    assert out.startswith("# fibe.score@1#") and "You are an English test grader." in out
    (tmp_path / "v2.yaml").write_text(
        "id: fibe.score\nversion: 2\nsource: stricter grader\nparser: bracket_scores\nparams: {temperature: 0.0}\n"
        "messages:\n  - role: user\n    content: 'Grade {student_answers} against {correct_answer}'\n"
    )
    code, out, _ = run(capsys, "prompts", "diff", "fibe.score@1", "fibe.score@2", "--prompts", str(tmp_path))
    assert code == 0 and out.startswith("--- fibe.score@1#") and "+source: stricter grader" in out
    _, out, _ = run(capsys, "prompts", "diff", "fibe.score@1", "fibe.score@1")
    assert "identical" in out


def test_prompts_run_through_an_openai_compatible_server(capsys: pytest.CaptureFixture[str]) -> None:
    with StubAPI(answer="No") as stub:
        argv = [
            "prompts",
            "run",
            "selfcheck.prompt",
            "--model",
            f"openai-compatible:{stub.base_url}/v1#m",
            "--var",
            "context=Paris is in France.",
            "--var",
            "sentence=Paris is in Spain.",
            "--samples",
            "2",
            "--param",
            "temperature=0.3",
            "--json",
        ]
        code, out, _ = run(capsys, *argv)
        assert code == 0
        result = DetectionResult.from_json(out)
        assert [u.evidence["parsed"] for u in result.units] == ["no", "no"]
        assert result.meta.calls == 2 and stub.requests[0]["body"]["temperature"] == 0.3
        _, out, _ = run(capsys, *argv)
        assert DetectionResult.from_json(out).meta.cache_hits == 2 and len(stub.requests) == 2
        _, out, _ = run(capsys, *argv[:-1], "--no-cache")
        assert "--- sample 1" in out and 'parsed: "no"' in out and len(stub.requests) == 4


def test_cache_stats_and_clear(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cache_dir = str(tmp_path / "c")
    with StubAPI(answer="Yes") as stub:
        run(
            capsys,
            "prompts",
            "run",
            "selfcheck.prompt",
            "--model",
            f"openai-compatible:{stub.base_url}/v1#m",
            "--var",
            "context=c",
            "--var",
            "sentence=s",
            "--samples",
            "3",
            "--cache-dir",
            cache_dir,
        )
    _, out, _ = run(capsys, "cache", "stats", "--json", "--cache-dir", cache_dir)
    assert json.loads(out)["entries"] == 3
    _, out, _ = run(capsys, "cache", "clear", "--cache-dir", cache_dir)
    assert out.startswith("removed 3 cached calls")


def test_data_list_finds_the_shared_benchmarks(capsys: pytest.CaptureFixture[str], data_dir: Path) -> None:
    code, out, _ = run(capsys, "data", "list", "--data", str(data_dir), "--json")
    names = [d["name"] for d in json.loads(out)["datasets"]]
    assert code == 0 and {"wikibio_gpt3_hallucination", "truthfulqa", "sst2", "qnli"} <= set(names)


def test_every_command_has_help() -> None:
    for argv in (
        ["--help"],
        ["demo", "--help"],
        ["prompts", "run", "--help"],
        ["cache", "stats", "--help"],
        ["data", "list", "--help"],
        ["models", "list", "--help"],
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "halluscope.cli", *argv], capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 0 and "usage: halluscope" in proc.stdout


def test_models_list(capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HALLUSCOPE_MODELS_DIR", str(tmp_path / "models"))  # no NLI checkpoint pulled there
    code, out, _ = run(capsys, "models", "list", "--json")
    listed = json.loads(out)
    ggufs, nli = listed["models"][:3], listed["models"][3:]
    assert listed["default"] == "qwen2.5-coder-1.5b"
    assert code == 0 and [r["name"] for r in ggufs] == ["qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b", "smollm2-135m"]
    assert all(r["installed"] and r["bytes"] > 0 and r["path"] for r in ggufs)
    assert [(r["spec"], r["installed"], r["path"]) for r in nli] == [("nli:deberta-v3-large-mnli", False, None)]
    _, out, _ = run(capsys, "models", "list")
    assert "* local:smollm2-135m" in out and "default model: local:qwen2.5-coder-1.5b" in out
    assert "  nli:deberta-v3-large-mnli" in out and "no offline package: from the Hub only" in out


def test_bench_wikibio_writes_results_report_and_curves(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, data_dir: Path
) -> None:
    out = tmp_path / "wb"
    argv = ["bench", "wikibio", "--method", "selfcheck-unigram", "--limit", "12", "--data", str(data_dir)]
    code, stdout, _ = run(capsys, *argv, "--out", str(out))
    assert code == 0 and "WikiBio: 12 passages" in stdout
    results = json.loads((out / "selfcheck-unigram" / "results.json").read_text())
    assert set(results) == set(BenchResult.model_fields) and results["bench"] == "wikibio"
    assert not (out / "results.json").exists()  # one method or several: OUT/METHOD/results.json
    assert results["params"]["method"] == "selfcheck-unigram" and results["metrics"]["n_passages"] == 12
    assert {
        "auc_pr_nonfact",
        "auc_pr_nonfact_star",
        "auc_pr_factual",
        "auc_roc_nonfact",
        "auc_roc_nonfact_star",
        "pearson",
        "spearman",
    } <= results["metrics"].keys()
    assert len(results["items"]) == 12
    code, stdout, _ = run(capsys, *argv, "--json", "--out", str(out))
    printed = json.loads(stdout)  # one object, whatever the number of methods
    assert code == 0 and printed["bench"] == "wikibio" and printed["out"] == str(out)
    assert [r["metrics"] for r in printed["results"]] == [results["metrics"]] and "items" not in printed["results"][0]
    report = (out / "report.md").read_text()
    assert "| selfcheck-unigram |" in report and "12 passages" in report
    for png in ("pr_nonfact.png", "roc_nonfact.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--method", "fibe-9"],
            "unknown bench method 'fibe-9'; did you mean 'fibe' or 'fibe+dq'? available: direct-question, fibe",
        ),
        (["--method", "selfcheck-unigram", "--samples", "21"], "between 1 and 20"),
        (
            ["--method", "fibe,fibe+dq", "--model", "local:smollm2-135m", "--samples", "20"],
            "fibe takes --samples from 1 to 10, got 20",
        ),
    ],
)
def test_bench_errors(
    capsys: pytest.CaptureFixture[str], data_dir: Path, tmp_path: Path, argv: list[str], message: str
) -> None:
    code, _, err = run(capsys, "bench", "wikibio", *argv, "--data", str(data_dir), "--out", str(tmp_path))
    assert code == 2 and message in err


def test_detect_selfcheck_methods_from_the_command_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    samples_json = tmp_path / "samples.json"
    samples_json.write_text(json.dumps(["Einstein was born in Ulm.", "He developed relativity in Bern."]))
    samples_txt = tmp_path / "samples.txt"
    samples_txt.write_text("Einstein was born in Ulm.\n---\nHe developed relativity in Bern.\n")
    text = "Einstein was born in Paris. He developed relativity."
    _, out_json, _ = run(
        capsys, "detect", "selfcheck-unigram", "--text", text, "--samples-file", str(samples_json), "--json"
    )
    _, out_txt, _ = run(
        capsys, "detect", "selfcheck-unigram", "--text", text, "--samples-file", str(samples_txt), "--json"
    )
    assert DetectionResult.from_json(out_json).units == DetectionResult.from_json(out_txt).units
    with StubAPI(answer="No") as stub:
        code, out, _ = run(
            capsys,
            "detect",
            "selfcheck-prompt",
            "--text",
            text,
            "--samples-file",
            str(samples_txt),
            "--model",
            f"openai-compatible:{stub.base_url}/v1#m",
        )
        assert code == 0 and "1.00  Einstein was born in Paris." in out and "4 model calls" in out
        assert len(stub.requests) == 4


def test_detect_semantic_entropy_on_given_answers_from_the_command_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    answers = tmp_path / "answers.txt"
    answers.write_text("Paris.\n---\nIt is Paris.\n---\nParis.\n---\nThe capital is Paris.\n")
    with StubAPI(answer="Entailment") as stub:
        code, out, _ = run(
            capsys,
            "detect",
            "semantic-entropy",
            "--question",
            "What is the capital of France?",
            "--answers-file",
            str(answers),
            "--judge",
            f"openai-compatible:{stub.base_url}/v1#judge",
            "--json",
        )
        result = DetectionResult.from_json(out)
        # two distinct answers compared with 'Paris.' (both directions each); the repeat is free
        assert code == 0 and result.meta.calls == 4 == len(stub.requests)
    assert result.units[0].score == 0.0 and result.units[0].evidence["clusters"] == [[0, 1, 2, 3]]
    assert result.meta.params["pairs_judged"] == 2 and result.meta.params["mode"] == "strict"


def test_detect_fibe_variant_from_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    """An API model that answers Yes to everything: no exam can be read, so every sentence falls back
    to H_F = 0.5, DQ's Yes gives H_D = 1 - p(Yes), and SBC adds (H_+(0) - 0.1) / 2 to the second."""
    with StubAPI(answer="Yes") as stub:
        code, out, _ = run(
            capsys,
            "detect",
            "fibe+sbc+dq",
            "--text",
            "Einstein was born in Ulm. He developed relativity.",
            "--question",
            "This is a Wikipedia passage about Albert Einstein:",
            "--samples",
            "2",
            "--model",
            f"openai-compatible:{stub.base_url}/v1#m",
            "--json",
        )
        result = DetectionResult.from_json(out)
        assert code == 0 and result.method == "fibe+sbc+dq"
        assert result.meta.calls == 1 + 2 + 2 == len(stub.requests)  # create, 2 answers, 2 DQ; nothing to grade
        assert sum(bool(r["body"].get("logprobs")) for r in stub.requests) == 2  # DQ asks for p(Yes)
    assert result.meta.events == {"create_unparsed": 1, "not_in_exam": 2, "missing_answer": 4, "ungraded": 2}
    p_yes = [u.evidence["direct_question"]["p_first"] for u in result.units]  # the stub's Yes log-prob
    assert p_yes[0] is not None and 0 < p_yes[0] < 1
    h = [0.5 + 0.2 * (1 - p) for p in p_yes]  # H_+ = clip(H_F + C_D H_D), H_D = 1 - p(Yes)
    assert [u.score for u in result.units] == pytest.approx([h[0], h[1] + (h[0] - 0.1) / 2])
    assert [u.parsed for u in result.units] == [False, False]


def test_detect_clue_and_diversity_from_the_command_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A server that answers Yes (log-prob -0.05, no top list) to everything: each output's concept list
    is 'Yes', pooled once; each score is p(Yes) = exp(-0.05), so U = 0.05 nats."""
    outputs = tmp_path / "outputs.json"
    outputs.write_text('["Steve Jobs founded Apple.", "Apple was founded in 1976."]')
    with StubAPI(answer="Yes") as stub:
        spec = f"openai-compatible:{stub.base_url}/v1#m"
        code, out, _ = run(
            capsys, "detect", "clue", "--question", "Who founded Apple?", "--outputs-file", str(outputs),
            "--model", spec, "--judge", spec, "--json",
        )  # fmt: skip
        result = DetectionResult.from_json(out)
        # 2 extractions, 2 scores, the baseline
        assert code == 0 and result.meta.calls == 2 + 2 + 1 == len(stub.requests)
        assert [u.text for u in result.units] == ["Yes"] and result.units[0].score == pytest.approx(0.05)
        assert result.units[0].evidence["question_relevance"] == pytest.approx(math.exp(-0.05))
        assert sum(bool(r["body"].get("logprobs")) for r in stub.requests) == 3  # the scorer asks for p(Yes)

        code, out, _ = run(
            capsys, "detect", "clue-diversity", "--outputs-file", str(outputs), "--concept", "tone",
            "--subconcepts", "happy tone, sad tone", "--judge", spec, "--json",
        )  # fmt: skip
    div = DetectionResult.from_json(out)
    assert code == 0 and div.meta.calls == 4 and [u.evidence["assigned"] for u in div.units] == [2, 0]  # a tie: first
    assert [u.score for u in div.units] == pytest.approx([0.05, 0.05]) and div.evidence["entropy"] == 0.0
    assert div.evidence["harmonic_mean"] == pytest.approx(0.05)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["fibe", "--text", "A b."], "fibe needs --model"),
        (["fibe", "--model", "local:smollm2-135m"], "fibe needs --text or --file"),
        (["semantic-entropy", "--model", "local:smollm2-135m"], "semantic-entropy needs --question"),
        (["semantic-entropy", "--question", "Q?"], "needs --model to sample answers, or --answers-file"),
        (["semantic-entropy-paragraph", "--text", "A b.", "--model", "local:smollm2-135m"], "needs --question"),
        (["semantic-entropy-paragraph", "--text", "A b.", "--question", "Q?"], "needs --model"),
        (["semantic-entropy-paragraph", "--question", "Q?"], "needs --text or --file"),
        (
            ["fibe+selfcheck+sbc", "--text", "A b.", "--model", "local:smollm2-135m"],
            "needs --samples-file, or --question to regenerate",
        ),
        (
            ["fibe", "--text", "A b.", "--model", "local:smollm2-135m", "--samples", "11"],
            "fibe: n takes 1 to 10, got 11",
        ),
        (["selfcheck-prompt", "--text", "A b."], "needs --model"),
        (["selfcheck-prompt", "--text", "A b.", "--model", "local:smollm2-135m"], "--question to regenerate"),
        (["selfcheck-unigram", "--text", "A b."], "needs samples"),
        (["selfcheck-unigram", "--text", "  "], "the text to check is empty"),
        (["selfcheck-unigram", "--file", "/nonexistent.txt"], "cannot read --file"),
        (["selfcheck-unigram", "--text", "A b.", "--samples-file", "/nonexistent.json"], "cannot read --samples-file"),
        (["clue", "--model", "local:smollm2-135m"], "clue needs --question"),
        (["clue", "--question", "Q?"], "clue needs --model"),
        (["clue", "--question", "Q?", "--model", "local:smollm2-135m", "--outputs-file", "/nope"], "cannot read"),
        (["fewl", "--answer", "A."], "fewl needs --question"),
        (["fewl", "--question", "Q?"], "fewl needs --answer (one or more), or candidates to answer"),
        (["fewl", "--question", "Q?", "--answer", "A.", "--pool", "/nope"], "cannot read --pool"),
        (
            [
                "fewl",
                "--question",
                "Q?",
                "--answer",
                "A.",
                "--reference",
                "a:b",
                "--reference",
                "c:d",
                "--diversify",
                "3",
            ],
            "--diversify asks one --reference",
        ),
    ],
)
def test_detect_errors_name_the_problem(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    code, _, err = run(capsys, "detect", *argv)
    assert code == 2 and message in err


def test_detect_fewl_from_the_command_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A server that answers 'Paris is the capital.' to everything: the diversified call gives one answer
    (not a list: the other four are recorded missing), the IW/CO answer has no pairs (uniform lambda)."""
    pool = tmp_path / "pool.txt"
    pool.write_text("What is the capital of Spain?\nHow tall is Everest?\n")
    with StubAPI(answer="Paris is the capital.") as stub:
        spec = f"openai-compatible:{stub.base_url}/v1#m"
        code, out, _ = run(
            capsys, "detect", "fewl", "--question", "What is the capital of France?", "--answer", "Paris.",
            "--answer", "Paris is the capital.", "--reference", spec, "--pool", str(pool), "--neighbours", "1",
            "--json",
        )  # fmt: skip
    result = DetectionResult.from_json(out)
    assert code == 0 and result.meta.calls == 3 == len(stub.requests)  # 2 questions x 1 diversified call, 1 IW/CO
    assert result.meta.events == {"reference_missing": 8, "iw_co_unparsed": 1}
    assert result.meta.params["penalty"] is True and result.evidence["weights"] == [1.0]
    echo = result.units[1]  # identical to the reference answer: similarity 1, and to the neighbour's answer
    assert echo.evidence["similarity"] == pytest.approx([1.0], abs=1e-5)
    assert echo.evidence["fewl"] == pytest.approx(0.5 * math.tanh(1.0) - 0.5 * math.tanh(1.0), abs=1e-5)


def test_bench_truthfulqa_names_unknown_variants(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "bench", "truthfulqa", "--method", "fewl,best")
    assert code == 2 and "unknown --method best" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--dataset", "triviaqa"], "bench qa needs a model to answer the questions (--model SPEC"),
        (["--dataset", "triviaqa", "--model", "local:smollm2-135m", "--limit", "0"], "--limit must be at least 1"),
        (["--dataset", "squad", "--model", "local:smollm2-135m", "--samples", "1"], "at least 2 sampled answers"),
    ],
)
def test_bench_qa_errors(
    capsys: pytest.CaptureFixture[str], data_dir: Path, tmp_path: Path, argv: list[str], message: str
) -> None:
    code, _, err = run(capsys, "bench", "qa", *argv, "--data", str(data_dir), "--out", str(tmp_path))
    assert code == 2 and message in err


SCGP_V2 = """id: selfcheck.prompt
version: 2
source: my experiment
parser: yes_no
params: {temperature: 0.0}
messages:
  - role: user
    content: "Context: {context}\\nSentence: {sentence}\\nIs the sentence STRICTLY supported by the context? Yes or No:"
"""


def test_bench_compare_prompt_versions_side_by_side(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, data_dir: Path
) -> None:
    """Version 1 of the SCGP check against a user's version 2 on one WikiBio passage and 2 of its GPT-3
    samples; a server that says No to v1 and Yes to v2 moves every sentence from 1 to 0."""
    prompts = tmp_path / "prompts"
    prompts.mkdir()
    (prompts / "scgp.v2.yaml").write_text(SCGP_V2)
    out = tmp_path / "cmp"
    with StubAPI(answer="No") as stub:
        stub.answers_by_content = {"STRICTLY": "Yes"}
        argv = [
            "bench", "wikibio", "--method", "selfcheck-prompt", "--limit", "1", "--samples", "2",
            "--data", str(data_dir), "--model", f"openai-compatible:{stub.base_url}/v1#m", "--prompts", str(prompts),
            "--compare-prompt", "selfcheck.prompt@2", "--out", str(out),
        ]  # fmt: skip
        code, printed, _ = run(capsys, *argv)
        first = json.loads((out / "compare.json").read_text())
        sentences = first["items_compared"]
        assert code == 0 and sentences > 1 and len(stub.requests) == 2 * 2 * sentences
        code, _, _ = run(capsys, *argv)  # the same comparison again: every call replayed
        again = json.loads((out / "compare.json").read_text())
    assert code == 0 and len(stub.requests) == 2 * 2 * sentences
    assert first["a"]["prompt"].startswith("selfcheck.prompt@1#")
    assert first["b"]["prompt"].startswith("selfcheck.prompt@2#")
    assert (first["a"]["calls"], first["a"]["replayed"]) == (2 * sentences, 0)
    assert (again["a"]["calls"], again["a"]["replayed"], again["b"]["calls"]) == (0, 0, 0)
    assert again["metrics"] == first["metrics"] and again["items_changed"] == first["items_changed"]
    assert first["items_changed"] == sentences
    assert {(r["a"], r["b"]) for r in first["item_changes"]} == {(1.0, 0.0)}
    assert "+    Is the sentence STRICTLY supported by the context? Yes or No:" in first["prompt_diff"]
    assert "-source: Hirano et al., FIBE paper" in first["prompt_diff"]
    assert "+source: my experiment" in first["prompt_diff"]
    report = (out / "compare.md").read_text()
    assert "| metrics.random_auc_pr_nonfact | 100 | 100 | 0 |" in report  # one passage: every sentence NonFact
    assert "| selfcheck-prompt passage 0 sentence 0 | 1 | 0 | -1 |" in report
    assert f"{sentences} of {sentences} item scores changed" in printed
    assert (out / "A" / "selfcheck-prompt" / "results.json").is_file() and (out / "B" / "report.md").is_file()
    code, printed, _ = run(capsys, *argv, "--json")  # replayed; one JSON object: the runs print to stderr
    assert code == 0 and set(json.loads(printed)) >= {"a", "b", "metrics", "items_changed"}
    argv = ["bench", "wikibio", "--method", "selfcheck-prompt", "--compare-prompt", "selfcheck.prompt"]
    code, _, err = run(capsys, *argv)
    assert code == 2 and "--compare-prompt needs ID@VERSION" in err


@pytest.mark.slow
def test_detect_phr_goes_through_the_detector(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """`detect phr` (it had none): in-context pairs from a TSV file, the PHR and entropies printed."""
    context = tmp_path / "context.tsv"
    context.write_text("a gorgeous , witty movie .\tpositive\none long string of cliches .\tnegative\n")
    argv = ["detect", "phr", "--model", "local:smollm2-135m", "--context-file", str(context)]
    argv += ["--query", "an utterly charming film .", "--truth", "positive", "--samples", "2"]
    code, out, _ = run(capsys, *argv, "--json")
    result = DetectionResult.from_json(out)
    assert code == 0 and result.method == "phr" and result.meta.params["M"] == 2
    assert 0.0 <= (result.units[0].score or 0.0) <= 1.0 and "error_rate" in result.units[0].evidence
    code, out, _ = run(capsys, *argv)
    assert code == 0 and out.startswith("PHR ") and "epistemic (MI)" in out
    bad = tmp_path / "bad.json"
    bad.write_text('[["only an input"]]')
    code, _, err = run(capsys, "detect", "phr", "--context-file", str(bad), "--query", "x")
    assert code == 2 and "example 1 is not an (input, label) pair" in err


def test_version_stdin_and_a_bad_model_refused_before_any_work(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0 and capsys.readouterr().out.strip() == f"halluscope {halluscope.__version__}"
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"Paris is in France. It has a tower.\n")))
    samples = tmp_path / "samples.txt"
    samples.write_text("Paris is in France.\n---\nA tower.")
    code, out, _ = run(capsys, "detect", "selfcheck-unigram", "--file", "-", "--samples-file", str(samples), "--json")
    assert code == 0 and [u.text for u in DetectionResult.from_json(out).units] == [
        "Paris is in France.",
        "It has a tower.",
    ]
    code, out, err = run(
        capsys, "bench", "wikibio", "--method", "selfcheck-prompt", "--model", "opnai:gpt-4o", "--data", str(tmp_path)
    )
    assert code == 2 and out == "" and "unknown provider 'opnai'" in err


def unigram_argv(tmp_path: Path) -> list[str]:
    """`detect selfcheck-unigram` on a two-sentence text and two samples: no model, a known order."""
    samples = tmp_path / "samples.txt"
    samples.write_text("Paris is in France.\n---\nA tower.")
    return [
        "detect",
        "selfcheck-unigram",
        "--text",
        "Paris is in France. It has a tower.",
        "--samples-file",
        str(samples),
    ]


def test_detect_draws_a_verdict_at_the_threshold(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    argv = unigram_argv(tmp_path)
    code, out, _ = run(capsys, *argv, "--json")
    scores = [u.score for u in DetectionResult.from_json(out).units]
    assert code == 0 and scores[0] < scores[1]
    middle = str((scores[0] + scores[1]) / 2)
    code, out, _ = run(capsys, *argv, "--threshold", middle)
    assert code == 0 and out.endswith(
        f"verdict: 1 of 2 units flagged (score >= {float(middle):g})\n"
        "units are numbered from 0, as --json, --csv and decide() number them\n"
        f"! unit 1 ({scores[1]:.3f}): It has a tower.\n"  # the unit --json's verdict flags: [1]
    )
    code, out, _ = run(capsys, *argv)
    assert "verdict: 2 units ranked by score; give --threshold to flag" in out
    code, out, _ = run(capsys, *argv, "--threshold", middle, "--json")
    verdict = json.loads(out)["verdict"]
    assert code == 0 and verdict == {"threshold": float(middle), "on": "score", "flagged": [1], "units": 2, "count": 1}
    assert DetectionResult.from_json(out).verdict is not None
    assert json.loads(run(capsys, *argv, "--json")[1])["verdict"] is None  # raw scores, no threshold: none drawn
    table = tmp_path / "out" / "units.csv"
    code, out, err = run(capsys, *argv, "--threshold", middle, "--csv", str(table))
    frame = pandas.read_csv(table)
    assert code == 0 and f"wrote 2 units to {table}" in err
    assert frame["text"].tolist() == ["Paris is in France.", "It has a tower."] and frame["unit"].tolist() == [0, 1]
    assert frame["flagged"].tolist() == [False, True] and frame["score"].tolist() == pytest.approx(scores)
    code, out, err = run(capsys, *argv, "--csv", str(tmp_path))
    assert code == 2 and f"--csv {tmp_path} is a folder" in err


def test_exit_code_gates_on_the_verdict(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """As `git diff --exit-code`: 1 when a unit is flagged, 0 when none, 2 when it cannot judge."""
    argv = unigram_argv(tmp_path)
    assert run(capsys, *argv, "--threshold", "0", "--exit-code")[0] == 1
    assert run(capsys, *argv, "--threshold", "0", "--exit-code", "--json")[0] == 1
    assert run(capsys, *argv, "--threshold", "1000", "--exit-code")[0] == 0
    assert run(capsys, *argv, "--threshold", "0")[0] == 0  # without --exit-code a flag is no failure
    code, out, err = run(capsys, *argv, "--exit-code")
    assert code == 2 and out == "" and "--exit-code gates on a verdict: give --threshold T" in err


def test_a_long_text_shows_the_riskiest_and_the_flagged_units_once(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Over 12 units the report is the five riskiest and the flagged ones, not every unit; --all prints all."""
    sentences = [
        f"Sentence number {word} is here."
        for word in "one two three four five six seven eight nine ten eleven twelve thirteen fourteen".split()
    ]
    samples = tmp_path / "samples.txt"
    samples.write_text("Sentence number one is here.\n---\nSentence number two is here.")
    argv = ["detect", "selfcheck-unigram", "--text", " ".join(sentences), "--samples-file", str(samples)]
    code, out, _ = run(capsys, *argv, "--threshold", "1000")
    assert code == 0 and "selfcheck-unigram: 14 units, highest risk" in out
    assert sum(s in out for s in sentences) == 5 and "verdict: 0 of 14 units flagged" in out
    code, out, _ = run(capsys, *argv, "--threshold", "0")
    assert all(1 <= out.count(s) <= 2 for s in sentences)  # flagged, and at most once more among the riskiest
    assert "verdict: 14 of 14 units flagged" in out and "! unit 13 (" in out and "! unit 14 (" not in out
    code, out, _ = run(capsys, *argv, "--all")
    assert all(out.count(s) == 1 for s in sentences)


def test_a_calibrated_result_flags_on_probability() -> None:
    units = [Unit(text="a", score=0.9, probability=0.2), Unit(text="b", score=0.1, probability=0.7)]
    result = DetectionResult(method="m", units=units, meta=RunMeta(method="m"))
    assert [u.text for u in result.flagged(0.5)] == ["b"]
    verdict = result.decide()  # a calibrated result is judged at p >= 0.5 unless told otherwise
    assert verdict is result.verdict and verdict is not None
    assert (verdict.threshold, verdict.on, verdict.flagged, verdict.count) == (0.5, "probability", [1], 1)
    assert result.decide(0.5, on="score").flagged == [0]  # type: ignore[union-attr]
    raw = DetectionResult(method="m", units=[Unit(text="a", score=0.9)], meta=RunMeta(method="m"))
    assert raw.decide() is None and raw.decide(0.5).flagged == [0]  # type: ignore[union-attr]
    failed = DetectionResult(method="m", units=[], meta=RunMeta(method="m"), error="ConfigError: x")
    assert failed.decide(0.5) is None


@pytest.mark.parametrize(
    ("argv", "dest", "expected"),
    [
        (["bench", "wikibio", "--method", "selfcheck-unigram,fibe", "--method", "direct-question"], "method",
         ["selfcheck-unigram", "fibe", "direct-question"]),
        (["bench", "truthfulqa-rank", "--models", "local:a, local:b", "--reference", "local:c"], "models",
         ["local:a", "local:b"]),
        (["bench", "truthfulqa-rank", "--models", "local:a", "--reference", "local:c,local:d", "--reference", "x:e"],
         "references", ["local:c", "local:d", "x:e"]),
        (["bench", "phr-synthetic", "--n", "4,16", "--sizes", "64"], "sizes", [4, 16, 64]),
        (["bench", "phr-synthetic"], "sizes", [2, 8, 32]),
        (["bench", "truthfulqa"], "method", ["single", "single+penalty", "multi", "fewl", "fewl-uniform"]),
        (["detect", "fewl", "--reference", "local:a,local:b"], "references.0", ["local:a", "local:b"]),
        (["prompts", "list", "--prompt", "fibe.create@1,fibe.check@1", "--prompt", "x@2"], "prompt",
         ["fibe.create@1", "fibe.check@1", "x@2"]),
    ],
)  # fmt: skip
def test_every_list_flag_takes_commas_and_repeats(argv: list[str], dest: str, expected: list[Any]) -> None:
    from halluscope.bench.registry import BENCHMARKS
    from halluscope.cli.bench import settings_of

    args = build_parser().parse_args(argv)
    if argv[0] == "bench":  # a benchmark's flags arrive as its settings (a method's fields among them)
        settings = settings_of(BENCHMARKS[argv[1]], args)
        assert list({**vars(settings), **settings.method_options}[dest]) == expected
    else:
        assert getattr(args, dest) == expected


def test_help_says_what_the_code_does(capsys: pytest.CaptureFixture[str], tmp_path: Path, data_dir: Path) -> None:
    """No argparse dest as a placeholder ('TEXT.0') in any command's help, demo's names Direct Question,
    an unknown keyword's list omits the run settings, and bench's last line names report.html and
    where each results.json is."""
    import argparse
    import re

    def walk(parser: argparse.ArgumentParser, path: str) -> None:
        placeholders = set(re.findall(r"\b[A-Z_]+\.[0-9]+\b", parser.format_help())) - {"E.1", "E.2", "E.4"}
        assert not placeholders, (path, placeholders)
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, f"{path} {name}")

    walk(build_parser(), "halluscope")
    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "Direct Question" in shown and "SelfCheck-Prompt" not in shown
    with pytest.raises(SystemExit):
        main(["detect", "phr", "--help"])
    assert "model spec, e.g. local:qwen2.5-coder-1.5b; it scores the queries" in " ".join(
        capsys.readouterr().out.split()
    )
    with pytest.raises(halluscope.ConfigError, match="it accepts: ") as refused:
        halluscope.detector("selfcheck-unigram").detect(text="A.", bogus=1)
    assert "gateway" not in str(refused.value) and "stats" not in str(refused.value)
    out_dir = tmp_path / "bench"
    code, out, _ = run(capsys, "bench", "wikibio", "--method", "selfcheck-unigram", "--limit", "1",
                       "--data", str(data_dir), "--out", str(out_dir))  # fmt: skip
    plots = ", ".join(sorted(p.name for p in out_dir.glob("*.png")))
    assert (
        code == 0
        and plots
        and out.rstrip().splitlines()[-1]
        == (
            f"wrote {out_dir / 'report.html'} (open it in a browser), report.md, plots ({plots}); "
            f"results: {out_dir / 'selfcheck-unigram' / 'results.json'}"
        )
    )


def test_what_a_new_user_hit_on_the_command_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Each was a defect a new user hit: a misspelt method with no suggestion, a threshold a 0-1 score
    can never reach passing silently, a bare model name met with four providers only, and a text with
    no sentence ending checked whole without a word. Each is now one line."""
    for argv, said in (
        (["detect", "groundd", "--text", "x"], "unknown method 'groundd'; did you mean 'grounded'?"),
        (["detecct"], "unknown command 'detecct'; did you mean 'detect'?"),
    ):
        with pytest.raises(SystemExit) as exited:  # argparse's own exit, with our one line
            main(argv)
        err = capsys.readouterr().err
        assert exited.value.code == 2 and said in err and err.count("\n") == 1
    with pytest.raises(halluscope.errors.ConfigError, match="did you mean 'selfcheck-prompt'"):
        halluscope.detector("selfchek-prompt")
    smol = ("--model", "local:smollm2-135m")  # refused before it loads
    code, _, err = run(capsys, "detect", "direct-question", "--text", "A b.", *smol, "--threshold", "1.5")
    assert code == 2 and err == (
        "halluscope: error: --threshold: threshold 1.5 flags nothing: direct-question's scores lie in [0, 1]\n"
    )
    argv = unigram_argv(tmp_path)
    assert run(capsys, *argv, "--threshold", "1.5")[0] == 0  # the unigram's scores are unbounded nats
    code, _, err = run(capsys, "detect", "direct-question", "--text", "A b.", "--model", "gpt-4o-mini")
    assert code == 2 and "did you mean openai:gpt-4o-mini?" in err and "ollama" in err and "google_genai" in err
    samples = tmp_path / "s.txt"
    samples.write_text("Einstein was born in Ulm.\n---\nHe was born in Ulm.")
    bare = ["detect", "selfcheck-unigram", "--text", "Einstein born Ulm 1879", "--samples-file", str(samples)]
    code, out, err = run(capsys, *bare)
    assert code == 0 and err == (
        "halluscope: warning: the text has no sentence ending (. ! ?): it was checked whole, as one unit\n"
    )  # and no progress bar drawn into a log before it: the bar is for a terminal
    assert "warning" not in run(capsys, *argv)[2]  # sentences that end: no word
    entity = ["detect", "selfcheck-unigram", "--text", "New Delhi", "--samples-file", str(samples)]
    assert run(capsys, *entity)[2] == ""  # a bare entity is one unit, checked whole without a word


def test_a_guard_refuses_a_threshold_its_scores_cannot_reach(gateway: Any, scripted: Any) -> None:
    from halluscope.tools import hallucination_guard

    det = halluscope.detector("direct-question", model=scripted(lambda p, k: "Yes"), gateway=gateway)
    with pytest.raises(halluscope.errors.ConfigError, match="threshold 1.5 flags nothing"):
        hallucination_guard(det, threshold=1.5)
    hallucination_guard(det, threshold=0.5)


def test_every_error_exits_2_and_a_closed_stdout_keeps_the_verdict(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--exit-code reads 1 as "flagged": a traceback (exit 1) looked like a flag, a closed stdout (`| true`)
    turned a flag into 0, --csv - wrote a file named '-'. Each case the issue found is now one line."""
    argv = unigram_argv(tmp_path)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    code, _, err = run(capsys, "detect", "grounded", "--text", "A b.", "--context-file", str(deep))
    assert code == 2 and "nested too deeply" in err and err.count("\n") == 1
    code, _, err = run(capsys, *argv, "--csv", str(Path("/proc/none/units.csv")))
    assert code == 2 and err.startswith("halluscope: error: cannot write /proc/none/units.csv")

    def broken(*_args: Any, **_kwargs: Any) -> Any:
        raise ValueError("a bug")

    monkeypatch.setattr(DetectionResult, "decide", broken)
    code, _, err = run(capsys, *argv, "--threshold", "0")
    assert code == 2 and err.startswith("halluscope: error: internal error, ValueError: a bug") and err[-1] == "\n"
    monkeypatch.undo()
    code, out, err = run(capsys, *argv, "--csv", "-")
    assert code == 0 and out.startswith("item,method,unit,text,score") and not Path("-").exists()
    assert run(capsys, *argv, "--csv", "-", "--json")[0] == 2
    script = "import sys; from halluscope.cli import main; sys.exit(main(sys.argv[1:]))"  # as `halluscope ... | true`
    command = shlex.join([sys.executable, "-c", script, *argv, "--threshold", "0", "--exit-code"])
    piped = subprocess.run(
        f"{command} | true; exit ${{PIPESTATUS[0]}}", shell=True, executable="/bin/bash", capture_output=True,
        text=True, cwd=REPO,
    )  # fmt: skip
    assert piped.returncode == 1, piped.stderr


def test_csv_cells_a_spreadsheet_would_run_are_escaped() -> None:
    from halluscope.bench.report import csv_text

    rows = [{"text": "=cmd|' /C calc'!A0", "score": -1.5}, {"text": "+1", "score": 0.5}, {"text": "@SUM(A1)"}]
    lines = csv_text(rows).splitlines()
    assert lines[1].startswith("'=cmd|' /C calc'!A0,-1.5") and lines[2] == "'+1,0.5" and lines[3] == "'@SUM(A1),"
    assert csv_text([{"text": "-dash"}, {"text": "plain"}]).splitlines()[1:] == ["'-dash", "plain"]


def test_an_error_names_the_flag_on_the_command_line_and_the_keyword_in_python(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Below cli/ an error names what a Python caller passed (folds, force=True); the command line says
    the flag the user typed."""
    from halluscope.errors import ConfigError
    from halluscope.tune.choose import ChooseSettings, choose

    data = tmp_path / "answers.jsonl"
    rows = [{"id": f"a{i}", "text": f"Paris is in France {i}.", "labels": [i % 2]} for i in range(6)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    argv = ["choose", "--data", str(data), "--method", "selfcheck-unigram", "--folds", "1", "--out", str(tmp_path)]
    assert main(argv) == 2
    assert "halluscope: error: --folds is between 2 and 20, got 1" in capsys.readouterr().err
    with pytest.raises(ConfigError, match=r"^folds is between 2 and 20, got 1$"):
        choose(str(data), ChooseSettings(methods=["selfcheck-unigram"], folds=1), tmp_path, progress=False)
    assert main([*argv[:-4], "--folds", "9", "--out", str(tmp_path)]) == 2
    assert "--folds 9 is more than the 6 answers" in capsys.readouterr().err


def test_a_setting_is_spelled_as_its_flag_in_the_form_the_error_gives() -> None:
    """'force=True' is the flag, 'folds=' the flag before its value, a bare name its first time only, a
    keyword found by the one dest ending with it; one the command has no flag for stays."""
    from halluscope.cli.flags import as_flags

    flags = {"folds": "--folds", "force": "--force", "data": "--data", "upstream_key_env": "--upstream-key-env"}
    assert as_flags("data x.csv: label more data", ("data",), flags) == "--data x.csv: label more data"
    assert as_flags("keep it anyway (force=True)", ("force=True",), flags) == "keep it anyway (--force)"
    assert as_flags("folds=9 is more than 6", ("folds=",), flags) == "--folds 9 is more than 6"
    assert as_flags("needs key_env=NAME", ("key_env=",), flags) == "needs --upstream-key-env NAME"
    assert as_flags("n takes 1 to 5", ("n",), flags) == "n takes 1 to 5"
