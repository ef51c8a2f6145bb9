"""`halluscope demo`: the main job, offline.

Until the local-models issue lands, the offline demo runs the full gateway path (versioned prompt,
disk cache with sample indexes, concurrency limit, retries, accounting) on a scripted model and says
so in its first line; with ``--model SPEC`` it runs the same job on a real provider.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, TextIO

from tqdm import tqdm

from halluscope.backends.gateway import CallStats, ChatReply, Gateway, ModelLike
from halluscope.backends.scripted import ScriptedChatModel
from halluscope.results import RunMeta

QUESTIONS = (
    "What is the capital of France?",  # a question any model knows
    "What did the author of this demo eat for breakfast on 3 March 2019?",  # one no model can know
)
SAMPLES = 10

_SCRIPTED_ANSWERS = {
    "capital of France": ["Paris is the capital of France.", "The capital of France is Paris."],
    "breakfast": [
        "They ate scrambled eggs and toast.",
        "They had a bowl of oatmeal with berries.",
        "They ate pancakes with maple syrup.",
        "They skipped breakfast that day.",
        "They had a croissant and coffee.",
    ],
}


def _scripted_answer(prompt: str, _params: dict[str, Any]) -> str:
    """Samples vary at random as at temperature 1; the cache makes a rerun replay them exactly."""
    for cue, answers in _SCRIPTED_ANSWERS.items():
        if cue in prompt:
            return random.choice(answers)
    return "I do not know."


def scripted_demo_model() -> ScriptedChatModel:
    return ScriptedChatModel(respond=_scripted_answer, model_id="scripted:demo")


@dataclass
class DemoReport:
    answers: dict[str, list[ChatReply]]
    meta: RunMeta
    scripted: bool


def run_demo(gateway: Gateway, model: ModelLike | None = None, progress: bool = True) -> DemoReport:
    """Sample SAMPLES answers to each demo question through the gateway, with the paper's QA prompt."""
    scripted = model is None
    chosen: ModelLike = scripted_demo_model() if model is None else model
    gateway.model(chosen)  # a missing key or bad spec fails here, before any progress is drawn
    stats = CallStats()
    answers: dict[str, list[ChatReply]] = {}
    with tqdm(total=SAMPLES * len(QUESTIONS), desc="sampling answers", disable=not progress, leave=False) as bar:
        for question in QUESTIONS:
            answers[question] = gateway.sample(
                chosen,
                "semantic_entropy.answer",
                {"question": question},
                SAMPLES,
                stats=stats,
                on_reply=lambda _reply: bar.update(),
            )
    return DemoReport(answers, stats.meta("demo", samples=SAMPLES), scripted)


def print_report(report: DemoReport, out: TextIO) -> None:
    if report.scripted:
        out.write(
            "NOTE: no local model is served yet, so this demo runs on a SCRIPTED model (canned answers, "
            "no inference).\nIt exercises the real gateway: versioned prompt, disk cache, sample indexes, "
            "limits, accounting.\nRun it on a real model with --model SPEC (e.g. openai:gpt-4o-mini).\n\n"
        )
    for question, replies in report.answers.items():
        out.write(f"Q: {question}\n")
        distinct: dict[str, int] = {}
        for r in replies:
            distinct[r.text] = distinct.get(r.text, 0) + 1
        for text, count in sorted(distinct.items(), key=lambda kv: -kv[1]):
            out.write(f"  {count:2d} x {text}\n")
        out.write(f"  {len(distinct)} distinct answer(s) in {len(replies)} samples\n\n")
    m = report.meta
    out.write(
        f"model calls: {m.calls}   cache hits: {m.cache_hits}   tokens: {m.tokens.prompt} in / "
        f"{m.tokens.completion} out   {m.seconds:.2f} s\n"
    )
    out.write(f"models: {', '.join(m.models)}\nprompts: {', '.join(m.prompts)}\n")
    if m.calls == 0:
        out.write("Every answer came from the cache: this run replayed the previous one exactly.\n")
    else:
        out.write("Run it again: the answers will be replayed from the disk cache.\n")
