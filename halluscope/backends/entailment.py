"""Entailment: does a premise entail a hypothesis (optionally, as answers to a question)?

``Entailment`` gives labels (semantic entropy's clustering); ``ZeroShot`` gives the probability of
entailment (CLUE's zero-shot classifier). Two backends behind each: an LLM (through the gateway, so
cached and limited) and an NLI classifier (DeBERTa/BART/RoBERTa-MNLI via transformers) for users who
have a checkpoint. The LLM judge of labels asks the semantic-entropy paper's prompt (label
probabilities from the label tokens' log-probs where the provider has them); the LLM zero-shot
scorer asks Yes/No and reads p(Yes). ``bidirectional`` follows the official semantic-entropy code:
strict = both directions entailment; lax = no contradiction either way and not both neutral.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
import unicodedata
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from halluscope.backends.checkpoints import checkpoint_path
from halluscope.backends.fanout import Ask
from halluscope.backends.gateway import CallStats, ChatReply, Gateway, default_gateway
from halluscope.backends.local import default_spec
from halluscope.backends.models import INSTANCE, ModelLike
from halluscope.backends.providers import get as declared_provider
from halluscope.backends.providers.nli import nli_spec
from halluscope.backends.providers.transformers import hf_directory
from halluscope.backends.steps import Step
from halluscope.errors import ConfigError
from halluscope.hub import sha256_of

Label = Literal["entailment", "neutral", "contradiction"]
LABELS: tuple[Label, ...] = ("entailment", "neutral", "contradiction")
TWO_WAY: tuple[Label, ...] = ("entailment", "contradiction")  # an NLI head without neutral (SelfCheckGPT's)
CHECKER_JSON = "checker.json"  # how a checker fitted here was made, and its weights' sha256 (tune.checker)
Mode = Literal["strict", "lax"]
_STEMS: tuple[tuple[Label, str], ...] = (
    ("entailment", "entail"),
    ("neutral", "neutral"),
    ("contradiction", "contradict"),
)


@dataclass(frozen=True)
class Judgement:
    label: Label | None  # None: the judge's answer named no label (kept in raw)
    probs: dict[str, float] | None = None
    raw: str | None = None


def equivalent(forward: Label | None, backward: Label | None, mode: Mode = "strict") -> bool:
    """Semantic equivalence from the two directions' labels (an unparsed label is not entailment)."""
    if mode == "strict":
        return forward == "entailment" and backward == "entailment"
    if mode == "lax":
        pair = (forward, backward)
        return "contradiction" not in pair and pair != ("neutral", "neutral") and None not in pair
    raise ConfigError(f"mode must be 'strict' or 'lax', got {mode!r}")


class Entailment(ABC):
    name: str

    @abstractmethod
    def judge_many(
        self, pairs: Sequence[tuple[str, str]], question: str | None = None, stats: CallStats | None = None
    ) -> list[Judgement]:
        """One judgement per (premise, hypothesis) pair, in order; ``stats`` counts the model use."""

    async def ajudge_many(
        self, pairs: Sequence[tuple[str, str]], question: str | None = None, stats: CallStats | None = None
    ) -> list[Judgement]:
        """``judge_many`` on the event loop: a local judge computes on a thread (an LLM judge awaits its
        provider's async client instead)."""
        return await asyncio.to_thread(self.judge_many, pairs, question, stats)

    def replies_for(self, pairs: int) -> int:
        """The replies ``judge_many`` of this many pairs records: one model call per pair."""
        return pairs

    def judge(
        self, premise: str, hypothesis: str, question: str | None = None, stats: CallStats | None = None
    ) -> Judgement:
        return self.judge_many([(premise, hypothesis)], question, stats)[0]

    def bidirectional(
        self, a: str, b: str, question: str | None = None, mode: Mode = "strict", stats: CallStats | None = None
    ) -> bool:
        forward, backward = self.judge_many([(a, b), (b, a)], question, stats)
        return equivalent(forward.label, backward.label, mode)


def spm_normalized(text: str) -> str:
    """``text`` as a SentencePiece vocabulary built with nmt_nfkc reads it: NFKC ("½" is "1⁄2", a
    full-width "！" is "!"), and a format character (a left-to-right mark, a zero-width space) a space."""
    return "".join(" " if unicodedata.category(c) == "Cf" else c for c in unicodedata.normalize("NFKC", text))


def _label_of_token(token: str) -> Label | None:
    word = token.strip().lower()
    if not word:
        return None
    hits = [label for label in LABELS if label.startswith(word)]
    return hits[0] if len(hits) == 1 else None


