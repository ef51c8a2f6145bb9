"""Inputs from a user's files (the command line's --file, --samples-file, --pool, --context-file):
UTF-8 text, lists of texts, and (input, label) pairs, each refused with one clear error naming the
flag and the file when it cannot be read as that."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from halluscope.errors import ConfigError


def read_file(path: str, flag: str) -> str:
    """A user's text file as UTF-8 text ('-': standard input), a leading byte-order mark dropped (Excel's
    "CSV UTF-8" and Windows editors write one: it would become part of the first column's name or of the
    answer); an unreadable, binary or non-UTF-8 file is one clear error."""
    try:
        raw = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read {flag} {path}: {exc}", settings=(flag,)) from exc
    if b"\x00" in raw:
        raise ConfigError(f"{flag} {path} is a binary file, not text", settings=(flag,))
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{flag} {path} is not UTF-8 text (byte {raw[exc.start]:#04x} at offset {exc.start}); "
            "convert it, e.g. iconv -f latin1 -t utf-8",
            settings=(flag,),
        ) from exc


def load_json(text: str, flag: str, path: str) -> Any:
    """A user file's JSON, or one ConfigError naming the flag and the file: invalid JSON, or JSON nested
    deeper than Python's parser recurses (a file of 100,000 opening brackets)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{flag} {path} is not valid JSON: {exc}", settings=(flag,)) from exc
    except RecursionError as exc:
        raise ConfigError(
            f"{flag} {path} is JSON nested too deeply to read: give a list of texts", settings=(flag,)
        ) from exc


def _json_list_or_text(path: str, flag: str) -> tuple[Any, str]:
    """A user's file as (its JSON, its text) when it opens with '[', else (None, its text). A file that is a
    JSON object is refused: read as text it would become one item holding the whole JSON."""
    text = read_file(path, flag)
    opening = text.lstrip()[:1]
    if opening == "{":
        try:
            found = json.loads(text)
        except (json.JSONDecodeError, RecursionError):
            return None, text  # text that happens to open with a brace
        keys = ", ".join(map(repr, list(found)[:3])) if isinstance(found, dict) else ""
        raise ConfigError(
            f"{flag} {path} holds a JSON object ({keys or 'no keys'}), not a list: give a JSON list, or texts "
            "separated by '---' lines",
            settings=(flag,),
        )
    if opening != "[":
        return None, text
    return load_json(text, flag, path), text


def read_texts(path: str, flag: str, what: str = "texts", one_per_line: bool = False) -> list[str]:
    """A JSON list of strings, or plain text: one per line, or separated by lines of '---'."""
    texts, text = _json_list_or_text(path, flag)
    if texts is not None:
        if not isinstance(texts, list) or not all(isinstance(x, str) for x in texts):
            raise ConfigError(f"{flag} {path} must hold a JSON list of strings", settings=(flag,))
    elif one_per_line:
        texts = text.splitlines()
    else:
        texts = re.split(r"^---\s*$", text, flags=re.MULTILINE)
    texts = [x.strip() for x in texts if x.strip()]
    if not texts:
        raise ConfigError(f"{flag} {path} holds no {what}", settings=(flag,))
    return texts


def read_lines(path: str, flag: str) -> list[str]:
    """A JSON list of strings, or one per line (a question pool)."""
    return read_texts(path, flag, "question", one_per_line=True)


def read_pairs(path: str, flag: str) -> list[tuple[str, str]]:
    """In-context examples: a JSON list of [input, label] pairs, or one 'input<TAB>label' per line."""
    rows, text = _json_list_or_text(path, flag)
    if rows is None:
        rows = [line.split("\t") for line in text.splitlines() if line.strip()]
    pairs = []
    for i, row in enumerate(rows if isinstance(rows, list) else [rows]):
        if not (isinstance(row, list) and len(row) == 2 and all(isinstance(x, str) and x.strip() for x in row)):
            raise ConfigError(
                f"{flag} {path}: example {i + 1} is not an (input, label) pair of texts: {row!r}", settings=(flag,)
            )
        pairs.append((row[0].strip(), row[1].strip()))
    if not pairs:
        raise ConfigError(f"{flag} {path} holds no example", settings=(flag,))
    return pairs


def check_writable(path: str | Path, flag: str) -> None:
    """Where a command will write ``flag``'s file, checked before its work starts (not after an hour of
    it): a path that is a folder, under a file, or in a folder this process may not write is refused."""
    import os

    target = Path(path)
    if target.is_dir():
        raise ConfigError(f"{flag} {path} is a folder; give a file's path", settings=(flag,))
    folder = target.parent
    while not folder.exists() and folder != folder.parent:  # the folders it would make
        folder = folder.parent
    if not folder.is_dir():
        raise ConfigError(f"cannot write {flag} {path}: {folder} is a file, not a folder", settings=(flag,))
    if not os.access(folder, os.W_OK | os.X_OK) or (target.exists() and not os.access(target, os.W_OK)):
        raise ConfigError(f"cannot write {flag} {path}: permission denied", settings=(flag,))
