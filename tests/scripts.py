"""The repository's scripts (benchmarks/, examples/) loaded as modules, so tests call their functions."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]


def load_script(path: str) -> ModuleType:
    """``path`` relative to the repository, e.g. "benchmarks/probes.py", registered in sys.modules under
    its stem: a dataclass in a script looks its module up there."""
    name = Path(path).stem
    spec = importlib.util.spec_from_file_location(name, REPO / path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
