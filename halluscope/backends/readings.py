"""What a LogProbModel does through the gateway's limits, cache and counts: a forward pass of a method's
own, each token's log-prob and entropy (cached as JSON rows), hidden states at chosen positions and
layers (cached packed as float16/float32 base64, never pickled), and sampled continuations of a raw text
(cached by sample index, as chat calls are).

The gateway sends chat calls; this module runs a LogProbModel. It takes any object with the gateway's
cache, its log-prob model resolver and its concurrency slots (``Reads``), so it imports nothing above it.
"""

from __future__ import annotations

import base64
import binascii
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

import numpy as np

from halluscope.backends.cache import CallCache, RedisCache, call_key
from halluscope.backends.logprobs import LogProbModel, Reading, token_count
from halluscope.backends.providers import check_call_params
from halluscope.backends.stats import CallStats, ChatReply
from halluscope.errors import PromptError
from halluscope.prompts.registry import PromptRegistry, PromptTemplate
from halluscope.scoring.token_probability import TokenStat

TOKEN_STATS = "token-stats@1"  # the cache's name for a text's token statistics (a new layout, a new name)
HIDDEN_STATES = "hidden-states@1"  # and for the hidden states read at a text's positions
UNREADABLE_STATES = "hidden_states_reread"  # an event: a cached row was not what was written, read again
FLOAT16_MAX = float(np.finfo(np.float16).max)
T = TypeVar("T")


class Reads(Protocol):
    """What a reading needs of the gateway."""

    cache: CallCache | RedisCache | None

    def logprob_model(self, model: str | LogProbModel) -> LogProbModel: ...

    def limited(self, key: str, compute: Callable[[], T], stats: CallStats | None) -> T: ...

    @property
    def registry(self) -> PromptRegistry: ...

    cached: Callable[..., ChatReply | None]  # Gateway.cached: a call's cached answer, or None
    answered: Callable[..., ChatReply]  # Gateway.answered: a fresh answer, cached when real


def forward(
    via: Reads, model: LogProbModel, prompt: str, compute: Callable[[], T], stats: CallStats | None = None
) -> T:
    """``compute()``, a forward pass of ``model`` over ``prompt`` (teacher forcing, a next-token
    distribution), under the model's concurrency limit and counted on ``stats``; deterministic, so
    recomputed rather than cached."""
    started = time.perf_counter()
    out = via.limited(model.name, compute, stats)
    if stats is not None:
        stats.record_forward(model.name, token_count(model, prompt), time.perf_counter() - started)
    return out


def token_stats(
    via: Reads, model: str | LogProbModel, prompt: str, text: str, stats: CallStats | None = None
) -> list[TokenStat]:
    """Each token of ``text`` as ``model`` reads it after ``prompt``: its log-prob and its position's
    entropy, from one forward pass. Unlike other forward passes these are cached (JSON rows): a
    passage costs seconds on a CPU, and a rerun, another variant or a calibration reads them back."""
    lm = via.logprob_model(model)
    key = _key(lm, TOKEN_STATS, prompt, text)
    found = _token_rows(via.cache.get(key) if via.cache is not None else None)
    if found:
        if stats is not None:
            stats.record_forward(lm.name, 0, 0.0, cached=True)
        return found
    found = forward(via, lm, prompt + text, lambda: lm.token_stats(prompt, text), stats)
    _keep_token_stats(via, key, found)
    return found


def hidden_states(
    via: Reads,
    model: str | LogProbModel,
    prompt: str,
    text: str,
    ends: Sequence[int],
    layers: Sequence[int],
    stats: CallStats | None = None,
) -> dict[int, np.ndarray]:
    """The hidden state of the token ending at each of ``ends`` (character offsets into ``text``; 0: the
    prompt's last token) at each of ``layers``, as ``model`` reads ``text`` after ``prompt``: one
    forward pass, whose token statistics are cached too (token-logprob reads them back). Cached as
    JSON, only the positions and layers asked for, rounded to float16 (fresh ones too, so a replay
    gives the same numbers); a request for more positions or layers reads the text again and keeps
    the union."""
    lm = via.logprob_model(model)
    key = _key(lm, HIDDEN_STATES, prompt, text)
    hit = via.cache.get(key) if via.cache is not None else None
    held = _state_rows(hit, lm.width) if hit is not None else None
    if hit is not None and held is None and stats is not None:
        stats.event(UNREADABLE_STATES)
    want_ends, want_layers = [int(e) for e in ends], sorted({int(layer) for layer in layers})
    if held is not None and set(want_ends) <= set(held[0]) and set(want_layers) <= set(held[1]):
        if stats is not None:
            stats.record_forward(lm.name, 0, 0.0, cached=True)
        rows = [held[0].index(e) for e in want_ends]
        return {layer: held[1][layer][rows] for layer in want_layers}
    all_ends = sorted(set(want_ends) | set(held[0] if held else ()))
    all_layers = sorted(set(want_layers) | set(held[1] if held else ()))
    reading: Reading = forward(via, lm, prompt + text, lambda: lm.read(prompt, text, all_ends, all_layers), stats)
    states = {layer: _rounded(reading.states[layer]) for layer in all_layers}
    if via.cache is not None:
        via.cache.set(key, {"ends": all_ends, "layers": {str(k): _packed(v) for k, v in states.items()}})
        _keep_token_stats(via, _key(lm, TOKEN_STATS, prompt, text), reading.stats)
    rows = [all_ends.index(e) for e in want_ends]
    return {layer: states[layer][rows].astype(np.float32) for layer in want_layers}


