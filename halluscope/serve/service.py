"""What every request of one server shares and how one runs: the operator's choices (models, judge, call
ceiling: ``runtime.serving.Operator``), the gateway, the timeout; each request's work on a thread under
its own call budget, which is cut when the request's timeout passes or its client leaves, so the work
makes no further model call."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, cast

from pydantic import TypeAdapter

from halluscope.backends.budget import MAX_CALLS, CallBudget
from halluscope.backends.gateway import Gateway, default_gateway
from halluscope.calibration import Calibration
from halluscope.check_answer import check as check_answer
from halluscope.check_answer import deployable, method_of
from halluscope.checks import check_value
from halluscope.detectors import detector
from halluscope.errors import ConfigError, HalluscopeError, ModelSpecError, redact_credentials
from halluscope.results import DetectionResult
from halluscope.runtime import registry
from halluscope.runtime.serving import Operator
from halluscope.runtime.studio import options_schema
from halluscope.scoring.actions import Call
from halluscope.streaming import stream_check
from halluscope.text import checked_text
from halluscope.text import sentences as split_sentences
from halluscope.tool_calls import check_action_claims, check_tool_call, claims_found, given_tool_calls

SERVE_INSTALL = "pip install 'halluscope[serve]' (from a clone: pip install -e '.[serve]')"
DEFAULT_TIMEOUT_S = 600.0  # one request's wall-clock limit
CHECK_FIELDS = (  # the check tool's
    "answer", "context", "question", "method", "threshold", "max_calls", "tool_calls", "judge_actions",
)  # fmt: skip
TOOL_CALL_FIELDS = ("name", "arguments", "context", "parameters", "lenient")  # check_tool_call's


class RequestTimeout(ConfigError):
    """A request that ran past the server's timeout (its work was cut: it makes no further call)."""


