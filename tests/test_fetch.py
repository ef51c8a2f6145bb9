"""`halluscope data fetch` against a local stand-in for the Hugging Face Hub and GitHub's raw files:
the real download code (huggingface_hub's hf_hub_download, urllib) on the wire, never the network."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from huggingface_hub import constants as hub_constants

from halluscope.bench.sources import SOURCES
from halluscope.bench.truthfulqa import load_truthfulqa
from halluscope.bench.wikibio import load_wikibio
from halluscope.cli import main
from halluscope.hub import GITHUB_RAW_ENV, HUB_ENV
from tests.stub_servers import FileHost


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
    assert [p.name for p in (tmp_path / "medical_question_pairs").iterdir()] == []


@pytest.mark.parametrize("name", ["wikibio_gpt3_hallucination", "rte"])
def test_a_file_the_host_lacks_is_named_with_its_status(
    host: FileHost, tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    pin = SOURCES[name].files[0].pin
    del host.files[pin.route]
    assert main(["data", "fetch", name, "--data", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"{host.base_url}{pin.route} answered HTTP 404" in err and "Traceback" not in err
