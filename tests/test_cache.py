"""The disk cache: JSON values, stable keys, and two processes sharing one directory."""

from __future__ import annotations

import json
import multiprocessing
import sqlite3
from pathlib import Path

from halluscope.backends.cache import CallCache, call_key

MESSAGES = [{"role": "user", "content": "Question: q"}]


def test_key_depends_on_every_part_and_ignores_dict_order() -> None:
    base = call_key("openai:m", {"temperature": 1.0, "top_p": 0.9}, MESSAGES, 0)
    assert base == call_key("openai:m", {"top_p": 0.9, "temperature": 1.0}, MESSAGES, 0)
    assert base == call_key("openai:m", {"top_p": 0.9, "temperature": 1.0, "stop": None}, MESSAGES, 0)
    others = {
        call_key("openai:other", {"temperature": 1.0, "top_p": 0.9}, MESSAGES, 0),
        call_key("openai:m", {"temperature": 0.5, "top_p": 0.9}, MESSAGES, 0),
        call_key("openai:m", {"temperature": 1.0, "top_p": 0.9, "n": 2}, MESSAGES, 0),
        call_key("openai:m", {"temperature": 1.0, "top_p": 0.9}, [{"role": "user", "content": "Question: r"}], 0),
        call_key("openai:m", {"temperature": 1.0, "top_p": 0.9}, [{"role": "system", "content": "Question: q"}], 0),
        call_key("openai:m", {"temperature": 1.0, "top_p": 0.9}, MESSAGES, 1),
    }
    assert base not in others and len(others) == 6


def test_values_are_stored_as_json_text_not_pickles(tmp_path: Path) -> None:
    cache = CallCache(tmp_path)
    cache.set("k", {"text": "Paris", "prompt_tokens": 3})
    assert cache.get("k") == {"text": "Paris", "prompt_tokens": 3}
    assert cache.get("missing") is None
    cache.close()
    with sqlite3.connect(tmp_path / "cache.db") as db:
        ((mode, value),) = db.execute("SELECT mode, value FROM Cache WHERE key = 'k'").fetchall()
    assert mode != 4  # diskcache MODE_PICKLE; a short str is stored raw (mode 1) as SQL text
    assert isinstance(value, str) and json.loads(value) == {"text": "Paris", "prompt_tokens": 3}


def test_stats_and_clear(tmp_path: Path) -> None:
    cache = CallCache(tmp_path)
    for i in range(3):
        cache.set(f"k{i}", {"text": str(i)})
    stats = cache.stats()
    assert stats["entries"] == 3 and stats["directory"] == str(tmp_path) and stats["bytes"] > 0
    assert cache.clear() == 3 and len(cache) == 0


def _writer(directory: str, worker: int, count: int) -> None:
    cache = CallCache(directory)
    for i in range(count):
        cache.set(f"w{worker}-{i}", {"text": f"answer {worker}/{i}", "shared": "x" * 200})
        cache.set("contended", {"text": f"from {worker}"})
        assert cache.get(f"w{worker}-{i}") is not None
    cache.close()


def test_two_processes_share_one_cache_directory_without_corruption(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), w, 150)) for w in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0, 0]
    cache = CallCache(tmp_path)
    assert len(cache) == 2 * 150 + 1
    for w in range(2):
        for i in range(150):
            assert cache.get(f"w{w}-{i}") == {"text": f"answer {w}/{i}", "shared": "x" * 200}
    assert cache.get("contended") in ({"text": "from 0"}, {"text": "from 1"})
    with sqlite3.connect(tmp_path / "cache.db") as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