def _first_answer_token(logprobs: Sequence[dict[str, Any]] | None) -> dict[str, Any] | None:
    """The first answer token's log-prob entry (leading whitespace tokens are not the answer)."""
    return next((entry for entry in logprobs or [] if entry["token"].strip()), None)


def _top_mass(entry: dict[str, Any], classify: Callable[[str], str | None], names: Sequence[str]) -> dict[str, float]:
    """Probability mass of the entry's top tokens, summed by the name ``classify`` gives each token."""
    mass = dict.fromkeys(names, 0.0)
    for top in entry.get("top_logprobs") or []:
        name = classify(top["token"])
        if name is not None:
            mass[name] += math.exp(top["logprob"])
    return mass


def label_probabilities(logprobs: Sequence[dict[str, Any]] | None) -> dict[str, float] | None:
    """Label probabilities from the first answer token's top log-probs, renormalised over the three
    labels; None when no top token starts a label."""
    entry = _first_answer_token(logprobs)
    if entry is None:
        return None
    mass = _top_mass(entry, _label_of_token, LABELS)
    total = sum(mass.values())
    return {k: v / total for k, v in mass.items()} if total > 0 else None


class LLMEntailment(Entailment):
    """An LLM judge asked whether one text entails another with the method's ``prompt`` (its id in the
    prompt registry: semantic entropy's, ``semantic_entropy.entailment``)."""

    def __init__(
        self,
        model: ModelLike,
        gateway: Gateway | None = None,
        *,
        prompt: str,
        with_probs: bool | None = None,
        top_logprobs: int = 10,
        max_tokens: int | None = 16,
    ) -> None:
        self.gateway = gateway or default_gateway()
        self.model = model
        self.prompt = prompt
        self.name = self.gateway.model(model).key  # a bad spec or missing key fails here, once
        self.with_probs = self.gateway.gives_logprobs(model) if with_probs is None else with_probs
        self.top_logprobs = top_logprobs
        self.max_tokens = max_tokens  # the label is the first word; this only bounds a chatty judge

    def judge_many(
        self, pairs: Sequence[tuple[str, str]], question: str | None = None, stats: CallStats | None = None
    ) -> list[Judgement]:
        return [self._judgement(r) for r in self.gateway.call_all(self._asks(pairs, question), stats)]

    async def ajudge_many(
        self, pairs: Sequence[tuple[str, str]], question: str | None = None, stats: CallStats | None = None
    ) -> list[Judgement]:
        return [self._judgement(r) for r in await self.gateway.acall_all(self._asks(pairs, question), stats)]

    def _asks(self, pairs: Sequence[tuple[str, str]], question: str | None) -> list[Ask]:
        params: dict[str, Any] = {"max_tokens": self.max_tokens}
        if self.with_probs:
            params.update(logprobs=True, top_logprobs=self.top_logprobs)
        return [
            Ask(self.model, self.prompt, {"question": question or "", "text1": a, "text2": b}, params) for a, b in pairs
        ]

    def _judgement(self, reply: ChatReply) -> Judgement:
        probs = label_probabilities(reply.logprobs) if self.with_probs else None
        return Judgement(reply.parsed if reply.ok else None, probs, reply.text)


def fitted_here(path: Path) -> dict[str, Any] | None:
    """A checker fitted by `halluscope checker fit` is loaded only as its checker.json says it was saved:
    every file it was saved with (weights, config and its label map, tokenizer) hashing as recorded, none
    missing; a file changed, swapped, half-copied or gone is refused in one line. Its record (None: not a
    checker fitted here). A checker saved before files were recorded is held to its weights' hash."""
    described = path / CHECKER_JSON
    if not described.is_file():
        return None
    try:
        record = json.loads(described.read_text(encoding="utf-8"))
        expected = dict(record.get("files_sha256") or {"model.safetensors": record["weights_sha256"]})
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(f"{described} is not a checker's description ({exc}): refit the checker") from exc
    for name, digest in sorted(expected.items()):
        file = path / name
        found = sha256_of(file) if file.is_file() else "missing"
        if found != digest:
            raise ConfigError(
                f"the checker in {path} is not what its {CHECKER_JSON} says ({name} sha256 {found[:12]}, "
                f"fitted {str(digest)[:12]}): refit it, or restore its files"
            )
    return dict(record)


def checker_files(path: Path) -> dict[str, str]:
    """The sha256 of every file of a saved checker but its description: what ``fitted_here`` checks."""
    return {f.name: sha256_of(f) for f in sorted(path.iterdir()) if f.is_file() and f.name != CHECKER_JSON}


