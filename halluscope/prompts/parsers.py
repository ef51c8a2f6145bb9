"""Parsers that read model answers, named by each prompt's ``parser`` field.

Each takes the raw text and returns plain JSON-ready data, or raises ParseError carrying the raw
text, so a graph can record the failure as data and apply its paper's rule. Parsers are lenient
about formatting (numbering, quotes, separators vary between models) and strict about content.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from halluscope.errors import ParseError
from halluscope.scoring.token_probability import token_at

Parser = Callable[[str], Any]


def _fail(name: str, raw: str, why: str) -> ParseError:
    return ParseError(f"{name}: {why}", raw)


def text(raw: str) -> str:
    out = raw.strip()
    if not out:
        raise _fail("text", raw, "empty answer")
    return out


_YES_NO = re.compile(r"^[\W_]*(yes|no)\b", re.IGNORECASE)


def yes_no(raw: str) -> str:
    """'yes' or 'no' from an answer that starts with either (punctuation and case ignored)."""
    m = _YES_NO.match(raw)
    if not m:
        raise _fail("yes_no", raw, "answer starts with neither Yes nor No")
    return m.group(1).lower()


_VERDICT = re.compile(r"^[^\w\n]*(?:claim\s*)?(\d+)\s*[.):\]-]?[^\w\n]*(yes|no)\b", re.IGNORECASE | re.MULTILINE)


def numbered_yes_no(raw: str) -> list[dict[str, Any]]:
    """One verdict per numbered line ('1. Yes', 'Claim 2: no'): its number, 'yes' or 'no', and where the
    verdict word starts in the text (to find its token's probability). Every line is kept as it came: a
    missing, repeated or garbled number is for the caller to judge."""
    found = [
        {"number": int(m.group(1)), "verdict": m.group(2).lower(), "at": m.start(2)} for m in _VERDICT.finditer(raw)
    ]
    if not found:
        raise _fail("numbered_yes_no", raw, "no numbered Yes or No line")
    return found


_LABELS = ("entailment", "contradiction", "neutral")


def entailment_label(raw: str) -> str:
    """The first of entailment / contradiction / neutral named in the answer."""
    low = raw.lower()
    found = [(low.find(label), label) for label in _LABELS if label in low]
    if not found:
        raise _fail("entailment_label", raw, "no Entailment, Contradiction or Neutral in the answer")
    return min(found)[1]


_BULLET = re.compile(r"^\s*(?:[-*\u2022\u2013]|\d+[.)])\s+(.*)$")


def bullet_list(raw: str) -> list[str]:
    """Items of a bullet or numbered list; an unmarked line continues the item above it."""
    items: list[str] = []
    for line in raw.splitlines():
        m = _BULLET.match(line)
        if m:
            items.append(m.group(1).strip())
        elif items and line.strip():
            items[-1] = f"{items[-1]} {line.strip()}"
    items = [i for i in items if i]
    if not items:
        raise _fail("bullet_list", raw, "no bullet points")
    return items


_NUMBERED = re.compile(r"^\s*\d+[.)]\s+", re.MULTILINE)
_QA_SPLIT = re.compile(r"\?\s*[-\u2013\u2014:]+\s*")
_DASH_SPLIT = re.compile(r"\s+[-\u2013\u2014]\s+")


def numbered_qa(raw: str) -> list[dict[str, str]]:
    """'1. {question} - {answer}' lines -> [{question, answer}]; lines without an answer are dropped."""
    pairs: list[dict[str, str]] = []
    for chunk in _NUMBERED.split(raw)[1:]:
        item = " ".join(chunk.split())
        m = _QA_SPLIT.search(item)
        if m:
            question, answer = item[: m.start() + 1], item[m.end() :]
        else:
            parts = _DASH_SPLIT.split(item)
            if len(parts) < 2:
                continue
            question, answer = " - ".join(parts[:-1]), parts[-1]
        if question.strip() and answer.strip():
            pairs.append({"question": question.strip(), "answer": answer.strip()})
    if not pairs:
        raise _fail("numbered_qa", raw, "no '1. question - answer' lines")
    return pairs


_TAG = re.compile(r"<([^<>]+)>")
_EXAM_TEXT = re.compile(r"Text\s*=\s*\[s(\d+)\]\s*")


def _object_hypernym(tag: str) -> dict[str, str]:
    obj, sep, hypernym = tag.rpartition(":")
    if not sep:
        return {"object": tag.strip(), "hypernym": ""}
    return {"object": obj.strip(), "hypernym": hypernym.strip()}


def fibe_exam(raw: str) -> list[dict[str, Any]]:
    """FIBE create() output: per 'Text=[sK] ...' block its subject and <object:hypernym> blanks."""
    starts = list(_EXAM_TEXT.finditer(raw))
    if not starts:
        raise _fail("fibe_exam", raw, "no 'Text=[sK]' blocks")
    exam = []
    for i, m in enumerate(starts):
        block = raw[m.end() : starts[i + 1].start() if i + 1 < len(starts) else len(raw)]
        subj_at = block.find("Subject=")
        blanks_at = block.find("Blanks=")
        sentence_end = min(p for p in (subj_at, blanks_at, len(block)) if p >= 0)
        subject = None
        if subj_at >= 0:
            tags = _TAG.findall(block[subj_at : blanks_at if blanks_at > subj_at else len(block)])
            subject = _object_hypernym(tags[0]) if tags else None
        blanks = [_object_hypernym(t) for t in _TAG.findall(block[blanks_at:])] if blanks_at >= 0 else []
        exam.append(
            {
                "sid": int(m.group(1)),
                "text": " ".join(block[:sentence_end].split()),
                "subject": subject,
                "blanks": blanks,
            }
        )
    return exam


_SID = re.compile(r"\[s(\d+)\]")


def bracket_sentences(raw: str) -> dict[int, str]:
    """'[sK] sentence' lines -> {K: sentence}; text before the first marker is ignored."""
    marks = list(_SID.finditer(raw))
    if not marks:
        raise _fail("bracket_sentences", raw, "no '[sK]' sentences")
    out: dict[int, str] = {}
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(raw)
        sentence = " ".join(raw[m.end() : end].split())
        out.setdefault(int(m.group(1)), sentence)
    return out


_SCORE = re.compile(r"\[([^\]\n]+)\]\s*[:=\-]?\s*(\d+(?:\.\d+)?)")


def bracket_scores(raw: str) -> dict[str, float]:
    """'[Name] 50' lines -> {Name: 50.0}, clipped to 0..100; the first score of a name counts."""
    out: dict[str, float] = {}
    for name, value in _SCORE.findall(raw):
        out.setdefault(name.strip(), min(100.0, max(0.0, float(value))))
    if not out:
        raise _fail("bracket_scores", raw, "no '[Name] score' lines")
    return out


_QUOTES = "'\"\u2018\u2019\u201c\u201d`"
_QUOTED_SEP = re.compile(rf"[{_QUOTES}]\s*[,;]\s*[{_QUOTES}]")


def concept_list(raw: str) -> list[str]:
    """CLUE concepts: quoted items separated by commas, or a list, one per line, or plain commas."""
    body = re.split(r"\n\s*(?:paragraph|concepts)\s*:", raw.strip(), maxsplit=1, flags=re.IGNORECASE)[0]
    body = re.sub(r"^\s*concepts\s*:", "", body, flags=re.IGNORECASE).strip()
    lines = [ln for ln in body.splitlines() if ln.strip()]
    if _QUOTED_SEP.search(body):
        items = _QUOTED_SEP.split(body)
    elif len(lines) > 1:
        items = [m.group(1) if (m := _BULLET.match(ln)) else ln for ln in lines]
    else:
        items = body.split(",")
    seen: dict[str, None] = {}
    for item in items:
        concept = item.strip().strip(_QUOTES + " ,.").strip()
        if concept and concept.lower() not in (c.lower() for c in seen):
            seen[concept] = None
    if not seen:
        raise _fail("concept_list", raw, "no concepts")
    return list(seen)


_IW_CO_MARK = re.compile(
    r"(non[- ]?wrong answer|corrected answer|non[- ]fake answer is|wrong answer|incorrect answer|fake answer is)"
    r"\s*[:.]*\s*",
    re.IGNORECASE,
)
_TRAILING_NUMBER = re.compile(r"[\s\-]*(?:\d+(?:-th)?[.)]?)?[\s\-]*$")


def iw_co_pairs(raw: str) -> list[dict[str, str]]:
    """FEWL D.1 answers ('1. Wrong Answer: X 1. Non-Wrong Answer: Y', or the D.2 'k-th fake answer
    is: X / k-th non-fake answer is: Y' form; 'Incorrect Answer' reads as 'Wrong Answer') ->
    [{wrong, corrected}], in order."""
    marks = list(_IW_CO_MARK.finditer(raw))
    pairs: list[dict[str, str]] = []
    wrong: str | None = None
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(raw)
        value = _TRAILING_NUMBER.sub("", " ".join(raw[m.end() : end].split())).strip()
        is_corrected = m.group(1).lower().startswith(("non", "corrected"))
        if not is_corrected:
            wrong = value or None
        elif wrong is not None and value:
            pairs.append({"wrong": wrong, "corrected": value})
            wrong = None
    if not pairs:
        raise _fail("iw_co_pairs", raw, "no wrong / non-wrong answer pairs")
    return pairs


_LETTER = re.compile(
    r"^[\W_]*(?:(?:the\s+)?(?:answer|option)\s*(?:is)?\s*[:\-]?\s*)?\(?([A-Z])(?:[).:,]|\s*$|\s*\n)", re.IGNORECASE
)


def choice_letter(raw: str) -> str:
    """The option letter a multiple-choice answer starts with ('B', '(b) ...', 'Answer: B.'), upper case;
    a letter that starts a word ('I think') is not one."""
    m = _LETTER.match(raw)
    if not m:
        raise _fail("choice_letter", raw, "no option letter at the start of the answer")
    return m.group(1).upper()


_ICL_PAIR = re.compile(r"Input:\s*(.*?)\s*\n\s*Label:[ \t]*([^\n]*)", re.DOTALL)


def icl_example(raw: str) -> dict[str, str]:
    """The first 'Input: x / Label: y' pair of an imagined ICL continuation."""
    m = _ICL_PAIR.search(raw if raw.lstrip().startswith("Input:") else "Input: " + raw.lstrip())
    if not m or not m.group(1).strip() or not m.group(2).strip():
        raise _fail("icl_example", raw, "no 'Input: ... / Label: ...' pair")
    return {"x": m.group(1).strip(), "y": m.group(2).strip()}


def icl_label(raw: str) -> str:
    """The label a model gave after 'Label:': its first non-empty line, stripped."""
    for line in raw.splitlines():
        if line.strip():
            return line.strip()
    raise _fail("icl_label", raw, "empty label")


PARSERS: dict[str, Parser] = {
    "text": text,
    "yes_no": yes_no,
    "numbered_yes_no": numbered_yes_no,
    "entailment_label": entailment_label,
    "bullet_list": bullet_list,
    "numbered_qa": numbered_qa,
    "fibe_exam": fibe_exam,
    "bracket_sentences": bracket_sentences,
    "bracket_scores": bracket_scores,
    "concept_list": concept_list,
    "iw_co_pairs": iw_co_pairs,
    "choice_letter": choice_letter,
    "icl_example": icl_example,
    "icl_label": icl_label,
}


ONE_CALL_TOKENS_PER_LINE = 8  # a one-call reply's room for each numbered verdict ('12. Yes' and its newline)


def numbered(texts: Sequence[str]) -> str:
    """The units a one-call prompt asks about, one numbered line each ('1. ...'), as its reply numbers them."""
    return "\n".join(f"{k + 1}. {text}" for k, text in enumerate(texts))


def one_call_max_tokens(n: int) -> int:
    """Room for a one-call reply's ``n`` numbered verdicts, and a little over."""
    return ONE_CALL_TOKENS_PER_LINE * n + 16


def one_call_verdicts(
    parsed: list[dict[str, Any]] | None, logprobs: list[dict[str, Any]] | None, n: int
) -> dict[int, tuple[str, Mapping[str, Any] | None]]:
    """Each unit's verdict ('yes'/'no') and its token's log-prob entry, by position, from a one-call
    reply's numbered lines (``numbered_yes_no``); a number missing, out of range, or given two different
    verdicts is left out (its unit is asked alone). The tokens are found in the text the reply's
    tokens join to."""
    by_number: dict[int, set[str]] = {}
    for line in parsed or []:
        by_number.setdefault(line["number"], set()).add(line["verdict"])
    clean = {
        number - 1: verdicts.pop() for number, verdicts in by_number.items() if 1 <= number <= n and len(verdicts) == 1
    }
    at: dict[int, int] = {}
    if logprobs:
        try:
            for line in numbered_yes_no("".join(entry["token"] for entry in logprobs)):
                at.setdefault(line["number"] - 1, line["at"])
        except ParseError:
            pass
    return {i: (said, token_at(logprobs, at[i]) if logprobs and i in at else None) for i, said in sorted(clean.items())}
