"""Tiny NLI classifiers built offline, with random weights: a 2-layer BERT over a word vocabulary, and a
DeBERTa-v2 in the layout SelfCheckGPT's checkpoint is published in. The real transformers mechanics of a
checkpoint, no download."""

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


def build_tiny_deberta(
    out: Path,
    words: str,
    seed: int = 0,
    vocab: int = 48,
    positions: int = 64,
    initializer_range: float = 0.02,
    character_coverage: float = 0.9995,
    repeat: int = 8,
) -> Path:
    """A two-way DeBERTa-v2 classifier in the layout of SelfCheckGPT's potsawee/deberta-v3-large-mnli: the
    weights as pytorch_model.bin, a SentencePiece spm.model (trained here on ``words``, ``vocab`` pieces,
    with DeBERTa-v3's special ids) and no tokenizer.json, so transformers builds the tokenizer from
    spm.model; inputs longer than ``positions`` tokens are truncated, as the tokenizer's own maximum.
    ``initializer_range``: the weights' standard deviation; at the usual 0.02 the random model gives every
    pair nearly the same probability (1,908 WikiBio scores within 1.1e-6), at 0.5 they spread over most of
    [0, 1], so two implementations that differ in their formula give different numbers.
    ``character_coverage``: SentencePiece's share of the words' characters the vocabulary holds; at 1.0
    no character of ``words`` is unknown (transformers 4 and 5 tokenize an unknown character before
    punctuation differently, which a comparison across the two must not rest on). ``repeat``: how often
    the words' sentences are fed to the trainer (a few words need it; a corpus does not)."""
    import io
    import json

    import sentencepiece
    import torch
    from transformers import DebertaV2Config, DebertaV2ForSequenceClassification

    out.mkdir(parents=True, exist_ok=True)
    spm = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(words.split(".") * repeat),
        model_writer=spm,
        vocab_size=vocab,
        hard_vocab_limit=False,
        pad_id=0,
        bos_id=1,
        eos_id=2,
        unk_id=3,
        pad_piece="[PAD]",
        bos_piece="[CLS]",
        eos_piece="[SEP]",
        unk_piece="[UNK]",
        character_coverage=character_coverage,
        minloglevel=2,
    )
    (out / "spm.model").write_bytes(spm.getvalue())
    pieces = sentencepiece.SentencePieceProcessor(model_proto=spm.getvalue()).get_piece_size()
    specials = {"bos_token": "[CLS]", "cls_token": "[CLS]", "eos_token": "[SEP]", "mask_token": "[MASK]"}
    specials |= {"pad_token": "[PAD]", "sep_token": "[SEP]", "unk_token": "[UNK]"}
    (out / "special_tokens_map.json").write_text(json.dumps(specials))
    (out / "added_tokens.json").write_text(json.dumps({"[MASK]": pieces}))
    tokenizer = {"do_lower_case": False, "split_by_punct": False, "vocab_type": "spm", "model_max_length": positions}
    tokenizer |= specials
    (out / "tokenizer_config.json").write_text(json.dumps({**tokenizer, "tokenizer_class": "DebertaV2Tokenizer"}))
    torch.manual_seed(seed)
    config = DebertaV2Config(
        vocab_size=pieces + 1,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=positions,
        relative_attention=True,
        position_buckets=8,
        pos_att_type=["p2c", "c2p"],
        num_labels=2,
        initializer_range=initializer_range,
    )
    model = DebertaV2ForSequenceClassification(config)
    config.save_pretrained(out)
    written = json.loads((out / "config.json").read_text())
    del written["transformers_version"]  # the writer's version, not the model's: the bytes stay one on any release
    (out / "config.json").write_text(json.dumps(written, indent=2, sort_keys=True) + "\n")
    torch.save(model.state_dict(), out / "pytorch_model.bin")
    return out
