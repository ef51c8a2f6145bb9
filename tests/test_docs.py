"""Every published figure comes from a committed record: each record under docs/results says how its runs
were made, each results page equals its template rendered from the records today
(benchmarks/render_docs.py), its verdicts are the ones benchmarks/verdicts.py decides from the records,
and a template's prose holds no measurement typed by hand. README.md and the prose documents are plain
Markdown that link to the results pages for figures; the README's demo line is checked against the
demo's record here and against the cold demo by .ci/run."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from halluscope.bench.provenance import envelope
from tests.scripts import load_script

REPO = Path(__file__).resolve().parents[1]
PROSE = ("README.md", "docs/usage.md", "docs/gateway.md", "docs/models.md", "docs/scale.md", "docs/choosing.md")

# Number literals a results template's prose may hold, outside what it prints from a record: settings (a
# threshold, a sample count, a margin, chance), sizes and ranges of data, section and issue numbers of a
# citation. A measurement is never among them: it is printed from its record.
ALLOWED_EVERYWHERE = frozenset(str(n) for n in (*range(0, 11), 20, 50, 80, 100)) | {"0.1", "0.2", "0.5", "0.8", "0.9"}
ALLOWED = {
    "batching.md.j2": {"32", "64", "127.0.0.1"},  # LangGraph's default fan-out; the run's bound; the stub's host
    "bench-overhead.md.j2": {"238", "21", "1,000"},  # WikiBio's passages x (1 + 20 samples); resamples
    "calibrated-risk.md.j2": {"22"},  # the issue
    "clue.md.j2": {"0.99", "13.8", "5.3", "0.6"},  # the merge threshold; -ln(1e-6); the paper's section; theta_h
    "delimit.md.j2": {"40"},  # the passages run
    "fewl.md.j2": {"25", "5.1", "817"},  # IW/CO answers asked; the paper's section; TruthfulQA's questions
    "grounded.md.j2": {"35", "500", "300", "238", "1,908"},  # the issue; an HTTP status; chunk words; dataset size
    "one-call.md.j2": {"277"},  # RTE's validation pairs
    "phr.md.j2": {"500", "200", "3.2", "116", "0.05", "0.75"},  # N - n; max tokens; section; query length; epsilons
    "checker-fit.md.j2": {"72", "16", "512", "300"},  # the issue; the batch size, the window, a chunk's words
    "probes.md.j2": {"2024", "2406.15927"},  # the citation
    "semantic-entropy.md.j2": {"3,000", "18"},  # the protocol's questions; calls a claim
    "token-logprob.md.j2": {"36"},  # the issue
    "wikibio-selfcheck-fibe.md.j2": {"1.0"},  # FIBE's score rule
}
NUMBER = re.compile(r"(?<![\w.\-/:#@])(\d+(?:[.,]\d+)*)(?![\w\-/%]|\.\d)")  # a full stop may end it
# Number literals a prose document may hold: settings, sizes, protocol facts, citations, HTTP statuses;
# a measurement is linked to its results page instead (the README's demo line is checked against its record)
PROSE_ALLOWED = {
    "README.md": {"127.0.0.1", "2024", "3.11", "74"},  # loopback; a citation; Python; the demo's calls (its record)
    "docs/usage.md": {"10,000", "12", "127.0.0.1", "2024", "2406.15927", "30", "40", "400", "75", "8000"},
    "docs/gateway.md": {
        "1,000",
        "10,000",
        "120",
        "127.0.0.1",
        "16",
        "200",
        "400",
        "401",
        "403",
        "413",
        "415",
        "421",
        "429",
        "504",
        "529",
        "60",
    },  # fmt: skip
    "docs/models.md": {
        "0.05",
        "0.3.36",
        "1,117,320,768",
        "1.74",
        "127.0.0.1",
        "40",
        "4096",
        "491,400,064",
        "98,362,432",
    },  # fmt: skip  # sampling defaults, a version, file sizes
    "docs/scale.md": {"100,000", "30"},
    "docs/choosing.md": set(),
}


def load(name: str) -> Any:
    return load_script(f"benchmarks/{name}.py")


def prose(template: str) -> str:
    """A template's own words: what it prints from records, code, inline code and link targets taken out."""
    for pattern in (r"\{#.*?#\}", r"\{\{.*?\}\}", r"\{%.*?%\}", r"```.*?```", r"`[^`\n]*`", r"\]\([^)]*\)"):
        template = re.sub(pattern, " ", template, flags=re.S)
    return template


