"""Render the results pages (docs/results/*.md) from their templates and the committed records: every
published figure comes from a JSON record under docs/results/, never typed by hand. README.md and the
prose documents are plain Markdown that link to these pages for figures.

    .venv/bin/python benchmarks/render_docs.py            # write every rendered document
    .venv/bin/python benchmarks/render_docs.py --check    # exit 1 naming each document that differs

A template is ``docs/templates/results/X.md.j2`` (Jinja2) and renders ``docs/results/X.md``. In a
template, ``record("grounded")`` is docs/results/grounded.json (``record("peers/grounded-rte")`` its
peers/ file), and the filters format its values: ``f(1)`` fixed decimals, ``n`` thousands separators,
``ci(1)`` an interval ``[a, b]``, ``minutes`` / ``hours`` seconds as minutes / hours, ``percent`` a share
as a percentage, ``gib`` MiB as GiB, ``ms`` seconds as milliseconds, ``seconds_of_ms`` the reverse,
``per_item`` a run's field over its items, ``checks`` its calls and cache hits: a template computes no
figure (tests/test_docs.py). ``how_made(name)`` is what a document says of a record's runs that a
run did not record itself: transcribed from an earlier document (``recorded`` false), given their
command and commit afterwards (``backfilled``), or made from a dirty checkout. ``verdict(name, claim)``
prints the verdict ``benchmarks/verdicts.py`` decided and wrote into the record: templates decide none.
``page(name)`` is the rows a page prints, prepared in ``benchmarks/pages.py`` (which runs a table holds,
derived figures), and ``rows | by("check")`` looks a record's rows up by a field: a template builds no
list and composes no record key (tests/test_docs.py).
A record's ``runs`` say how each was made: ``benchmarks/records.py check`` checks them.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pages import PAGES  # noqa: E402 - beside this script: the rows each page prints
from verdicts import rows_paired, units_of  # noqa: E402 - beside this script: one reading of a run's rows

ROOT = Path(__file__).resolve().parents[1]
TEMPLATES = ROOT / "docs" / "templates"
RESULTS = ROOT / "docs" / "results"
BANNER = (
    "<!-- Rendered by benchmarks/render_docs.py from {template} and docs/results/*.json: edit those, not this file. -->"
)


def target(template: Path) -> Path:
    """Where a template renders to: docs/results/X.md for docs/templates/results/X.md.j2."""
    return ROOT / "docs" / template.relative_to(TEMPLATES).with_suffix("")  # drop .j2


def templates() -> list[Path]:
    return sorted(TEMPLATES.rglob("*.j2"))


def load_record(name: str) -> Any:
    """docs/results/NAME.json, as plain JSON values."""
    path = RESULTS / f"{name}.json"
    if not path.is_file():
        raise FileNotFoundError(f"a template asks for record {name!r}, but {path.relative_to(ROOT)} does not exist")
    return json.loads(path.read_text(encoding="utf-8"))


def fixed(value: Any, digits: int = 1) -> str:
    """A number with ``digits`` decimals; a missing value is an error, not a blank."""
    if value is None:
        raise ValueError("a template formats a figure its record does not hold (None)")
    return f"{float(value):.{digits}f}"


def signed(value: Any, digits: int = 1) -> str:
    """A difference with its sign (``+2.5``, ``-0.4``), as ``fixed`` refuses a missing one."""
    fixed(value, digits)  # refuses a missing one
    return f"{float(value):+.{digits}f}"


def thousands(value: Any) -> str:
    if value is None:
        raise ValueError("a template formats a count its record does not hold (None)")
    return f"{int(round(float(value))):,}"


def interval(pair: Iterable[Any], digits: int = 1) -> str:
    low, high = list(pair)
    return f"[{fixed(low, digits)}, {fixed(high, digits)}]"


def minutes(seconds: Any, digits: int = 1) -> str:
    return fixed(float(seconds) / 60, digits)


def percent(share: Any, digits: int = 1) -> str:
    """A share (0 to 1) as a percentage's number."""
    return fixed(100 * float(share), digits)


def hours(seconds: Any, digits: int = 1) -> str:
    return fixed(float(seconds) / 3600, digits)


def gib(mib: Any, digits: int = 1) -> str:
    return fixed(float(mib) / 1024, digits)


def ms(seconds: Any, digits: int = 0) -> str:
    """Seconds as milliseconds."""
    return fixed(1000 * float(seconds), digits)


def seconds_of_ms(milliseconds: Any, digits: int = 1) -> str:
    return fixed(float(milliseconds) / 1000, digits)


def per_item(run: dict[str, Any], field: str = "seconds") -> float:
    """A run's ``field`` (its seconds, calls) over the items it scored."""
    return float(run[field]) / run["items"]


def checks(run: dict[str, Any]) -> int:
    """The checks a run made: its calls sent and those answered from the cache."""
    return int(run["calls"]) + int(run["cache_hits"] or 0)


def per_item_minutes(run: dict[str, Any], digits: int = 2) -> str:
    """A run's minutes per item: its wall seconds over its items where it recorded them, else the minutes per
    item its transcribed document gave."""
    if run.get("seconds"):
        return fixed(float(run["seconds"]) / run["items"] / 60, digits)
    return fixed(run["minutes_per_passage"], digits)


def accurate(run: dict[str, Any]) -> int:
    """How many of a recorded WikiBio run's sentences are labelled accurate (from its kept rows)."""
    return units_of(run["rows"])[1].count(0)


