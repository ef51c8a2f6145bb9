"""An OpenAI-compatible guard proxy (`halluscope serve --proxy UPSTREAM`): ``POST /v1/chat/completions``
is forwarded to the upstream as it came, its reply returned as it came, plus the check of each choice's
answer against the request's own documents (its tool messages and system/developer messages, as the
operator chooses): a ``halluscope`` object in the JSON body and an ``X-Halluscope-Verdict`` header, or
with ``stream: true`` the tokens passed through as they arrive and the verdict in a last chunk before
``[DONE]``. ``GET /v1/models`` is passed through.

What it relays of the upstream: the status, the body and the headers a client acts on (content type,
``Retry-After``, ``Location``, the request id and rate-limit headers), with the key it sent upstream
redacted wherever it appears (an upstream's 401 may quote it), and, in an error or a header, anything
shaped like a credential. What it blocks (``--on-flag block``, ``--on-error block``): a blocked answer's
text is replaced by the fallback and never reaches the client, in the verdict neither; a streamed reply
is then held until its check is done. What it bounds: a stream in total (``--request-timeout``) and in
idle time (``--stream-idle-timeout``); past either, or when the upstream's stream breaks, the client gets
what arrived and a last chunk that says why the check could not complete.

The upstream's key: the operator's (``--upstream-key-env NAME``: read from that variable, sent only to
the upstream), or, on a server without a token of its own, the client's ``Authorization`` as it came;
never both: a client that sends one to a proxy holding the operator's is refused. A proxy with a token
(its clients' ``Authorization`` is that token) needs the operator's key.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import queue
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from typing import Any, Literal

from halluscope.errors import MIN_SECRET, REDACTED, ConfigError, HalluscopeError, redact_credentials, redact_secrets
from halluscope.scoring.actions import Call
from halluscope.serve.service import RequestTimeout, ServerSettings
from halluscope.streaming import STREAMED
from halluscope.text import unicode_text
from halluscope.tool_calls import check_action_claims, check_tool_call, claims_found, failed_result, flagged_reasons
from halluscope.tools.guard import REFUSAL

CONTEXT_ROLES = ("tool", "system", "developer")  # the message roles whose content may be an answer's documents
VERDICT_HEADER = "x-halluscope-verdict"
RELAYED_HEADERS = ("content-type", "retry-after", "location", "x-request-id")  # and every x-ratelimit-*
DEFAULT_STREAM_IDLE_S = 60.0  # the longest silence of an upstream's stream
ACTIONS = ("blocked", "flagged", "unchecked", "pass")  # worst first: a reply of several choices shows its worst
NO_ANSWER_TEXT = "the reply holds no answer text (a tool call?)"
Part = bytes | tuple[int, dict[str, str]]  # a streamed reply's pieces: (status, headers) first, then bytes
log = logging.getLogger("halluscope.serve")


@dataclass(frozen=True)
class ProxySettings:
    """Where the proxy forwards, whose key it sends, which messages are the documents, what a flagged
    answer becomes (``annotate``: the reply as it came, with the verdict; ``block``: its text replaced by
    ``fallback``), what an answer it could not check becomes (``on_error``; default: ``block`` where
    ``on_flag`` is, else ``pass``), and how long a stream may stay silent."""

    upstream: str
    key_env: str | None = None
    context_from: tuple[str, ...] = ("tool", "system")
    on_flag: Literal["annotate", "block"] = "annotate"
    on_error: Literal["pass", "block"] | None = None
    idle_timeout: float = DEFAULT_STREAM_IDLE_S
    fallback: str = REFUSAL
    check_tool_calls: bool = False
    check_actions: bool = False
    judge_actions: bool = False

    def __post_init__(self) -> None:
        if not self.upstream.startswith(("http://", "https://")):
            raise ConfigError(f"the proxy's upstream takes a base URL (http:// or https://), got {self.upstream!r}")
        base, sep, query = self.upstream.partition("?")  # a query (Azure's ?api-version=) follows every route
        object.__setattr__(self, "upstream", base.rstrip("/") + sep + query)
        unknown = sorted(set(self.context_from) - set(CONTEXT_ROLES))
        if unknown or not self.context_from:
            raise ConfigError(
                f"context_from takes some of {', '.join(CONTEXT_ROLES)}, got {','.join(unknown)}",
                settings=("context_from",),
            )
        if self.on_flag not in ("annotate", "block"):
            raise ConfigError(f"on_flag takes annotate or block, got {self.on_flag!r}", settings=("on_flag",))
        if self.on_error is None:
            object.__setattr__(self, "on_error", "block" if self.on_flag == "block" else "pass")
        if self.on_error not in ("pass", "block"):
            raise ConfigError(f"on_error takes pass or block, got {self.on_error!r}", settings=("on_error",))
        if self.judge_actions and not self.check_actions:
            raise ConfigError(
                "judge_actions reads the claims check_actions finds: turn both on", settings=("judge_actions",)
            )
        if not math.isfinite(self.idle_timeout) or self.idle_timeout <= 0:
            raise ConfigError(f"idle_timeout takes a number of seconds above 0, got {self.idle_timeout:g}")
        if self.key_env is not None and not os.environ.get(self.key_env):
            raise ConfigError(f"key_env names {self.key_env}, which is not set", settings=("key_env",))

    def url(self, route: str) -> str:
        """The upstream's URL of ``route`` ('chat/completions'), the base's query after the path."""
        base, sep, query = self.upstream.partition("?")
        return f"{base}/{route}{sep}{query}"

    @property
    def holds_streams(self) -> bool:
        """A streamed reply is held until its check is done: what is blocked must never have been sent."""
        return self.on_flag == "block" or self.on_error == "block"

    def checked_with(self, token: str | None) -> ProxySettings:
        """Refused at start: a token of the proxy's own and no upstream key (the client's Authorization is
        the token, which must never reach the upstream)."""
        if token is not None and self.key_env is None:
            raise ConfigError(
                "a proxy with a token needs the upstream's key from the operator: key_env=NAME "
                "(its clients' Authorization is the proxy's token, which is never forwarded)",
                settings=("key_env=",),
            )
        return self

    def upstream_headers(self, client: dict[str, str]) -> dict[str, str]:
        """The headers sent upstream: JSON, and the one key this proxy's rules allow (``client``: the
        request's headers less the proxy's own token, which the guard checked and took out)."""
        headers = {"content-type": "application/json"}
        if self.key_env is not None:
            if "authorization" in client:
                raise ConfigError(
                    "this proxy sends the operator's key to the upstream; send no Authorization of your own"
                )
            headers["authorization"] = f"Bearer {os.environ[self.key_env]}"
        elif "authorization" in client:
            headers["authorization"] = client["authorization"]
        return headers


def sent_secrets(sent: dict[str, str]) -> tuple[str, ...]:
    """What of the headers sent upstream must never come back to a client: the Authorization and its token."""
    given = sent.get("authorization", "")
    return (given, given.partition(" ")[2]) if given else ()


def relayed(headers: Any, secrets: tuple[str, ...]) -> dict[str, str]:
    """The upstream's headers a client acts on, credentials redacted."""
    return {
        name.lower(): redact_secrets(value, secrets)
        for name, value in headers.items()
        if name.lower() in RELAYED_HEADERS or name.lower().startswith("x-ratelimit-")
    }


