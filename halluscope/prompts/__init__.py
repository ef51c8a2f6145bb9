"""Versioned prompt templates and the parsers that read their answers."""

from halluscope.prompts.parsers import PARSERS
from halluscope.prompts.registry import PromptRegistry, PromptTemplate, load_prompt_file, to_langchain

__all__ = ["PARSERS", "PromptRegistry", "PromptTemplate", "load_prompt_file", "to_langchain"]
