"""A user's own labelled answers, the data `bench mine`, `calibrate --data` and `choose` score: a CSV
file, a JSON Lines file, a pandas DataFrame or a LangSmith dataset, one row an answer.

A row holds the methods' inputs as columns, under the names a user knows them by (``text``, ``question``,
``context``, ``samples``, ``sentences``, ``logprobs``, ...; a list as a JSON array in a CSV cell), and
either ``labels`` (a JSON list of 0/1, one per sentence of ``text``: 1 = not supported, hallucinated) or
``label`` (one 0/1 for the whole answer, compared with its riskiest unit's score); ``id`` is optional, and
so is ``group``: answers that are not independent of one another (several answers to one question)
share a group, and are then resampled and held out together.
Sentences are split as every method splits them (``text.sentences``), so a label list of the wrong
length is refused here, naming the row, not after an hour of scoring.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from halluscope.errors import ConfigError
from halluscope.readers import read_file
from halluscope.text import sentences as split_sentences

LABEL_COLUMNS = ("label", "labels")
LIST_COLUMNS = ("context", "samples", "sentences", "logprobs", "answers", "outputs", "references")
TEXT_COLUMNS = ("text", "question", "context")  # a number read into one of them is the text it was written as
READ_AS_JSON = (*LIST_COLUMNS, "labels")  # CSV cells decoded as JSON (in JSON Lines they are JSON already)


@dataclass(frozen=True)
class LabelledAnswer:
    """One labelled answer: its inputs by the user's column names, and its labels."""

    id: str
    inputs: dict[str, Any]
    labels: tuple[int, ...] | None = None  # one per sentence of the text: 1 = hallucinated
    label: int | None = None  # the whole answer: 1 = it holds a hallucination
    group: str | None = None  # answers that are not independent (one question's): resampled and held out together

    @property
    def answer_label(self) -> int:
        """The whole answer's label: given, or 1 when any sentence is labelled 1."""
        return self.label if self.label is not None else int(any(self.labels or ()))

    @property
    def units(self) -> list[str] | None:
        """The sentences its ``labels`` label (given as ``sentences``, or split from ``text``)."""
        if self.labels is None:
            return None
        given = self.inputs.get("sentences")
        return list(given) if given is not None else split_sentences(str(self.inputs.get("text", "")))


@dataclass(frozen=True)
class LabelledData:
    """A user's labelled answers and where they came from (what errors and results name)."""

    source: str
    rows: tuple[LabelledAnswer, ...]

    @property
    def columns(self) -> set[str]:
        return {name for row in self.rows for name in row.inputs}

    @property
    def per_sentence(self) -> bool:
        """Whether every row labels its sentences (sentence-level metrics are then measured too)."""
        return all(row.labels is not None for row in self.rows)


def load_labelled(data: Any, *, limit: int | None = None) -> LabelledData:
    """A CSV (``.csv``) or JSON Lines (``.jsonl``/``.json``) file's path, a pandas DataFrame, a list of
    row dicts, or a LangSmith dataset (``langsmith:NAME``, read with a langsmith Client from the
    environment: each example's inputs and outputs together are the row)."""
    if isinstance(data, str) and data.startswith("langsmith:"):
        return _from_records(data, _langsmith_rows(data.removeprefix("langsmith:")), limit)
    if isinstance(data, str | Path):
        path = str(data)
        if not path.endswith((".csv", ".jsonl", ".json")):
            raise ConfigError(f"data {path}: give a .csv or .jsonl file (one row an answer)", settings=("data",))
        text = read_file(path, "data")
        if path.endswith(".csv"):
            return _from_records(path, _csv_rows(path, text), limit, cells_are_text=True)
        return _from_records(path, [row for _, row in jsonl_rows(path, text)], limit)
    if hasattr(data, "to_dict") and hasattr(data, "columns"):  # a pandas DataFrame
        # pd.read_csv leaves a list column's JSON as text: read it as the CSV reader does
        return _from_records("the DataFrame", data.to_dict(orient="records"), limit, cells_are_text=True)
    if isinstance(data, Sequence) and all(isinstance(row, Mapping) for row in data):
        return _from_records("the rows", list(data), limit)
    raise ConfigError(
        f"labelled data is a .csv or .jsonl path, a pandas DataFrame, a list of dicts or 'langsmith:NAME', "
        f"got {type(data).__name__}"
    )


CSV_CELL_LIMIT = 64 * 1024 * 1024  # characters of one cell: a whole Wikipedia article is far below it


def _csv_rows(path: str, text: str) -> list[dict[str, Any]]:
    """A CSV's rows by column name: any line ends (a lone CR of an old Mac export included), cells up to
    CSV_CELL_LIMIT characters (the csv module's default is 131,072), and a malformed file or a repeated
    column name refused in one line naming it."""
    csv.field_size_limit(max(csv.field_size_limit(), CSV_CELL_LIMIT))
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader, None)
        if not header:
            raise ConfigError(f"data {path} has no header row", settings=("data",))
        repeated = sorted({name for name in header if header.count(name) > 1})
        if repeated:
            raise ConfigError(
                f"data {path}: the header names {', '.join(map(repr, repeated))} more than once", settings=("data",)
            )
        rows = []
        for cells in reader:
            if len(cells) > len(header):
                raise ConfigError(
                    f"data {path}, line {reader.line_num}: {len(cells)} cells under a header of {len(header)}",
                    settings=("data",),
                )
            if cells:  # a row's missing cells are missing values, as csv.DictReader reads them
                rows.append(dict(zip(header, [*cells, *[None] * (len(header) - len(cells))], strict=True)))
    except csv.Error as exc:
        raise ConfigError(
            f"data {path}, line {reader.line_num}: not readable as CSV ({exc})", settings=("data",)
        ) from None
    return rows


