"""Sentences and tokens, split the way the WikiBio benchmark and SelfCheckGPT split them: spaCy's
rule-based English tokenizer (``spacy.blank("en")`` has en_core_web_sm's tokenizer rules and needs
no model download) and its rule-based sentencizer."""

from __future__ import annotations

import threading
from collections import Counter
from functools import lru_cache
from typing import Any

_lock = threading.Lock()


@lru_cache(maxsize=1)
def _pipeline() -> Any:
    import spacy

    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    return nlp


def _nlp(text: str) -> Any:
    """The pipeline, its length limit raised for a long text: spaCy refuses texts over 1,000,000
    characters to bound the parser's and NER's memory, and this pipeline has neither (its tokenizer
    and sentencizer are rule-based and linear). Call under ``_lock``."""
    nlp = _pipeline()
    if len(text) >= nlp.max_length:
        nlp.max_length = len(text) + 1
    return nlp


def tokens(text: str, lowercase: bool = True) -> list[str]:
    """spaCy tokens of a text, tokenised in its own case and lowercased after, as SelfCheckGPT's n-gram
    model does (lowercasing first would split "U.S.", "St." or "word.Word" differently)."""
    with _lock:
        doc = _nlp(text).make_doc(text)
    return [t.text.lower() if lowercase else t.text for t in doc]


def passage_tokens(text: str) -> list[str]:
    """A passage's tokens as SelfCheckGPT's n-gram model counts them: split into sentences, each
    stripped and tokenised on its own (no whitespace tokens between sentences), lowercased."""
    return [t for sentence in sentences(text) for t in tokens(sentence)]


def sentences(text: str) -> list[str]:
    """Sentences of a user's text; empty and whitespace-only pieces are dropped."""
    with _lock:
        doc = _nlp(text)(text)
    return [s.text.strip() for s in doc.sents if s.text.strip()]


def ends_sentence(text: str) -> bool:
    """Whether a text ends as a sentence does (. ! ? or an ellipsis, before closing quotes or brackets)."""
    return text.rstrip().rstrip("\"'”’)]").endswith((".", "!", "?", "…"))


def content_words(text: str) -> set[str]:
    """Lower-cased tokens that carry content: no stop words, punctuation or spaces."""
    with _lock:
        doc = _nlp(text).make_doc(text.lower())
    return {t.text for t in doc if not (t.is_stop or t.is_punct or t.is_space)}


def spans_of(units: list[str], answer: str) -> list[list[tuple[int, int]]]:
    """Where each unit lies in the answer, in its characters: a unit that is the answer's own text (a
    sentence) is found in order; a claim written from it is pointed at by its content words in the
    answer's sentence that shares the most of them (each word's own span: the words a reader checks).
    A unit that shares no content word with the answer gets no span."""
    with _lock:
        doc = _nlp(answer)(answer)
    words = [(t.idx, t.idx + len(t.text), t.text.lower()) for t in doc if not (t.is_stop or t.is_punct or t.is_space)]
    bounds = [(s.start_char, s.end_char) for s in doc.sents]
    found: list[list[tuple[int, int]]] = []
    cursor = 0
    for unit in units:
        text = unit.strip()
        at = answer.find(text, cursor) if text else -1
        at = at if at >= 0 or not text else answer.find(text)
        if at >= 0:
            found.append([(at, at + len(text))])
            cursor = at + len(text)
            continue
        wanted = content_words(text)
        hits = [[(a, b) for a, b, w in words if lo <= a < hi and w in wanted] for lo, hi in bounds]
        best = max(hits, key=len, default=[])
        found.append(best)
    return found


def align_claims(claims: list[str], sentences: list[str]) -> list[list[int]]:
    """Which claims each sentence holds: a claim goes to the sentence that shares most of its content
    words, each word weighted 1 / (number of claims that use it) so that the subject's name, repeated
    in every claim where the text says "she", does not pull all claims to the first sentence (ties go
    to the earlier sentence); a sentence left without a claim takes the claim that covers most of its
    own content words, so every sentence gets a score."""
    if not claims:
        return [[] for _ in sentences]
    claim_words = [content_words(c) for c in claims]
    sentence_words = [content_words(s) for s in sentences]
    used = Counter(w for words in claim_words for w in words)

    def weight(words: set[str]) -> float:
        return sum(1 / used[w] for w in words if w in used)

    held: list[list[int]] = [[] for _ in sentences]
    for i, words in enumerate(claim_words):
        overlap = [weight(words & s) for s in sentence_words]
        held[overlap.index(max(overlap))].append(i)
    for j, words in enumerate(sentence_words):
        if not held[j]:
            covered = [weight(words & c) for c in claim_words]
            held[j].append(covered.index(max(covered)))
    return held


