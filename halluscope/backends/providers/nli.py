"""An NLI checkpoint (``nli:NAME`` once pulled, or ``nli:PATH``, a Hugging Face sequence-classification
directory, or a folder `checker fit` wrote): a judge that entails and scores (premise, hypothesis) pairs
itself, in this process, with no chat model and no log-probs. ``backends.entailment`` loads it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from halluscope.backends.providers import ModelSpec, Provider
from halluscope.errors import ModelSpecError

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel


class NLI(Provider):
    name = "nli"
    about = "an NLI checkpoint judging pairs itself (nli:NAME once pulled, or nli:PATH); no chat"
    in_process = True
    entails = True
    chats = False

    def chat_model(self, spec: ModelSpec, timeout: float) -> BaseChatModel:
        raise ModelSpecError(
            f"{spec.key} is an NLI checkpoint: it judges (premise, hypothesis) pairs as a method's judge "
            "(grounded's model, semantic entropy's or SelfCheck-NLI's judge), and writes no chat answer"
        )


def nli_spec(name: str) -> str:
    """The judge spec of an NLI checkpoint's name or folder."""
    return ModelSpec(NLI.name, name).key


PROVIDERS = (NLI(),)
