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
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from langchain_core.messages import AIMessageChunk, BaseMessage

from halluscope.check_answer import check_item, deployable
from halluscope.detectors import Detector
from halluscope.errors import ConfigError, HalluscopeError
from halluscope.results import DetectionResult, RunMeta, TokenUsage, Unit
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

    def item(self, sentence: str) -> dict[str, Any]:
        return {**check_item(self.det, sentence, self.context, self.question), "sentences": [sentence]}

    def run(self, sentence: str) -> DetectionResult:
        """One sentence's check; a failed one is a result with its error (the stream goes on)."""
        try:
            return self.det.detect(**self.item(sentence))
        except HalluscopeError as exc:
            return self.failed(exc)

    async def arun(self, sentence: str) -> DetectionResult:
        try:
            return await self.det.adetect(**self.item(sentence))
        except HalluscopeError as exc:
            return self.failed(exc)

    def failed(self, exc: HalluscopeError) -> DetectionResult:
        return DetectionResult(method=self.det.method, units=[], meta=RunMeta(method=self.det.method), error=str(exc))

    def verdict(self, index: int, found: tuple[str, int, int], result: DetectionResult) -> SentenceVerdict:
        sentence, start, end = found
        self.results[sentence] = result
        if result.error or not result.units:
            unit = Unit(text=sentence, score=None, evidence={"error": result.error or "no unit"}, spans=[(start, end)])
        else:  # its spans, found in the sentence alone, moved to the answer's characters
            unit = result.units[0]
            unit.spans = [(a + start, b + start) for a, b in unit.spans]
        value = getattr(unit, self.on)
        return SentenceVerdict(index, sentence, start, end, unit, value is not None and value >= self.threshold)

    def answer(self, text: str, verdicts: list[SentenceVerdict]) -> DetectionResult:
        """The answer's result: the final split's units (each from its sentence's check), the costs summed."""
        by_text = {v.text: v.unit for v in verdicts}
        units = [by_text[s] for s in sentences(text) if s in by_text]
        metas = [r.meta for r in self.results.values()]
        failed = [f"{s}: {r.error}" for s, r in self.results.items() if r.error]
        result = DetectionResult(method=self.det.method, units=units, meta=_summed(self.det.method, metas))
        result.meta.warnings += [f"unchecked sentence {f}" for f in failed]
        result.decide(self.threshold, self.on)
        return result


def _summed(method: str, metas: list[RunMeta]) -> RunMeta:
    events: dict[str, int] = {}
    for m in metas:
        for kind, count in m.events.items():
            events[kind] = events.get(kind, 0) + count
    return RunMeta(
        method=method,
        calls=sum(m.calls for m in metas),
        cache_hits=sum(m.cache_hits for m in metas),
        parse_failures=sum(m.parse_failures for m in metas),
        events=events,
        tokens=TokenUsage(
            prompt=sum(m.tokens.prompt for m in metas), completion=sum(m.tokens.completion for m in metas)
        ),
        seconds=sum(m.seconds for m in metas),
        models=sorted({name for m in metas for name in m.models}),
        prompts=sorted({p for m in metas for p in m.prompts}),
        params=_params(metas),
        warnings=sorted({w for m in metas for w in m.warnings}),
    )


def _params(metas: list[RunMeta]) -> dict[str, Any]:
    """The first check's settings, and the prompt tokens evaluated summed where every check counted them
    (a floor of distinct tokens does not add up across checks, and is left out)."""
    params = {k: v for k, v in (metas[0].params if metas else {}).items() if k not in EVALUATED}
    if metas and all("evaluated_tokens" in m.params for m in metas):
        params["evaluated_tokens"] = sum(m.params["evaluated_tokens"] for m in metas)
    return params


EVALUATED = ("evaluated_tokens", "floor_tokens", "evaluated_ratio")


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


def late(check: SentenceChecks, split: Splitter, verdicts: list[SentenceVerdict]) -> list[SentenceVerdict]:
    """Sentences of the final split that the streamed split never handed out, checked now."""
    seen = {v.text for v in verdicts}
    late = []
    for sentence in sentences(split.text):
        if sentence not in seen:
            start = split.text.find(sentence)
            found = (sentence, start, start + len(sentence))
            late.append(check.verdict(len(verdicts) + len(late), found, check.run(sentence)))
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

    async for chunk in chunks:
        for found in split.add(chunk_text(chunk)):
            start(found)
        while pending and pending[0][1].done():  # hand out what is ready, in order, and read on
            found, task = pending.pop(0)
            verdicts.append(check.verdict(len(verdicts), found, task.result()))
            yield verdicts[-1]
    for found in split.end():
        start(found)
    for found, task in pending:
        verdicts.append(check.verdict(len(verdicts), found, await task))
        yield verdicts[-1]
    verdicts += await asyncio.to_thread(late, check, split, verdicts)
    yield check.answer(split.text, verdicts)
