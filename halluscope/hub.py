"""Pinned downloads: benchmark data and model weights from the Hugging Face Hub or a GitHub commit.

A file lands only after its size and sha256 match the pin; it is written beside its target and renamed
into place, so an interrupted download leaves nothing a loader could mistake for data. Endpoints come
from the environment at call time: ``HF_ENDPOINT`` (the Hub's own variable) and
``HALLUSCOPE_GITHUB_RAW`` (raw files of a GitHub commit), which the tests point at a local stub.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import socket
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from halluscope.errors import DownloadError

HUB_ENV = "HF_ENDPOINT"
HUB_DEFAULT = "https://huggingface.co"
GITHUB_RAW_ENV = "HALLUSCOPE_GITHUB_RAW"
GITHUB_RAW_DEFAULT = "https://raw.githubusercontent.com"
TIMEOUT_S = 60.0
_CHUNK = 1 << 20

Host = Literal["hub-dataset", "hub-model", "github"]


@dataclass(frozen=True)
class Pinned:
    """One file of a public repository at a revision, and the size and sha256 of the bytes we keep
    (after ``convert``, where a loader needs another layout than the published file)."""

    host: Host
    repo: str  # "owner/name" on the Hub or on GitHub
    revision: str  # a commit; or a branch, where the sha256 alone pins the bytes (the model GGUFs)
    path: str  # inside the repository
    sha256: str
    size: int

    @property
    def route(self) -> str:
        """The URL's path on its host."""
        if self.host == "github":
            return f"/{self.repo}/{self.revision}/{self.path}"
        kind = "/datasets" if self.host == "hub-dataset" else ""
        return f"{kind}/{self.repo}/resolve/{self.revision}/{self.path}"

    @property
    def url(self) -> str:
        if self.host == "github":
            return os.environ.get(GITHUB_RAW_ENV, GITHUB_RAW_DEFAULT).rstrip("/") + self.route
        return os.environ.get(HUB_ENV, HUB_DEFAULT).rstrip("/") + self.route


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def is_current(pin: Pinned, target: Path) -> bool:
    """The target holds the pinned bytes (size first, so a wrong file costs no hashing)."""
    return target.is_file() and target.stat().st_size == pin.size and sha256_of(target) == pin.sha256


def _from_github(pin: Pinned, into: Path) -> Path:
    out = into / Path(pin.path).name
    try:
        with urllib.request.urlopen(pin.url, timeout=TIMEOUT_S) as response, out.open("wb") as handle:
            shutil.copyfileobj(response, handle, _CHUNK)
    except urllib.error.HTTPError as exc:
        raise DownloadError(f"{pin.url} answered HTTP {exc.code} ({exc.reason})") from exc
    except (urllib.error.URLError, OSError) as exc:
        raise DownloadError(f"cannot download {pin.url}: {getattr(exc, 'reason', exc)}") from exc
    return out


def _resolvable(url: str) -> None:
    """A host that has no address fails now, in one line: the Hub's client would retry it for half a minute."""
    parts = urllib.parse.urlsplit(url)
    try:
        socket.getaddrinfo(parts.hostname, parts.port or (443 if parts.scheme == "https" else 80))
    except socket.gaierror as exc:
        raise DownloadError(
            f"cannot download {url}: {parts.hostname} has no address ({exc.strerror}); no network?"
        ) from exc


def _from_hub(pin: Pinned, into: Path) -> Path:
    from huggingface_hub import hf_hub_download, is_offline_mode
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    if is_offline_mode():
        raise DownloadError(f"HF_HUB_OFFLINE is set, so {pin.url} is not downloaded: unset it to fetch from the Hub")
    _resolvable(pin.url)
    try:
        found = hf_hub_download(
            pin.repo,
            pin.path,
            repo_type="dataset" if pin.host == "hub-dataset" else "model",
            revision=pin.revision,
            local_dir=into,
            endpoint=os.environ.get(HUB_ENV) or None,
        )
    except (HfHubHTTPError, LocalEntryNotFoundError, OSError) as exc:
        http = exc if isinstance(exc, HfHubHTTPError) else exc.__cause__  # the Hub's answer, where there was one
        if isinstance(http, HfHubHTTPError) and http.response is not None:
            raise DownloadError(f"{pin.url} answered HTTP {http.response.status_code}") from exc
        raise DownloadError(f"cannot download {pin.url}: {str(exc).splitlines()[0]}") from exc
    return Path(str(found))


def download(pin: Pinned, target: Path, convert: Callable[[Path], bytes] | None = None) -> Path:
    """Fetch the pinned file into ``target``; a size or sha256 that differs from the pin is refused and
    nothing is written: no file, and no folder this download made."""
    made = [path for path in target.parents if not path.exists()]  # deepest first
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        return _download(pin, target, convert)
    except BaseException:
        for path in made:
            with contextlib.suppress(OSError):  # only while empty
                path.rmdir()
        raise


def _download(pin: Pinned, target: Path, convert: Callable[[Path], bytes] | None) -> Path:
    with tempfile.TemporaryDirectory(prefix=f".{target.name}.", dir=target.parent) as scratch:
        fetched = (_from_github if pin.host == "github" else _from_hub)(pin, Path(scratch))
        if convert is not None:
            kept = Path(scratch) / f"{target.name}.converted"
            kept.write_bytes(convert(fetched))
        else:
            kept = fetched
        size, digest = kept.stat().st_size, sha256_of(kept)
        if (size, digest) != (pin.size, pin.sha256):
            raise DownloadError(
                f"{pin.url} gave {size} bytes with sha256 {digest}, not the pinned {pin.size} bytes with sha256 "
                f"{pin.sha256}; nothing was written to {target}"
            )
        os.replace(kept, target)
    return target
