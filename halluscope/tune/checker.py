"""A fast grounded checker fitted on this machine (`halluscope checker fit`): a small cross-encoder
(all-MiniLM-L6-v2 by default, with a new two-way head) fine-tuned on (context, sentence, supported?)
pairs on the CPU, so that an answer is checked in milliseconds instead of an LLM judge's seconds.

The pairs come from datasets nothing here tests on (binary MNLI and FEVER-NLI, ANLI, FactCG's synthetic
pairs, WiCE's dev claims: ``bench/nli_pairs.py``), RTE's training split, QNLI's fit part (its questions
and sentences apart from the test part that `bench grounded --dataset qnli` reads), WikiBio passages
(each sentence with the chunk of its person's Wikipedia text that grounded would find nearest, the
chunks cut as grounded cuts them) or a labelled file in `bench mine`'s format (context and a label per
sentence); each part with its own range and cap (``DataPart``), and its licence kept in checker.json.

The fit is seeded (the head's initialisation, each epoch's order and its dropout), its thread count
set; its batches group pairs of like length (a batch pads to its longest pair); a dev part of the
contexts is held out and the epoch that ranks it best is the one saved; and it resumes from its last
finished epoch: the weights and AdamW's moments are kept after each epoch as safetensors.

It is saved as safetensors, config and tokenizer files beside ``checker.json`` (how it was fitted and the
weights' sha256, which the NLI backend checks when it loads), never a pickle, and it loads as
``nli:DIR`` wherever an NLI judge does: ``grounded --model nli:DIR`` makes no LLM call.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import resource
import shutil
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from halluscope.backends.embeddings import default_embedder, default_model_dir
from halluscope.backends.entailment import CHECKER_JSON, checker_files
from halluscope.backends.gateway import Gateway
from halluscope.backends.stats import CallStats
from halluscope.bench import nli_pairs
from halluscope.bench.grounded import UNSUPPORTED, load_qnli_pairs, load_rte, load_wice
from halluscope.bench.sources import SOURCES
from halluscope.bench.wikibio import load_wikibio
from halluscope.errors import ConfigError
from halluscope.hub import sha256_of
from halluscope.labelled import jsonl_rows, load_labelled
from halluscope.metrics import auc_roc
from halluscope.readers import read_file
from halluscope.runtime import registry
from halluscope.runtime.contract import start
from halluscope.text import chunk_context
from halluscope.text import sentences as split_sentences
from halluscope.version import __version__

DATASETS = ("mnli", "fever", "anli", "factcg", "wice", "rte", "qnli", "wikibio")  # or a labelled file
FOLDERS = {  # the data folder each is read from, whose licence (bench/sources.py) a checker fitted on it inherits
    "mnli": "nli_binary",
    "fever": "nli_binary",
    "anli": "anli",
    "factcg": "factcg",
    "wice": "wice",
    "rte": "rte",
    "qnli": "qnli",
    "wikibio": "wikibio_gpt3_hallucination",
}
WIKIBIO_FIT = range(120)  # the probes' fit split of WikiBio's passages, the default a checker fits on
ID2LABEL = {0: "entailment", 1: "contradiction"}  # the two-way head the NLI backend reads: p(entailment) supports
RESUME_DIR = ".fit"  # the last finished epoch's weights and optimizer moments, until the fit is done
MAX_CELL = 200_000  # characters of a labelled file's context or text (a checker reads a 512-token window of it)
CHANCE_LOSS = math.log(2)  # a two-way head's loss when it has learned nothing (p = 0.5 for every pair)


@dataclass(frozen=True)
class Pair:
    """One training example: the context, the sentence checked against it, whether it supports it, and
    (a teacher's pair) the teacher's probability that it does, which the fit learns instead."""

    context: str
    claim: str
    supported: bool
    soft: float | None = None
    source: str = ""  # the --data part it came from (not in the fingerprint: what is fitted is the text)

    def target(self) -> float:
        """The probability of support the fit learns: the teacher's, else the label's 1 or 0."""
        return self.soft if self.soft is not None else float(self.supported)


@dataclass(frozen=True)
class FitSettings:
    """How a checker is fitted (all of it in checker.json; a resumed fit must have the same)."""

    epochs: int = 3
    seed: int = 0
    batch_size: int = 16
    learning_rate: float = 5e-5
    max_length: int = 512
    warmup: float = 0.1
    weight_decay: float = 0.01
    dev: float = 0.05  # the share of contexts held out to choose the epoch on (none below MIN_DEV pairs)
    group_by_length: bool = True  # batches of pairs of like length: less padding, the same pairs an epoch

    def __post_init__(self) -> None:
        if self.epochs < 1 or self.batch_size < 1 or self.max_length < 16:
            raise ConfigError("a checker fit needs epochs >= 1, batch size >= 1 and max length >= 16")
        if not 0 < self.learning_rate < 1 or not 0 <= self.warmup < 1:
            raise ConfigError("a checker fit needs 0 < learning rate < 1 and 0 <= warmup < 1")
        if not 0 <= self.dev < 0.5:
            raise ConfigError(f"dev is the share of pairs held out, in [0, 0.5), got {self.dev}", settings=("dev",))


MIN_DEV = 50  # dev pairs (of both labels) below which the last epoch is kept, none chosen
POOL = 50  # batches' worth of pairs sorted by length together: batches stay shuffled, each of like lengths


@dataclass(frozen=True)
class DataPart:
    """One source of a fit's pairs as ``--data`` names it: a dataset of ``DATASETS`` or a labelled file,
    the items of it (``wikibio:0-119``) and at most ``cap`` of them (``mnli:max=20000``: a seeded sample,
    kept in file order)."""

    name: str
    items: range | None = None
    cap: int | None = None

    def __post_init__(self) -> None:
        if self.name not in DATASETS and not self.name.endswith((".csv", ".jsonl", ".json")):
            raise ConfigError(
                f"data takes {', '.join(DATASETS)} or a labelled .csv/.jsonl file, got {self.name!r}",
                settings=("data",),
            )
        if self.cap is not None and self.cap < 1:
            raise ConfigError(f"{self.name}: max= keeps at least 1 pair, got {self.cap}", settings=("data",))


def qnli_pairs(data_dir: str | Path | None, part: str) -> list[Pair]:
    """QNLI's pairs of one part (``bench.grounded.load_qnli_pairs``: the fit part is never tested on)."""
    return [Pair(p.premise, p.hypothesis, p.label not in UNSUPPORTED) for p in load_qnli_pairs(data_dir, part=part)]


def nearest_chunk_pairs(rows: Sequence[tuple[list[str], Sequence[str], Sequence[bool]]]) -> list[Pair]:
    """Each sentence with the chunk of its documents nearest to it (MiniLM, as grounded's top_k finds
    them), labelled supported or not: an unsupported sentence's nearest chunk is its hardest negative."""
    embedder = default_embedder()
    pairs = []
    for documents, sentences, supported in rows:
        chunks = chunk_context(documents)
        nearest = embedder.similarity(list(sentences), chunks).argmax(axis=1)
        pairs += [Pair(chunks[c], s, ok) for s, c, ok in zip(sentences, nearest, supported, strict=True)]
    return pairs


def unlabelled_rows(path: str) -> list[tuple[list[str], list[str], str | None]]:
    """A JSON Lines file of answers with their documents, labels not needed: (documents, sentences,
    question) per row, the sentences given or split from its text."""
    rows = []
    for number, row in jsonl_rows(path, read_file(path, "unlabelled")):
        context = row.get("context")
        found = (row.get("sentences") or split_sentences(str(row.get("text") or ""))) if context else []
        if not context or not found:
            raise ConfigError(
                f"{path}, line {number}: a teacher labels an answer ('text' or 'sentences') and its 'context'"
            )
        documents = [context] if isinstance(context, str) else [str(c) for c in context]
        rows.append((documents, [str(s) for s in found], row.get("question")))
    if not rows:
        raise ConfigError(f"{path}: no answer to label")
    return rows


def taught_pairs(
    path: str,
    teacher: Any,
    gateway: Gateway,
    progress: Callable[[Iterable[Any]], Iterable[Any]] = lambda x: x,
    stats: CallStats | None = None,
) -> list[Pair]:
    """The unlabelled answers' sentences, each with its nearest chunk, labelled by the teacher's support:
    ``grounded`` with the teacher as judge and ``top_k=1`` (it finds each sentence's nearest chunk and
    asks p(Yes) of it, a whole answer's checks together), through the gateway, so cached, and an
    interrupted labelling resumes from the cache."""
    ctx = start(gateway, stats if stats is not None else CallStats())
    grounded = registry.get("grounded")  # the method through the registry, as every door reaches it
    check = grounded.scorer(grounded.options(model=teacher, top_k=1), ctx)
    pairs = []
    for documents, sentences, question in progress(unlabelled_rows(path)):
        for unit in check(grounded.inputs(sentences=sentences, context=documents, question=question)).units:
            assert unit.score is not None  # grounded scores every unit (an unreadable reply: support 0.5)
            support = 1.0 - float(unit.score)
            pairs.append(Pair(unit.evidence["best_chunk_text"], unit.text, support >= 0.5, soft=support))
    return pairs


def wikibio_pairs(data_dir: str | Path | None, items: range | None) -> list[Pair]:
    """WikiBio's sentences (accurate: supported) against their person's Wikipedia text."""
    passages = load_wikibio(data_dir)
    chosen = [p for p in passages if items is None or p.index in items]
    return nearest_chunk_pairs([([p.wiki_text], p.sentences, [x == "accurate" for x in p.labels]) for p in chosen])


def labelled_pairs(path: str, items: range | None) -> list[Pair]:
    """A labelled file's sentences (label 0: supported) against its context column, as `choose` reads the
    file: a label per sentence, or one ``label`` for an answer of one sentence (an answer's label does not
    say which of several sentences is unsupported). A cell over ``MAX_CELL`` characters is refused."""
    data = load_labelled(path)
    rows = []
    for number, row in enumerate(data.rows):
        if items is not None and number not in items:
            continue
        context = row.inputs.get("context")
        if context is None:
            raise ConfigError(f"{path}, answer {row.id}: a checker fits on a context (the documents) and labels")
        documents = [context] if isinstance(context, str) else [str(c) for c in context]
        for name, text in [("context", d) for d in documents] + [("text", str(row.inputs.get("text") or ""))]:
            if len(text) > MAX_CELL:
                raise ConfigError(
                    f"{path}, answer {row.id}: its {name} holds {len(text):,} characters, over the {MAX_CELL:,} a "
                    "checker's pair is read from: split it into documents of their own"
                )
        units, labels = row.units, row.labels
        if labels is None:
            sentences = split_sentences(str(row.inputs.get("text") or "")) if row.label is not None else []
            if len(sentences) != 1:
                raise ConfigError(
                    f"{path}, answer {row.id}: a checker fits on labelled sentences; an answer's one 'label' labels "
                    f"its sentence only where it has one (this has {len(sentences)}): give 'labels', one per sentence"
                )
            units, labels = sentences, (row.label,)
        rows.append((documents, units, [label == 0 for label in labels]))
    return nearest_chunk_pairs(rows)


def _read(part: DataPart, data_dir: str | Path | None) -> list[Pair]:
    """A part's pairs before its cap: its range of the dataset (WikiBio: passages, else pairs in order)."""
    items, name = part.items, part.name
    if name == "wikibio":
        return wikibio_pairs(data_dir, items if items is not None else WIKIBIO_FIT)
    if name.endswith((".csv", ".jsonl", ".json")):
        return labelled_pairs(name, items)
    if name == "qnli":
        read = qnli_pairs(data_dir, "fit")
    else:
        loaded = {
            "rte": lambda: load_rte(data_dir, split="train"),
            "mnli": lambda: nli_pairs.load_nli_binary("mnli", data_dir),
            "fever": lambda: nli_pairs.load_nli_binary("fever", data_dir),
            "anli": lambda: nli_pairs.load_anli(data_dir),
            "factcg": lambda: nli_pairs.load_factcg(data_dir),
            "wice": lambda: load_wice(data_dir, split="dev"),
        }[name]()
        read = [Pair(p.premise, p.hypothesis, p.label not in UNSUPPORTED) for p in loaded]
    return [p for i, p in enumerate(read) if items is None or i in items]


def part_pairs(part: DataPart, data_dir: str | Path | None = None) -> list[Pair]:
    """One part's pairs, each marked with its source; ``cap`` keeps a seeded sample of them in file order."""
    pairs = _read(part, data_dir)
    if part.cap is not None and part.cap < len(pairs):
        kept = np.sort(np.random.default_rng(0).choice(len(pairs), size=part.cap, replace=False))
        pairs = [pairs[i] for i in kept]
    return [Pair(p.context, p.claim, p.supported, p.soft, source=part.name) for p in pairs]


def training_pairs(
    data: str | Sequence[DataPart], items: range | None = None, data_dir: str | Path | None = None
) -> list[Pair]:
    """The pairs a checker fits on: each part's in turn. ``data`` is a list of parts, or names
    comma-separated (``items`` then applies to each): RTE's training split, QNLI's fit part, WikiBio
    passages (0-119 by default), binary MNLI and FEVER-NLI, ANLI, FactCG, WiCE's dev claims, or a
    labelled file's rows."""
    parts = [DataPart(name.strip(), items) for name in data.split(",")] if isinstance(data, str) else list(data)
    return [pair for part in parts for pair in part_pairs(part, data_dir)]


def sources_of(pairs: Sequence[Pair]) -> dict[str, dict[str, Any]]:
    """What each source gave, as checker.json records it: its pairs, how many are supported (the class
    balance) and the licence they carry (a checker inherits each: ANLI's is non-commercial)."""
    found: dict[str, dict[str, Any]] = {}
    for p in pairs:
        name = p.source or ("a teacher's labels" if p.soft is not None else "given")
        row = found.setdefault(name, {"pairs": 0, "supported": 0, "licence": _licence(p.source)})
        row["pairs"] += 1
        row["supported"] += p.supported
    return found


def _licence(source: str) -> str:
    folder = FOLDERS.get(source)
    return SOURCES[folder].licence if folder else "its owner's (a labelled file, or pairs given in Python)"


def dev_split(pairs: Sequence[Pair], share: float) -> tuple[list[Pair], list[Pair]]:
    """The pairs fitted on and the dev part the epoch is chosen on: a context's pairs go to one side, by
    its hash (about ``share`` of the contexts held out). Fewer than ``MIN_DEV`` dev pairs, or one label
    only, and nothing is held out."""
    if share <= 0:
        return list(pairs), []
    held = [int(hashlib.sha256(p.context.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF < share for p in pairs]
    dev = [p for p, h in zip(pairs, held, strict=True) if h]
    if len(dev) < MIN_DEV or len({p.supported for p in dev}) < 2:
        return list(pairs), []
    return [p for p, h in zip(pairs, held, strict=True) if not h], dev


def fingerprint(pairs: Sequence[Pair]) -> str:
    """The pairs' sha256: a resumed fit must read the same data."""
    digest = hashlib.sha256()
    for p in pairs:
        digest.update(json.dumps([p.context, p.claim, p.supported, *([p.soft] if p.soft is not None else [])]).encode())
    return digest.hexdigest()


class Fit:
    """One fit at work: the model and tokenizer, the optimizer, where it stands (epochs done)."""

    def __init__(self, pairs: Sequence[Pair], base: Path, settings: FitSettings, out: Path) -> None:
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()  # "newly initialized: classifier": the head is new on purpose
        self.torch, self.pairs, self.settings, self.out, self.base = torch, list(pairs), settings, out, base
        torch.manual_seed(settings.seed)
        self.tokenizer = AutoTokenizer.from_pretrained(base)
        self.model = AutoModelForSequenceClassification.from_pretrained(
            base, num_labels=2, id2label=ID2LABEL, label2id={v: k for k, v in ID2LABEL.items()}
        )
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=settings.learning_rate, weight_decay=settings.weight_decay
        )
        self.fitted, self.dev = dev_split(self.pairs, settings.dev)
        self.lengths = self.token_lengths(self.fitted)
        self.steps_per_epoch = math.ceil(len(self.fitted) / settings.batch_size)
        self.done = 0  # epochs finished
        self.losses: list[float] = []  # each epoch's mean loss
        self.dev_auc: list[float | None] = []  # each epoch's AUC-ROC on the dev part (x100)
        self.seconds = 0.0  # the finished epochs' time, over every process that fitted them

    def token_lengths(self, pairs: Sequence[Pair]) -> list[int]:
        """Each pair's tokens as the fit reads it (truncated to ``max_length``): what its batch pads to."""
        found = self.tokenizer(
            [p.context for p in pairs], [p.claim for p in pairs], truncation=True, max_length=self.settings.max_length
        )
        return [len(ids) for ids in found["input_ids"]]

    def batches(self, epoch: int) -> list[list[int]]:
        """This epoch's batches of fitted pairs, seeded: a shuffled order, and (``group_by_length``) each
        run of ``POOL`` batches sorted by length before it is cut, the batches then shuffled again, so a
        batch pads to a length near its pairs' own while every pair is still seen once an epoch."""
        rng = np.random.default_rng(self.settings.seed * 1000 + epoch)
        order = [int(i) for i in rng.permutation(len(self.fitted))]
        size = self.settings.batch_size
        if not self.settings.group_by_length:
            return [order[b : b + size] for b in range(0, len(order), size)]
        cut: list[list[int]] = []
        for first in range(0, len(order), size * POOL):
            pool = sorted(order[first : first + size * POOL], key=lambda i: self.lengths[i])
            cut += [pool[b : b + size] for b in range(0, len(pool), size)]
        return [cut[int(b)] for b in rng.permutation(len(cut))]

    def learning_rate(self, step: int) -> float:
        """Linear warm-up over the first ``warmup`` of the steps, then linear decay to 0."""
        total = self.steps_per_epoch * self.settings.epochs
        warm = max(1, int(total * self.settings.warmup))
        if step < warm:
            return self.settings.learning_rate * (step + 1) / warm
        return self.settings.learning_rate * max(0.0, (total - step) / max(1, total - warm))

    def batch(self, chosen: Sequence[Pair]) -> dict[str, Any]:
        return dict(
            self.tokenizer(
                [p.context for p in chosen],
                [p.claim for p in chosen],
                truncation=True,
                max_length=self.settings.max_length,
                padding=True,
                return_tensors="pt",
            )
        )

    def epoch(self, report: Callable[[str], None]) -> None:
        """One pass over the fitted pairs in this epoch's seeded batches (dropout seeded by the epoch too),
        then the dev part scored; the report says where it stands and about how long is left."""
        torch, settings, e = self.torch, self.settings, self.done
        torch.manual_seed(settings.seed * 1000 + e)
        self.model.train()
        total, started = 0.0, time.perf_counter()
        batches = self.batches(e)
        for b, indices in enumerate(batches):
            chosen = [self.fitted[i] for i in indices]
            if any(p.soft is not None for p in chosen):  # a teacher's probabilities, learned as they are
                targets = torch.tensor([[p.target(), 1.0 - p.target()] for p in chosen])
            else:
                targets = torch.tensor([0 if p.supported else 1 for p in chosen])
            for group in self.optimizer.param_groups:
                group["lr"] = self.learning_rate(e * self.steps_per_epoch + b)
            loss = torch.nn.functional.cross_entropy(self.model(**self.batch(chosen)).logits, targets)
            self.optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            self.optimizer.step()
            total += loss.item()
            if (b + 1) % 20 == 0 or b + 1 == len(batches):
                pace = (time.perf_counter() - started) / (b + 1)
                left = pace * (len(batches) - b - 1 + (settings.epochs - e - 1) * self.steps_per_epoch)
                report(
                    f"epoch {e + 1}/{settings.epochs}: {b + 1}/{len(batches)} batches, "
                    f"loss {total / (b + 1):.4f}, {pace:.2f} s a batch, about {left / 60:.0f} min left"
                )
        self.losses.append(total / len(batches))
        self.dev_auc.append(self.dev_score())
        if self.dev_auc[-1] is not None:
            report(f"epoch {e + 1}/{settings.epochs}: dev AUC-ROC {self.dev_auc[-1]:.1f} on {len(self.dev):,} pairs")
        self.seconds += time.perf_counter() - started
        self.done += 1

    def dev_score(self) -> float | None:
        """The dev part's AUC-ROC (x100) of p(not supported), read as the NLI backend reads it; None
        without a dev part."""
        if not self.dev:
            return None
        torch = self.torch
        self.model.eval()
        unsupported = []
        order = sorted(range(len(self.dev)), key=lambda i: len(self.dev[i].context) + len(self.dev[i].claim))
        with torch.no_grad():
            for b in range(0, len(order), self.settings.batch_size * 2):
                chosen = [self.dev[i] for i in order[b : b + self.settings.batch_size * 2]]
                unsupported += torch.softmax(self.model(**self.batch(chosen)).logits, dim=-1)[:, 1].tolist()
        self.model.train()
        scores = np.empty(len(self.dev))
        scores[order] = unsupported
        return auc_roc(np.array([not p.supported for p in self.dev]), scores)  # x100, as metrics gives it

    def best_epoch(self) -> int:
        """The epoch (1-based) whose dev AUC-ROC is highest, the first of ties; the last without a dev part."""
        scored = [(auc, -e) for e, auc in enumerate(self.dev_auc) if auc is not None]
        return -max(scored)[1] + 1 if scored else self.done

    # -- resume: the last finished epoch, as safetensors and JSON

    def _state_json(self) -> dict[str, Any]:
        return {"settings": asdict(self.settings), "data": fingerprint(self.pairs), "base": str(self.base)}

    def keep(self) -> None:
        """The finished epochs' weights and AdamW's moments, to resume from."""
        from safetensors.torch import save_file

        where = self.out / RESUME_DIR
        where.mkdir(parents=True, exist_ok=True)
        save_file({k: v.contiguous() for k, v in self.model.state_dict().items()}, str(where / "weights.safetensors"))
        moments = {}
        for name, param in self.model.named_parameters():
            state = self.optimizer.state.get(param, {})
            for key in ("exp_avg", "exp_avg_sq", "step"):
                if key in state:
                    moments[f"{name}::{key}"] = self.torch.as_tensor(state[key]).contiguous()
        save_file(moments, str(where / "adam.safetensors"))
        if self.dev_auc and self.best_epoch() == self.done:  # the best so far: the weights the checker may keep
            shutil.copyfile(where / "weights.safetensors", where / "best.safetensors")
        state = {**self._state_json(), "epochs_done": self.done, "losses": self.losses, "seconds": self.seconds}
        state["dev_auc"] = self.dev_auc
        (where / "state.json").write_text(json.dumps(state, indent=2), encoding="utf-8")

    def resume(self, report: Callable[[str], None]) -> bool:
        """Back to the last finished epoch of an interrupted fit of the same data and settings. A resume
        state that cannot be read (a fit killed while it wrote) is said and removed: the fit starts afresh."""
        where = self.out / RESUME_DIR
        if not (where / "state.json").is_file():
            return False
        try:
            return self._resumed(where)
        except (OSError, ValueError, KeyError, TypeError, RuntimeError) as exc:
            if isinstance(exc, ConfigError):
                raise
            report(f"the interrupted fit in {where} cannot be read ({type(exc).__name__}): starting afresh")
            shutil.rmtree(where, ignore_errors=True)
            return False

    def _resumed(self, where: Path) -> bool:
        from safetensors.torch import load_file

        state = json.loads((where / "state.json").read_text(encoding="utf-8"))
        if not isinstance(state, dict):
            raise ValueError("state.json holds no object")
        if {k: state.get(k) for k in ("settings", "data", "base")} != self._state_json():
            raise ConfigError(
                f"{where} holds an interrupted fit of other data or settings: remove it, or write to another folder"
            )
        self.model.load_state_dict(load_file(str(where / "weights.safetensors")))
        moments = load_file(str(where / "adam.safetensors"))
        for name, param in self.model.named_parameters():
            if f"{name}::step" in moments:
                self.optimizer.state[param] = {
                    "step": moments[f"{name}::step"],
                    "exp_avg": moments[f"{name}::exp_avg"],
                    "exp_avg_sq": moments[f"{name}::exp_avg_sq"],
                }
        self.done, self.losses, self.seconds = int(state["epochs_done"]), list(state["losses"]), state["seconds"]
        self.dev_auc = list(state.get("dev_auc") or [None] * self.done)
        return True

    def save(self, fitted: dict[str, Any]) -> dict[str, Any]:
        """The checker's files (safetensors, config, tokenizer) as of the epoch the dev part chose, and
        checker.json; the resume state goes."""
        from safetensors.torch import load_file

        chosen = self.best_epoch()
        if chosen < self.done:
            self.model.load_state_dict(load_file(str(self.out / RESUME_DIR / "best.safetensors")))
        self.model.save_pretrained(self.out, safe_serialization=True)
        self.tokenizer.save_pretrained(self.out)
        shutil.rmtree(self.out / RESUME_DIR, ignore_errors=True)
        record = {
            **fitted,
            "weights_sha256": sha256_of(self.out / "model.safetensors"),
            "files_sha256": checker_files(self.out),  # every file the loader reads, checked when it loads
            "id2label": {str(k): v for k, v in ID2LABEL.items()},
            "losses": self.losses,
            "dev": {"pairs": len(self.dev), "auc_roc": self.dev_auc, "chosen_epoch": chosen},
        }
        (self.out / CHECKER_JSON).write_text(json.dumps(record, indent=2), encoding="utf-8")
        return record


def _writable(target: Path) -> Path:
    """``target``, made if need be, once a file can be written there (before minutes of fitting)."""
    try:
        target.mkdir(parents=True, exist_ok=True)
        probe = target / ".halluscope-write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise ConfigError(f"cannot save a checker in {target}: {exc.strerror or exc}") from None
    return target


def fit_checker(
    pairs: Sequence[Pair],
    out: str | Path,
    settings: FitSettings | None = None,
    base: str | Path | None = None,
    described: dict[str, Any] | None = None,
    threads: int | None = None,
    report: Callable[[str], None] = lambda line: None,
    force: bool = False,
) -> dict[str, Any]:
    """Fine-tune ``base`` (all-MiniLM-L6-v2 by default) on ``pairs`` and save the checker in ``out``;
    returns its checker.json (``described``: what the data was, kept in it). An interrupted fit of the
    same pairs and settings resumes from its last finished epoch. A fit whose last epoch's mean loss is
    not below chance (ln 2) writes no checker unless ``force``."""
    import torch

    if len({p.supported for p in pairs}) < 2:
        raise ConfigError(f"a checker needs supported and unsupported pairs, got {len(pairs)} of one kind")
    settings = settings or FitSettings()
    torch.set_num_threads(threads or os.cpu_count() or 1)
    root = Path(base) if base is not None else default_model_dir()
    target = _writable(Path(out))
    fit = Fit(pairs, root, settings, target)
    if fit.resume(report):
        report(f"resumed after epoch {fit.done} of {settings.epochs}")
    report(
        f"{len(fit.fitted):,} pairs to fit on"
        + (f", {len(fit.dev):,} held out to choose the epoch on" if fit.dev else ", no dev part (too few pairs)")
    )
    while fit.done < settings.epochs:
        fit.epoch(report)
        if fit.done < settings.epochs:
            fit.keep()
    if fit.losses[-1] >= CHANCE_LOSS and not force:
        shutil.rmtree(target / RESUME_DIR, ignore_errors=True)
        raise ConfigError(
            f"the fit's last epoch's loss is {fit.losses[-1]:.3f}, not below chance (ln 2 = {CHANCE_LOSS:.3f}): it "
            "learned nothing from these pairs, and no checker was written (more pairs or epochs; force to keep it)"
        )
    fitted = {
        "format": "halluscope-checker/1",
        "halluscope": __version__,
        "base": str(root),
        "base_sha256": sha256_of(root / "model.safetensors"),
        "data": described or {},
        "pairs": len(pairs),
        "supported": sum(p.supported for p in pairs),
        "sources": sources_of(pairs),
        "data_sha256": fingerprint(pairs),
        "settings": asdict(settings),
        "threads": torch.get_num_threads(),
        "fit_seconds": round(fit.seconds, 1),
        "peak_memory_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
    return fit.save(fitted)