def scrubbed(data: bytes, secrets: tuple[str, ...], shapes: bool) -> bytes:
    """A body relayed: the keys sent upstream taken out wherever they occur; with ``shapes`` (an error's
    body) whatever looks like a credential too."""
    if shapes:
        return redact_secrets(data.decode("utf-8", "replace"), secrets).encode()
    for secret in sorted({s for s in secrets if len(s) >= MIN_SECRET}, key=len, reverse=True):
        data = data.replace(secret.encode(), REDACTED.encode())
    return data


def checked_request(request: dict[str, Any]) -> dict[str, Any]:
    """A chat request the proxy can forward and read, or a ConfigError in one line: every text valid
    Unicode, every message an object with a role and text content (a string, or parts whose ``text`` is a
    string), and no ``n`` above 1 on a stream (each choice is checked on its own; streamed, their deltas
    would mix)."""
    for i, message in enumerate(request["messages"]):
        where = f"messages[{i}]"
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise ConfigError(f"{where} must be an object with a role")
        content = message.get("content")
        if isinstance(content, list):
            for j, part in enumerate(content):
                if not isinstance(part, dict):
                    raise ConfigError(f"{where}.content[{j}] must be an object (a content part)")
                if part.get("type") == "text" and not isinstance(part.get("text"), str):
                    raise ConfigError(f"{where}.content[{j}].text must be a string")
        elif content is not None and not isinstance(content, str):
            raise ConfigError(f"{where}.content must be a string, a list of parts or null")
    for where, text in _strings(request):
        unicode_text(text, where)
    n = request.get("n")
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise ConfigError(f"n must be a whole number of at least 1, got {n!r}")
    if request.get("stream") is True and n not in (None, 1):
        raise ConfigError("a streamed request takes n = 1 here (each choice is checked on its own): stream: false")
    return request


