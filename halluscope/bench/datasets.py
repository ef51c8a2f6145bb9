"""Where benchmark data lives. The package ships none: loaders take a path or HALLUSCOPE_DATA."""

from __future__ import annotations

import os
from pathlib import Path

from halluscope.errors import DataError

DATA_ENV = "HALLUSCOPE_DATA"


def data_root(explicit: str | Path | None = None) -> Path:
    """The data directory from --data, else HALLUSCOPE_DATA; a clear error names both."""
    chosen = explicit if explicit is not None else os.environ.get(DATA_ENV)
    if not chosen:
        raise DataError(f"no benchmark data directory: pass --data DIR or set {DATA_ENV}")
    root = Path(chosen).expanduser()
    if not root.is_dir():
        origin = "--data" if explicit is not None else DATA_ENV
        raise DataError(f"benchmark data directory {root} (from {origin}) does not exist")
    return root


def dataset_dir(name: str, explicit: str | Path | None = None) -> Path:
    path = data_root(explicit) / name
    if not path.is_dir():
        raise DataError(
            f"dataset {name!r} not found under {path.parent}; available: {', '.join(list_datasets(explicit))}"
        )
    return path


def dataset_file(name: str, relative: str, explicit: str | Path | None = None) -> Path:
    """One file of a dataset; a folder without it is a DataError naming the file and what is there."""
    folder = dataset_dir(name, explicit)
    path = folder / relative
    if not path.is_file():
        present = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
        raise DataError(
            f"dataset {name!r} at {folder} lacks {relative} (its SOURCE.md says where it comes from); "
            f"found: {', '.join(present[:10]) or 'nothing'}"
        )
    return path


def list_datasets(explicit: str | Path | None = None) -> list[str]:
    """Sub-directories of the data root that carry a SOURCE.md (origin, licence, schema)."""
    root = data_root(explicit)
    return sorted(p.name for p in root.iterdir() if (p / "SOURCE.md").is_file())


def source_summary(name: str, explicit: str | Path | None = None) -> str:
    """The first non-empty line of a dataset's SOURCE.md."""
    for line in (dataset_dir(name, explicit) / "SOURCE.md").read_text(encoding="utf-8").splitlines():
        if line.strip():
            return line.strip().lstrip("# ").strip()
    return ""
