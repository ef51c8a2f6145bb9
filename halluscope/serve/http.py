"""The server over HTTP: MCP's streamable HTTP at /mcp, ``POST /check`` (the check tool's JSON),
``POST /check-tool-call`` (a tool call's arguments against the conversation, no model call),
``GET /health`` and, with ``--proxy``, ``/v1/chat/completions`` and ``/v1/models`` (``serve.proxy``),
every route behind one guard.

The guard, in order: the Host and Origin headers (on a loopback bind only loopback names, as the MCP SDK
holds /mcp, so a web page cannot reach the server by DNS rebinding; an Origin the operator did not allow
is refused on any bind), the token (``Authorization: Bearer``, compared in constant time; required on a
bind other than loopback), JSON only on POST (415), and the body limit (413 before the body is read
whole). Bad input is a 400 with one line; nothing a client sends puts a traceback in the log. A request
whose client leaves, or whose timeout passes, makes no further model call (``ServerSettings.run``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any, TypeVar

from halluscope.errors import ConfigError, HalluscopeError, redact_credentials
from halluscope.serve.proxy import Part, Proxy, ProxySettings, checked_request
from halluscope.serve.service import CHECK_FIELDS, SERVE_INSTALL, TOOL_CALL_FIELDS, RequestTimeout, ServerSettings
from halluscope.version import __version__

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]
Refusal = tuple[int, dict[str, Any], dict[str, str]]  # status, JSON body, headers
T = TypeVar("T")

DEFAULT_MAX_BODY = 1_000_000  # bytes of a request body
TOKEN_ENV = "HALLUSCOPE_SERVE_TOKEN"
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
UNAUTHORISED = {"www-authenticate": "Bearer"}
log = logging.getLogger("halluscope.serve")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class HttpSettings:
    """Where the server listens and what its guard holds a request to: the token (None: none needed, on
    loopback only), the largest body, and Host / Origin values the operator allows besides loopback's."""

    host: str = "127.0.0.1"
    port: int = 8765
    token: str | None = None
    max_body: int = DEFAULT_MAX_BODY
    hosts: tuple[str, ...] = ()
    origins: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.token is not None and len(self.token) < 16:
            raise ConfigError("a serve token takes at least 16 characters (e.g. `openssl rand -hex 32`)")
        if not self.loopback and self.token is None:
            raise ConfigError(
                f"serving on {self.host}, beyond this machine, needs a token: set {TOKEN_ENV} (or token=TOKEN), "
                "and clients send 'Authorization: Bearer <token>'; or bind 127.0.0.1",
                settings=("token=",),
            )
        if self.max_body < 1:
            raise ConfigError(
                f"max_body takes a number of bytes of at least 1, got {self.max_body}", settings=("max_body",)
            )

    @property
    def loopback(self) -> bool:
        return is_loopback(self.host)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def allowed_hosts(self) -> list[str] | None:
        """The Host values served (None: any, where a token guards a bind beyond loopback and the operator
        named none)."""
        if self.loopback:
            return [f"{name}:*" for name in LOOPBACK_NAMES] + list(self.hosts)
        return list(self.hosts) or None

    def allowed_origins(self) -> list[str]:
        loopback = [f"http://{name}:*" for name in LOOPBACK_NAMES] if self.loopback else []
        return loopback + list(self.origins)


def _allowed(value: str, patterns: list[str]) -> bool:
    """``value`` is one of ``patterns`` ('name:*' takes any port), as the MCP SDK matches them."""
    return any(value == p or (p.endswith(":*") and value.startswith(p[:-1])) for p in patterns)


