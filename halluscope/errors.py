"""Errors a user can act on. The CLI prints these as one line, never as a stack trace."""

from __future__ import annotations


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
