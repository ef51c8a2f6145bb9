"""An OpenAI-compatible guard proxy (`halluscope serve --proxy UPSTREAM`): ``POST /v1/chat/completions``
is forwarded to the upstream as it came, its reply returned unchanged, plus the check of its answer
against the request's own documents (its tool messages and system/developer messages, as the operator
chooses): a ``halluscope`` object in the JSON body and an ``X-Halluscope-Verdict`` header, or with
``stream: true`` the tokens passed through as they arrive and the verdict in a last chunk before
``[DONE]``. ``GET /v1/models`` is passed through.

The upstream's key: the operator's (``--upstream-key-env NAME``: read from that variable, sent only to
the upstream), or, on a server without a token of its own, the client's ``Authorization`` as it came;
never both: a client that sends one to a proxy holding the operator's is refused. A proxy with a token
(its clients' ``Authorization`` is that token) needs the operator's key.
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from typing import Any, Literal

from halluscope.errors import ConfigError, HalluscopeError, redact_credentials
from halluscope.serve.service import RequestTimeout, ServerSettings
from halluscope.streaming import STREAMED
from halluscope.tools.guard import REFUSAL

CONTEXT_ROLES = ("tool", "system", "developer")  # the message roles whose content may be an answer's documents
VERDICT_HEADER = "x-halluscope-verdict"
Part = bytes | tuple[int, dict[str, str]]  # a streamed reply's pieces: (status, headers) first, then bytes


@dataclass(frozen=True)
class ProxySettings:
    """Where the proxy forwards, whose key it sends, which messages are the documents, and what a
    flagged answer becomes (``annotate``: the reply as it came, with the verdict; ``block``: its text
    replaced by ``fallback``)."""

    upstream: str
    key_env: str | None = None
    context_from: tuple[str, ...] = ("tool", "system")
    on_flag: Literal["annotate", "block"] = "annotate"
    fallback: str = REFUSAL

    def __post_init__(self) -> None:
        if not self.upstream.startswith(("http://", "https://")):
            raise ConfigError(f"--proxy takes the upstream's base URL (http:// or https://), got {self.upstream!r}")
        object.__setattr__(self, "upstream", self.upstream.rstrip("/"))
        unknown = sorted(set(self.context_from) - set(CONTEXT_ROLES))
        if unknown or not self.context_from:
            raise ConfigError(f"--context-from takes some of {', '.join(CONTEXT_ROLES)}, got {','.join(unknown)}")
        if self.on_flag not in ("annotate", "block"):
            raise ConfigError(f"--on-flag takes annotate or block, got {self.on_flag!r}")
        if self.key_env is not None and not os.environ.get(self.key_env):
            raise ConfigError(f"--upstream-key-env names {self.key_env}, which is not set")

    def checked_with(self, token: str | None) -> ProxySettings:
        """Refused at start: a token of the proxy's own and no upstream key (the client's Authorization is
        the token, which must never reach the upstream)."""
        if token is not None and self.key_env is None:
            raise ConfigError(
                "a proxy with a token needs the upstream's key from the operator: --upstream-key-env NAME "
                "(its clients' Authorization is the proxy's token, which is never forwarded)"
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
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


class Proxy:
    """The proxy's routes, behind the server's guard (``http.Guard``), sharing its settings (the judge,
    the call ceiling, the timeout, the gateway and its cache)."""

    def __init__(self, proxy: ProxySettings, settings: ServerSettings) -> None:
        import httpx

        self.proxy = proxy
        self.settings = settings
        self.client = httpx.AsyncClient(timeout=settings.timeout)

    async def models(self, headers: dict[str, str]) -> tuple[int, bytes, dict[str, str]]:
        reply = await self.client.get(f"{self.proxy.upstream}/models", headers=self.proxy.upstream_headers(headers))
        return reply.status_code, reply.content, {"content-type": reply.headers.get("content-type", "")}

    def unchecked(self, answer: str, docs: list[str]) -> dict[str, Any] | None:
        """Why ``answer`` is not checked (None: it is)."""
        if not answer.strip():
            return {"verdict": None, "unchecked": "the reply holds no answer text (a tool call?)"}
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

    def action(self, checked: dict[str, Any]) -> str:
        if checked.get("verdict") is None:
            return "unchecked"
        if not checked["flagged"]:
            return "pass"
        return "blocked" if self.proxy.on_flag == "block" else "flagged"

    async def complete(self, request: dict[str, Any], headers: dict[str, str]) -> tuple[int, bytes, dict[str, str]]:
        """A non-streamed completion: the upstream's reply, its answer checked, the verdict added."""
        reply = await self.client.post(
            f"{self.proxy.upstream}/chat/completions", json=request, headers=self.proxy.upstream_headers(headers)
        )
        kind = {"content-type": reply.headers.get("content-type", "application/json")}
        if reply.status_code != 200:
            return reply.status_code, reply.content, kind  # the upstream's refusal, as it came
        try:
            body = reply.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):  # not a completion this proxy can read: as it came, unchecked
            return reply.status_code, reply.content, {**kind, VERDICT_HEADER: "unchecked"}
        choices = body.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
        message = choice.get("message") if isinstance(choice.get("message"), dict) else {}
        answer = _text(message.get("content"))
        checked = await self.verdict(answer, request)
        action = self.action(checked)
        body["halluscope"] = {**checked, "action": action}
        if action == "blocked":
            body["halluscope"]["blocked"] = answer
            message["content"] = self.proxy.fallback
        return 200, json.dumps(body).encode(), {**kind, VERDICT_HEADER: action}

    async def stream(self, request: dict[str, Any], headers: dict[str, str]) -> AsyncIterator[Part]:
        """A streamed completion: first (status, headers), then each upstream line as it arrives; the
        answer's deltas gathered and, as each sentence ends, checked on a thread while the stream goes on
        (a method that must see the whole answer is checked at its end); before ``[DONE]`` one more chunk
        with the verdict."""
        sent = self.proxy.upstream_headers(headers)
        async with self.client.stream(
            "POST", f"{self.proxy.upstream}/chat/completions", json=request, headers=sent
        ) as reply:
            kind = {"content-type": reply.headers.get("content-type", "text/event-stream")}
            yield reply.status_code, kind
            if reply.status_code != 200:
                yield await reply.aread()
                return
            answer: list[str] = []
            last: dict[str, Any] = {}
            checking = self.checking_while_streamed(request)
            try:
                async for line in reply.aiter_lines():
                    data = line[len("data:") :].strip() if line.startswith("data:") else None
                    if data == "[DONE]":
                        break
                    if data:
                        last = _gathered(data, answer, checking.feed if checking else None) or last
                    yield (line + "\n").encode()
                checked = await self.streamed_verdict("".join(answer), request, checking)
            except BaseException:
                if checking is not None:
                    checking.cancel()  # the client left or the upstream failed: no further judge call
                raise
            closing = {**{k: last.get(k) for k in ("id", "object", "created", "model")}, "choices": []}
            closing["halluscope"] = {**checked, "action": self.action(checked)}
            yield f"data: {json.dumps(closing)}\n\ndata: [DONE]\n\n".encode()

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
        self, answer: str, request: dict[str, Any], checking: StreamedCheck | None
    ) -> dict[str, Any]:
        """The streamed answer's verdict: its check's, now that the stream has ended, or the whole answer's."""
        if checking is None:
            return await self.verdict(answer, request)
        checking.feed.put(None)
        skipped = self.unchecked(answer, checking.docs)
        if skipped is not None:
            checking.cancel()
            return skipped
        return await _guarded(checking.task)


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
    """A check's brief verdict, or, when it failed, why (one redacted line): the reply goes on without it."""
    try:
        return await work
    except RequestTimeout as exc:
        return {"verdict": None, "error": str(exc)}
    except HalluscopeError as exc:
        return {"verdict": None, "error": redact_credentials(str(exc))}


def _gathered(data: str, answer: list[str], feed: queue.SimpleQueue[str | None] | None) -> dict[str, Any] | None:
    """One streamed chunk read: its content delta added to ``answer`` (and to ``feed``, a check reading
    as the stream goes); the chunk (None: not JSON)."""
    try:
        chunk = json.loads(data)
    except json.JSONDecodeError:
        return None
    for choice in chunk.get("choices") or []:
        delta = (choice or {}).get("delta") or {}
        if isinstance(delta.get("content"), str):
            answer.append(delta["content"])
            if feed is not None:
                feed.put(delta["content"])
    return chunk
