"""Every method as an evaluator in the openevals / LangSmith convention, so a halluscope score can sit
in a ``langsmith.evaluate(...)`` experiment (or any loop over examples):

    evaluator = create_evaluator("selfcheck-prompt", model="openai:gpt-4o-mini", n=5)
    evaluator(inputs={"question": ...}, outputs={"answer": ...}) -> {"key", "score", "comment", "metadata"}

``create_<method>_evaluator`` (``create_selfcheck_prompt_evaluator``) is the same with the method bound,
for every registered method.

``score`` is the riskiest unit's score (higher = more likely hallucinated; for FEWL the risk -FEWL);
``comment`` is the result's summary; ``metadata`` holds every unit's score and the run's costs. The
methods are reference-free: ``reference_outputs`` is read only for an example's ``samples`` (a
SelfCheck method checks the answer against them instead of regenerating). An example that fails
(blank answer, provider down) scores None with the reason in the comment, so one bad example never
ends an experiment. Both the sync and the async evaluators name their parameters (``inputs``,
``outputs``, ``reference_outputs``), as ``langsmith.evaluate`` and ``aevaluate`` require.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial
from typing import Any

from langchain_core.messages import BaseMessage

from halluscope.detectors import Detector, detector
from halluscope.errors import ConfigError, HalluscopeError
from halluscope.results import DetectionResult
from halluscope.runtime import registry

EvaluatorResult = dict[str, Any]
Evaluator = Callable[..., EvaluatorResult]
AsyncEvaluator = Callable[..., Awaitable[EvaluatorResult]]

# Where a run's answer and an example's question are found, first match wins.
ANSWER_KEYS = ("answer", "output", "response", "text", "content")
QUESTION_KEYS = ("question", "input", "query", "prompt")
CONTEXT_KEYS = ("context", "documents", "retrieved", "contexts")  # where a RAG example keeps its documents


def _found(value: Any, keys: Sequence[str], what: str) -> Any:
    """What answers under ``keys``: a string, a chat message, a dict holding one under a known key, or a
    messages list (its last message)."""
    if isinstance(value, str | BaseMessage):
        return value
    if isinstance(value, Mapping):
        for key in keys:
            if key in value:
                return _found(value[key], keys, what)
        if "messages" in value:
            return _found(value["messages"], keys, what)
        raise ConfigError(f"no {what} found: expected one of the keys {', '.join(keys)} or messages")
    if isinstance(value, Sequence) and value:
        return value[-1]
    raise ConfigError(f"no {what} found in {type(value).__name__}")


def _text_of(value: Any, keys: Sequence[str], what: str) -> str:
    """The text of what ``_found`` finds (a message's content)."""
    found = _found(value, keys, what)
    if isinstance(found, str):
        return found
    if isinstance(found, BaseMessage):
        return str(found.text)
    content = found.get("content") if isinstance(found, Mapping) else getattr(found, "content", None)
    if isinstance(content, str):
        return content
    raise ConfigError(f"no {what} found in {type(value).__name__}")


def example_arguments(det: Detector, inputs: Any, outputs: Any, reference_outputs: Any = None) -> dict[str, Any]:
    """The ``detect`` keywords of one example: the run's answer and the example's question where the
    method takes them (a method with neither, PHR, reads its own inputs from the inputs), and the example's
    ``samples`` for a method that can use them (SelfCheck, FIBE's +selfcheck), from the run's outputs
    or else the reference outputs."""
    spec = det.spec
    if spec.question_field is None and spec.answer_field is None:  # an item of its own shape (PHR's problem)
        if not isinstance(inputs, Mapping):
            raise ConfigError(f"{det.method} reads its inputs ({', '.join(spec.input_names)}) from a dict")
        item = {name: inputs[name] for name in spec.input_names if name in inputs}
        problem = spec.problem(item)
        if problem:
            raise ConfigError(problem)
        return item
    answer = _text_of(outputs, ANSWER_KEYS, "answer in outputs") if spec.answer_field is not None else None
    question = _text_of(inputs, QUESTION_KEYS, "question in inputs") if inputs is not None else None
    context = _context_of(inputs) if spec.context_field is not None else None
    # the run's answer as a chat message, where it is one: a method may read the log-probs it carries
    message = _found(outputs, ANSWER_KEYS, "answer in outputs") if spec.logprobs_field is not None else None
    item = det.answer_item(answer, question, context, message)
    if "samples" in det.accepted():
        for source in (outputs, reference_outputs):
            if isinstance(source, Mapping) and source.get("samples"):
                item["samples"] = list(source["samples"])
                break
    return item


def _context_of(inputs: Any) -> Any:
    """The documents a RAG example gives its answer (openevals' groundedness reads ``inputs["context"]``):
    a text, a list of texts or of LangChain Documents; None where the example has none."""
    if isinstance(inputs, Mapping):
        return next((inputs[key] for key in CONTEXT_KEYS if inputs.get(key) is not None), None)
    return None


def _result(key: str, result: DetectionResult) -> EvaluatorResult:
    return {
        "key": key,
        "score": result.risk,
        "comment": result.summary(),
        "metadata": {
            "method": result.method,
            "units": [{"text": u.text, "score": u.score} for u in result.units],
            "calls": result.meta.calls,
            "cache_hits": result.meta.cache_hits,
            "models": result.meta.models,
            "prompts": result.meta.prompts,
            "error": result.error,
        },
    }


def _failure(key: str, method: str, exc: Exception) -> EvaluatorResult:
    reason = f"{type(exc).__name__}: {exc}"
    return {"key": key, "score": None, "comment": f"{method}: failed ({reason})", "metadata": {"error": reason}}


def create_evaluator(method: str, *, key: str | None = None, **options: Any) -> Evaluator:
    """An evaluator for any method; ``options`` are ``halluscope.detector``'s (``model``, ``n`` ...)."""
    det = detector(method, **options)
    name = key or _key(det.method)

    def evaluate(
        *, inputs: Any = None, outputs: Any = None, reference_outputs: Any = None, **_: Any
    ) -> EvaluatorResult:
        try:
            return _result(name, det.detect(**example_arguments(det, inputs, outputs, reference_outputs)))
        except HalluscopeError as exc:  # a failed example is a scored-None row (a bug still raises)
            return _failure(name, det.method, exc)

    evaluate.__name__ = name
    evaluate.__doc__ = f"{det.spec.summary}: an openevals-style evaluator (inputs, outputs, reference_outputs)."
    return evaluate


def create_async_evaluator(method: str, *, key: str | None = None, **options: Any) -> AsyncEvaluator:
    """The async twin of ``create_evaluator``: the method's ``adetect``, its model calls awaiting the
    provider's async client."""
    det = detector(method, **options)
    name = key or _key(det.method)

    async def evaluate(
        *, inputs: Any = None, outputs: Any = None, reference_outputs: Any = None, **_: Any
    ) -> EvaluatorResult:
        try:
            arguments = example_arguments(det, inputs, outputs, reference_outputs)
            return _result(name, await det.adetect(**arguments))
        except HalluscopeError as exc:
            return _failure(name, det.method, exc)

    evaluate.__name__ = name
    evaluate.__doc__ = f"{det.spec.summary}: an async openevals-style evaluator."
    return evaluate


def _key(method: str) -> str:
    """A method's name as an identifier: 'fibe+sbc+dq' is 'fibe_sbc_dq'."""
    return "halluscope_" + re.sub(r"[^a-z0-9]+", "_", method)


def __getattr__(name: str) -> Any:
    """``create_<method>_evaluator`` and ``create_async_<method>_evaluator`` for every registered method
    ('create_selfcheck_prompt_evaluator'): ``create_evaluator`` with the method bound, made on request."""
    match = re.fullmatch(r"create_(async_)?([a-z0-9_]+)_evaluator", name)
    by_key = {_key(method)[len("halluscope_") :]: method for method in registry.methods()}
    if match is None or match.group(2) not in by_key:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    make = create_async_evaluator if match.group(1) else create_evaluator
    return partial(make, by_key[match.group(2)])


def __dir__() -> list[str]:
    keys = [_key(method)[len("halluscope_") :] for method in registry.methods()]
    return sorted(
        [*globals(), *(f"create_{k}_evaluator" for k in keys), *(f"create_async_{k}_evaluator" for k in keys)]
    )
