"""Pinned downloads: benchmark data and model weights from the Hugging Face Hub or a GitHub commit.

A file lands only after its size and sha256 match the pin; it is written beside its target and renamed
into place, so an interrupted download leaves nothing a loader could mistake for data. A file whose
checksum could not be pinned in advance is trusted on first use (``download_first``): checked against
the sha256 the Hub declares for it where it declares one, and pinned to the bytes kept. Endpoints come
from the environment at call time: ``HF_ENDPOINT`` (the Hub's own variable) and
``HALLUSCOPE_GITHUB_RAW`` (raw files of a GitHub commit), which the tests point at a local stub.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import socket
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
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
class Located:
    """One file of a public repository at a revision."""

    host: Host
    repo: str  # "owner/name" on the Hub or on GitHub
    revision: str  # a commit; or a branch, where the sha256 alone pins the bytes (the model GGUFs)
    path: str  # inside the repository

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
        return hub_endpoint() + self.route

    def pinned(self, sha256: str, size: int) -> Pinned:
        return Pinned(self.host, self.repo, self.revision, self.path, sha256, size)


@dataclass(frozen=True)
class Pinned(Located):
    """A located file and the size and sha256 of the bytes we keep (after ``convert``, where a loader
    needs another layout than the published file)."""

    sha256: str
    size: int


def hub_endpoint() -> str:
    return os.environ.get(HUB_ENV, HUB_DEFAULT).rstrip("/")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def is_current(pin: Pinned, target: Path) -> bool:
    """The target holds the pinned bytes (size first, so a wrong file costs no hashing)."""
    return target.is_file() and target.stat().st_size == pin.size and sha256_of(target) == pin.sha256


def _from_github(source: Located, into: Path) -> Path:
    out = into / Path(source.path).name
    try:
        with urllib.request.urlopen(source.url, timeout=TIMEOUT_S) as response, out.open("wb") as handle:
            shutil.copyfileobj(response, handle, _CHUNK)
    except urllib.error.HTTPError as exc:
        raise DownloadError(f"{source.url} answered HTTP {exc.code} ({exc.reason})") from exc
    except (urllib.error.URLError, OSError) as exc:
        raise DownloadError(f"cannot download {source.url}: {getattr(exc, 'reason', exc)}") from exc
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


@contextlib.contextmanager
def _hub_errors(url: str) -> Iterator[None]:
    """The Hub client's failures as one-line DownloadErrors naming the URL (and its HTTP status)."""
    from huggingface_hub import is_offline_mode
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    if is_offline_mode():
        raise DownloadError(f"HF_HUB_OFFLINE is set, so {url} is not downloaded: unset it to fetch from the Hub")
    _resolvable(url)
    try:
        yield
    except (HfHubHTTPError, LocalEntryNotFoundError, OSError) as exc:
        http = exc if isinstance(exc, HfHubHTTPError) else exc.__cause__  # the Hub's answer, where there was one
        if isinstance(http, HfHubHTTPError) and http.response is not None:
            raise DownloadError(f"{url} answered HTTP {http.response.status_code}") from exc
        raise DownloadError(f"cannot download {url}: {str(exc).splitlines()[0]}") from exc


def _from_hub(source: Located, into: Path) -> Path:
    from huggingface_hub import hf_hub_download

    with _hub_errors(source.url):
        found = hf_hub_download(
            source.repo,
            source.path,
            repo_type="dataset" if source.host == "hub-dataset" else "model",
            revision=source.revision,
            local_dir=into,
            endpoint=os.environ.get(HUB_ENV) or None,
        )
    return Path(str(found))


@dataclass(frozen=True)
class HubFile:
    """What the Hub says of a file before sending it: the commit its revision names now, and the sha256
    it declares for the bytes (a large file's, stored in LFS or Xet: its ETag), if any."""

    commit: str
    sha256: str | None


_SHA256 = re.compile(r"[0-9a-f]{64}")


def hub_file(source: Located) -> HubFile:
    from huggingface_hub import get_hf_file_metadata

    with _hub_errors(source.url):
        meta = get_hf_file_metadata(source.url)
    if not meta.commit_hash:
        raise DownloadError(f"{source.url} named no commit (no X-Repo-Commit header): is it the Hugging Face Hub?")
    declared = meta.etag if meta.etag and _SHA256.fullmatch(meta.etag) else None
    return HubFile(meta.commit_hash, declared)


def download(pin: Pinned, target: Path, convert: Callable[[Path], bytes] | None = None) -> Path:
    """Fetch the pinned file into ``target``; a size or sha256 that differs from the pin is refused and
    nothing is written: no file, and no folder this download made."""

    def check(size: int, digest: str) -> None:
        if (size, digest) != (pin.size, pin.sha256):
            raise DownloadError(
                f"{pin.url} gave {size} bytes with sha256 {digest}, not the pinned {pin.size} bytes with sha256 "
                f"{pin.sha256}; nothing was written to {target}"
            )

    _download(pin, target, convert, check)
    return target


def download_first(source: Located, target: Path, declared: str | None) -> Pinned:
    """Trust on first use, for a Hub file whose checksum could not be pinned in advance: fetch it into
    ``target`` and return the pin of the bytes kept, which every later check holds it to. Bytes whose
    sha256 is not the one the Hub ``declared`` for them (``hub_file``) are refused, and nothing is written."""

    def check(size: int, digest: str) -> None:
        if declared is not None and digest != declared:
            raise DownloadError(
                f"{source.url} gave bytes with sha256 {digest}, not the {declared} the Hub declares for them; "
                f"nothing was written to {target}"
            )

    return source.pinned(*_download(source, target, None, check))


def _download(
    source: Located, target: Path, convert: Callable[[Path], bytes] | None, check: Callable[[int, str], None]
) -> tuple[str, int]:
    """(sha256, size) of the bytes now at ``target``, once ``check`` passed them; on any failure, no
    file and no folder this download made."""
    made = [path for path in target.parents if not path.exists()]  # deepest first
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        with tempfile.TemporaryDirectory(prefix=f".{target.name}.", dir=target.parent) as scratch:
            fetched = (_from_github if source.host == "github" else _from_hub)(source, Path(scratch))
            if convert is not None:
                kept = Path(scratch) / f"{target.name}.converted"
                kept.write_bytes(convert(fetched))
            else:
                kept = fetched
            size, digest = kept.stat().st_size, sha256_of(kept)
            check(size, digest)
            os.replace(kept, target)
    except BaseException:
        for path in made:
            with contextlib.suppress(OSError):  # only while empty
                path.rmdir()
        raise
    return digest, size
