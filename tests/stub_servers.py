"""A small HTTP server on 127.0.0.1 that speaks the OpenAI chat-completions, Anthropic messages and
Ollama chat APIs, with a script of failures, so the real client libraries can be tested on the real wire;
and a file host that answers as the Hugging Face Hub and GitHub's raw files do, for the downloads."""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import socket
import subprocess
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self


class _Server(ThreadingHTTPServer):
    request_queue_size = 256  # many clients at once (a cluster's workers) must not find the backlog full


class _Served:
    """A handler class served on a free port of 127.0.0.1 for the length of a ``with`` block."""

    def _serve(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.server = _Server(("127.0.0.1", 0), handler)
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()


class StubAPI(_Served):
    """Answers every request with ``answer``; ``fail_next(status, n)`` makes the next n requests fail;
    ``latency`` seconds pass before each answer (and ``chunk_gap`` between a streamed answer's chunks),
    and ``peak_in_flight`` is the most requests it ever held at once (what a concurrency limit bounds)."""

    def __init__(self, answer: str = "Yes", latency: float = 0.0, chunk_gap: float = 0.0) -> None:
        self.answer = answer
        self.latency = latency
        self.chunk_gap = chunk_gap
        self.streams_ended: list[float] = []  # time.monotonic() as each streamed answer's [DONE] was sent
        self.in_flight = 0
        self.peak_in_flight = 0
        self.answers_by_content: dict[str, str] = {}  # a prompt that contains a key is answered with its value
        self.completion: dict[str, Any] = {}  # the body /v1/completions answers with
        self.more_choices: list[str] = []  # the answers of a completion's further choices (a request's n > 1)
        self.tool_calls: list[dict[str, Any]] | None = None  # a completion's tool calls (its content then null)
        self.requests: list[dict[str, Any]] = []
        self.arrivals: list[float] = []  # time.monotonic() as each request arrived, before its latency
        self._failures: deque[int] = deque()
        self._faults: deque[Fault] = deque()
        self._lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:
                with stub._lock:
                    stub.arrivals.append(time.monotonic())
                    stub.in_flight += 1
                    stub.peak_in_flight = max(stub.peak_in_flight, stub.in_flight)
                try:
                    time.sleep(stub.latency)
                    self._answer()
                finally:
                    with stub._lock:
                        stub.in_flight -= 1

            def _answer(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
                with stub._lock:
                    stub.requests.append(
                        {"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}, "body": body}
                    )
                    fault = stub._faults.popleft() if stub._faults else None
                    status = stub._failures.popleft() if stub._failures and fault is None else 200
                route = self.path.partition("?")[0]  # a query string (a proxy's ?api_key=) is not the route
                if fault is not None and fault.kind.startswith("stream_"):
                    self._stream_fault(fault, stub._openai_stream(body))
                    return
                if fault is not None:
                    self._send(*fault.reply(stub, body, route, self.headers.get("authorization", "")))
                    return
                if route == "/api/chat":  # Ollama's native API (what langchain-ollama speaks)
                    payload = stub._ollama(body) if status == 200 else {"error": f"stub {status}"}
                elif route.endswith("/chat/completions") and body.get("stream") and status == 200:
                    self._stream(stub._openai_stream(body))
                    return
                elif route.endswith("/chat/completions"):
                    payload = (
                        stub._openai(body)
                        if status == 200
                        else {"error": {"message": f"stub {status}", "type": "stub_error"}}
                    )
                elif route.endswith("/completions"):
                    payload = stub.completion if status == 200 else {"error": {"message": f"stub {status}"}}
                elif route.endswith("/messages"):
                    payload = (
                        stub._anthropic(body)
                        if status == 200
                        else {"type": "error", "error": {"type": "stub_error", "message": f"stub {status}"}}
                    )
                else:
                    status, payload = 404, {"error": {"message": f"no route {self.path}"}}
                self._send(status, json.dumps(payload).encode(), {})

            def do_GET(self) -> None:
                """``/v1/models``: the stub's one model, or the next fault (an echo of the key it got)."""
                with stub._lock:
                    headers = {k.lower(): v for k, v in self.headers.items()}
                    stub.requests.append({"path": self.path, "headers": headers})
                    fault = stub._faults.popleft() if stub._faults else None
                if fault is not None:
                    self._send(*fault.reply(stub, {}, self.path, self.headers.get("authorization", "")))
                    return
                models = {"object": "list", "data": [{"id": "stub", "object": "model", "owned_by": "stub"}]}
                self._send(200, json.dumps(models).encode(), {})

            def _stream_fault(self, fault: Fault, events: list[dict[str, Any]]) -> None:
                """A stream that misbehaves after its first chunks: a chunk that is no completion chunk
                (``stream_malformed``), a connection closed mid-body (``stream_cut``), a lone surrogate in
                the answer (``stream_surrogate``), chunks without end (``stream_endless``, for at most
                ``delay`` seconds), silence after the first chunk (``stream_stall``, ``delay`` seconds),
                or a JSON completion where a stream was asked (``stream_as_json``)."""
                if fault.kind == "stream_as_json":
                    self._send(200, json.dumps(stub._openai({"messages": []})).encode(), {})
                    return
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                if fault.kind == "stream_cut":
                    self.send_header("content-length", "100000")  # promised, never sent: the peer breaks off
                self.end_headers()
                lines = [f"data: {json.dumps(e)}\n\n".encode() for e in events[:3]]
                if fault.kind == "stream_malformed":
                    lines.append(b"data: 5\n\n")
                    lines += [f"data: {json.dumps(e)}\n\n".encode() for e in events[3:]] + [b"data: [DONE]\n\n"]
                elif fault.kind == "stream_surrogate":
                    bad = {**events[1], "choices": [{"index": 0, "delta": {"content": "Bad \ud800 text. "}}]}
                    lines.append(f"data: {json.dumps(bad)}\n\n".encode())
                    lines += [f"data: {json.dumps(e)}\n\n".encode() for e in events[3:]] + [b"data: [DONE]\n\n"]
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    for line in lines:
                        self.wfile.write(line)
                        self.wfile.flush()
                    deadline = time.monotonic() + fault.delay
                    if fault.kind == "stream_stall":
                        time.sleep(fault.delay)
                    while fault.kind == "stream_endless" and time.monotonic() < deadline:
                        self.wfile.write(f"data: {json.dumps(events[1])}\n\n".encode())
                        self.wfile.flush()
                        time.sleep(0.2)
                self.close_connection = True

            def _stream(self, events: list[dict[str, Any]]) -> None:
                """Server-sent events, one chunk at a time, then [DONE] (OpenAI's streamed completion)."""
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.end_headers()
                for event in events:
                    self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
                    self.wfile.flush()
                    time.sleep(stub.chunk_gap)
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
                stub.streams_ended.append(time.monotonic())
                self.close_connection = True

            def _send(self, status: int, data: bytes, headers: dict[str, str]) -> None:
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # a client that timed out
                    self.wfile.write(data)

        self._serve(Handler)

    def _answer_for(self, body: dict[str, Any]) -> str:
        text = json.dumps(body.get("messages", []))
        return next((a for key, a in self.answers_by_content.items() if key in text), self.answer)

    def _openai(self, body: dict[str, Any]) -> dict[str, Any]:
        answer = self._answer_for(body)
        logprobs = None
        if body.get("logprobs"):
            logprobs = {
                "content": [{"token": answer, "logprob": -0.05, "bytes": list(answer.encode()), "top_logprobs": []}]
            }
        more = [
            {"index": i, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
            for i, text in enumerate(self.more_choices, 1)
        ]
        return {
            "id": "chatcmpl-stub",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model", "stub"),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": answer}
                    if self.tool_calls is None
                    else {"role": "assistant", "content": None, "tool_calls": self.tool_calls},
                    "finish_reason": "stop" if self.tool_calls is None else "tool_calls",
                    "logprobs": logprobs,
                },
                *more,
            ],
            "usage": {"prompt_tokens": 11, "completion_tokens": 2, "total_tokens": 13},
        }

    def _openai_stream(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        """The answer as streamed chunks: a word (with its space) each, then the finish."""
        words = self._answer_for(body).split(" ")
        pieces = [w + (" " if i < len(words) - 1 else "") for i, w in enumerate(words)]
        head = {
            "id": "chatcmpl-stub",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": body.get("model", "stub"),
        }
        if self.tool_calls is not None:
            return [
                *self._streamed_calls(head),
                {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
            ]
        chunks = [{**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}]
        chunks += [{**head, "choices": [{"index": 0, "delta": {"content": piece}}]} for piece in pieces]
        return [*chunks, {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}]

    def _streamed_calls(self, head: dict[str, Any]) -> list[dict[str, Any]]:
        """The tool calls as OpenAI streams them: each call's id and name first, then its arguments' text
        in pieces of five characters."""
        assert self.tool_calls is not None
        chunks = []
        for k, call in enumerate(self.tool_calls):
            first = {"index": k, "id": call["id"], "type": "function", "function": {"name": call["function"]["name"],
                                                                                     "arguments": ""}}  # fmt: skip
            chunks.append({**head, "choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [first]}}]})
            text = call["function"]["arguments"]
            for start in range(0, len(text), 5):
                piece = {"index": k, "function": {"arguments": text[start : start + 5]}}
                chunks.append({**head, "choices": [{"index": 0, "delta": {"tool_calls": [piece]}}]})
        return chunks

    def _ollama(self, body: dict[str, Any]) -> dict[str, Any]:
        """One line of Ollama's stream, the last: a client that streams reads it as the whole answer."""
        return {
            "model": body.get("model", "stub"),
            "created_at": "2026-01-01T00:00:00Z",
            "message": {"role": "assistant", "content": self._answer_for(body)},
            "done": True,
            "done_reason": "stop",
            "prompt_eval_count": 9,
            "eval_count": 1,
        }

    def _anthropic(self, body: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": "msg_stub",
            "type": "message",
            "role": "assistant",
            "model": body.get("model", "stub"),
            "content": [{"type": "text", "text": self.answer}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 9, "output_tokens": 1},
        }

    def fail_next(self, status: int, times: int = 1) -> None:
        with self._lock:
            self._failures.extend([status] * times)

    def inject(self, fault: Fault, times: int = 1) -> None:
        """The next ``times`` requests get this fault instead of an answer."""
        with self._lock:
            self._faults.extend([fault] * times)


class SinkAPI(_Served):
    """A stand-in for the LangSmith API, so a LangSmith client runs offline and nothing leaves the
    machine: it records every request (method, path, headers, body bytes) and answers 200, with the
    experiment where one is created or read (/sessions) and an empty JSON object elsewhere. Any address
    a test must prove nothing reached is one of these."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.sessions: dict[str, dict[str, Any]] = {}
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _any(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                headers = {k.lower(): v for k, v in self.headers.items()}
                sink.requests.append({"method": self.command, "path": self.path, "headers": headers, "body": body})
                answer: dict[str, Any] = {}
                path = self.path.split("?")[0].rstrip("/")
                if self.command == "POST" and path.endswith("/sessions"):
                    asked = json.loads(body or b"{}")
                    session = {
                        "id": str(uuid.uuid4()),
                        "tenant_id": str(uuid.uuid4()),
                        "name": asked.get("name", "experiment"),
                        "reference_dataset_id": asked.get("reference_dataset_id"),
                        "start_time": asked.get("start_time") or "2026-01-01T00:00:00",
                    }
                    sink.sessions[session["id"]] = answer = session
                elif "/sessions/" in path:  # one experiment read or updated
                    answer = sink.sessions.get(path.rsplit("/", 1)[-1], {})
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _any

        self._serve(Handler)


class OllamaServer(_Served):
    """Answers ``POST /api/pull`` as an Ollama server does with ``stream: true``: one JSON line per
    progress step (manifest, each layer's bytes, verification, success), or an ``error`` line for a
    tag it does not know. ``pulled`` lists the tags asked for."""

    def __init__(self, known: dict[str, int], stall: float = 0.0) -> None:
        self.known = known  # tag -> layer size in bytes
        self.stall = stall  # seconds of silence after the first line (a stalled download)
        self.pulled: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                asked = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                assert self.path == "/api/pull" and asked["stream"] is True
                server.pulled.append(asked["model"])
                size = server.known.get(asked["model"])
                if size is None:
                    lines = [{"status": "pulling manifest"}, {"error": "pull model manifest: file does not exist"}]
                else:
                    digest = "sha256:" + hashlib.sha256(asked["model"].encode()).hexdigest()
                    layer = [{"status": f"pulling {digest[7:19]}", "digest": digest, "total": size}]
                    lines = [
                        {"status": "pulling manifest"},
                        *[{**layer[0], "completed": part} for part in (0, size // 2, size)],
                        {"status": "verifying sha256 digest"},
                        {"status": "writing manifest"},
                        {"status": "success"},
                    ]
                body = [json.dumps(line).encode() + b"\n" for line in lines]
                self.send_response(200)
                self.send_header("Content-Type", "application/x-ndjson")
                self.send_header("Content-Length", str(sum(map(len, body))))
                self.end_headers()
                self.wfile.write(body[0])
                self.wfile.flush()
                time.sleep(server.stall)
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # a client that gave up
                    self.wfile.write(b"".join(body[1:]))

        self._serve(Handler)


class FileHost(_Served):
    """Serves files the way the Hugging Face Hub's resolve endpoint does (HEAD with X-Repo-Commit, ETag and
    the size; GET with the bytes) and the way raw.githubusercontent.com does. ``files`` maps a URL path
    (``Pinned.route``) to its bytes; ``gets`` lists the paths whose bytes were sent. ``commits`` names a
    branch's head: the Hub answers it as X-Repo-Commit, and the commit's routes serve the branch's files.
    The ETag is the bytes' sha256 (what the Hub declares for a large file) unless ``etags`` says otherwise."""

    def __init__(self, files: dict[str, bytes], commits: dict[str, str] | None = None) -> None:
        self.files = files
        self.commits = commits or {}
        self.etags: dict[str, str] = {}
        self.gets: list[str] = []
        host = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _route(self) -> str:
                """The branch's route for a commit's (the stub keeps each file once, under its branch)."""
                if "/resolve/" not in self.path:
                    return self.path
                repo, rest = self.path.split("/resolve/", 1)
                revision, file = rest.split("/", 1)
                branch = next((b for b, c in host.commits.items() if c == revision), revision)
                return f"{repo}/resolve/{branch}/{file}"

            def _head(self) -> bytes | None:
                route = self._route()
                body = host.files.get(route)
                if body is None:
                    self.send_response(404)
                    self.send_header("X-Error-Code", "EntryNotFound")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return None
                self.send_response(200)
                if "/resolve/" in self.path:
                    revision = self.path.split("/resolve/")[1].split("/")[0]
                    self.send_header("X-Repo-Commit", host.commits.get(revision, revision))
                    self.send_header("ETag", f'"{host.etags.get(route) or hashlib.sha256(body).hexdigest()}"')
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                return body

            def do_HEAD(self) -> None:
                self._head()

            def do_GET(self) -> None:
                body = self._head()
                if body is not None:
                    host.gets.append(self.path)
                    self.wfile.write(body)

        self._serve(Handler)


@dataclass(frozen=True)
class Fault:
    """One injected fault: an HTTP status (with headers, e.g. Retry-After), a slow reply, or a 200 whose
    body is malformed JSON, an empty object, has no choices, null content, or no log-probs although they
    were asked for."""

    kind: str
    status: int = 200
    headers: tuple[tuple[str, str], ...] = ()
    delay: float = 0.0  # seconds before the reply (a slow server), bounded by the test

    def reply(
        self, stub: StubAPI, body: dict[str, Any], path: str, authorization: str = ""
    ) -> tuple[int, bytes, dict[str, str]]:
        time.sleep(self.delay)
        headers = dict(self.headers)
        if self.kind == "echo_key":  # OpenAI's 401 quotes the key it was given
            error = {"error": {"message": f"Incorrect API key provided: {authorization}.", "type": "invalid_request"}}
            return 401, json.dumps(error).encode(), {**headers, "x-seen-key": authorization}
        if self.kind == "slow":
            return 200, json.dumps(stub._openai(body)).encode(), headers
        if self.kind == "status":
            error = {"error": {"message": f"injected {self.status}", "type": "stub_error"}}
            if path.endswith("/messages"):
                error = {"type": "error", "error": {"type": "stub_error", "message": f"injected {self.status}"}}
            return self.status, json.dumps(error).encode(), headers
        if self.kind == "malformed_json":
            return 200, b'{"id": "chatcmpl-stub", "choices": [', headers
        if self.kind == "empty_object":
            return 200, b"{}", headers
        if path.endswith("/messages"):
            payload = stub._anthropic(body)
            if self.kind in ("no_choices", "null_content"):
                payload["content"] = []
            return 200, json.dumps(payload).encode(), headers
        payload = stub._openai(body) if path.endswith("/chat/completions") else dict(stub.completion)
        if self.kind == "no_choices":
            payload["choices"] = []
        elif self.kind == "null_content":
            payload["choices"][0]["message"]["content"] = None
        elif self.kind == "no_logprobs":
            payload["choices"][0]["logprobs"] = None
        return 200, json.dumps(payload).encode(), headers


def free_port() -> int:
    """A port of 127.0.0.1 that nothing listens on now (for a server the test starts)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def redis_server(directory: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A real redis-server on a free port of 127.0.0.1, persisting nothing, returned once it answers
    (Debian's package redis-server; .ci/run installs it)."""
    from halluscope.backends.cache import open_cache
    from halluscope.errors import CacheError

    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server is not installed: apt-get install redis-server (.ci/run does)")
    port = free_port()
    argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    server = subprocess.Popen([*argv, "--dir", str(directory)], stdout=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    deadline = time.monotonic() + 20
    while True:
        try:
            open_cache(url).close()
            return server, url
        except CacheError:
            if time.monotonic() > deadline:
                server.kill()
                raise
            time.sleep(0.1)
