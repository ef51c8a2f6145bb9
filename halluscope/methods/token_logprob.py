"""Token probabilities: SelfCheckGPT's grey-box and proxy-LLM baselines (Manakul et al. 2023, Section 5).

Per sentence of the text, over its tokens: Avg(-log p), Max(-log p), Avg(H) and Max(H)
(``scoring.token_probability``); all four in each unit's evidence, ``variant`` picks the score. The
numbers come from one of two places:

- the answer's own log-probs, given with it (``logprobs=``: an ``AIMessage`` whose
  ``response_metadata`` holds them, OpenAI's ``logprobs.content``, or (token, logprob, top_logprobs)
  tuples): no call at all. With only a provider's top-k alternatives, H is their renormalised entropy
  (an estimate below the whole vocabulary's), and the result says so;
- a proxy model that reads the text (``model=``, ``local:`` or ``transformers:``): one forward pass
  per text, conditioned on the question (as the model's own chat reply to it, or after it as plain
  text), with the whole vocabulary's entropy. A passage's token statistics are cached: a rerun or
  another variant reads them back.

No model call is sent for given log-probs, and one forward pass per text otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from langchain_core.messages import BaseMessage

from halluscope.backends import readings
from halluscope.backends.chat import message_logprobs
from halluscope.backends.logprobs import LogProbModel, reading_prompt
from halluscope.backends.steps import Blocking, Steps
from halluscope.errors import ConfigError
from halluscope.readers import load_json, read_file
from halluscope.results import DetectionResult, Unit
from halluscope.runtime import contract, options
from halluscope.runtime.contract import Flag, Method, Need, RunContext, arg
from halluscope.scoring.token_probability import (
    ENTROPY_VARIANTS,
    VARIANTS,
    TokenStat,
    Variant,
    entropy,
    sentence_scores,
)
from halluscope.text import checked_passage
from halluscope.text import sentences as split_sentences

NAME = "token-logprob"
SUMMARY = (
    "Token probabilities: each sentence's Avg/Max -log p and entropy, from the answer's own log-probs "
    "or a proxy model's one forward pass (SelfCheckGPT's grey-box baselines)"
)
# the variant that finds the most planted falsehoods where the signal points the right way, read from the
# answer's own log-probs and by a proxy alike; on GPT-3's WikiBio text with a small proxy no variant ranks
# above chance, so that data cannot choose a default (the figures: docs/results/token-logprob.md)
DEFAULT_VARIANT = "max-nll"
WHOLE_VOCABULARY = "whole vocabulary"


# ---------------------------------------------------------------- log-probs given with an answer


LOGPROB_TOLERANCE = 1e-3  # a log-prob a provider rounded to just above 0 is still a log-prob


def _logprob(value: Any, token: str) -> float:
    """A given log-prob as a float: finite and at most 0 (a rounding above it tolerated, read as 0), or a
    ConfigError naming the token; a NaN, an infinity or +5.0 cannot be a log-probability."""
    number = float(value)
    if not math.isfinite(number) or number > LOGPROB_TOLERANCE:
        raise ConfigError(
            f"{NAME}: the log-prob {value!r} of token {token!r} is not a log-probability (finite, at most 0)"
        )
    return min(number, 0.0)


def _top_values(top: Any, token: str) -> list[float] | None:
    """A token's alternatives' log-probs from any of the shapes providers give: a list of entries
    ({'token', 'logprob'} or objects), a {token: logprob} mapping (completions APIs), (token, logprob) pairs."""
    if not top:
        return None
    if isinstance(top, Mapping):
        return [_logprob(v, token) for v in top.values()]
    values = []
    for alt in top:
        if isinstance(alt, Mapping):
            values.append(_logprob(alt["logprob"], token))
        elif isinstance(alt, list | tuple):
            values.append(_logprob(alt[1], token))
        else:
            values.append(_logprob(alt.logprob, token))
    return values


def _entry(entry: Any) -> tuple[str, float, list[float] | None]:
    """(token, logprob, its alternatives' log-probs) of one given token."""
    try:
        if isinstance(entry, Mapping):
            token = str(entry["token"])
            return token, _logprob(entry["logprob"], token), _top_values(entry.get("top_logprobs"), token)
        if isinstance(entry, list | tuple):
            token = str(entry[0])
            return token, _logprob(entry[1], token), _top_values(entry[2] if len(entry) > 2 else None, token)
        token = str(entry.token)
        return token, _logprob(entry.logprob, token), _top_values(getattr(entry, "top_logprobs", None), token)
    except (KeyError, IndexError, AttributeError, TypeError, ValueError) as exc:
        raise ConfigError(
            f"{NAME}: a given log-prob entry {str(entry)[:80]!r} is not (token, logprob, top_logprobs): {exc}"
        ) from exc


def given_entries(given: Any) -> tuple[list[Any], str | None]:
    """The token entries of log-probs given with an answer, and the answer's text where they carry it."""
    text = None
    if isinstance(given, BaseMessage):
        text = str(given.text) if isinstance(given.text, str) else str(given.content)  # a TextAccessor, as a str
        given = message_logprobs(given)
        if not given:
            raise ConfigError(
                f"{NAME}: the message carries no log-probs in its response_metadata; ask its model for them "
                "(langchain-openai: logprobs=True; a llama.cpp server gives them alike)"
            )
    if isinstance(given, Mapping) and "choices" in given:  # a whole (chat) completion response
        choices = given["choices"]
        choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], Mapping) else {}
        text = text or (choice.get("message") or {}).get("content") or choice.get("text")
        given = choice.get("logprobs")
    if isinstance(given, Mapping) and "token_logprobs" in given:  # a /v1/completions logprobs object
        given = _completion_entries(given)
    elif isinstance(given, Mapping):
        given = given.get("content")
    if isinstance(given, str | bytes) or not isinstance(given, Sequence) or not given:
        raise ConfigError(f"{NAME}: {SHAPES}")
    return list(given), text


