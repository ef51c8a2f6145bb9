"""The method contract: every method reaches the detector and the command line through one
``METHOD``, with one name per concept, and the needs read right in Python and on the command line."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

import halluscope
from halluscope.cli import build_parser, main
from halluscope.cli.flags import label_of
from halluscope.detectors import METHODS
from halluscope.errors import ConfigError
from halluscope.methods import fibe


def test_every_method_and_fibe_variant_has_a_contract_and_a_detect_subcommand() -> None:
    assert set(fibe.VARIANTS) <= METHODS.keys() and {"phr", "fewl", "clue"} <= METHODS.keys()
    parser = build_parser()
    for name, method in METHODS.items():
        assert parser.parse_args(["detect", name, "--json"]).method == name
        accepted = inspect.signature(method.detect).parameters
        assert accepted == inspect.signature(method.adetect).parameters  # one declaration, both forms
        for option in method.fields():  # every field is a keyword of detect, with the same type
            assert option.name in accepted and accepted[option.name].annotation == option.hint, (name, option.name)
        for need in method.needs:
            assert all(param in accepted for param in need.names), (name, need)
        for field in (method.question_field, method.answer_field, method.model_field, *method.input_names):
            assert field is None or field in accepted, (name, field)
        assert {"gateway", "stats", "max_concurrency", "on_step"} <= accepted.keys()  # the same run settings


def test_one_name_for_the_sample_count_and_for_the_judge() -> None:
    for name in ("semantic-entropy", "clue", "fewl", "phr", "fibe", "selfcheck-prompt", "selfcheck-unigram"):
        assert "n" in inspect.signature(METHODS[name].detect).parameters, name
    for name in ("semantic-entropy", "semantic-entropy-paragraph", "clue"):
        assert "judge" in inspect.signature(METHODS[name].detect).parameters, name
    for name, method in METHODS.items():
        params = inspect.signature(method.detect).parameters
        assert not {"m", "diversify", "scorer"} & params.keys(), name


def test_a_need_names_python_keywords_in_python_and_flags_on_the_command_line() -> None:
    method = METHODS["semantic-entropy"]
    assert method.problem({"question": "Q?"}) == "semantic-entropy needs model to sample answers, or answers"
    cli = method.problem({"question": "Q?"}, label_of(method))
    assert cli == "semantic-entropy needs --model to sample answers, or --answers-file"
    assert label_of(METHODS["fibe"])("text") == "--text or --file"
    with pytest.raises(ConfigError, match="semantic-entropy needs model to sample answers"):
        halluscope.detector("semantic-entropy").detect(question="Q?")
    assert METHODS["fewl"].problem({"question": "Q?", "answers": ["A."], "references": ["a:b", "c:d"], "n": 3})


def test_detect_takes_any_keyword_through_opt_and_refuses_two_sources(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    samples = tmp_path / "samples.txt"
    samples.write_text("Einstein was born in Ulm.\n---\nHe developed relativity in Bern.\n")
    text = tmp_path / "text.txt"
    text.write_text("Einstein was born in Paris.")
    argv = ["detect", "selfcheck-unigram", "--file", str(text), "--samples-file", str(samples), "--json"]
    assert main([*argv, "--opt", "sentences=[Einstein was born in Paris.]"]) == 0
    result = halluscope.DetectionResult.from_json(capsys.readouterr().out)
    assert [u.text for u in result.units] == ["Einstein was born in Paris."] and result.meta.params["n"] == 2
    assert main([*argv, "--text", "Other."]) == 2
    assert "give --text or --file, not both" in capsys.readouterr().err
    assert main([*argv, "--opt", "no_such_option=1"]) == 2
    assert "selfcheck-unigram has no option 'no_such_option'" in capsys.readouterr().err
    assert main([*argv, "--opt", "samples=[a]"]) == 2
    assert "--opt samples repeats a flag" in capsys.readouterr().err


def test_a_need_is_met_by_any_of_its_names_and_says_what_each_is_for() -> None:
    from halluscope.runtime.contract import Need

    need = Need("model", "answers", model="to sample answers")
    assert need.met({"answers": ["Paris"]}) and need.met({"model": "local:smollm2-135m"})
    assert not need.met({"model": "  ", "answers": []})  # a blank text or an empty list gives nothing
    assert need.sentence(lambda name: f"--{name}") == "--model to sample answers, or --answers"
    assert METHODS["semantic-entropy"].problem({"question": "Q?"}) == (
        "semantic-entropy needs model to sample answers, or answers"
    )
    with pytest.raises(TypeError, match="why only for them"):
        Need("model", judge="to judge")


def test_a_method_module_declares_its_six_parts_by_name() -> None:
    from halluscope.methods import grounded
    from halluscope.runtime.contract import Method

    method = grounded.METHOD
    assert (method.name, method.summary, method.inputs, method.options, method.prepare, method.run) == (
        grounded.NAME, grounded.SUMMARY, grounded.Inputs, grounded.Options, grounded.prepare, grounded.run
    )  # fmt: skip
    assert method.presets["batch"] == {"batch": True}  # the one-call preset, declared once (runtime/options.py)
    with pytest.raises(TypeError, match=r"test_method_contract: a method module defines NAME, SUMMARY.*'Inputs'"):
        Method.from_module(__name__)