def complete(
    via: Reads,
    model: str | LogProbModel,
    prompt: str | PromptTemplate,
    text: str,
    *,
    sample_index: int = 0,
    stats: CallStats | None = None,
    **params: Any,
) -> ChatReply:
    """One sampled continuation of ``text`` (already rendered with the completion prompt), with the
    prompt's parameters and parser, cached by sample index like a chat call; the reply's
    ``logprobs`` hold each token's raw log-prob."""
    lm = via.logprob_model(model)
    tpl = via.registry.get(prompt) if isinstance(prompt, str) else prompt
    if tpl.kind != "completion":
        raise PromptError(f"{tpl.id} is a chat prompt; a LogProbModel continues completion texts")
    check_call_params(params)
    merged = {**tpl.params, **{k: v for k, v in params.items() if v is not None}}
    key = call_key(lm.name, merged, [{"role": "text", "content": text}], sample_index)
    if (cached := via.cached(key, lm.name, tpl, sample_index, True, stats)) is not None:
        return cached  # a continuation is read for its log-probs: one without them is no answer
    seed = merged.get("seed")
    started = time.perf_counter()
    sample = via.limited(
        lm.name,
        lambda: lm.sample(
            text,
            n=1,
            max_tokens=int(merged.get("max_tokens", 64)),
            temperature=float(merged.get("temperature", 1.0)),
            top_p=float(merged.get("top_p", 1.0)),
            stop=tuple(merged.get("stop") or ()),
            seed=None if seed is None else int(seed) + sample_index,
        )[0],
        stats,
    )
    data = {
        "text": sample.text,
        "prompt_tokens": token_count(lm, text),
        "completion_tokens": len(sample.token_logprobs),
        "logprobs": [
            {"token": t, "logprob": lp}
            for t, lp in zip(sample.tokens or [""] * len(sample.token_logprobs), sample.token_logprobs, strict=True)
        ],
        "prompt_ref": tpl.ref,
    }
    return via.answered(key, lm.name, tpl, sample_index, data, True, time.perf_counter() - started, stats)


def _key(lm: LogProbModel, read: str, prompt: str, text: str) -> str:
    return call_key(
        lm.name, {"read": read}, [{"role": "prompt", "content": prompt}, {"role": "text", "content": text}], 0
    )


def _keep_token_stats(via: Reads, key: str, found: Sequence[TokenStat]) -> None:
    if found and via.cache is not None:  # a text that adds no token is no answer
        via.cache.set(key, {"tokens": [[t.start, t.logprob, t.entropy] for t in found]})


def _token_rows(hit: Mapping[str, Any] | None) -> list[TokenStat]:
    """A cached text's token statistics; none (a miss) for an entry that is not rows of three numbers."""
    rows = hit.get("tokens") if hit is not None else None
    if not isinstance(rows, list):
        return []
    found = []
    for row in rows:
        if not (isinstance(row, list) and len(row) == 3 and all(isinstance(v, int | float) for v in row)):
            return []
        found.append(TokenStat(int(row[0]), float(row[1]), float(row[2])))
    return found


def _rounded(rows: np.ndarray) -> np.ndarray:
    """Hidden states at float16 precision, or float32 where a value lies beyond float16's range (some
    layers carry a few massive activations), never an infinity."""
    return rows.astype(np.float16 if not rows.size or np.abs(rows).max() < FLOAT16_MAX else np.float32)


def _packed(rows: np.ndarray) -> dict[str, Any]:
    """Rows as JSON: their shape, and their little-endian bytes in base64 under their dtype's name."""
    dtype = "float16" if rows.dtype == np.float16 else "float32"
    return {
        "shape": list(rows.shape),
        dtype: base64.b64encode(rows.astype(f"<f{rows.itemsize}").tobytes()).decode("ascii"),
    }


def _state_rows(hit: Any, width: int) -> tuple[list[int], dict[int, np.ndarray]] | None:
    """A cached text's positions and its states per layer; None for an entry that is not what
    ``hidden_states`` writes: distinct whole-number positions, and for each layer a (positions, width)
    array of float16 or float32 whose every value is finite. A row written otherwise (by another version,
    a damaged disk, a hand) is read again, never handed to a probe."""
    if not isinstance(hit, Mapping):
        return None
    ends, packed_layers = hit.get("ends"), hit.get("layers")
    if not isinstance(ends, list) or not isinstance(packed_layers, dict) or not packed_layers:
        return None
    if not all(type(e) is int for e in ends) or len(set(ends)) != len(ends):
        return None
    layers = {}
    try:
        for layer, packed in packed_layers.items():
            dtype = next((d for d in ("float16", "float32") if d in packed), None)
            if dtype is None or set(packed) != {"shape", dtype}:
                return None
            shape = tuple(packed["shape"])
            if shape != (len(ends), width):
                return None
            values = np.frombuffer(
                base64.b64decode(packed[dtype], validate=True), dtype="<f2" if dtype == "float16" else "<f4"
            )
            values = values.reshape(shape).astype(np.float32)
            if not np.isfinite(values).all():
                return None
            layers[int(layer)] = values
    except (KeyError, TypeError, ValueError, binascii.Error):
        return None
    return list(ends), layers
