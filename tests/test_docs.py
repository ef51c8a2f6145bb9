"""Every published figure comes from a committed record: each record under docs/results says how its runs
were made, each document rendered from a template equals that template rendered from the records today
(benchmarks/render_docs.py), and every results page and README.md is such a document."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.scripts import load_script

REPO = Path(__file__).resolve().parents[1]
RENDERED = ("README.md", "docs/usage.md", "docs/gateway.md", "docs/models.md", "docs/scale.md", "docs/choosing.md")


def load(name: str) -> Any:
    return load_script(f"benchmarks/{name}.py")


def test_every_record_says_how_it_was_made() -> None:
    records = load("records")
    found = [p for name, record in records.all_records().items() for p in records.problems(name, record)]
    assert found == []
    assert len(records.all_records()) >= 10


def test_every_document_equals_its_template_rendered_from_its_records() -> None:
    """A figure typed into a document, or a record changed without its documents, fails here: run
    `.venv/bin/python benchmarks/render_docs.py` and commit what it writes."""
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "render_docs.py"), "--check"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-1000:]


def test_every_results_page_and_the_front_pages_are_rendered() -> None:
    render = load("render_docs")
    rendered = {render.target(t).relative_to(REPO).as_posix() for t in render.templates()}
    pages = {p.relative_to(REPO).as_posix() for p in (REPO / "docs" / "results").glob("*.md")}
    assert pages <= rendered and set(RENDERED) <= rendered
    for page in rendered:
        assert (REPO / page).read_text(encoding="utf-8").startswith("<!-- Rendered by benchmarks/render_docs.py")


def test_a_claim_its_records_no_longer_show_fails_to_render() -> None:
    render = load("render_docs")
    assert render.holds(True, "a claim") == ""
    with pytest.raises(ValueError, match="claims 'the stack wins', which its records no longer show"):
        render.holds(False, "the stack wins")
    with pytest.raises(ValueError, match="does not hold"):
        render.fixed(None)
    assert render.fixed(84.2779, 1) == "84.3" and render.thousands(42697) == "42,697"
    assert render.interval([79.31, 88.94], 1) == "[79.3, 88.9]" and render.minutes(640.5) == "10.7"
