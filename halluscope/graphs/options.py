"""The command-line options that several methods' contracts share (one definition each), and the
readers that turn a flag's text into a ``detect`` keyword's value."""

from __future__ import annotations

from halluscope.errors import ConfigError
from halluscope.graphs.method import Option
from halluscope.readers import read_file, read_lines, read_pairs, read_texts
from halluscope.scoring import CLUSTER_RULES


def _nonblank(text: str) -> str:
    if not text.strip():
        raise ConfigError("the text to check is empty")
    return text


def _text(value: str, flag: str) -> str:
    return _nonblank(value)


def _text_file(path: str, flag: str) -> str:
    return _nonblank(read_file(path, flag))


TEXT = (
    Option("text", ("--text",), "the text to check", read=_text),
    Option("text", ("--file",), "a file holding the text to check", read=_text_file, metavar="FILE"),
)
QUESTION = Option("question", ("--question",), "the question the answers answer")
JUDGE = Option(
    "judge",
    ("--judge",),
    "entailment judge: a model spec or nli:PATH (default: the default local model)",
    metavar="SPEC",
)
SCORER = Option(
    "judge",
    ("--judge",),
    "zero-shot scorer: a model spec or nli:PATH (default: the default local model)",
    metavar="SPEC",
)
CLUSTER_RULE = Option(
    "cluster_rule",
    ("--cluster-rule",),
    "greedy clustering: an answer joins the first equivalent cluster (paper, default) or the last (the "
    "official code's get_semantic_ids); they differ only when the judge is not transitive",
    choices=CLUSTER_RULES,
)


def prompt_option(param: str, help: str) -> Option:
    """The prompt that produced the text, offered as --question (FIBE's 'prompt', SCGP's 'concept')."""
    return Option(param, ("--question",), help, metavar="PROMPT")


PROMPT = prompt_option("prompt", "the prompt that produced the text, e.g. 'This is a Wikipedia passage about X:'")
# what SelfCheck (Prompt and Unigram) regenerates its samples from, when none are given
REGENERATE_FROM = (
    prompt_option(
        "question",
        "the question the text answers, asked again for the samples ('This is a Wikipedia passage about X:' "
        "asks FIBE's E.1 prompt about X)",
    ),
    Option("concept", ("--concept",), "the passage's concept, for FIBE's E.1 regeneration prompt"),
)


def model(does: str) -> Option:
    return Option("model", ("--model",), f"model spec, e.g. local:qwen2.5-coder-1.5b; it {does}", metavar="SPEC")


def samples(default: int, what: str, flags: tuple[str, ...] = ("--samples",)) -> Option:
    return Option("n", flags, f"N: {what} (default {default})", type=int, metavar="N")


def texts_file(param: str, flag: str, help: str) -> Option:
    return Option(
        param, (flag,), f"{help}: a JSON list, or texts separated by '---' lines", read=read_texts, metavar="FILE"
    )


def lines_file(param: str, flag: str, help: str) -> Option:
    return Option(param, (flag,), f"{help}: a JSON list or one per line", read=read_lines, metavar="FILE")


def pairs_file(param: str, flag: str, help: str) -> Option:
    return Option(
        param, (flag,), f"{help}: a JSON list of [input, label] or TSV lines", read=read_pairs, metavar="FILE"
    )


def mode(default: str) -> tuple[Option, Option]:
    """--strict / --lax: bidirectional equivalence as entailment both ways, or as no contradiction."""
    return (
        Option(
            "mode", ("--strict",), "equivalence = entailment both ways" + _default(default, "strict"), const="strict"
        ),
        Option(
            "mode",
            ("--lax",),
            "equivalence = no contradiction, not both neutral" + _default(default, "lax"),
            const="lax",
        ),
    )


def _default(default: str, this: str) -> str:
    return " (default)" if default == this else ""
