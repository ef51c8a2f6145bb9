"""Disk cache of model calls (diskcache, SQLite underneath: safe across processes).

Keys are hashes of model spec + call parameters + rendered messages + sample index, so N samples at
temperature 1 are N distinct entries and a rerun replays them exactly. Values are JSON text, never
pickles, and never hold an API key (keys are read from the environment by the client, not here).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import diskcache
import platformdirs

CACHE_ENV = "HALLUSCOPE_CACHE_DIR"
KEY_VERSION = "call-v1"


def default_cache_dir() -> Path:
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else Path(platformdirs.user_cache_dir("halluscope")) / "calls"


def call_key(
    model: str,
    params: Mapping[str, Any],
    messages: Sequence[Mapping[str, str]],
    sample_index: int,
) -> str:
    """Canonical JSON of everything that determines an answer, hashed."""
    body = {
        "v": KEY_VERSION,
        "model": model,
        "params": {k: params[k] for k in sorted(params) if params[k] is not None},
        "messages": [{"role": m["role"], "content": m["content"]} for m in messages],
        "sample_index": sample_index,
    }
    canonical = json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


class CallCache:
    """A directory of cached model answers; one instance per process, any number of processes."""

    def __init__(self, directory: str | Path | None = None) -> None:
        self.directory = Path(directory) if directory is not None else default_cache_dir()
        self.directory.mkdir(parents=True, exist_ok=True)
        # eviction off: a cached sample is evidence of a past run, not a disposable speed-up
        self._store = diskcache.Cache(str(self.directory), eviction_policy="none", timeout=60)

    def get(self, key: str) -> dict[str, Any] | None:
        raw = self._store.get(key)
        return None if raw is None else json.loads(raw)

    def set(self, key: str, value: Mapping[str, Any]) -> None:
        self._store.set(key, json.dumps(value, ensure_ascii=False))

    def __len__(self) -> int:
        return len(self._store)

    def stats(self) -> dict[str, Any]:
        return {"directory": str(self.directory), "entries": len(self._store), "bytes": self._store.volume()}

    def clear(self) -> int:
        return self._store.clear()

    def close(self) -> None:
        self._store.close()
