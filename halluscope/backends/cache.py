"""The call cache: on disk (diskcache, SQLite underneath: safe across the processes of one machine), or
in a Redis server that every node of a cluster shares (``open_cache('redis://host:6379/0')``).

Keys are hashes of model spec + call parameters + rendered messages + sample index, so N samples at
temperature 1 are N distinct entries and a rerun replays them exactly. Values are JSON text, never
pickles, and never hold an API key (keys are read from the environment by the client, not here).

Reading is as strict as writing: diskcache would unpickle any row marked as a pickle (code execution
from a tampered cache.db), so the cache reads through a Disk that returns JSON text and refuses
anything else; a refused or unreadable row is a miss with a warning. A cache that cannot be opened or
written (read-only, damaged, a file where the directory should be) is one ``CacheError`` naming the
directory and the ways out.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import diskcache
import platformdirs

from halluscope.errors import CacheError, redact_credentials

CACHE_ENV = "HALLUSCOPE_CACHE_DIR"
CACHE_URL_ENV = "HALLUSCOPE_CACHE_URL"  # a directory or redis://host:port/db; wins over CACHE_ENV
KEY_VERSION = "call-v1"
DATABASE = "cache.db"  # diskcache's file name for its SQLite database
FLIGHTS = "flights"  # the sub-directory holding which process asks which call now (single-flight claims)
REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


def default_cache_dir() -> Path:
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else Path(platformdirs.user_cache_dir("halluscope")) / "calls"


def default_cache_location() -> str:
    """HALLUSCOPE_CACHE_URL, else HALLUSCOPE_CACHE_DIR, else the user cache dir."""
    return os.environ.get(CACHE_URL_ENV) or str(default_cache_dir())


def open_cache(location: str | Path | None = None) -> CallCache | RedisCache:
    """The cache at ``location``: a redis:// URL (a Redis server) or a directory (the default one when None)."""
    where = str(location) if location is not None else default_cache_location()
    return RedisCache(where) if where.startswith(REDIS_SCHEMES) else CallCache(where)


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


class UnsafeRowError(Exception):
    """A cache row that is not JSON text (a pickle, bytes, a number): refused, never decoded."""


class JSONTextDisk(diskcache.Disk):
    """diskcache's Disk restricted to text: keys and values that are str, stored in the database or in
    a text file. Rows of any other mode (above all MODE_PICKLE) raise instead of being unpickled."""

    def get(self, key: Any, raw: bool) -> Any:
        if not raw or not isinstance(key, str):
            raise UnsafeRowError("a cache key that is not text")
        return key

    def fetch(self, mode: int, filename: str | None, value: Any, read: bool) -> Any:
        if mode == diskcache.core.MODE_RAW and isinstance(value, str):
            return value
        if mode == diskcache.core.MODE_TEXT and filename is not None and not read:
            return super().fetch(mode, filename, value, read)
        raise UnsafeRowError(f"a cache row of mode {mode} (only text is read)")


def _ways_out(directory: Path) -> str:
    return (
        f"run with --no-cache (HALLUSCOPE_NO_CACHE=1), point {CACHE_ENV} at another directory, "
        f"or run `halluscope cache clear` to move a damaged {directory / DATABASE} aside"
    )