def typed_measurements(name: str, template: str) -> list[str]:
    allowed = ALLOWED_EVERYWHERE | ALLOWED.get(name, set())
    return [m.group(1) for m in NUMBER.finditer(prose(template)) if m.group(1) not in allowed]


def test_every_record_says_how_it_was_made() -> None:
    records = load("records")
    found = [p for name, record in records.all_records().items() for p in records.problems(name, record, commits=False)]
    assert found == []
    assert len(records.all_records()) >= 10


def test_every_records_commit_is_in_the_history() -> None:
    records = load("records")
    why = records.history()
    if why is not None:
        pytest.skip(f"no history to read the records' commits from: {why}")
    found = [p for name, record in records.all_records().items() for p in records.problems(name, record)]
    assert found == []


def test_every_results_page_equals_its_template_rendered_from_its_records() -> None:
    """A record changed without its pages fails here: run `.venv/bin/python benchmarks/render_docs.py` and
    commit what it writes."""
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "render_docs.py"), "--check"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-1000:]


def test_every_verdict_is_the_one_the_records_give() -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "verdicts.py"), "--check"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-1000:]


def test_only_results_pages_are_rendered_and_prose_documents_are_plain() -> None:
    render = load("render_docs")
    rendered = {render.target(t).relative_to(REPO).as_posix() for t in render.templates()}
    pages = {p.relative_to(REPO).as_posix() for p in (REPO / "docs" / "results").glob("*.md")}
    assert pages == rendered and all(page.startswith("docs/results/") for page in rendered)
    for page in rendered:
        assert (REPO / page).read_text(encoding="utf-8").startswith("<!-- Rendered by benchmarks/render_docs.py")
    for document in PROSE:
        text = (REPO / document).read_text(encoding="utf-8")
        assert not text.startswith("<!-- Rendered") and "{{ " not in text and "{%" not in text, document


def test_no_results_template_holds_a_measurement_typed_by_hand() -> None:
    render = load("render_docs")
    typed = {t.name: typed_measurements(t.name, t.read_text(encoding="utf-8")) for t in render.templates()}
    assert {name: found for name, found in typed.items() if found} == {}


def test_no_prose_document_holds_a_measurement_typed_by_hand() -> None:
    typed = {
        document: [
            m.group(1)
            for m in NUMBER.finditer(prose((REPO / document).read_text(encoding="utf-8")))
            if m.group(1) not in ALLOWED_EVERYWHERE | PROSE_ALLOWED[document]
        ]
        for document in PROSE
    }
    assert {document: found for document, found in typed.items() if found} == {}


def test_a_measurement_typed_into_a_template_is_caught() -> None:
    """The test above can fail: the same words with a figure typed in are caught, the figure printed from a
    record is not."""
    typed = "The stack reaches AUC-ROC 73.4 held out, against {{ run.auc_roc | f(1) }} for the unigram."
    assert typed_measurements("probes.md.j2", typed) == ["73.4"]
    assert typed_measurements("probes.md.j2", "passages 0-119, 3 samples, at p >= 0.5") == []
    assert typed_measurements("probes.md.j2", "it found 7 of 12 probes") == ["12"]
    assert typed_measurements("probes.md.j2", "an AUC-ROC of 97.3.") == ["97.3"]  # a figure that ends a sentence


def test_the_readmes_demo_line_is_the_demo_record() -> None:
    demo = json.loads((REPO / "docs" / "results" / "demo.json").read_text(encoding="utf-8"))["runs"]
    run = demo["qwen2.5-coder-1.5b"]
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    evidence = run["evidence"]
    assert f"({evidence['hits']} of {evidence['biographies']} on the default model)" in readme
    assert f"({run['calls']} model calls)" in readme
    assert f"About\n{round(run['seconds'] / 60)} minutes on 2 cores" in readme


