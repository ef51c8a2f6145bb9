"""A chat model that answers by prompt content, for tests and the speed benchmarks (it is not shipped).

It answers from a function of the prompt text (never of call order, which fan-out makes racy),
reports word counts as token usage, and can raise injected errors to exercise the gateway.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult

Responder = Callable[[str, dict[str, Any]], str]


class ScriptedChatModel(BaseChatModel):
    """``respond(prompt_text, call_params) -> answer``; it may raise to inject a failure."""

    respond: Responder
    model_id: str = "scripted:default"

    @property
    def _llm_type(self) -> str:
        return "scripted"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_id": self.model_id}

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        prompt = "\n".join(m.text for m in messages)
        params = {**kwargs, "stop": stop} if stop is not None else dict(kwargs)
        answer = self.respond(prompt, params)
        message = AIMessage(
            content=answer,
            usage_metadata={
                "input_tokens": len(prompt.split()),
                "output_tokens": len(answer.split()),
                "total_tokens": len(prompt.split()) + len(answer.split()),
            },
        )
        return ChatResult(generations=[ChatGeneration(message=message)])


class AsyncOnly(ScriptedChatModel):
    """A chat model whose synchronous path fails: a run that called it off the event loop (``detect`` on
    a thread) would fail."""

    def _generate(self, *args: Any, **kwargs: Any) -> ChatResult:
        raise AssertionError("the synchronous client ran")

    async def _agenerate(
        self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        return ScriptedChatModel._generate(self, messages, stop, None, **kwargs)


class ScriptedAgentModel(BaseChatModel):
    """An agent's model that answers from a function of the conversation (``turn(messages) -> AIMessage``:
    a tool call or an answer), binding any tools as given."""

    turn: Callable[[list[BaseMessage]], AIMessage]

    @property
    def _llm_type(self) -> str:
        return "scripted-agent"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedAgentModel:
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self.turn(messages))])
