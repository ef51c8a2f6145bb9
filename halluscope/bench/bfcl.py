"""BFCL's tool calls as a benchmark of argument grounding labelled by construction (issue 73): the
Berkeley Function Calling Leaderboard's live requests (real users' words), each with the function
documents offered and its ground-truth call, made into cases whose labels need no annotator:

- ``ground truth``: the request and its ground-truth call (each argument's first acceptable value; an
  argument that may be left out is left out). Every argument is grounded by construction, so a flag
  here is a false positive, the one a user would live with;
- ``replaced``: the same call with one argument's value replaced by a value of the same kind that the
  request never states (a number moved, another case's identifier, email, date or phrase): an invented
  value;
- ``removed``: the same call with the request's own words for one argument taken out of the request
  (the user never gave it): the value is now missing from the conversation.

Which argument is changed is drawn seeded per case, among the values a change can reach (not a
boolean, not one of the schema's enum or its default: the schema grounds those).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np

from halluscope.bench.datasets import dataset_file
from halluscope.errors import DataError
from halluscope.scoring.arguments import Conversation, as_written, key_of, kind_of, number_of

PARTS = ("live_simple", "live_multiple")
CONSTRUCTIONS = ("ground truth", "replaced", "removed")


@dataclass(frozen=True)
class ToolCase:
    """One request and a call to check: the conversation's texts, the called function's document, the
    call's arguments, and which argument was planted (None for the ground truth) and how."""

    id: str
    texts: tuple[str, ...]
    function: dict[str, Any]
    arguments: dict[str, Any]
    construction: str
    planted: str | None = None


@dataclass(frozen=True)
class Request:
    """A BFCL row: its id, its messages' texts, the functions offered and the ground-truth call."""

    id: str
    texts: tuple[str, ...]
    functions: tuple[dict[str, Any], ...]
    name: str
    arguments: dict[str, Any]

    @property
    def function(self) -> dict[str, Any]:
        return next(f for f in self.functions if f["name"] == self.name)


def _rows(path: Path) -> list[dict[str, Any]]:
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise DataError(f"{path}, line {number}: not JSON ({exc.msg})") from exc
    return rows


def load_bfcl(data: str | Path | None = None, parts: Sequence[str] = PARTS) -> list[Request]:
    """Each part's requests with their ground-truth calls, in file order (one call a request: BFCL's live
    simple and live multiple ask for one)."""
    found = []
    for part in parts:
        questions = _rows(dataset_file("bfcl", f"BFCL_v4_{part}.json", data))
        answers = {a["id"]: a for a in _rows(dataset_file("bfcl", f"possible_answer/BFCL_v4_{part}.json", data))}
        for q in questions:
            try:
                [call] = answers[q["id"]]["ground_truth"]
                [(name, acceptable)] = call.items()
                texts = tuple(str(m["content"]) for turn in q["question"] for m in turn)
                arguments = {k: v[0] for k, v in acceptable.items() if v and v[0] != ""}
                found.append(Request(q["id"], texts, tuple(q["function"]), name, arguments))
            except (KeyError, ValueError, TypeError) as exc:
                raise DataError(
                    f"BFCL {part}, {q.get('id')}: not a request with one ground-truth call ({exc})"
                ) from exc
    return found


def written(value: Any, texts: Sequence[str]) -> bool:
    """Whether the value is written in the texts as it stands (a whole token, any case)."""
    pattern = as_written(value)
    return any(pattern.search(t) for t in texts)


def stated(value: Any, texts: Sequence[str]) -> bool:
    """Whether the texts state the value in any form: written as it stands, or (a number, a date, an
    email, a URL) in another written form of the same value; a case's label needs the value stated, or
    stated nowhere."""
    kind = kind_of(value)
    if kind in ("phrase", "boolean", "identifier"):
        return written(value, texts)
    return written(value, texts) or key_of(kind, value) in Conversation.of(texts).literals[kind]


def _changeable(request: Request) -> list[str]:
    """The arguments a change can plant: scalars, not booleans, not what the schema itself offers."""
    schemas = request.function["parameters"].get("properties", {})
    return [
        name
        for name, value in request.arguments.items()
        if not isinstance(value, dict | list | bool)
        and value not in ((schemas.get(name) or {}).get("enum") or [])
        and value != (schemas.get(name) or {}).get("default")
    ]


def replacement(value: Any, pool: Sequence[Any], texts: Sequence[str], rng: np.random.Generator) -> Any | None:
    """A value of the same kind that the texts never write: a number moved by a drawn amount, else another
    case's value of that kind (None where none is left)."""
    kind = kind_of(value)
    if kind == "number":
        base = number_of(value)
        assert base is not None  # a number's kind is read from its value
        for _ in range(20):
            whole = base == base.to_integral_value()
            moved = base + int(rng.integers(2, 50)) if whole else round(base * Decimal(str(rng.uniform(1.3, 3))), 2)
            if not stated(moved, texts):
                return str(moved) if isinstance(value, str) else int(moved) if whole else float(moved)
        return None
    others = [v for v in pool if kind_of(v) == kind and v != value]
    for i in rng.permutation(len(others)):
        if not stated(others[i], texts):
            return others[i]
    return None


def without_words(texts: Sequence[str], value: Any) -> tuple[str, ...] | None:
    """The texts with every mention of the value, as it is written, taken out; None where it is not
    written so (a value the request states in other words gives no removed case)."""
    if not written(value, texts):
        return None
    pattern = as_written(value)
    return tuple(re.sub(r"\s{2,}", " ", pattern.sub("", t)) for t in texts)


def cases(requests: Sequence[Request], seed: int = 0) -> list[ToolCase]:
    """Each request's ground-truth case and, where an argument can be changed, its replaced and removed
    cases (the argument drawn seeded by the request's position)."""
    pool = [v for r in requests for v in r.arguments.values() if isinstance(v, str | int | float)]
    made = []
    for number, r in enumerate(requests):
        rng = np.random.default_rng([seed, number])
        made.append(ToolCase(r.id, r.texts, r.function, dict(r.arguments), "ground truth"))
        names = _changeable(r)
        if not names:
            continue
        name = names[int(rng.integers(len(names)))]
        value = replacement(r.arguments[name], pool, r.texts, rng)
        if value is not None:
            made.append(ToolCase(r.id, r.texts, r.function, {**r.arguments, name: value}, "replaced", name))
        cut = without_words(r.texts, r.arguments[name])
        if cut is not None and not stated(r.arguments[name], cut):  # no other form of it is left
            made.append(ToolCase(r.id, cut, r.function, dict(r.arguments), "removed", name))
    return made
