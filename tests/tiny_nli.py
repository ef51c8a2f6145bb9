"""A tiny NLI classifier built offline (a 2-layer BERT with random weights and a word vocabulary): the
real transformers mechanics of a checkpoint, no download."""

from __future__ import annotations

from pathlib import Path


def build_tiny_nli(out: Path, words: str, labels: dict[int, str] | None, seed: int = 0) -> Path:
    """A sequence classifier in ``out`` over ``words``; ``labels`` its id2label (None: two heads named
    only LABEL_0 / LABEL_1, as SelfCheckGPT's DeBERTa)."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    vocabulary = words.split()
    (out / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *vocabulary]) + "\n")
    BertTokenizerFast(vocab_file=str(out / "vocab.txt")).save_pretrained(out)
    torch.manual_seed(seed)
    names = labels or {0: "LABEL_0", 1: "LABEL_1"}
    config = BertConfig(
        vocab_size=5 + len(vocabulary),
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        num_labels=len(names),
        id2label=names,
        label2id={v: k for k, v in names.items()},
    )
    BertForSequenceClassification(config).save_pretrained(out)
    return out
