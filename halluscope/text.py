"""Sentences and tokens, split the way the WikiBio benchmark and SelfCheckGPT split them: spaCy's
rule-based English tokenizer (``spacy.blank("en")`` has en_core_web_sm's tokenizer rules and needs
no model download) and its rule-based sentencizer."""

from __future__ import annotations

import threading
from functools import lru_cache
from typing import Any

_lock = threading.Lock()


@lru_cache(maxsize=1)
def _nlp() -> Any:
    import spacy

    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    return nlp


def tokens(text: str, lowercase: bool = True) -> list[str]:
    """spaCy tokens of a text (lowercased first, as SelfCheckGPT's n-gram model does)."""
    with _lock:
        doc = _nlp().make_doc(text.lower() if lowercase else text)
    return [t.text for t in doc]


def sentences(text: str) -> list[str]:
    """Sentences of a user's text; empty and whitespace-only pieces are dropped."""
    with _lock:
        doc = _nlp()(text)
    return [s.text.strip() for s in doc.sents if s.text.strip()]
