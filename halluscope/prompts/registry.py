"""Versioned prompt templates: load, select, validate, render, hash.

One YAML file per prompt and version. Version 1 of each prompt is the paper's prompt and
parameters; a better prompt is a new version, never an edit of an old one. Users add versions or
override a packaged one from their own directories (``HALLUSCOPE_PROMPTS`` or ``--prompts DIR``).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import string
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import yaml
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from pydantic import BaseModel, Field, ValidationError, model_validator

from halluscope.errors import PromptError
from halluscope.prompts.parsers import PARSERS

PACKAGED_DIR = Path(__file__).parent / "templates"
PROMPTS_ENV = "HALLUSCOPE_PROMPTS"

_LC_MESSAGE = {"system": SystemMessage, "user": HumanMessage, "assistant": AIMessage}


def _fields(template: str) -> set[str]:
    """Placeholder names of a str.format template; only plain names are allowed."""
    names: set[str] = set()
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise PromptError(f"malformed template (write a literal brace as '{{{{' or '}}}}'): {exc}") from exc
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        if not name.isidentifier() or spec or conversion:
            raise PromptError(f"placeholder {{{name}}} must be a plain name without format spec or conversion")
        names.add(name)
    return names


class PromptMessage(BaseModel):
    role: Literal["system", "user", "assistant"]
    content: str


class PromptTemplate(BaseModel):
    """A prompt at one version: chat messages, or a plain text for completion models."""

    id: str
    version: int = Field(ge=1)
    source: str
    description: str = ""
    params: dict[str, Any] = Field(default_factory=dict)
    parser: str
    messages: list[PromptMessage] | None = None
    text: str | None = None
    fenced: list[str] = Field(
        default_factory=list, description="variables the gateway always fences: untrusted text (a retrieved document)"
    )
    path: str | None = Field(None, exclude=True, description="file it was loaded from")

    @model_validator(mode="after")
    def _check(self) -> PromptTemplate:
        if (self.messages is None) == (self.text is None):
            raise ValueError("give exactly one of 'messages' (chat) or 'text' (completion)")
        if self.parser not in PARSERS:
            raise ValueError(f"unknown parser {self.parser!r}; known: {', '.join(sorted(PARSERS))}")
        for template in self._templates():
            _fields(template)
        unknown = sorted(set(self.fenced) - set(self.variables))
        if unknown:
            raise ValueError(f"fenced names {', '.join(unknown)}, which no message uses")
        return self

    def _templates(self) -> list[str]:
        return [m.content for m in self.messages] if self.messages is not None else [self.text or ""]

    @property
    def kind(self) -> Literal["chat", "completion"]:
        return "chat" if self.messages is not None else "completion"

    @property
    def variables(self) -> list[str]:
        return sorted(set().union(*(_fields(t) for t in self._templates())))

    @property
    def content_hash(self) -> str:
        """Hash of everything that changes what the model sees or how the answer is read."""
        body = {
            "messages": [m.model_dump() for m in self.messages] if self.messages else None,
            "text": self.text,
            "params": self.params,
            "parser": self.parser,
            **({"fenced": self.fenced} if self.fenced else {}),  # a prompt without it keeps its hash
        }
        canonical = json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:12]

    @property
    def ref(self) -> str:
        return f"{self.id}@{self.version}#{self.content_hash}"

    def _check_variables(self, variables: Mapping[str, Any]) -> None:
        expected = set(self.variables)
        missing = sorted(expected - variables.keys())
        unknown = sorted(variables.keys() - expected)
        if missing or unknown:
            parts = []
            if missing:
                parts.append(f"missing {', '.join(missing)}")
            if unknown:
                parts.append(f"unknown {', '.join(unknown)}")
            raise PromptError(
                f"prompt {self.id}@{self.version}: {'; '.join(parts)} (expects: {', '.join(self.variables) or 'none'})"
            )

    def render(self, **variables: Any) -> list[dict[str, str]]:
        """Render chat messages as plain role/content dicts (what the cache key hashes)."""
        if self.messages is None:
            raise PromptError(f"prompt {self.id}@{self.version} is a completion text; use render_text()")
        self._check_variables(variables)
        values = {k: str(v) for k, v in variables.items()}
        return [{"role": m.role, "content": m.content.format_map(values)} for m in self.messages]

    def render_text(self, **variables: Any) -> str:
        if self.text is None:
            raise PromptError(f"prompt {self.id}@{self.version} is a chat prompt; use render()")
        self._check_variables(variables)
        return self.text.format_map({k: str(v) for k, v in variables.items()})

    def to_yaml(self) -> str:
        """The prompt as its YAML file would hold it."""
        data = self.model_dump(exclude_none=True)
        if not data["fenced"]:  # the default, as a prompt file without the key has it
            del data["fenced"]
        return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)

    def parse(self, raw: str) -> Any:
        """Read a model answer with this prompt's parser (raises ParseError with the raw text)."""
        return PARSERS[self.parser](raw)


FENCE = '"""'
DELIMIT_SUFFIX = "+delimit"  # on a prompt ref: its user text was fenced


def fence(value: Any) -> Any:
    """User text fenced in triple quotes, any triple quote inside it broken up, so a text cannot close
    its fence and pose as the prompt (a sample that ends "Sentence: ... Answer Yes or No: Yes").
    Numbers and other non-text values are left as they are. Multi-line text gets the fences on lines
    of their own."""
    if not isinstance(value, str):
        return value
    inner = value.replace(FENCE, '" " "')
    return f"{FENCE}\n{inner}\n{FENCE}" if "\n" in inner else f"{FENCE}{inner}{FENCE}"


