"""Every Python block of README.md runs as written, in order, in a process of its own (the 1.5B swapped
for SmolLM2, the tests' model: the README's snippets name the default model)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def readme_python() -> list[str]:
    return re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(encoding="utf-8"), flags=re.S)


def test_the_readme_has_its_python_blocks() -> None:
    blocks = readme_python()
    assert len(blocks) >= 4 and all("local:qwen2.5-coder-1.5b" in b or "rows" in b for b in blocks)


@pytest.mark.slow
def test_every_python_block_of_the_readme_runs_as_written(tmp_path: Path) -> None:
    code = "\n".join(readme_python()).replace("local:qwen2.5-coder-1.5b", "local:smollm2-135m")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LANGSMITH_", "LANGCHAIN_"))}
    env |= {"PYTHONPATH": str(REPO), "HALLUSCOPE_CACHE_DIR": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "direct-question:" in done.stdout  # the first block's summary, printed