def test_a_claim_is_printed_from_its_verdict_never_decided_in_a_template() -> None:
    render = load("render_docs")
    with pytest.raises(ValueError, match="which benchmarks/verdicts.py has not written"):
        render.verdict("grounded", "a claim nobody decided")
    assert render.fixed(84.2779, 1) == "84.3" and render.thousands(42697) == "42,697"
    assert render.interval([79.31, 88.94], 1) == "[79.3, 88.9]" and render.minutes(640.5) == "10.7"
    decided = {t.name: decisions(t.read_text(encoding="utf-8")) for t in render.templates()}
    assert {name: found for name, found in decided.items() if found} == {}


ORDERING = {"lt", "gt", "lteq", "gteq"}  # a comparison of two figures decides which is more
VERDICT_WORDS = re.compile(r"\b(holds?|better|worse|beats?|met|ahead|behind|wins?|useful|outperforms?)\b", re.I)


def decisions(source: str) -> list[str]:
    """What a template decides rather than prints: an ordering comparison of values, or a verdict word
    chosen by a condition on values (``"holds" if ordered else ...``, ``{% if a == b %}met{% endif %}``).
    A section shown where its record has the run (``{% if on_qnli %}``) decides nothing and may say anything."""
    from jinja2 import Environment, nodes

    tree = Environment().parse(source)
    found = [f"line {c.lineno}: a comparison" for c in tree.find_all(nodes.Compare) if {o.op for o in c.ops} & ORDERING]
    on_values = [b for b in tree.find_all(nodes.If) if any(_compares_values(c) for c in _compares(b.test))]
    chosen = [*tree.find_all(nodes.CondExpr), *on_values]
    for branch in chosen:
        texts = [n.value for n in branch.find_all(nodes.Const) if isinstance(n.value, str)]
        texts += [n.data for n in branch.find_all(nodes.TemplateData)]
        found += [f"line {branch.lineno}: {t.strip()[:40]!r} chosen" for t in texts if VERDICT_WORDS.search(t)]
    return found


def _compares(test: Any) -> list[Any]:
    from jinja2 import nodes

    return [test] * isinstance(test, nodes.Compare) + list(test.find_all(nodes.Compare))


def _compares_values(compare: Any) -> bool:
    """A comparison of values (a < b, a == b), not a record's membership test (``"1.5b" in judges``)."""
    return any(o.op not in ("in", "notin") for o in compare.ops)


def test_a_decision_in_a_template_is_caught() -> None:
    """The check above can fail: clue.md.j2 as it stood, and the operating point token-logprob.md.j2 chose."""
    ordered = '{%- set ordered = m.D_R < m.D_L %}{{ "The paper\'s ordering holds" if ordered else "it does not hold" }}'
    assert decisions(ordered) == [
        "line 1: a comparison",
        'line 1: "The paper\'s ordering holds" chosen',
        "line 1: 'it does not hold' chosen",
    ]
    assert decisions("{% if run.recall < 0.05 %}none useful{% else %}{{ run.p }}{% endif %}") == [
        "line 1: a comparison",
        "line 1: 'none useful' chosen",
    ]
    assert (
        decisions("{{ verdict('clue', 'x') }} over {{ runs | length }} runs{% if not loop.last %}, {% endif %}") == []
    )


def test_a_records_commit_and_command_are_checked_against_the_repository() -> None:
    """The provenance check can fail: a commit not in the history, a script that is not here, a flag the
    script does not define, a halluscope command the CLI refuses."""
    records = load("records")
    run = {"command": "benchmarks/injection_flip.py --model local:x", "commit": "0" * 12, "recorded": True}
    run |= {"models": ["local:x"], "items": 1, "calls": 1, "cache_hits": 0, "prompt_tokens": 1, "seconds": 1.0}
    assert records.problems("x", {"runs": {"a": run}}) == [
        "x / a: commit 000000000000 is not in this repository's history"
    ]
    assert records.command_problem("benchmarks/injection_flip.py --model m --no-such-flag") == (
        "passes --no-such-flag, which benchmarks/injection_flip.py does not define"
    )
    assert "not in the repository" in str(records.command_problem("benchmarks/nothing_here.py --model m"))
    assert "refused by the CLI" in str(records.command_problem("halluscope bench grounded --no-such-flag"))
    assert records.command_problem("bash -c 'halluscope demo --json > out/demo.json'") is None


