"""The method registry (issue 33): a method defined in a module of its own and registered the documented
way (an entry point of the 'halluscope.methods' group) reaches every door with nothing else edited;
import halluscope and the CLI's --help load no model stack; no import cycle."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

import halluscope
from halluscope import evaluators
from halluscope.cli import main
from halluscope.runtime import registry, studio

ROOT = Path(__file__).resolve().parents[1]
TOY = '''
"""A toy method: a sentence's risk is its length (a test of the registry, not a detector)."""

from dataclasses import dataclass

from halluscope.runtime import options
from halluscope.runtime.contract import Method, Need, Prepared, arg
from halluscope.results import DetectionResult, Unit
from halluscope.text import sentences


@dataclass(frozen=True, kw_only=True)
class Inputs:
    text: str | None = options.text()
    sentences: list[str] | None = options.sentences()


@dataclass(frozen=True, kw_only=True)
class Options:
    scale: float = arg(1.0, help="what a character weighs")


def prepare(opts, ctx):
    return Prepared(options=opts)


def run(prepared, inputs, ctx):
    found = inputs.sentences or sentences(inputs.text)
    units = [Unit(text=s, score=prepared.options.scale * len(s)) for s in found]
    return DetectionResult(method="toy-length", units=units, meta=ctx.meta("toy-length"))
    yield  # no model to wait on: steps that end at once


METHOD = Method(
    name="toy-length",
    summary="a toy: the longer the sentence, the riskier",
    inputs=Inputs,
    options=Options,
    prepare=prepare,
    run=run,
    question_field=None,
    answer_field="text",
    positional=("text",),
    needs=(Need("text", "sentences"),),
)
'''


@pytest.fixture
def toy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The toy module and a distribution that declares it under the 'halluscope.methods' entry point
    group, on the path: what `pip install` of a package with the documented pyproject entry does."""
    (tmp_path / "toy_method.py").write_text(textwrap.dedent(TOY))
    info = tmp_path / "toy_method-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-method\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[halluscope.methods]\ntoy-length = toy_method\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry.forget()
    yield "toy-length"
    monkeypatch.delitem(sys.modules, "toy_method", raising=False)
    registry.forget()


def test_a_method_registered_the_documented_way_reaches_every_door(
    toy: str, capsys: pytest.CaptureFixture[str]
) -> None:
    text = "Short. A much longer sentence."
    result = halluscope.detector(toy, scale=2.0).detect(text=text)
    assert [u.score for u in result.units] == [12.0, 46.0]
    with pytest.raises(SystemExit):
        main(["detect", "--help"])
    assert toy in capsys.readouterr().out
    assert main(["detect", toy, "--text", text, "--json"]) == 0
    assert halluscope.DetectionResult.from_json(capsys.readouterr().out).units[1].score == 23.0
    evaluate = evaluators.create_toy_length_evaluator()
    assert evaluate(inputs={"question": "Q?"}, outputs={"answer": text})["score"] == 23.0
    assert studio.config()["graphs"][toy] == "halluscope.runtime.studio:toy_length_graph"
    graph = asyncio.run(studio.toy_length_graph({"configurable": {}}))
    assert graph.invoke({"text": text})["result"]["units"][0]["score"] == 6.0
    assert toy in registry.sentence_methods()  # a member an ensemble may stack
    assert main(["methods"]) == 0 and toy in capsys.readouterr().out


HEAVY = ("torch", "spacy", "transformers", "ray", "sklearn", "matplotlib", "llama_cpp", "langchain_core")
CALL_MAIN = "from halluscope.cli import main\ntry:\n    main([{!r}])\nexcept SystemExit:\n    pass"


@pytest.mark.parametrize(
    ("what", "setup"),
    [
        ("import halluscope", "import halluscope"),
        ("halluscope --version", CALL_MAIN.format("--version")),
        ("halluscope --help", CALL_MAIN.format("--help")),
    ],
)
def test_import_halluscope_and_the_cli_help_load_no_model_stack(what: str, setup: str) -> None:
    probe = f"import sys\n{setup}\nprint('loaded:', ','.join(m for m in {HEAVY!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    loaded = done.stdout.strip().splitlines()[-1]
    assert loaded == "loaded:", f"{what} {loaded}"


def test_the_docs_reference_of_every_method_is_current() -> None:
    from halluscope.cli.methods import reference

    assert (ROOT / "docs" / "methods.md").read_text() == reference(), (
        "docs/methods.md is stale: run `halluscope methods --markdown > docs/methods.md`"
    )
