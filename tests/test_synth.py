"""Pairs labelled by construction (issue 72, point 2): a claim resting on one named sentence of a document
is supported by the document and unsupported by it without that sentence; made through the gateway
(cached: a rerun calls nothing), written as a labelled file `checker fit` reads, a bad reply recorded."""

from __future__ import annotations

import json
import re
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


MOUNTAIN = Document(
    "doc-mountain",
    "Mount Kosciuszko is the highest mountain of Australia. It stands in the Snowy Mountains of New South Wales. "
    "The highest mountain of Australia is Mount Kosciuszko, as surveys show.",
)


def by_words(prompt: str, _params: dict[str, Any]) -> str:
    """A judge that finds a claim supported where its context holds every word of it (past its opening)."""
    context = prompt.split("Context: ", 1)[1].split("Sentence: ", 1)[0]
    claim = prompt.split("Sentence: ", 1)[1].split("Is the sentence supported", 1)[0].split("recorded that", 1)[-1]
    held = set(re.findall(r"\w+", context.lower()))
    return "Yes" if set(re.findall(r"\w+", claim.lower())) <= held else "No"


def test_a_judge_keeps_only_the_claims_whose_two_labels_it_finds(
    tmp_path: Path, gateway: Gateway, scripted: Any
) -> None:
    """The first sentence of the mountain is restated by its third, so its removal leaves the claim
    supported (the unsupported pair would be mislabelled); the writer adds a place to Babbage's sentence,
    which its own sentence does not support: both are dropped, each with why."""

    def adding(prompt: str, params: dict[str, Any]) -> str:
        claim = writer(prompt, params)
        return claim.rstrip(".") + " in Paris." if "Babbage" in claim else claim

    settings = SynthSettings(per_document=3, min_words=6)
    judge = scripted(by_words, model_id="scripted:judge")
    made = synthesize(
        [DOCUMENTS[0], MOUNTAIN], settings, tmp_path / "v.jsonl", model=scripted(adding), gateway=gateway, judge=judge
    )
    rows = [json.loads(line) for line in (tmp_path / "v.jsonl").read_text(encoding="utf-8").splitlines()]
    whys = {d["id"]: d["why"] for d in made["dropped"]}
    assert whys == {"doc-a/s1": "not supported by its sentence", "doc-mountain/s0": "supported without its sentence"}
    assert made["written"] == 5 and made["claims"] == 3 and len(rows) == 6  # Bernoulli's claim was never written
    assert {r["id"].rsplit("/", 1)[0] for r in rows} == {"doc-a/s0", "doc-mountain/s1", "doc-mountain/s2"}
    assert all(r["verified"] == {"against_sentence": 0.0, "without_sentence": 1.0} for r in rows)
    assert made["judge"] == "scripted:judge" and made["judge_calls"] == 2 * made["written"]
    assert made["models"] == ["scripted:test", "scripted:judge"]
    again = synthesize(
        [DOCUMENTS[0], MOUNTAIN], settings, tmp_path / "w.jsonl", model=scripted(adding), gateway=gateway, judge=judge
    )
    assert again["judge_calls"] == 0 and again["dropped"] == made["dropped"]  # the judge's checks are cached


def test_synth_refuses_what_it_cannot_make(tmp_path: Path, gateway: Gateway, scripted: Any) -> None:
    with pytest.raises(ConfigError, match="out is a .jsonl file"):
        synthesize(DOCUMENTS, SynthSettings(), tmp_path / "pairs.csv", model=scripted(writer), gateway=gateway)
    with pytest.raises(ConfigError, match="min_sentences is at least 2"):
        SynthSettings(min_sentences=1)


def test_checker_synth_verifies_from_the_command_line(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Plumbing: a judge that answers Yes to everything finds each claim supported without its sentence
    too, so the command drops them all and says why."""
    from halluscope.cli import main
    from tests.stub_servers import StubAPI

    with StubAPI(answer="Yes") as stub:
        spec = f"openai-compatible:{stub.base_url}/v1#stub"
        argv = ["checker", "synth", "--model", spec, "--verify", spec, "--documents", "0-1", "--per-document", "1"]
        assert main([*argv, "--data-dir", str(data_dir), "--out", str(tmp_path / "p.jsonl")]) == 0
    printed = capsys.readouterr().out
    assert "stub kept 0 of 2 claims written (dropped: 2 supported without its sentence)" in printed
    summary = json.loads((tmp_path / "p.json").read_text(encoding="utf-8"))
    assert summary["pairs"] == 0 and [d["why"] for d in summary["dropped"]] == ["supported without its sentence"] * 2