class NLIEntailment(Entailment):
    """A sequence-classification NLI checkpoint (DeBERTa-, BART- or RoBERTa-MNLI). Label order is
    read from the config's id2label; the question is not used (as in the official code)."""

    def __init__(
        self,
        directory: str | Path,
        device: str | None = None,
        batch_size: int = 16,
        threads: int | None = None,
        name: str | None = None,
    ) -> None:
        path = hf_directory(directory, threads, "the NLI backend")
        record = fitted_here(path)
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self._torch = torch
        self.name = name or f"nli:{path}"
        self.device = device or "cpu"
        self.batch_size = batch_size
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(path)
            self.model = AutoModelForSequenceClassification.from_pretrained(path).to(self.device).eval()
        except (OSError, ValueError) as exc:  # a config.json that is not JSON, weights that are not weights
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ConfigError(
                f"the NLI checkpoint in {path} cannot be loaded ({first[:200]}): its files are damaged or not a "
                "checkpoint; a pulled one is repaired by `halluscope models pull NAME --force`"
            ) from exc
        self.index = self._label_index(self.model.config.id2label)
        self._check_loaded(path, record)
        self.normalize = (path / "spm.model").is_file() and not self._tokenizer_normalizes()
        self._lock = threading.Lock()

    def _check_loaded(self, path: Path, record: dict[str, Any] | None) -> None:
        """A checker fitted here is the model it claims to be: a tokenizer whose vocabulary is the model's (a
        folder without its tokenizer files gives transformers a few tokens, every word [UNK]), and the label
        map it was fitted with (a reversed one would flip every verdict)."""
        if record is None:  # another's checkpoint: its files are its maker's
            return
        vocab, expected = len(self.tokenizer), getattr(self.model.config, "vocab_size", None)
        if isinstance(expected, int) and vocab < expected // 2:
            raise ConfigError(
                f"the NLI checkpoint in {path} has a tokenizer of {vocab:,} tokens for a model of {expected:,}: its "
                "tokenizer files are missing or wrong; restore them, or refit the checker"
            )
        fitted = record.get("id2label")
        shown = {str(k): v for k, v in self.model.config.id2label.items()}
        if fitted is not None and shown != {str(k): v for k, v in dict(fitted).items()}:
            raise ConfigError(
                f"the checker in {path} maps its labels as {shown}, not as it was fitted ({fitted}): refit it, or "
                "restore its config.json"
            )

    def _tokenizer_normalizes(self) -> bool:
        """Whether the tokenizer applies the NFKC normalization a SentencePiece vocabulary (DeBERTa-v3's)
        was built with: transformers 4 does, and 5 reads such a vocabulary without it, so "½" or a
        left-to-right mark becomes [UNK] where the checkpoint was trained on "1⁄2" or a space. Asked of the
        tokenizer itself, so a transformers that does normalize is left alone."""
        return bool(self.tokenizer("½")["input_ids"] == self.tokenizer(spm_normalized("½"))["input_ids"])

    def _text(self, text: str) -> str:
        return spm_normalized(text) if self.normalize else text

    @staticmethod
    def _label_index(id2label: dict[int, str]) -> dict[Label, int]:
        """Each label's logit position: a 3-way model's (entailment, neutral, contradiction) by name, or a
        2-way model whose neutral head was removed (SelfCheckGPT's DeBERTa): by name, or, where its config
        names them only LABEL_0 / LABEL_1, SelfCheckGPT's order (0 entailment, 1 contradiction)."""
        index: dict[Label, int] = {}
        for i, name in id2label.items():
            low = name.lower()
            for label, stem in _STEMS:
                if low.startswith(stem):
                    index[label] = int(i)
        if set(index) == set(LABELS) or (len(id2label) == 2 and set(index) == set(TWO_WAY)):
            return index
        if len(id2label) == 2 and {name.upper() for name in id2label.values()} == {"LABEL_0", "LABEL_1"}:
            return {"entailment": 0, "contradiction": 1}
        raise ConfigError(
            f"not an NLI model: id2label {id2label} names neither entailment/neutral/contradiction nor the "
            "two-way entailment/contradiction of SelfCheckGPT's DeBERTa"
        )

    def replies_for(self, pairs: int) -> int:
        """No LLM call: its batched forward passes are counted apart (``CallStats.record_checker``), and a
        ``max_calls`` budget, which is about LLM calls, is not spent on them."""
        return 0

    def logits(self, pairs: Sequence[tuple[str, str]], stats: CallStats | None = None) -> list[list[float]]:
        """Raw 3-way logits per pair in the model's own label order (CLUE's zero-shot scorer uses them);
        each batch is one forward pass counted on ``stats``."""
        torch = self._torch
        out: list[list[float]] = []
        with self._lock, torch.inference_mode():
            for start in range(0, len(pairs), self.batch_size):
                began = time.perf_counter()
                batch = pairs[start : start + self.batch_size]
                enc = self.tokenizer(
                    [self._text(p) for p, _ in batch],
                    [self._text(h) for _, h in batch],
                    padding=True,
                    truncation=True,
                    return_tensors="pt",
                ).to(self.device)
                out.extend(self.model(**enc).logits.float().tolist())
                if stats is not None:
                    stats.record_checker(self.name, time.perf_counter() - began)
        return out

    def judge_many(
        self, pairs: Sequence[tuple[str, str]], question: str | None = None, stats: CallStats | None = None
    ) -> list[Judgement]:
        judgements = []
        for row in self.logits(pairs, stats):
            peak = max(row)
            exps = [math.exp(x - peak) for x in row]
            probs: dict[str, float] = {label: exps[i] / sum(exps) for label, i in self.index.items()}
            best: Label = max(self.index, key=lambda label: probs[label])
            judgements.append(Judgement(best, probs))
        return judgements

    def entail_probs(self, pairs: Sequence[tuple[str, str]], stats: CallStats | None = None) -> list[float]:
        """The zero-shot classifier's probability (bart-large-mnli's convention, CLUE Appendix A):
        softmax over the entailment and contradiction logits only, neutral ignored."""
        return [entailment for entailment, _ in self.two_way(pairs, stats)]

    def two_way(self, pairs: Sequence[tuple[str, str]], stats: CallStats | None = None) -> list[tuple[float, float]]:
        """(P(entailment), P(contradiction)) per pair, renormalised over those two (neutral ignored):
        P(c) / (P(e) + P(c)) is SelfCheckGPT's NLI score of one (sentence, sample) pair."""
        out = []
        for row in self.logits(pairs, stats):
            ent, con = row[self.index["entailment"]], row[self.index["contradiction"]]
            peak = max(ent, con)
            e, c = math.exp(ent - peak), math.exp(con - peak)
            out.append((e / (e + c), c / (e + c)))
        return out


