"""Result types shared by every method: per-unit scores, evidence, and run metadata.

Convention: a unit's ``score`` is higher when the unit is more likely hallucinated.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field, computed_field

from halluscope.errors import ConfigError

if TYPE_CHECKING:
    import pandas


class TokenUsage(BaseModel):
    prompt: int = 0
    completion: int = 0

    @property
    def total(self) -> int:
        return self.prompt + self.completion


class RunMeta(BaseModel):
    """What a run cost and what it used, so two results can be compared honestly."""

    method: str
    calls: int = Field(0, description="model calls actually sent to a provider")
    cache_hits: int = 0
    parse_failures: int = 0
    events: dict[str, int] = Field(
        default_factory=dict, description="bad model answers a method handled, by kind (e.g. missing_answer)"
    )
    tokens: TokenUsage = Field(default_factory=TokenUsage)
    seconds: float = 0.0
    models: list[str] = Field(default_factory=list)
    prompts: list[str] = Field(default_factory=list, description="id@version#hash of each prompt used")
    params: dict[str, Any] = Field(default_factory=dict)
    warnings: list[str] = Field(
        default_factory=list, description="what a reader of the result should know (a calibration used outside its fit)"
    )

    def prompt_tokens_line(self) -> str:
        """The cost line's account of prompt tokens: sent, evaluated after the reused prefixes, and the
        floor (the distinct tokens of the run's prompts, a shared prefix counted once), where counted."""
        if "evaluated_tokens" not in self.params:
            return ""
        p = self.params
        floor = f", floor {p['floor_tokens']:,} ({p['evaluated_ratio']:.2f}x)" if "floor_tokens" in p else ""
        return f"; prompt tokens {self.tokens.prompt:,} sent, {p['evaluated_tokens']:,} evaluated{floor}"

    def cost(self, detail: str = "") -> str:
        """What the run cost, in one line (and the bad answers it handled, on a second)."""
        passes = self.params.get("checker_passes")
        checker = f", {passes} checker passes (no LLM call)" if passes else ""
        line = (
            f"{self.calls} model calls{f' ({detail})' if detail else ''}{checker}, {self.cache_hits} cache hits, "
            f"{self.parse_failures} unparsed answers, {self.seconds:.1f} s{self.prompt_tokens_line()}"
        )
        earlier = self.params.get("earlier_runs")
        if earlier:  # a resumed run: its resumed items were paid for by the runs before it
            line += f"; before it, for the resumed items: {earlier['calls']} model calls, {earlier['seconds']:.1f} s"
        handled = ", ".join(f"{k} {v}" for k, v in sorted(self.events.items()))
        return line + (f"\nhandled: {handled}" if handled else "")


class Unit(BaseModel):
    """One scored unit (sentence, claim, concept, answer, query)."""

    text: str
    score: float | None = Field(None, description="higher = more likely hallucinated; None when unscored")
    probability: float | None = Field(
        None, description="P(hallucinated) from a calibration of the method's scores; None without one"
    )
    parsed: bool = True
    evidence: dict[str, Any] = Field(default_factory=dict)
    spans: list[tuple[int, int]] = Field(
        default_factory=list,
        description="where the unit lies in the checked answer, in its characters: the sentence, or a claim's "
        "words in the sentence it came from (empty where unknown)",
    )

    def closest_evidence(self, most: int = 1) -> list[str]:
        """The sentences of the documents this unit was checked against (a grounded unit's best chunk)
        sharing the most words with it: what a reader sets it beside to see why it was or was not
        supported. Empty where the unit holds no document text."""
        chunk = self.evidence.get("best_chunk_text")
        if not isinstance(chunk, str) or not chunk.strip():
            return []
        from halluscope.text import content_words, sentences  # the words claims are aligned on

        words = content_words(self.text)
        shared = [(len(words & content_words(s)), -i, s) for i, s in enumerate(sentences(chunk))]
        return [s for overlap, _, s in sorted(shared, reverse=True)[:most] if overlap]


def span_note(text: str, spans: Sequence[Sequence[int]]) -> str:
    """Where a claim (a unit that is not the answer's own sentence) points in the answer: its words'
    characters; a sentence's span is the sentence itself, and is not repeated ("": nothing to add)."""
    if not spans or (len(spans) == 1 and spans[0][1] - spans[0][0] == len(text.strip())):
        return ""
    return "[answer characters " + ", ".join(f"{a}-{b}" for a, b in spans) + "]"


def _words(unit: Unit) -> str:
    note = span_note(unit.text, unit.spans)
    return f"  {note}" if note else ""


BRIEF_CHUNK = 300  # characters of a best chunk shown where no sentence of it shares a word with the unit


def _near(unit: Unit) -> list[str]:
    """The document sentences closest to a unit, else the start of the chunk it was checked against."""
    chunk = unit.evidence.get("best_chunk_text")
    found = unit.closest_evidence()
    return found or ([chunk[:BRIEF_CHUNK]] if isinstance(chunk, str) and chunk.strip() else [])


# A calibrated result is flagged at p >= 0.5 unless told otherwise; raw scores have no scale such a
# default could mean, so they are flagged only at a threshold given
DEFAULT_PROBABILITY_THRESHOLD = 0.5


class Verdict(BaseModel):
    """What a threshold makes of a result, to gate on: the units at or above it."""

    threshold: float
    on: Literal["score", "probability"] = Field(description="what the threshold is applied to")
    flagged: list[int] = Field(description="the flagged units' positions in ``units``, in order")
    units: int = Field(description="how many units the result has")

    @computed_field  # type: ignore[prop-decorator]
    @property
    def count(self) -> int:
        """How many units are flagged."""
        return len(self.flagged)


class DetectionResult(BaseModel):
    method: str
    units: list[Unit]
    meta: RunMeta
    evidence: dict[str, Any] = Field(default_factory=dict)
    error: str | None = Field(None, description="why this item failed in a batch (no units then); None when it ran")
    verdict: Verdict | None = Field(None, description="the verdict drawn with ``decide`` (None: none drawn)")
    actions: dict[str, Any] | None = Field(
        None,
        description="the conversation's tool calls and the answer's claims of action, checked beside it "
        "(``tool_calls.actions_checked``: ``tool_calls``, ``actions``, ``flagged``, and ``judge_calls`` where a "
        "judge read them); None: no calls given",
    )

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def risk(self) -> float | None:
        """The riskiest unit's score: a passage is as suspect as its most suspect sentence."""
        scores = [u.score for u in self.units if u.score is not None]
        return max(scores) if scores else None

    def flagged(self, threshold: float, on: Literal["score", "probability"] | None = None) -> list[Unit]:
        """The units whose ``on`` value is at or above ``threshold`` (None: the probability when the
        result is calibrated, else the score); a unit without that value is never flagged."""
        if on is None:
            on = "probability" if any(u.probability is not None for u in self.units) else "score"
        return [u for u in self.units if (value := getattr(u, on)) is not None and value >= threshold]

    def decide(
        self, threshold: float | None = None, on: Literal["score", "probability"] | None = None
    ) -> Verdict | None:
        """Draw the verdict at ``threshold`` on ``on`` (None: the probability when calibrated, else the
        score) and keep it on the result. Without a threshold a calibrated result is judged at p >= 0.5
        and a raw one is not judged (None): raw scores have no scale a default could mean."""
        calibrated = any(u.probability is not None for u in self.units)
        on = on or ("probability" if calibrated else "score")
        if threshold is None and on == "probability":
            threshold = DEFAULT_PROBABILITY_THRESHOLD
        if threshold is None or self.error:
            self.verdict = None
            return None
        flagged = {id(u) for u in self.flagged(threshold, on)}
        positions = [i for i, u in enumerate(self.units) if id(u) in flagged]
        self.verdict = Verdict(threshold=threshold, on=on, flagged=positions, units=len(self.units))
        return self.verdict

    def summary(self, top: int = 3) -> str:
        """A few lines a person (or an agent) can read: the riskiest units first."""
        if self.error:
            return f"{self.method}: failed ({self.error})"
        scored = sorted((u for u in self.units if u.score is not None), key=lambda u: -(u.score or 0.0))
        if not scored:
            return f"{self.method}: nothing scored ({len(self.units)} units)"
        head = f"{self.method}: {len(self.units)} units, highest risk {scored[0].score:.3f}"
        lines = [f"{head} (higher = more likely hallucinated)"]
        lines += [f"- {u.score:.3f}{_probability(u)}  {u.text[:160]}" for u in scored[:top]]
        return "\n".join(lines)

    def brief(self) -> dict[str, Any]:
        """What a caller acts on, small: the verdict, every unit's score (and probability where calibrated)
        at its place, the flagged units with their text and the document sentence closest to each, and
        the cost (the whole result: ``model_dump``)."""
        flagged = self.verdict.flagged if self.verdict is not None else []
        shown = [
            {
                "position": i,
                "text": u.text,
                "score": u.score,
                "probability": u.probability,
                "spans": [list(span) for span in u.spans],
                "evidence": _near(u),
            }
            for i, u in ((i, self.units[i]) for i in flagged)
        ]
        scored = [
            {"position": i, "score": u.score, "probability": u.probability, "spans": [list(span) for span in u.spans]}
            for i, u in enumerate(self.units)
        ]
        cost = {
            "calls": self.meta.calls,
            "cache_hits": self.meta.cache_hits,
            "prompt_tokens": self.meta.tokens.prompt,
            "seconds": self.meta.seconds,
        }
        verdict = self.verdict.model_dump() if self.verdict is not None else None
        brief = {"method": self.method, "units": len(self.units), "verdict": verdict, "scored": scored}
        extra = ({"actions": self.actions} if self.actions is not None else {}) | (
            {"error": self.error} if self.error else {}
        )
        return brief | {"flagged": shown, "cost": cost} | extra

    def report(self) -> str:
        """Every unit in order with its score, and the run's cost: what `halluscope detect` prints."""
        if self.error:
            return self.summary()
        lines = [f"{self.method}: higher = more likely hallucinated"]
        lines += [f"  {_shown(u)}{_probability(u)}  {u.text}{_words(u)}" for u in self.units]
        lines.append(self.meta.cost())
        return "\n".join(lines)

    def rows(self, item: int | str = 0) -> list[dict[str, Any]]:
        """The result as a table's rows, one per unit (``ROW_COLUMNS``; a failed item: one row with its
        error): what ``to_pandas`` and `detect --csv` hold. ``flagged`` is the verdict's (None when none
        was drawn); ``unit`` counts from 0, as the verdict's positions do."""
        blank = dict.fromkeys(ROW_COLUMNS)
        if self.error or not self.units:
            return [{**blank, "item": item, "method": self.method, "error": self.error}]
        flagged = set(self.verdict.flagged) if self.verdict else None
        return [
            {
                **blank,
                "item": item,
                "method": self.method,
                "unit": i,
                "text": u.text,
                "score": u.score,
                "probability": u.probability,
                "flagged": None if flagged is None else i in flagged,
                "evidence": u.evidence,
            }
            for i, u in enumerate(self.units)
        ]

    def to_pandas(self, threshold: float | None = None) -> pandas.DataFrame:
        """One row per unit (item, unit, text, score, probability, flagged, evidence), as ``to_pandas``."""
        return to_pandas([self], threshold)

    def to_dict(self) -> dict[str, Any]:
        """JSON values only: a score or number that is not finite (an unseen token's +inf) becomes None,
        since JSON has no Infinity or NaN and a reader's parser may refuse them."""
        return _finite(self.model_dump(mode="json"))

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False, allow_nan=False)

    @classmethod
    def from_json(cls, text: str) -> DetectionResult:
        return cls.model_validate_json(text)


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