class ServerSettings:
    """What every request of one server shares: its gateway, its operator's choices (the model and judge
    of every request, the specs a request may name besides, the call ceiling) and its timeout."""

    def __init__(
        self,
        gateway: Gateway | None = None,
        model: str | None = None,
        max_calls: int = MAX_CALLS,
        timeout: float = DEFAULT_TIMEOUT_S,
        judge: str | None = None,
        allowed: Iterable[str] = (),
        calibration: str | Path | Calibration | None = None,
    ) -> None:
        if timeout <= 0:
            raise ConfigError(f"a server needs a timeout > 0, got {timeout}")
        self.gateway = gateway
        self.operator = Operator(model, judge, frozenset(allowed), max_calls)
        self.timeout = timeout
        # the operator's pick, read once: every check runs it as it was fitted (its methods, options, threshold)
        self.calibration = Calibration.load(calibration) if isinstance(calibration, str | Path) else calibration
        self.running: set[CallBudget] = set()  # the budgets of the requests at work, cut when the server stops

    @property
    def model(self) -> str | None:
        return self.operator.model

    def limit(self, asked: Any) -> int:
        """A request's call budget: the one it asks for, at most the server's."""
        return self.operator.limit(asked)

    def with_gateway(self, options: dict[str, Any]) -> dict[str, Any]:
        if self.gateway is not None:
            options.setdefault("gateway", self.gateway)
        return options

    async def run(
        self, work: Callable[[CallBudget], DetectionResult], limit: int, brief: bool = False
    ) -> dict[str, Any]:
        """``work(budget)`` on a thread under a budget of ``limit`` calls, within the timeout; a halluscope error
        raises as one redacted line. A request that times out, or whose client leaves (its task is
        cancelled), has its budget cut: the thread makes no further model call."""
        budget = CallBudget(
            limit,
            scope="request",
            allow=f"a request's max_calls may raise it to this server's ceiling of {self.operator.max_calls:,}",
        )

        self.running.add(budget)
        try:
            result = await asyncio.wait_for(asyncio.to_thread(work, budget), self.timeout)
        except TimeoutError:
            budget.cut(f"it ran past this server's timeout of {self.timeout:g} s")
            raise RequestTimeout(f"the request ran past this server's timeout of {self.timeout:g} s") from None
        except asyncio.CancelledError:
            budget.cut("its client left")
            raise
        except HalluscopeError as exc:
            raise ConfigError(redact_credentials(f"{type(exc).__name__}: {exc}")) from None
        finally:
            self.running.discard(budget)
        return result.brief() if brief else result.model_dump(mode="json")

    def health(self) -> dict[str, Any]:
        """What GET /health says: the server is up, its model, and the calibration it runs (its methods,
        the model it was fitted on, its threshold)."""
        shown: dict[str, Any] = {"status": "ok", "model": self.model}
        if self.calibration is not None:
            fitted = self.calibration
            shown["calibration"] = {"methods": fitted.methods, "model": fitted.model, "threshold": fitted.threshold}
        return shown

    def warm(self) -> list[str]:
        """What every request needs, loaded before the server says it is ready: spaCy's sentencizer, and
        the operator's models (a local model's weights), so a first request does not time out loading them;
        the specs it warmed (what the ready line names)."""
        split_sentences("Warm up.")
        gateway = self.gateway or default_gateway()
        fitted = self.calibration.model if self.calibration is not None and self.model is None else None
        warmed = []
        for spec in sorted(self.operator.models | ({fitted} if fitted else set())):
            try:
                gateway.warm(spec)
            except ModelSpecError:  # no chat model (an NLI checkpoint, nli:PATH): its method loads it
                continue
            warmed.append(spec)
        return warmed

    def stop(self, because: str) -> None:
        """Every request at work makes no further call (the server is going away)."""
        for budget in list(self.running):
            budget.cut(because)

    def check_settings(
        self, method: Any = None, threshold: Any = None, max_calls: Any = None
    ) -> tuple[int, dict[str, Any]]:
        """A check's call limit and the keywords it runs with (``halluscope.check``'s), held to the
        operator's choices: its model, judge and calibration; an unknown method is refused here, by name."""
        check_value("check", "method", method, str | None)
        check_value("check", "threshold", threshold, float | None)
        limit = self.limit(max_calls)
        if method is not None:
            registry.get(method)
        options = self.with_gateway({})
        if self.operator.judge is not None and registry.get(self.runs(method)).refers.get("judge"):
            options["judge"] = self.operator.judge
        chosen = {"method": method, "model": self.operator.model, "calibration": self.calibration}
        return limit, {**chosen, "threshold": threshold, "max_calls": limit, **options}

    def runs(self, method: str | None = None) -> str:
        """The method a check runs: the one named, the calibration's, or grounded."""
        return method_of(method, self.calibration, grounded=True)[0]

    async def check(
        self,
        answer: Any,
        context: Any = None,
        question: Any = None,
        method: Any = None,
        threshold: Any = None,
        max_calls: Any = None,
        brief: bool = False,
        tool_calls: Any = None,
        judge_actions: Any = False,
    ) -> dict[str, Any]:
        """One answer checked (``halluscope.check``), every field checked before any work; ``brief``: the
        verdict, the flagged sentences and their closest document sentence (``DetectionResult.brief``);
        ``tool_calls``: the conversation's calls, checked with the answer (``result.actions``), the judge
        reading what matching cannot decide where ``judge_actions``."""
        checked_text(answer, "answer")
        check_value("check", "question", question, str | None)
        check_value("check", "judge_actions", judge_actions, bool)
        if tool_calls is not None:
            given_tool_calls(tool_calls)
        limit, settings = self.check_settings(method, threshold, max_calls)

        def work(budget: CallBudget) -> DetectionResult:
            return check_answer(
                answer, context=context, question=question, budget=budget, tool_calls=tool_calls,
                judge_actions=judge_actions, **settings,
            )  # fmt: skip

        return await self.run(work, limit, brief)

    async def judged_claims(self, answer: str, calls: Sequence[Call], question: str | None) -> dict[str, Any]:
        """An answer's claims of action against ``calls``, the server's judge reading against the
        trajectory (and the user's ``question``) each claim matching cannot decide
        (``tool_calls.check_action_claims``), under one request's budget; as every door reports them
        (``claims_found``)."""
        limit, settings = self.check_settings()

        def work(budget: CallBudget) -> DetectionResult:
            judge, _ = deployable(True, budget=budget, **settings)
            return check_action_claims(answer, calls, judge=judge, question=question)

        return claims_found(DetectionResult.model_validate(await self.run(work, limit)))

    async def check_tool_call(
        self, name: Any, arguments: Any, context: Any, parameters: Any = None, lenient: Any = False
    ) -> dict[str, Any]:
        """One tool call's arguments checked against the conversation's texts (``context``: a text or a
        list) and its tool's JSON schema (``halluscope.check_tool_call``: no model call), every field
        checked before any work."""
        check_value("check_tool_call", "parameters", parameters, dict | None)
        check_value("check_tool_call", "lenient", lenient, bool)
        texts = [context] if isinstance(context, str) else context

        def work(budget: CallBudget) -> DetectionResult:
            return check_tool_call(name, arguments, context=texts, parameters=parameters, lenient=lenient)

        return await self.run(work, self.limit(None))

    async def check_stream(self, chunks: Iterable[str], context: Any, question: str | None) -> dict[str, Any]:
        """An answer checked while it streams (``halluscope.stream_check``): each sentence as it ends, on a
        thread that reads ``chunks`` as they come (a blocking iterator, ended by the stream's end); the
        answer's verdict, brief, once the last sentence is checked. One budget covers all its sentences."""
        limit, settings = self.check_settings()

        def work(budget: CallBudget) -> DetectionResult:
            *_, answer = stream_check(chunks, context=context, question=question, budget=budget, **settings)
            return cast(DetectionResult, answer)  # the stream's last item is the answer's result

        return await self.run(work, limit, brief=True)

    async def detect(
        self,
        method: Any,
        inputs: Any,
        options: Any = None,
        max_calls: Any = None,
    ) -> dict[str, Any]:
        """Any method by name, its inputs and options held to the operator's choices."""
        check_value("detect", "method", method, str)
        limit = self.limit(max_calls)
        spec = registry.get(method)
        given = self.operator.inputs(spec, inputs)
        chosen = self.with_gateway(self.operator.options(spec, options))

        def work(budget: CallBudget) -> DetectionResult:
            return detector(spec.name, max_calls=limit, **chosen).detect(**given, budget=budget)

        return await self.run(work, limit)


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
