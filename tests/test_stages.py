"""Stages that several graphs share: clustering answers by bidirectional entailment."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from halluscope.backends.entailment import Entailment, Judgement
from halluscope.backends.gateway import CallStats
from halluscope.backends.steps import finish
from halluscope.methods.sampling import clustering


class CityJudge(Entailment):
    """Entailment iff both texts name the same city; a sentence about Lyon only 'neutral' to Paris."""

    name = "city-judge"

    def __init__(self) -> None:
        self.pairs: list[tuple[str, str]] = []
        self.questions: set[str | None] = set()
        self._lock = threading.Lock()

    def judge_many(
        self, pairs: Sequence[tuple[str, str]], question: str | None = None, stats: CallStats | None = None
    ) -> list[Judgement]:
        with self._lock:
            self.pairs.extend(pairs)
            self.questions.add(question)
        city = lambda t: next((c for c in ("Paris", "Lyon", "Nice") if c in t), None)  # noqa: E731
        return [Judgement("entailment" if city(a) == city(b) else "neutral") for a, b in pairs]


def test_greedy_clusters_judge_each_pair_once_and_skip_identical_answers() -> None:
    answers = ["Paris.", "It is Paris.", "Paris.", "Lyon.", "It is Paris.", "Nice, surely.", "Lyon."]
    judge = CityJudge()
    clusters, pairs = finish(clustering(answers, judge, "Capital of France?"))
    assert clusters == [[0, 1, 2, 4], [3, 6], [5]]
    # 'It is Paris.' vs 'Paris.' (once: its repeat is remembered), 'Lyon.' vs 'Paris.', 'Nice' vs 'Paris.'
    # and vs 'Lyon.'; identical texts need no judge
    assert pairs == 4 and len(judge.pairs) == 2 * 4
    assert ("Paris.", "It is Paris.") in judge.pairs and ("It is Paris.", "Paris.") in judge.pairs  # both ways
    assert judge.questions == {"Capital of France?"}


def test_lax_mode_accepts_neutral_one_way() -> None:
    class OneWay(CityJudge):
        def judge_many(
            self, pairs: Sequence[tuple[str, str]], question: str | None = None, stats: CallStats | None = None
        ) -> list[Judgement]:
            return [Judgement("entailment" if a < b else "neutral") for a, b in pairs]

    strict, _ = finish(clustering(["a", "b"], OneWay(), mode="strict"))
    lax, _ = finish(clustering(["a", "b"], OneWay(), mode="lax"))
    assert strict == [[0], [1]] and lax == [[0, 1]]
