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
import math
import random
import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib.util import find_spec
from pathlib import Path
from typing import Any, cast

import numpy as np

from halluscope.backends.retry import BadReplyError, Faults, RetryPolicy, call_with_retries
from halluscope.errors import ConfigError, ModelUnavailableError, redact_credentials
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

    @abstractmethod
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
            f"{self.name} gives no whole next-token distribution; sample the responses instead (PHR: --sampled)"
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


def _check_n(n: int) -> None:
    if n < 1:
        raise ConfigError(f"n must be at least 1, got {n}")


# ---------------------------------------------------------------- llama-cpp-python


class LlamaCppLogProbModel(LogProbModel):
    """A local GGUF model. One context keeps every position's logits; consecutive calls that share
    a prompt prefix reuse its KV cache (K samples or continuations of one prompt pay for it once)."""

    def __init__(self, name_or_path: str, n_ctx: int | None = None) -> None:
        from halluscope.backends.local import load_llama, model_file

        self.name = f"local:{name_or_path}"
        self._loaded = load_llama(model_file(name_or_path), logits_all=True, n_ctx=n_ctx)
        self._llama = self._loaded.llama
        # Tokens whose logit rows this scorer evaluated itself, at context epoch _epoch. Rows left by
        # anyone else (sampling, a chat call on the shared context) are not reused: llama.cpp's
        # quantised kernels give a token decoded alone slightly different logits than in a batch, and
        # a score must not depend on history.
        self._scored: list[int] = []
        self._epoch = -1
        # False evaluates every prompt from its first token (the baseline that prefix reuse is measured against)
        self.reuse_prefix = True

    def _encode(self, text: str) -> list[int]:
        return list(self._llama.tokenize(text.encode("utf-8"), add_bos=True, special=True))

    def _eval(self, tokens: list[int]) -> None:
        """Evaluate tokens, reusing whatever prefix the context already holds."""
        llama = self._llama
        if len(tokens) > llama.n_ctx():
            raise ConfigError(f"{self.name}: {len(tokens)} tokens exceed the context of {llama.n_ctx()}")
        mine = self._scored if self._epoch == self._loaded.epoch and self.reuse_prefix else []
        keep = min(common_prefix(mine, tokens), common_prefix(llama.input_ids[: llama.n_tokens].tolist(), tokens))
        llama.n_tokens = keep
        if keep < len(tokens):
            llama.eval(tokens[keep:])
        self._loaded.epoch += 1
        self._scored, self._epoch = tokens, self._loaded.epoch

    @property
    def file_hash(self) -> str:
        return files_sha256([self._loaded.path])

    @property
    def n_layers(self) -> int:
        import llama_cpp

        return int(llama_cpp.llama_model_n_layer(self._llama._model.model))

    @property
    def width(self) -> int:
        import llama_cpp

        return int(llama_cpp.llama_model_n_embd(self._llama._model.model))

    def _hidden(
        self, ids: list[int], start: int, rows: list[int], layers: list[int]
    ) -> tuple[np.ndarray, dict[int, np.ndarray]]:
        """llama.cpp outputs the last layer's state (after the final norm) for each token it decodes; a
        wanted row is decoded again rather than read from a reused KV prefix, one batch at a time (a
        decode keeps only its own batch's states)."""
        import llama_cpp

        if any(layer != self.n_layers for layer in layers):
            raise ConfigError(
                f"{self.name} (llama.cpp) gives the last layer's hidden state only (layer {self.n_layers}); "
                "read other layers with transformers:<directory>"
            )
        llama, ctx, width = self._llama, self._llama.ctx, self.width
        found = np.zeros((len(rows), width), dtype=np.float32)
        with self._loaded.lock:
            first = min([*rows, start - 1]) if rows else start - 1
            self._eval(ids[:first])  # the prefix, reused where the context holds it
            llama_cpp.llama_set_embeddings(ctx, True)
            try:
                for lo in range(first, len(ids), llama.n_batch):
                    batch = ids[lo : lo + llama.n_batch]
                    llama.eval(batch)
                    for k, row in enumerate(rows):
                        if lo <= row < lo + len(batch):
                            state = llama_cpp.llama_get_embeddings_ith(ctx, row - lo)
                            found[k] = np.ctypeslib.as_array(state, shape=(width,))
            finally:
                llama_cpp.llama_set_embeddings(ctx, False)
            self._loaded.epoch += 1
            self._scored, self._epoch = ids, self._loaded.epoch
            logits = np.array(llama.scores[start - 1 : len(ids) - 1], dtype=np.float32)
        return logits, {layer: found for layer in layers}

    def score_many(self, prompt: str, continuations: Sequence[str]) -> list[float]:
        prompt_ids = self._encode(prompt)
        out = []
        with self._loaded.lock:
            for continuation in continuations:
                full = self._encode(prompt + continuation)
                # tokens of the continuation start where the joint tokenisation leaves the prompt's
                start = max(1, common_prefix(prompt_ids, full))
                if start >= len(full):
                    out.append(0.0)
                    continue
                self._eval(full)
                rows = log_softmax(np.asarray(self._llama.scores[start - 1 : len(full) - 1], dtype=np.float64))
                out.append(float(rows[np.arange(len(full) - start), full[start:]].sum()))
        return out

    def next_token_logprobs(self, prompt: str) -> np.ndarray:
        ids = self._encode(prompt)
        with self._loaded.lock:
            self._eval(ids)
            return log_softmax(np.asarray(self._llama.scores[len(ids) - 1], dtype=np.float64))

    def token_text(self, token: int) -> str:
        return bytes(self._llama.detokenize([token])).decode("utf-8", errors="replace")

    def _logit_rows(self, ids: list[int], start: int) -> np.ndarray:
        with self._loaded.lock:
            self._eval(ids)
            return np.array(self._llama.scores[start - 1 : len(ids) - 1], dtype=np.float32)  # a copy

    def _decoded(self, ids: list[int], before: list[int]) -> str:
        return self._text(ids, before)

    def count_tokens(self, text: str) -> int:
        return len(self._llama.tokenize(text.encode("utf-8"), add_bos=False, special=False))

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
        """Sampling through llama.cpp's sampler; each chosen token's log-prob is read from the raw logit
        row that produced it (llama-cpp-python's completion log-probs sort the whole vocabulary in
        Python for every token: 3.7 instead of ~20 tokens/s on the 1.5B)."""
        import llama_cpp

        from halluscope.backends.local import PLAIN_SAMPLING

        _check_n(n)
        llama = self._llama
        prompt_ids = self._encode(prompt)
        samples = []
        with self._loaded.lock:
            self._loaded.epoch += 1
            for i in range(n):
                if not self.reuse_prefix:
                    llama.n_tokens = 0  # generate() would otherwise keep the prompt's matching prefix
                # without a seed, draw one from the context's own seed, as create_completion does
                llama.set_seed(seed + i if seed is not None else random.Random(llama._seed).randint(0, 2**31))
                ids: list[int] = []
                lps: list[float] = []
                for tok in llama.generate(prompt_ids, temp=temperature, top_p=top_p, **PLAIN_SAMPLING):
                    if llama_cpp.llama_vocab_is_eog(llama._model.vocab, tok):
                        break
                    row = np.asarray(llama.scores[llama.n_tokens - 1], dtype=np.float64)
                    lps.append(float(log_softmax(row)[tok]))
                    ids.append(tok)
                    if len(ids) >= max_tokens or (stop and _stop_cut(self._text(ids, prompt_ids), stop) is not None):
                        break
                text = self._text(ids, prompt_ids)
                cut = _stop_cut(text, stop)
                if cut is not None:  # keep the tokens that make up the text before the stop sequence
                    text = text[:cut]
                    keep = next(
                        (k for k in range(len(ids) + 1) if len(self._text(ids[:k], prompt_ids)) >= cut), len(ids)
                    )
                    ids, lps = ids[:keep], lps[:keep]
                tokens = [self._text([t], prompt_ids + ids[:j]) for j, t in enumerate(ids)]
                samples.append(Sample(text, lps, tokens))
        return samples

    def _text(self, ids: list[int], before: list[int]) -> str:
        return bytes(self._llama.detokenize(ids, prev_tokens=before)).decode("utf-8", errors="ignore")

    def chat_prompt(self, messages: Sequence[dict[str, str]]) -> str:
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        llama = self._llama
        template = llama.metadata.get("tokenizer.chat_template")
        if not template:
            raise ConfigError(f"{self.name} carries no chat template")
        vocab = llama._model
        formatter = Jinja2ChatFormatter(
            template=template,
            eos_token=vocab.token_get_text(llama.token_eos()),
            bos_token=vocab.token_get_text(llama.token_bos()),
            add_generation_prompt=True,
        )
        return str(formatter(messages=cast(Any, list(messages))).prompt)


