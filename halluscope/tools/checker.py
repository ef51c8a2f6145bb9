"""A detector as a LangChain tool an agent can call to check an answer or a passage."""

from __future__ import annotations

from typing import Any

from langchain_core.tools import BaseTool, StructuredTool
from pydantic import BaseModel, Field, create_model

from halluscope.detectors import Detector
from halluscope.errors import HalluscopeError
from halluscope.results import DetectionResult
from halluscope.runtime.contract import Documents


def args_schema(det: Detector) -> type[BaseModel]:
    """The typed arguments an agent fills: the answer to check and the question it answers (and the
    documents it should rest on, for a grounded method), or the question alone for methods that measure
    the model's own uncertainty; a method with neither (PHR) takes its own inputs, as the detector's
    input schema declares them."""
    spec = det.spec
    if spec.question_field is None and spec.answer_field is None:  # an item of its own shape (PHR's problem)
        return det.get_input_schema()
    fields: dict[str, Any] = {}
    if spec.answer_field is not None:
        fields["answer"] = (str, Field(description="the answer or passage to check for hallucinations"))
    required = spec.answer_field is None
    fields["question"] = (
        str if required else str | None,
        Field(... if required else None, description="the user's question that the answer answers"),
    )
    if spec.context_field is not None:
        needed = spec.needs_input(spec.context_field)
        fields["context"] = (
            Documents if needed else Documents | None,
            Field(
                ... if needed else None,
                description="the documents the answer should rest on: a text, texts or LangChain Documents",
            ),
        )
    name = "".join(part.title() for part in det.method.split("-")) + "Check"
    return create_model(name, **fields)


def as_tool(det: Detector, name: str | None = None, description: str | None = None) -> BaseTool:
    """A tool whose content is a short summary (riskiest units first) and whose artifact is the full
    ``DetectionResult``; a check that fails says why in its content instead of raising into the agent."""
    tool_name = name or f"check_{det.method.replace('-', '_')}"
    about = description or (
        f"Check text for hallucinations with {det.method}. Returns per-unit risk scores "
        "(higher = more likely made up) with the riskiest statements first."
    )

    def check(**arguments: Any) -> tuple[str, DetectionResult | None]:
        try:
            if det.spec.question_field is None and det.spec.answer_field is None:
                result = det.detect(**{k: v for k, v in arguments.items() if v is not None})
            else:
                asked = (arguments.get("answer"), arguments.get("question"), arguments.get("context"))
                result = det.detect(**det.answer_item(*asked))
        except HalluscopeError as exc:  # the agent reads why, and can go on (a bug still raises)
            return f"{det.method} could not check this: {type(exc).__name__}: {exc}", None
        return result.summary(), result

    return StructuredTool.from_function(
        func=check,
        name=tool_name,
        description=about,
        args_schema=args_schema(det),
        response_format="content_and_artifact",
    )
