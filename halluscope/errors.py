"""Errors a user can act on. The CLI prints these as one line, never as a stack trace."""

from __future__ import annotations

import difflib
import logging
import re
from collections.abc import Iterable
from typing import Any


class HalluscopeError(Exception):
    """Base of every error that carries a message meant for the user."""


class HalluscopeWarning(UserWarning):
    """Something a user should know about a result that still stands (the CLI prints it as one line)."""


class ConfigError(HalluscopeError):
    """Something the user must set or install: a key, a provider name, a path. ``settings``: the keywords
    its message names as a Python caller spells them (``folds``, ``force=True``); the command line shows
    each as its flag (``--folds``, ``--force``), so no message below the CLI names a flag."""

    def __init__(self, *args: object, settings: tuple[str, ...] = ()) -> None:
        super().__init__(*args)
        self.settings = settings


class ModelSpecError(ConfigError):
    """A model string that does not name a known provider or is malformed."""


class ModelUnavailableError(HalluscopeError):
    """A provider could not be reached after the retries ran out, or refused the call."""


class PromptError(HalluscopeError):
    """A prompt that is missing, malformed, or rendered with wrong variables."""


class ParseError(HalluscopeError):
    """A model answer that the prompt's parser cannot read; the raw text is kept."""

    def __init__(self, message: str, raw: str) -> None:
        super().__init__(message)
        self.raw = raw


class DataError(ConfigError):
    """Benchmark data that cannot be found or read."""


class DownloadError(ConfigError):
    """A pinned file (data or weights) that could not be fetched, or whose bytes are not the pinned ones."""


class CacheError(ConfigError):
    """A call cache that cannot be opened, read or written: names the directory and the ways out."""


_URL_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)[^/\s@#?]+@")
# a query parameter, after '?', '&', ';' or an HTML-escaped '&amp;': its value is shown only where its name
# is known to be harmless; any other (api_key, token, sig, code, a provider's own name for a key) is redacted
_QUERY_PARAM = re.compile(r"(?P<lead>[?&;])(?P<name>[\w.\-\[\]]+)=(?P<value>[^&#\s'\"<>;]+)")
HARMLESS_PARAMS = frozenset(
    {
        "api-version", "api_version", "version", "v", "model", "deployment", "region", "format", "lang",
        "language", "locale", "timeout", "stream", "limit", "offset", "page", "per_page", "sort", "order",
        "mode", "q", "query", "id",
    }
)  # fmt: skip
REDACTED = "***"


def redact_credentials(text: str) -> str:
    """Text fit to show or store: credentials written into URLs, as user info (``http://user:KEY@host``)
    or as a query parameter (``?api_key=KEY``, ``?code=KEY``: every parameter but those known to be
    harmless, ``HARMLESS_PARAMS``), are replaced by ``***``. Every printout, every file and every log
    line halluscope writes passes through this one function."""
    text = _URL_USERINFO.sub(rf"\g<scheme>{REDACTED}@", text)
    return _QUERY_PARAM.sub(_redacted_param, text)


# what a credential looks like where no URL holds it: a bearer token, an API key of the common shapes
# (OpenAI's and Anthropic's sk-..., pk-/rk-..., Google's AIza..., a GitHub token)
_CREDENTIAL_SHAPES = re.compile(
    r"(?i:(?<=bearer ))[A-Za-z0-9._~+/=-]{8,}"
    r"|\b(?:sk|pk|rk)-[A-Za-z0-9_-]{12,}"
    r"|\bAIza[0-9A-Za-z_-]{20,}"
    r"|\bgh[pousr]_[A-Za-z0-9]{20,}"
)
MIN_SECRET = 8  # a shorter value is not redacted by its text (it would blank ordinary words)


def redact_secrets(text: str, secrets: Iterable[str] = (), shapes: bool = True) -> str:
    """``text`` with every one of ``secrets`` (the keys a relay itself sent) replaced by ``***`` wherever
    it occurs, and, with ``shapes``, whatever looks like a credential (``_CREDENTIAL_SHAPES``) and the
    credentials in URLs (``redact_credentials``): what a proxy may relay of an upstream's words."""
    for secret in sorted({s for s in secrets if len(s) >= MIN_SECRET}, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    if not shapes:
        return text
    return redact_credentials(_CREDENTIAL_SHAPES.sub(REDACTED, text))


def _redacted_param(match: re.Match[str]) -> str:
    if match["name"].lower() in HARMLESS_PARAMS or match["value"] == REDACTED:
        return match[0]
    return f"{match['lead']}{match['name']}={REDACTED}"


def redact_log_records() -> None:
    """Every log record of the process redacted as it is made (``redact_credentials``), whoever
    configured the logging: httpx logs each request's full URL at INFO (a served graph's log under
    `langgraph dev` showed ``?api_key=...``). Installed once, by the first import of the backends."""
    made = logging.getLogRecordFactory()
    if getattr(made, "redacts", False):
        return

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = made(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a record that cannot format is the logging's own error to report
            return record
        shown = redact_credentials(message)
        if shown != message:
            record.msg, record.args = shown, ()
        return record

    factory.redacts = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(factory)


def unknown(what: str, given: str, available: Iterable[str]) -> str:
    """'unknown method 'groundd'; did you mean 'grounded'? available: ...': the near names first."""
    names = list(available)
    near = difflib.get_close_matches(given, names, n=3, cutoff=0.6)
    guess = f"did you mean {' or '.join(repr(n) for n in near)}? " if near else ""
    return f"unknown {what} {given!r}; {guess}available: {', '.join(names)}"
