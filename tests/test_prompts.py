"""Prompt registry: rendering, validation, user directories, selection and hash stability."""

from __future__ import annotations

from pathlib import Path

import pytest

from halluscope.errors import PromptError
from halluscope.prompts.registry import PromptRegistry, load_prompt_file, parse_ref

# Version 1 of every prompt is the paper's prompt: an edit of v1 must fail here (add v2 instead).
V1_HASHES = {
    "clue.concepts@1": "45f81d09637e",
    "clue.sample@1": "983907ae2f15",
    "clue.zero_shot@1": "e50b311a7cb3",
    "fewl.answer@1": "c80018c253b1",
    "fewl.diverse_answers@1": "393eb5b2b95d",
    "fewl.icl_qa@1": "5df878af23bc",
    "fewl.iw_co@1": "e011fc6be2fb",
    "fewl.multiple_choice@1": "0cdb6d7caf84",
    "fibe.answer@1": "cfe46f5bd2f2",
    "fibe.create@1": "9a102f69a866",
    "fibe.direct_question@1": "d8303b601c5e",
    "fibe.direct_question_all@1": "7bf000aff392",  # halluscope's own one-call Direct Question (issue 45)
    "fibe.score@1": "ecb3f1db50c8",
    "grounded.support@1": "6765d01cb36e",
    "grounded.support_all@1": "48817bd90c94",  # halluscope's own one-call grounded check (issue 45)
    "guard.revise@1": "872846c069c3",
    "guard.revise_grounded@1": "c0df9090c1b0",
    "probe.grounded@1": "b72c809454db",
    "guard.reask@1": "5c2295f6cc7c",
    "phr.example@1": "e4b9af7f0e67",
    "phr.query@1": "6f07903df8ee",
    "selfcheck.prompt@1": "cc05fb6a6047",
    "selfcheck.prompt_all@1": "b0e3d5a72403",  # halluscope's own one-call SelfCheck-Prompt (issue 45)
    "selfcheck.regenerate@1": "4e26c08cf6fb",
    "selfcheck.resample@1": "a9f2e77806a0",
    "synth.claim@1": "b827dc2c620d",  # halluscope's claim for pairs labelled by construction (issue 72)
    "semantic_entropy.answer@1": "8329885860b0",
    "semantic_entropy.decompose@1": "e1e8943f194d",
    "semantic_entropy.entailment@1": "dc726e04a7e8",
    "semantic_entropy.new_answer@1": "34a1fe785bef",
    "semantic_entropy.new_answer_first@1": "d148385b09f9",
    "semantic_entropy.questions@1": "c82e8e46b2dc",
    "semantic_entropy.questions_first@1": "d128f2b87d39",
}

USER_V2 = """\
id: selfcheck.prompt
version: 2
source: my experiment
params: {temperature: 0.0}
parser: yes_no
messages:
  - role: user
    content: "Context: {context}\\nDoes it support: {sentence}? Yes or No:"
"""


def test_every_seed_prompt_is_packaged_at_v1_with_a_pinned_hash() -> None:
    reg = PromptRegistry()
    assert {f"{p.id}@{p.version}": p.content_hash for p in reg.all()} == V1_HASHES


def test_v1_prompts_carry_the_papers_parameters() -> None:
    reg = PromptRegistry()
    assert reg.get("fibe.answer").params == {"temperature": 0.5, "top_p": 1.0, "seed": 0}
    assert reg.get("fibe.score").params["temperature"] == 0.0
    assert reg.get("selfcheck.regenerate").params["temperature"] == 1.0
    assert reg.get("phr.example").params == {"temperature": 1.0, "top_p": 0.9, "max_tokens": 200}
    assert reg.get("clue.concepts").params == {"temperature": 0.0}
    for p in reg.all():
        assert p.source.strip(), f"{p.id} names no source"


def test_render_fills_placeholders_and_keeps_literal_braces() -> None:
    reg = PromptRegistry()
    messages = reg.get("semantic_entropy.questions").render(
        text_so_far="He was born in 1950.", claim="He is a chemist."
    )
    assert messages == [{"role": "user", "content": messages[0]["content"]}]
    content = messages[0]["content"]
    assert "Following this text:\nHe was born in 1950.\nYou see the sentence:\nHe is a chemist.\n" in content
    assert content.endswith('Use the format "1. {question} - {answer}"')
    scgp = reg.get("selfcheck.prompt").render(context="CTX", sentence="SENT")
    assert scgp[0] == {"role": "system", "content": "You are a helpful assistant."}
    assert scgp[1]["content"] == (
        "Context: CTX\n\nSentence: SENT\n\nIs the sentence supported by the context above? Answer Yes or No:"
    )


def test_completion_prompts_render_the_papers_icl_format() -> None:
    reg = PromptRegistry()
    example = reg.get("phr.example").render_text(x="the film is great", y="subjective")
    query = reg.get("phr.query").render_text(x="a plot summary")
    assert example + query == "Input: the film is great\nLabel: subjective\n\nInput: a plot summary\nLabel:"
    with pytest.raises(PromptError, match="completion text"):
        reg.get("phr.query").render(x="a")


