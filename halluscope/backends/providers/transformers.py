"""Any Hugging Face causal-LM directory as a LogProbModel (``transformers:<directory>``): the log-prob
route of a model with no GGUF. Chat goes through local: or a server."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import astuple
from importlib.util import find_spec
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from halluscope.backends.logprobs import (
    WEIGHT_FILES,
    LogProbModel,
    Sample,
    Sampling,
    common_prefix,
    files_sha256,
    stop_cut,
)
from halluscope.backends.providers import ModelSpec, Provider
from halluscope.backends.retry import RetryPolicy
from halluscope.errors import ConfigError, ModelSpecError

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel


class Transformers(Provider):
    name = "transformers"
    in_process = True
    about = "a Hugging Face causal-LM directory, for log-probabilities (transformers:<directory>)"

    def chat_model(self, spec: ModelSpec, timeout: float) -> BaseChatModel:
        raise ModelSpecError(
            f"{spec.key}: transformers: models read log-probabilities (PHR, token-logprob's proxy); "
            "chat with local:<name or path.gguf> or an openai-compatible: server"
        )

    def logprob_model(self, spec: ModelSpec, retry: RetryPolicy, timeout: float) -> LogProbModel:
        return TransformersLogProbModel(spec.model)


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

    def draw(self, prompt: str, how: Sampling) -> list[Sample]:
        n, max_tokens, temperature, top_p, stop, seed = astuple(how)
        torch = self._torch
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
            cut = stop_cut(text, stop)
            if cut is not None:  # keep the tokens that make up the text before the stop sequence
                text = text[:cut]
                keep = next((k for k in range(len(ids) + 1) if len(self.tokenizer.decode(ids[:k])) >= cut), len(ids))
                ids, lps = ids[:keep], lps[:keep]
            samples.append(Sample(text, lps, [str(self.tokenizer.decode([t])) for t in ids]))
        return samples

    def chat_prompt(self, messages: Sequence[dict[str, str]]) -> str:
        return str(self.tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True))


PROVIDERS = (Transformers(),)