def _yes_no_of_token(token: str) -> str | None:
    word = token.strip().lower()
    return word if word in ("yes", "no") else None


def yes_probability(logprobs: Sequence[dict[str, Any]] | None) -> float | None:
    """p(Yes) / (p(Yes) + p(No)) from the first answer token's top log-probs; None when neither is there.
    Without top log-probs, the chosen token alone: p for Yes, 1 - p for No."""
    entry = _first_answer_token(logprobs)
    if entry is None:
        return None
    if not entry.get("top_logprobs"):
        word, p = entry["token"].strip().lower(), math.exp(entry["logprob"])
        return p if word == "yes" else 1.0 - p if word == "no" else None
    mass = _top_mass(entry, _yes_no_of_token, ("yes", "no"))
    total = mass["yes"] + mass["no"]
    return mass["yes"] / total if total > 0 else None


class ZeroShot(ABC):
    """f(premise, hypothesis): the probability that the premise entails the hypothesis (CLUE's scorer)."""

    name: str

    @abstractmethod
    def scores(self, pairs: Sequence[tuple[str, str]], stats: CallStats | None = None) -> list[float | None]:
        """One probability per pair, in order; None where the scorer's answer gave none (recorded by callers)."""

    async def ascores(self, pairs: Sequence[tuple[str, str]], stats: CallStats | None = None) -> list[float | None]:
        """``scores`` on the event loop: a local scorer computes on a thread (an LLM scorer awaits its
        provider's async client instead)."""
        return await asyncio.to_thread(self.scores, pairs, stats)

    def replies_for(self, pairs: int) -> int:
        """The replies ``scores`` of this many pairs records: one model call per pair."""
        return pairs


class NLIZeroShot(ZeroShot):
    """An NLI checkpoint as the zero-shot classifier (the paper's bart-large-mnli), batched."""

    def __init__(self, nli: NLIEntailment) -> None:
        self.nli = nli
        self.name = nli.name

    def scores(self, pairs: Sequence[tuple[str, str]], stats: CallStats | None = None) -> list[float | None]:
        return list(self.nli.entail_probs(pairs, stats))

    def replies_for(self, pairs: int) -> int:
        return self.nli.replies_for(pairs)


