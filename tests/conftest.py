"""Shared fixtures. Tests never leave 127.0.0.1 and never download anything."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from halluscope.backends.cache import CallCache
from halluscope.backends.gateway import Gateway, RetryPolicy
from halluscope.prompts.registry import PromptRegistry
from tests.scripted import ScriptedChatModel

os.environ["HF_HUB_OFFLINE"] = "1"
FAST_RETRY = RetryPolicy(attempts=4, initial=0.01, cap=0.05)
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test reads the user's cache, data directory, prompts, keys or base URLs."""
    monkeypatch.setenv("HALLUSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))  # where `data fetch` writes by default
    for var in (
        "HALLUSCOPE_PROMPTS",
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "OPENAI_BASE_URL",
        "ANTHROPIC_BASE_URL",
        "OPENAI_COMPATIBLE_API_KEY",
        "HALLUSCOPE_NO_CACHE",
    ):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def cache(tmp_path: Path) -> Iterator[CallCache]:
    c = CallCache(tmp_path / "calls")
    yield c
    c.close()


@pytest.fixture
def gateway(cache: CallCache) -> Gateway:
    return Gateway(cache=cache, registry=PromptRegistry(), retry=FAST_RETRY, concurrency=3)


@pytest.fixture
def scripted() -> Callable[..., ScriptedChatModel]:
    def make(respond: Callable[[str, dict[str, Any]], str], model_id: str = "scripted:test") -> ScriptedChatModel:
        return ScriptedChatModel(respond=respond, model_id=model_id)

    return make


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """../shared/data beside the repository (CI has it there), or HALLUSCOPE_DATA."""
    path = Path(os.environ.get("HALLUSCOPE_DATA") or REPO.parent / "shared" / "data")
    if not path.is_dir():
        pytest.fail(f"benchmark data not found at {path}: set HALLUSCOPE_DATA or put shared/ beside the repo")
    return path


@pytest.fixture(scope="session")
def smollm2_hf_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Hugging Face model directory made offline from the SmolLM2 GGUF (dequantised by transformers)."""
    from halluscope.backends.local import transformers_directory

    return transformers_directory("smollm2-135m", tmp_path_factory.mktemp("smollm2_hf"))