def _strings(value: Any) -> list[tuple[str, str]]:
    """Every string in a JSON value, with where it lies (keys too), walked without recursion."""
    found, todo = [], [("the body", value)]
    while todo:
        where, item = todo.pop()
        if isinstance(item, str):
            found.append((where, item))
        elif isinstance(item, dict):
            for key, inner in item.items():
                found.append((f"{where} (a key)", key))
                todo.append((f"{where}.{key}" if where != "the body" else str(key), inner))
        elif isinstance(item, list):
            todo += [(f"{where}[{i}]", inner) for i, inner in enumerate(item)]
    return found


def documents(messages: Any, roles: tuple[str, ...]) -> list[str]:
    """The texts of the request's messages in ``roles``: what the answer should rest on."""
    found = []
    for m in messages if isinstance(messages, list) else []:
        if isinstance(m, dict) and m.get("role") in roles:
            text = _text(m.get("content"))
            if text.strip():
                found.append(text)
    return found


def question(messages: Any) -> str | None:
    """The user's last message: what the answer answers."""
    listed = messages if isinstance(messages, list) else []
    users = [m for m in listed if isinstance(m, dict) and m.get("role") == "user"]
    return (_text(users[-1].get("content")) or None) if users else None


def _text(content: Any) -> str:
    """A message's content as text: a string, or the text parts of a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = (p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "text")
        return "\n".join(t for t in texts if isinstance(t, str))
    return ""


def tool_schemas(request: dict[str, Any]) -> dict[str, Any]:
    """The request's tools' parameter schemas by name (OpenAI's ``tools``: ``{"type": "function",
    "function": {"name", "parameters"}}``)."""
    found = {}
    for t in request.get("tools") or []:
        function = t.get("function") if isinstance(t, dict) else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            found[function["name"]] = (
                function.get("parameters") if isinstance(function.get("parameters"), dict) else None
            )
    return found


def calls_checked(message: dict[str, Any], request: dict[str, Any]) -> list[dict[str, Any]]:
    """Each tool call of a reply's message checked against the request's system, developer, user and tool
    messages and the tool's schema (``check_tool_call``, no model call): its name, the ungrounded
    arguments with why, and whether its arguments could be read at all."""
    said = documents(request.get("messages"), ("system", "developer", "user", "tool"))
    schemas, found = tool_schemas(request), []
    for call in message.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        arguments = _arguments_of(function.get("arguments")) if isinstance(function, dict) else None
        if not isinstance(name, str) or arguments is None:
            found.append({"name": name, "unchecked": "its arguments are not a JSON object"})
            continue
        result = check_tool_call(name, arguments, context=said, parameters=schemas.get(name))
        found.append({"name": name, "flagged": flagged_reasons(result)})
    return found


def calls_in(messages: Any) -> list[Call]:
    """The request's tool calls in order, with their arguments and results, each failed where no tool
    message answered it or its answer is an error payload (``tool_calls.failed_result``): what an answer's
    claims of action are matched to."""
    listed = [m for m in messages if isinstance(m, dict)] if isinstance(messages, list) else []
    results = {m.get("tool_call_id"): _text(m.get("content")) for m in listed if m.get("role") == "tool"}
    made = []
    for m in listed:
        for call in (m.get("tool_calls") or []) if m.get("role") == "assistant" else []:
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict) and isinstance(function.get("name"), str):
                result = results.get(call.get("id"))
                arguments = _arguments_of(function.get("arguments"))
                made.append(Call(function["name"], failed_result(result), result, arguments))
    return made


def _arguments_of(given: Any) -> dict[str, Any] | None:
    """A call's arguments as OpenAI sends them (JSON text) read as an object; None where they are not one."""
    try:
        found = json.loads(given) if isinstance(given, str) else None
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


