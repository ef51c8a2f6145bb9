"""Detectors in agent workflows: a detector as a LangChain tool, and a guard subgraph."""

from halluscope.tools.checker import args_schema, as_tool
from halluscope.tools.guard import GuardState, hallucination_guard

__all__ = ["GuardState", "args_schema", "as_tool", "hallucination_guard"]
