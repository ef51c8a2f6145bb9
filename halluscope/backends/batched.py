"""Samples of one prompt decoded together on a llama.cpp model: the prompt is evaluated once into one
sequence, its KV cells shared by every sample's sequence (one unified KV cache), then each decode
carries one token of every unfinished sample. On a CPU a decode step reads the weights once however
many sequences it carries, so n samples cost far less than n decodes one after another.

Each sample draws from the raw logits at its temperature and top_p (the plain sampling the papers'
APIs used, as ``local.PLAIN_SAMPLING``) with a generator seeded by its own seed: a seeded sample is the
same whichever samples it was decoded with. It is not the draw llama.cpp's own sampler would make
for the same seed: one-at-a-time and batched samples are draws of the same distribution, and the
gateway caches each under its sample index either way."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from halluscope.errors import ConfigError

MAX_SEQUENCES = 16  # samples decoded together at most (a request for more is decoded in groups)
BATCH_TOKENS = 512  # tokens per decode while the prompt is evaluated


@dataclass(frozen=True)
class Draw:
    """How every sequence of a batch is drawn: at temperature and top_p, at most max_tokens, cut at the
    first of ``stop``; each token's ``top_logprobs`` alternatives kept where it is not None."""

    temperature: float
    top_p: float
    max_tokens: int
    stop: list[str]
    top_logprobs: int | None = None


@dataclass
class Sampled:
    """One sample: its text, its tokens, each token's log-prob entry (OpenAI's shape) and why it ended."""

    text: str
    tokens: list[int]
    logprobs: list[dict[str, Any]]
    finish_reason: str