def assembly(source: str) -> list[str]:
    """What a template assembles rather than prints: a list or dict it builds (``.append``, ``.update``),
    or a record key it composes (``ck["fit on " ~ on]``, ``("qnli test, " ~ on) in ck``). The rows a page
    prints are prepared in benchmarks/pages.py; a template loops over them."""
    from jinja2 import Environment, nodes

    tree = Environment().parse(source)
    found = [
        f"line {c.lineno}: builds with .{c.node.attr}"
        for c in tree.find_all(nodes.Call)
        if isinstance(c.node, nodes.Getattr) and c.node.attr in ("append", "extend", "update", "insert")
    ]

    def composed(node: Any) -> bool:
        return isinstance(node, nodes.Concat) or any(True for _ in node.find_all(nodes.Concat))

    found += [f"line {g.lineno}: composes a key" for g in tree.find_all(nodes.Getitem) if composed(g.arg)]
    found += [
        f"line {c.lineno}: composes a key"
        for c in tree.find_all(nodes.Compare)
        if any(o.op in ("in", "notin") for o in c.ops) and composed(c.expr)
    ]
    found += [
        f"line {c.lineno}: composes a key"
        for c in tree.find_all(nodes.Call)
        if isinstance(c.node, nodes.Getattr) and c.node.attr == "get" and any(composed(a) for a in c.args)
    ]
    return found


def test_no_template_builds_its_rows_or_composes_a_record_key() -> None:
    assembled = {
        path.name: assembly(path.read_text(encoding="utf-8"))
        for path in sorted((REPO / "docs" / "templates").rglob("*.j2"))
    }
    assert {name: found for name, found in assembled.items() if found} == {}
    caught = assembly(
        "{%- set fitted_on = [] -%}{% for label in ck %}{% set _ = fitted_on.append(label[7:]) %}{% endfor -%}"
        '{{ ck["fit on " ~ fitted_on[0]].command }}{% if ("qnli test, " ~ on) in ck %}x{% endif %}'
    )
    assert caught == ["line 1: builds with .append", "line 1: composes a key", "line 1: composes a key"]


def computed(source: str) -> list[str]:
    """Where a template computes a figure (``a / b``, ``100 * x``, ``a - b``, ``n + 1``) instead of printing
    one benchmarks/pages.py prepared or a filter formats (``percent``, ``hours``, ``per_item``)."""
    from jinja2 import Environment, nodes

    arithmetic = (nodes.Add, nodes.Sub, nodes.Mul, nodes.Div, nodes.FloorDiv, nodes.Mod, nodes.Pow)
    tree = Environment().parse(source)
    return [f"line {n.lineno}: {type(n).__name__.lower()}" for n in tree.find_all(arithmetic)]


def test_no_template_computes_a_figure() -> None:
    found = {
        path.name: computed(path.read_text(encoding="utf-8"))
        for path in sorted((REPO / "docs" / "templates").rglob("*.j2"))
    }
    assert {name: lines for name, lines in found.items() if lines} == {}
    caught = computed('{{ (run.seconds / run["items"]) | f(2) }} {{ (100 * x) | f(0) }}%\n{{ a - b }}{{ ns.n + 1 }}')
    assert caught == ["line 1: div", "line 1: mul", "line 2: sub", "line 2: add"]
    assert computed("{{ run | per_item | f(2) }} {{ x | percent(0) }}% {{ rows[-1].n }}") == []


