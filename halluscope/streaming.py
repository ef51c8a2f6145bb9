"""An answer checked while it streams: each sentence's verdict as soon as the sentence has ended, then the
answer's. ``stream_check(chunks, context=..., question=...)`` reads text chunks (strings, LangChain
message chunks, or an agent's ``stream_mode="messages"`` pairs), splits the text as the benches split it
(``text.sentences``: a sentence has ended when the next one has begun, or the stream has), and checks each
ended sentence alone with the detector ``check`` would run (``check_answer.deployable``), given as the
method's own ``sentences`` so its unit is exactly that sentence. The documents come first in a grounded
judge's prompt, so a local model's KV cache keeps a document's prefix warm across the sentences checked
against it, as it does within one check of the whole answer. At the end the whole text is split again; a
sentence the streamed split did not see (a split that changed once more text arrived) is checked then,
and the answer's result holds the final split's units.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from langchain_core.messages import AIMessageChunk, BaseMessage

from halluscope.backends.budget import CallBudget
from halluscope.backends.stats import CallStats
from halluscope.check_answer import check_item, deployable
from halluscope.detectors import Detector
from halluscope.errors import ConfigError
from halluscope.results import DetectionResult, Unit
from halluscope.text import sentences

# methods whose sentence, checked alone, scores as it does within the whole answer (its evidence does not
# depend on the rest: the documents, or the question)
STREAMED = ("grounded", "direct-question")


@dataclass(frozen=True)
class SentenceVerdict:
    """One ended sentence, checked: where it lies in the answer (characters ``start``-``end``), its unit
    (score, probability where calibrated, evidence) and whether it is flagged at the check's threshold."""

    index: int
    text: str
    start: int
    end: int
    unit: Unit
    flagged: bool


def chunk_text(chunk: Any) -> str:
    """The text a stream's chunk adds: a string, an AI message chunk's text, or the message of an agent's
    (message, metadata) pair; a tool's or user's message adds none (it is not the answer)."""
    if isinstance(chunk, tuple) and chunk:
        chunk = chunk[0]
    if isinstance(chunk, str):
        return chunk
    if isinstance(chunk, BaseMessage):
        return str(chunk.text) if isinstance(chunk, AIMessageChunk) or chunk.type == "ai" else ""
    raise ConfigError(f"a stream's chunk is a string or a message chunk, got {type(chunk).__name__}")


class Splitter:
    """The answer so far, and how far its sentences have been handed out (each found at its place)."""

    def __init__(self) -> None:
        self.text = ""
        self.cursor = 0

    def add(self, piece: str) -> list[tuple[str, int, int]]:
        """The sentences that ended with this piece: every one but the last of the text after the cursor."""
        self.text += piece
        rest = sentences(self.text[self.cursor :])
        return self._hand(rest[:-1])

    def end(self) -> list[tuple[str, int, int]]:
        return self._hand(sentences(self.text[self.cursor :]))

    def _hand(self, ended: list[str]) -> list[tuple[str, int, int]]:
        out = []
        for sentence in ended:
            start = self.text.index(sentence, self.cursor)
            self.cursor = start + len(sentence)
            out.append((sentence, start, self.cursor))
        return out


class SentenceChecks:
    """What a stream's checks share: the detector, its threshold and which value it reads, the item."""

    def __init__(self, det: Detector, threshold: float, context: Any, question: str | None) -> None:
        self.det = det
        self.on: Literal["score", "probability"] = "probability" if det.calibration is not None else "score"
        self.threshold = threshold
        self.context = context
        self.question = question
        self.results: dict[str, DetectionResult] = {}
        self.stats = CallStats()  # every sentence's calls: the answer's cost, its prompt tokens' floor included
        self.budgets: list[CallBudget] = []  # each sentence's, so that a reader who leaves stops them all
        self.cut_because: str | None = None
        self._lock = threading.Lock()

    def item(self, sentence: str) -> dict[str, Any]:
        """One sentence's keywords; its own call budget (of the detector's ``max_calls``) unless a caller's
        budget rides on the detector (a server's request: cut there)."""
        item = {**check_item(self.det, sentence, self.context, self.question), "sentences": [sentence]}
        if self.det.options.get("budget") is None:
            budget = CallBudget(self.det.max_calls, scope="stream")
            with self._lock:
                self.budgets.append(budget)
                if self.cut_because is not None:
                    budget.cut(self.cut_because)
            item["budget"] = budget
        return item

    def cut(self, because: str) -> None:
        """No sentence's check makes a further call (its reader left)."""
        with self._lock:
            self.cut_because = because
            for budget in self.budgets:
                budget.cut(because)

    def run(self, sentence: str) -> DetectionResult:
        """One sentence's check, its calls counted in the stream's; a failed one is a result with its error
        (the stream goes on)."""
        return self.det.scored({**self.item(sentence), "stats": self.stats.part()})

    async def arun(self, sentence: str) -> DetectionResult:
        return await self.det.ascored({**self.item(sentence), "stats": self.stats.part()})

    def verdict(self, index: int, found: tuple[str, int, int], result: DetectionResult) -> SentenceVerdict:
        sentence, start, end = found
        self.results[sentence] = result
        if result.error or not result.units:
            unit = Unit(text=sentence, score=None, evidence={"error": result.error or "no unit"}, spans=[(start, end)])
        else:  # its spans, found in the sentence alone, moved to the answer's characters (the result kept)
            own = result.units[0]
            unit = own.model_copy(update={"spans": [(a + start, b + start) for a, b in own.spans]})
        value = getattr(unit, self.on)
        return SentenceVerdict(index, sentence, start, end, unit, value is not None and value >= self.threshold)

    def answer(self, text: str, verdicts: list[SentenceVerdict]) -> DetectionResult:
        """The answer's result: the final split's units, each from the check of the sentence at its place
        (a sentence that occurs twice has two units, each with its own span), the cost of all."""
        by_place = {(v.text, v.start): v.unit for v in verdicts}
        units = [by_place[found] for found, _ in placed(text) if found in by_place]
        events: Counter[str] = Counter()
        for r in self.results.values():
            events.update(r.meta.events)
        meta = self.stats.meta(self.det.method, dict(events))
        settings = next((r.meta.params for r in self.results.values() if not r.error), {})  # top_k, ...
        meta.params = {**{k: v for k, v in settings.items() if k not in meta.params}, **meta.params}
        meta.warnings = sorted({w for r in self.results.values() for w in r.meta.warnings})
        meta.warnings += [f"unchecked sentence {s}: {r.error}" for s, r in self.results.items() if r.error]
        result = DetectionResult(method=self.det.method, units=units, meta=meta)
        result.decide(self.threshold, self.on)
        return result


