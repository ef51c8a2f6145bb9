"""The fields several methods declare alike (one definition each: their help and command-line
spellings), and the readers that turn a flag's text into a field's value."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from halluscope.errors import ConfigError
from halluscope.readers import read_file, read_lines, read_pairs, read_texts
from halluscope.runtime.contract import Flag, arg
from halluscope.scoring import CLUSTER_RULES


def _nonblank(text: str) -> str:
    if not text.strip():
        raise ConfigError("the text to check is empty")
    return text


def _text(value: str, flag: str) -> str:
    return _nonblank(value)


def _text_file(path: str, flag: str) -> str:
    return _nonblank(read_file(path, flag))


def text(help: str = "the text to check") -> Any:  # noqa: A002
    """The text to check: --text, or --file (a path, or - for standard input)."""
    return arg(
        help=help,
        flags=(
            Flag(("--text",), read=_text),
            Flag(("--file",), help="a file holding the text to check", read=_text_file, metavar="FILE"),
        ),
    )


def sentences() -> Any:
    return arg(help="the text's sentences, already split (a benchmark's own split)")


def question(help: str = "the question the answers answer", metavar: str | None = None) -> Any:  # noqa: A002
    return arg(help=help, flags=(Flag(("--question",), metavar=metavar),))


def prompt(help: str = "the prompt that produced the text, e.g. 'This is a Wikipedia passage about X:'") -> Any:  # noqa: A002
    """The prompt that produced the text (FIBE's and DQ's context), offered as --question."""
    return arg(help=help, flags=(Flag(("--question",), metavar="PROMPT"),))


def batch(one_call: str, alone: str = "checked") -> Any:
    """The one-call option of the methods that ask about each sentence (Direct Question, grounded's
    LLM judge, SelfCheck-Prompt): ``one_call`` says what one call asks; a sentence the reply gives no
    clean verdict for is asked on its own, a fallback the result counts."""
    return arg(
        False,
        help=f"{one_call}; a sentence without a clean verdict is {alone} alone (a fallback)",
        flags=(Flag(("--batch",), const=True),),
    )


# The preset each of those methods offers by name ('grounded:batch', in a bench's --method).
BATCH_PRESETS: Mapping[str, Mapping[str, Any]] = {"batch": {"batch": True}}


def regenerate_from() -> Any:
    """What SelfCheck (Prompt and Unigram) asks again for samples, when none are given."""
    return arg(
        help="the question the text answers, asked again for the samples ('This is a Wikipedia passage about X:' "
        "asks FIBE's E.1 prompt about X)",
        flags=(Flag(("--question",), metavar="PROMPT"),),
    )


def concept() -> Any:
    return arg(help="the passage's concept, for FIBE's E.1 regeneration prompt", flags=(Flag(("--concept",)),))


def model(does: str, default: Any = None) -> Any:
    return arg(
        default,
        help=f"model spec, e.g. local:qwen2.5-coder-1.5b; it {does}",
        flags=(Flag(("--model",), metavar="SPEC"),),
        refers="model",
    )


def samples(default: int | None, what: str, flags: tuple[str, ...] = ("--samples",), most: int | None = None) -> Any:
    """``n``, every method's sample count (at most ``most``, where it has a largest)."""
    return arg(default, help=f"N: {what}", flags=(Flag(flags, type=int, metavar="N"),), most=most)


def judge(what: str = "entailment judge") -> Any:
    """``judge``, every method's entailment judge or zero-shot scorer: a spec string or an object."""
    return arg(
        help=f"{what}: a model spec, or an NLI checkpoint: nli:PATH, or nli:NAME once pulled (default: the "
        "default local model)",
        flags=(Flag(("--judge",), metavar="SPEC"),),
        refers="model",
    )


def mode(default: str) -> Any:
    """--strict / --lax: bidirectional equivalence as entailment both ways, or as no contradiction."""
    return arg(
        default,
        help="bidirectional equivalence: 'strict' (entailment both ways) or 'lax' (no contradiction, not both neutral)",
        flags=(
            Flag(
                ("--strict",), help="equivalence = entailment both ways" + _default(default, "strict"), const="strict"
            ),
            Flag(
                ("--lax",),
                help="equivalence = no contradiction, not both neutral" + _default(default, "lax"),
                const="lax",
            ),
        ),
    )


def cluster_rule() -> Any:
    return arg(
        "paper",
        help="greedy clustering: an answer joins the first equivalent cluster (paper) or the last (the official "
        "code's get_semantic_ids); they differ only when the judge is not transitive",
        flags=(Flag(("--cluster-rule",), choices=CLUSTER_RULES),),
    )


def texts_file(flag: str, help: str) -> Any:  # noqa: A002
    return arg(
        help=f"{help}: a JSON list, or texts separated by '---' lines",
        flags=(Flag((flag,), read=read_texts, metavar="FILE"),),
    )


def lines_file_flags(flag: str) -> tuple[Flag, ...]:
    """A flag that reads a file of lines: a JSON list, or one per line."""
    return (Flag((flag,), read=read_lines, metavar="FILE"),)


def pairs_file(flag: str, help: str) -> Any:  # noqa: A002
    return arg(
        help=f"{help}: a JSON list of [input, label] or TSV lines",
        flags=(Flag((flag,), read=read_pairs, metavar="FILE"),),
    )


def _default(default: str, this: str) -> str:
    return " (default)" if default == this else ""


def documents(help: str = "the documents the answer should rest on") -> Any:  # noqa: A002
    """The documents a grounded check reads (a text, texts, or LangChain Documents): --context, repeated,
    or --context-file."""
    return arg(
        help=f"{help}: a text, a list of texts, or LangChain Documents",
        flags=(
            Flag(("--context",), help="a document (repeat the flag for several)", append=True, metavar="TEXT"),
            Flag(
                ("--context-file",), help="documents: a JSON list, or texts separated by '---' lines", read=read_texts
            ),
        ),
    )


# ---------------------------------------------------------------- items several methods read alike


@dataclass(frozen=True, kw_only=True)
class PromptedText:
    """An item: the text (or its sentences) and the prompt that produced it (FIBE's and DQ's context)."""

    text: str | None = text()
    sentences: list[str] | None = sentences()
    prompt: str | None = prompt()


def sampled_draw(given: Mapping[str, Any]) -> tuple[str, str | None]:
    """How a SelfCheck method (``SampledText``) regenerates its samples: from its concept and question."""
    return given.get("concept") or "", given.get("question")


@dataclass(frozen=True, kw_only=True)
class SampledText:
    """A SelfCheck item: the text (or its sentences), and the samples or what to regenerate them from."""

    text: str | None = text()
    sentences: list[str] | None = sentences()
    samples: list[str] | None = texts_file("--samples-file", "passages you already have")
    question: str | None = regenerate_from()
    concept: str | None = concept()