def checked_text(value: Any, name: str) -> str:
    """A user's text as a str: bytes, numbers or None are a ConfigError naming the input, not a crash
    deep in a tokenizer or a prompt."""
    from halluscope.errors import ConfigError

    if not isinstance(value, str):
        hint = " (decode bytes first, e.g. data.decode('utf-8'))" if isinstance(value, bytes | bytearray) else ""
        raise ConfigError(f"{name} must be text (str), got {type(value).__name__}{hint}")
    return unicode_text(value, name)


def unicode_text(value: str, name: str) -> str:
    """``value`` when it is valid Unicode: a lone surrogate ('\\ud800', which JSON lets through) is a
    ConfigError naming the input and the position, not a crash in a tokenizer, a cache or a reply."""
    from halluscope.errors import ConfigError

    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ConfigError(
            f"{name} is not valid Unicode: a lone surrogate {value[exc.start]!r} at character {exc.start}"
        ) from None
    return value


def checked_texts(value: Any, name: str) -> list[str]:
    """A list of user texts (samples, answers, sentences): a lone string (which would be iterated as
    characters), a None or a blank item is a ConfigError naming the input and the item."""
    from halluscope.errors import ConfigError

    if isinstance(value, str | bytes) or not isinstance(value, list | tuple):
        raise ConfigError(f"{name} must be a list of texts, got {type(value).__name__}")
    for i, item in enumerate(value):
        if not isinstance(item, str) or not item.strip():
            raise ConfigError(f"{name}[{i}] must be a non-empty text, got {item!r}")
        unicode_text(item, f"{name}[{i}]")
    return list(value)


def checked_passage(
    text: Any, sentences: Any = None, samples: Any = None
) -> tuple[str | None, list[str] | None, list[str] | None]:
    """A passage method's inputs checked: the text (or None), its sentences and samples (or None)."""
    return (
        None if text is None else checked_text(text, "text"),
        None if sentences is None else checked_texts(sentences, "sentences"),
        None if samples is None else checked_texts(samples, "samples"),
    )


# ---------------------------------------------------------------- a context, in chunks (grounded's, a checker's)

CHUNK_WORDS = 300  # about 400 tokens: a chunk, the sentence and the prompt fit a 2,048-token window
OVERLAP_WORDS = 50


def _words(text: str) -> int:
    return len(text.split())


def _pieces(document: str, words: int) -> list[str]:
    """A document's sentences, any sentence longer than a chunk cut into pieces of ``words`` words."""
    out = []
    for sentence in sentences(document) or [document]:
        tokens = sentence.split()
        out.extend(" ".join(tokens[i : i + words]) for i in range(0, len(tokens), words))
    return [p for p in out if p.strip()]


def chunk_context(documents: list[str], words: int = CHUNK_WORDS, overlap: int = OVERLAP_WORDS) -> list[str]:
    """Each document as chunks of whole sentences of at most ``words`` words (whitespace-separated; a
    word is about 1.3 tokens of a BPE vocabulary), consecutive chunks of one document sharing their
    boundary sentences up to ``overlap`` words, so a fact stated across a boundary is whole in one of
    them. A document that fits is one chunk, unchanged."""
    return [chunk for chunk, _ in chunks_of(documents, words, overlap)]


def chunks_of(documents: list[str], words: int = CHUNK_WORDS, overlap: int = OVERLAP_WORDS) -> list[tuple[str, int]]:
    """``chunk_context``'s chunks, each with the index of the document it comes from."""
    from halluscope.errors import ConfigError

    if words < 1 or not 0 <= overlap < words:
        raise ConfigError(f"chunks need chunk_words >= 1 and 0 <= overlap_words < chunk_words, got {words}/{overlap}")
    chunks: list[tuple[str, int]] = []
    for index, document in enumerate(documents):
        if _words(document) <= words:
            chunks.append((document.strip(), index))
            continue
        current: list[str] = []
        for piece in _pieces(document, words):
            if current and sum(map(_words, current)) + _words(piece) > words:
                chunks.append((" ".join(current), index))
                carried: list[str] = []
                for kept in reversed(current):  # the boundary sentences the next chunk repeats
                    if sum(map(_words, carried)) + _words(kept) > overlap:
                        break
                    carried.insert(0, kept)
                while carried and sum(map(_words, carried)) + _words(piece) > words:
                    carried.pop(0)
                current = carried
            current.append(piece)
        if current:
            chunks.append((" ".join(current), index))
    return chunks