def withheld(checked: dict[str, Any]) -> dict[str, Any]:
    """A blocked answer's verdict: its scores and positions, none of its text (it was not to be delivered)."""
    flagged = [{k: v for k, v in unit.items() if k != "text"} for unit in checked.get("flagged", [])]
    return {**checked, "flagged": flagged} if "flagged" in checked else checked


class StreamCut(Exception):
    """An upstream's stream that ran past its bounds, broke off or sent what is not a completion chunk."""


class Proxy:
    """The proxy's routes, behind the server's guard (``http.Guard``), sharing its settings (the judge,
    the call ceiling, the timeout, the gateway and its cache)."""

    def __init__(self, proxy: ProxySettings, settings: ServerSettings) -> None:
        import httpx

        self.proxy = proxy
        self.settings = settings
        self.client = httpx.AsyncClient(timeout=settings.timeout)

    async def models(self, headers: dict[str, str]) -> tuple[int, bytes, dict[str, str]]:
        sent = self.proxy.upstream_headers(headers)
        secrets = sent_secrets(sent)
        reply = await self.client.get(self.proxy.url("models"), headers=sent)
        return reply.status_code, scrubbed(reply.content, secrets, shapes=True), relayed(reply.headers, secrets)

    def unchecked(self, answer: str, docs: list[str]) -> dict[str, Any] | None:
        """Why ``answer`` is not checked (None: it is)."""
        if not answer.strip():
            return {"verdict": None, "unchecked": NO_ANSWER_TEXT}
        if not docs:
            return {"verdict": None, "unchecked": f"the request holds no {'/'.join(self.proxy.context_from)} messages"}
        return None

    async def verdict(self, answer: str, request: dict[str, Any]) -> dict[str, Any]:
        """The check of ``answer`` against the request's documents, as POST /check answers it (brief), or
        why it was not checked."""
        messages = request.get("messages")
        docs = documents(messages, self.proxy.context_from)
        return self.unchecked(answer, docs) or await _guarded(
            self.settings.check(answer, context=docs, question=question(messages), brief=True)
        )

    async def with_actions(self, checked: dict[str, Any], answer: str, request: dict[str, Any]) -> dict[str, Any]:
        """With ``check_actions``, the answer's claims of action against the request's tool calls (no model
        call; with ``judge_actions`` the server's judge reads those matching cannot decide), as the
        middleware records them: annotated, the answer's own action unchanged (a blocked answer's claims
        keep no text)."""
        if not self.proxy.check_actions or not answer.strip():
            return checked
        calls = calls_in(request.get("messages"))
        if self.proxy.judge_actions:
            actions = await self.settings.judged_claims(answer, calls, question(request.get("messages")))
        else:
            actions = claims_found(check_action_claims(answer, calls))
        if checked["action"] == "blocked":
            actions = {**actions, "flagged": [{k: v for k, v in f.items() if k != "text"} for f in actions["flagged"]]}
        return {**checked, "actions": actions}

    def action(self, checked: dict[str, Any]) -> str:
        """What the proxy did: ``pass``, ``flagged`` (annotated), ``blocked`` (flagged, or not wholly checked
        under ``--on-error block``: the verdict's ``reason`` says which) or ``unchecked`` (passed)."""
        if checked.get("verdict") is None:
            nothing = checked.get("unchecked") == NO_ANSWER_TEXT  # no text to deliver or to withhold
            return "blocked" if self.proxy.on_error == "block" and not nothing else "unchecked"
        if checked["flagged"]:
            return "blocked" if self.proxy.on_flag == "block" else "flagged"
        if self.proxy.on_error == "block" and any(u["score"] is None for u in checked.get("scored", [])):
            return "blocked"  # a sentence whose check failed (a streamed answer's) was not checked
        return "pass"

    def acted(self, checked: dict[str, Any]) -> dict[str, Any]:
        """The verdict object a client reads: the check, the action, and why a blocked answer was blocked."""
        action = self.action(checked)
        if action != "blocked":
            return {**checked, "action": action}
        reason = "flagged" if checked.get("verdict") is not None and checked["flagged"] else "unchecked"
        return {**withheld(checked), "action": action, "reason": reason}

    async def complete(self, request: dict[str, Any], headers: dict[str, str]) -> tuple[int, bytes, dict[str, str]]:
        """A non-streamed completion: the upstream's reply, each choice's answer checked, the verdict added."""
        sent = self.proxy.upstream_headers(headers)
        secrets = sent_secrets(sent)
        reply = await self.client.post(self.proxy.url("chat/completions"), json=request, headers=sent)
        return await self.answered(reply.status_code, reply.content, relayed(reply.headers, secrets), request, secrets)

    async def answered(
        self, status: int, content: bytes, kind: dict[str, str], request: dict[str, Any], secrets: tuple[str, ...]
    ) -> tuple[int, bytes, dict[str, str]]:
        """A completion's reply as the client gets it: an upstream's refusal as it came (redacted); a
        completion with each choice checked on its own; anything else unchecked (or blocked)."""
        kind = {"content-type": "application/json", **kind}
        if status != 200:
            return status, scrubbed(content, secrets, shapes=True), kind
        content = scrubbed(content, secrets, shapes=False)
        try:
            body = json.loads(content)
        except ValueError:
            body = None
        choices = body.get("choices") if isinstance(body, dict) else None
        if not isinstance(choices, list) or not choices or not all(isinstance(c, dict) for c in choices):
            checked = self.acted({"verdict": None, "unchecked": "the upstream's reply is not a completion to read"})
            if checked["action"] == "blocked":
                why = "the upstream's reply could not be checked, and this proxy blocks what it could not check"
                refusal = json.dumps({"error": why, "halluscope": checked}).encode()
                return 502, refusal, {"content-type": "application/json", VERDICT_HEADER: "blocked"}
            return status, content, {**kind, VERDICT_HEADER: checked["action"]}
        verdicts = [await self.choice_checked(choice, request) for choice in choices]
        worst = min((v["action"] for v in verdicts), key=ACTIONS.index)
        if len(verdicts) == 1:
            body["halluscope"] = verdicts[0]
        else:
            pairs = enumerate(zip(choices, verdicts, strict=True))
            indexed = [{"index": c.get("index", i), **v} for i, (c, v) in pairs]
            body["halluscope"] = {"action": worst, "choices": indexed}
        return 200, json.dumps(body).encode(), {**kind, VERDICT_HEADER: worst}

    async def choice_checked(self, choice: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
        """One choice's answer checked; blocked, its message replaced by the fallback alone (no other field
        of it, nor its token log-probs, which spell the blocked text)."""
        message = choice.get("message") if isinstance(choice.get("message"), dict) else {}
        if self.proxy.check_tool_calls and message.get("tool_calls"):
            return self.calls_acted(choice, message, request)
        answer = _text(message.get("content"))
        checked = await self.with_actions(self.acted(await self.verdict(answer, request)), answer, request)
        if checked["action"] == "blocked":
            choice["message"] = {"role": message.get("role", "assistant"), "content": self.proxy.fallback}
            choice["logprobs"] = None
        return checked

    def calls_verdict(self, calls: list[dict[str, Any]], request: dict[str, Any]) -> dict[str, Any]:
        """A reply's tool calls checked (``calls_checked``): passed, flagged (annotated), or blocked under
        ``on_flag="block"``, where what could not be read counts as flagged."""
        checked = calls_checked({"tool_calls": calls}, request)
        flagged = any(c.get("flagged") or "unchecked" in c for c in checked)
        action = ("blocked" if self.proxy.on_flag == "block" else "flagged") if flagged else "pass"
        return {"verdict": "tool calls", "tool_calls": checked, "action": action}

    def calls_acted(self, choice: dict[str, Any], message: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
        """A reply's tool calls checked before the client sees them; blocked, the calls taken out and the
        fallback said in their place."""
        checked = self.calls_verdict(message.get("tool_calls") or [], request)
        if checked["action"] == "blocked":
            choice["message"] = {"role": message.get("role", "assistant"), "content": self.proxy.fallback}
            choice["finish_reason"] = "stop"
            choice["logprobs"] = None
        return checked

    async def stream(self, request: dict[str, Any], headers: dict[str, str]) -> AsyncIterator[Part]:
        """A streamed completion: first (status, headers), then each upstream line as it arrives (held
        until the check is done, where the proxy blocks); the answer's deltas gathered and, as each
        sentence ends, checked on a thread while the stream goes on (a method that must see the whole
        answer is checked at its end); before ``[DONE]`` one more chunk with the verdict. An upstream that
        answers with JSON is answered as a non-streamed completion is."""
        sent = self.proxy.upstream_headers(headers)
        secrets = sent_secrets(sent)
        async with self.client.stream("POST", self.proxy.url("chat/completions"), json=request, headers=sent) as reply:
            kind = relayed(reply.headers, secrets)
            if reply.status_code != 200 or not kind.get("content-type", "").startswith("text/event-stream"):
                status, data, kind = await self.answered(reply.status_code, await reply.aread(), kind, request, secrets)
                yield status, kind
                yield data
                return
            yield 200, kind
            read = StreamRead()
            checking = self.checking_while_streamed(request)
            held: list[bytes] | None = [] if self.proxy.holds_streams else None
            try:
                async for line in self.bounded(reply.aiter_lines()):
                    data = line[len("data:") :].strip() if line.startswith("data:") else None
                    if data == "[DONE]":
                        read.done = True
                        break
                    if data:
                        read.add(data, checking.feed if checking is not None and not read.problem else None)
                    out = scrubbed((line + "\n").encode(), secrets, shapes=False)
                    if held is None:
                        yield out
                    else:
                        held.append(out)
                if not read.done and not read.finished and not read.problem:
                    read.problem = "the upstream's stream ended before its answer did (no finish_reason, no [DONE])"
            except StreamCut as exc:
                read.problem = str(exc)
            except BaseException:
                if checking is not None:
                    checking.cancel()  # the client left: no further judge call
                raise
            if self.proxy.check_tool_calls and read.tool_calls and not read.problem:
                if checking is not None:
                    checking.cancel()  # a reply of tool calls: no answer to check
                checked = self.calls_verdict(read.calls(), request)
            else:
                checked = await self.with_actions(self.acted(await self.streamed_verdict(read, request, checking)),
                                            "".join(read.answer), request)  # fmt: skip
            if held is not None:
                blocked = checked["action"] == "blocked"
                for out in [self.fallback_chunk(read.last)] if blocked else held:
                    yield out
            closing = {**{k: read.last.get(k) for k in ("id", "object", "created", "model")}, "choices": []}
            closing["halluscope"] = checked
            yield f"data: {json.dumps(closing)}\n\ndata: [DONE]\n\n".encode()

    async def bounded(self, lines: AsyncIterator[str]) -> AsyncIterator[str]:
        """The upstream's lines, within the request's timeout in total and the idle timeout between two;
        a stream past either, or one that breaks off, is a StreamCut."""
        import httpx

        loop = asyncio.get_running_loop()
        total, idle = self.settings.timeout, self.proxy.idle_timeout
        deadline = loop.time() + total
        while True:
            left = deadline - loop.time()
            try:
                if left <= 0:
                    raise TimeoutError
                line = await asyncio.wait_for(anext(lines), min(idle, left))
            except StopAsyncIteration:
                return
            except TimeoutError:
                if deadline - loop.time() <= 0:
                    raise StreamCut(f"the upstream's stream ran past this server's timeout of {total:g} s") from None
                raise StreamCut(f"the upstream's stream sent nothing for {idle:g} s") from None
            except httpx.HTTPError as exc:
                raise StreamCut(f"the upstream's stream broke off ({type(exc).__name__})") from None
            yield line

    def fallback_chunk(self, last: dict[str, Any]) -> bytes:
        """A blocked stream's one chunk: the fallback as the answer's text, finished."""
        head = {**{k: last.get(k) for k in ("id", "created", "model")}, "object": "chat.completion.chunk"}
        choice = {"index": 0, "delta": {"role": "assistant", "content": self.proxy.fallback}, "finish_reason": "stop"}
        return f"data: {json.dumps({**head, 'choices': [choice]})}\n\n".encode()

    def checking_while_streamed(self, request: dict[str, Any]) -> StreamedCheck | None:
        """The check that reads a streamed answer's deltas as they come, started now; None where the
        request has no documents or the operator's method needs the whole answer."""
        messages = request.get("messages")
        docs = documents(messages, self.proxy.context_from)
        if not docs or self.settings.runs() not in STREAMED:
            return None
        feed: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        chunks = iter(feed.get, None)  # the thread's blocking reader: ends at the None the stream's end puts
        task = asyncio.ensure_future(self.settings.check_stream(chunks, docs, question(messages)))
        return StreamedCheck(feed, task, docs)

    async def streamed_verdict(
        self, read: StreamRead, request: dict[str, Any], checking: StreamedCheck | None
    ) -> dict[str, Any]:
        """The streamed answer's verdict: its check's, now that the stream has ended, or the whole answer's;
        why the check could not complete, where the stream did not."""
        answer = "".join(read.answer)
        if read.problem:
            if checking is not None:
                checking.cancel()
            return {"verdict": None, "unchecked": "the check could not complete", "error": read.problem}
        if checking is None:
            return await self.verdict(answer, request)
        checking.feed.put(None)
        skipped = self.unchecked(answer, checking.docs)
        if skipped is not None:
            checking.cancel()
            return skipped
        return await _guarded(checking.task)


@dataclass
class StreamRead:
    """What a streamed reply has said so far: its answer's deltas, its last chunk, whether it finished
    (a finish_reason, [DONE]), and the first thing in it that keeps its answer from being checked."""

    answer: list[str] = field(default_factory=list)
    tool_calls: dict[int, dict[str, Any]] = field(default_factory=dict)  # by index: id, name, arguments so far
    last: dict[str, Any] = field(default_factory=dict)
    finished: bool = False
    done: bool = False
    problem: str | None = None

    def add(self, data: str, feed: queue.SimpleQueue[str | None] | None) -> None:
        """One chunk's data read: its content delta added to the answer (and to ``feed``, a check reading
        as the stream goes)."""
        try:
            chunk = json.loads(data)
        except (ValueError, RecursionError):
            chunk = None
        if not isinstance(chunk, dict) or not isinstance(chunk.get("choices", []), list):
            self.problem = self.problem or "the upstream sent a line that is not a chat completion chunk"
            return
        self.last = chunk
        for choice in chunk.get("choices", []):
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                self.problem = self.problem or "the upstream streamed a choice this proxy cannot read (one choice)"
                continue
            self.finished = self.finished or bool(choice.get("finish_reason"))
            delta = choice.get("delta")
            if isinstance(delta, dict) and isinstance(delta.get("tool_calls"), list):
                self.add_calls(delta["tool_calls"])
            content = delta.get("content") if isinstance(delta, dict) else None
            if not isinstance(content, str):
                continue
            try:
                unicode_text(content, "the streamed answer")
            except ConfigError as exc:
                self.problem = self.problem or str(exc)
                continue
            self.answer.append(content)
            if feed is not None and self.problem is None:
                feed.put(content)

    def add_calls(self, deltas: list[Any]) -> None:
        """A chunk's tool-call deltas joined to the calls so far, by index: an id and a name as they first
        come, the arguments' text piece by piece."""
        for delta in deltas:
            function = delta.get("function") if isinstance(delta, dict) else None
            if not isinstance(function, dict) or not isinstance(delta.get("index", 0), int):
                self.problem = self.problem or "the upstream streamed a tool call this proxy cannot read"
                continue
            call = self.tool_calls.setdefault(delta.get("index", 0), {"id": None, "name": "", "arguments": ""})
            call["id"] = call["id"] or delta.get("id")
            for key in ("name", "arguments"):
                if isinstance(function.get(key), str):
                    call[key] += function[key]

    def calls(self) -> list[dict[str, Any]]:
        """The streamed tool calls, whole, in index order, as a non-streamed reply's message holds them."""
        return [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for _, c in sorted(self.tool_calls.items())
        ]


@dataclass
class StreamedCheck:
    """A streamed answer's check at work: the deltas go into ``feed`` (None: the stream has ended),
    ``task`` gives its brief verdict, ``docs`` are the request's documents it checks against."""

    feed: queue.SimpleQueue[str | None]
    task: asyncio.Future[dict[str, Any]]
    docs: list[str]

    def cancel(self) -> None:
        """No further call: the thread's reader ends, and the task's budget is cut."""
        self.feed.put(None)
        self.task.cancel()


async def _guarded(work: Awaitable[dict[str, Any]]) -> dict[str, Any]:
    """A check's brief verdict, or, when it failed, why (one redacted line): the reply goes on without it,
    or is blocked (``--on-error block``). A fault of ours is one line in the log, never a traceback."""
    try:
        return await work
    except RequestTimeout as exc:
        return {"verdict": None, "error": str(exc)}
    except HalluscopeError as exc:
        return {"verdict": None, "error": redact_credentials(str(exc))}
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - the check's fault must not end the client's reply
        log.error("a proxied check failed: %s", redact_credentials(f"{type(exc).__name__}: {exc}"))
        return {"verdict": None, "error": "the check failed; the server's log says why"}
