"""Whether a tool call's argument values are grounded in the conversation, with no model: a literal value
(a number, an email address, a URL, a date, a time of day, an identifier) is grounded where the
conversation states it, after normalising both sides (``1,000`` is ``1000``, ``March 5, 2024`` is
``2024-03-05``, ``2pm`` is ``14:00``, case and a URL's trailing slash do not count); a value the tool's
schema offers (one of its ``enum``, its ``default``) is grounded by the schema; a phrase is grounded
where every word of it that carries content is in the conversation. A boolean states no value and is not
checked; a phrase that states facts (a message body) is left to a judge. An ungrounded value is
*missing* where the conversation holds no value of its kind at all (the user never gave one: the agent
should have asked) and *invented* where it holds others. This strict reading is version 1; ``lenient``
lets through two completions a model makes from what it knows (a qualifier after a comma, a date given
against today's). Imports nothing of halluscope.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

KINDS = ("number", "email", "url", "date", "time", "identifier", "phrase", "boolean")
EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
URL = re.compile(r"(?:https?://|www\.)[^\s<>\"')\]]+", re.IGNORECASE)
NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?![\w])|(?<![\w])[-+]?\.\d+(?![\w])")
ISO_DATE = re.compile(r"\b(\d{4})-(\d{1,2})-(\d{1,2})(?:[T ][\d:.]+(?:Z|[+-]\d{2}:?\d{2})?)?\b")
MONTHS = {
    m: i + 1
    for i, names in enumerate(
        [
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ]
    )
    for m in names
}
_MONTH = "|".join(sorted(MONTHS, key=len, reverse=True))
MONTH_FIRST = re.compile(rf"\b({_MONTH})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?,?\s+(\d{{4}})\b", re.IGNORECASE)
DAY_FIRST = re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?({_MONTH})\.?,?\s+(\d{{4}})\b", re.IGNORECASE)
SLASHED = re.compile(r"\b(\d{1,2})/(\d{1,2})/(\d{4})\b")  # month first, as US forms write it
CLOCK = re.compile(r"\b(\d{1,2})(?::(\d{2}))?(?::\d{2})?\s*([ap])\.?m\.?(?!\w)|\b(\d{1,2}):(\d{2})(?::\d{2})?\b", re.I)
NOON = {"noon": (12, 0), "midday": (12, 0), "midnight": (0, 0)}
# words that give a date only against today's: a date argument then rests on the day the agent runs
_DAYS = "week|weekend|month|year|monday|tuesday|wednesday|thursday|friday|saturday|sunday"
RELATIVE = re.compile(
    rf"\b(?:today|tonight|tomorrow|yesterday|(?:this|next|last|coming)\s+(?:{_DAYS})"
    r"|in\s+\w+\s+(?:days?|weeks?|months?)|\w+\s+(?:days?|weeks?)\s+(?:from now|ago))\b",
    re.I,
)
NUMBER_WORDS = {
    w: i
    for i, w in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
        "seventeen eighteen nineteen twenty".split()
    )
} | {"a dozen": 12, "a hundred": 100, "a thousand": 1000, "a couple": 2, "a pair": 2}
WORD = re.compile(r"[^\W_]+", re.UNICODE)
# words that carry no content of their own: a phrase is grounded by its other words
STOPWORDS = frozenset(
    "a an the of in on at to for from by with and or but is are was were be been it its this that these those "
    "as into over under about near me my our your their his her please i we you they he she them us any some "
    "all no not do does did can could would should will shall may might must has have had".split()
)


@dataclass(frozen=True)
class ArgumentCheck:
    """One argument value's check: where it sits in the call (``path``: ``order_id``, ``items[0].sku``),
    its kind, whether it is grounded (None: not a value matching can check), why, and what matched."""

    path: str
    value: Any
    kind: str
    grounded: bool | None
    reason: str
    found: str | None = None


@dataclass(frozen=True)
class Conversation:
    """What a call's values may rest on, read once: its texts joined, their words, and every literal of
    each kind they state, normalised."""

    text: str
    words: frozenset[str]
    literals: Mapping[str, frozenset[Any]]
    relative_dates: bool = False  # it gives a date against today's ("tomorrow", "next Friday")

    @classmethod
    def of(cls, texts: Sequence[str]) -> Conversation:
        text = "\n".join(texts)
        lowered = text.lower()
        return cls(
            text=text,
            words=frozenset(WORD.findall(lowered)),
            literals={
                "number": frozenset(numbers_in(lowered)),
                "email": frozenset(m.lower() for m in EMAIL.findall(text)),
                "url": frozenset(url_key(m) for m in URL.findall(text)),
                "date": frozenset(dates_in(text)),
                "time": frozenset(times_in(text)),
                "identifier": frozenset(t.lower() for t in re.findall(r"[\w-]+", text) if _identifier(t)),
            },
            relative_dates=bool(RELATIVE.search(text)),
        )


def number_of(value: Any) -> Decimal | None:
    """A number's value, from a number or a numeric string (``"1,000"``, ``"5.0"``), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return Decimal(str(value)).normalize()
    if isinstance(value, str) and re.fullmatch(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|[-+]?\.\d+", value.strip()):
        try:
            return Decimal(value.strip().replace(",", "")).normalize()
        except InvalidOperation:
            return None
    return None


def numbers_in(lowered: str) -> Iterator[Decimal]:
    """Every number a lowercased text states, in digits or as a small number word."""
    for m in NUMBER.findall(lowered):
        found = number_of(m)
        if found is not None:
            yield found
    for words, n in NUMBER_WORDS.items():
        if re.search(rf"\b{words}\b", lowered):
            yield Decimal(n)


def _date(year: int, month: int, day: int) -> dt.date | None:
    try:
        return dt.date(year, month, day)
    except ValueError:
        return None


def dates_in(text: str) -> Iterator[dt.date]:
    """Every calendar date a text states: ISO, month first or day first with the month's name, or m/d/yyyy."""
    for y, m, d in ISO_DATE.findall(text):
        yield from filter(None, [_date(int(y), int(m), int(d))])
    for name, d, y in MONTH_FIRST.findall(text):
        yield from filter(None, [_date(int(y), MONTHS[name.lower()], int(d))])
    for d, name, y in DAY_FIRST.findall(text):
        yield from filter(None, [_date(int(y), MONTHS[name.lower()], int(d))])
    for m, d, y in SLASHED.findall(text):
        yield from filter(None, [_date(int(y), int(m), int(d))])


def times_in(text: str) -> Iterator[tuple[int, int]]:
    """Every time of day a text states, as (hour, minute) on a 24-hour clock: ``2pm``, ``2:30 p.m.``,
    ``14:30``, noon, midnight."""
    for h12, m12, half, h24, m24 in CLOCK.findall(text):
        if half:
            hour = int(h12) % 12 + (12 if half.lower() == "p" else 0)
            yield hour, int(m12 or 0)
        elif int(h24) < 24 and int(m24) < 60:
            yield int(h24), int(m24)
    for word, at in NOON.items():
        if re.search(rf"\b{word}\b", text, re.I):
            yield at


def time_of(value: str) -> tuple[int, int] | None:
    """A value's time of day where it is one time and nothing else, else None."""
    found = list(times_in(value))
    return found[0] if len(found) == 1 and len(value.strip()) <= 12 else None


def date_of(value: str) -> dt.date | None:
    """A value's date where it is one date and nothing else, else None."""
    found = list(dates_in(value))
    return found[0] if len(found) == 1 and len(value.strip()) <= 40 else None


def url_key(url: str) -> str:
    """A URL as compared: no scheme or ``www.``, lowercase host, no trailing slash or full stop."""
    url = re.sub(r"^(?:https?://)?(?:www\.)?", "", url.strip(), flags=re.IGNORECASE).rstrip("/.,;")
    host, _, rest = url.partition("/")
    return host.lower() + ("/" + rest if rest else "")


def _identifier(token: str) -> bool:
    """A token that names one thing: letters and digits together (``ORD-1234``, ``A7X``), no spaces."""
    return bool(re.search(r"\d", token)) and bool(re.search(r"[a-zA-Z]", token)) and len(token) >= 3


def kind_of(value: Any) -> str:
    """Which of ``KINDS`` a value is (a string by its form: an email, a URL, a date, a number, one token
    that mixes letters and digits, else a phrase)."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    text = str(value).strip()
    if EMAIL.fullmatch(text):
        return "email"
    if URL.fullmatch(text):
        return "url"
    if number_of(text) is not None:
        return "number"
    if date_of(text) is not None:
        return "date"
    if time_of(text) is not None:
        return "time"
    if " " not in text and _identifier(text):
        return "identifier"
    return "phrase"


def key_of(kind: str, value: Any) -> Any:
    """A literal as the conversation's literals are normalised, to look it up."""
    if kind == "number":
        return number_of(value)
    if kind == "email":
        return str(value).strip().lower()
    if kind == "url":
        return url_key(str(value))
    if kind == "date":
        return date_of(str(value))
    if kind == "time":
        return time_of(str(value))
    return str(value).strip().lower()


def as_written(value: Any) -> re.Pattern[str]:
    """The value as it stands, as a whole token in any case (``3`` is not the ``3`` of ``ORD-1234``)."""
    return re.compile(rf"(?<!\w){re.escape(str(value).strip())}(?!\w)", re.IGNORECASE)


def phrase_words(value: str) -> list[str]:
    """The words of a phrase that carry content (what grounds it)."""
    return [w for w in WORD.findall(value.lower()) if w not in STOPWORDS]


def checked_value(
    path: str, value: Any, schema: Mapping[str, Any], said: Conversation, lenient: bool = False
) -> ArgumentCheck:
    """One scalar value's check against the schema it was declared with and the conversation; ``lenient``
    (``lenient_check``) lets through what a model completes from what it knows."""
    found = _checked(path, value, schema, said)
    return lenient_check(found, said) if lenient and found.grounded is False else found


def lenient_check(check: ArgumentCheck, said: Conversation) -> ArgumentCheck:
    """What a strict check flagged, let through where it is a completion rather than an invention: a
    phrase whose head (before its first comma) is in the conversation, its qualifiers added ("Tel Aviv,
    Israel"); a date or time where the conversation gives one against today's ("tomorrow"), which
    matching cannot resolve (then not checked)."""
    if check.kind == "phrase" and "," in str(check.value):
        head = str(check.value).split(",", 1)[0]
        words = phrase_words(head)
        if words and all(w in said.words for w in words):
            reason = "its head is in the conversation; what follows its comma is a completion (lenient)"
            return ArgumentCheck(check.path, check.value, check.kind, True, reason)
    if check.kind in ("date", "time") and said.relative_dates:
        reason = "the conversation gives a day against today's: not checked (lenient)"
        return ArgumentCheck(check.path, check.value, check.kind, None, reason)
    return check


def _checked(path: str, value: Any, schema: Mapping[str, Any], said: Conversation) -> ArgumentCheck:
    kind = kind_of(value)
    if "enum" in schema and value in schema["enum"]:
        return ArgumentCheck(path, value, kind, True, "one of the schema's values")
    if "default" in schema and value == schema["default"]:
        return ArgumentCheck(path, value, kind, True, "the schema's default")
    if kind == "boolean":
        return ArgumentCheck(path, value, kind, None, "a flag states no value: not checked")
    if kind == "phrase":
        words = phrase_words(str(value))
        absent = [w for w in words if w not in said.words]
        if not words:
            return ArgumentCheck(path, value, kind, None, "no word of it carries content: not checked")
        if not absent:
            return ArgumentCheck(path, value, kind, True, "every word of it is in the conversation")
        return ArgumentCheck(path, value, kind, False, f"not in the conversation: {', '.join(absent)}")
    if key_of(kind, value) in said.literals[kind]:
        return ArgumentCheck(path, value, kind, True, "stated in the conversation", str(value))
    if as_written(value).search(said.text):  # written as it stands, though its kind reads it otherwise
        return ArgumentCheck(path, value, kind, True, "stated in the conversation", str(value))
    if not said.literals[kind]:
        return ArgumentCheck(path, value, kind, False, f"missing: the conversation states no {kind} at all")
    return ArgumentCheck(path, value, kind, False, f"invented: the conversation states other {kind}s, not this one")


def check_arguments(
    arguments: Mapping[str, Any], parameters: Mapping[str, Any] | None, texts: Sequence[str], lenient: bool = False
) -> list[ArgumentCheck]:
    """Every argument value of a call checked against ``texts`` (the conversation: system and user
    messages, tool results) and the tool's ``parameters`` (a JSON schema: ``properties`` with each one's
    ``enum`` and ``default``); lists and objects are checked value by value (``items[0].sku``).
    ``lenient``: completions let through (``lenient_check``)."""
    said = Conversation.of(texts)
    properties = (parameters or {}).get("properties") or {}
    return [
        check for name, value in arguments.items() for check in _walk(name, value, properties.get(name), said, lenient)
    ]


def _walk(path: str, value: Any, schema: Any, said: Conversation, lenient: bool) -> Iterator[ArgumentCheck]:
    schema = schema if isinstance(schema, Mapping) else {}
    if isinstance(value, Mapping):
        inner = schema.get("properties") or {}
        for name, v in value.items():
            yield from _walk(f"{path}.{name}", v, inner.get(name), said, lenient)
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            yield from _walk(f"{path}[{i}]", v, schema.get("items"), said, lenient)
    elif value is None or value == "":
        return
    else:
        yield checked_value(path, value, schema, said, lenient)
