"""A hallucination check in a LangChain agent's own loop (``langchain.agents.create_agent``): after the
model's final answer (an AI message without tool calls), the answer is checked against the documents of
the conversation (by default what this turn's tools returned: their text and the LangChain Documents in
their artifacts, e.g. a retriever tool's), and a flagged answer is annotated, asked again, blocked or
raised. The check is the guard's (``tools.guard.checked``: the same record of versions, risks, flags and
evidence) on the detector ``check`` would run (``check_answer.deployable``: the method, or a calibration
from `choose` with its threshold).

State written: ``hallucination`` (the guard's record: method, threshold, action, every version checked
with its units, flags and evidence) and, on an annotated or blocked answer, the message's
``response_metadata["halluscope"]`` (the verdict a client reads). A check that fails is recorded as
``unchecked`` and the answer goes through, unless ``on_error="block"``.

When the agent streams its model's messages (``agent.stream(..., stream_mode=["messages", "custom"])``: the
model streams only with "messages" among the modes) and its method checks a sentence alone
(``streaming.STREAMED``), each sentence of the model's answer is checked as soon as it ends,
while the model goes on, and its verdict comes on the agent's ``custom`` stream (``{"halluscope": {...}}``);
the answer's check is then made of those sentences' checks, not run again.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Literal, NotRequired

from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest, ModelResponse, hook_config
from langchain.agents.middleware.types import ToolCallRequest
from langchain_core.callbacks import BaseCallbackHandler, BaseCallbackManager
from langchain_core.documents import Document
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import ensure_config, set_config_context
from langchain_core.tools import BaseTool
from langgraph.config import get_stream_writer
from langgraph.runtime import Runtime
from langgraph.types import Command

from halluscope.backends.gateway import default_gateway
from halluscope.check_answer import deployable
from halluscope.errors import ConfigError, HalluscopeError, redact_credentials
from halluscope.results import DetectionResult
from halluscope.scoring.actions import Call
from halluscope.streaming import STREAMED, SentenceChecks, Splitter, late
from halluscope.tool_calls import (
    MAX_CONTEXT_CHARS,
    METHOD,
    check_action_claims,
    check_tool_call,
    claims_found,
    failed_result,
    flagged_reasons,
)
from halluscope.tools.guard import REFUSAL, checked, version_of

OnFlag = Literal["annotate", "reask", "block", "raise"]
ContextRule = Literal["turn", "all", "system"]
REASKED = "halluscope"  # the name on the message that asks the model again, so a turn's user message is found
REASK = "guard.reask"  # the prompt of the turn that asks the model again
MAX_REASKS = 5  # asking more often only spends calls: an answer still flagged then is annotated
ASK_USER = "I need more from you before I can do this: please give me {values}."  # a call blocked too often
log = logging.getLogger("halluscope.middleware")


class HallucinationFlagged(HalluscopeError):
    """An answer the middleware flagged, with ``on_flag='raise'``: ``record`` is the check's record."""

    def __init__(self, record: dict[str, Any]) -> None:
        texts = "; ".join(u["text"] for u in record.get("flagged", []))
        super().__init__(f"{record['method']} flagged the answer: {texts}")
        self.record = record


class HallucinationState(AgentState):
    hallucination: NotRequired[dict[str, Any]]


def _turn(messages: Sequence[AnyMessage]) -> tuple[int, HumanMessage | None]:
    """Where this turn starts: the index of the user's last message (not one the middleware added)."""
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if isinstance(m, HumanMessage) and m.name != REASKED:
            return i, m
    return 0, None


def _texts(message: AnyMessage) -> list[str]:
    """A tool's or system message's documents: the LangChain Documents in its artifact, else its text."""
    artifact = getattr(message, "artifact", None)
    found = artifact if isinstance(artifact, list) else [artifact]
    docs = [d.page_content for d in found if isinstance(d, Document)]
    if docs:
        return docs
    text = str(message.text).strip()
    return [text] if text else []


def conversation(messages: Sequence[AnyMessage]) -> list[str]:
    """What a tool call's arguments may rest on, oldest first: every system and user message and every
    tool result of the conversation that did not fail (never the model's own words, nor a re-ask's)."""
    said = []
    for m in messages:
        if isinstance(m, SystemMessage) or (isinstance(m, HumanMessage) and m.name != REASKED):
            said.append(str(m.text))
        elif isinstance(m, ToolMessage) and getattr(m, "status", None) != "error":
            said += _texts(m)
    return [t for t in said if t.strip()]


