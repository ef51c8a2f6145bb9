"""The MCP server (the official SDK's FastMCP) with its tools: ``check``, ``check_tool_call``, ``detect``,
``methods``.
A tool call naming an argument its tool does not take is refused (the SDK would drop it silently: a
``model`` passed to ``check`` would run on the server's model while its client thinks otherwise)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from halluscope.errors import ConfigError, HalluscopeError
from halluscope.serve.service import SERVE_INSTALL, ServerSettings, method_schemas

INSTRUCTIONS = """halluscope checks whether a language model's answer is made up. Four tools:
- check: one answer checked (grounded against the documents given as its context, or Direct Question
  without), its verdict drawn;
- check_tool_call: a tool call's arguments checked against the conversation before it runs (no model call);
- detect: any halluscope method by name, on its inputs and options (the methods tool describes them);
- methods: every method with the JSON schemas of its inputs and options.
The server's operator chooses its models and files; a request that names another is refused. Every
request has a call budget (max_calls, at most the server's) and a timeout."""


def fastmcp() -> tuple[type, type]:
    """The SDK's FastMCP and ToolError, or the install line."""
    try:
        from mcp.server.fastmcp import FastMCP
        from mcp.server.fastmcp.exceptions import ToolError
    except ImportError as exc:
        raise ConfigError(f"halluscope serve needs the MCP SDK: {SERVE_INSTALL}") from exc
    return FastMCP, ToolError


def build(settings: ServerSettings, **server: Any) -> Any:
    """The MCP server with its tools; ``server``: FastMCP's own settings (host, port, transport security,
    body limit) for HTTP."""
    FastMCP, ToolError = fastmcp()  # noqa: N806 (classes)

    class Strict(FastMCP):  # type: ignore[misc, valid-type]
        async def call_tool(self, name: str, arguments: dict[str, Any]) -> Sequence[Any] | dict[str, Any]:
            tool = self._tool_manager.get_tool(name)
            if tool is not None:
                unknown = sorted(set(arguments or {}) - set(tool.parameters.get("properties", {})))
                if unknown:
                    takes = ", ".join(tool.parameters.get("properties", {}))
                    raise ToolError(f"{name} takes no {', '.join(unknown)}; it takes: {takes}")
            return await super().call_tool(name, arguments)

    mcp = Strict("halluscope", instructions=INSTRUCTIONS, log_level="WARNING", **server)
    add_tools(mcp, settings, ToolError)
    return mcp


def add_tools(mcp: Any, settings: ServerSettings, ToolError: type) -> None:  # noqa: N803 (a class)
    """The server's tools, each a request under the server's settings; a halluscope error is the tool's."""

    async def tool_error(call: Any) -> dict[str, Any]:
        try:
            return await call
        except HalluscopeError as exc:
            raise ToolError(str(exc)) from None

    @mcp.tool()
    async def check(
        answer: str,
        context: list[str] | str | None = None,
        question: str | None = None,
        method: str | None = None,
        threshold: float | None = None,
        max_calls: int | None = None,
        full: bool = False,
        tool_calls: list[dict[str, Any]] | None = None,
        judge_actions: bool = False,
    ) -> dict[str, Any]:
        """Check an answer: each sentence against the documents given as context (grounded), or without
        documents the model asked about each (Direct Question): the verdict, each flagged sentence with its
        score (higher = more likely hallucinated), its closest document sentence, the cost; full=true: all
        evidence. tool_calls: the conversation's calls in order ({name, arguments, result, status}), checked
        with the answer's claims of action, no model call; judge_actions=true: the judge reads the undecided."""
        asked = (answer, context, question, method, threshold, max_calls, not full, tool_calls, judge_actions)
        return await tool_error(settings.check(*asked))

    @mcp.tool()
    async def check_tool_call(
        name: str,
        arguments: dict[str, Any],
        context: list[str] | str,
        parameters: dict[str, Any] | None = None,
        lenient: bool = False,
    ) -> dict[str, Any]:
        """Check a tool call before it runs: each argument value against the conversation's texts given
        as context (the user's and system messages, earlier tool results) and the tool's JSON schema, with
        no model call. Returns a unit an argument (score 1: stated nowhere in the conversation, 0: found,
        null: not checkable), why, and the verdict; lenient=true lets through a qualifier after a comma
        and a date given relative to today."""
        return await tool_error(settings.check_tool_call(name, arguments, context, parameters, lenient))

    @mcp.tool()
    async def detect(
        method: str,
        inputs: dict[str, Any],
        options: dict[str, Any] | None = None,
        max_calls: int | None = None,
    ) -> dict[str, Any]:
        """Run one halluscope method by name on its inputs (the `methods` tool lists each method's inputs
        and options with their JSON schemas); the server's operator chooses its models and files. Returns
        the method's result: units with scores."""
        return await tool_error(settings.detect(method, inputs, options, max_calls))

    @mcp.tool()
    def methods() -> list[dict[str, Any]]:
        """Every halluscope method: its summary and the JSON schemas of its inputs and options."""
        return method_schemas()
