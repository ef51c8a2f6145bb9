"""Files a user opens in a spreadsheet, and files a user exports from one (issue 56, part 5): a cell that
holds a line break is quoted (a lone CR once started a new row in the spreadsheet) and a formula after
one is escaped; a labelled file exported as Excel's "CSV UTF-8" (a byte-order mark), with a cell past
the csv module's 131,072 characters, with old Mac CR line ends or with a repeated column reads right or
is refused in one line; a byte-order mark on `check`'s standard input is not part of the answer."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from halluscope.bench.report import csv_text
from halluscope.errors import ConfigError
from halluscope.labelled import load_labelled

REPO = Path(__file__).resolve().parents[1]
ROW = {"id": "a1", "text": "Paris is in France. It is big.", "labels": "[0, 1]"}


def test_a_cell_with_a_line_break_is_quoted_and_a_formula_after_it_escaped() -> None:
    rows = [{"id": "\r=1+1", "text": "plain"}, {"id": "x\n@SUM(A1)", "text": "y\r\n+2"}]
    text = csv_text(rows)
    parsed = list(csv.reader(io.StringIO(text, newline="")))
    assert parsed == [["id", "text"], ["'\r'=1+1", "plain"], ["x\n'@SUM(A1)", "y\r\n'+2"]]
    assert "\"'\r'=1+1\"" in text  # quoted: a spreadsheet keeps the CR inside the cell
    read = pd.read_csv(io.StringIO(text))
    assert len(read) == 2 and list(read.columns) == ["id", "text"]


def write(path: Path, rows: list[dict[str, str]], encoding: str = "utf-8", line_end: str = "\n") -> Path:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]), lineterminator=line_end)
    writer.writeheader()
    writer.writerows(rows)
    path.write_bytes(buffer.getvalue().encode(encoding))
    return path


def test_excels_csv_utf8_with_its_byte_order_mark_reads_its_first_column(tmp_path: Path) -> None:
    data = load_labelled(write(tmp_path / "bom.csv", [ROW], encoding="utf-8-sig"))
    assert data.rows[0].id == "a1" and data.rows[0].labels == (0, 1)
    jsonl = tmp_path / "bom.jsonl"
    jsonl.write_bytes(("\ufeff" + json.dumps({**ROW, "labels": [0, 1]}) + "\n").encode())
    assert load_labelled(str(jsonl)).rows[0].id == "a1"


def test_a_cell_past_131072_characters_and_cr_line_ends_read(tmp_path: Path) -> None:
    long = {**ROW, "context": "Paris is a city. " * 10_000}  # 170,000 characters
    data = load_labelled(write(tmp_path / "long.csv", [long]))
    assert len(data.rows[0].inputs["context"]) == len(long["context"])
    mac = load_labelled(write(tmp_path / "mac.csv", [ROW, {**ROW, "id": "a2"}], line_end="\r"))
    assert [a.id for a in mac.rows] == ["a1", "a2"]


def test_a_repeated_column_or_a_malformed_row_is_one_line(tmp_path: Path) -> None:
    repeated = tmp_path / "repeated.csv"
    repeated.write_text('id,text,labels,text\na1,"Paris is in France.",[0],"Lyon."\n')
    with pytest.raises(ConfigError, match="the header names 'text' more than once"):
        load_labelled(str(repeated))
    wide = tmp_path / "wide.csv"
    wide.write_text('id,text,labels\na1,"Paris is in France.",[0],extra\n')
    with pytest.raises(ConfigError, match=r"line 2: 4 cells under a header of 3"):
        load_labelled(str(wide))
    broken = tmp_path / "broken.csv"
    broken.write_text('id,text,labels\na1,"Paris\x00 is",[0]\n')
    with pytest.raises(ConfigError):
        load_labelled(str(broken))


def test_a_byte_order_mark_on_checks_standard_input_is_not_part_of_the_answer() -> None:
    """`check --threshold 2` flags nothing, and prints the answer's first unit as it read it."""
    from halluscope.readers import read_file

    script = "import sys; from halluscope.readers import read_file; sys.stdout.write(repr(read_file('-', '--file')))"
    done = subprocess.run(
        [sys.executable, "-c", script], input="\ufeffParis is in France.".encode(), capture_output=True, cwd=REPO
    )
    assert done.stdout.decode() == "'Paris is in France.'"
    assert read_file  # the CLI's `check` reads its standard input through read_file
