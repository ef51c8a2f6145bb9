"""A provider family in one place. Its adapter (a ``Provider``) declares everything halluscope knows of
it: how its spec reads, how its chat client is built, whether its chat replies carry token log-probs
and how to read them, its log-prob model, which of its errors can pass, which variable holds its key,
how a call's parameters reach its client, how its tokens are counted, and the models `models list`
shows. The gateway, the log-prob loader, the retry policy, the entailment judges and the CLI read the
adapter; none of them names a provider.

halluscope's own adapters are this package's modules (``BUILTIN``, each with its ``PROVIDERS``); an
installed package adds one with a ``halluscope.providers`` entry point (a Provider, a Provider class, or
a module with ``PROVIDERS``). Any other name is LangChain's init_chat_model's (``langchain.py``).
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from halluscope.backends.retry import BadReplyError, RetryPolicy
from halluscope.errors import ConfigError, ModelSpecError, redact_credentials

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import BaseMessage

    from halluscope.backends.logprobs import LogProbModel

CALL_PARAMS = ("temperature", "top_p", "max_tokens", "stop", "seed", "logprobs", "top_logprobs")


def check_call_params(params: Iterable[str]) -> None:
    """The parameters a call may carry to any provider (each adapter maps them to its client's); any other
    is a misspelling, refused before the call is keyed."""
    unknown = set(params) - set(CALL_PARAMS)
    if unknown:
        raise ConfigError(f"unknown call parameter(s) {', '.join(sorted(unknown))}; known: {', '.join(CALL_PARAMS)}")


ENTRY_POINTS = "halluscope.providers"  # the group a package declares its providers under
BUILTIN = ("openai", "anthropic", "llama_cpp", "transformers", "nli", "langchain")  # this package's modules, in order
LOGPROB_METHODS = "PHR, likelihood semantic entropy, Direct Question probabilities and CLUE's offline scorer"


@dataclass(frozen=True)
class ModelSpec:
    provider: str
    model: str
    base_url: str | None = None

    @property
    def key(self) -> str:
        """Canonical name: what the cache key, run metadata, results and errors record. Credentials
        written into the base URL are redacted: they never change an answer, and must not be shown."""
        if self.provider == "openai-compatible":
            return redact_credentials(f"openai-compatible:{self.base_url}#{self.model}")
        if self.base_url:
            return redact_credentials(f"{self.provider}:{self.model}@{self.base_url}")
        return f"{self.provider}:{self.model}"


class Provider:
    """One provider family. A subclass overrides what differs from these defaults: a chat model built by
    ``chat_model``, no log-probs, no API key, parameters passed as they are, usage read from LangChain's
    ``usage_metadata``, and no errors of its own beyond the status codes and connection errors every
    provider shares."""

    name: str = ""  # the spec's prefix: 'NAME:model'
    about: str = ""  # one line: what it is and what it needs
    key_variable: str | None = None  # the variable its API key is read from (named when the key is refused)
    chats: bool = True  # it writes chat answers (an NLI checkpoint only judges pairs)
    entails: bool = False  # it judges (premise, hypothesis) pairs itself, with no prompt (an NLI checkpoint)
    chat_logprobs: bool = False  # its chat replies carry token log-probs when asked for them
    empty_reply_is_answer: bool = False  # an empty reply is the model's answer, not a fault to retry
    halluscopes_own: bool = True  # False: a route through LangChain's init_chat_model
    decodes_samples_together: bool = False  # ``sample_together`` decodes n samples of a prompt in one batch
    in_process: bool = False  # its models run inside this process: each worker loads its own, on its CPUs
    integration: str = ""  # the package that reads its replies (where ``bad_reply``'s errors are raised)
    spec_env: tuple[str, ...] = ()  # environment variables ``spec`` reads (a changed one resolves anew)

    def spec(self, rest: str, shown: str) -> ModelSpec:
        """The spec 'NAME:rest' (``shown`` is how errors may print it: credentials redacted)."""
        return ModelSpec(self.name, rest)

    def chat_model(self, spec: ModelSpec, timeout: float) -> BaseChatModel:
        """Its LangChain chat model, with the client's own retries and streaming off: the gateway retries,
        once, and caches whole replies."""
        raise ModelSpecError(f"{spec.key}: the {self.name} provider has no chat model here")

    def warm(self, chat: BaseChatModel) -> None:
        """Load what its first call would (a local model's weights), so a server is ready before it says so."""

    def logprob_model(self, spec: ModelSpec, retry: RetryPolicy, timeout: float) -> LogProbModel:
        """A LogProbModel (sample with log-probs, score a continuation, read a text's tokens)."""
        raise ConfigError(
            f"{spec.key}: {self.name} gives no log-prob model here; {LOGPROB_METHODS} need local:, "
            "transformers: or openai-compatible: models"
        )

    def call_params(self, spec: ModelSpec, params: dict[str, Any]) -> dict[str, Any]:
        """A call's parameters as its client takes them."""
        return params

    def invocation(self, chat: BaseChatModel, params: dict[str, Any]) -> tuple[BaseChatModel, dict[str, Any]]:
        """The chat model and keywords one call invokes."""
        return chat, params

    def reply_logprobs(self, message: BaseMessage) -> list[Any] | None:
        """A reply's token log-probs; None where it carries none."""
        return message_logprobs(message)

    def usage(self, message: BaseMessage) -> tuple[int, int]:
        """(prompt tokens, completion tokens) of a reply."""
        usage = getattr(message, "usage_metadata", None) or {}
        return int(usage.get("input_tokens", 0)), int(usage.get("output_tokens", 0))

    def sample_together(
        self, chat: BaseChatModel, messages: list[BaseMessage], seeds: list[int | None], params: dict[str, Any]
    ) -> list[BaseMessage] | None:
        """Samples of one prompt decoded together, one reply per seed (None for no seed), where
        ``decodes_samples_together``; None where the chat model is not one it decodes so."""
        return None

    def prompt_reuse(self, message: BaseMessage) -> tuple[int | None, list[int] | None]:
        """(prompt tokens the provider did not evaluate again, having them cached; the prompt's token
        ids): None where the reply does not say. LangChain reports a provider's prompt cache as
        ``input_token_details.cache_read``; a local model reports its KV prefix there, and its ids."""
        usage = getattr(message, "usage_metadata", None) or {}
        read = (usage.get("input_token_details") or {}).get("cache_read")
        ids = (getattr(message, "response_metadata", None) or {}).get("prompt_token_ids")
        return (None if read is None else int(read)), (list(ids) if ids else None)

    def connection_errors(self) -> tuple[type[BaseException], ...]:
        """Its client's dropped-connection and timeout errors that LangChain does not wrap (retried)."""
        return ()

    def unreadable_errors(self) -> tuple[type[BaseException], ...]:
        """Its client's errors for a 200 whose body it could not read (retried)."""
        return ()

    def bad_reply(self, exc: BaseException) -> str | None:
        """What a reply its client failed on (with ``exc``) was, when that is a bad reply to retry
        rather than a bug: None for anything else."""
        return None

    def models(self) -> list[dict[str, Any]]:
        """Rows for `models list`: each with ``spec``, ``installed``, ``about``; ``path`` and ``bytes``
        where it is a file; ``pull`` where a command fetches it."""
        return []


_providers: dict[str, Provider] = {}
_lock = threading.RLock()
_found = False


def providers() -> dict[str, Provider]:
    """Every provider by name, in the order found (halluscope's own, then the installed packages')."""
    with _lock:
        if not _found:
            _find()
        return _providers


def get(name: str) -> Provider | None:
    """The provider of a spec's prefix; None for a name none declares (init_chat_model's, then)."""
    return providers().get(name)


def loaded() -> Iterable[Provider]:
    """The providers found so far, without looking for more (the retry policy reads their errors)."""
    return list(_providers.values())


def forget() -> None:
    """Look again on next use (a test installs a package)."""
    global _found
    with _lock:
        _providers.clear()
        _found = False


def _find() -> None:
    global _found
    for module in BUILTIN:
        _add(importlib.import_module(f"{__name__}.{module}"), f"{__name__}.{module}")
    for point in entry_points(group=ENTRY_POINTS):
        try:
            found = point.load()
        except Exception as exc:  # noqa: BLE001 - a broken package is named, not a traceback
            raise ConfigError(f"the provider entry point {point.name!r} ({point.value}) failed to load: {exc}") from exc
        _add(found, point.value)
    _found = True


def _add(found: Any, where: str) -> None:
    if isinstance(found, type) and issubclass(found, Provider):
        found = found()
    declared = [found] if isinstance(found, Provider) else list(getattr(found, "PROVIDERS", ()))
    for provider in declared:
        if not isinstance(provider, Provider) or not provider.name:
            raise ConfigError(f"{where} declares {provider!r}, which is not a named halluscope Provider")
        if provider.name in _providers:
            raise ConfigError(f"{where} declares provider {provider.name!r}, which is already declared")
        _providers[provider.name] = provider


def message_logprobs(message: BaseMessage) -> list[Any] | None:
    """A chat reply's token log-probs as LangChain's integrations put them in ``response_metadata``
    (OpenAI's ``{"content": [...]}``, or the list itself); None where it carries none."""
    found = (message.response_metadata or {}).get("logprobs")
    found = found.get("content") if isinstance(found, dict) else found
    return list(found) if found else None


def sdk_errors(sdk: str, name: str) -> tuple[type[BaseException], ...]:
    """A provider SDK's error class ``name`` once the SDK is loaded: an SDK never imported raised nothing,
    and importing one (anthropic: ~2 s) must not cost every process."""
    module = sys.modules.get(sdk)
    return (getattr(module, name),) if module is not None else ()


def split_query(url: str) -> tuple[str, dict[str, str]]:
    """A base URL's query string (a proxy's ``?api_key=``, Azure's ``?api-version=``) apart from it: the
    OpenAI client appends its paths to the base URL, and would write them after the query."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(query="")), dict(parse_qsl(parts.query, keep_blank_values=True))


def require_env(name: str, spec: ModelSpec) -> str:
    value = os.environ.get(name)
    if not value:
        raise ConfigError(f"{spec.key} needs an API key: set {name} in the environment")
    return value


@contextmanager
def bad_replies(provider: Provider) -> Iterator[None]:
    """A 200 with an empty ``choices`` list surfaces as LangChain's IndexError on ``generations[0]``, and
    one its client could not read (``{}``, no ``choices`` or ``content``) as the error its provider's
    adapter recognises (``Provider.bad_reply``, raised inside its integration): a bad reply (retried),
    not a crash. The same errors raised anywhere else are left alone."""
    try:
        yield
    except IndexError as exc:
        if _raised_in(exc, "langchain_core"):
            raise BadReplyError("sent a reply with no choices") from exc
        raise
    except TypeError as exc:
        what = provider.bad_reply(exc)
        if what is not None and provider.integration and _raised_in(exc, provider.integration):
            raise BadReplyError(what) from exc
        raise


def _raised_in(exc: BaseException, package: str) -> bool:
    """Whether the innermost frame of ``exc``'s traceback is ``package``'s code."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and package in tb.tb_frame.f_code.co_filename