class LLMZeroShot(ZeroShot):
    """An LLM asked Yes/No with the method's ``prompt`` (CLUE's ``clue.zero_shot``) through the gateway, so
    every pair is cached; the probability comes from the Yes/No log-probs, so the model must give them
    (not Anthropic)."""

    def __init__(self, model: ModelLike, gateway: Gateway | None = None, *, prompt: str) -> None:
        self.gateway = gateway or default_gateway()
        self.model = model
        self.prompt = prompt
        resolved = self.gateway.model(model)
        self.name = resolved.key
        if not resolved.adapter.chat_logprobs and resolved.adapter is not INSTANCE:  # fail before a graph runs
            raise ConfigError(
                f"{self.name} gives no log-probabilities, which CLUE's LLM scorer reads p(Yes) from: "
                "use a local, openai or openai-compatible judge, or nli:PATH"
            )

    def scores(self, pairs: Sequence[tuple[str, str]], stats: CallStats | None = None) -> list[float | None]:
        return [yes_probability(r.logprobs) for r in self.gateway.call_all(self._asks(pairs), stats)]

    async def ascores(self, pairs: Sequence[tuple[str, str]], stats: CallStats | None = None) -> list[float | None]:
        return [yes_probability(r.logprobs) for r in await self.gateway.acall_all(self._asks(pairs), stats)]

    def _asks(self, pairs: Sequence[tuple[str, str]]) -> list[Ask]:
        return [Ask(self.model, self.prompt, {"premise": premise, "hypothesis": h}) for premise, h in pairs]


_checkpoints: dict[str, NLIEntailment] = {}
_checkpoints_lock = threading.Lock()


def nli_checkpoint(path: str | Path) -> NLIEntailment:
    """An NLI checkpoint (a pulled one's name, or a directory), loaded once per process: a detector
    prepares its judge on every detect call, and a classifier reloaded per call would cost its load (and
    a copy of its weights) every time."""
    key = str(path)  # as given: its name (nli:NAME or nli:PATH) is what results and calibrations record
    with _checkpoints_lock:
        if key not in _checkpoints:
            _checkpoints[key] = NLIEntailment(checkpoint_path(key), name=nli_spec(key))
        return _checkpoints[key]


def judge_target(judge: str | None, kind: str) -> tuple[bool, str]:
    """The one reading of a judge spec: (is it an NLI checkpoint, its path or model spec), as its
    provider's adapter declares it (``entails``: it judges pairs itself); None names the strongest
    installed local model."""
    if judge is None:
        return False, default_spec()
    if not isinstance(judge, str):
        raise ConfigError(f"a judge is a model spec, an NLI checkpoint's spec or {kind}, got {type(judge).__name__}")
    prefix, _, rest = judge.strip().partition(":")
    declared = declared_provider(prefix)
    if declared is not None and declared.entails:
        return True, rest
    return False, judge


def entailment_judge(judge: Entailment | str | None, gateway: Gateway | None = None, *, prompt: str) -> Entailment:
    """The entailment judge of semantic entropy from what a user passes: an Entailment, ``nli:PATH``
    (an NLI checkpoint), a model spec (an LLM judge), or None (the strongest installed local model)."""
    if isinstance(judge, Entailment):
        return judge
    nli, target = judge_target(judge, "an Entailment")
    return nli_checkpoint(target) if nli else LLMEntailment(target, gateway=gateway, prompt=prompt)


def zero_shot_judge(judge: ZeroShot | str | None, gateway: Gateway | None = None, *, prompt: str) -> ZeroShot:
    """CLUE's zero-shot judge from what a user passes: a ZeroShot, ``nli:PATH`` (an NLI checkpoint), a
    model spec (an LLM asked Yes/No), or None (the strongest installed local model)."""
    if isinstance(judge, ZeroShot):
        return judge
    nli, target = judge_target(judge, "a ZeroShot scorer")
    return NLIZeroShot(nli_checkpoint(target)) if nli else LLMZeroShot(target, gateway=gateway, prompt=prompt)


@dataclass(frozen=True)
class Judged(Step):
    """An entailment judge's verdicts on (premise, hypothesis) pairs, in order."""

    judge: Entailment
    pairs: list[tuple[str, str]]
    question: str | None = None

    def run(self, stats: CallStats | None) -> list[Judgement]:
        return self.judge.judge_many(self.pairs, self.question, stats)

    async def arun(self, stats: CallStats | None) -> list[Judgement]:
        return await self.judge.ajudge_many(self.pairs, self.question, stats)


@dataclass(frozen=True)
class Scored(Step):
    """A zero-shot scorer's probabilities for (premise, hypothesis) pairs, in order."""

    scorer: ZeroShot
    pairs: list[tuple[str, str]]

    def run(self, stats: CallStats | None) -> list[float | None]:
        return self.scorer.scores(self.pairs, stats)

    async def arun(self, stats: CallStats | None) -> list[float | None]:
        return await self.scorer.ascores(self.pairs, stats)
