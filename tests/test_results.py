"""Result types: the JSON every --json command prints round-trips."""

from halluscope.results import DetectionResult, RunMeta, TokenUsage, Unit


def test_detection_result_json_round_trip() -> None:
    result = DetectionResult(
        method="fibe",
        units=[
            Unit(text="He was born in 1983.", score=0.75, evidence={"answers": ["1982", "1983"]}),
            Unit(text="Unparsed.", score=None, parsed=False),
        ],
        meta=RunMeta(
            method="fibe",
            calls=7,
            cache_hits=2,
            tokens=TokenUsage(prompt=100, completion=20),
            models=["openai:gpt-4o-mini"],
            prompts=["fibe.create@1#abc"],
        ),
    )
    again = DetectionResult.from_json(result.to_json())
    assert again == result
    assert result.to_dict()["units"][0] == {
        "text": "He was born in 1983.",
        "score": 0.75,
        "probability": None,  # set only by a calibrated detector
        "parsed": True,
        "evidence": {"answers": ["1982", "1983"]},
    }
    assert result.meta.tokens.total == 120


def test_public_api_is_one_import() -> None:
    import halluscope

    for name in (
        "load_logprob_model",
        "LLMEntailment",
        "NLIEntailment",
        "Embedder",
        "Gateway",
        "CallStats",
        "PromptRegistry",
        "DetectionResult",
        "default_local_model",
    ):
        assert hasattr(halluscope, name) and name in halluscope.__all__
