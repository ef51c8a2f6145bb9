"""The real wire to a real model: llama-cpp-python's OpenAI-compatible server on 127.0.0.1 with
SmolLM2, started and stopped by the test, reached through the real OpenAI client."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import halluscope
from halluscope.backends.chat import load_logprob_model
from halluscope.backends.gateway import CallStats, Gateway
from halluscope.backends.local import model_file
from halluscope.backends.providers.openai import OpenAICompatibleLogProbModel
from tests.stub_servers import free_port

SCGP = "selfcheck.prompt"
VARS = {"context": "Paris is the capital of France.", "sentence": "Paris is the capital of France."}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    log_path = tmp_path_factory.mktemp("server") / "server.log"
    # the server loads its model as halluscope does (``plain_weight_buffers``: on a CPU with AMX, without the
    # extra weight buffers whose kernels crashed there), so both ways read the same numbers
    launch = (
        "import runpy, sys\nfrom halluscope.backends.local import plain_weight_buffers\n"
        "sys.argv[0] = 'llama_cpp.server'\n"
        "with plain_weight_buffers(): runpy.run_module('llama_cpp.server', run_name='__main__', alter_sys=True)"
    )
    cmd = [
        sys.executable,
        "-c",
        launch,
        "--model",
        str(model_file("smollm2-135m")),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--model_alias",
        "smollm2",
        "--logits_all",
        "true",
        "--n_ctx",
        "2048",
    ]
    log = log_path.open("w")  # a file, not a pipe: an unread pipe fills up and blocks the server
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                pytest.fail(f"llama-cpp-python server exited with {proc.returncode}: {log_path.read_text()[-2000:]}")
            try:
                if httpx.get(f"{base}/models", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"llama-cpp-python server did not answer within 120 s: {log_path.read_text()[-2000:]}")
            time.sleep(0.5)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@pytest.mark.slow
def test_a_detector_call_through_openai_compatible(server: str, gateway: Gateway) -> None:
    stats = CallStats()
    reply = gateway.call(
        f"openai-compatible:{server}#smollm2", SCGP, VARS, stats=stats, max_tokens=3, logprobs=True, top_logprobs=2
    )
    assert reply.text and reply.prompt_tokens > 20 and 0 < reply.completion_tokens <= 3
    assert reply.logprobs and all(isinstance(t["logprob"], float) for t in reply.logprobs)
    assert stats.calls == 1 and stats.models == {f"openai-compatible:{server}#smollm2"}


@pytest.mark.slow
def test_the_openai_provider_with_a_base_url(server: str, gateway: Gateway, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", server)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local-test")
    reply = gateway.call("openai:smollm2", SCGP, VARS, max_tokens=3, logprobs=True)
    assert reply.text and reply.completion_tokens <= 3 and reply.model == f"openai:smollm2@{server}"
    assert reply.logprobs and len(reply.logprobs) == reply.completion_tokens


@pytest.mark.slow
def test_server_logprobs_agree_with_local_teacher_forcing(server: str) -> None:
    remote = load_logprob_model(f"openai-compatible:{server}#smollm2")
    assert isinstance(remote, OpenAICompatibleLogProbModel)
    local = load_logprob_model("local:smollm2-135m")
    prompt = local.chat_prompt([{"role": "user", "content": "What is the capital of France?"}])
    continuations = ["The capital of France is Paris.", "Paris", " Berlin is the capital."]
    assert remote.score_many(prompt, continuations) == pytest.approx(local.score_many(prompt, continuations), abs=1e-3)
    for sample in remote.sample(prompt, n=2, max_tokens=10, seed=1):
        per_token = abs(sample.logprob - local.score(prompt, sample.text)) / max(1, len(sample.token_logprobs))
        assert per_token < 0.05, (sample.text, per_token)


@pytest.mark.slow
def test_one_detector_two_ways_to_serve_the_same_model(server: str, gateway: Gateway) -> None:
    """Provider swapping is one string: SelfCheck-Prompt (temperature 0 checks) on SmolLM2 in-process
    and through the OpenAI-compatible server gives the same units and the same scores (tolerance 0:
    SCGP scores are means of 0 / 0.5 / 1 verdicts, and greedy decoding of one GGUF file agrees)."""
    text = "Paris is the capital of France. The Eiffel Tower is in Rome. Water boils at 100 degrees Celsius."
    samples = [
        "Paris is the capital of France; the Eiffel Tower stands in Paris.",
        "France's capital is Paris. Water boils at 100 degrees Celsius at sea level.",
    ]
    results = {
        spec: halluscope.detector("selfcheck-prompt", model=spec, gateway=gateway).detect(text=text, samples=samples)
        for spec in ("local:smollm2-135m", f"openai-compatible:{server}#smollm2")
    }
    local, remote = results.values()
    assert [u.text for u in local.units] == [u.text for u in remote.units] and len(local.units) == 3
    assert [u.evidence["raw"] for u in local.units] == [u.evidence["raw"] for u in remote.units]
    assert [u.score for u in local.units] == pytest.approx([u.score for u in remote.units], abs=0.0)
    assert local.meta.calls == remote.meta.calls == 6


@pytest.mark.slow
def test_a_logprobs_file_as_a_llama_cpp_server_writes_it(
    server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/usage.md's recipe: the server's raw reply saved as it came, from /v1/chat/completions
    (logprobs, top_logprobs) and from /v1/completions (logprobs=5, the parallel-list shape it once
    refused without naming the shapes it takes), scored by `detect token-logprob --logprobs-file`."""
    from halluscope.cli import main

    chat = httpx.post(
        f"{server}/chat/completions",
        json={
            "model": "smollm2",
            "messages": [{"role": "user", "content": "Where is Paris? Answer in two sentences."}],
            "max_tokens": 24,
            "temperature": 0,
            "logprobs": True,
            "top_logprobs": 5,
        },
        timeout=120,
    ).json()
    plain = httpx.post(
        f"{server}/completions",
        json={"model": "smollm2", "prompt": "Paris is", "max_tokens": 24, "temperature": 0, "logprobs": 5},
        timeout=120,
    ).json()
    for name, reply in (("chat", chat), ("completion", plain)):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(reply))
        assert main(["detect", "token-logprob", "--logprobs-file", str(path), "--json"]) == 0, capsys.readouterr().err
        result = halluscope.DetectionResult.from_json(capsys.readouterr().out)
        assert result.units and all(u.score is not None and u.score >= 0 for u in result.units), name
        assert result.meta.calls == 0 and result.meta.params["entropy_over"].startswith("top-")