def _failed(result: ToolMessage) -> bool:
    """A tool result that says the call failed (``tool_calls.failed_result``)."""
    return failed_result(str(result.text), getattr(result, "status", None))


def _was_blocked(message: ToolMessage) -> bool:
    """A tool message this middleware wrote in place of a call it did not run."""
    return (message.response_metadata.get("halluscope") or {}).get("action") == "blocked"


def calls_of(messages: Sequence[AnyMessage]) -> list[Call]:
    """Every tool call the model made in the conversation, with its arguments and its result's text, failed
    where its result was an error or it has none."""
    results = {m.tool_call_id: m for m in messages if isinstance(m, ToolMessage)}
    made = []
    for m in messages:
        for call in m.tool_calls if isinstance(m, AIMessage) else []:
            result = results.get(call.get("id"))
            text = None if result is None else str(result.text)
            made.append(Call(call["name"], result is None or _failed(result), text, call.get("args")))
    return made


def documents(messages: Sequence[AnyMessage], rule: ContextRule | Sequence[str] = "turn") -> list[str]:
    """The documents an answer should rest on: ``"turn"`` the tool results since the user's last message,
    ``"all"`` every tool result of the conversation, ``"system"`` the system messages, or a list of tool
    names (their results, in any turn). A tool's error (``status="error"``) is no document: its words
    say what failed, not what is true."""
    if rule == "turn":
        start, _ = _turn(messages)
        chosen = [m for m in messages[start:] if isinstance(m, ToolMessage)]
    elif rule == "all":
        chosen = [m for m in messages if isinstance(m, ToolMessage)]
    elif rule == "system":
        chosen = [m for m in messages if isinstance(m, SystemMessage)]
    elif isinstance(rule, list | tuple) and all(isinstance(name, str) for name in rule):
        chosen = [m for m in messages if isinstance(m, ToolMessage) and m.name in rule]
    else:
        raise ConfigError(f"context must be 'turn', 'all', 'system', a list of tool names or a function, got {rule!r}")
    return [text for m in chosen if getattr(m, "status", None) != "error" for text in _texts(m)]


class _Watcher(BaseCallbackHandler):
    """The answer's tokens as the agent's model streams them: each ended sentence is checked at once on a
    thread, and its verdict written to the agent's stream (``stream_mode="custom"``) in order, as soon as it
    is ready, from the model's own thread (the stream writer is not a thread's to call)."""

    run_inline = True  # called in order, on the model's thread, under an async agent too

    def __init__(self, checks: SentenceChecks, write: Callable[[Any], None]) -> None:
        self.checks = checks
        self.write = write
        self.split = Splitter()
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="halluscope-stream")
        self.pending: list[tuple[tuple[str, int, int], Future[DetectionResult]]] = []
        self.verdicts: list[Any] = []

    def on_llm_new_token(self, token: str, **kwargs: Any) -> None:
        for found in self.split.add(token):
            self.pending.append((found, self.pool.submit(self.checks.run, found[0])))
        self._hand(wait=False)

    def _hand(self, wait: bool) -> None:
        while self.pending and (wait or self.pending[0][1].done()):
            found, future = self.pending.pop(0)
            verdict = self.checks.verdict(len(self.verdicts), found, future.result())
            self.verdicts.append(verdict)
            unit = verdict.unit
            shown = {"sentence": verdict.index, "text": verdict.text, "spans": [list(x) for x in unit.spans]}
            self.write(
                {
                    "halluscope": {
                        **shown,
                        "score": unit.score,
                        "probability": unit.probability,
                        "flagged": verdict.flagged,
                    }
                }
            )

    def finish(self) -> tuple[str, DetectionResult] | None:
        """The streamed answer and its result (None: nothing streamed, as under ``invoke``)."""
        try:
            if not self.split.text.strip():
                return None
            for found in self.split.end():
                self.pending.append((found, self.pool.submit(self.checks.run, found[0])))
            self._hand(wait=True)
            self.verdicts += late(self.checks, self.split, self.verdicts)
            return self.split.text, self.checks.answer(self.split.text, self.verdicts)
        finally:
            self.pool.shutdown(wait=False)


