"""`halluscope serve`: halluscope for an agent outside Python, over the Model Context Protocol (the
official MCP SDK): on standard input and output (``--mcp``, what a desktop client or an editor starts),
or over streamable HTTP (``--http HOST:PORT``, at /mcp), where a plain ``POST /check`` takes the same
JSON as the ``check`` tool, ``POST /check-tool-call`` as ``check_tool_call``, and ``GET /health`` says the
server is up. Four tools:

- ``check``: one answer checked (``halluscope.check``: grounded with documents, Direct Question
  without), its verdict drawn;
- ``check_tool_call``: a tool call's arguments against the conversation before it runs
  (``halluscope.check_tool_call``, no model call);
- ``detect``: any registered method by name, on inputs and options as ``methods`` describes them;
- ``methods``: every method with the JSON schemas of its inputs and options, read from its contract.

Only the operator chooses what the server calls or reads: its flags fix every model, judge and file,
and a request that names another is refused (``runtime.serving``). Every request has a call budget
(``max_calls``, at most the server's, ``--max-calls``) and a timeout, and stops making calls when
either runs out or its client leaves; an error comes back as the tool's error, one line, credentials
redacted. Over HTTP every route checks Host and Origin, a token where one is set (required beyond
loopback), JSON only and a body limit (``serve.http``).
"""

from halluscope.serve.http import HttpSettings, serve_http
from halluscope.serve.mcp import build
from halluscope.serve.service import DEFAULT_TIMEOUT_S, SERVE_INSTALL, ServerSettings
from halluscope.serve.stdio import serve_stdio

__all__ = ["DEFAULT_TIMEOUT_S", "SERVE_INSTALL", "HttpSettings", "ServerSettings", "build", "serve_http", "serve_stdio"]
