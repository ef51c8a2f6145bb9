"""`halluscope serve` over HTTP: requests per second and p50 / p95 latency of `check` with a cached judge.

The server runs in its own process (`halluscope serve --http 127.0.0.1:PORT`) with a stub
OpenAI-compatible judge; one warm-up request fills the cache, so every measured request is answered
from it (no model time): what is measured is the server, the check's graph and the cache. Each level
of concurrency sends the same number of requests from that many client tasks, by the plain `POST
/check` and by the MCP `check` tool over streamable HTTP (one session per client task). With
``--token`` the server requires a token and every request sends it (``Authorization: Bearer``): run it
with and without, on one machine, to see what the checks of every request cost.

    .venv/bin/python benchmarks/serve_throughput.py --out out/serve
    .venv/bin/python benchmarks/serve_throughput.py --token --out out/serve-token
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from halluscope.bench.provenance import envelope  # noqa: E402
from halluscope.bench.report import markdown_table, write_json  # noqa: E402
from tests.stub_servers import StubAPI  # noqa: E402

ANSWER = "Canberra is the capital of Australia. It lies in Sydney."
REQUEST = {"answer": ANSWER, "context": ["Canberra is the capital of Australia, in the Australian Capital Territory."]}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


TOKEN = "serve-throughput-token-0123456789abcdef"


def start_server(model: str, cache: Path, token: bool) -> tuple[subprocess.Popen[str], str]:
    port = free_port()
    env = {**os.environ, "HALLUSCOPE_CACHE_DIR": str(cache), "HF_HUB_OFFLINE": "1"}
    if token:
        env["HALLUSCOPE_SERVE_TOKEN"] = TOKEN
    argv = [sys.executable, "-m", "halluscope.cli", "serve", "--http", f"127.0.0.1:{port}", "--model", model]
    server = subprocess.Popen(argv, env=env, stderr=subprocess.DEVNULL, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return server, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.2)
    server.kill()
    raise RuntimeError("the server did not start within 60 s")


async def post_clients(url: str, clients: int, per_client: int, headers: dict[str, str]) -> list[float]:
    async with httpx.AsyncClient(timeout=60, headers=headers) as http:

        async def one_client() -> list[float]:
            times = []
            for _ in range(per_client):
                began = time.perf_counter()
                reply = await http.post(f"{url}/check", json=REQUEST)
                reply.raise_for_status()
                times.append(time.perf_counter() - began)
            return times

        return [t for batch in await asyncio.gather(*(one_client() for _ in range(clients))) for t in batch]


async def mcp_clients(url: str, clients: int, per_client: int, headers: dict[str, str]) -> list[float]:
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async def one_client() -> list[float]:
        times = []
        async with (
            httpx.AsyncClient(headers=headers, timeout=60) as http,
            streamable_http_client(f"{url}/mcp", http_client=http) as (read, write, _),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            for _ in range(per_client):
                began = time.perf_counter()
                result = await session.call_tool("check", REQUEST)
                if result.isError:
                    raise RuntimeError(result.content[0].text)
                times.append(time.perf_counter() - began)
        return times

    return [t for batch in await asyncio.gather(*(one_client() for _ in range(clients))) for t in batch]


def measure(way: str, url: str, clients: int, requests: int, headers: dict[str, str]) -> dict[str, Any]:
    per_client = max(1, requests // clients)
    run = post_clients if way == "POST /check" else mcp_clients
    began = time.perf_counter()
    times = asyncio.run(run(url, clients, per_client, headers))
    wall = time.perf_counter() - began
    ordered = sorted(times)
    return {
        "way": way,
        "clients": clients,
        "requests": len(times),
        "wall_s": round(wall, 2),
        "requests_per_s": round(len(times) / wall, 1),
        "p50_ms": round(statistics.median(ordered) * 1000, 1),
        "p95_ms": round(ordered[int(0.95 * (len(ordered) - 1))] * 1000, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=200, help="requests at each level (default 200)")
    ap.add_argument("--clients", default="1,4,16", help="concurrent clients (default 1,4,16)")
    ap.add_argument("--token", action="store_true", help="the server requires a token; every request sends it")
    ap.add_argument("--out", default="benchmarks/results")
    args = ap.parse_args()
    headers = {"authorization": f"Bearer {TOKEN}"} if args.token else {}
    began = time.perf_counter()
    rows = []
    with StubAPI(answer="Yes") as judge, tempfile.TemporaryDirectory() as tmp:
        judge.answers_by_content["It lies in Sydney."] = "No"
        model = f"openai-compatible:{judge.base_url}/v1#judge"
        server, url = start_server(model, Path(tmp) / "cache", args.token)
        try:
            httpx.post(f"{url}/check", json=REQUEST, headers=headers, timeout=60).raise_for_status()  # the cache filled
            sent = len(judge.requests)
            for way in ("POST /check", "MCP check tool"):
                for clients in [int(c) for c in args.clients.split(",")]:
                    rows.append(measure(way, url, clients, args.requests, headers))
                    print(rows[-1], file=sys.stderr)
            if len(judge.requests) != sent:
                raise RuntimeError(f"{len(judge.requests) - sent} measured requests reached the judge: not cached")
        finally:
            server.terminate()
            server.wait(timeout=30)
    guard = "a token required and sent" if args.token else "no token"
    print(f"halluscope serve --http, check with a cached judge, {guard} ({os.cpu_count()} cores, {platform.machine()})")
    print(markdown_table(rows, [(k, k) for k in rows[0]]))
    total = sum(r["requests"] for r in rows)
    stub = "a stub OpenAI-compatible judge (tests/stub_servers.py), every measured call answered from the cache"
    made = envelope(models=[stub], items=total, item="request", calls=0, seconds=time.perf_counter() - began,
                    prompt_tokens=0)  # fmt: skip
    path = Path(args.out) / "serve_throughput.json"
    write_json(path, {**made, "request": REQUEST, "token": args.token, "rows": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
