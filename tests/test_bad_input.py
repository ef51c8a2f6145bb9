"""Bad input from the command line and the Python API: one clear error naming the problem, never a
traceback and never a silently wrong answer (issue 20, items 12 and 13)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

import halluscope
from halluscope.backends.budget import BudgetError
from halluscope.backends.local import model_file
from halluscope.bench.wikibio import load_wikibio
from halluscope.cli import main
from halluscope.errors import ConfigError, DataError
from halluscope.methods import fibe, selfcheck_prompt, selfcheck_unigram, semantic_entropy
from halluscope.text import sentences

TEXT = "Ada Lovelace was a mathematician. She wrote the first program."


@pytest.mark.parametrize("flag", ["--file", "--samples-file"])
def test_binary_and_non_utf8_files_are_named(capsys: pytest.CaptureFixture[str], tmp_path: Path, flag: str) -> None:
    binary = tmp_path / "model.bin"
    binary.write_bytes(b"\x00\x01\x02GGUF\x00")
    latin = tmp_path / "latin1.txt"
    latin.write_bytes("Café au lait.".encode("latin-1"))
    for path, message in ((binary, "is a binary file, not text"), (latin, "is not UTF-8 text (byte 0xe9 at offset 3)")):
        argv = ["detect", "selfcheck-unigram"]
        argv += [flag, str(path)] if flag == "--file" else ["--text", TEXT, flag, str(path)]
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert f"{flag} {path} {message}" in err and "Traceback" not in err


def test_a_text_over_spacys_limit_is_split_not_a_crash() -> None:
    long = "Ada wrote a program. " * 60_000  # 1.26 million characters
    assert len(long) > 1_000_000
    assert len(sentences(long)) == 60_000


def test_a_local_path_that_is_not_gguf_is_refused_without_showing_its_bytes(tmp_path: Path) -> None:
    """The error once printed the file's first bytes: a served request could read any file's opening."""
    fake = tmp_path / "weights.gguf"
    fake.write_bytes(b"SECRET a password file, not a model")
    with pytest.raises(ConfigError, match=r"is not a GGUF model file \(it does not start with b'GGUF'\)") as refused:
        model_file(str(fake))
    assert "SECR" not in str(refused.value)


def test_a_dataset_folder_without_its_file_names_the_file(tmp_path: Path) -> None:
    folder = tmp_path / "wikibio_gpt3_hallucination"
    folder.mkdir()
    (folder / "SOURCE.md").write_text("# WikiBio\n")
    with pytest.raises(DataError, match=r"lacks wikibio_gpt3_hallucination.json .*found: SOURCE.md"):
        load_wikibio(tmp_path)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: selfcheck_unigram.detect(123, samples=["x"]), "text must be text \\(str\\), got int"),
        (lambda: selfcheck_unigram.detect(b"bytes", samples=["x"]), "got bytes \\(decode bytes first"),
        (lambda: selfcheck_unigram.detect(TEXT, samples="one sample"), "samples must be a list of texts, got str"),
        (lambda: selfcheck_unigram.detect(TEXT, samples=[None]), r"samples\[0\] must be a non-empty text, got None"),
        (lambda: selfcheck_prompt.detect(TEXT, model="local:x", samples=[""]), r"samples\[0\] must be a non-empty"),
        (
            lambda: fibe.detect(TEXT, model="local:x", samples="abc", variant="fibe+selfcheck+sbc"),
            "samples must be a list",
        ),
        (lambda: semantic_entropy.detect(7, answers=["a"]), "question must be text"),
        (lambda: semantic_entropy.detect("Q?", answers="Paris"), "answers must be a list of texts, got str"),
        (lambda: halluscope.detector("selfcheck-unigram").detect(text=123, samples=["x"]), "the text must be text"),
        (
            lambda: halluscope.detector("selfcheck-unigram").detect(text=TEXT, samples="abc"),
            "samples must be a list of texts",
        ),
    ],
)
def test_wrong_types_through_the_python_api_are_clear_errors(call: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        call()


@pytest.mark.parametrize(
    "argv",
    [
        ["detect", "selfcheck-unigram", "--text", TEXT, "--samples", "0"],
        ["detect", "selfcheck-prompt", "--text", TEXT, "--samples", "-3"],
        ["bench", "wikibio", "--method", "selfcheck-unigram", "--limit", "0"],
        ["bench", "wikibio", "--method", "selfcheck-unigram", "--limit", "-1"],
        ["bench", "qa", "--dataset", "triviaqa", "--limit", "0"],
    ],
)
def test_zero_and_negative_counts_are_refused_not_read_as_defaults(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    assert main(argv) == 2
    flag = next(a for a in argv if a in ("--samples", "--limit"))
    assert f"{flag} must be at least 1, got" in capsys.readouterr().err


def test_a_huge_sample_count_needs_yes_in_a_bench(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["bench", "wikibio", "--method", "selfcheck-unigram", "--samples", "1000"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--samples 1000 asks for 1,000 model samples per item" in err and "--yes" in err


# ---------------------------------------------------------------- issue 32: no traceback from any input


def _exit_code(argv: list[str]) -> int:
    """main's return, or argparse's exit (a flag's value refused as the flags are read)."""
    try:
        return main(argv)
    except SystemExit as exited:
        return int(exited.code or 0)


def _one_line(err: str) -> str:
    lines = [line.split("\r")[-1] for line in err.split("\n")]  # a progress bar redraws itself after \r
    lines = [line for line in lines if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_a_calibration_for_the_ensemble_runs_from_the_command_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, data_dir: Path
) -> None:
    """`detect ensemble --calibration FILE` once passed the file twice (TypeError for any file)."""
    from halluscope.tune.calibrate import WikiBioCalibrationSettings, calibrate_wikibio
    from tests.stub_servers import StubAPI

    with StubAPI(answer="Yes") as stub:
        spec = f"openai-compatible:{stub.base_url}/v1#m"
        path = tmp_path / "stack.json"
        methods = ["selfcheck-unigram", "direct-question"]
        calibrate_wikibio(  # forced: a stub judge's fit is plumbing, not a calibration to keep
            WikiBioCalibrationSettings(
                methods=methods, fit_passages=range(0, 4), test_passages=range(4, 6), data=data_dir, force=True
            ),
            path,
            model=spec,
            progress=False,
        )
        samples = tmp_path / "samples.json"
        samples.write_text(json.dumps(["Ada Lovelace was a poet.", "She wrote notes."] * 10))  # fitted on 20
        argv = ["detect", "ensemble", "--text", TEXT, "--model", spec, "--calibration", str(path)]
        code = main([*argv, "--samples-file", str(samples), "--question", "Ada Lovelace:", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    result = halluscope.DetectionResult.from_json(out)
    assert len(result.units) == 2 and all(u.probability is not None for u in result.units)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--opt", "n=five"], "selfcheck-prompt: n takes a whole number, got str 'five'"),
        (["--timeout", "inf"], "argument --timeout: takes a finite number, got 'inf'"),
        (["--threshold", "nan"], "argument --threshold: takes a finite number, got 'nan'"),
        (["--opt", "n=[1,2"], "--opt n: '[1,2' is not valid YAML"),
        (
            ["--opt", "n=!!python/object/apply:os.system [echo]"],
            "--opt n: '!!python/object/apply:os.system [echo]' carries a YAML tag",
        ),
        (["--max-calls", "0"], "max_calls takes a whole number of at least 1"),
    ],
)
def test_bad_flags_of_detect_are_one_line(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    base = ["detect", "selfcheck-prompt", "--text", TEXT, "--question", "Who was Ada?", "--model", "openai:gpt-4o"]
    assert _exit_code([*base, *argv]) == 2
    assert message in _one_line(capsys.readouterr().err)


def test_unreadable_calibration_and_samples_files_are_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    binary = tmp_path / "calibration.json"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    argv = ["detect", "selfcheck-unigram", "--text", TEXT, "--calibration", str(binary)]
    assert main([*argv, "--samples-file", str(binary)]) == 2
    assert "is a binary file, not text" in _one_line(capsys.readouterr().err)
    latin = tmp_path / "latin.json"
    latin.write_bytes(b'{"kind": "caf\xe9"}')
    assert main(["detect", "selfcheck-unigram", "--text", TEXT, "--calibration", str(latin)]) == 2
    assert f"the calibration file {latin} is not UTF-8 text" in _one_line(capsys.readouterr().err)
    wrapped = tmp_path / "samples.json"  # a JSON object read as text was one sample holding the JSON
    wrapped.write_text('{"samples": ["Ada was a poet.", "She wrote."]}')
    assert main(["detect", "selfcheck-unigram", "--text", TEXT, "--samples-file", str(wrapped)]) == 2
    assert "holds a JSON object ('samples'), not a list" in _one_line(capsys.readouterr().err)


def test_a_bench_into_a_file_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    taken = tmp_path / "results"
    taken.write_text("not a directory")
    assert main(["bench", "wikibio", "--method", "selfcheck-unigram", "--limit", "1", "--out", str(taken)]) == 2
    assert f"{taken} is a file; write somewhere else" in _one_line(capsys.readouterr().err)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: halluscope.detector(123), "method takes a method's name, got int 123"),
        (lambda: halluscope.detector(None), "method takes a method's name, got NoneType None"),
        (
            lambda: halluscope.detector("selfcheck-prompt", n="5"),
            "selfcheck-prompt: n takes a whole number, got str '5'",
        ),
        (lambda: halluscope.detector("selfcheck-prompt", n=2.5), "n takes a whole number, got float 2.5"),
        (lambda: halluscope.detector("selfcheck-prompt", n=True), "n takes a whole number, got bool True"),
        (lambda: halluscope.detector("selfcheck-prompt", calibration=123), "calibration takes a text or Path"),
        (lambda: halluscope.detector("selfcheck-prompt", gateway="x"), "gateway takes Gateway or None, got str 'x'"),
        (lambda: halluscope.detector("selfcheck-prompt", scoring="best"), "scoring takes one of 'discrete', 'prob'"),
        (lambda: halluscope.detector("selfcheck-prompt", max_calls=0), "max_calls takes a whole number of at least 1"),
        (
            lambda: halluscope.detector("selfcheck-unigram").detect_many([{"text": TEXT}], concurrency="2"),
            "detect_many: concurrency takes a whole number, got str '2'",
        ),
        (
            lambda: halluscope.detector("selfcheck-unigram").detect_many("a string"),
            "detect_many takes a list of items",
        ),
        (
            lambda: halluscope.detector("selfcheck-unigram").detect(text=TEXT, samples=["x"], n="3"),
            "n takes a whole number",
        ),
    ],
)
def test_wrong_types_of_options_name_the_parameter(call: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        call()


# ---------------------------------------------------------------- issue 32: budgets


def test_a_run_that_plans_too_many_calls_is_refused_before_its_first(
    gateway: halluscope.Gateway, scripted: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    asked: list[str] = []
    model = scripted(lambda prompt, _params: asked.append(prompt) or "Yes", "scripted:budget")
    det = halluscope.detector("selfcheck-prompt", model=model, gateway=gateway, n=10**6)
    with pytest.raises(BudgetError, match=r"plans 3,000,000 model calls, more than the limit of 10,000"):
        det.detect(text=TEXT, question="Who was Ada Lovelace?")
    long_text = "Ada wrote a program. " * 6_000  # 6,000 sentences x 2 samples
    samples = ["Ada wrote programs.", "She was a mathematician."]
    small = halluscope.detector("selfcheck-prompt", model=model, gateway=gateway, max_calls=11_999)
    with pytest.raises(BudgetError, match=r"plans 12,000 model calls.*max_calls=12000 or yes=True"):
        small.detect(text=long_text, samples=samples)
    failed = small.detect_many([{"text": long_text, "samples": samples}], progress=False)[0]
    assert failed.error is not None and failed.error.startswith("BudgetError: this batch plans 12,000")
    assert asked == []  # refused before the first call
    at_the_limit = halluscope.detector("selfcheck-prompt", model=model, gateway=gateway, max_calls=20)
    ten = " ".join(f"Ada wrote program number {i}." for i in range(10))
    assert len(at_the_limit.detect(text=ten, samples=samples).units) == 10
    assert len(asked) == 20
    assert halluscope.detector("selfcheck-prompt", model=model, yes=True).max_calls is None


def test_the_command_line_budget_names_the_flags(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from tests.stub_servers import StubAPI

    text = tmp_path / "long.txt"
    text.write_text("Ada wrote a program. " * 40)
    samples = tmp_path / "samples.json"
    samples.write_text('["Ada wrote programs.", "She was a mathematician."]')
    with StubAPI(answer="Yes") as stub:
        argv = ["detect", "selfcheck-prompt", "--file", str(text), "--samples-file", str(samples)]
        argv += ["--model", f"openai-compatible:{stub.base_url}/v1#m", "--no-cache", "--max-calls", "79"]
        assert main(argv) == 2
        assert "plans 80 model calls, more than the limit of 79" in _one_line(capsys.readouterr().err)
        assert stub.requests == []
        assert main([*argv, "--yes", "--json"]) == 0
        assert len(stub.requests) == 80


def test_paragraph_semantic_entropy_checks_its_budget_again_once_it_knows_the_claims(
    gateway: halluscope.Gateway, scripted: Any
) -> None:
    claims = "\n".join(f"- Ada wrote program number {i}." for i in range(600))
    asked: list[str] = []

    def respond(prompt: str, _params: dict[str, Any]) -> str:
        asked.append(prompt)
        return claims

    det = halluscope.detector("semantic-entropy-paragraph", model=scripted(respond, "scripted:se"), gateway=gateway)
    with pytest.raises(BudgetError, match="more than the limit of 10,000"):
        det.detect(question="Tell me about Ada Lovelace.", text=TEXT)
    assert len(asked) == 1  # the decomposition only


def test_a_batch_budget_covers_the_batch_and_says_so(gateway: halluscope.Gateway, scripted: Any) -> None:
    """detect_many of 10 items planning 4 calls each under max_calls=4 sent 40 requests: the limit now
    covers the batch's items together, and the items past it fail naming the batch."""
    asked: list[str] = []
    model = scripted(lambda prompt, _params: asked.append(prompt) or "Yes", "scripted:batch")
    det = halluscope.detector("selfcheck-prompt", model=model, gateway=gateway, max_calls=4)
    items = [{"text": f"Ada wrote program {i}. It ran.", "samples": ["Ada wrote.", "It ran."]} for i in range(10)]
    results = det.detect_many(items, concurrency=1, progress=False)
    assert len(asked) == 4 and results[0].ok
    assert all(r.error is not None and "this batch plans 8 model calls" in r.error for r in results[1:2])
    assert all("max_calls covers the whole batch" in (r.error or "") for r in results[1:])
    assert det.detect(**items[1]).ok  # one run alone has its own budget


def test_retries_count_against_the_budget(gateway: halluscope.Gateway) -> None:
    """A run that plans exactly max_calls against a failing server sent twice as many requests: each
    retry is one more call of the budget, so the run stops at its limit, saying retries took it there."""
    from tests.stub_servers import StubAPI

    with StubAPI(answer="Yes") as stub:
        stub.fail_next(503, 100)
        spec = f"openai-compatible:{stub.base_url}/v1#m"
        det = halluscope.detector("direct-question", model=spec, gateway=gateway, max_calls=2)
        # the two sentences' requests fail at once: the first retry or both are counted before one raises
        with pytest.raises(BudgetError, match=r"plans (3|4) model calls \((1|2) of them retries of failed requests\)"):
            det.detect(text="Ada wrote a program. It ran on an engine.", prompt="Who was Ada?")
        assert len(stub.requests) <= 2  # never more requests than the limit, retries included


def test_the_command_line_reads_a_model_or_judge_spec_as_the_library_does() -> None:
    """One grammar: a judge's nli:NAME is left to its loader, every other spec (a transformers: folder
    included) is parsed as the gateway parses it, and a bare path, which no loader takes, is refused
    before any work."""
    from halluscope.cli.common import check_specs
    from halluscope.errors import ModelSpecError

    check_specs(["nli:selfcheckgpt-nli", "transformers:/some/folder", "local:qwen2.5-coder-1.5b,openai:gpt-4o-mini"])
    for bad in ("./model.gguf", "/models/x", "nosuchprovider:x"):
        with pytest.raises(ModelSpecError):
            check_specs([bad])
