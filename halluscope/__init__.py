"""halluscope: measure and detect LLM hallucinations with published methods.

One import for the public API; each method is a module with ``detect()`` and ``build()`` (its
LangGraph graph), e.g. ``halluscope.fibe.detect(text, model=..., variant="fibe+sbc+dq")``. Every
model call goes through the gateway (``default_gateway()``); results are pydantic models whose unit
scores are higher when more likely hallucinated.
"""

from halluscope.backends import CallCache, CallStats, ChatReply, Gateway, RetryPolicy, default_gateway, parse_model_spec
from halluscope.backends.embeddings import Embedder
from halluscope.backends.entailment import Entailment, Judgement, LLMEntailment, NLIEntailment
from halluscope.backends.local import default_local_model
from halluscope.backends.logprobs import LogProbMismatchError, LogProbModel, Sample, load_logprob_model
from halluscope.detector import Detector, detector
from halluscope.errors import (
    ConfigError,
    DataError,
    HalluscopeError,
    ModelSpecError,
    ModelUnavailableError,
    ParseError,
    PromptError,
)
from halluscope.graphs import (
    clue,
    direct_question,
    fewl,
    fibe,
    phr,
    selfcheck_prompt,
    selfcheck_unigram,
    semantic_entropy,
    semantic_entropy_paragraph,
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
    "Detector",
    "Embedder",
    "Entailment",
    "Gateway",
    "HalluscopeError",
    "Judgement",
    "LLMEntailment",
    "LogProbMismatchError",
    "LogProbModel",
    "ModelSpecError",
    "ModelUnavailableError",
    "NLIEntailment",
    "ParseError",
    "PromptError",
    "PromptRegistry",
    "PromptTemplate",
    "RetryPolicy",
    "RunMeta",
    "Sample",
    "TokenUsage",
    "Unit",
    "default_gateway",
    "clue",
    "default_local_model",
    "detector",
    "direct_question",
    "fewl",
    "fibe",
    "phr",
    "load_logprob_model",
    "parse_model_spec",
    "selfcheck_prompt",
    "selfcheck_unigram",
    "semantic_entropy",
    "semantic_entropy_paragraph",
]
