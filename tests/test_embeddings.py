"""Sentence embeddings on the offline all-MiniLM-L6-v2."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

from halluscope.backends.embeddings import Embedder
from halluscope.errors import ConfigError


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return Embedder(threads=1)


@pytest.mark.slow
def test_similarity_ranks_paraphrases_first(embedder: Embedder) -> None:
    sims = embedder.similarity(
        ["The cat sits on the mat.", "Paris is the capital of France."],
        ["A cat is sitting on a mat.", "France's capital is Paris.", "Stocks fell sharply today."],
    )
    assert sims.shape == (2, 3)
    assert list(np.argmax(sims, axis=1)) == [0, 1]
    assert sims[0, 0] > 0.8 and sims[0, 2] < 0.3
    vectors = embedder.encode(["one", "two"])
    assert vectors.shape == (2, 384) and np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert embedder.encode([]).shape == (0, 384)


@pytest.mark.slow
def test_nearest_neighbours_skip_the_query_itself(embedder: Embedder) -> None:
    pool = [
        "Who wrote Hamlet?",
        "Who is the author of Macbeth?",
        "What is the boiling point of water?",
        "Which playwright wrote Hamlet?",
    ]
    ((first, second),) = embedder.nearest(["Who wrote Hamlet?"], pool, k=2)
    assert first[0] == 3 and second[0] == 1 and first[1] >= second[1]
    with pytest.raises(ConfigError, match="k must be at least 1"):
        embedder.nearest(["x"], pool, k=0)


@pytest.mark.slow
def test_a_pool_searched_again_is_not_encoded_again(embedder: Embedder, monkeypatch: pytest.MonkeyPatch) -> None:
    encoded: list[list[str]] = []
    encode = embedder.encode

    def counting(texts: Any, batch_size: int = 64) -> Any:
        encoded.append(list(texts))
        return encode(texts, batch_size)

    monkeypatch.setattr(embedder, "encode", counting)
    pool = ["Who wrote Hamlet?", "What is the boiling point of water?", "Which playwright wrote Macbeth?"]
    first = embedder.nearest(["Who is the author of Hamlet?"], pool, k=2)
    second = embedder.nearest(["Who is the author of Hamlet?"], list(pool), k=2)
    assert first == second
    assert encoded.count(pool) == 1 and encoded.count(["Who is the author of Hamlet?"]) == 2
    embedder.nearest(["x"], pool[:2], k=1)  # another pool is encoded
    assert encoded[-1] == pool[:2]


@pytest.mark.slow
def test_concurrent_first_searches_of_a_pool_encode_it_once(
    embedder: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    encoded: list[list[str]] = []
    encode = embedder.encode

    def slow_counting(texts: Any, batch_size: int = 64) -> Any:
        encoded.append(list(texts))
        time.sleep(0.05)  # keeps the first encoding running while the other workers arrive
        return encode(texts, batch_size)

    monkeypatch.setattr(embedder, "encode", slow_counting)
    pool = ["Where is Kyoto?", "How tall is Everest?", "Who painted the Mona Lisa?"]  # not searched before
    with ThreadPoolExecutor(max_workers=4) as workers:
        results = list(workers.map(lambda q: embedder.nearest([q], pool, k=1), ["a", "b", "c", "d"]))
    assert len(results) == 4
    assert encoded.count(pool) == 1


def test_the_default_embedder_is_loaded_once_per_process() -> None:
    from halluscope.backends.embeddings import default_embedder

    assert default_embedder() is default_embedder()
