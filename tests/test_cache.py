"""The disk cache: JSON values, stable keys, and two processes sharing one directory."""

from __future__ import annotations

import json
import multiprocessing
import pickle
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from halluscope.backends.cache import CallCache, call_key
from halluscope.errors import CacheError

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
    assert stats["entries"] == 3 and stats["location"] == str(tmp_path) and stats["bytes"] > 0
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


class _Payload:
    """Unpickling this would create the marker file: proof that a pickle in the cache ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return (Path.touch, (self.marker,))


def test_a_pickled_row_is_refused_never_unpickled(tmp_path: Path) -> None:
    marker = tmp_path / "executed"
    cache = CallCache(tmp_path / "calls")
    cache.set("k", {"text": "Paris"})
    cache.close()
    payload = pickle.dumps(_Payload(marker))
    assert pickle.loads(payload) is None and marker.exists()  # the payload does run when unpickled
    marker.unlink()
    with sqlite3.connect(tmp_path / "calls" / "cache.db") as db:  # tamper: the row now claims to be a pickle
        db.execute("UPDATE Cache SET mode = 4, value = ? WHERE key = 'k'", (sqlite3.Binary(payload),))
    cache = CallCache(tmp_path / "calls")
    with pytest.warns(UserWarning, match="mode 4"):
        assert cache.get("k") is None
    assert not marker.exists()
    cache.set("k", {"text": "Lyon"})  # the refused row is replaced by the next real answer
    assert cache.get("k") == {"text": "Lyon"}


def test_rows_that_are_not_json_objects_are_misses(tmp_path: Path) -> None:
    cache = CallCache(tmp_path)
    cache._store.set("garbage", "not json {")
    cache._store.set("number", 42)
    cache._store.set("list", "[1, 2]")
    for key in ("garbage", "number", "list"):
        with pytest.warns(UserWarning):
            assert cache.get(key) is None


def test_a_large_text_value_lives_in_a_file_and_is_read_back(tmp_path: Path) -> None:
    cache = CallCache(tmp_path)
    big = {"text": "x" * 100_000}
    cache.set("big", big)
    assert cache.get("big") == big


def test_a_cache_path_that_is_a_file_is_one_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "not-a-dir"
    path.write_text("x")
    with pytest.raises(CacheError, match=rf"cannot open the call cache at {path}.*--no-cache.*HALLUSCOPE_CACHE_DIR"):
        CallCache(path)


def test_a_read_only_database_is_one_clear_error_when_written(tmp_path: Path) -> None:
    cache = CallCache(tmp_path)
    cache.set("k", {"text": "Paris"})
    # this thread's connection reopened read-only (as root, a chmod would not stop a write)
    cache._store._local.con = sqlite3.connect(f"file:{tmp_path / 'cache.db'}?mode=ro", uri=True, isolation_level=None)
    assert cache.get("k") == {"text": "Paris"}
    with pytest.raises(CacheError, match=r"cannot write to the call cache at .*readonly database.*--no-cache"):
        cache.set("k2", {"text": "Lyon"})


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_a_damaged_database_is_one_clear_error_and_cache_clear_moves_it_aside(
    tmp_path: Path, damage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from halluscope.cli import main

    cache = CallCache(tmp_path)
    for i in range(200):
        cache.set(f"k{i}", {"text": "x" * 500})
    cache.close()
    database = tmp_path / "cache.db"
    data = database.read_bytes()
    database.write_bytes(b"this is not a database" * 100 if damage == "garbage" else data[:1500])
    with pytest.raises(CacheError, match=r"call cache at .*cache clear"):
        broken = CallCache(tmp_path)
        broken.stats()
        broken.get("k150")
    assert main(["cache", "stats", "--cache-dir", str(tmp_path)]) == 2
    assert "cache clear" in capsys.readouterr().err
    assert main(["cache", "clear", "--cache-dir", str(tmp_path)]) == 0
    assert "moved the damaged cache database aside" in capsys.readouterr().out
    assert len([p for p in tmp_path.glob("cache.db.damaged-*") if p.name[-1].isdigit()]) == 1
    fresh = CallCache(tmp_path)
    assert len(fresh) == 0
    fresh.set("k", {"text": "Paris"})
    assert fresh.get("k") == {"text": "Paris"}


# ---------------------------------------------------------------- issue 32: one miss, one request


_ASKER = """
import sys, time
from halluscope.backends.cache import open_cache
from halluscope.backends.fanout import Ask
from halluscope.backends.gateway import Gateway
from halluscope.prompts.registry import PromptRegistry

