"""Result types: the JSON every --json command prints round-trips; a batch as a table (pandas, CSV)."""

import json
from pathlib import Path

import pytest

from halluscope.bench.report import write_csv
from halluscope.errors import ConfigError
from halluscope.results import ROW_COLUMNS, DetectionResult, RunMeta, TokenUsage, Unit


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
        "spans": [],  # set by a detector, from the answer it checked
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


def _batch() -> list[DetectionResult]:
    calibrated = DetectionResult(
        method="direct-question",
        units=[
            Unit(text="Paris is in France.", score=0.1, probability=0.2, evidence={"answer": "Yes"}),
            Unit(text="It has 900 towers.", score=0.9, probability=0.8, evidence={"answer": "No"}),
        ],
        meta=RunMeta(method="direct-question"),
    )
    failed = DetectionResult(
        method="direct-question", units=[], meta=RunMeta(method="direct-question"), error="ConfigError: empty"
    )
    raw = DetectionResult(method="direct-question", units=[Unit(text="A.", score=0.4)], meta=RunMeta(method="m"))
    return [calibrated, failed, raw]


def test_a_batch_is_one_dataframe_a_row_per_unit_and_nothing_dropped() -> None:
    import halluscope

    frame = halluscope.to_pandas(_batch())
    assert list(frame.columns) == list(ROW_COLUMNS)
    assert frame["item"].tolist() == [0, 0, 1, 2] and frame["text"].tolist()[:2] == [
        "Paris is in France.",
        "It has 900 towers.",
    ]
    # calibrated: judged at p >= 0.5; a raw result without a threshold: no verdict, flagged empty
    assert frame["flagged"].tolist()[:2] == [False, True] and frame["flagged"].isna().tolist()[2:] == [True, True]
    assert frame.loc[2, "error"] == "ConfigError: empty" and frame["evidence"].tolist()[1] == {"answer": "No"}
    judged = halluscope.to_pandas(_batch(), threshold=0.3)  # a threshold given: on each one's probability or score
    assert judged["flagged"].tolist() == [False, True, None, True]
    one = _batch()[0].to_pandas(threshold=0.1)
    assert one["flagged"].tolist() == [True, True] and one["probability"].tolist() == [0.2, 0.8]
    with pytest.raises(ConfigError, match="to_pandas takes DetectionResults"):
        halluscope.to_pandas([{"text": "a"}])  # type: ignore[list-item]


def test_rows_written_as_csv_read_back_in_pandas(tmp_path: Path) -> None:
    import pandas as pd

    batch = _batch()
    for result in batch:
        result.decide(0.5)
    path = tmp_path / "units.csv"
    write_csv(path, [row for i, r in enumerate(batch) for row in r.rows(i)], ROW_COLUMNS)
    frame = pd.read_csv(path)
    assert frame["text"].tolist()[:2] == ["Paris is in France.", "It has 900 towers."]
    assert frame["flagged"].tolist()[:2] == [False, True] and json.loads(frame["evidence"][0]) == {"answer": "Yes"}
    assert frame["error"][2] == "ConfigError: empty" and frame["score"][3] == 0.4