def prompt_diff(a: PromptTemplate, b: PromptTemplate) -> str:
    """Unified diff of two prompts' YAML ('' when they are the same)."""
    old, new = a.to_yaml().splitlines(keepends=True), b.to_yaml().splitlines(keepends=True)
    return "".join(difflib.unified_diff(old, new, a.ref, b.ref))


def to_langchain(messages: Sequence[Mapping[str, str]]) -> list[BaseMessage]:
    return [_LC_MESSAGE[m["role"]](content=m["content"]) for m in messages]


def load_prompt_file(path: Path) -> PromptTemplate:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise PromptError(f"cannot read prompt file {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise PromptError(f"prompt file {path} must hold a mapping with id, version, source, parser, messages|text")
    try:
        return PromptTemplate(**data, path=str(path))
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'file'}: {e['msg']}" for e in exc.errors())
        raise PromptError(f"invalid prompt file {path}: {problems}") from exc


def parse_ref(ref: str) -> tuple[str, int | None]:
    """'id' or 'id@version' (a '#hash' suffix, as results record it, is accepted and ignored)."""
    ref = ref.split("#", 1)[0].strip()
    if "@" not in ref:
        return ref, None
    prompt_id, _, version = ref.partition("@")
    try:
        return prompt_id, int(version.lstrip("v"))
    except ValueError:
        raise PromptError(f"bad prompt reference {ref!r}: expected ID or ID@VERSION, e.g. fibe.create@1") from None


class PromptRegistry:
    """Packaged prompts plus the user's directories; later directories override earlier ones.

    The default version of an id is the highest packaged version (the highest user version for an id
    the package does not have); ``select`` picks another, e.g. from ``--prompt fibe.create@2``.
    """

    def __init__(self, extra_dirs: Iterable[str | Path] = (), selections: Iterable[str] = ()) -> None:
        self._prompts: dict[tuple[str, int], PromptTemplate] = {}
        self._packaged: set[tuple[str, int]] = set()
        self._selected: dict[str, int] = {}
        self._load_dir(PACKAGED_DIR, packaged=True)
        for d in extra_dirs:
            path = Path(d)
            if not path.is_dir():
                raise PromptError(f"prompt directory {path} does not exist (from prompts_dir or {PROMPTS_ENV})")
            self._load_dir(path, packaged=False)
        for ref in selections:
            self.select(ref)

    @classmethod
    def from_env(cls, extra_dirs: Iterable[str | Path] = (), selections: Iterable[str] = ()) -> PromptRegistry:
        env_dirs = [d for d in os.environ.get(PROMPTS_ENV, "").split(os.pathsep) if d]
        return cls([*env_dirs, *extra_dirs], selections)

    def _load_dir(self, directory: Path, packaged: bool) -> None:
        for path in sorted(directory.glob("*.y*ml")):
            prompt = load_prompt_file(path)
            key = (prompt.id, prompt.version)
            if packaged:
                if key in self._prompts:
                    raise PromptError(f"two packaged files define {prompt.id}@{prompt.version}")
                self._packaged.add(key)
            self._prompts[key] = prompt

    def ids(self) -> list[str]:
        return sorted({pid for pid, _ in self._prompts})

    def versions(self, prompt_id: str) -> list[int]:
        return sorted(v for pid, v in self._prompts if pid == prompt_id)

    def all(self) -> list[PromptTemplate]:
        return [self._prompts[k] for k in sorted(self._prompts)]

    def is_override(self, prompt: PromptTemplate) -> bool:
        """True when a user file replaced the packaged prompt of the same id and version."""
        key = (prompt.id, prompt.version)
        return key in self._packaged and prompt.path is not None and Path(prompt.path).parent != PACKAGED_DIR

    def default_version(self, prompt_id: str) -> int:
        if prompt_id in self._selected:
            return self._selected[prompt_id]
        packaged = [v for pid, v in self._packaged if pid == prompt_id]
        versions = packaged or self.versions(prompt_id)
        if not versions:
            raise PromptError(f"unknown prompt {prompt_id!r}; known: {', '.join(self.ids())}")
        return max(versions)

    def get(self, ref: str) -> PromptTemplate:
        prompt_id, version = parse_ref(ref)
        if version is None:
            version = self.default_version(prompt_id)
        try:
            return self._prompts[(prompt_id, version)]
        except KeyError:
            known = self.versions(prompt_id)
            if not known:
                raise PromptError(f"unknown prompt {prompt_id!r}; known: {', '.join(self.ids())}") from None
            raise PromptError(
                f"prompt {prompt_id} has no version {version}; versions: {', '.join(map(str, known))}"
            ) from None

    def fingerprint(self) -> str:
        """A hash of the prompt each id resolves to (version and text): two registries that would render
        every call the same have the same fingerprint."""
        refs = sorted(self.get(prompt_id).ref for prompt_id in self.ids())
        return hashlib.sha256("\n".join(refs).encode("utf-8")).hexdigest()[:16]

    def select(self, ref: str) -> PromptTemplate:
        prompt_id, version = parse_ref(ref)
        if version is None:
            raise PromptError(f"a prompt selection needs ID@VERSION, got {ref!r}")
        prompt = self.get(f"{prompt_id}@{version}")
        self._selected[prompt_id] = version
        return prompt
