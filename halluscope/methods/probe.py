"""Probes (Kossen et al. 2024, arXiv 2406.15927): a linear probe fitted by `halluscope probe fit` reads
the hidden state of one forward pass over the answer and gives each sentence (a ``sentence`` probe) or
the short answer (an ``accuracy`` probe, a semantic entropy probe ``sep``) its probability of being
hallucinated, wrong, or semantically uncertain. No generation: one forward pass per answer, cached
with the text's token statistics.

Where it reads: a sentence probe at each sentence's last token, the answer read as the model's own
reply to the question (when one is given); a ``grounded`` probe there too, the answer read as the
model's reply to the context and question (``probe.grounded``), so the state at a sentence's end has
seen the context it should rest on; the others at the question's last token before the answer (the
paper's TBG) and the answer's last token (its SLT), the question framed by the prompt the answers were
sampled with (semantic entropy's).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np

from halluscope.backends import readings
from halluscope.backends.gateway import Gateway
from halluscope.backends.logprobs import LogProbModel, reading_prompt
from halluscope.backends.steps import Blocking, Steps
from halluscope.errors import ConfigError
from halluscope.probing import SENTENCE_KINDS, Probe, load_probe
from halluscope.prompts import short_answer
from halluscope.results import DetectionResult, Unit
from halluscope.runtime import contract, options
from halluscope.runtime.contract import Documents, Flag, Method, Need, RunContext, arg, checked_documents
from halluscope.scoring.token_probability import sentence_spans
from halluscope.text import checked_passage
from halluscope.text import sentences as split_sentences

NAME = "probe"
SUMMARY = (
    "a linear probe on one forward pass's hidden states (sentence, grounded, accuracy or semantic entropy "
    "probe, Kossen et al. 2024), fitted by `halluscope probe fit`"
)
CONTEXT_PROMPT = "probe.grounded"  # the context (and question) a grounded probe reads the answer after
NO_QUESTION = "(not given)"


def framing(
    kind: str, reader: LogProbModel, question: str | None, gateway: Gateway, context: Sequence[str] = ()
) -> tuple[str, str | None]:
    """(what the model reads before the answer, the prompt's id@version#hash or None) for a probe kind:
    a sentence probe reads the answer as the model's reply to the question as asked (nothing without
    one); a grounded probe as its reply to the context and question; the others after the question in
    the prompt the answers were sampled with."""
    if kind == "sentence":
        return reading_prompt(reader, question, chat=True), None
    if kind == "grounded":
        if not context:
            raise ConfigError("a grounded probe reads the answer after its context: give context")
        tpl = gateway.registry.get(CONTEXT_PROMPT)
        rendered = tpl.render(context="\n\n".join(context), question=question or NO_QUESTION)
        return reader.chat_prompt(rendered), tpl.ref
    if not question:
        raise ConfigError(f"a {kind} probe reads the question before the answer: give question")
    tpl = gateway.registry.get(short_answer.ANSWER)
    return reader.chat_prompt(tpl.render(question=question)), tpl.ref


def prompt_ref(kind: str, gateway: Gateway) -> str | None:
    if kind == "sentence":
        return None
    return gateway.registry.get(CONTEXT_PROMPT if kind == "grounded" else short_answer.ANSWER).ref


def sentence_ends(text: str, sentences: Sequence[str]) -> list[int | None]:
    """Where each sentence ends in the text (None for one not found there verbatim)."""
    return [None if span is None else span[1] for span in sentence_spans(text, sentences)]


def features(kind: str, states: Mapping[int, np.ndarray], layer: int) -> np.ndarray:
    """The rows a probe reads: one per sentence, or the question's and the answer's states side by side."""
    rows = states[layer]
    return rows if kind in SENTENCE_KINDS else rows.reshape(1, -1)


@dataclass(frozen=True, kw_only=True)
class Inputs:
    text: str = options.text("the answer to check: a passage (sentence probes) or a short answer")
    sentences: list[str] | None = options.sentences()
    question: str | None = options.question("the question the text answers (accuracy and sep probes need it)")
    context: Documents | None = options.documents("the documents the answer should rest on (grounded probes)")


@dataclass(frozen=True, kw_only=True)
class Options:
    probe: str | Probe | None = arg(
        None,
        help="a probe from `halluscope probe fit` (its JSON file)",
        flags=(Flag(("--probe",), metavar="FILE"),),
        refers="file",
    )
    model: str | LogProbModel | None = options.model(
        "reads the text (default: the model the probe was fitted on; another file of it is refused)"
    )


@dataclass(frozen=True)
class Prepared(contract.Prepared):
    probe: Probe | None = None
    reader: LogProbModel | None = None


def prepare(opts: Options, ctx: RunContext) -> Prepared:
    """The probe, read and checked against the model that reads (its file's hash) and the prompt version."""
    if opts.probe is None:
        raise ConfigError(f"{NAME} needs a fitted probe: probe=FILE from `halluscope probe fit`")
    probe = load_probe(opts.probe) if isinstance(opts.probe, str) else opts.probe.checked()
    reader = ctx.gateway.logprob_model(opts.model if opts.model is not None else probe.model)
    probe.check(reader.name, reader.file_hash, prompt_ref(probe.kind, ctx.gateway))
    return Prepared(options=opts, probe=probe, reader=reader)


def run(prepared: Prepared, inputs: Inputs, ctx: RunContext) -> Steps[DetectionResult]:
    """Each sentence's probability (sentence probes), or the answer's, from one forward pass."""
    probe, reader, opts = prepared.probe, prepared.reader, prepared.options
    assert probe is not None and reader is not None and isinstance(opts, Options)
    context = [text for text, _ in checked_documents(inputs.context)] if inputs.context is not None else []
    before, _ = framing(probe.kind, reader, inputs.question, ctx.gateway, context)
    if probe.kind in SENTENCE_KINDS:
        text, given, _ = checked_passage(inputs.text, inputs.sentences, None)
        found = given or split_sentences(text or "")
        if not found:
            raise ConfigError(f"{NAME} needs a non-empty text (no sentence found)")
        ends = sentence_ends(text, found)
    else:
        text = inputs.text
        if not text.strip():
            raise ConfigError(f"{NAME} needs a non-empty answer")
        found, ends = [text], [0, len(text)]
    wanted = [e for e in ends if e is not None]
    scores: Iterator[float] = iter([])
    if wanted:  # no sentence found in the text: nothing to read
        ctx.plan(1)
        states = yield Blocking(
            partial(readings.hidden_states, ctx.gateway, reader, before, text, wanted, [probe.layer])
        )
        scores = iter(probe.probabilities(features(probe.kind, states, probe.layer)).tolist())
    if probe.kind in SENTENCE_KINDS:
        units = [
            Unit(text=s, score=None if end is None else next(scores), evidence={"read_at": end})
            for s, end in zip(found, ends, strict=True)
        ]
    else:
        units = [Unit(text=text, score=next(scores), evidence={"read_at": ends})]
    unread = sum(1 for e in ends if e is None)
    meta = ctx.meta(
        NAME,
        {"sentence_not_found": unread} if unread else {},
        kind=probe.kind,
        probe=opts.probe if isinstance(opts.probe, str) else "given",
        probe_digest=probe.digest(),
        layer=probe.layer,
        reader=reader.name,
        fitted_on=probe.data.get("source"),
    )
    return DetectionResult(method=NAME, units=units, meta=meta)


METHOD = Method.from_module(
    __name__,
    needs=(Need("probe", probe="(a fitted probe's JSON)"),),
    context_field="context",  # a grounded probe's documents (LangChain Documents kept as such)
)
detect, adetect = METHOD.detect, METHOD.adetect