class BatchSampler:
    """A llama.cpp context of its own for sampling a prompt n times at once (the chat and log-prob
    contexts keep their single sequence), on the weights the model's ``Llama`` already holds."""

    def __init__(self, llama: Any, n_ctx: int) -> None:
        import llama_cpp
        from llama_cpp import _internals

        params = llama_cpp.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = params.n_ubatch = BATCH_TOKENS
        params.n_seq_max = MAX_SEQUENCES
        params.kv_unified = True  # the prompt's cells are shared by every sequence, not copied per sequence
        params.n_threads = params.n_threads_batch = os.cpu_count() or 1
        self.llama = llama
        self.n_ctx = n_ctx
        self.n_vocab = llama.n_vocab()
        self.ctx = _internals.LlamaContext(model=llama._model, params=params, verbose=False)
        self.batch = _internals.LlamaBatch(n_tokens=BATCH_TOKENS, embd=0, n_seq_max=MAX_SEQUENCES, verbose=False)
        self.lock = threading.Lock()

    def sample(self, prompt: list[int], seeds: list[int | None], draw: Draw) -> list[Sampled]:
        """One sample per seed (None: an unseeded draw), in groups that fit the context; each token's
        log-prob entry with ``draw.top_logprobs`` alternatives where it is not None."""
        max_tokens = draw.max_tokens
        room = max(1, (self.n_ctx - len(prompt)) // max(1, max_tokens))
        size = min(MAX_SEQUENCES, room)
        if len(prompt) + max_tokens > self.n_ctx:
            raise ConfigError(
                f"a prompt of {len(prompt)} tokens and {max_tokens} to sample exceed the context ({self.n_ctx}): "
                "raise HALLUSCOPE_LOCAL_N_CTX"
            )
        out: list[Sampled] = []
        with self.lock:
            for start in range(0, len(seeds), size):
                group = seeds[start : start + size]
                out += self._group(prompt, group, draw)
        return out

    def _group(self, prompt: list[int], seeds: list[int | None], draw: Draw) -> list[Sampled]:
        n, max_tokens, top_logprobs = len(seeds), draw.max_tokens, draw.top_logprobs
        self.ctx.kv_cache_clear()
        last = self._evaluate_prompt(prompt)
        for s in range(1, n):  # the prompt's cells, shared by every sequence
            self.ctx.kv_cache_seq_cp(0, s, -1, -1)
        rngs = [np.random.default_rng(seed) for seed in seeds]
        logits = [last] * n
        tokens: list[list[int]] = [[] for _ in range(n)]
        entries: list[list[dict[str, Any]]] = [[] for _ in range(n)]
        ended: list[str | None] = [None] * n
        spelled = [b""] * n
        texts = [""] * n
        for step in range(max_tokens):
            for s in range(n):
                if ended[s] is not None:
                    continue
                token = _pick(logits[s], draw.temperature, draw.top_p, rngs[s])
                if self._eog(token):  # not part of the answer, as llama-cpp-python reports none
                    ended[s] = "stop"
                    continue
                if top_logprobs is not None:
                    entries[s].append(self._entry(logits[s], token, top_logprobs))
                tokens[s].append(token)
                spelled[s] += self.llama.detokenize([token])
                texts[s], stopped = _cut(spelled[s].decode("utf-8", errors="ignore"), draw.stop)
                if stopped:
                    ended[s] = "stop"
            going = [s for s in range(n) if ended[s] is None]
            if not going or step == max_tokens - 1:
                break
            logits = self._decode_next(going, tokens, len(prompt), logits)
        return [
            Sampled(texts[s], tokens[s], entries[s], ended[s] or "length")
            for s in range(n)  # a sequence that never ended ran to max_tokens
        ]

    def _eog(self, token: int) -> bool:
        import llama_cpp

        return bool(llama_cpp.llama_vocab_is_eog(self.llama._model.vocab, token))

    def _evaluate_prompt(self, prompt: list[int]) -> np.ndarray:
        """The prompt into sequence 0, in chunks; the logits after its last token."""
        b = self.batch.batch
        for start in range(0, len(prompt), BATCH_TOKENS):
            chunk = prompt[start : start + BATCH_TOKENS]
            b.n_tokens = len(chunk)
            for i, token in enumerate(chunk):
                b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = token, start + i, 1, False
                b.seq_id[i][0] = 0
            b.logits[len(chunk) - 1] = True  # read after the last chunk only
            self.ctx.decode(self.batch)
        return self._logits(b.n_tokens - 1)

    def _decode_next(
        self, going: list[int], tokens: list[list[int]], prompt_len: int, logits: list[np.ndarray]
    ) -> list[np.ndarray]:
        """Each unfinished sequence's last token decoded together; their next logits."""
        b = self.batch.batch
        b.n_tokens = len(going)
        for i, s in enumerate(going):
            b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = tokens[s][-1], prompt_len + len(tokens[s]) - 1, 1, True
            b.seq_id[i][0] = s
        self.ctx.decode(self.batch)
        fresh = list(logits)
        for i, s in enumerate(going):
            fresh[s] = self._logits(i)
        return fresh

    def _logits(self, i: int) -> np.ndarray:
        row = np.ctypeslib.as_array(self.ctx.get_logits_ith(i), shape=(self.n_vocab,))
        return row.copy()  # the next decode overwrites llama.cpp's buffer

    def _text(self, tokens: list[int]) -> str:
        return self.llama.detokenize(tokens).decode("utf-8", errors="ignore")

    def _entry(self, logits: np.ndarray, token: int, top: int) -> dict[str, Any]:
        """The token's log-prob under the raw logits (as llama-cpp-python reports one), and the top ones."""
        logprobs = logits.astype(np.float64) - _logsumexp(logits.astype(np.float64))
        best = np.argsort(-logprobs)[:top] if top else []
        return {
            "token": self._text([token]),
            "logprob": float(logprobs[token]),
            "top_logprobs": [{"token": self._text([int(t)]), "logprob": float(logprobs[t])} for t in best],
        }


def _logsumexp(x: np.ndarray) -> float:
    peak = float(x.max())
    return peak + float(np.log(np.exp(x - peak).sum()))


def _pick(logits: np.ndarray, temperature: float, top_p: float, rng: np.random.Generator) -> int:
    """A token drawn at ``temperature`` from the smallest set of most likely tokens holding ``top_p``
    of the probability; the most likely token at temperature 0."""
    if temperature <= 0:
        return int(np.argmax(logits))
    scaled = logits.astype(np.float64) / temperature
    p = np.exp(scaled - scaled.max())
    if top_p < 1.0:
        order = np.argsort(-p)
        mass = np.cumsum(p[order])
        kept = order[: int(np.searchsorted(mass, top_p * mass[-1])) + 1]
        within = np.cumsum(p[kept])
        return int(kept[min(len(kept) - 1, int(np.searchsorted(within, rng.random() * within[-1], side="right")))])
    mass = np.cumsum(p)  # inverse CDF: one uniform draw
    return int(min(len(p) - 1, np.searchsorted(mass, rng.random() * mass[-1], side="right")))


def _cut(text: str, stop: list[str]) -> tuple[str, bool]:
    """The text up to its first stop string, and whether one was found."""
    found = [i for i in (text.find(s) for s in stop if s) if i >= 0]
    return (text[: min(found)], True) if found else (text, False)