SHAPES = (
    "the log-probs must be one of: a chat completion response (choices[0].logprobs.content), a completion "
    "response (choices[0].logprobs with tokens, token_logprobs, top_logprobs), OpenAI's logprobs object "
    "({'content': [...]}), or a non-empty list of {'token', 'logprob', 'top_logprobs'} entries"
)


def _completion_entries(logprobs: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A completions API's parallel lists (tokens, token_logprobs, top_logprobs) as token entries."""
    tokens, values = logprobs.get("tokens") or [], logprobs.get("token_logprobs") or []
    tops = logprobs.get("top_logprobs") or [None] * len(tokens)
    if not (isinstance(tokens, list) and isinstance(values, list) and isinstance(tops, list)) or not (
        len(tokens) == len(values) == len(tops)
    ):
        raise ConfigError(f"{NAME}: a completion's tokens, token_logprobs and top_logprobs must be lists of one length")
    return [{"token": t, "logprob": v, "top_logprobs": top} for t, v, top in zip(tokens, values, tops, strict=True)]


def given_stats(given: Any, text: str | None) -> tuple[str, list[TokenStat], str]:
    """(the text, its tokens' statistics, what the entropy is over) from log-probs given with an answer.
    The tokens must spell the text (leading or trailing space aside)."""
    entries, carried = given_entries(given)
    rows = [_entry(e) for e in entries]
    spelled = "".join(token for token, _, _ in rows)
    text = text if text is not None else (carried if carried is not None else spelled)
    shift = spelled.find(text.strip()) if text.strip() else -1
    if shift < 0:
        raise ConfigError(
            f"{NAME}: the given tokens spell {spelled[:60]!r}..., not the text {text[:60]!r}...: pass the "
            "log-probs of this very answer"
        )
    offset = text.find(text.strip())  # where the text's own stripped form starts
    stats, at = [], 0
    for token, logprob, top in rows:
        stats.append(TokenStat(max(0, at - shift + offset), logprob, entropy(top) if top else None))
        at += len(token)
    ks = {len(top) for _, _, top in rows if top}
    over = f"top-{'/'.join(map(str, sorted(ks)))} renormalised" if ks else "none given"
    return text, stats, over


def read_logprobs(path: str, flag: str) -> Any:
    """--logprobs-file: a JSON list of token entries, OpenAI's logprobs object, or a whole (chat)
    completion response as the provider returned it (``SHAPES``)."""
    found = load_json(read_file(path, flag), flag, path)
    given_entries(found)  # its shape, checked before any model loads
    return found


# ---------------------------------------------------------------- the method


@dataclass(frozen=True, kw_only=True)
class Inputs:
    text: str | None = options.text("the answer to check (default: the given log-probs' message or tokens)")
    sentences: list[str] | None = options.sentences()
    question: str | None = options.question(
        "the prompt the text answers; the proxy model reads the text after it", metavar="PROMPT"
    )
    logprobs: BaseMessage | dict[str, Any] | list[Any] | None = arg(
        help="the answer's own token log-probs: an AIMessage holding them, OpenAI's logprobs(.content), or "
        "(token, logprob, top_logprobs) tuples",
        flags=(Flag(("--logprobs-file",), read=read_logprobs, metavar="FILE"),),
    )


@dataclass(frozen=True, kw_only=True)
class Options:
    model: str | LogProbModel | None = options.model(
        "reads the text when no log-probs are given (a proxy: local: or transformers:)"
    )
    variant: Variant = arg(
        DEFAULT_VARIANT,
        help="the score: avg-nll = Avg(-log p), max-nll = Max(-log p), avg-entropy = Avg(H), max-entropy = Max(H); "
        "how each ranks planted falsehoods and WikiBio's sentences: docs/results/token-logprob.md",
        flags=(Flag(("--variant",), choices=VARIANTS),),
    )
    chat: bool = arg(
        True,
        help="the proxy reads the text as its own chat reply to the question (false: after the question and a "
        "blank line)",
    )


@dataclass(frozen=True)
class Prepared(contract.Prepared):
    reader: LogProbModel | None = None


def prepare(opts: Options, ctx: RunContext) -> Prepared:
    """The proxy model, loaded once (none where log-probs come with each answer)."""
    reader = ctx.gateway.logprob_model(opts.model) if opts.model is not None else None
    return Prepared(options=opts, reader=reader)


def run(prepared: Prepared, inputs: Inputs, ctx: RunContext) -> Steps[DetectionResult]:
    """Each sentence's four token scores; the unit's score is the chosen variant's."""
    opts: Options = prepared.options
    reader = prepared.reader
    if inputs.logprobs is not None:
        text, stats, over = given_stats(inputs.logprobs, inputs.text)
        source, reader = "given", None
    else:
        if reader is None:
            raise ConfigError(f"{NAME} needs model (a proxy that reads the text), or logprobs")
        text = inputs.text or " ".join(inputs.sentences or [])
        ctx.plan(1)
        prompt = reading_prompt(reader, inputs.question, opts.chat)
        # one forward pass, or the text's cached statistics
        stats = yield Blocking(partial(readings.token_stats, ctx.gateway, reader, prompt, text))
        source, over = "proxy", WHOLE_VOCABULARY
    text, given, _ = checked_passage(text, inputs.sentences, None)
    found = given or split_sentences(text or "")
    if not found:
        raise ConfigError(f"{NAME} needs a non-empty text (no sentence found)")
    if opts.variant in ENTROPY_VARIANTS and any(t.entropy is None for t in stats):
        raise ConfigError(
            f"{NAME}: variant {opts.variant} needs each token's alternatives (top_logprobs), and the given "
            "log-probs carry none; ask the provider for top_logprobs, or use avg-nll / max-nll"
        )
    scored = sentence_scores(text, found, stats)
    units = [
        Unit(
            text=sentence,
            score=s.variant(opts.variant),
            evidence={
                "avg_nll": s.avg_nll,
                "max_nll": s.max_nll,
                "avg_entropy": s.avg_entropy,
                "max_entropy": s.max_entropy,
                "tokens": s.tokens,
                "entropy_over": over,
            },
        )
        for sentence, s in zip(found, scored, strict=True)
    ]
    unplaced = sum(1 for s in scored if s.tokens == 0)
    meta = ctx.meta(
        NAME,
        {"sentence_without_tokens": unplaced} if unplaced else {},
        variant=opts.variant,
        source=source,
        reader=None if reader is None else reader.name,
        entropy_over=over,
        tokens=len(stats),
        chat=opts.chat if source == "proxy" else None,
    )
    return DetectionResult(method=NAME, units=units, meta=meta)


METHOD = Method.from_module(
    __name__,
    logprobs_field="logprobs",
    needs=(
        Need("text", "sentences", "logprobs", logprobs="(the answer's own)"),
        Need("model", "logprobs", model="(a proxy that reads the text)", logprobs="(the answer's own)"),
    ),
    presets={v: {"variant": v} for v in VARIANTS},  # each by name ('token-logprob:avg-nll'), the default too
)
detect, adetect = METHOD.detect, METHOD.adetect
