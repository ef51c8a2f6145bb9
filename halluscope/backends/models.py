"""What names a chat model and keys its calls: a spec string or a user's own LangChain chat model object
(``ModelLike``), how results name it (``model_name``), the record the gateway keeps of one it resolved
(``ResolvedChat``), and a user object's key from everything that changes its answers (``instance_key``)."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from langchain_core.language_models import BaseChatModel

from halluscope.backends.providers import ModelSpec, Provider
from halluscope.errors import redact_credentials

ModelLike = str | BaseChatModel


def model_name(model: ModelLike) -> str:
    """How results name a model: its spec (credentials in its URL redacted), or a chat model object's id or
    class (never its repr)."""
    name = model if isinstance(model, str) else (getattr(model, "model_id", None) or type(model).__name__)
    return redact_credentials(str(name))


INSTANCE = Provider()  # a user's own chat model object: its parameters passed as they are
INSTANCE.name = "instance"


@dataclass
class ResolvedChat:
    """A chat model as the gateway holds it: its key, its client, its adapter and its spec."""

    key: str
    chat: BaseChatModel
    adapter: Provider
    spec: ModelSpec | None = None  # None: a chat model object

    @property
    def provider(self) -> str:
        return self.adapter.name


# fields that hold secrets, clients or run-time plumbing: they never change an answer
_NOT_ANSWER_FIELDS = re.compile(
    r"key|secret|token$|password|credential|headers|client|callback|cache|metadata|tags|verbose|"
    r"rate_limiter|stream|retries|timeout"
)


def instance_key(model: BaseChatModel) -> str:
    """A user's own chat model, keyed by everything that changes its answers: its class and every plain
    field (model, base URL, sampling parameters, ...); secrets, clients and callbacks are left out."""
    fields: dict[str, Any] = {}
    for name in sorted(type(model).model_fields):
        if _NOT_ANSWER_FIELDS.search(name):
            continue
        value = getattr(model, name, None)
        if isinstance(value, str):
            value = redact_credentials(value)
        if value is None or isinstance(value, str | int | float | bool) or _plain(value):
            fields[name] = value
    cls = f"{type(model).__module__}.{type(model).__qualname__}"
    body = json.dumps({"class": cls, "fields": fields}, sort_keys=True)
    return f"instance:{type(model).__name__}:{hashlib.sha256(body.encode()).hexdigest()[:16]}"


def _plain(value: Any) -> bool:
    """JSON data (lists and dicts of numbers and strings), not objects whose text would change per process."""
    if not isinstance(value, list | dict | tuple):
        return False
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True