class CallCache:
    """A directory of cached model answers; one instance per process, any number of processes."""

    def __init__(self, directory: str | Path | None = None) -> None:
        self.directory = Path(directory) if directory is not None else default_cache_dir()
        with self._errors("open"):
            self.directory.mkdir(parents=True, exist_ok=True)
            # eviction off: a cached sample is evidence of a past run, not a disposable speed-up
            self._store = diskcache.Cache(str(self.directory), eviction_policy="none", timeout=60, disk=JSONTextDisk)
            self._flights = diskcache.Cache(str(self.directory / FLIGHTS), timeout=60, disk=JSONTextDisk)

    @contextmanager
    def _errors(self, action: str) -> Iterator[None]:
        """sqlite and OS errors become one line that names the directory and the ways out."""
        try:
            yield
        except (sqlite3.Error, OSError) as exc:
            raise CacheError(
                f"cannot {action} the call cache at {self.directory} ({type(exc).__name__}: {exc}); "
                + _ways_out(self.directory)
            ) from exc

    def get(self, key: str) -> dict[str, Any] | None:
        """The cached answer, or None; a row that is not a JSON object is a miss, with a warning."""
        with self._errors("read"):
            try:
                raw = self._store.get(key)
            except UnsafeRowError as exc:
                warnings.warn(f"ignored {exc} in {self.directory} (key {key[:12]}...)", stacklevel=2)
                return None
        return _json_object(raw, str(self.directory))

    def set(self, key: str, value: Mapping[str, Any]) -> None:
        with self._errors("write to"):
            self._store.set(key, json.dumps(value, ensure_ascii=False))

    def claim(self, key: str, seconds: float) -> bool:
        """Become the one process (or thread) that asks this call, for at most ``seconds`` (a holder that
        crashed blocks no one longer); False while another holds it. Atomic across processes (SQLite)."""
        with self._errors("write to"):
            return bool(self._flights.add(key, "asking", expire=seconds))

    def release(self, key: str) -> None:
        """The call is answered (and cached) or failed for good: another process may ask it now."""
        with self._errors("write to"):
            self._flights.delete(key)

    def __len__(self) -> int:
        with self._errors("read"):
            return len(self._store)

    @property
    def location(self) -> str:
        return str(self.directory)

    def stats(self) -> dict[str, Any]:
        with self._errors("read"):
            return {"location": self.location, "entries": len(self._store), "bytes": self._store.volume()}

    def clear(self) -> int:
        with self._errors("clear"):
            return self._store.clear()

    def cached_keys(self) -> list[str]:
        with self._errors("read"):
            return sorted(str(key) for key in self._store.iterkeys())

    def close(self) -> None:
        self._store.close()
        self._flights.close()


def _json_object(raw: str | None, where: str) -> dict[str, Any] | None:
    """A cached row read back: the JSON object, or None (a miss; with a warning when it is not one)."""
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        warnings.warn(f"ignored a cache row that is not a JSON object in {where}", stacklevel=3)
        return None
    return value


class RedisCache:
    """The call cache in a Redis server, for a cluster: the same keys (under ``halluscope:call:``) and the
    same JSON text as on disk; no pickles, no API keys. A server that cannot be reached when the cache
    opens is a ``CacheError``; one that fails mid-run turns the cache off for the rest of the process
    with one warning, and the calls go on uncached (a batch never dies with its cache)."""

    PREFIX = "halluscope:call:"
    FLIGHT = "halluscope:flight:"  # which process asks which call now (SET NX with an expiry)

    def __init__(self, url: str) -> None:
        try:
            import redis
        except ImportError as exc:
            raise CacheError(
                f"a redis:// call cache needs the redis client: pip install 'halluscope[ray]' ({exc})"
            ) from exc
        self.url = url
        self._server_errors: tuple[type[Exception], ...] = (redis.RedisError, OSError)
        self._down = False
        self._lock = threading.Lock()
        with self._errors("open"):
            self._client = redis.Redis.from_url(url, decode_responses=True, socket_timeout=10, socket_connect_timeout=5)
            self._client.ping()

    @contextmanager
    def _errors(self, action: str) -> Iterator[None]:
        """A server error outside a model call (opening, stats, clear; a malformed URL) becomes one line
        naming the URL."""
        try:
            yield
        except (*self._server_errors, ValueError) as exc:
            raise CacheError(
                f"cannot {action} the call cache at {self.location} ({type(exc).__name__}: {exc}); start the "
                "server, or run without the cache (cache=None; HALLUSCOPE_NO_CACHE=1) or with another one"
            ) from exc

    @property
    def location(self) -> str:
        return redact_credentials(self.url)

    @property
    def client(self) -> Any:
        """The server's connection: what else this cluster shares there (``limits.redis_limits``) uses it."""
        return self._client

    @property
    def server_errors(self) -> tuple[type[Exception], ...]:
        return self._server_errors

    @property
    def down(self) -> bool:
        """Whether the server failed mid-run (the cache is off from then on)."""
        return self._down

    def _lost(self, exc: Exception) -> None:
        with self._lock:
            if self._down:
                return
            self._down = True
        warnings.warn(
            f"the call cache at {self.location} failed ({type(exc).__name__}: {exc}); "
            "the calls go on uncached for the rest of this run",
            stacklevel=3,
        )

    def get(self, key: str) -> dict[str, Any] | None:
        if self._down:
            return None
        try:
            raw = self._client.get(self.PREFIX + key)
        except self._server_errors as exc:
            self._lost(exc)
            return None
        return _json_object(raw if isinstance(raw, str) else None, self.location)

    def set(self, key: str, value: Mapping[str, Any]) -> None:
        if self._down:
            return
        try:
            self._client.set(self.PREFIX + key, json.dumps(value, ensure_ascii=False))
        except self._server_errors as exc:
            self._lost(exc)

    def claim(self, key: str, seconds: float) -> bool:
        """``CallCache.claim`` on the server (SET NX EX): one process of the cluster asks the call; a
        server that fails lets every process ask (the calls go on, uncached)."""
        if self._down:
            return True
        try:
            return bool(self._client.set(self.FLIGHT + key, "asking", nx=True, px=max(1, int(seconds * 1000))))
        except self._server_errors as exc:
            self._lost(exc)
            return True

    def release(self, key: str) -> None:
        if self._down:
            return
        try:
            self._client.delete(self.FLIGHT + key)
        except self._server_errors as exc:
            self._lost(exc)

    def _keys(self) -> list[str]:
        with self._errors("read"):
            return list(self._client.scan_iter(match=self.PREFIX + "*", count=1000))

    def __len__(self) -> int:
        return len(self._keys())

    def stats(self) -> dict[str, Any]:
        keys = self._keys()
        with self._errors("read"):
            size = sum(int(self._client.strlen(k)) for k in keys)
        return {"location": self.location, "entries": len(keys), "bytes": size}

    def cached_keys(self) -> list[str]:
        return sorted(key.removeprefix(self.PREFIX) for key in map(str, self._keys()))

    def clear(self) -> int:
        keys = self._keys()
        with self._errors("clear"):
            for start in range(0, len(keys), 1000):
                self._client.delete(*keys[start : start + 1000])
        return len(keys)

    def close(self) -> None:
        self._client.close()


