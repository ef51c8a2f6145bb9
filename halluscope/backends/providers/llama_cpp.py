"""Local GGUF models through llama-cpp-python: chat with the GGUF's own template, token log-probs from raw
logits, the model registry's files (`models list`, `models pull`), no key, no network."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import astuple
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from halluscope.backends.logprobs import (
    LogProbModel,
    Sample,
    Sampling,
    common_prefix,
    files_sha256,
    log_softmax,
    stop_cut,
)
from halluscope.backends.providers import ModelSpec, Provider
from halluscope.backends.retry import RetryPolicy
from halluscope.errors import ConfigError

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import BaseMessage


class Local(Provider):
    name = "local"
    in_process = True
    about = "a registry model (`halluscope models list`) or any GGUF file, offline through llama-cpp-python"
    chat_logprobs = True
    empty_reply_is_answer = True  # its engine would give the same again: returned, never cached
    decodes_samples_together = True  # n samples of a prompt: one batch, the prompt evaluated once

    def chat_model(self, spec: ModelSpec, timeout: float) -> BaseChatModel:
        from halluscope.backends.local import LocalChatModel, model_file

        return LocalChatModel(model_path=str(model_file(spec.model)), model_id=spec.key)

    def warm(self, chat: BaseChatModel) -> None:
        from halluscope.backends.local import LocalChatModel, load_llama

        if isinstance(chat, LocalChatModel):  # the context p(Yes) and log-probs read (grounded's and DQ's)
            load_llama(Path(chat.model_path), logits_all=True, n_ctx=chat.n_ctx)

    def sample_together(
        self, chat: BaseChatModel, messages: list[BaseMessage], seeds: list[int | None], params: dict[str, Any]
    ) -> list[BaseMessage] | None:
        from halluscope.backends.local import LocalChatModel

        return chat.sample_together(messages, seeds, **params) if isinstance(chat, LocalChatModel) else None

    def logprob_model(self, spec: ModelSpec, retry: RetryPolicy, timeout: float) -> LogProbModel:
        return LlamaCppLogProbModel(spec.model)

    def models(self) -> list[dict[str, Any]]:
        from halluscope.backends.local import registry_rows

        return registry_rows()


class LlamaCppLogProbModel(LogProbModel):
    """A local GGUF model. One context keeps every position's logits; consecutive calls that share
    a prompt prefix reuse its KV cache (K samples or continuations of one prompt pay for it once)."""

    def __init__(self, name_or_path: str, n_ctx: int | None = None) -> None:
        from halluscope.backends.local import load_llama, local_spec, model_file

        self.name = local_spec(name_or_path)
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

    def draw(self, prompt: str, how: Sampling) -> list[Sample]:
        """Sampling through llama.cpp's sampler; each chosen token's log-prob is read from the raw logit
        row that produced it (llama-cpp-python's completion log-probs sort the whole vocabulary in
        Python for every token: 3.7 instead of ~20 tokens/s on the 1.5B)."""
        n, max_tokens, temperature, top_p, stop, seed = astuple(how)
        import llama_cpp

        from halluscope.backends.local import PLAIN_SAMPLING

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
                    if len(ids) >= max_tokens or (stop and stop_cut(self._text(ids, prompt_ids), stop) is not None):
                        break
                text = self._text(ids, prompt_ids)
                cut = stop_cut(text, stop)
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


PROVIDERS = (Local(),)
