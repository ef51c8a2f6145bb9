"""How halluscope talks to models; nothing outside this package knows a provider."""

from langchain_core.language_models import BaseChatModel

from halluscope.backends.cache import CallCache
from halluscope.backends.chat import ModelSpec, ResolvedModel, parse_model_spec, resolve
from halluscope.backends.gateway import CallStats, ChatReply, Gateway, RetryPolicy, default_gateway
from halluscope.errors import redact_log_records

redact_log_records()  # every log line of the process, before any client logs a request's URL


def chat_model(spec: str) -> BaseChatModel:
    """The LangChain chat model ``spec`` names ('local:qwen2.5-coder-1.5b', 'openai:gpt-4o-mini', ...), as
    the process's gateway holds it: a chain's model and a detector's share one loaded local model."""
    return default_gateway().chat_model(spec)


__all__ = [
    "CallCache",
    "CallStats",
    "ChatReply",
    "Gateway",
    "ModelSpec",
    "ResolvedModel",
    "RetryPolicy",
    "chat_model",
    "default_gateway",
    "parse_model_spec",
    "resolve",
]
