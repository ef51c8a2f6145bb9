"""An Ollama server as a route to a registry model's weights.

``halluscope models pull NAME --via ollama`` asks the server to pull the model's Ollama library tag
(Ollama downloads the layers and checks their digests itself, into its own store); the model then
runs as ``--model ollama:TAG`` through LangChain's langchain-ollama integration. The server is the
one ``OLLAMA_HOST`` names, read as Ollama reads it (``host``, ``host:port`` or a URL), else
127.0.0.1:11434.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from halluscope.errors import DownloadError

DEFAULT_PORT = 11434
PULL_TIMEOUT = 60.0  # seconds without a progress line before the pull counts as stalled


def server_url() -> str:
    """The Ollama server's base URL from ``OLLAMA_HOST``."""
    host = os.environ.get("OLLAMA_HOST", "").strip() or "127.0.0.1"
    parts = urlsplit(host if "://" in host else f"http://{host}")
    port = parts.port or (DEFAULT_PORT if "://" not in host else None)  # a URL without one: its scheme's
    name = f"[{parts.hostname}]" if ":" in str(parts.hostname) else str(parts.hostname)  # IPv6
    netloc = f"{name}:{port}" if port else name
    return f"{parts.scheme}://{netloc}{parts.path.rstrip('/')}"


def pull(tag: str, on_progress: Callable[[dict[str, Any]], None] | None = None) -> None:
    """Have the server pull ``tag``; ``on_progress`` hears each progress line Ollama streams
    (``status``, and ``digest``, ``total``, ``completed`` while a layer downloads). A server that is
    not there, or that reports an error, is a DownloadError naming it."""
    base = server_url()
    request = urllib.request.Request(
        f"{base}/api/pull",
        data=json.dumps({"model": tag, "stream": True}).encode(),
        headers={"Content-Type": "application/json"},
    )
    last = None
    try:
        with urllib.request.urlopen(request, timeout=PULL_TIMEOUT) as answer:
            for line in answer:
                if not line.strip():
                    continue
                event = json.loads(line)
                if "error" in event:
                    raise DownloadError(f"the Ollama server at {base} could not pull {tag}: {event['error']}")
                last = event.get("status")
                if on_progress is not None:
                    on_progress(event)
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace").strip()
        raise DownloadError(f"the Ollama server at {base} answered HTTP {exc.code} to pulling {tag}: {detail}") from exc
    except TimeoutError as exc:
        raise DownloadError(
            f"the Ollama server at {base} sent no progress on {tag} for {PULL_TIMEOUT:g} s: try again"
        ) from exc
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise DownloadError(
            f"no Ollama server answers at {base} ({reason}): start one with `ollama serve` (OLLAMA_HOST names "
            "another), or pull from the Hugging Face Hub instead (`halluscope models pull NAME`)"
        ) from exc
    except json.JSONDecodeError as exc:
        raise DownloadError(f"the Ollama server at {base} sent a line that is not JSON while pulling {tag}") from exc
    if last != "success":
        raise DownloadError(f"the Ollama server at {base} stopped pulling {tag} before success (last: {last})")
