"""The NLI and grounding datasets a checker fits on and nothing here tests on: binary MNLI and FEVER-NLI
(DocNLI's dev and test files), ANLI rounds 1-3 and FactCG's synthetic document-level pairs (WiCE's dev
claims are read by ``grounded.load_wice``, beside the bench that tests on its test claims). Each reads
into ``grounded.Pair`` (premise, hypothesis, RTE's two labels), numbered in file order so that a range
or a cap picks the same pairs every time."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from halluscope.bench.datasets import dataset_file
from halluscope.bench.grounded import Pair
from halluscope.errors import DataError

SUPPORTED, NOT_SUPPORTED = "entailment", "not_entailment"  # RTE's labels: UNSUPPORTED is the positive class
NLI_BINARY_FILES = {"mnli": ("mnli/dev.txt", "mnli/test.txt"), "fever": ("fever/dev.txt", "fever/test.txt")}
ANLI_FILES = tuple(f"R{r}/{split}.jsonl" for r in (1, 2, 3) for split in ("dev", "test"))


def _lines(name: str, relative: str, data: str | Path | None) -> Iterator[tuple[Path, int, str]]:
    path = dataset_file(name, relative, data)
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip():
            yield path, number, line


def _json_rows(name: str, files: tuple[str, ...], data: str | Path | None) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each JSON Lines row of the files, with where it stands for an error."""
    for relative in files:
        for path, number, line in _lines(name, relative, data):
            try:
                row = json.loads(line)
            except ValueError as exc:
                raise DataError(f"{path}, line {number}: not JSON ({exc})") from exc
            if not isinstance(row, dict):
                raise DataError(f"{path}, line {number}: not a JSON object")
            yield f"{path}, line {number}", row


def _pairs(rows: Iterator[tuple[str, Any]], read: Callable[[Any], tuple[str, str, str]]) -> list[Pair]:
    """The rows as numbered pairs; a row ``read`` cannot take is a DataError naming its line."""
    pairs = []
    for where, row in rows:
        try:
            premise, hypothesis, label = read(row)
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise DataError(f"{where}: not a pair this dataset holds ({type(exc).__name__}: {exc})") from exc
        pairs.append(Pair(len(pairs), premise, hypothesis, label))
    return pairs


def load_nli_binary(which: str, data: str | Path | None = None) -> list[Pair]:
    """Binary MNLI or FEVER-NLI (``which``), dev then test: tab-separated label, premise, hypothesis."""
    if which not in NLI_BINARY_FILES:
        raise DataError(f"nli_binary holds {', '.join(NLI_BINARY_FILES)}, not {which!r}")

    def rows() -> Iterator[tuple[str, list[str]]]:
        for relative in NLI_BINARY_FILES[which]:
            for path, number, line in _lines("nli_binary", relative, data):
                yield f"{path}, line {number}", line.split("\t")

    def read(cells: list[str]) -> tuple[str, str, str]:
        label, premise, hypothesis = cells
        if label not in (SUPPORTED, NOT_SUPPORTED):
            raise ValueError(f"label {label!r}")
        return premise, hypothesis, label

    return _pairs(rows(), read)


def load_anli(data: str | Path | None = None) -> list[Pair]:
    """ANLI rounds 1-3, dev then test: entailment (e) supported, neutral and contradiction not."""

    def read(row: dict[str, Any]) -> tuple[str, str, str]:
        if row["label"] not in ("e", "n", "c"):
            raise ValueError(f"label {row['label']!r}")
        return str(row["context"]), str(row["hypothesis"]), SUPPORTED if row["label"] == "e" else NOT_SUPPORTED

    return _pairs(_json_rows("anli", ANLI_FILES, data), read)


def load_factcg(data: str | Path | None = None) -> list[Pair]:
    """FactCG's CG2C-Doc pairs: a document and one claim, supported (1) or not (0) by construction."""

    def read(row: dict[str, Any]) -> tuple[str, str, str]:
        [claim] = row["text_b"]
        if row["orig_label"] not in (0, 1):
            raise ValueError(f"orig_label {row['orig_label']!r}")
        return str(row["text_a"]), str(claim), SUPPORTED if row["orig_label"] == 1 else NOT_SUPPORTED

    return _pairs(_json_rows("factcg", ("CG2C_doc.json",), data), read)