def jsonl_rows(path: str, text: str) -> list[tuple[int, dict[str, Any]]]:
    """A JSON Lines file's objects with their line numbers (blank lines skipped); anything else on a
    line is one error naming it."""
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise ConfigError(f"{path}, line {number}: not a JSON object ({exc})") from exc
        if not isinstance(row, dict):
            raise ConfigError(f"{path}, line {number}: a row is a JSON object, got {type(row).__name__}")
        rows.append((number, row))
    return rows


def _langsmith_rows(name: str) -> list[dict[str, Any]]:
    try:
        from langsmith import Client
    except ImportError as exc:  # pragma: no cover - langsmith comes with langchain-core
        raise ConfigError("reading a LangSmith dataset needs langsmith: pip install langsmith") from exc
    examples = Client().list_examples(dataset_name=name)
    return [{"id": str(e.id), **(e.inputs or {}), **(e.outputs or {})} for e in examples]


def _from_records(
    source: str, records: Iterable[Mapping[str, Any]], limit: int | None, cells_are_text: bool = False
) -> LabelledData:
    rows = []
    for number, record in enumerate(records, start=1):
        if limit is not None and len(rows) >= limit:
            break
        rows.append(_row(source, number, record, cells_are_text))
    if not rows:
        raise ConfigError(f"{source} holds no rows")
    ids = [row.id for row in rows]
    if len(set(ids)) != len(ids):
        twice = next(i for i in ids if ids.count(i) > 1)
        raise ConfigError(f"{source}: id {twice!r} names two rows; ids must be unique")
    return LabelledData(source, tuple(rows))


def _row(source: str, number: int, record: Mapping[str, Any], cells_are_text: bool) -> LabelledAnswer:
    where = f"{source}, row {number}"
    values: dict[str, Any] = {}
    for column, value in record.items():
        if _missing(value):
            continue
        if hasattr(value, "item") and not hasattr(value, "__len__"):  # a DataFrame's numpy scalar
            value = value.item()
        if column in TEXT_COLUMNS and isinstance(value, int | float) and not isinstance(value, bool):
            value = str(value)  # pd.read_csv reads a context '1990' as the number 1990: it is a text
        if cells_are_text and column in READ_AS_JSON and isinstance(value, str):
            value = _json_cell(where, column, value)
        values[str(column).strip()] = value
    labels = _labels(where, values.pop("labels", None))
    label = _label(where, values.pop("label", None))
    if labels is None and label is None:
        raise ConfigError(f"{where}: no label: give 'label' (0/1 for the answer) or 'labels' (a JSON list of 0/1)")
    row_id = str(values.pop("id", number - 1))
    group = values.pop("group", None)
    row = LabelledAnswer(row_id, values, labels, label, None if group is None else str(group))
    if labels is not None:
        if "text" not in values and "sentences" not in values:
            raise ConfigError(f"{where}, column labels: label a 'text' (or 'sentences') column's sentences")
        units = row.units or []
        if len(units) != len(labels):
            raise ConfigError(
                f"{where}, column labels: {len(labels)} labels for {len(units)} sentences "
                f"({'; '.join(repr(u[:40]) for u in units[:4])}{' ...' if len(units) > 4 else ''})"
            )
        if label is not None and label != int(any(labels)):
            raise ConfigError(f"{where}: label {label} disagrees with labels {list(labels)}")
    return row


def _missing(value: Any) -> bool:
    """An empty CSV cell, or a DataFrame's NaN: the column is absent from this row."""
    return (
        value is None
        or (isinstance(value, str) and not value.strip())
        or (isinstance(value, float) and math.isnan(value))
    )


def _json_cell(where: str, column: str, value: str) -> Any:
    """A list column's text cell read as its JSON array; a context cell that is not one ('1990', a
    paragraph) is one document, kept as written."""
    try:
        found = json.loads(value)
    except (json.JSONDecodeError, RecursionError):
        found = None
    if isinstance(found, list):
        return found
    if column == "context":  # one document, as the methods take it
        return value
    raise ConfigError(f"{where}, column {column}: not a JSON array: {value[:60]!r}")


def _zero_one(where: str, value: Any) -> int:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int | float) and value in (0, 1):
        return int(value)
    if isinstance(value, str) and value.strip() in ("0", "1"):
        return int(value.strip())
    raise ConfigError(f"{where}: a label is 0 (supported) or 1 (hallucinated), got {value!r}")


def _label(where: str, value: Any) -> int | None:
    return None if value is None else _zero_one(f"{where}, column label", value)


def _labels(where: str, value: Any) -> tuple[int, ...] | None:
    if value is None:
        return None
    if hasattr(value, "tolist"):  # a DataFrame cell holding an array
        value = value.tolist()
    if isinstance(value, str):
        value = _json_cell(where, "labels", value)
    if not isinstance(value, list) or not value:
        raise ConfigError(f"{where}, column labels: a JSON list of 0/1, one per sentence, got {value!r}")
    return tuple(_zero_one(f"{where}, column labels", v) for v in value)
