"""`checker synth`: grounding pairs labelled by construction, for a checker to fit on. Adapted from
MiniCheck's doc-to-claim recipe (Tang, Laban and Durrett, EMNLP 2024, Section 3: a claim written from a
part of a document is made unsupported by removing that part) and FactCG's document-level pairs; their
papers, not their code. For each chosen sentence of a document, a local model (``synth.claim``) writes
one claim resting on that sentence; the document with the claim is a supported pair, the same document
without that sentence an unsupported one. A claim that another sentence also states is mislabelled by
the removal: the label is by construction, not checked.

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
from dataclasses import asdict, dataclass
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
from halluscope.text import sentences

PROMPT = "synth.claim"
MAX_TOKENS = 80  # one short claim
SAMPLE = 6  # pairs the summary shows, for a reader to judge them


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


def pairs_of(document: str, parts: Sequence[str], at: int, claim: str) -> list[dict[str, Any]]:
    """The two rows one claim makes: supported against every sentence, unsupported against all but the
    one it rests on (both contexts the sentences joined alike, so the removal is their only difference)."""
    whole = " ".join(parts)
    without = " ".join(s for i, s in enumerate(parts) if i != at)
    made = {"document": document, "sentence": at, "rests_on": parts[at]}
    return [
        {"id": f"{document}/s{at}/supported", "text": claim, "context": [whole], "labels": [0], **made},
        {"id": f"{document}/s{at}/unsupported", "text": claim, "context": [without], "labels": [1], **made},
    ]


def claim_of(reply: ChatReply) -> str | None:
    """The claim a reply wrote (its first line, unquoted), or None where it wrote none."""
    if not reply.ok or not isinstance(reply.parsed, str):
        return None
    line = reply.parsed.strip().splitlines()[0].strip().strip('"').strip()
    return line or None


def synthesize(
    documents: Sequence[Document],
    settings: SynthSettings,
    out: str | Path,
    *,
    model: ModelLike,
    gateway: Gateway,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Write OUT (a labelled JSON Lines file of the pairs) and OUT's .json beside it (what was made and
    what it cost); return that summary. ``progress(done, total)`` after each document."""
    out = Path(out)
    if out.suffix != ".jsonl":
        raise ConfigError(f"out is a .jsonl file (a labelled file checker fit reads), got {out}", settings=("out",))
    began, stats = time.perf_counter(), CallStats()
    rows: list[dict[str, Any]] = []
    unwritten: list[str] = []
    for done, document in enumerate(documents, 1):
        parts = sentences(document.text)
        at = chosen(parts, settings, document.id)
        for i in at:
            variables = {"document": " ".join(parts), "sentence": parts[i]}
            try:
                reply = gateway.call(model, PROMPT, variables, stats=stats, max_tokens=MAX_TOKENS)
            except ModelUnavailableError as exc:  # it gave no answer after its retries: recorded, the rest go on
                unwritten.append(f"{document.id}/s{i}: {exc}")
                continue
            claim = claim_of(reply)
            if claim is None:
                unwritten.append(f"{document.id}/s{i}: {reply.parse_error or 'no claim'}")
                continue
            rows.append({"document": document.id, "parts": parts, "at": i, "claim": claim})
        if progress is not None:
            progress(done, len(documents))
    made = [row for r in rows for row in pairs_of(r["document"], r["parts"], r["at"], r["claim"])]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in made), encoding="utf-8")
    made_by = envelope(
        models=[model_name(model)],
        items=len(documents),
        item="document",
        calls=stats.calls,
        seconds=time.perf_counter() - began,
        cache_hits=stats.cache_hits,
        prompt_tokens=stats.prompt_tokens,
    )
    summary = {
        **made_by,
        "prompt": PROMPT,
        "settings": asdict(settings),
        "documents": len(documents),
        "claims": len(rows),
        "pairs": len(made),
        "unwritten": unwritten,
        "completion_tokens": stats.completion_tokens,
        "sample": made[:SAMPLE],
    }
    write_json(out.with_suffix(".json"), summary)
    return summary
