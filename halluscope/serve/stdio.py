"""The server on standard input and output (what a desktop client or an editor starts). When its client
closes stdin, every request at work is cut (it makes no further model call) and the process exits
within a second or two, even while a model call it had already sent is still out."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from typing import Any

from halluscope.serve.service import ServerSettings

EXIT_GRACE_S = 1.0  # after stdin closes: the time in-flight work gets to end before the process exits


def serve_stdio(settings: ServerSettings) -> None:
    import anyio

    from halluscope.serve.mcp import build

    mcp = build(settings)
    settings.warm()
    anyio.run(_serve, settings, mcp)


async def _serve(settings: ServerSettings, mcp: Any) -> None:
    import anyio
    from mcp.server.stdio import stdio_server

    server = mcp._mcp_server  # the SDK's low-level server: its run takes the streams we relay
    async with stdio_server() as (read, write), anyio.create_task_group() as group:
        relayed_send, relayed = anyio.create_memory_object_stream[Any](0)

        async def relay() -> None:
            async with relayed_send:
                async for message in read:
                    await relayed_send.send(message)
            settings.stop("its client closed standard input")
            _exit_soon()
            group.cancel_scope.cancel()

        group.start_soon(relay)
        await server.run(relayed, write, server.create_initialization_options())


def _exit_soon() -> None:
    """The process ends within EXIT_GRACE_S: a worker thread still waiting on a model call it sent before
    the cut would otherwise hold it open (Python joins its threads at exit). The cache loses nothing:
    each answer is written whole, before its call returns."""

    def leave() -> None:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):  # closed with the client's end
                stream.flush()
        os._exit(0)

    timer = threading.Timer(EXIT_GRACE_S, leave)
    timer.daemon = True
    timer.start()
