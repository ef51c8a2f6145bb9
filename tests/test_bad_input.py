"""Bad input from the command line and the Python API: one clear error naming the problem, never a
traceback and never a silently wrong answer (issue 20, items 12 and 13)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import halluscope
from halluscope.backends.local import model_file
from halluscope.bench.wikibio import load_wikibio
from halluscope.cli import main
from halluscope.errors import ConfigError, DataError
from halluscope.graphs import fibe, selfcheck_prompt, selfcheck_unigram, semantic_entropy
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


def test_a_local_path_that_is_not_gguf_is_refused_when_the_spec_is_read(tmp_path: Path) -> None:
    fake = tmp_path / "weights.gguf"
    fake.write_bytes(b"PK\x03\x04 a zip, not a model")
    with pytest.raises(ConfigError, match=r"is not a GGUF model file \(it starts with b'PK\\x03\\x04'"):
        model_file(str(fake))


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
        (lambda: fibe.detect(TEXT, model="local:x", samples="abc"), "samples must be a list of texts"),
        (lambda: semantic_entropy.detect(7, answers=["a"]), "question must be text"),
        (lambda: semantic_entropy.detect("Q?", answers="Paris"), "answers must be a list of texts, got one string"),
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


def test_a_huge_sample_count_needs_yes(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["detect", "selfcheck-unigram", "--text", TEXT, "--samples", "1000000"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--samples 1000000 asks for 1,000,000 model samples per item" in err and "--yes" in err
    # with --yes the count is accepted (and this command then fails for the next reason: no samples)
    assert main([*argv, "--yes"]) == 2
    assert "needs samples" in capsys.readouterr().err