def _prepared(context: Any, question: str | None, settings: dict[str, Any]) -> SentenceChecks:
    det, decided_at = deployable(grounded=context is not None, **settings)
    if det.method not in STREAMED:
        raise ConfigError(
            f"{det.method} scores a sentence against the rest of its answer or against samples drawn for it; "
            f"a stream is checked sentence by sentence with {' or '.join(STREAMED)}"
        )
    return SentenceChecks(det, decided_at, context, question)


def stream_check(
    chunks: Iterable[Any], *, context: Any = None, question: str | None = None, **settings: Any
) -> Iterator[SentenceVerdict | DetectionResult]:
    """Yield each sentence's ``SentenceVerdict`` as soon as it has ended, then the answer's
    ``DetectionResult`` (its verdict drawn). ``settings``: the keywords ``halluscope.check`` takes (method,
    model, calibration, threshold, prior, max_calls, the method's options); ``max_calls`` holds for each
    sentence's check. A sentence is checked while the stream waits (use ``astream_check`` to read on)."""
    check = _prepared(context, question, settings)
    split, verdicts = Splitter(), []
    for chunk in chunks:
        for found in split.add(chunk_text(chunk)):
            verdicts.append(check.verdict(len(verdicts), found, check.run(found[0])))
            yield verdicts[-1]
    for found in split.end():
        verdicts.append(check.verdict(len(verdicts), found, check.run(found[0])))
        yield verdicts[-1]
    verdicts += late(check, split, verdicts)
    yield check.answer(split.text, verdicts)


def placed(text: str) -> list[tuple[tuple[str, int], int]]:
    """The final split of ``text``: each sentence with where it starts, and where it ends."""
    found, cursor = [], 0
    for sentence in sentences(text):
        start = text.index(sentence, cursor)
        cursor = start + len(sentence)
        found.append(((sentence, start), cursor))
    return found


def late(check: SentenceChecks, split: Splitter, verdicts: list[SentenceVerdict]) -> list[SentenceVerdict]:
    """Sentences of the final split that the streamed split never handed out at their place, checked now
    (a sentence already checked elsewhere in the answer reuses its check: no further call)."""
    seen = {(v.text, v.start) for v in verdicts}
    late = []
    for (sentence, start), end in placed(split.text):
        if (sentence, start) not in seen:
            result = check.results.get(sentence) or check.run(sentence)
            late.append(check.verdict(len(verdicts) + len(late), (sentence, start, end), result))
    return late


async def astream_check(
    chunks: AsyncIterable[Any], *, context: Any = None, question: str | None = None, **settings: Any
) -> AsyncIterator[SentenceVerdict | DetectionResult]:
    """``stream_check`` on the event loop: each ended sentence's check starts at once and the stream is
    read on while it runs; verdicts come in the answer's order."""
    check = _prepared(context, question, settings)
    split, verdicts = Splitter(), []
    pending: list[tuple[tuple[str, int, int], asyncio.Task[DetectionResult]]] = []

    def start(found: tuple[str, int, int]) -> None:
        pending.append((found, asyncio.ensure_future(check.arun(found[0]))))

    try:
        async for chunk in chunks:
            for found in split.add(chunk_text(chunk)):
                start(found)
            while pending and pending[0][1].done():  # hand out what is ready, in order, and read on
                found, task = pending.pop(0)
                verdicts.append(check.verdict(len(verdicts), found, task.result()))
                yield verdicts[-1]
        for found in split.end():
            start(found)
        while pending:
            found, task = pending[0]
            result = await task
            pending.pop(0)
            verdicts.append(check.verdict(len(verdicts), found, result))
            yield verdicts[-1]
        verdicts += await asyncio.to_thread(late, check, split, verdicts)
        yield check.answer(split.text, verdicts)
    finally:  # the consumer left (break, aclose) or the stream failed: the checks under way make no further call
        check.cut("its reader left")
        for _, task in pending:
            task.cancel()
        await asyncio.gather(*(task for _, task in pending), return_exceptions=True)