# ---------------------------------------------------------------- transformers


def hf_directory(directory: str | Path, threads: int | None, what: str) -> Path:
    """Check a Hugging Face model directory and torch before loading; set torch's thread count
    (explicitly: an unset count under load ran far slower here)."""
    try:
        import torch
        import transformers  # noqa: F401
    except ImportError as exc:
        raise ConfigError(f"{what} needs the local extra: pip install -e '.[local]'") from exc
    path = Path(directory).expanduser()
    if not (path / "config.json").is_file():
        raise ConfigError(f"{path} is not a Hugging Face model directory (no config.json)")
    if (path / "spm.model").is_file() and not (path / "tokenizer.json").is_file() and not find_spec("sentencepiece"):
        raise ConfigError(
            f"{path}'s tokenizer is a SentencePiece model (spm.model), which needs sentencepiece: "
            "pip install -e '.[local]'"
        )
    if threads:
        torch.set_num_threads(threads)
    return path


class TransformersLogProbModel(LogProbModel):
    """Any Hugging Face causal-LM directory, on the CPU unless told otherwise."""

    any_layer = True

    def __init__(self, directory: str | Path, device: str | None = None, threads: int | None = None) -> None:
        path = hf_directory(directory, threads, "the transformers backend")
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.name = f"transformers:{path}"
        self.path = path
        self._torch = torch
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        dtype = torch.bfloat16 if self.device.startswith("cuda") else torch.float32
        model: Any = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
        self.model = model.to(self.device).eval()
        self._lock = threading.Lock()

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=True)["input_ids"])

    def score_many(self, prompt: str, continuations: Sequence[str]) -> list[float]:
        torch = self._torch
        prompt_ids = self._encode(prompt)
        fulls = [self._encode(prompt + c) for c in continuations]
        starts = [max(1, common_prefix(prompt_ids, f)) for f in fulls]
        width = max(len(f) for f in fulls)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        ids = torch.full((len(fulls), width), pad, dtype=torch.long)
        mask = torch.zeros((len(fulls), width), dtype=torch.long)
        for row, f in enumerate(fulls):  # right padding: positions stay those of the unpadded text
            ids[row, : len(f)] = torch.tensor(f)
            mask[row, : len(f)] = 1
        with self._lock, torch.inference_mode():
            logits = self.model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device)).logits
            logp = torch.log_softmax(logits.float(), dim=-1)
        out = []
        for row, (f, start) in enumerate(zip(fulls, starts, strict=True)):
            if start >= len(f):
                out.append(0.0)
                continue
            positions = torch.arange(start - 1, len(f) - 1)
            targets = torch.tensor(f[start:])
            out.append(float(logp[row, positions, targets].sum()))
        return out

    def next_token_logprobs(self, prompt: str) -> np.ndarray:
        torch = self._torch
        ids = torch.tensor([self._encode(prompt)], device=self.device)
        with self._lock, torch.inference_mode():
            logits = self.model(input_ids=ids).logits[0, -1].float()
            return np.asarray(torch.log_softmax(logits, dim=-1).cpu().numpy(), dtype=np.float64)

    def token_text(self, token: int) -> str:
        return str(self.tokenizer.decode([token]))

    def _logit_rows(self, ids: list[int], start: int) -> np.ndarray:
        torch = self._torch
        with self._lock, torch.inference_mode():
            logits = self.model(input_ids=torch.tensor([ids], device=self.device)).logits[0]
            return np.asarray(logits[start - 1 : len(ids) - 1].float().cpu().numpy())

    @property
    def file_hash(self) -> str:
        return files_sha256(sorted(p for p in self.path.iterdir() if p.is_file() and p.suffix in WEIGHT_FILES))

    @property
    def n_layers(self) -> int:
        return int(self.model.config.num_hidden_layers)

    @property
    def width(self) -> int:
        return int(self.model.config.hidden_size)

    def _hidden(
        self, ids: list[int], start: int, rows: list[int], layers: list[int]
    ) -> tuple[np.ndarray, dict[int, np.ndarray]]:
        torch = self._torch
        with self._lock, torch.inference_mode():
            out = self.model(input_ids=torch.tensor([ids], device=self.device), output_hidden_states=True)
            logits = np.asarray(out.logits[0, start - 1 : len(ids) - 1].float().cpu().numpy())
            picked = torch.tensor(rows, dtype=torch.long, device=self.device)
            states = {
                layer: np.asarray(out.hidden_states[layer][0, picked].float().cpu().numpy(), dtype=np.float32)
                for layer in layers
            }
        return logits, states

    def _decoded(self, ids: list[int], before: list[int]) -> str:
        head = str(self.tokenizer.decode(before))
        whole = str(self.tokenizer.decode(before + ids))
        return whole[len(head) :].rstrip("\ufffd") if whole.startswith(head) else str(self.tokenizer.decode(ids))

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

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
        torch = self._torch
        _check_n(n)
        prompt_ids = torch.tensor([self._encode(prompt)], device=self.device)
        greedy = temperature <= 0
        with self._lock, torch.inference_mode():
            if seed is not None:
                torch.manual_seed(seed)
            out = self.model.generate(
                prompt_ids,
                attention_mask=torch.ones_like(prompt_ids),
                do_sample=not greedy,
                temperature=None if greedy else temperature,
                top_p=None if greedy else top_p,
                top_k=None,
                max_new_tokens=max_tokens,
                num_return_sequences=n,
                output_logits=True,  # raw logits: scores after temperature/top-p are not log-probs
                return_dict_in_generate=True,
                pad_token_id=self.tokenizer.pad_token_id or self.tokenizer.eos_token_id,
            )
            raw = torch.log_softmax(torch.stack(out.logits, dim=1).float(), dim=-1)  # (n, steps, vocab)
        new = out.sequences[:, prompt_ids.shape[1] :]
        eos = self.tokenizer.eos_token_id
        samples = []
        for row in range(n):
            ids, lps = [], []
            for step, tok in enumerate(new[row].tolist()):
                if tok == eos:
                    break
                ids.append(tok)
                lps.append(float(raw[row, step, tok]))
            text = str(self.tokenizer.decode(ids, skip_special_tokens=True))
            cut = _stop_cut(text, stop)
            if cut is not None:  # keep the tokens that make up the text before the stop sequence
                text = text[:cut]
                keep = next((k for k in range(len(ids) + 1) if len(self.tokenizer.decode(ids[:k])) >= cut), len(ids))
                ids, lps = ids[:keep], lps[:keep]
            samples.append(Sample(text, lps, [str(self.tokenizer.decode([t])) for t in ids]))
        return samples

    def chat_prompt(self, messages: Sequence[dict[str, str]]) -> str:
        return str(self.tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True))


