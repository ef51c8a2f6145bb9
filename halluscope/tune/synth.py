"""`checker synth`: grounding pairs labelled by construction, for a checker to fit on. Adapted from
MiniCheck's doc-to-claim recipe (Tang, Laban and Durrett, EMNLP 2024, Section 3: a claim written from a
part of a document is made unsupported by removing that part) and FactCG's document-level pairs; their
papers, not their code. For each chosen sentence of a document, a local model (``synth.claim``) writes
one claim resting on that sentence; the document with the claim is a supported pair, the same document
without that sentence an unsupported one. A claim that another sentence also states is mislabelled by
the removal, and one that says more than its sentence by both pairs: with a ``judge``, each claim is
kept only where the judge (``grounded``) finds it supported by its sentence and not by the document
without it, and a dropped claim is counted with why (the labels stay the construction's; the judge only
removes the pairs it finds mislabelled).

The documents are ones no test reads (WikiBio 0-119's Wikipedia texts by default). Every call goes
through the gateway (cached: a rerun after a crash replays what was written, and calls nothing); the
pairs are written as a labelled file that `checker fit --data FILE` reads (an answer of one sentence,
its documents, its label), beside a JSON of what they cost.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from halluscope.backends.gateway import Gateway
from halluscope.backends.models import ModelLike, model_name
from halluscope.backends.stats import CallStats, ChatReply
from halluscope.bench.provenance import envelope
from halluscope.bench.report import write_json
from halluscope.bench.wikibio import load_wikibio
from halluscope.errors import ConfigError, ModelUnavailableError
from halluscope.runtime import registry
from halluscope.runtime.contract import start
from halluscope.text import sentences

PROMPT = "synth.claim"
MAX_TOKENS = 80  # one short claim
SAMPLE = 6  # pairs the summary shows, for a reader to judge them
SUPPORTED_BELOW = 0.5  # grounded's score is p(not supported): below it, the judge finds the claim supported


@dataclass(frozen=True, kw_only=True)
class SynthSettings:
    """What is made and from what, checked when made: ``per_document`` claims from a document's sentences
    of at least ``min_words`` words (a seeded choice), documents of at least ``min_sentences`` sentences
    (one removed leaves the rest)."""

    per_document: int = 2
    min_words: int = 8
    min_sentences: int = 3
    seed: int = 0

    def __post_init__(self) -> None:
        if self.per_document < 1 or self.min_words < 1:
            raise ConfigError(
                f"per_document and min_words are at least 1, got {self.per_document} and {self.min_words}",
                settings=("per_document", "min_words"),
            )
        if self.min_sentences < 2:
            raise ConfigError(
                f"min_sentences is at least 2 (one is removed), got {self.min_sentences}", settings=("min_sentences",)
            )


@dataclass(frozen=True)
class Document:
    """A text claims are written from, named so each pair says where it came from."""

    id: str
    text: str


def wikibio_documents(passages: range, data_dir: str | Path | None = None) -> list[Document]:
    """WikiBio's Wikipedia texts of the given passages (the probes' and checkers' fit split by default)."""
    return [Document(f"wikibio-{p.index}", p.wiki_text) for p in load_wikibio(data_dir) if p.index in passages]


def chosen(parts: Sequence[str], settings: SynthSettings, document: str) -> list[int]:
    """The sentences a document's claims rest on: up to ``per_document`` of its sentences long enough,
    drawn seeded by the document (the same whichever documents are made), in order."""
    if len(parts) < settings.min_sentences:
        return []
    long_enough = [i for i, s in enumerate(parts) if len(s.split()) >= settings.min_words]
    rng = np.random.default_rng([settings.seed, int(hashlib.sha256(document.encode()).hexdigest()[:8], 16)])
    picked = rng.permutation(len(long_enough))[: settings.per_document]
    return sorted(long_enough[i] for i in picked)


def without(parts: Sequence[str], at: int) -> str:
    """The document without its sentence ``at``, its other sentences joined as the whole document's are."""
    return " ".join(s for i, s in enumerate(parts) if i != at)


def pairs_of(
    document: str, parts: Sequence[str], at: int, claim: str, verified: Verified | None = None
) -> list[dict[str, Any]]:
    """The two rows one claim makes: supported against every sentence, unsupported against all but the
    one it rests on (both contexts the sentences joined alike, so the removal is their only difference);
    with the judge's two scores where it was verified."""
    made: dict[str, Any] = {"document": document, "sentence": at, "rests_on": parts[at]}
    if verified is not None:
        made["verified"] = asdict(verified)
    whole = " ".join(parts)
    return [
        {"id": f"{document}/s{at}/supported", "text": claim, "context": [whole], "labels": [0], **made},
        {"id": f"{document}/s{at}/unsupported", "text": claim, "context": [without(parts, at)], "labels": [1], **made},
    ]


