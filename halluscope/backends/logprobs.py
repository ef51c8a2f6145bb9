"""LogProbModel: sample with token log-probs, and score a continuation by teacher forcing.

The log-prob methods (PHR, likelihood semantic entropy, Direct Question probabilities, CLUE's
offline scorer) need the model's own log-probabilities: always from raw logits, never after
temperature or top-p, with prompt and continuation tokenised together.

Implementations: ``local:`` GGUF models (llama-cpp-python), ``transformers:<directory>`` (any Hugging
Face causal LM directory) and ``openai-compatible:<base_url>#<model>`` completion servers that echo
prompt log-probs. Anthropic has no log-probs.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from halluscope.errors import ConfigError, ModelUnavailableError
from halluscope.scoring.token_probability import TokenStat


@dataclass(frozen=True)
class Reading:
    """What one forward pass over a text gives: each of its tokens' statistics, and the hidden state at
    each asked position, per asked layer (rows in the order the positions were asked)."""

    stats: list[TokenStat]
    states: dict[int, np.ndarray]


@dataclass
class Sample:
    text: str
    token_logprobs: list[float]
    tokens: list[str] = field(default_factory=list)

    @property
    def logprob(self) -> float:
        return float(sum(self.token_logprobs))


@dataclass(frozen=True)
class Sampling:
    """How ``LogProbModel.sample`` draws: n continuations of at most max_tokens, at temperature and top_p,
    cut at the first of ``stop``, seeded (sample i with seed + i) or not."""

    n: int
    max_tokens: int
    temperature: float
    top_p: float
    stop: tuple[str, ...]
    seed: int | None


class LogProbMismatchError(ModelUnavailableError):
    """A server whose reported log-probs contradict themselves; its numbers must not be used."""


def log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def row_stats(logits: np.ndarray, targets: Sequence[int], rows_at_once: int = 32) -> list[tuple[float, float]]:
    """(log p of the target, entropy of the whole distribution) for each row of logits, a few rows at a
    time (one float64 row of a 150k vocabulary is 1.2 MB)."""
    out: list[tuple[float, float]] = []
    for lo in range(0, len(logits), rows_at_once):
        chunk = log_softmax(np.asarray(logits[lo : lo + rows_at_once], dtype=np.float64))
        picked = chunk[np.arange(len(chunk)), np.asarray(targets[lo : lo + rows_at_once])]
        entropies = -(np.exp(chunk) * chunk).sum(axis=-1)
        out.extend(zip(picked.tolist(), entropies.tolist(), strict=True))
    return out


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class LogProbModel(ABC):
    """Two operations every log-prob method stands on."""

    name: str
    any_layer = False  # its hidden states can be read at any layer (else the last only)

    def sample(
        self,
        prompt: str,
        n: int = 1,
        max_tokens: int = 64,
        temperature: float = 1.0,
        top_p: float = 1.0,
        stop: Sequence[str] = (),
        seed: int | None = None,
    ) -> list[Sample]:
        """n continuations of a raw prompt, each with the raw log-prob of every sampled token."""
        check_n(n)
        return self.draw(prompt, Sampling(n, max_tokens, temperature, top_p, tuple(stop), seed))

    def draw(self, prompt: str, how: Sampling) -> list[Sample]:
        """``sample``'s work, its settings checked and held in one value (a model implements this, or
        ``sample`` itself)."""
        raise NotImplementedError(f"{type(self).__name__} samples nothing: it implements neither draw nor sample")

    @abstractmethod
    def score_many(self, prompt: str, continuations: Sequence[str]) -> list[float]:
        """Sum of token log-probs of each continuation given the prompt (teacher forcing)."""

    def score(self, prompt: str, continuation: str) -> float:
        return self.score_many(prompt, [continuation])[0]

    def chat_prompt(self, messages: Sequence[dict[str, str]]) -> str:
        """The model's own chat template applied to messages, ready for the assistant's turn."""
        raise ConfigError(f"{self.name} has no chat template here: pass a raw prompt")

    def next_token_logprobs(self, prompt: str) -> np.ndarray:
        """log p(token | prompt) for every token of the vocabulary, from one forward pass: every
        single-token response's log-prob at once, and K samples of it for free."""
        raise ConfigError(
            f"{self.name} gives no whole next-token distribution; sample the responses instead (PHR: sampled=True)",
            settings=("sampled=True",),
        )

    def _encode(self, text: str) -> list[int]:
        """Token ids of a raw prompt as the model reads it (BOS and special tokens included)."""
        raise ConfigError(f"{self.name} exposes no tokenizer here")

    def first_token(self, prompt: str, continuation: str) -> int:
        """The id of the first token of ``continuation`` when it is tokenised together with the prompt."""
        full = self._encode(prompt + continuation)
        start = common_prefix(self._encode(prompt), full)
        if start >= len(full):
            raise ConfigError(f"{continuation!r} adds no token to the prompt")
        return full[start]

    def token_text(self, token: int) -> str:
        raise ConfigError(f"{self.name} exposes no tokenizer here")

    def token_stats(self, prompt: str, text: str) -> list[TokenStat]:
        """Every token of ``text`` read after ``prompt`` (tokenised together), with its log-prob and the
        entropy of the whole next-token distribution it came from: one forward pass."""
        full = self._encode(prompt + text)
        start = max(1, common_prefix(self._encode(prompt), full))
        if start >= len(full):
            return []
        rows = row_stats(self._logit_rows(full, start), full[start:])
        starts = self._starts(full[:start], full[start:], text)
        return [TokenStat(at, lp, h) for at, (lp, h) in zip(starts, rows, strict=True)]

    @property
    def file_hash(self) -> str:
        """sha256 of the weights it reads (what a probe fitted on its hidden states is tied to)."""
        raise ConfigError(f"{self.name} gives no hidden states here; read the text with local: or transformers:")

    @property
    def n_layers(self) -> int:
        """Its transformer layers; layer ``n_layers`` is the last one's output, after the final norm."""
        raise ConfigError(f"{self.name} gives no hidden states here; read the text with local: or transformers:")

    @property
    def width(self) -> int:
        """The length of one hidden state (what a cached row must hold)."""
        raise ConfigError(f"{self.name} gives no hidden states here; read the text with local: or transformers:")

    def read(self, prompt: str, text: str, ends: Sequence[int], layers: Sequence[int]) -> Reading:
        """One forward pass over ``text`` after ``prompt``: its token statistics, and the hidden state of the
        token that ends each of ``ends`` (character offsets into ``text``: the token holding character
        ``end - 1``; 0 is the prompt's last token, the one before the text), at each of ``layers``."""
        full = self._encode(prompt + text)
        start = max(1, common_prefix(self._encode(prompt), full))
        starts = self._starts(full[:start], full[start:], text) if start < len(full) else []
        rows = [start - 1 + sum(1 for at in starts if at < end) for end in ends]
        logits, states = self._hidden(full, start, rows, self._checked_layers(layers))
        stats = [TokenStat(at, lp, h) for at, (lp, h) in zip(starts, row_stats(logits, full[start:]), strict=True)]
        return Reading(stats, states)

    def _checked_layers(self, layers: Sequence[int]) -> list[int]:
        top = self.n_layers
        wrong = [layer for layer in layers if not 0 <= layer <= top]
        if wrong:
            raise ConfigError(f"{self.name} has layers 0..{top} (0: the embeddings, {top}: the last); not {wrong}")
        return sorted(set(layers))

    def _hidden(
        self, ids: list[int], start: int, rows: list[int], layers: list[int]
    ) -> tuple[np.ndarray, dict[int, np.ndarray]]:
        """From one forward pass over ``ids``: the raw logits that predict ``ids[start:]``, and the hidden
        states of the tokens at ``rows`` for each of ``layers`` (float32)."""
        raise ConfigError(f"{self.name} gives no hidden states here; read the text with local: or transformers:")

    def _logit_rows(self, ids: list[int], start: int) -> np.ndarray:
        """The raw logits that predict ``ids[start:]``, one row each, from one forward pass over ``ids``."""
        raise ConfigError(
            f"{self.name} gives no whole next-token distributions here; read the text with local: or "
            "transformers:, or pass the answer's own log-probs"
        )

    def _decoded(self, ids: list[int], before: list[int]) -> str:
        """The text of ``ids`` following ``before`` (an incomplete UTF-8 character left out)."""
        raise ConfigError(f"{self.name} exposes no tokenizer here")

    def _starts(self, before: list[int], ids: list[int], text: str) -> list[int]:
        """Where each token of ``ids`` starts in ``text``. The first token may carry the prompt's last
        characters (tokenised together): offsets count from the end, so that one starts at 0."""
        prefixes = [self._decoded(ids[:k], before) for k in range(len(ids) + 1)]
        shift = len(prefixes[-1]) - len(text)
        return [min(len(text), max(0, len(p) - shift)) for p in prefixes[:-1]]

    def count_tokens(self, text: str) -> int:
        """Tokens of a text on its own (no BOS), for length filters such as PHR's 116-token rule."""
        raise ConfigError(f"{self.name} exposes no tokenizer here")