def test_a_run_that_made_calls_says_what_they_sent() -> None:
    """Twelve runs recorded 0 prompt tokens for hundreds of calls: the record check refuses that, a
    script's envelope turns an uncounted 0 into None with why, and every script passes its count."""
    records = load("records")
    run = {"command": "benchmarks/injection_flip.py --model local:x", "commit": "0" * 12, "recorded": True}
    run |= {"models": ["local:x"], "items": 1, "calls": 3, "cache_hits": 0, "prompt_tokens": 0, "seconds": 1.0}
    assert records.problems("x", {"runs": {"a": run}}, commits=False) == [
        "x / a: 3 calls sent 0 prompt tokens: record what they sent, or None with why in its 'unknown'"
    ]
    made = envelope(models=["m"], items=1, item="answer", calls=3, seconds=1.0, prompt_tokens=0)
    assert made["prompt_tokens"] is None and "no token usage" in made["unknown"]["prompt_tokens"]
    from halluscope.bench.provenance import SCRIPT_STARTED

    # written at a script's end, its load is the one the script started under, not that of its own work
    assert {k: made["provenance"][k] for k in ("load", "started", "commit")} == SCRIPT_STARTED
    assert envelope(models=[], items=1, item="answer", calls=0, seconds=1.0, prompt_tokens=0)["prompt_tokens"] == 0
    silent = [
        f"{path.name}:{call.lineno}"
        for path in sorted((REPO / "benchmarks").glob("*.py")) + [REPO / "halluscope" / "tune" / "choose.py"]
        for call in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(call, ast.Call)
        and getattr(call.func, "id", None) == "envelope"
        and "prompt_tokens" not in {k.arg for k in call.keywords}
    ]
    assert not silent, f"envelope() without the prompt tokens the run sent: {silent}"


def test_a_speed_ratio_divides_only_two_runs_of_one_commit_each_made_alone() -> None:
    """'139 times less time a pair' divided a checker run by a judge run of other code made under load."""
    verdicts = load("verdicts")
    fast = {"commit": "abc", "load": 0.2, "seconds": 10.0, "items": 100}
    slow = {"commit": "abc", "load": 0.4, "seconds": 400.0, "items": 100}
    per_item = verdicts.seconds_a_pair
    held = verdicts.speed_ratio(fast, slow, per_item, "20 times faster", "{ratio} times less time")
    assert held["verdict"] == "holds" and held["ratio"] == 40.0
    assert verdicts.speed_ratio(fast, slow, per_item, "c", "{ratio}", goal=50)["verdict"] == "falls short"
    for other, why in (
        ({**slow, "commit": "def"}, "different code"),
        ({**slow, "load": 1.7}, "under load"),
        ({k: v for k, v in slow.items() if k != "load"}, "recorded no load"),
    ):
        found = verdicts.speed_ratio(fast, other, per_item, "20 times faster", "{ratio} times less time")
        assert found["verdict"] == "not decided" and why in found["text"] and "40.0 times less time" in found["text"]


def test_a_qnli_verdict_decides_only_on_runs_of_the_current_split() -> None:
    """QNLI's earlier split by question alone let a test sentence sit in the fit part too: a verdict that
    pairs a run lacking the current split's mark decides nothing, whatever its interval shows."""
    verdicts = load("verdicts")
    labels = ["not_entailment" if i % 2 else "entailment" for i in range(40)]
    rows = [{"id": f"pair {i}", "labels": [label], "scores": {"hypothesis": float(i % 2)}} for i, label in
            enumerate(labels)]  # fmt: skip
    mark = {"qnli_parts": "by question and sentence"}
    current = {"items": 40, "rows": rows, "params": mark}
    guessing = [{**r, "scores": {"hypothesis": 0.5}} for r in rows]
    records = {
        "a": {"runs": {"fast": current, "earlier": {**current, "params": {}}}},
        "b": {"runs": {"judge": {**current, "rows": guessing}}},
    }
    decided = verdicts.on_qnli(("a", "fast"), ("b", "judge"), "the checker", "the judge", 0.0)(records.__getitem__)
    assert decided["verdict"] == "met"
    earlier = verdicts.on_qnli(("a", "earlier"), ("b", "judge"), "the checker", "the judge", 0.0)(records.__getitem__)
    assert earlier["verdict"] == "not decided" and "earlier split" in earlier["text"]