async def respond(send: Send, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
    data = json.dumps(body).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    raw += [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": data})


class Guard:
    """Every HTTP route of the server behind the same checks (the module's docstring), then /health,
    /check, or the MCP app."""

    def __init__(self, mcp_app: App, settings: ServerSettings, http: HttpSettings, proxy: Proxy | None = None) -> None:
        self.mcp_app = mcp_app
        self.settings = settings
        self.http = http
        self.proxy = proxy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.mcp_app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        refused = self.refusal(scope, headers)
        if refused is not None:
            await respond(send, *refused)
            return
        body = b""
        if scope["method"] == "POST":
            read = await self.body(receive)
            if isinstance(read, tuple):
                await respond(send, *read)
                return
            body = read
        if self.proxy is not None and scope["path"].rstrip("/") in ("/v1/chat/completions", "/v1/models"):
            if self.http.token is not None:
                headers.pop("authorization", None)  # the proxy's own token, checked: never sent upstream
            await self.proxied(scope, headers, body, receive, send)
            return
        await self.route(scope, body, receive, send)

    async def proxied(self, scope: Scope, headers: dict[str, str], body: bytes, receive: Receive, send: Send) -> None:
        """The proxy's routes (``serve.proxy``): a refused request is one line; an upstream that cannot be
        reached is a 502; a completion whose client leaves is cut (its check makes no further call)."""
        import httpx

        proxy = self.proxy
        assert proxy is not None
        try:
            if scope["path"].rstrip("/") == "/v1/models":
                if scope["method"] != "GET":
                    await respond(send, 405, {"error": "GET /v1/models"}, {"allow": "GET"})
                    return
                await send_raw(send, *await proxy.models(headers))
                return
            if scope["method"] != "POST":
                await respond(send, 405, {"error": "POST /v1/chat/completions"}, {"allow": "POST"})
                return
            request = checked_request(chat_body(body))
            if request.get("stream") is True:  # a client that leaves mid-stream ends the stream and its check
                streamed = await unless_left(send_stream(send, proxy.stream(request, headers)), receive)
                if streamed is not None:
                    streamed.result()
                return
            work = await unless_left(proxy.complete(request, headers), receive)
            if work is not None:
                await send_raw(send, *work.result())
        except ConfigError as exc:
            await respond(send, 400, {"error": str(exc)})
        except httpx.HTTPError as exc:
            log.error("the upstream failed: %s", redact_credentials(f"{type(exc).__name__}: {exc}"))
            await respond(send, 502, {"error": "the upstream could not be reached; the server's log says why"})
        except Exception as exc:  # noqa: BLE001 - a fault of ours: one line in the log, never a traceback
            log.error("a proxied request failed: %s", redact_credentials(f"{type(exc).__name__}: {exc}"))
            with contextlib.suppress(Exception):  # a reply already under way cannot take a status
                await respond(send, 500, {"error": "the server failed on this request; its log says why"})

    def refusal(self, scope: Scope, headers: dict[str, str]) -> Refusal | None:
        """Why a request is refused before its body is read: Host, Origin, token, content type, size."""
        hosts = self.http.allowed_hosts()
        if hosts is not None and not _allowed(headers.get("host", ""), hosts):
            return 421, {"error": "this server does not answer for that Host"}, {}
        origin = headers.get("origin")
        if origin is not None and not _allowed(origin, self.http.allowed_origins()):
            return 403, {"error": "this server does not answer requests from that Origin"}, {}
        if self.http.token is not None:
            given = headers.get("authorization", "")
            expected = f"Bearer {self.http.token}"
            if not hmac.compare_digest(given.encode("utf-8", "replace"), expected.encode()):
                return 401, {"error": "this server needs 'Authorization: Bearer <token>'"}, UNAUTHORISED
        if scope["method"] == "POST":
            kind = headers.get("content-type", "").split(";")[0].strip().lower()
            if kind != "application/json":
                return 415, {"error": "this server takes JSON: Content-Type: application/json"}, {}
            declared = headers.get("content-length")
            if declared is not None and (not declared.isdigit() or int(declared) > self.http.max_body):
                return self.too_large()
        return None

    def too_large(self) -> Refusal:
        return 413, {"error": f"the body is larger than this server's limit of {self.http.max_body:,} bytes"}, {}

    async def body(self, receive: Receive) -> bytes | Refusal:
        """The request's body, read up to the limit (a chunked body past it is refused as it arrives)."""
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return 400, {"error": "the client left"}, {}
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.http.max_body:
                return self.too_large()
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def route(self, scope: Scope, body: bytes, receive: Receive, send: Send) -> None:
        path, method = scope["path"].rstrip("/") or "/", scope["method"]
        if path == "/health" and method == "GET":
            await respond(send, 200, self.settings.health() | {"version": __version__})
        elif path in POSTED:
            if method != "POST":
                await respond(send, 405, {"error": f"POST {path} takes a JSON object"}, {"allow": "POST"})
                return
            await self.check(path, body, receive, send)
        else:
            if scope["method"] == "POST":
                problem = jsonrpc_problem(body)
                if problem is not None:
                    await respond(send, 400, problem)
                    return
            await self.mcp_app(scope, replay(body, receive), send)

    async def check(self, path: str, body: bytes, receive: Receive, send: Send) -> None:
        """POST /check (the check tool's JSON) or /check-tool-call (``check_tool_call``'s); the work stops
        if the client leaves before its answer."""
        try:
            fields = check_body(body, path)
        except ConfigError as exc:
            await respond(send, 400, {"error": str(exc)})
            return
        checking = self.settings.check if path == "/check" else self.settings.check_tool_call
        work = await unless_left(checking(**fields), receive)
        if work is None:
            return
        try:
            await respond(send, 200, work.result())
        except RequestTimeout as exc:
            await respond(send, 504, {"error": str(exc)})
        except HalluscopeError as exc:
            await respond(send, 400, {"error": redact_credentials(str(exc))})
        except Exception as exc:  # noqa: BLE001 - a fault of ours: one line in the log, never a traceback
            log.error("POST /check failed: %s", redact_credentials(f"{type(exc).__name__}: {exc}"))
            await respond(send, 500, {"error": "the server failed on this request; its log says why"})


async def send_raw(send: Send, status: int, data: bytes, headers: dict[str, str]) -> None:
    raw = [(k.encode(), v.encode()) for k, v in headers.items() if v] + [(b"content-length", str(len(data)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": data})


async def send_stream(send: Send, parts: AsyncIterator[Part]) -> None:
    """A streamed reply: its (status, headers) first, then each piece as it comes."""
    async for part in parts:
        if isinstance(part, tuple):
            status, headers = part
            raw = [(k.encode(), v.encode()) for k, v in headers.items() if v]
            await send({"type": "http.response.start", "status": status, "headers": raw})
        else:
            await send({"type": "http.response.body", "body": part, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


def chat_body(body: bytes) -> dict[str, Any]:
    """A chat completion request: a JSON object with its messages."""
    found = parsed_json(body)
    if not isinstance(found, dict) or not isinstance(found.get("messages"), list):
        raise ConfigError('POST /v1/chat/completions takes a JSON object with "messages" (a list)')
    return found


def parsed_json(body: bytes) -> Any:
    """A body's JSON, or a ConfigError in one line (encoding, syntax, depth)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError("the body is not UTF-8 text") from None
    try:
        return json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise ConfigError("the body's JSON is nested too deeply") from None
    except json.JSONDecodeError:
        raise ConfigError("the body is not JSON") from None


def _no_constant(name: str) -> Any:
    """NaN and Infinity, which Python's JSON reads and JSON itself has not: refused (a NaN temperature
    once reached the upstream as an unreadable body)."""
    raise ConfigError(f"the body holds {name}, which is not a JSON number")


# the routes that take a check's JSON object: what each must hold, and every field it takes
POSTED = {
    "/check": (("answer",), '"answer" (a text)', CHECK_FIELDS),
    "/check-tool-call": (
        TOOL_CALL_FIELDS[:3],
        '"name", "arguments" and "context" (the conversation\'s texts)',
        TOOL_CALL_FIELDS,
    ),
}


def check_body(body: bytes, path: str = "/check") -> dict[str, Any]:
    """A check route's JSON object, or a ConfigError in one line (encoding, syntax, depth, fields)."""
    found = parsed_json(body)
    required, needs, fields = POSTED[path]
    if not isinstance(found, dict) or any(f not in found for f in required):
        raise ConfigError(f"POST {path} takes a JSON object with {needs}")
    unknown = sorted(set(found) - set(fields))
    if unknown:
        raise ConfigError(f"POST {path} takes no {', '.join(unknown)}; it takes: {', '.join(fields)}")
    return found


def jsonrpc_problem(body: bytes) -> dict[str, Any] | None:
    """A JSON-RPC error for a body the MCP SDK would mishandle: too deep to parse, or a request whose id
    is neither a text nor a number (the SDK took it for a notification: 202 and no answer)."""
    try:
        found = json.loads(body)
    except RecursionError:
        return _rpc_error(-32700, "Parse error: the JSON is nested too deeply")
    except (ValueError, UnicodeDecodeError):
        return None  # the SDK answers a parse error itself
    for message in found if isinstance(found, list) else [found]:
        if not isinstance(message, dict) or "method" not in message or "id" not in message:
            continue
        if isinstance(message["id"], bool) or not isinstance(message["id"], str | int):
            return _rpc_error(-32600, "Invalid Request: an id is a string or a number")
    return None


def _rpc_error(code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}


def replay(body: bytes, receive: Receive) -> Receive:
    """The body already read, handed to the next app as if it came now; then the client's own messages."""
    sent = False

    async def again() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return again


async def unless_left(work: Awaitable[T], receive: Receive) -> asyncio.Future[T] | None:
    """``work`` run to its end, or cancelled when the client leaves first (None): a request's budget is then
    cut (``ServerSettings.run``), so its work makes no further model call."""
    task = asyncio.ensure_future(work)
    left = asyncio.ensure_future(disconnected(receive))
    await asyncio.wait({task, left}, return_when=asyncio.FIRST_COMPLETED)
    if not task.done():
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return None
    left.cancel()
    return task


async def disconnected(receive: Receive) -> None:
    """Returns when the client has left (its body was read already: what follows is its disconnect)."""
    while (await receive())["type"] != "http.disconnect":
        pass


MCP_SDK_LOG = "mcp.server.streamable_http"


class ClientClosedSession(logging.Filter):
    """The MCP SDK logs an error with a traceback each time a client closes its session's SSE stream ("Error
    in standalone SSE ..."): a client leaving is no fault, so the record becomes one debug line."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.getMessage().startswith("Error in standalone SSE"):
            return True
        record.exc_info, record.exc_text, record.levelno, record.levelname = None, None, logging.DEBUG, "DEBUG"
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


def quiet_closed_sessions() -> None:
    """``ClientClosedSession`` on the SDK's logger, once."""
    sdk = logging.getLogger(MCP_SDK_LOG)
    if not any(isinstance(f, ClientClosedSession) for f in sdk.filters):
        sdk.addFilter(ClientClosedSession())


def serve_http(settings: ServerSettings, http: HttpSettings, proxy: ProxySettings | None = None) -> None:
    """Serve until stopped: warmed first (spaCy, the operator's models), the socket bound by us (a busy
    port is one line), the ready line printed once it listens; on stop, the requests at work are cut."""
    import socket
    import sys

    try:
        import uvicorn
        from mcp.server.transport_security import TransportSecuritySettings
    except ImportError as exc:
        doors = "serve --http" + (" --proxy" if proxy is not None else "")
        missing = f"{exc.name} is missing"
        raise ConfigError(f"halluscope {doors} needs the serve extra ({missing}): {SERVE_INSTALL}") from None

    from halluscope.serve.mcp import build

    quiet_closed_sessions()
    hosts = http.allowed_hosts()
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=hosts is not None,
        allowed_hosts=hosts or [],
        allowed_origins=http.allowed_origins(),
    )
    mcp = build(
        settings, host=http.host, port=http.port, transport_security=security, max_request_body_size=http.max_body
    )
    app = Guard(mcp.streamable_http_app(), settings, http, Proxy(proxy, settings) if proxy is not None else None)
    warmed = settings.warm()
    family = socket.AF_INET6 if ":" in http.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((http.host, http.port))
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot listen on {http.url}: {exc.strerror or exc}") from None
    bound = HttpSettings(**{**http.__dict__, "port": sock.getsockname()[1]})

    class Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            guard = "a token" if http.token else "no token (loopback only)"
            shown = redact_credentials(proxy.upstream) if proxy else ""
            routes = "POST /check, GET /health" + (f", /v1/chat/completions -> {shown}" if proxy else "")
            loaded = f"; loaded {', '.join(redact_credentials(w) for w in warmed)}" if warmed else ""
            print(
                f"halluscope MCP server on {bound.url}/mcp ({routes}; {guard}{loaded}); Ctrl-C stops it",
                file=sys.stderr,
                flush=True,
            )

        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            settings.stop("the server is stopping")
            await super().shutdown(sockets)

    config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=5, lifespan="on")
    Server(config).run(sockets=[sock])
