"""Scale-out on real parts: a two-node Ray cluster on this machine, a real redis-server on 127.0.0.1, and
the OpenAI-compatible stub server with latency. Ray and the redis client come with the `ray` extra
(the README's test command installs it); redis-server is Debian's package (`.ci/run` installs it)."""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import halluscope
from halluscope import scale
from halluscope.backends.cache import RedisCache, open_cache
from halluscope.backends.gateway import Gateway
from halluscope.backends.limits import ModelLimiter, use_shared_limits
from halluscope.bench.planted import BIOGRAPHIES
from halluscope.bench.runner import BenchResult
from halluscope.cli import main
from halluscope.detectors import _DetectJob
from halluscope.errors import CacheError, ConfigError
from tests.stub_servers import StubAPI, redis_server

try:  # the README's test command installs the ray extra: without it these tests fail, they never skip
    import ray
except ImportError as exc:
    raise ImportError(f"tests/test_scale.py needs Ray: pip install -e '.[dev,local,ray]' ({exc})") from exc


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    """A head node and a second node, two CPUs each, as separate raylets on this machine."""
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
    c.add_node(num_cpus=2)
    ray.init(address=c.address, namespace=scale.NAMESPACE, log_to_driver=False)
    c.wait_for_nodes()
    yield c
    ray.shutdown()
    c.shutdown()


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    server, url = redis_server(tmp_path)
    yield url
    server.kill()
    server.wait()


def _items(n: int) -> list[dict[str, Any]]:
    """SelfCheck-Prompt items on given samples: 2 sentences x 2 samples = 4 calls each; item 3 is blank."""
    items = [
        {"text": f"Person {i} was born in Ulm. Person {i} played the violin.", "samples": ["Born in Ulm.", "A violin."]}
        for i in range(n)
    ]
    if n > 3:
        items[3] = {"text": "  ", "samples": ["x"]}
    return items


def _scores(results: list[Any]) -> list[Any]:
    return [([u.score for u in r.units], r.error) for r in results]


def test_ray_gives_the_thread_executors_results_in_order_under_one_cluster_limit(cluster: Any) -> None:
    """4 workers of 4 items each would send 16 requests at once; the model's cluster-wide limit of 3 holds."""
    with StubAPI(latency=0.05) as stub:
        stub.answers_by_content = {"Person 1 ": "No", "Person 2 was born": "No"}
        spec = f"openai-compatible:{stub.base_url}/v1#stub"
        det = halluscope.detector("selfcheck-prompt", model=spec, gateway=Gateway(cache=None, concurrency=3))
        items = _items(12)
        threaded = det.detect_many(items, concurrency=4, progress=False)
        sent = len(stub.requests)
        stub.peak_in_flight = 0
        on_ray = det.detect_many(items, concurrency=4, progress=False, executor="ray", workers=4)
        assert len(stub.requests) == 2 * sent == 2 * 11 * 4
        assert 1 < stub.peak_in_flight <= 3
    assert _scores(on_ray) == _scores(threaded)
    assert [[u.score for u in r.units] for r in on_ray[:3]] == [[0.0, 0.0], [1.0, 1.0], [1.0, 0.0]]
    assert on_ray[3].error is not None and "empty" in on_ray[3].error and on_ray[4].ok
    assert scale.limit_state(spec, 3)["peak"] <= 3


def test_a_worker_reuses_a_lease_for_its_next_request_and_gives_it_back_when_idle(cluster: Any) -> None:
    """Calls one after another ask the limit's actor once; an idle lease goes back after linger_s; a
    lease without a whole request's time left is never handed on."""
    actor = scale.limit_actor("test:reuse", 2)
    limiter = scale.ClusterLimiter(actor, lease_s=60.0, request_s=10.0, linger_s=0.3)
    for _ in range(20):
        with limiter.slot():
            pass
    assert ray.get(actor.state.remote()) == {"limit": 2, "in_use": 1, "peak": 1, "granted": 1}
    time.sleep(1.0)
    assert ray.get(actor.state.remote())["in_use"] == 0

    short = scale.ClusterLimiter(scale.limit_actor("test:short", 2), lease_s=5.0, request_s=10.0, linger_s=0.3)
    for _ in range(3):
        with short.slot():
            pass
    assert scale.limit_state("test:short", 2)["granted"] == 3


