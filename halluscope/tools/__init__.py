"""Detectors in agent workflows: a detector as a LangChain tool, a guard subgraph, and a middleware for
LangChain agents."""

from halluscope.tools.checker import args_schema, as_tool
from halluscope.tools.guard import GuardState, hallucination_guard
from halluscope.tools.middleware import HallucinationFlagged, HallucinationMiddleware

__all__ = [
    "GuardState",
    "HallucinationFlagged",
    "HallucinationMiddleware",
    "args_schema",
    "as_tool",
    "hallucination_guard",
]