EXPORT_FORMAT = "halluscope-cache-export/1"  # the first line of an export names its format


def export_cache(cache: CallCache | RedisCache, path: str | Path) -> int:
    """Every cached answer of ``cache`` as gzipped JSON lines (a header line, then one ``{"key", "value"}``
    a row, in key order): a measurement's sampled answers, samples and verdicts, small enough to commit
    beside its record, so a rerun on a fresh checkout resumes from them (``import_cache``)."""
    import gzip

    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    written = 0
    with gzip.open(target, "wt", encoding="utf-8", compresslevel=9) as out:
        out.write(json.dumps({"format": EXPORT_FORMAT}) + "\n")
        for key in cache.cached_keys():
            value = cache.get(key)
            if value is None:
                continue
            out.write(json.dumps({"key": key, "value": value}, ensure_ascii=False, sort_keys=True) + "\n")
            written += 1
    return written


def import_cache(cache: CallCache | RedisCache, path: str | Path) -> tuple[int, int]:
    """An export's rows written into ``cache`` where it holds none under the key (what it holds stays):
    (written, already held). The file is read as JSON text only; a line that is not a row is one
    error naming the line, nothing written past it."""
    import gzip

    written = held = 0
    try:
        with gzip.open(path, "rt", encoding="utf-8") as lines:
            header = json.loads(next(lines, "{}"))
            if header.get("format") != EXPORT_FORMAT:
                raise CacheError(f"{path} is not a halluscope cache export (its first line names no {EXPORT_FORMAT})")
            for number, line in enumerate(lines, start=2):
                row = json.loads(line)
                if (
                    not isinstance(row, dict)
                    or not isinstance(row.get("key"), str)
                    or not isinstance(row.get("value"), dict)
                ):
                    raise CacheError(f"{path}, line {number}: not a cached row (a key and a JSON object)")
                if cache.get(row["key"]) is not None:
                    held += 1
                    continue
                cache.set(row["key"], row["value"])
                written += 1
    except (OSError, EOFError, ValueError, RecursionError) as exc:
        raise CacheError(f"cannot read the cache export {path}: {type(exc).__name__}: {exc}") from None
    return written, held


def move_aside(directory: str | Path) -> Path | None:
    """Rename a cache directory's database that cannot be opened to ``cache.db.damaged-<time>`` (kept,
    not deleted: it may hold answers worth recovering); returns the new path, or None if none was there."""
    database = Path(directory) / DATABASE
    if not database.is_file():
        return None
    target = database.with_name(f"{DATABASE}.damaged-{time.strftime('%Y%m%d-%H%M%S')}")
    try:
        database.rename(target)
        for suffix in ("-wal", "-shm"):  # SQLite's side files belong to the damaged database
            side = database.with_name(DATABASE + suffix)
            if side.exists():
                side.rename(target.with_name(target.name + suffix))
    except OSError as exc:
        raise CacheError(f"cannot move the damaged {database} aside ({exc}); remove it by hand") from exc
    return target
