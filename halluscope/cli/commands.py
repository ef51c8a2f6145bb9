"""Every `halluscope` command: the module of halluscope.cli that builds it, and its one line of help.
Read by `halluscope --help` without importing any of those modules (nor the model stack they load),
and by the modules themselves for their help."""

from __future__ import annotations

COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("admin", "the main job, offline: semantic entropy and Direct Question on the local model"),
    "prompts": ("admin", "list, show, diff and try versioned prompts"),
    "cache": ("admin", "the model-call cache"),
    "models": ("admin", "the local-model registry: list, pull"),
    "data": ("admin", "benchmark data (HALLUSCOPE_DATA or --data)"),
    "methods": ("methods", "every method: what it scores, its inputs and options"),
    "studio": ("methods", "LangGraph Studio: the langgraph.json that serves every method's graph"),
    "check": ("check", "check one answer (grounded with documents, Direct Question without): its verdict"),
    "detect": ("detect", "score one item with one method"),
    "serve": ("serve", "an MCP server (stdio or HTTP) for agents outside Python: check, detect, methods"),
    "bench": ("bench", "run a paper's benchmark protocol"),
    "choose": ("bench", "which method for your labelled answers: each candidate held out, costed, one recommended"),
    "probe": ("probe", "fit a linear probe on a local model's hidden states (sentence, accuracy, semantic entropy)"),
    "checker": ("checker", "fit a fast grounded checker (a small cross-encoder) on labelled pairs, on this CPU"),
    "calibrate": (
        "bench",
        "fit a probability of 'inaccurate' from a method's scores on labelled data; report it held out",
    ),
}


def help_of(command: str) -> str:
    return COMMANDS[command][1]
