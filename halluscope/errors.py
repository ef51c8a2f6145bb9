"""Errors a user can act on. The CLI prints these as one line, never as a stack trace."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable


class HalluscopeError(Exception):
    """Base of every error that carries a message meant for the user."""


class HalluscopeWarning(UserWarning):
    """Something a user should know about a result that still stands (the CLI prints it as one line)."""


class ConfigError(HalluscopeError):
    """Something the user must set or install: a key, a provider name, a path."""


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
# a query parameter whose name says it holds a secret (api_key, apiKey, token, sig, X-Amz-Signature,
# client_secret, password, auth ...), after '?', '&', ';' or an HTML-escaped '&amp;'
_QUERY_PARAM = re.compile(r"(?P<lead>[?&;])(?P<name>[\w.\-\[\]]+)=(?P<value>[^&#\s'\"<>;]+)")
_SECRET_WORDS = re.compile(
    r"(?:^|[_.\-\[\]])(?:api)?(?:key|keys|token|tokens|secret|password|passwd|pwd|pass|sig|signature|auth|"
    r"authorization|credential|credentials|session|sessionid|jwt|bearer)(?:$|[_.\-\[\]])",
    re.IGNORECASE,
)
REDACTED = "***"


def redact_credentials(text: str) -> str:
    """Text fit to show or store: credentials written into URLs, as user info (``http://user:KEY@host``)
    or as a query parameter named like a secret (``?api_key=KEY``), are replaced by ``***``. Every
    printout and every file halluscope writes passes through this one function."""
    text = _URL_USERINFO.sub(rf"\g<scheme>{REDACTED}@", text)
    return _QUERY_PARAM.sub(_redacted_param, text)


def _redacted_param(match: re.Match[str]) -> str:
    name = re.sub(r"([a-z])([A-Z])", r"\1_\2", match["name"])  # apiKey, accessToken: words of their own
    if not _SECRET_WORDS.search(name):
        return match[0]
    return f"{match['lead']}{match['name']}={REDACTED}"


def unknown(what: str, given: str, available: Iterable[str]) -> str:
    """'unknown method 'groundd'; did you mean 'grounded'? available: ...': the near names first."""
    names = list(available)
    near = difflib.get_close_matches(given, names, n=3, cutoff=0.6)
    guess = f"did you mean {' or '.join(repr(n) for n in near)}? " if near else ""
    return f"unknown {what} {given!r}; {guess}available: {', '.join(names)}"
