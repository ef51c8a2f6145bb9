"""halluscope: measure and detect LLM hallucinations with published methods.

One import for the public API. Every model call goes through the gateway (``default_gateway()``);
results are pydantic models whose unit scores are higher when more likely hallucinated.
"""

from halluscope.backends import CallCache, CallStats, ChatReply, Gateway, RetryPolicy, default_gateway, parse_model_spec
from halluscope.errors import (
    ConfigError,
    DataError,
    HalluscopeError,
    ModelSpecError,
    ModelUnavailableError,
    ParseError,
    PromptError,
)
from halluscope.prompts import PromptRegistry, PromptTemplate
from halluscope.results import DetectionResult, RunMeta, TokenUsage, Unit

__version__ = "0.1.0"

__all__ = [
    "CallCache",
    "CallStats",
    "ChatReply",
    "ConfigError",
    "DataError",
    "DetectionResult",
    "Gateway",
    "HalluscopeError",
    "ModelSpecError",
    "ModelUnavailableError",
    "ParseError",
    "PromptError",
    "PromptRegistry",
    "PromptTemplate",
    "RetryPolicy",
    "RunMeta",
    "TokenUsage",
    "Unit",
    "default_gateway",
    "parse_model_spec",
]
