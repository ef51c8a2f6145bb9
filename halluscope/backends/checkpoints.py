"""Hugging Face checkpoint folders from the Hub: SelfCheckGPT's NLI classifier, fetched by
``halluscope models pull deberta-v3-large-mnli`` and run as ``nli:deberta-v3-large-mnli``.

No checksum of its files could be pinned when it was added (the Hub was out of reach), so a pull trusts
its first download and holds every later use to it. The files come from one commit (the branch's head
at the first pull), each checked against the sha256 the Hub declares for it where it declares one (the
weights and the tokenizer model); the commit, sizes and sha256 are written beside them
(``checksums.json``). A later pull checks them and fetches a missing or damaged file again from that
commit, refused unless its bytes are the recorded ones; loading checks them all; ``--force`` trusts
the branch's head anew.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from halluscope.backends.local import models_dir
from halluscope.errors import ConfigError, DownloadError
from halluscope.hub import Located, Pinned, download, download_first, hub_endpoint, hub_file, is_current

RECORD = "checksums.json"  # beside the files: what the first pull kept


@dataclass(frozen=True)
class HubCheckpoint:
    name: str
    about: str
    repo: str  # "owner/name" on the Hub
    branch: str  # whose head the first pull takes
    files: tuple[str, ...]  # what transformers loads, as the publisher names them
    approx_bytes: int  # as the Hub's file list shows them: for the pull's message

    def located(self, path: str, revision: str) -> Located:
        return Located("hub-model", self.repo, revision, path)


CHECKPOINTS: dict[str, HubCheckpoint] = {
    c.name: c
    for c in (
        HubCheckpoint(
            "deberta-v3-large-mnli",
            "SelfCheckGPT's NLI classifier (DeBERTa-v3-large fine-tuned on MultiNLI, a two-way head): "
            "selfcheck-nli's judge",
            "potsawee/deberta-v3-large-mnli",
            "main",
            (
                "config.json",
                "pytorch_model.bin",  # the publisher's only weights: transformers reads them with torch's weights_only
                "spm.model",  # SentencePiece: the local extra's sentencepiece reads it
                "tokenizer_config.json",
                "special_tokens_map.json",
                "added_tokens.json",
            ),
            1_740_000_000,
        ),
    )
}


def checkpoint_dir(name: str) -> Path:
    return models_dir() / name


def _recorded(checkpoint: HubCheckpoint) -> list[Pinned] | None:
    """The pins the first pull wrote, or None where it never finished."""
    path = checkpoint_dir(checkpoint.name) / RECORD
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        pins = [checkpoint.located(f["path"], data["commit"]).pinned(f["sha256"], f["size"]) for f in data["files"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(
            f"{path} is damaged ({exc}): `halluscope models pull {checkpoint.name} --force` fetches the checkpoint anew"
        ) from exc
    if sorted(pin.path for pin in pins) != sorted(checkpoint.files):
        raise ConfigError(
            f"{path} records other files than {checkpoint.name} needs: `halluscope models pull {checkpoint.name} "
            "--force` fetches the checkpoint anew"
        )
    return pins


def _write_record(checkpoint: HubCheckpoint, pins: list[Pinned]) -> None:
    folder = checkpoint_dir(checkpoint.name)
    record: dict[str, Any] = {
        "repo": checkpoint.repo,
        "branch": checkpoint.branch,
        "commit": pins[0].revision,
        "pulled": datetime.now(UTC).isoformat(timespec="seconds"),
        "trust": "first download: sha256 of each file as first fetched, each checked against the Hub's declared one",
        "files": [{"path": p.path, "size": p.size, "sha256": p.sha256} for p in pins],
    }
    fd, scratch = tempfile.mkstemp(prefix=f".{RECORD}.", dir=folder)
    with os.fdopen(fd, "w") as handle:
        json.dump(record, handle, indent=2)
    os.replace(scratch, folder / RECORD)


def pull_checkpoint(
    name: str, force: bool = False, report: Callable[[str], None] = lambda line: None
) -> tuple[Path, str]:
    """Fetch a checkpoint's files into the model cache: (its folder, 'downloaded' or 'present').
    Without a record (or with ``force``) the branch's head is trusted and recorded; with one, only
    missing or damaged files are fetched again, from the recorded commit, and must be the recorded bytes."""
    try:
        return _pull(CHECKPOINTS[name], force, report)
    except DownloadError as exc:
        raise DownloadError(f"{exc}\noffline: {_offline_route(name)}") from exc


def _offline_route(name: str) -> str:
    return f"copy a folder that `halluscope models pull {name}` made (its files and {RECORD}) to {checkpoint_dir(name)}"


def _pull(checkpoint: HubCheckpoint, force: bool, report: Callable[[str], None]) -> tuple[Path, str]:
    name = checkpoint.name
    folder = checkpoint_dir(name)
    if force:
        (folder / RECORD).unlink(missing_ok=True)  # a forced pull that fails leaves no record to trust
    pins = _recorded(checkpoint)
    if pins is None:
        head = hub_file(checkpoint.located(checkpoint.files[0], checkpoint.branch))
        report(
            f"{name}: about {checkpoint.approx_bytes / 1e9:.2f} GB from {checkpoint.repo} at commit {head.commit} "
            f"({checkpoint.branch}), first download recorded"
        )
        pins = []
        for path in checkpoint.files:
            source = checkpoint.located(path, head.commit)
            pins.append(download_first(source, folder / path, hub_file(source).sha256))
        _write_record(checkpoint, pins)
        return folder, "downloaded"
    stale = [pin for pin in pins if not is_current(pin, folder / pin.path)]
    for pin in stale:
        report(f"{name}: {pin.path} is missing or damaged: fetching the recorded bytes from commit {pin.revision}")
        download(pin, folder / pin.path)
    return folder, "downloaded" if stale else "present"


def checkpoint_path(spec: str) -> Path:
    """The folder an ``nli:`` spec names: a pulled checkpoint by its name, its files checked against the
    checksums of its first pull (once per load: the loader keeps the model); anything else, the path."""
    if spec not in CHECKPOINTS:
        return Path(spec).expanduser()
    checkpoint = CHECKPOINTS[spec]
    folder = checkpoint_dir(spec)
    pins = _recorded(checkpoint)
    if pins is None:
        raise ConfigError(
            f"NLI checkpoint {spec} is not pulled: `halluscope models pull {spec}` fetches it from "
            f"{checkpoint.repo} on the Hugging Face Hub (about {checkpoint.approx_bytes / 1e9:.2f} GB); offline, "
            + _offline_route(spec)
        )
    damaged = [pin.path for pin in pins if not is_current(pin, folder / pin.path)]
    if damaged:
        raise ConfigError(
            f"{folder}: {', '.join(damaged)} differ from what its first pull recorded in {RECORD}: "
            f"`halluscope models pull {spec}` fetches the recorded bytes again"
        )
    return folder


def checkpoint_rows() -> list[dict[str, Any]]:
    """One row per checkpoint for `halluscope models list` (present: recorded, every file at its size)."""
    rows = []
    for name, checkpoint in CHECKPOINTS.items():
        folder = checkpoint_dir(name)
        try:
            pins = _recorded(checkpoint)
        except ConfigError:
            pins = None
        present = pins is not None and all(
            (folder / p.path).is_file() and (folder / p.path).stat().st_size == p.size for p in pins
        )
        rows.append(
            {
                "name": name,
                "spec": f"nli:{name}",
                "installed": present,
                "about": checkpoint.about,
                "hub": f"{hub_endpoint()}/{checkpoint.repo}",
                "ollama": None,
                "install": None,
                "bytes": sum(p.size for p in pins) if present and pins else None,
                "path": str(folder) if present else None,
            }
        )
    return rows