@dataclass(frozen=True)
class Verified:
    """A judge's two scores of one claim (p(not supported), as ``grounded`` scores): against the sentence
    it rests on, and against its document without that sentence."""

    against_sentence: float
    without_sentence: float

    @property
    def rests_on_its_sentence(self) -> bool:
        return self.against_sentence < SUPPORTED_BELOW

    @property
    def removal_holds(self) -> bool:
        """The document without the sentence does not support it: the unsupported pair's label holds."""
        return self.without_sentence >= SUPPORTED_BELOW

    @property
    def why_dropped(self) -> str | None:
        """None for a clean claim (both labels hold), else which label the judge does not find."""
        if not self.rests_on_its_sentence:
            return "not supported by its sentence"
        return None if self.removal_holds else "supported without its sentence"


def verifier(judge: ModelLike, gateway: Gateway, stats: CallStats) -> Callable[[str, str, str], Verified]:
    """``verified(claim, sentence, without)``: the judge's two checks of a claim, by ``grounded`` with its
    defaults (reached through the registry, as every door reaches it), through the gateway (cached)."""
    grounded = registry.get("grounded")
    check = grounded.scorer(grounded.options(model=judge), start(gateway, stats))

    def verified(claim: str, sentence: str, without: str) -> Verified:
        scores = [check(grounded.inputs(sentences=[claim], context=[c])).units[0].score for c in (sentence, without)]
        assert None not in scores  # grounded scores every unit (an unreadable reply: support 0.5)
        return Verified(float(scores[0]), float(scores[1]))  # type: ignore[arg-type]

    return verified


def claim_of(reply: ChatReply) -> str | None:
    """The claim a reply wrote (its first line, unquoted), or None where it wrote none."""
    if not reply.ok or not isinstance(reply.parsed, str):
        return None
    line = reply.parsed.strip().splitlines()[0].strip().strip('"').strip()
    return line or None


@dataclass
class Made:
    """What a run wrote so far: the pairs, how many claims were written, which were not and why, and which
    the judge dropped and why."""

    pairs: list[dict[str, Any]] = field(default_factory=list)
    written: int = 0
    unwritten: list[str] = field(default_factory=list)
    dropped: list[dict[str, Any]] = field(default_factory=list)


def from_document(
    document: Document,
    settings: SynthSettings,
    write: Callable[[dict[str, str]], ChatReply],
    verified: Callable[[str, str, str], Verified] | None,
    made: Made,
) -> None:
    """One document's claims, each written (``write`` the prompt's variables) and, with a judge, verified;
    their pairs added to ``made``. A model that gives no answer is recorded, and the rest go on."""
    parts = sentences(document.text)
    for i in chosen(parts, settings, document.id):
        where = f"{document.id}/s{i}"
        try:
            reply = write({"document": " ".join(parts), "sentence": parts[i]})
            claim = claim_of(reply)
            if claim is None:
                made.unwritten.append(f"{where}: {reply.parse_error or 'no claim'}")
                continue
            made.written += 1
            held = verified(claim, parts[i], without(parts, i)) if verified is not None else None
        except ModelUnavailableError as exc:  # no answer after its retries
            made.unwritten.append(f"{where}: {exc}")
            continue
        if held is not None and held.why_dropped:
            made.dropped.append({"id": where, "claim": claim, "why": held.why_dropped, **asdict(held)})
            continue
        made.pairs += pairs_of(document.id, parts, i, claim, held)


def synthesize(
    documents: Sequence[Document],
    settings: SynthSettings,
    out: str | Path,
    *,
    model: ModelLike,
    gateway: Gateway,
    judge: ModelLike | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Write OUT (a labelled JSON Lines file of the pairs) and OUT's .json beside it (what was made and
    what it cost); return that summary. ``judge``: keep only the claims it verifies (``Verified``), the
    rest counted in ``dropped`` with why. ``progress(done, total)`` after each document."""
    out = Path(out)
    if out.suffix != ".jsonl":
        raise ConfigError(f"out is a .jsonl file (a labelled file checker fit reads), got {out}", settings=("out",))
    began, stats, judged, made = time.perf_counter(), CallStats(), CallStats(), Made()
    verified = verifier(judge, gateway, judged) if judge is not None else None
    for done, document in enumerate(documents, 1):
        from_document(
            document,
            settings,
            lambda variables: gateway.call(model, PROMPT, variables, stats=stats, max_tokens=MAX_TOKENS),
            verified,
            made,
        )
        if progress is not None:
            progress(done, len(documents))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in made.pairs), encoding="utf-8")
    summary = {
        **envelope(
            models=[model_name(m) for m in (model, judge) if m is not None],
            items=len(documents),
            item="document",
            calls=stats.calls + judged.calls,
            seconds=time.perf_counter() - began,
            cache_hits=stats.cache_hits + judged.cache_hits,
            prompt_tokens=stats.prompt_tokens + judged.prompt_tokens,
        ),
        "prompt": PROMPT,
        "settings": asdict(settings),
        "documents": len(documents),
        "written": made.written,
        "claims": len(made.pairs) // 2,
        "pairs": len(made.pairs),
        "unwritten": made.unwritten,
        "judge": model_name(judge) if judge is not None else None,
        "judge_calls": judged.calls,
        "dropped": made.dropped,
        "completion_tokens": stats.completion_tokens + judged.completion_tokens,
        "sample": made.pairs[:SAMPLE],
    }
    write_json(out.with_suffix(".json"), summary)
    return summary
