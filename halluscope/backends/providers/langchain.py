"""Any other provider LangChain's init_chat_model builds (ollama:llama3, google_genai:gemini-2.5-flash,
bedrock_converse:...), through its integration package (langchain-ollama, ...) and that package's own
settings (OLLAMA_HOST, GOOGLE_API_KEY ...). No log-probabilities here."""

from __future__ import annotations

import importlib.util
import re
from typing import TYPE_CHECKING, Any

from halluscope.backends.providers import ModelSpec, Provider
from halluscope.errors import ModelSpecError, redact_credentials

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

PROVIDER_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
# what init_chat_model's classes call a call parameter, where it is not its own name
FIELD_NAMES = {"max_tokens": ("max_tokens", "num_predict", "max_output_tokens", "max_new_tokens")}


def langchain_providers(own: set[str]) -> dict[str, str]:
    """The providers init_chat_model builds, each with the module of its integration, but ``own``.
    (langchain keeps the table private; without it, any provider name is passed on as written.)"""
    from langchain.chat_models import base

    table = getattr(base, "_BUILTIN_PROVIDERS", {})
    return {name: entry[0] for name, entry in table.items() if name not in own}


def inferred_provider(model: str) -> str | None:
    """The provider LangChain infers from a bare model name ('gpt-4o-mini': openai), where it can."""
    from langchain.chat_models import base

    infer = getattr(base, "_attempt_infer_model_provider", None)  # private: without it, no guess
    try:
        return infer(model) if infer is not None else None
    except Exception:  # noqa: BLE001 - a guess for an error message never raises
        return None


class LangChain(Provider):
    """One init_chat_model provider, by its name."""

    halluscopes_own = False

    def __init__(self, name: str, about: str = "") -> None:
        self.name = name
        self.about = about or f"LangChain's {name} integration, through init_chat_model; no log-probabilities"

    def spec(self, rest: str, shown: str) -> ModelSpec:
        module = langchain_providers(set()).get(self.name)
        if module is not None and importlib.util.find_spec(module.split(".")[0]) is None:
            package = module.split(".")[0].replace("_", "-")
            raise ModelSpecError(f"{shown!r} needs LangChain's {self.name} integration: pip install {package}")
        return ModelSpec(self.name, rest)

    def chat_model(self, spec: ModelSpec, timeout: float) -> BaseChatModel:
        """Built once to learn its class's fields, then with its own retries and streaming off and the
        timeout set where it has those fields."""
        from langchain.chat_models import init_chat_model

        try:
            fields = type(init_chat_model(spec.model, model_provider=spec.provider)).model_fields
            settings: dict[str, Any] = {"max_retries": 0, "timeout": timeout, "disable_streaming": True}
            settings = {name: value for name, value in settings.items() if name in fields}
            return init_chat_model(spec.model, model_provider=spec.provider, **settings)
        except ImportError as exc:  # the integration package is missing (its message names it)
            raise ModelSpecError(f"{spec.key}: {exc}") from exc
        except ValueError as exc:  # a provider init_chat_model does not know, or settings it refuses
            raise ModelSpecError(f"{spec.key}: {redact_credentials(str(exc)).splitlines()[0]}") from exc

    def invocation(self, chat: BaseChatModel, params: dict[str, Any]) -> tuple[BaseChatModel, dict[str, Any]]:
        """Its client takes no per-call sampling keywords (ChatOllama would send them as unknown
        arguments): they are set on a copy of the model, under the field name its class uses; one it
        has no field for is left out."""
        fields = type(chat).model_fields
        update = {}
        for name, value in params.items():
            field = next((f for f in FIELD_NAMES.get(name, (name,)) if f in fields), None)
            if field is not None:
                update[field] = value
        return chat.model_copy(update=update), {}


OLLAMA = LangChain(
    "ollama", "an Ollama server (OLLAMA_HOST) through langchain-ollama; `models pull NAME --via ollama`; no log-probs"
)
PROVIDERS = (OLLAMA,)
