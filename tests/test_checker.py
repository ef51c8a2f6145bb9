"""`halluscope checker fit`: a small cross-encoder fine-tuned here on labelled pairs, saved as safetensors
with its checker.json, loaded as ``nli:DIR`` by every door; seeded, resumable, refused when its weights
are not what its JSON says; its data split so that nothing it is tested on is fitted on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import halluscope
from halluscope.backends.entailment import NLIEntailment
from halluscope.bench.grounded import load_qnli_pairs
from halluscope.cli import main
from halluscope.errors import ConfigError
from halluscope.tune.checker import (
    DataPart,
    FitSettings,
    Pair,
    dev_split,
    fit_checker,
    qnli_pairs,
    sources_of,
    training_pairs,
)

TINY = FitSettings(epochs=2, batch_size=8, max_length=64)  # three batches an epoch on 24 pairs


@pytest.fixture(scope="module")
def pairs(data_dir: Path) -> list[Pair]:
    return training_pairs("rte", range(24), data_dir)


@pytest.fixture(scope="module")
def fitted(pairs: list[Pair], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("checker")
    fit_checker(pairs, out, TINY, threads=2, force=True)  # 24 pairs: plumbing, not a checker that learned
    return out


def test_a_fitted_checker_is_safetensors_with_its_record_and_checks_as_nli(fitted: Path, pairs: list[Pair]) -> None:
    record = json.loads((fitted / "checker.json").read_text())
    assert record["pairs"] == 24 and record["supported"] == sum(p.supported for p in pairs)
    assert record["settings"]["epochs"] == 2 and len(record["losses"]) == 2 and record["threads"] == 2
    assert len(record["base_sha256"]) == 64 and record["fit_seconds"] > 0 and record["peak_memory_mib"] > 0
    names = {p.name for p in fitted.iterdir()}
    assert {"model.safetensors", "config.json", "tokenizer.json", "checker.json"} <= names
    assert not [n for n in names if n.endswith((".bin", ".pt", ".pkl", ".pickle"))] and ".fit" not in names
    judge = NLIEntailment(fitted)
    assert judge.index == {"entailment": 0, "contradiction": 1}
    result = halluscope.check(
        "It lies in Sydney.", context=["Canberra is the capital of Australia."], model=f"nli:{fitted}"
    )
    assert result.method == "grounded" and result.units[0].score is not None and 0 <= result.units[0].score <= 1
    assert result.meta.models == [f"nli:{fitted}"]  # its forward pass, no chat model


def test_weights_that_are_not_what_checker_json_says_are_refused_in_one_line(fitted: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    copy.mkdir()
    for f in fitted.iterdir():
        (copy / f.name).write_bytes(f.read_bytes())
    weights = bytearray((copy / "model.safetensors").read_bytes())
    weights[-8] ^= 1
    (copy / "model.safetensors").write_bytes(bytes(weights))
    with pytest.raises(ConfigError, match="not what its checker.json says") as refused:
        NLIEntailment(copy)
    assert "\n" not in str(refused.value)


def test_an_interrupted_fit_resumes_from_its_last_epoch_to_the_same_weights(
    pairs: list[Pair], fitted: Path, tmp_path: Path
) -> None:
    def stop_in_the_second_epoch(line: str) -> None:
        if line.startswith("epoch 2/2"):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        fit_checker(pairs, tmp_path, TINY, threads=2, report=stop_in_the_second_epoch, force=True)
    state = json.loads((tmp_path / ".fit" / "state.json").read_text())
    assert state["epochs_done"] == 1 and not (tmp_path / "model.safetensors").exists()
    with pytest.raises(ConfigError, match="other data or settings"):
        fit_checker(pairs, tmp_path, FitSettings(epochs=2, batch_size=8, max_length=64, seed=1), threads=2, force=True)
    said: list[str] = []
    record = fit_checker(pairs, tmp_path, TINY, threads=2, report=said.append, force=True)
    assert said[0] == "resumed after epoch 1 of 2" and not [s for s in said if s.startswith("epoch 1/")]
    # seeded order, dropout and head, AdamW's moments kept: the same weights as the fit never stopped
    assert record["weights_sha256"] == json.loads((fitted / "checker.json").read_text())["weights_sha256"]


def test_the_data_never_fits_on_what_is_tested(data_dir: Path) -> None:
    fit, test = qnli_pairs(data_dir, "fit"), qnli_pairs(data_dir, "test")
    assert len(fit) + len(test) == 5463 and 0.15 < len(test) / 5463 < 0.25
    assert not {p.claim for p in fit} & {p.claim for p in test}  # a question's pairs stay in one part
    assert not {p.context for p in fit} & {p.context for p in test}  # and so do a sentence's
    tested = load_qnli_pairs(data_dir)  # what `bench grounded --dataset qnli` checks: the test part
    assert [(p.premise, p.hypothesis) for p in tested] == [(p.context, p.claim) for p in test]
    wikibio = training_pairs("wikibio", range(2), data_dir)
    from halluscope.bench.wikibio import load_wikibio

    passages = load_wikibio(data_dir)[:2]
    assert [p.claim for p in wikibio] == [s for p in passages for s in p.sentences]
    assert all(p.context in passages[0].wiki_text or p.context in passages[1].wiki_text for p in wikibio)
    with pytest.raises(ConfigError, match="supported and unsupported"):
        fit_checker([Pair("a", "b", True)] * 3, "never-written")
    both = training_pairs("rte,qnli", range(3), data_dir)
    assert both == training_pairs("rte", range(3), data_dir) + training_pairs("qnli", range(3), data_dir)
    with pytest.raises(ConfigError, match="data takes"):
        training_pairs("mnli-train")


def test_checker_fit_from_the_command_line(data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cli"
    argv = ["checker", "fit", "--data", "rte", "--limit", "16", "--epochs", "1", "--batch-size", "8"]
    argv += ["--max-length", "64", "--threads", "2", "--force"]
    assert main([*argv, "--data-dir", str(data_dir), "--out", str(out)]) == 0
    printed = capsys.readouterr()
    assert "fitting on 16 pairs" in printed.err and "epoch 1/1: 2/2 batches" in printed.err
    assert f"wrote {out}" in printed.out and json.loads((out / "checker.json").read_text())["data"]["limit"] == 16


@pytest.mark.slow
def test_a_teacher_labels_unlabelled_answers_and_the_fit_learns_its_probabilities(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from halluscope.backends.cache import open_cache
    from halluscope.backends.gateway import Gateway
    from halluscope.backends.stats import CallStats
    from halluscope.prompts.registry import PromptRegistry
    from halluscope.tune.checker import fingerprint, taught_pairs

    unlabelled = tmp_path / "answers.jsonl"
    rows = [
        {"text": "Canberra is the capital of Australia. It lies in Sydney.", "context": ["Canberra is in the ACT."]},
        {"sentences": ["Paris is in France."], "context": "Paris is the capital of France.", "question": "Where?"},
    ]
    unlabelled.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out, cache = tmp_path / "taught", str(tmp_path / "cache")
    argv = ["checker", "fit", "--teacher", "local:smollm2-135m", "--unlabelled", str(unlabelled), "--data", "rte"]
    argv += ["--limit", "8", "--epochs", "1", "--batch-size", "8", "--max-length", "64", "--threads", "2", "--force"]
    assert main([*argv, "--data-dir", str(data_dir), "--cache", cache, "--out", str(out)]) == 0
    record = json.loads((out / "checker.json").read_text())
    assert record["data"]["teacher"] == "local:smollm2-135m" and record["data"]["taught"] == 3
    assert record["pairs"] == 8 + 3 and record["data"]["unlabelled"] == "answers.jsonl"
    # its labels are the teacher's p(support), through the gateway: the same labelling again is read back
    stats = CallStats()
    gateway = Gateway(cache=open_cache(cache), registry=PromptRegistry())
    taught = taught_pairs(str(unlabelled), "local:smollm2-135m", gateway, stats=stats)
    assert [p.claim for p in taught] == [
        "Canberra is the capital of Australia.",
        "It lies in Sydney.",
        "Paris is in France.",
    ]
    assert all(p.soft is not None and 0 < p.soft < 1 and p.supported == (p.soft >= 0.5) for p in taught)
    assert stats.calls == 0 and stats.cache_hits == 3
    hard = [Pair(p.context, p.claim, p.supported) for p in taught]
    assert fingerprint(hard) != fingerprint(taught)  # a fit on the labels is not resumed as one on the teacher's
    capsys.readouterr()
    assert main(["checker", "fit", "--unlabelled", str(unlabelled), "--out", str(tmp_path / "x")]) == 2
    assert "--teacher labels the answers of --unlabelled: give both, or neither" in capsys.readouterr().err
    (tmp_path / "bad.jsonl").write_text(json.dumps({"text": "No documents here."}) + "\n")
    bad = ["checker", "fit", "--teacher", "local:smollm2-135m", "--unlabelled", str(tmp_path / "bad.jsonl")]
    assert main([*bad, "--out", str(tmp_path / "y")]) == 2
    assert "bad.jsonl, line 1: a teacher labels an answer ('text' or 'sentences') and its 'context'" in (
        capsys.readouterr().err
    )


def test_a_checkers_every_file_label_map_and_tokenizer_are_checked_when_it_loads(fitted: Path, tmp_path: Path) -> None:
    record = json.loads((fitted / "checker.json").read_text())
    assert {"model.safetensors", "config.json", "tokenizer.json"} <= set(record["files_sha256"])
    assert record["id2label"] == {"0": "entailment", "1": "contradiction"}

    def copied(name: str) -> Path:
        copy = tmp_path / name
        copy.mkdir()
        for f in fitted.iterdir():
            (copy / f.name).write_bytes(f.read_bytes())
        return copy

    reversed_labels = copied("reversed")
    config = json.loads((reversed_labels / "config.json").read_text())
    config["id2label"], config["label2id"] = (
        {"0": "contradiction", "1": "entailment"},
        {"contradiction": 0, "entailment": 1},
    )
    (reversed_labels / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match=r"config.json sha256"):
        NLIEntailment(reversed_labels)
    no_tokenizer = copied("no-tokenizer")
    for name in ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        (no_tokenizer / name).unlink(missing_ok=True)
    with pytest.raises(ConfigError, match=r"tokenizer.json sha256 missing"):
        NLIEntailment(no_tokenizer)
    described = json.loads((no_tokenizer / "checker.json").read_text())  # an older record: its weights alone
    del described["files_sha256"], described["id2label"]
    (no_tokenizer / "checker.json").write_text(json.dumps(described))
    with pytest.raises(ConfigError, match="tokenizer files are missing"):
        NLIEntailment(no_tokenizer)


def test_a_fit_that_learned_nothing_writes_no_checker_unless_forced(tmp_path: Path) -> None:
    twins = [Pair(f"Doc {i}.", f"Claim {i}.", supported) for i in range(8) for supported in (True, False)]
    with pytest.raises(ConfigError, match=r"not below chance \(ln 2 = 0.693\)"):
        fit_checker(twins, tmp_path / "none", FitSettings(epochs=1, batch_size=8, max_length=32), threads=2)
    assert not (tmp_path / "none" / "checker.json").exists() and not (tmp_path / "none" / ".fit").exists()
    kept = fit_checker(
        twins, tmp_path / "kept", FitSettings(epochs=1, batch_size=8, max_length=32), threads=2, force=True
    )
    assert kept["losses"][-1] >= 0.693 and (tmp_path / "kept" / "checker.json").is_file()


def test_a_torn_resume_file_starts_afresh_and_a_bad_out_says_what_is_wrong(pairs: list[Pair], tmp_path: Path) -> None:
    (tmp_path / "torn" / ".fit").mkdir(parents=True)
    (tmp_path / "torn" / ".fit" / "state.json").write_text('{"settings": ')  # killed while it wrote
    said: list[str] = []
    fit_checker(pairs, tmp_path / "torn", TINY, threads=2, report=said.append, force=True)
    assert said[0].startswith(f"the interrupted fit in {tmp_path / 'torn' / '.fit'} cannot be read")
    (tmp_path / "a-file").write_text("not a folder")
    with pytest.raises(ConfigError, match="cannot save a checker in"):
        fit_checker(pairs, tmp_path / "a-file", TINY, threads=2)


def test_a_labelled_file_fits_as_choose_reads_it_and_a_huge_cell_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "answers.jsonl"
    rows = [
        {"text": "Paris is in France.", "context": "Paris is the capital of France.", "label": 0},
        {"text": "Rome is in Spain.", "context": "Rome is the capital of Italy.", "label": 1},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    found = training_pairs(str(path))
    assert [(p.claim, p.supported) for p in found] == [("Paris is in France.", True), ("Rome is in Spain.", False)]
    two = {"text": "Paris is in France. Rome is in Spain.", "context": "Paris is in France.", "label": 1}
    path.write_text(json.dumps(two) + "\n")
    with pytest.raises(ConfigError, match="labels its sentence only where it has one \\(this has 2\\)"):
        training_pairs(str(path))
    path.write_text(json.dumps({**rows[0], "context": "x" * 300_000}) + "\n")
    with pytest.raises(ConfigError, match="its context holds 300,000 characters"):
        training_pairs(str(path))


# the pairs nothing here tests on: counts and balance as each SOURCE.md states them
SOURCE_COUNTS = {"mnli": (19647, 6942), "fever": (18209, 6393), "anli": (6400, 2140), "factcg": (2068, 1034)}


@pytest.mark.parametrize("name", sorted(SOURCE_COUNTS))
def test_each_nli_dataset_reads_as_its_source_counts_it(name: str, data_dir: Path) -> None:
    pairs = training_pairs(name, data_dir=data_dir)
    assert (len(pairs), sum(p.supported for p in pairs)) == SOURCE_COUNTS[name]
    assert all(p.source == name and p.context and p.claim for p in pairs)


def test_wice_fits_on_dev_claims_only_and_a_part_takes_its_own_range_and_cap(data_dir: Path) -> None:
    from halluscope.bench.grounded import load_wice

    wice = training_pairs("wice", data_dir=data_dir)
    test_claims = {p.hypothesis for p in load_wice(data_dir, split="test")}
    assert len(wice) == 1043 and not {p.claim for p in wice} & test_claims  # WiCE's test is held out
    assert sum(p.supported for p in wice) == 342  # supported alone; partially supported is not
    capped = training_pairs([DataPart("mnli", cap=500)], data_dir=data_dir)
    every = training_pairs("mnli", data_dir=data_dir)
    assert len(capped) == 500 and capped == training_pairs([DataPart("mnli", cap=500)], data_dir=data_dir)
    position = {(p.context, p.claim): i for i, p in enumerate(every)}
    kept = [position[(p.context, p.claim)] for p in capped]
    assert kept == sorted(kept) and kept != list(range(500))  # a seeded sample, in file order, not the first 500
    ranged = training_pairs([DataPart("rte", range(10, 20)), DataPart("wikibio", range(0, 1))], data_dir=data_dir)
    assert ranged[:10] == training_pairs("rte", range(10, 20), data_dir)
    with pytest.raises(ConfigError, match="max= keeps at least 1"):
        DataPart("mnli", cap=0)


def test_checker_json_lists_each_sources_pairs_balance_and_licence(data_dir: Path) -> None:
    pairs = training_pairs([DataPart("anli", cap=40), DataPart("factcg", cap=40)], data_dir=data_dir)
    found = sources_of(pairs)
    assert list(found) == ["anli", "factcg"] and found["anli"]["pairs"] == 40
    assert "non-commercial" in found["anli"]["licence"] and found["factcg"]["licence"].startswith("MIT")
    assert found["factcg"]["supported"] == sum(p.supported for p in pairs if p.source == "factcg")


def test_the_command_line_reads_each_parts_range_and_cap() -> None:
    from halluscope.cli.checker import data_parts

    assert data_parts("wikibio:0-119,mnli:max=200,rte:5-9:max=3,own.jsonl", range(0, 4)) == [
        DataPart("wikibio", range(0, 120)),
        DataPart("mnli", range(0, 4), 200),
        DataPart("rte", range(5, 10), 3),
        DataPart("own.jsonl", range(0, 4)),
    ]
    with pytest.raises(ConfigError, match=r"NAME\[:FIRST-LAST\]\[:max=N\]"):
        data_parts("mnli:max=x", None)


def test_a_context_is_held_out_whole_and_a_small_fit_holds_nothing_out(data_dir: Path) -> None:
    pairs = training_pairs("qnli", data_dir=data_dir)
    fitted, dev = dev_split(pairs, 0.05)
    assert 0.02 < len(dev) / len(pairs) < 0.08 and len(fitted) + len(dev) == len(pairs)
    assert not {p.context for p in fitted} & {p.context for p in dev}
    assert dev_split(pairs[:24], 0.05) == (pairs[:24], [])  # under MIN_DEV pairs: nothing held out
    assert dev_split(pairs, 0.0) == (pairs, [])


def test_length_grouped_batches_see_every_pair_once_and_pad_less(data_dir: Path) -> None:
    from halluscope.backends.embeddings import default_model_dir
    from halluscope.tune.checker import Fit

    pairs = training_pairs([DataPart("rte", cap=400)], data_dir=data_dir)
    grouped = Fit(pairs, default_model_dir(), FitSettings(batch_size=8, max_length=128, dev=0), Path("unused"))
    plain = Fit(
        pairs,
        default_model_dir(),
        FitSettings(batch_size=8, max_length=128, dev=0, group_by_length=False),
        Path("unused"),
    )

    def padded(fit: Fit, epoch: int) -> int:
        return sum(len(b) * max(fit.lengths[i] for i in b) for b in fit.batches(epoch))

    for fit in (grouped, plain):
        assert sorted(i for b in fit.batches(0) for i in b) == list(range(400))
        assert fit.batches(0) == fit.batches(0) and fit.batches(0) != fit.batches(1)  # seeded by the epoch
    assert padded(grouped, 0) < 0.8 * padded(plain, 0)


def test_the_epoch_the_dev_part_ranks_best_is_the_one_saved(data_dir: Path, tmp_path: Path) -> None:
    pairs = training_pairs([DataPart("factcg", cap=300)], data_dir=data_dir)
    said: list[str] = []
    settings = FitSettings(epochs=2, batch_size=16, max_length=64, dev=0.2)
    record = fit_checker(pairs, tmp_path, settings, threads=2, report=said.append, force=True)
    dev = record["dev"]
    assert dev["pairs"] > 0 and len(dev["auc_roc"]) == 2 and all(0 <= a <= 100 for a in dev["auc_roc"])
    assert dev["chosen_epoch"] == 1 + max(range(2), key=lambda e: (dev["auc_roc"][e], -e))
    assert any("held out to choose the epoch on" in line for line in said)
    assert any("min left" in line for line in said) and any("dev AUC-ROC" in line for line in said)
    assert record["sources"]["factcg"]["pairs"] == 300