def reading_prompt(model: LogProbModel, question: str | None, chat: bool) -> str:
    """What a model reads before a text it scores: the question as a user turn of its chat template (the
    text is then its own reply), or the question and a blank line; nothing without a question."""
    if not question:
        return ""
    if chat:
        return model.chat_prompt([{"role": "user", "content": question}])
    return f"{question}\n\n"


WEIGHT_FILES = (".json", ".safetensors", ".bin", ".gguf")  # what a directory's model is read from
_hashes: dict[tuple[str, ...], str] = {}


def files_sha256(paths: Sequence[Path]) -> str:
    """sha256 over the files' names and bytes, computed once per process for files of a given size and time."""
    key = tuple(f"{p.resolve()}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in paths)
    if key not in _hashes:
        digest = hashlib.sha256()
        for path in paths:
            digest.update(path.name.encode("utf-8"))
            with path.open("rb") as f:
                while chunk := f.read(1 << 24):
                    digest.update(chunk)
        _hashes[key] = digest.hexdigest()
    return _hashes[key]


def token_count(model: LogProbModel, text: str) -> int:
    """Tokens of a text for accounting; 0 where the model has no tokenizer here (a server)."""
    try:
        return model.count_tokens(text)
    except ConfigError:
        return 0


def check_n(n: int) -> None:
    if n < 1:
        raise ConfigError(f"n must be at least 1, got {n}")


def stop_cut(text: str, stop: Sequence[str]) -> int | None:
    """Where the first of ``stop`` begins in ``text``; None where none occurs."""
    hits = [text.find(s) for s in stop if s and s in text]
    return min(hits) if hits else None