def watched(watcher: _Watcher) -> RunnableConfig:
    """The model call's config (the agent node's, LangGraph's stream handler in it) with the watcher among
    its callbacks, for that call alone (not the runs inside it)."""
    config = ensure_config()
    callbacks = config.get("callbacks")
    if isinstance(callbacks, BaseCallbackManager):
        callbacks = callbacks.copy()
        callbacks.add_handler(watcher, inherit=False)
    else:
        callbacks = [*(callbacks or []), watcher]
    return {**config, "callbacks": callbacks}


class HallucinationMiddleware(AgentMiddleware[HallucinationState, Any]):
    """Check an agent's final answer against its documents. ``method`` (default grounded) and ``model``
    (its judge); ``settings``: the other keywords ``halluscope.check`` takes (``calibration``: a file from
    `choose` / `calibrate`, which brings its method, options, model and threshold; ``threshold``;
    ``max_calls``: each check's call budget; the method's options). ``on_flag``: ``"annotate"`` (the
    verdict in the state and the message's metadata), ``"reask"`` (the model answers again, told the
    flagged sentences, at most ``max_reasks`` times; each answer is checked), ``"block"`` (the answer
    replaced by ``fallback``; the original kept in the record), ``"raise"`` (HallucinationFlagged).
    ``context``: which documents (see ``documents``) or a function of the agent's state.

    ``check_tool_calls``: each tool call's arguments are checked before the tool runs
    (``halluscope.check_tool_call``, no model call) against the conversation (``conversation``) and the
    tool's schema; an ungrounded one is blocked (``on_tool_flag="block"``: the tool does not run, and the
    model reads an error ToolMessage that names each ungrounded argument and asks it to use what the user
    gave or to ask them) or the call runs with the verdict in its ToolMessage's metadata
    (``"annotate"``); a turn whose calls were blocked ``max_tool_blocks`` times ends where the model's
    next calls are still ungrounded: those calls never run, and the reply asks the user for the values
    (``ASK_USER``, the record's action ``"stopped"``); ``lenient_tool_calls`` lets a model's completions
    through (``check_tool_call``); ``judge_actions`` has the middleware's judge read again each phrase
    matching flags (a search query, a message body: ``tool_calls.second_read``) and each claim of action
    matching cannot decide, against the trajectory (``tool_calls.judged_claim``), one call each.

    ``check_actions``: the final answer's sentences that claim an action ("I have cancelled your order")
    are checked against the conversation's tool calls (``calls_of``); a claim with no matching call that
    ran without failing is flagged in the record's ``actions`` and the answer's
    ``response_metadata["halluscope"]["actions"]``, with why."""

    state_schema = HallucinationState

    def __init__(
        self,
        method: str | None = None,
        model: Any = None,
        *,
        on_flag: OnFlag = "annotate",
        context: ContextRule | Sequence[str] | Callable[[dict[str, Any]], Sequence[Any]] = "turn",
        max_reasks: int = 1,
        fallback: str = REFUSAL,
        on_error: Literal["pass", "block"] = "pass",
        check_tool_calls: bool = False,
        on_tool_flag: Literal["annotate", "block"] = "block",
        max_context_chars: int = MAX_CONTEXT_CHARS,
        check_actions: bool = False,
        lenient_tool_calls: bool = False,
        judge_actions: bool = False,
        max_tool_blocks: int = 2,
        **settings: Any,
    ) -> None:
        super().__init__()
        if on_tool_flag not in ("annotate", "block"):
            raise ConfigError(f"on_tool_flag must be 'annotate' or 'block', got {on_tool_flag!r}")
        if on_flag not in ("annotate", "reask", "block", "raise"):
            raise ConfigError(f"on_flag must be 'annotate', 'reask', 'block' or 'raise', got {on_flag!r}")
        if on_error not in ("pass", "block"):
            raise ConfigError(f"on_error must be 'pass' or 'block', got {on_error!r}")
        for name, bound in (("max_reasks", max_reasks), ("max_tool_blocks", max_tool_blocks)):
            if isinstance(bound, bool) or not isinstance(bound, int) or not 0 <= bound <= MAX_REASKS:
                raise ConfigError(f"{name} must be a whole number from 0 to {MAX_REASKS}, got {bound!r}")
        if not callable(context):
            documents([], context)  # a bad rule is refused now, not at the first answer
        self.detector, decided_at = deployable(grounded=True, method=method, model=model, **settings)
        self.gateway = settings.get("gateway") or default_gateway()  # its prompt registry words the re-ask
        self.on: Literal["score", "probability"] = "probability" if self.detector.calibration else "score"
        self.threshold = decided_at
        self.on_flag = on_flag
        self.context = context
        self.max_reasks = max_reasks
        self.fallback = fallback
        self.on_error = on_error
        self.check_tool_calls = check_tool_calls
        self.on_tool_flag = on_tool_flag
        self.max_context_chars = max_context_chars
        self.check_actions = check_actions
        self.lenient_tool_calls = lenient_tool_calls
        self.max_tool_blocks = max_tool_blocks
        self.schemas: dict[str, dict[str, Any]] = {}  # each tool's arguments, as the model was offered them
        if judge_actions and self.detector.spec.context_field is None:
            raise ConfigError(f"judge_actions needs a judge that reads documents; {self.detector.method} reads none")
        self.action_judge = self.detector if judge_actions else None
        self.streamed: dict[str, DetectionResult] = {}  # an answer's result, made while it streamed
        self._streamed_lock = threading.Lock()

    def _documents(self, state: dict[str, Any]) -> list[Any]:
        if callable(self.context):
            return list(self.context(state))
        return documents(state["messages"], self.context)

    @hook_config(can_jump_to=["model"])
    def after_model(self, state: HallucinationState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        stopped = self._stopped(state["messages"])
        if stopped is not None:
            return stopped
        update = self._answer_checked(state)
        messages = state["messages"]
        if not self.check_actions or update is None or "hallucination" not in update:
            return update
        return self._with_actions(update, messages[-1], messages)

    def _with_actions(
        self, update: dict[str, Any], answer: AIMessage, messages: Sequence[AnyMessage]
    ) -> dict[str, Any]:
        """The answer's check with its claims of action checked against the conversation's calls: in the
        record, and in the answer's metadata where a claim is flagged (the answer's own action unchanged)."""
        _, user = _turn(messages)
        asked = str(user.text) if user is not None else None
        found = check_action_claims(str(answer.text), calls_of(messages), judge=self.action_judge, question=asked)
        actions = claims_found(found)
        flagged = actions["flagged"]
        update = {**update, "hallucination": {**update["hallucination"], "actions": actions}}
        if not flagged:
            return update
        marked = [m for m in update.get("messages", []) if isinstance(m, AIMessage) and m.id == answer.id]
        shown = marked[0] if marked else answer
        if update["hallucination"].get("action") == "blocked":  # the blocked text stays in the record alone
            actions = {**actions, "flagged": [{k: v for k, v in f.items() if k != "text"} for f in flagged]}
        verdict = {**shown.response_metadata.get("halluscope", {}), "actions": actions}
        kept = [m for m in update.get("messages", []) if m is not shown]
        meta = {**shown.response_metadata, "halluscope": verdict}
        return {**update, "messages": [*kept, shown.model_copy(update={"response_metadata": meta})]}

    def _stopped(self, messages: Sequence[AnyMessage]) -> dict[str, Any] | None:
        """A reply whose calls are still ungrounded after ``max_tool_blocks`` blocked calls this turn,
        replaced (same id, no calls) by a question to the user naming each value to give; None: it goes on."""
        answer = messages[-1] if messages else None
        if not (self.check_tool_calls and self.on_tool_flag == "block" and isinstance(answer, AIMessage)):
            return None
        start, user = _turn(messages)
        blocks = sum(isinstance(m, ToolMessage) and _was_blocked(m) for m in messages[start:])
        if not answer.tool_calls or blocks < self.max_tool_blocks:
            return None
        said, wanted = conversation(messages), []
        for call in answer.tool_calls:
            schema = self.schemas.get(call["name"])
            result = check_tool_call(call["name"], call["args"], context=said, parameters=schema,
                                     max_context_chars=self.max_context_chars, lenient=self.lenient_tool_calls,
                                     judge=self.action_judge)  # fmt: skip
            assert result.verdict is not None  # check_tool_call draws it
            wanted += [f"{result.units[i].evidence['argument']} (for {call['name']})" for i in result.verdict.flagged]
        if not wanted:
            return None
        record = {"method": METHOD, "action": "stopped", "turn": user.id if user is not None else None,
                  "blocked_calls": blocks, "flagged": wanted, "message_id": answer.id}  # fmt: skip
        reply = AIMessage(content=ASK_USER.format(values=", ".join(wanted)), id=answer.id,
                          response_metadata={"halluscope": record})  # fmt: skip
        return {"messages": [reply], "hallucination": record}

    def _answer_checked(self, state: HallucinationState) -> dict[str, Any] | None:
        messages = state["messages"]
        answer = messages[-1] if messages else None
        if not isinstance(answer, AIMessage):
            return None
        with self._streamed_lock:
            streamed = self.streamed.pop(str(answer.text), None)  # what its stream's checks made, if it streamed
        if answer.tool_calls:
            return None  # not a final answer: the agent is still calling its tools
        start, user = _turn(messages)
        previous = state.get("hallucination") or {}
        same_turn = user is not None and previous.get("turn") == user.id
        record: dict[str, Any] = {
            "method": self.detector.method,
            "threshold": self.threshold,
            "on": self.on,
            "turn": user.id if user is not None else None,
            "message_id": answer.id,
            "versions": previous.get("versions", []) if same_turn else [],
        }
        question = str(user.text) if user is not None else None
        try:
            docs = self._documents(state)
            if self.detector.spec.context_field is not None and not docs:
                raise ConfigError("no documents to check the answer against in this turn")
            if streamed is not None:  # its sentences were checked as the model streamed it
                version = version_of(self.detector, self.threshold, self.on, str(answer.text), streamed)
            else:
                version = checked(
                    self.detector, self.threshold, self.on, str(answer.text), question, docs or None, answer, None
                )
        except Exception as exc:  # noqa: BLE001 - recorded, and the agent goes on (or is blocked, as asked)
            if not isinstance(exc, HalluscopeError):  # a judge's own fault: one line in the log
                log.error("the check failed: %s", redact_credentials(f"{type(exc).__name__}: {exc}"))
            record |= {"action": "unchecked", "error": redact_credentials(f"{type(exc).__name__}: {exc}")}
            if self.on_error == "block":
                return self._blocked(answer, record)
            return {"hallucination": record}
        record |= {k: version[k] for k in ("risk", "units", "flagged", "calls", "prompt_tokens")}
        record["versions"] = [*record["versions"], version]
        unscored = [u["position"] for u in version["units"] if u["score"] is None]
        if unscored and not version["flagged"] and self.on_error == "block":  # a sentence whose check failed
            return self._blocked(answer, record | {"error": f"sentences {unscored} could not be checked"})
        if not version["flagged"]:
            return {"hallucination": record | {"action": "pass"}}
        return self._flagged(answer, record, messages[start:])

    def _flagged(self, answer: AIMessage, record: dict[str, Any], turn: Sequence[AnyMessage]) -> dict[str, Any]:
        if self.on_flag == "raise":
            raise HallucinationFlagged(record | {"action": "raised"})
        if self.on_flag == "block":
            return self._blocked(answer, record)
        asked = sum(isinstance(m, HumanMessage) and m.name == REASKED for m in turn)
        if self.on_flag == "reask" and asked < self.max_reasks:
            flagged = "\n".join(f"- {u['text']}" for u in record["flagged"])
            text = self.gateway.registry.get(REASK).render(flagged=flagged)[-1]["content"]
            reask = HumanMessage(content=text, name=REASKED)
            return {"messages": [reask], "hallucination": record | {"action": "reasked"}, "jump_to": "model"}
        return self._annotated(answer, record)

    def _annotated(self, answer: AIMessage, record: dict[str, Any]) -> dict[str, Any]:
        record = record | {"action": "annotated"}
        return {"messages": [self._marked(answer, answer.content, record)], "hallucination": record}

    def _blocked(self, answer: AIMessage, record: dict[str, Any]) -> dict[str, Any]:
        """The answer replaced by the fallback; its text kept in the state's record (the operator's), never
        in the message a client reads: the verdict there names the flagged units by position and score."""
        record = record | {"action": "blocked", "blocked": str(answer.text)}
        return {"messages": [self._marked(answer, self.fallback, record)], "hallucination": record}

    @staticmethod
    def _marked(answer: AIMessage, content: Any, record: dict[str, Any]) -> AIMessage:
        """The answer (same id: it replaces the model's in the state) with the verdict in its metadata;
        a blocked answer's flagged units without their text."""
        shown = {k: record.get(k) for k in ("method", "action", "threshold", "on", "risk", "flagged", "error")}
        kept = dict(answer.response_metadata)
        update: dict[str, Any] = {"content": content}
        if record.get("action") == "blocked":  # nothing that spells the blocked text: its units, log-probs, extras
            shown["flagged"] = [{k: v for k, v in u.items() if k != "text"} for u in shown["flagged"] or []]
            kept.pop("logprobs", None)
            update["additional_kwargs"] = {}
        return answer.model_copy(update={**update, "response_metadata": {**kept, "halluscope": shown}})

    def _watcher(self, state: dict[str, Any]) -> _Watcher | None:
        """A watcher of the model's stream, where the method checks a sentence alone and there are documents."""
        if self.detector.method not in STREAMED:
            return None
        try:
            docs = self._documents(state)
        except HalluscopeError:
            return None
        if not docs:
            return None
        _, user = _turn(state["messages"])
        question = str(user.text) if user is not None else None
        return _Watcher(SentenceChecks(self.detector, self.threshold, docs, question), get_stream_writer())

    def _keep(self, watcher: _Watcher) -> None:
        made = watcher.finish()
        if made is not None:
            with self._streamed_lock:
                self.streamed[made[0]] = made[1]

    def _offered(self, request: ModelRequest) -> None:
        """Keep the arguments of each tool the model is offered: a reply's calls are checked after it."""
        if self.check_tool_calls:
            self.schemas.update({t.name: {"properties": t.args} for t in request.tools if isinstance(t, BaseTool)})

    def wrap_model_call(self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]) -> ModelResponse:
        """The model's call, its streamed sentences checked as they end (nothing to do under ``invoke``)."""
        self._offered(request)
        watcher = self._watcher(request.state)
        if watcher is None:
            return handler(request)
        try:
            with set_config_context(watched(watcher)) as context:
                return context.run(handler, request)
        finally:
            self._keep(watcher)

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
    ) -> ModelResponse:
        self._offered(request)
        watcher = self._watcher(request.state)
        if watcher is None:
            return await handler(request)
        try:
            with set_config_context(watched(watcher)) as context:
                return await asyncio.create_task(handler(request), context=context)
        finally:
            await asyncio.to_thread(self._keep, watcher)

    def _tool_check(self, request: ToolCallRequest) -> tuple[ToolMessage | None, dict[str, Any]]:
        """The call's check: a ToolMessage that blocks it (None: it runs), and the verdict to attach."""
        call = request.tool_call
        schema = {"properties": request.tool.args} if request.tool is not None else None
        said = conversation(request.state["messages"])
        result = check_tool_call(call["name"], call["args"], context=said, parameters=schema,
                                 max_context_chars=self.max_context_chars, lenient=self.lenient_tool_calls,
                                 judge=self.action_judge)  # fmt: skip
        reasons = flagged_reasons(result)
        shown = {
            "method": result.method,
            "action": ("blocked" if self.on_tool_flag == "block" else "annotated") if reasons else "pass",
            "flagged": reasons,
            "context_dropped": result.meta.params["context_dropped"],
        }
        if not reasons or self.on_tool_flag == "annotate":
            return None, shown
        said = "; ".join(reasons)
        blocked = ToolMessage(
            content=f"Not run: these arguments are not grounded in the conversation ({said}). Use only values the "
            "user or a tool gave; where the user gave none, ask them for it.",
            tool_call_id=call["id"],
            name=call["name"],
            status="error",
            response_metadata={"halluscope": shown},
        )
        return blocked, shown

    @staticmethod
    def _with_verdict(result: ToolMessage | Command[Any], shown: dict[str, Any]) -> ToolMessage | Command[Any]:
        if not isinstance(result, ToolMessage):
            return result
        return result.model_copy(update={"response_metadata": {**result.response_metadata, "halluscope": shown}})

    def wrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]]
    ) -> ToolMessage | Command[Any]:
        """The tool call, its arguments checked first where ``check_tool_calls`` (blocked, or annotated)."""
        if not self.check_tool_calls:
            return handler(request)
        blocked, shown = self._tool_check(request)
        return blocked if blocked is not None else self._with_verdict(handler(request), shown)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        if not self.check_tool_calls:
            return await handler(request)
        blocked, shown = self._tool_check(request)  # no model call: matching alone, on the loop
        return blocked if blocked is not None else self._with_verdict(await handler(request), shown)

    @hook_config(can_jump_to=["model"])
    async def aafter_model(self, state: HallucinationState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """The same check, on a thread: the event loop stays free while the judge reads the documents."""
        return await asyncio.to_thread(self.after_model, state, runtime)