def test_the_next_map_of_the_same_kind_finds_its_workers_warm(cluster: Any) -> None:
    """A map's workers stay up for the next map of the same kind (another detector included); a map of
    another kind stops them first; release_workers stops the last ones."""
    with StubAPI() as stub:
        spec = f"openai-compatible:{stub.base_url}/v1#stub"
        started: list[list[Any]] = []
        results: dict[int, Any] = {}

        def run(job: Any, per_worker: int) -> list[int]:
            scale.ray_map(
                job,
                _items(6),
                results.__setitem__,
                workers=2,
                per_worker=per_worker,
                cpus_per_worker=0,
                on_start=started.append,
            )
            return sorted(ray.get([actor.pid.remote() for actor in started[-1]]))

        scgp = _DetectJob(halluscope.detector("selfcheck-prompt", model=spec, gateway=Gateway(cache=None)))
        other = _DetectJob(halluscope.detector("selfcheck-prompt", model=spec, gateway=Gateway(cache=None), n=2))
        first = run(scgp, 1)
        assert run(other, 1) == first and len(results) == 6
        assert set(run(scgp, 2)).isdisjoint(first)
        assert _stopped(started[0][0])
        scale.release_workers()
        assert _stopped(started[-1][0])


def _stopped(actor: Any) -> bool:
    """Whether the actor is gone within 30 s (ray.kill returns before the process has ended)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            ray.get(actor.pid.remote(), timeout=5)
        except ray.exceptions.RayActorError:
            return True
        except ray.exceptions.GetTimeoutError:
            continue
        time.sleep(0.2)
    return False


def test_a_killed_worker_loses_no_item(cluster: Any, tmp_path: Path) -> None:
    """kill -9 of a worker's process while it holds items: Ray restarts the actor and retries them. The
    job logs which process started and finished which item, so the test shows that the killed process
    held items when it died, that only those were lost or scored again, and every other item ran once."""
    log = tmp_path / "items.log"

    @dataclass(frozen=True)
    class Logged:
        path: str

        def build(self) -> Any:
            def score(item: int) -> int:
                with open(self.path, "a") as f:
                    f.write(f"start {os.getpid()} {item}\n")
                time.sleep(0.4)
                with open(self.path, "a") as f:
                    f.write(f"done {os.getpid()} {item}\n")
                return item * item

            return score

    def lines() -> list[tuple[str, int, int]]:
        text = log.read_text() if log.exists() else ""
        return [(kind, int(pid), int(item)) for kind, pid, item in (line.split() for line in text.splitlines())]

    results: dict[int, Any] = {}
    held: list[int] = []  # started by the killed process and not finished when it died
    started_there: list[int] = []  # every item the killed process started

    def kill_one(actors: list[Any]) -> None:
        pid = ray.get(actors[0].pid.remote())

        def once_it_holds_an_item() -> None:
            deadline = time.monotonic() + 30
            while not any(kind == "start" and who == pid for kind, who, _ in lines()):
                assert time.monotonic() < deadline, "the worker never started an item"
                time.sleep(0.02)
            os.kill(pid, signal.SIGKILL)
            seen = lines()
            done = {item for kind, who, item in seen if kind == "done" and who == pid}
            started_there.extend(item for kind, who, item in seen if kind == "start" and who == pid)
            held.extend(item for item in started_there if item not in done)

        threading.Thread(target=once_it_holds_an_item, daemon=True).start()

    scale.ray_map(Logged(str(log)), list(range(16)), results.__setitem__, workers=2, per_worker=2, on_start=kill_one)
    assert held, "the killed worker held no item when it died"
    assert results == {item: item * item for item in range(16)}  # Ray restarted it: nothing lost
    starts = Counter(item for kind, _, item in lines() if kind == "start")
    assert set(held) <= {item for item, count in starts.items() if count == 2}  # the held items ran again
    assert all(count == 1 for item, count in starts.items() if item not in started_there)  # the rest once


def test_a_rerun_on_another_process_replays_every_call_from_redis(cluster: Any, redis_url: str) -> None:
    with StubAPI(latency=0.02) as stub:
        spec = f"openai-compatible:{stub.base_url}/v1#stub"
        cache = open_cache(redis_url)
        det = halluscope.detector("selfcheck-prompt", model=spec, gateway=Gateway(cache=cache, concurrency=4))
        first = det.detect_many(_items(8), progress=False, executor="ray", workers=2)
        sent = len(stub.requests)
        assert sent == 7 * 4 and len(cache) == sent  # the workers wrote every answer to the server
        elsewhere = halluscope.detector(
            "selfcheck-prompt", model=spec, gateway=Gateway(cache=open_cache(redis_url), concurrency=4)
        )
        again = elsewhere.detect_many(_items(8), progress=False)  # this process, another cache client
        assert len(stub.requests) == sent and _scores(again) == _scores(first)
        assert sum(r.meta.cache_hits for r in again) == sent and sum(r.meta.calls for r in again) == 0


def test_redis_down_mid_run_goes_on_uncached_with_one_warning(tmp_path: Path) -> None:
    server, url = redis_server(tmp_path)
    try:
        cache = RedisCache(url)
        with StubAPI() as stub:
            spec = f"openai-compatible:{stub.base_url}/v1#stub"
            det = halluscope.detector("selfcheck-prompt", model=spec, gateway=Gateway(cache=cache, concurrency=2))
            assert det.detect_many(_items(1), progress=False)[0].ok and len(cache) == 4
            server.kill()
            server.wait()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                results = det.detect_many(_items(6)[4:], progress=False)
            assert all(r.ok for r in results) and len(stub.requests) == 4 + 2 * 4
            assert len([w for w in caught if "uncached" in str(w.message)]) == 1 and cache.down
    finally:
        server.kill()
    with pytest.raises(CacheError, match=f"cannot open the call cache at {url}"):
        RedisCache(url)


def test_bench_wikibio_on_ray_reproduces_the_single_process_numbers(
    cluster: Any, data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["bench", "wikibio", "--method", "selfcheck-unigram", "--limit", "12", "--data", str(data_dir), "--json"]
    assert main([*argv, "--out", str(tmp_path / "one")]) == 0
    assert main([*argv, "--out", str(tmp_path / "ray"), "--ray", "--workers", "3"]) == 0
    capsys.readouterr()
    one, on_ray = (BenchResult.read(tmp_path / run / "selfcheck-unigram") for run in ("one", "ray"))
    assert on_ray.metrics == one.metrics and on_ray.items == one.items and len(one.items) == 12


def test_a_driver_killed_mid_bench_redoes_no_finished_item(tmp_path: Path) -> None:
    """kill -9 of `halluscope bench planted` once it journalled two biographies; the rerun asks the stub
    only for the biographies left (no cache: every call it makes reaches the server)."""
    with StubAPI(latency=0.15) as stub:
        out = tmp_path / "planted"
        argv = [
            sys.executable, "-m", "halluscope.cli", "bench", "planted", "--method", "selfcheck-prompt",
            "--samples", "1", "--model", f"openai-compatible:{stub.base_url}/v1#stub", "--no-cache", "--out", str(out),
        ]  # fmt: skip
        driver = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        journal = out / "items.jsonl"
        deadline = time.monotonic() + 120
        while not (journal.is_file() and len(journal.read_text().splitlines()) >= 3):
            assert driver.poll() is None and time.monotonic() < deadline, "the bench ended before the kill"
            time.sleep(0.05)
        driver.send_signal(signal.SIGKILL)
        driver.wait()
        while stub.in_flight:  # requests the killed driver had sent are counted before the rerun's
            time.sleep(0.05)
        finished = [json.loads(line)["id"] for line in journal.read_text().splitlines()[1:] if line.endswith("}")]
        before = len(stub.requests)
        rerun = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    assert f"resumed {len(finished)} of {len(BIOGRAPHIES)}" in rerun.stderr
    left = [b for b in BIOGRAPHIES if b.person not in finished]
    assert len(stub.requests) - before == sum(1 + len(b.sentences) for b in left)  # a passage + a check a sentence
    assert len(BenchResult.read(out).items) == len(BIOGRAPHIES)


def test_the_ray_executor_without_ray_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray now raises ImportError
    det = halluscope.detector("selfcheck-unigram")
    with pytest.raises(ConfigError, match=r"pip install 'halluscope\[ray\]'"):
        det.detect_many([{"text": "A.", "samples": ["A."]}], executor="ray")
    with pytest.raises(ConfigError, match="executor must be one of thread, ray"):
        det.detect_many([], executor="dask")


def test_a_gateway_travels_as_its_settings_and_is_rebuilt_once_per_process(tmp_path: Path) -> None:
    gateway = Gateway(cache=open_cache(tmp_path / "calls"), concurrency=3, timeout=7.0, delimit=True)
    copy = pickle.loads(pickle.dumps(gateway))
    assert copy is not gateway and copy is pickle.loads(pickle.dumps(gateway))
    settings = (copy.cache.location, copy.concurrency, copy.timeout, copy.delimit)
    assert settings == (str(tmp_path / "calls"), 3, 7.0, True)
    assert copy.registry.fingerprint() == gateway.registry.fingerprint()
    assert pickle.loads(pickle.dumps(Gateway(cache=None))).cache is None


def test_an_api_models_limit_comes_from_the_cluster_a_local_models_stays_in_the_process() -> None:
    shared = ModelLimiter(2)
    use_shared_limits(lambda model, limit: shared)
    try:
        gateway = Gateway(cache=None, concurrency=5)
        assert gateway.limiter("openai-compatible:http://h/v1#m") is shared
        local = gateway.limiter("local:smollm2-135m")
        assert local is not shared and isinstance(local, ModelLimiter) and local.limit == 5
    finally:
        use_shared_limits(None)
    assert Gateway(cache=None).limiter("openai:gpt-4o-mini") is not shared


def test_a_job_the_workers_cannot_build_is_one_error_before_any_item(cluster: Any, tmp_path: Path) -> None:
    """Data missing on the workers' side: one error naming the cause, not an item failure per item."""
    from halluscope.bench.distributed import _PlanJob
    from halluscope.bench.registry import BENCHMARKS
    from halluscope.bench.wikibio import WikiBioSettings

    settings = WikiBioSettings(method=("selfcheck-unigram",), data=str(tmp_path))
    job = _PlanJob(BENCHMARKS["wikibio"], settings, Gateway(cache=None), 0)
    seen: list[int] = []
    with pytest.raises(ConfigError, match="the Ray workers could not start: .*wikibio"):
        scale.ray_map(job, [0, 1, 2], lambda position, _value: seen.append(position), workers=2)
    assert seen == []


def test_a_detector_whose_model_cannot_travel_is_refused_before_any_work(cluster: Any) -> None:
    from langchain_openai import ChatOpenAI

    model = ChatOpenAI(api_key="not-needed", base_url="http://127.0.0.1:9/v1", model="m")  # a live client
    det = halluscope.detector("selfcheck-prompt", model=model)
    with pytest.raises(ConfigError, match="cannot travel .* give models and judges as spec strings"):
        det.detect_many(_items(2), progress=False, executor="ray")


def test_a_batch_budget_holds_across_the_ray_workers(cluster: Any) -> None:
    """max_calls covers the batch's items together on Ray too: the workers plan against one actor."""
    with StubAPI() as stub:
        spec = f"openai-compatible:{stub.base_url}/v1#stub"
        det = halluscope.detector("selfcheck-prompt", model=spec, gateway=Gateway(cache=None), max_calls=8)
        items = [item for item in _items(12) if item["text"].strip()]
        results = det.detect_many(items, concurrency=1, progress=False, executor="ray", workers=2)
        assert len(stub.requests) <= 8 and sum(r.ok for r in results) == 2
        assert all("max_calls covers the whole batch" in (r.error or "") for r in results if not r.ok)