def _stop_cut(text: str, stop: Sequence[str]) -> int | None:
    hits = [text.find(s) for s in stop if s and s in text]
    return min(hits) if hits else None


# ---------------------------------------------------------------- OpenAI-compatible completion servers


class OpenAICompatibleLogProbModel(LogProbModel):
    """A completions server that echoes prompt log-probs (vLLM, llama.cpp's server).

    Every echoed row is checked against the same row's top log-probs: llama-cpp-python 0.3.36's
    server was seen echoing prompt log-probs that disagree with its own top rows (and with local
    teacher forcing of the same model); such numbers raise LogProbMismatchError, never a score.
    """

    TOLERANCE = 1e-3

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str = "not-needed",
        timeout: float = 120.0,
        retry: RetryPolicy | None = None,
        *,
        query: dict[str, str] | None = None,
        faults: Faults | None = None,
    ) -> None:
        """``base_url`` without its query string, which comes as ``query`` (the client appends its paths to
        the URL); ``faults``: the provider's adapter, for the retry policy."""
        import openai

        self.name = redact_credentials(f"openai-compatible:{base_url}#{model}")
        self.model = model
        self.retry = retry or RetryPolicy.from_env()
        self.faults = faults
        # the client's own retries are off: the one retry policy (HALLUSCOPE_MAX_ATTEMPTS) applies here too
        self._client = openai.OpenAI(
            base_url=base_url, api_key=api_key, max_retries=0, timeout=timeout, default_query=query or None
        )

    def _complete(self, **kwargs: Any) -> Any:
        def attempt() -> Any:
            resp = self._client.completions.create(model=self.model, **kwargs)
            if not getattr(resp, "choices", None):
                raise BadReplyError("sent a completion without choices")
            return resp

        return call_with_retries(attempt, self.retry, self.name, self.faults)

    def score_many(self, prompt: str, continuations: Sequence[str]) -> list[float]:
        out = []
        for continuation in continuations:
            if not continuation:
                out.append(0.0)
                continue
            resp = self._complete(prompt=prompt + continuation, max_tokens=1, temperature=0.0, echo=True, logprobs=1)
            lp = resp.choices[0].logprobs
            if lp is None or not lp.token_logprobs:
                raise ModelUnavailableError(f"{self.name} returned no echoed prompt log-probs (echo + logprobs)")
            generated = resp.usage.completion_tokens if resp.usage else 1
            rows = list(zip(lp.tokens, lp.token_logprobs, lp.top_logprobs or [None] * len(lp.tokens), strict=False))
            rows = rows[: len(rows) - generated]
            # Servers count text offsets over their own detokenisation (llama.cpp drops special
            # tokens), so the continuation is found from the end: the echoed tokens covering its text.
            total, covered = 0.0, 0
            for tok, value, top in reversed(rows):
                if covered >= len(continuation):
                    break
                if value is None:
                    raise ModelUnavailableError(f"{self.name} echoed no log-prob for token {tok!r}")
                if top and tok in top and abs(top[tok] - value) > self.TOLERANCE:
                    raise LogProbMismatchError(
                        f"{self.name} echoed log-prob {value:.2f} for token {tok!r} but lists it at {top[tok]:.2f} "
                        "in the same row's top log-probs: its prompt log-probs are wrong (seen with "
                        "llama-cpp-python 0.3.36's server); score with local:<model> or a vLLM server instead"
                    )
                total += float(value)
                covered += len(tok)
            out.append(total)
        return out

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
        _check_n(n)
        samples = []
        for i in range(n):
            resp = self._complete(
                prompt=prompt,
                max_tokens=max_tokens,
                temperature=temperature,
                top_p=top_p,
                stop=list(stop) or None,
                seed=None if seed is None else seed + i,
                logprobs=1,
            )
            choice = resp.choices[0]
            lp = choice.logprobs
            values = [float(v) for v in (lp.token_logprobs if lp else []) if v is not None and not math.isnan(v)]
            samples.append(Sample(choice.text, values, list(lp.tokens) if lp else []))
        return samples
