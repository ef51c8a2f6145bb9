"""halluscope: measure and detect LLM hallucinations with published methods.

One import for the public API: ``halluscope.detector(method, model=..., **options)``, the results
(``DetectionResult``, ``Unit``, ``RunMeta``), the gateway every model call goes through
(``default_gateway()``), and each method's module by name (``halluscope.selfcheck_prompt.detect(...)``),
as the registry finds them. Each is imported on first use, so ``import halluscope`` (and the CLI's
``--help``) loads no model stack; unit scores are higher when more likely hallucinated.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

from halluscope.version import __version__

# public name -> the module that defines it
_EXPORTS = {
    **dict.fromkeys(
        (
            "CallCache",
            "CallStats",
            "ChatReply",
            "Gateway",
            "RetryPolicy",
            "chat_model",
            "default_gateway",
            "parse_model_spec",
        ),
        "halluscope.backends",
    ),
    "Embedder": "halluscope.backends.embeddings",
    "load_logprob_model": "halluscope.backends.chat",
    **dict.fromkeys(("Entailment", "Judgement", "LLMEntailment", "NLIEntailment"), "halluscope.backends.entailment"),
    "default_local_model": "halluscope.backends.local",
    **dict.fromkeys(("LogProbMismatchError", "LogProbModel", "Sample"), "halluscope.backends.logprobs"),
    **dict.fromkeys(("Detector", "detector"), "halluscope.detectors"),
    **dict.fromkeys(("check", "from_calibration"), "halluscope.check_answer"),
    **dict.fromkeys(("check_action_claims", "check_tool_call"), "halluscope.tool_calls"),
    **dict.fromkeys(("SentenceVerdict", "astream_check", "stream_check"), "halluscope.streaming"),
    "load_labelled": "halluscope.labelled",
    **dict.fromkeys(("Probe", "load_probe"), "halluscope.probing"),
    **dict.fromkeys(
        (
            "ConfigError",
            "DataError",
            "HalluscopeError",
            "ModelSpecError",
            "ModelUnavailableError",
            "ParseError",
            "PromptError",
        ),
        "halluscope.errors",
    ),
    **dict.fromkeys(("PromptRegistry", "PromptTemplate"), "halluscope.prompts"),
    **dict.fromkeys(("DetectionResult", "RunMeta", "TokenUsage", "Unit", "Verdict", "to_pandas"), "halluscope.results"),
}

__all__ = ["__version__", *_EXPORTS]

if TYPE_CHECKING:  # what a type checker and an editor see; at run time each is imported on first use
    from halluscope.backends import (
        CallCache as CallCache,
    )
    from halluscope.backends import (
        CallStats as CallStats,
    )
    from halluscope.backends import (
        ChatReply as ChatReply,
    )
    from halluscope.backends import (
        Gateway as Gateway,
    )
    from halluscope.backends import (
        RetryPolicy as RetryPolicy,
    )
    from halluscope.backends import (
        chat_model as chat_model,
    )
    from halluscope.backends import (
        default_gateway as default_gateway,
    )
    from halluscope.backends import (
        parse_model_spec as parse_model_spec,
    )
    from halluscope.backends.chat import load_logprob_model as load_logprob_model
    from halluscope.backends.embeddings import (
        Embedder as Embedder,
    )
    from halluscope.backends.entailment import (
        Entailment as Entailment,
    )
    from halluscope.backends.entailment import (
        Judgement as Judgement,
    )
    from halluscope.backends.entailment import (
        LLMEntailment as LLMEntailment,
    )
    from halluscope.backends.entailment import (
        NLIEntailment as NLIEntailment,
    )
    from halluscope.backends.local import (
        default_local_model as default_local_model,
    )
    from halluscope.backends.logprobs import (
        LogProbMismatchError as LogProbMismatchError,
    )
    from halluscope.backends.logprobs import (
        LogProbModel as LogProbModel,
    )
    from halluscope.backends.logprobs import (
        Sample as Sample,
    )
    from halluscope.check_answer import check as check
    from halluscope.check_answer import from_calibration as from_calibration
    from halluscope.detectors import (
        Detector as Detector,
    )
    from halluscope.detectors import detector as detector
    from halluscope.errors import (
        ConfigError as ConfigError,
    )
    from halluscope.errors import (
        DataError as DataError,
    )
    from halluscope.errors import (
        HalluscopeError as HalluscopeError,
    )
    from halluscope.errors import (
        ModelSpecError as ModelSpecError,
    )
    from halluscope.errors import (
        ModelUnavailableError as ModelUnavailableError,
    )
    from halluscope.errors import (
        ParseError as ParseError,
    )
    from halluscope.errors import (
        PromptError as PromptError,
    )
    from halluscope.labelled import load_labelled as load_labelled
    from halluscope.prompts import (
        PromptRegistry as PromptRegistry,
    )
    from halluscope.prompts import (
        PromptTemplate as PromptTemplate,
    )
    from halluscope.results import (
        DetectionResult as DetectionResult,
    )
    from halluscope.results import (
        RunMeta as RunMeta,
    )
    from halluscope.results import (
        TokenUsage as TokenUsage,
    )
    from halluscope.results import (
        Unit as Unit,
    )
    from halluscope.results import (
        Verdict as Verdict,
    )
    from halluscope.results import (
        to_pandas as to_pandas,
    )
    from halluscope.streaming import SentenceVerdict as SentenceVerdict
    from halluscope.streaming import astream_check as astream_check
    from halluscope.streaming import stream_check as stream_check
    from halluscope.tool_calls import check_action_claims as check_action_claims
    from halluscope.tool_calls import check_tool_call as check_tool_call


def __getattr__(name: str) -> Any:
    """A public name, imported on first use; a method's module by its name ('fibe', 'selfcheck_prompt')."""
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value  # the next use is a plain lookup
        return value
    if name.startswith("_"):
        raise AttributeError(f"module 'halluscope' has no attribute {name!r}")
    if importlib.util.find_spec(f"halluscope.{name}") is not None:  # a submodule ('from halluscope import scale')
        return importlib.import_module(f"halluscope.{name}")
    found = importlib.import_module("halluscope.runtime.registry").modules()
    if name in found:
        return found[name]
    raise AttributeError(f"module 'halluscope' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__, *importlib.import_module("halluscope.runtime.registry").modules()})