ROW_COLUMNS = ("item", "method", "unit", "text", "score", "probability", "flagged", "evidence", "error")


def to_pandas(results: Iterable[DetectionResult], threshold: float | None = None) -> pandas.DataFrame:
    """A batch's results (``detect_many``'s) as one DataFrame, a row per unit and ``item`` each result's
    position in the batch; a failed item is one row with its ``error``, so nothing is dropped.
    ``flagged`` is each result's verdict: drawn at ``threshold`` when one is given, else the verdict it
    already has, else the default one (p >= 0.5 when calibrated; raw scores: none, so empty)."""
    try:
        import pandas as pd
    except ImportError as exc:
        raise ConfigError("to_pandas needs pandas: pip install 'halluscope[pandas]' (or pandas)") from exc
    rows = []
    for item, result in enumerate(results):
        if not isinstance(result, DetectionResult):
            raise ConfigError(f"to_pandas takes DetectionResults (detect_many's), got {type(result).__name__}")
        if threshold is not None or result.verdict is None:
            result.decide(threshold)
        rows += result.rows(item)
    return pd.DataFrame(rows, columns=list(ROW_COLUMNS))


def _shown(unit: Unit) -> str:
    """A unit's score in five characters: 'inf' for an unseen token (SelfCheck-Unigram), 'n/a' unscored."""
    if unit.score is not None:
        return f"{unit.score:5.2f}"
    return "  inf" if unit.evidence.get("unseen_token") else "  n/a"


def _probability(unit: Unit) -> str:
    return "" if unit.probability is None else f"  p={unit.probability:.2f}"