def test_missing_and_unknown_variables_are_named() -> None:
    prompt = PromptRegistry().get("selfcheck.prompt")
    with pytest.raises(PromptError, match=r"missing sentence"):
        prompt.render(context="c")
    with pytest.raises(PromptError, match=r"unknown sentense"):
        prompt.render(context="c", sentence="s", sentense="typo")


def test_unknown_prompt_and_version_are_clear_errors() -> None:
    reg = PromptRegistry()
    with pytest.raises(PromptError, match="unknown prompt 'fibe.creat'"):
        reg.get("fibe.creat")
    with pytest.raises(PromptError, match="has no version 7; versions: 1"):
        reg.get("fibe.create@7")
    with pytest.raises(PromptError, match="bad prompt reference"):
        parse_ref("fibe.create@latest")


def test_user_directory_adds_a_version_that_is_used_only_when_selected(tmp_path: Path) -> None:
    (tmp_path / "mine.yaml").write_text(USER_V2)
    reg = PromptRegistry([tmp_path])
    assert reg.versions("selfcheck.prompt") == [1, 2]
    assert reg.get("selfcheck.prompt").version == 1  # the paper's prompt stays the default
    chosen = PromptRegistry([tmp_path], selections=["selfcheck.prompt@2"]).get("selfcheck.prompt")
    assert chosen.version == 2
    assert chosen.render(context="C", sentence="S")[0]["content"] == "Context: C\nDoes it support: S? Yes or No:"


def test_user_directory_overrides_a_packaged_version_and_the_hash_shows_it(tmp_path: Path) -> None:
    (tmp_path / "override.yaml").write_text(USER_V2.replace("version: 2", "version: 1"))
    reg = PromptRegistry([tmp_path])
    prompt = reg.get("selfcheck.prompt@1")
    assert prompt.source == "my experiment"
    assert reg.is_override(prompt)
    assert prompt.content_hash != V1_HASHES["selfcheck.prompt@1"]


def test_environment_variable_names_prompt_directories(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "mine.yaml").write_text(USER_V2)
    monkeypatch.setenv("HALLUSCOPE_PROMPTS", str(tmp_path))
    assert PromptRegistry.from_env().versions("selfcheck.prompt") == [1, 2]


def test_hash_is_stable_across_loads_and_changes_with_content(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(USER_V2)
    first, again = load_prompt_file(path), load_prompt_file(path)
    assert first.content_hash == again.content_hash and len(first.content_hash) == 12
    assert first.ref == f"selfcheck.prompt@2#{first.content_hash}"
    path.write_text(USER_V2.replace("Yes or No", "Yes or no"))
    assert load_prompt_file(path).content_hash != first.content_hash
    path.write_text(USER_V2.replace("temperature: 0.0", "temperature: 0.7"))
    assert load_prompt_file(path).content_hash != first.content_hash
    path.write_text(USER_V2.replace("source: my experiment", "source: renamed"))
    assert load_prompt_file(path).content_hash == first.content_hash  # provenance text is not content


@pytest.mark.parametrize(
    ("text", "match"),
    [
        (
            "id: x\nversion: 1\nsource: s\nparser: nope\nmessages: [{role: user, content: hi}]\n",
            "unknown parser 'nope'",
        ),
        ("id: x\nversion: 1\nsource: s\nparser: text\n", "exactly one of 'messages'"),
        ("id: x\nversion: 1\nsource: s\nparser: text\nmessages: [{role: user, content: 'a {b!r}'}]\n", "plain name"),
        ("id: x\nversion: 0\nsource: s\nparser: text\ntext: hi\n", "version"),
        ("just a string\n", "must hold a mapping"),
    ],
)
def test_malformed_prompt_files_name_the_problem(tmp_path: Path, text: str, match: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(PromptError, match=match):
        load_prompt_file(path)


def test_missing_prompt_directory_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(PromptError, match="does not exist"):
        PromptRegistry([tmp_path / "nowhere"])


def test_a_prompt_names_the_variables_the_gateway_always_fences(tmp_path: Path) -> None:
    """grounded.support fences its documents whatever the gateway's --delimit; a name no message uses is refused."""
    assert PromptRegistry().get("grounded.support").fenced == ["context", "question", "sentence"]
    assert "fenced" not in PromptRegistry().get("selfcheck.prompt").to_yaml()  # the default stays unwritten
    bad = tmp_path / "x.v1.yaml"
    bad.write_text(
        "id: x\nversion: 1\nsource: test\nparser: text\nfenced: [nothing]\n"
        "messages:\n  - role: user\n    content: '{a}'\n"
    )
    with pytest.raises(PromptError, match="fenced names nothing"):
        load_prompt_file(bad)
