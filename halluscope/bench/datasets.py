"""Where benchmark data lives. The package ships none: loaders take a path, HALLUSCOPE_DATA, or the
user data directory that ``halluscope data fetch`` fills."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

from halluscope.bench.sources import DATA_ENV, SOURCES
from halluscope.errors import DataError


def default_data_dir() -> Path:
    """Where ``halluscope data fetch`` writes when neither --data nor HALLUSCOPE_DATA is given."""
    return Path(platformdirs.user_data_dir("halluscope")) / "data"


def chosen_data_dir(explicit: str | Path | None = None) -> tuple[Path, str]:
    """The data directory to use and where the choice came from (--data, HALLUSCOPE_DATA or the default)."""
    if explicit is not None:
        return Path(explicit).expanduser(), "--data"
    if os.environ.get(DATA_ENV):
        return Path(os.environ[DATA_ENV]).expanduser(), DATA_ENV
    return default_data_dir(), "the default data directory"


def data_root(explicit: str | Path | None = None) -> Path:
    """The data directory from --data, else HALLUSCOPE_DATA, else the one ``data fetch`` fills; a clear
    error names all three."""
    root, origin = chosen_data_dir(explicit)
    if origin == "the default data directory" and not root.is_dir():
        raise DataError(
            f"no benchmark data directory: give data=DIR, set {DATA_ENV}, or download a dataset with "
            "`halluscope data fetch NAME`",
            settings=("data=",),
        )
    if not root.is_dir():
        raise DataError(f"benchmark data directory {root} (from {origin}) does not exist")
    return root


def dataset_dir(name: str, explicit: str | Path | None = None) -> Path:
    path = data_root(explicit) / name
    if not path.is_dir():
        hint = f"; download it with `halluscope data fetch {name}`" if name in SOURCES else ""
        raise DataError(
            f"dataset {name!r} not found under {path.parent}; available: "
            f"{', '.join(list_datasets(explicit)) or 'none'}{hint}"
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
