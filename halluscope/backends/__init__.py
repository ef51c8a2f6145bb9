"""How halluscope talks to models; nothing outside this package knows a provider."""

from halluscope.backends.cache import CallCache
from halluscope.backends.chat import ModelSpec, parse_model_spec
from halluscope.backends.gateway import CallStats, ChatReply, Gateway, RetryPolicy, default_gateway

__all__ = [
    "CallCache",
    "CallStats",
    "ChatReply",
    "Gateway",
    "ModelSpec",
    "RetryPolicy",
    "default_gateway",
    "parse_model_spec",
]
