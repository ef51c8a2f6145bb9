"""Errors a user can act on. The CLI prints these as one line, never as a stack trace."""

from __future__ import annotations

import re


class HalluscopeError(Exception):
    """Base of every error that carries a message meant for the user."""


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


def redact_credentials(text: str) -> str:
    """Text fit to show or store: credentials written into URLs (``http://user:KEY@host``) are replaced
    by ``***``. Model specs, run metadata, results and error messages pass through this."""
    return _URL_USERINFO.sub(r"\g<scheme>***@", text)