location, spec, start = sys.argv[1], sys.argv[2], float(sys.argv[3])
gateway = Gateway(cache=open_cache(location), registry=PromptRegistry(), concurrency=4, timeout=30)
asks = [Ask(spec, "semantic_entropy.answer", {"question": f"Question {i}?"}) for i in range(24)]
time.sleep(max(0.0, start - time.time()))  # both processes begin together
replies = gateway.call_all(asks)
print(sum(r.cached for r in replies), sum(not r.cached for r in replies))
"""


@pytest.mark.slow
@pytest.mark.parametrize("store", ["disk", "redis"])
def test_two_processes_on_one_cache_ask_each_distinct_call_once(tmp_path: Path, store: str) -> None:
    """Two processes, the same 24 calls, one cache: the server sees each call once (it once saw 40)."""
    import subprocess
    import sys
    import time

    from tests.stub_servers import StubAPI, redis_server

    server = None
    location = str(tmp_path / "calls")
    if store == "redis":
        server, location = redis_server(tmp_path)
    try:
        with StubAPI(answer="An answer.", latency=0.2) as stub:
            spec = f"openai-compatible:{stub.base_url}/v1#m"
            start = str(time.time() + 4)
            argv = [sys.executable, "-c", _ASKER, location, spec, start]
            procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) for _ in range(2)]
            outs = [p.communicate(timeout=120)[0].split() for p in procs]
            assert [p.returncode for p in procs] == [0, 0]
            assert len(stub.requests) == 24
            assert sum(int(asked) for _, asked in outs) == 24  # each call asked by one of the two
            assert sum(int(hit) for hit, _ in outs) == 24  # the other process's answers, read from the cache
    finally:
        if server is not None:
            server.kill()


def test_a_claim_held_by_a_crashed_process_blocks_no_longer_than_the_request_timeout(
    tmp_path: Path, scripted: Any
) -> None:
    """A process that claimed a call and died never releases it: the next one waits out the claim (one
    request timeout), then asks the call itself."""
    import time

    from halluscope.backends.cache import call_key
    from halluscope.backends.gateway import Gateway
    from halluscope.prompts.registry import PromptRegistry

    cache = CallCache(tmp_path / "calls")
    assert cache.claim("k", 0.3) and not cache.claim("k", 0.3)  # held
    time.sleep(0.35)
    assert cache.claim("k", 0.3)  # expired: the holder is gone
    cache.release("k")
    asked: list[str] = []
    model = scripted(lambda prompt, _p: asked.append(prompt) or "Paris", "scripted:flight")
    gateway = Gateway(cache=cache, registry=PromptRegistry(), timeout=0.5)
    tpl = gateway.prompt("semantic_entropy.answer")
    messages = tpl.render(question="Capital of France?")
    key = call_key("scripted:flight", {**tpl.params, "n": 1}, messages, 0)
    assert cache.claim(key, 0.5)  # a process that claimed this very call, then crashed
    started = time.monotonic()
    reply = gateway.call(model, "semantic_entropy.answer", {"question": "Capital of France?"})
    waited = time.monotonic() - started
    assert reply.text == "Paris" and len(asked) == 1 and 0.4 < waited < 5
    assert gateway.call(model, "semantic_entropy.answer", {"question": "Capital of France?"}).cached
    assert cache.claim(key, 0.5)  # released once answered
    cache.close()


def test_a_cache_exports_to_gzipped_json_lines_and_a_fresh_cache_resumes_from_it(tmp_path: Path) -> None:
    """A long measurement commits what it sampled beside its record; a rerun on a fresh checkout imports
    it and replays every call from the cache. What a cache already holds stays; a file that is not an
    export, or a row that is not one, is one error and nothing past it is written."""
    import gzip

    from halluscope.backends.cache import CallCache, export_cache, import_cache
    from halluscope.errors import CacheError

    first = CallCache(tmp_path / "first")
    first.set("k1", {"text": "Paris", "logprobs": None})
    first.set("k2", {"text": "Lyon"})
    assert export_cache(first, tmp_path / "run.jsonl.gz") == 2
    fresh = CallCache(tmp_path / "fresh")
    fresh.set("k2", {"text": "kept"})
    assert import_cache(fresh, tmp_path / "run.jsonl.gz") == (1, 1)
    assert fresh.get("k1") == {"text": "Paris", "logprobs": None} and fresh.get("k2") == {"text": "kept"}
    bad = tmp_path / "bad.jsonl.gz"
    with gzip.open(bad, "wt") as out:
        out.write('{"format": "halluscope-cache-export/1"}\n{"key": "k3", "value": "not an object"}\n')
    with pytest.raises(CacheError, match="line 2: not a cached row"):
        import_cache(fresh, bad)
    with gzip.open(bad, "wt") as out:
        out.write('{"key": "k3", "value": {}}\n')
    with pytest.raises(CacheError, match="is not a halluscope cache export"):
        import_cache(fresh, bad)
    assert fresh.get("k3") is None
