"""`halluscope models pull deberta-v3-large-mnli`: SelfCheckGPT's NLI checkpoint from a local stand-in for
the Hugging Face Hub (the real hf_hub_download on the wire), trusted on first download and held to it
after: one commit for every file, the Hub's declared sha256 checked, the record checked on every pull
and load, and selfcheck-nli run from it as SelfCheckGPT scores it."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from huggingface_hub import constants as hub_constants

from halluscope.backends import entailment, local
from halluscope.backends.checkpoints import CHECKPOINTS, RECORD, checkpoint_dir, checkpoint_path
from halluscope.backends.providers.transformers import hf_directory
from halluscope.cli import main
from halluscope.errors import ConfigError
from halluscope.hub import HUB_ENV, sha256_of
from halluscope.methods import selfcheck_nli
from tests.stub_servers import FileHost
from tests.test_selfcheck_nli import SAMPLES, TEXT, selfcheckgpt_nli
from tests.tiny_nli import build_tiny_deberta

NAME = "deberta-v3-large-mnli"
CHECKPOINT = CHECKPOINTS[NAME]
HEAD = "c0cd718" + "0" * 33  # the branch's head the first pull meets (a made-up commit)
LATER = "e79bf0c" + "1" * 33


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """The tiny checkpoint's files under the routes of the publisher's branch."""
    folder = build_tiny_deberta(tmp_path_factory.mktemp("publisher"), TEXT.replace(".", " .") + " " + " ".join(SAMPLES))
    assert sorted(p.name for p in folder.iterdir()) == sorted(CHECKPOINT.files)  # the publisher's layout
    return {f"/{CHECKPOINT.repo}/resolve/main/{f}": (folder / f).read_bytes() for f in CHECKPOINT.files}


@pytest.fixture
def hub(published: dict[str, bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FileHost]:
    with FileHost(dict(published), commits={"main": HEAD}) as served:
        monkeypatch.setenv(HUB_ENV, served.base_url)
        monkeypatch.setenv(local.MODELS_ENV, str(tmp_path / "models"))
        monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", False)  # conftest keeps every other test offline
        monkeypatch.setattr(entailment, "_checkpoints", {})  # each test loads its own pull
        yield served


def route(file: str, revision: str = "main") -> str:
    return f"/{CHECKPOINT.repo}/resolve/{revision}/{file}"


def test_a_pull_records_one_commit_and_selfcheck_nli_runs_from_it_as_selfcheckgpt_scores(
    hub: FileHost, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(ConfigError, match=f"`halluscope models pull {NAME}` fetches it from potsawee/"):
        checkpoint_path(NAME)
    assert main(["models", "pull", NAME]) == 0
    folder = checkpoint_dir(NAME)
    captured = capsys.readouterr()
    assert f"nli:{NAME} downloaded and recorded: {folder}" in captured.out
    assert f"at commit {HEAD} (main), first download recorded" in captured.err
    assert hub.gets == [route(f, HEAD) for f in CHECKPOINT.files]  # every file from the head's one commit
    record = json.loads((folder / RECORD).read_text())
    assert record["commit"] == HEAD and record["repo"] == CHECKPOINT.repo
    assert {f["path"]: (f["size"], f["sha256"]) for f in record["files"]} == {
        f: (len(hub.files[route(f)]), sha256_of(folder / f)) for f in CHECKPOINT.files
    }
    assert checkpoint_path(NAME) == folder

    result = selfcheck_nli.detect(TEXT, samples=SAMPLES, judge=f"nli:{NAME}")
    assert result.meta.params["judge"] == f"nli:{NAME}"  # the name results and calibrations record
    expected = selfcheckgpt_nli(folder, [u.text for u in result.units], SAMPLES, entail=0, contra=1)
    assert [u.score for u in result.units] == pytest.approx(expected, abs=1e-6)

    assert main(["models", "pull", NAME]) == 0
    assert f"nli:{NAME} present, sha256 checked: {folder}" in capsys.readouterr().out
    assert len(hub.gets) == len(CHECKPOINT.files)  # nothing fetched again
    assert main(["models", "list", "--json"]) == 0
    row = {r["name"]: r for r in json.loads(capsys.readouterr().out)["models"]}[NAME]
    assert (row["spec"], row["installed"], row["path"]) == (f"nli:{NAME}", True, str(folder))
    assert row["hub"] == f"{hub.base_url}/{CHECKPOINT.repo}"


def test_a_damaged_file_is_refused_at_load_and_fetched_again_only_as_recorded(
    hub: FileHost, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["models", "pull", NAME]) == 0
    folder = checkpoint_dir(NAME)
    weights = folder / "pytorch_model.bin"
    kept = weights.read_bytes()
    weights.write_bytes(kept[:-1] + bytes([kept[-1] ^ 1]))  # same size, one bit off
    with pytest.raises(ConfigError, match=f"pytorch_model.bin differ from what its first pull recorded in {RECORD}"):
        checkpoint_path(NAME)
    capsys.readouterr()
    assert main(["models", "pull", NAME]) == 0
    assert "pytorch_model.bin is missing or damaged: fetching the recorded bytes" in capsys.readouterr().err
    assert hub.gets[-1] == route("pytorch_model.bin", HEAD) and weights.read_bytes() == kept

    # A mirror that serves other bytes under the recorded commit: refused, and nothing is written.
    hub.files[route("pytorch_model.bin")] = kept + b"\0"
    weights.unlink()
    assert main(["models", "pull", NAME]) == 2
    err = capsys.readouterr().err
    assert f"not the pinned {len(kept)} bytes with sha256 {hashlib.sha256(kept).hexdigest()}" in err
    assert "Traceback" not in err
    assert not weights.exists()

    # The publisher pushes these weights in a new commit: --force trusts the new head, and records it.
    hub.commits["main"] = LATER
    assert main(["models", "pull", NAME, "--force"]) == 0
    assert f"at commit {LATER} (main)" in capsys.readouterr().err
    assert json.loads((folder / RECORD).read_text())["commit"] == LATER
    assert weights.read_bytes() == kept + b"\0" and checkpoint_path(NAME) == folder


def test_a_first_download_that_is_not_the_hubs_declared_sha256_is_refused(
    hub: FileHost, capsys: pytest.CaptureFixture[str]
) -> None:
    hub.etags[route("spm.model")] = "ab" * 32  # the Hub declares other bytes than it sends (a corrupt mirror)
    assert main(["models", "pull", NAME]) == 2
    err = capsys.readouterr().err
    assert f"not the {'ab' * 32} the Hub declares for them" in err and "Traceback" not in err
    folder = checkpoint_dir(NAME)
    assert not (folder / RECORD).exists() and not (folder / "spm.model").exists()
    with pytest.raises(ConfigError, match="is not pulled"):
        checkpoint_path(NAME)


def test_a_pull_without_a_network_fails_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(HUB_ENV, "http://hub.invalid")
    monkeypatch.setenv(local.MODELS_ENV, str(tmp_path / "models"))
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", False)
    assert main(["models", "pull", NAME]) == 2
    err = capsys.readouterr().err
    assert "hub.invalid has no address" in err and "Traceback" not in err
    assert f"offline: copy a folder that `halluscope models pull {NAME}` made (its files and {RECORD}) to " in err
    assert not (tmp_path / "models").exists()
    assert main(["models", "pull", NAME, "--via", "ollama"]) == 2
    assert f"{NAME} has no Ollama tag" in capsys.readouterr().err


def test_a_sentencepiece_tokenizer_without_sentencepiece_names_the_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "spm.model").write_bytes(b"\0")
    monkeypatch.setattr("halluscope.backends.providers.transformers.find_spec", lambda name: None)
    with pytest.raises(ConfigError, match=r"SentencePiece model \(spm.model\), which needs sentencepiece"):
        hf_directory(tmp_path, None, "the NLI backend")


def test_garbage_files_that_match_their_record_are_one_line_naming_the_folder_and_the_repair(
    hub: FileHost, capsys: pytest.CaptureFixture[str]
) -> None:
    """A record rewritten to match garbage (config.json not JSON) passed the check and then failed in
    transformers: OSError '... config.json is not a valid JSON file'. Now one line names the folder."""
    assert main(["models", "pull", NAME]) == 0
    folder = checkpoint_dir(NAME)
    (folder / "config.json").write_bytes(b"not json")
    record = json.loads((folder / RECORD).read_text())
    for entry in record["files"]:
        if entry["path"] == "config.json":
            entry |= {"size": 8, "sha256": hashlib.sha256(b"not json").hexdigest()}
    (folder / RECORD).write_text(json.dumps(record))
    with pytest.raises(
        ConfigError, match=rf"the NLI checkpoint in {folder} cannot be loaded .*models pull NAME --force"
    ):
        entailment.nli_checkpoint(NAME)
    samples = folder.parent / "samples.json"
    samples.write_text(json.dumps(SAMPLES))
    capsys.readouterr()
    code = main(["detect", "selfcheck-nli", "--judge", f"nli:{NAME}", "--text", TEXT, "--samples-file", str(samples)])
    err = capsys.readouterr().err
    assert code == 2 and "cannot be loaded" in err and err.count("\n") == 1
