"""`halluscope serve`: halluscope for an agent outside Python, over the Model Context Protocol (the
official MCP SDK): on standard input and output (``--mcp``, what a desktop client or an editor starts),
or over streamable HTTP (``--http HOST:PORT``, at /mcp), where a plain ``POST /check`` takes the same
JSON as the ``check`` tool. Three tools:

- ``check``: one answer checked (``halluscope.check``: grounded with documents, Direct Question
  without), its verdict drawn;
- ``detect``: any registered method by name, on inputs and options as ``methods`` describes them;
- ``methods``: every method with the JSON schemas of its inputs and options, read from its contract.

Every request has a call budget (``max_calls``, at most the server's, ``--max-calls``) and a timeout;
an error comes back as the tool's error, one line, credentials redacted; the process's gateway holds
each model's concurrency limit across concurrent requests. HTTP binds 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import TypeAdapter

from halluscope.backends.gateway import Gateway
from halluscope.check_answer import check as check_answer
from halluscope.checks import check_value
from halluscope.detector import detector
from halluscope.errors import ConfigError, HalluscopeError, redact_credentials
from halluscope.graphs import registry
from halluscope.graphs.stages import MAX_CALLS
from halluscope.graphs.studio import options_schema
from halluscope.results import DetectionResult

SERVE_INSTALL = "pip install 'halluscope[serve]'"
DEFAULT_TIMEOUT_S = 600.0  # one request's wall-clock limit


class ServerSettings:
    """What every request of one server shares: its gateway, its default model, its call ceiling and
    its timeout."""

    def __init__(
        self,
        gateway: Gateway | None = None,
        model: str | None = None,
        max_calls: int = MAX_CALLS,
        timeout: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        if max_calls < 1 or timeout <= 0:
            raise ConfigError(f"a server needs max_calls >= 1 and a timeout > 0, got {max_calls} and {timeout}")
        self.gateway = gateway
        self.model = model
        self.max_calls = max_calls
        self.timeout = timeout

    def limit(self, asked: int | None) -> int:
        """A request's call budget: the one it asks for, at most the server's."""
        if asked is None:
            return self.max_calls
        check_value("the request", "max_calls", asked, int)
        if not 1 <= asked <= self.max_calls:
            raise ConfigError(f"max_calls takes 1 to this server's ceiling of {self.max_calls:,}, got {asked:,}")
        return asked

    def options(self, given: Mapping[str, Any] | None) -> dict[str, Any]:
        """The method options of a request, the server's gateway and default model added."""
        options = dict(given or {})
        if self.gateway is not None:
            options.setdefault("gateway", self.gateway)
        return options

    async def run(self, work: Callable[[], DetectionResult]) -> dict[str, Any]:
        """``work`` on a thread, within the timeout; a halluscope error raises as one redacted line."""
        try:
            result = await asyncio.wait_for(asyncio.to_thread(work), self.timeout)
        except TimeoutError:
            raise ConfigError(f"the request ran past this server's timeout of {self.timeout:g} s") from None
        except HalluscopeError as exc:
            raise ConfigError(redact_credentials(f"{type(exc).__name__}: {exc}")) from None
        return result.model_dump(mode="json")

    async def check(
        self,
        answer: str,
        context: list[str] | str | None = None,
        question: str | None = None,
        method: str | None = None,
        threshold: float | None = None,
        max_calls: int | None = None,
    ) -> dict[str, Any]:
        limit = self.limit(max_calls)
        model = self.model

        def work() -> DetectionResult:
            options = self.options(None)
            return check_answer(
                answer,
                context=context,
                question=question,
                method=method,
                model=model,
                threshold=threshold,
                max_calls=limit,
                **options,
            )

        return await self.run(work)

    async def detect(
        self,
        method: str,
        inputs: dict[str, Any],
        options: dict[str, Any] | None = None,
        max_calls: int | None = None,
    ) -> dict[str, Any]:
        limit = self.limit(max_calls)
        spec = registry.get(method)
        chosen = self.options(options)
        if self.model is not None and spec.model_field in spec.option_names:
            chosen.setdefault(spec.model_field, self.model)

        def work() -> DetectionResult:
            return detector(spec.name, max_calls=limit, **chosen).detect(**inputs)

        return await self.run(work)


def method_schemas() -> list[dict[str, Any]]:
    """Every method with the JSON schemas of its inputs and of its options, from its contract."""
    rows = []
    for name, method in registry.methods().items():
        inputs = {n: TypeAdapter(method.hints[n] | None).json_schema() for n in method.input_names}
        rows.append(
            {
                "name": name,
                "summary": method.summary,
                "inputs": {"type": "object", "properties": inputs},
                "options": TypeAdapter(options_schema(method)).json_schema(),
            }
        )
    return rows


def build(settings: ServerSettings, host: str = "127.0.0.1", port: int = 8000) -> Any:
    """The MCP server (the SDK's FastMCP) with its three tools, and ``POST /check`` over HTTP."""
    try:
        from mcp.server.fastmcp import FastMCP
        from mcp.server.fastmcp.exceptions import ToolError
    except ImportError as exc:
        raise ConfigError(f"halluscope serve needs the MCP SDK: {SERVE_INSTALL}") from exc
    from starlette.requests import Request
    from starlette.responses import JSONResponse

    server = FastMCP("halluscope", instructions=__doc__, host=host, port=port, log_level="WARNING")

    async def tool_error(call: Any) -> dict[str, Any]:
        try:
            return await call
        except HalluscopeError as exc:
            raise ToolError(str(exc)) from None

    @server.tool()
    async def check(
        answer: str,
        context: list[str] | str | None = None,
        question: str | None = None,
        method: str | None = None,
        threshold: float | None = None,
        max_calls: int | None = None,
    ) -> dict[str, Any]:
        """Check an answer: each sentence against the documents given as context (grounded), or without
        documents the model asked about each (Direct Question). Returns each sentence's score (higher =
        more likely hallucinated), evidence and the verdict (the flagged sentences' positions)."""
        return await tool_error(settings.check(answer, context, question, method, threshold, max_calls))

    @server.tool()
    async def detect(
        method: str,
        inputs: dict[str, Any],
        options: dict[str, Any] | None = None,
        max_calls: int | None = None,
    ) -> dict[str, Any]:
        """Run one halluscope method by name on its inputs (the `methods` tool lists each method's inputs
        and options with their JSON schemas). Returns the method's result: units with scores."""
        return await tool_error(settings.detect(method, inputs, options, max_calls))

    @server.tool()
    def methods() -> list[dict[str, Any]]:
        """Every halluscope method: its summary and the JSON schemas of its inputs and options."""
        return method_schemas()

    @server.custom_route("/check", methods=["POST"])
    async def post_check(request: Request) -> JSONResponse:
        try:
            body = json.loads(await request.body())
            if not isinstance(body, dict) or not isinstance(body.get("answer"), str):
                raise ConfigError('POST /check takes a JSON object with "answer" (a text)')
            unknown = sorted(set(body) - {"answer", "context", "question", "method", "threshold", "max_calls"})
            if unknown:
                raise ConfigError(f"POST /check takes no {', '.join(unknown)}")
            return JSONResponse(await settings.check(**body))
        except (json.JSONDecodeError, RecursionError):
            return JSONResponse({"error": "the body is not JSON"}, status_code=400)
        except HalluscopeError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)

    return server
