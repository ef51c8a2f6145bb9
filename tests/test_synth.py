"""Pairs labelled by construction (issue 72, point 2): a claim resting on one named sentence of a document
is supported by the document and unsupported by it without that sentence; made through the gateway
(cached: a rerun calls nothing), written as a labelled file `checker fit` reads, a bad reply recorded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from halluscope.backends.gateway import Gateway
from halluscope.errors import ConfigError
from halluscope.tune.checker import DataPart, training_pairs
from halluscope.tune.synth import Document, SynthSettings, synthesize

DOCUMENTS = [
    Document(
        "doc-a",
        "Ada Lovelace was born in London in the year 1815. She worked with Charles Babbage on his engine for years. "
        "Her notes on the engine describe an algorithm for Bernoulli numbers. She died in London in the year 1852.",
    ),
    Document(
        "doc-b",
        "The Danube flows through ten countries of central Europe. It rises in the Black Forest of Germany today. "
        "It reaches the Black Sea through a wide delta in Romania. Vienna and Budapest both stand on its banks.",
    ),
    Document("doc-short", "A short document of one sentence with enough words in it."),
]


def writer(prompt: str, _params: dict[str, Any]) -> str:
    """A claim restating the named sentence; none for the Bernoulli sentence (an empty reply)."""
    sentence = prompt.split("One sentence of the document:", 1)[1].split('"""')[1].strip()
    return "" if "Bernoulli" in sentence else f"It is recorded that {sentence[0].lower()}{sentence[1:]}"


def test_a_claim_is_supported_by_its_document_and_not_by_it_without_its_sentence(
    tmp_path: Path, gateway: Gateway, scripted: Any
) -> None:
    calls: list[str] = []
    model = scripted(lambda prompt, params: calls.append(prompt) or writer(prompt, params))
    settings = SynthSettings(per_document=3, min_words=6)
    made = synthesize(DOCUMENTS, settings, tmp_path / "pairs.jsonl", model=model, gateway=gateway)
    rows = [json.loads(line) for line in (tmp_path / "pairs.jsonl").read_text(encoding="utf-8").splitlines()]
    assert made["documents"] == 3 and made["pairs"] == len(rows) == 2 * made["claims"]
    assert {r["document"] for r in rows} == {"doc-a", "doc-b"}  # one sentence: nothing to remove
    bernoulli = [u for u in made["unwritten"] if u.startswith("doc-a/")]
    assert made["claims"] == 6 - len(bernoulli)  # three a document, less the claim the model did not write
    for supported, unsupported in zip(rows[::2], rows[1::2], strict=True):
        sentence = supported["rests_on"]
        assert (supported["labels"], unsupported["labels"]) == ([0], [1]) and supported["text"] == unsupported["text"]
        assert sentence in supported["context"][0] and sentence not in unsupported["context"][0]
        assert supported["context"][0].replace(sentence, "").split() == unsupported["context"][0].split()
    assert made["calls"] + made["cache_hits"] == made["claims"] and made["sample"] == rows[: len(made["sample"])]

    sent = len(calls)
    again = synthesize(DOCUMENTS, settings, tmp_path / "again.jsonl", model=model, gateway=gateway)
    assert all(
        "Bernoulli" in prompt.split("One sentence")[1] for prompt in calls[sent:]
    )  # only the empty reply, uncached
    assert (tmp_path / "again.jsonl").read_bytes() == (tmp_path / "pairs.jsonl").read_bytes()
    assert again["cache_hits"] == made["claims"]

    pairs = training_pairs([DataPart(str(tmp_path / "pairs.jsonl"))])
    assert len(pairs) == len(rows) and sum(p.supported for p in pairs) == made["claims"]


def test_synth_refuses_what_it_cannot_make(tmp_path: Path, gateway: Gateway, scripted: Any) -> None:
    with pytest.raises(ConfigError, match="out is a .jsonl file"):
        synthesize(DOCUMENTS, SynthSettings(), tmp_path / "pairs.csv", model=scripted(writer), gateway=gateway)
    with pytest.raises(ConfigError, match="min_sentences is at least 2"):
        SynthSettings(min_sentences=1)