def balanced_accuracy(run: dict[str, Any], threshold: float = 0.5) -> float:
    """A recorded run's balanced accuracy x100 from its kept rows, a unit flagged where its score is at
    least ``threshold`` (a probability's own decision): the mean of the rates it gets right on each side."""
    _, labels, scores = units_of(run["rows"])
    flagged = [score >= threshold for score in scores]
    positives = [f for f, label in zip(flagged, labels, strict=True) if label]
    negatives = [not f for f, label in zip(flagged, labels, strict=True) if not label]
    return 100 * (sum(positives) / len(positives) + sum(negatives) / len(negatives)) / 2


def mean_score(run: dict[str, Any]) -> float:
    scores = units_of(run["rows"])[2]
    return sum(scores) / len(scores)


def changed_scores(run: dict[str, Any], other: dict[str, Any]) -> int:
    """How many sentences two runs on the same items scored differently."""
    _, _, a, b = rows_paired(run, other)
    return sum(1 for x, y in zip(a, b, strict=True) if x != y)


def verdict(name: str, claim: str) -> str:
    """The sentence a record's verdict states (``benchmarks/verdicts.py`` decides it from the records and
    writes it into them): a template prints a verdict, it never decides one."""
    found = load_record(name).get("verdicts", {}).get(claim)
    if found is None:
        raise ValueError(f"a template prints verdict {claim!r} of {name}, which benchmarks/verdicts.py has not written")
    return str(found["text"])


def how_made(name: str) -> str:
    """What a document says of a record's runs that were not simply recorded by the run that made them:
    transcribed from an earlier document (unrecorded), made but given their command and commit afterwards
    (backfilled), or made from a checkout with uncommitted changes. Empty when every run was recorded."""
    runs = load_record(name)["runs"]
    notes = []
    for kind, sentence in (
        (
            "unrecorded",
            "were measured at commit {commits} and transcribed from its document into `docs/results/{name}.json`; "
            "their run was not repeated since",
        ),
        (
            "backfilled",
            "were made by runs at commit {commits}, whose command and commit were filled in afterwards from their "
            "document (`backfilled` in `docs/results/{name}.json`)",
        ),
        (
            "dirty",
            "were made from a checkout with uncommitted changes ({commits}): the code that ran is not that commit's",
        ),
    ):
        labels = [label for label, run in runs.items() if _kind(run) == kind]
        if not labels:
            continue
        commits = ", ".join(sorted({str(runs[label]["commit"]) for label in labels}))
        quoted = ", ".join(f"'{label}'" for label in labels)
        which = "these figures" if len(labels) == len(runs) else f"the figures of {quoted}"
        notes.append(f"*{kind.capitalize()}: {which} {sentence.format(commits=commits, name=name)}.*")
    return "\n".join(notes)


def _kind(run: dict[str, Any]) -> str:
    if not run["recorded"]:
        return "unrecorded"
    if run.get("backfilled"):
        return "backfilled"
    return "dirty" if "+dirty" in str(run["commit"]) else "recorded"


USEFUL_RECALL = 0.05  # an operating point that finds fewer of the inaccurate sentences is none to use


def operating_point(run: dict[str, Any]) -> str:
    """A calibration's held-out operating point as a table cell: its threshold and precision / recall, or
    "none useful" where it has none or finds almost nothing (decided here, never in a template)."""
    if run["held_out_precision"] is None or run["held_out_recall"] < USEFUL_RECALL:
        return "none useful"
    return f"p >= {run['threshold']:.3f}: {run['held_out_precision']:.3f} / {run['held_out_recall']:.3f}"


def by(rows: Iterable[dict[str, Any]], key: str) -> dict[Any, dict[str, Any]]:
    """A record's rows by one of their fields (``candidates | by("name")``): a lookup, not a new figure."""
    return {row[key]: row for row in rows}


def page(name: str) -> dict[str, Any]:
    """The rows a page prints, prepared from its records (``benchmarks/pages.py``)."""
    return PAGES[name](load_record)


def environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(TEMPLATES),
        undefined=StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.globals.update(
        record=load_record, page=page, how_made=how_made, verdict=verdict, operating_point=operating_point
    )
    env.filters.update(
        by=by,
        f=fixed,
        signed=signed,
        n=thousands,
        ci=interval,
        minutes=minutes,
        hours=hours,
        percent=percent,
        gib=gib,
        ms=ms,
        seconds_of_ms=seconds_of_ms,
        per_item=per_item,
        checks=checks,
        per_item_minutes=per_item_minutes,
        accurate=accurate,
        balanced_accuracy=balanced_accuracy,
        mean_score=mean_score,
        changed_scores=changed_scores,
    )
    return env


def render(template: Path, env: Environment | None = None) -> str:
    env = env or environment()
    name = template.relative_to(TEMPLATES).as_posix()
    body = env.get_template(name).render()
    return BANNER.format(template=f"docs/templates/{name}") + "\n" + body


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 naming each document that differs")
    args = ap.parse_args(argv)
    env = environment()
    stale = []
    for template in templates():
        text, path = render(template, env), target(template)
        old = path.read_text(encoding="utf-8") if path.is_file() else ""
        if text == old:
            continue
        if args.check:
            stale.append(path)
            diff = difflib.unified_diff(old.splitlines(), text.splitlines(), str(path), "rendered", lineterm="", n=1)
            print("\n".join(list(diff)[:40]))
        else:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(ROOT)}")
    if stale:
        names = ", ".join(str(p.relative_to(ROOT)) for p in stale)
        print(f"{names}: differ from their templates and records; run benchmarks/render_docs.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
