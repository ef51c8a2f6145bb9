"""Planted falsehoods: short biographies of well-known people, written for halluscope, each with
exactly one false sentence (a wrong date or place). A sentence-level method hits a biography when
it ranks the planted sentence riskiest; the hit rate over the set is what the demo shows and what
`halluscope bench planted --method M` measures (a tie at the top counts as a miss: the method did
not single the falsehood out)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from halluscope.backends.gateway import CallStats, Gateway
from halluscope.backends.models import ModelLike, model_name
from halluscope.bench.benchmark import REQUIRED, Benchmark, Settings, option
from halluscope.bench.report import write_text
from halluscope.bench.runner import BenchResult, Plan, run
from halluscope.detectors import detector
from halluscope.errors import ConfigError
from halluscope.runtime import registry


@dataclass(frozen=True)
class Biography:
    person: str
    sentences: tuple[str, ...]
    planted: int  # the index of the false sentence
    truth: str  # what the planted sentence gets wrong

    @property
    def prompt(self) -> str:
        return f"This is a Wikipedia passage about {self.person}:"

    @property
    def documents(self) -> list[str]:
        """What a grounded check reads the biography against: its true sentences, then the planted
        detail stated right ("In fact, he was born in Ulm.")."""
        true = [s for i, s in enumerate(self.sentences) if i != self.planted]
        return [" ".join(true) + f" In fact, {self.truth}."]


BIOGRAPHIES = (
    Biography(
        "Albert Einstein",
        (
            "Albert Einstein was a German-born theoretical physicist.",
            "He developed the theory of relativity.",
            "He received the Nobel Prize in Physics in 1921.",
            "Einstein was born in Paris, France, in 1879.",
            "He died in Princeton, New Jersey, in 1955.",
        ),
        3,
        "he was born in Ulm",
    ),
    Biography(
        "Marie Curie",
        (
            "Marie Curie was a physicist and chemist born in Warsaw.",
            "She did pioneering research on radioactivity.",
            "She was the first woman to win a Nobel Prize.",
            "She discovered the elements polonium and radium.",
            "She died in Buenos Aires in 1962.",
        ),
        4,
        "she died in Passy, France, in 1934",
    ),
    Biography(
        "Isaac Newton",
        (
            "Isaac Newton was an English mathematician and physicist.",
            "He formulated the laws of motion and universal gravitation.",
            "He published the Principia in 1887.",
            "He served as president of the Royal Society.",
            "He was buried in Westminster Abbey.",
        ),
        2,
        "the Principia appeared in 1687",
    ),
    Biography(
        "Ada Lovelace",
        (
            "Ada Lovelace was an English mathematician and writer.",
            "She was the daughter of the poet Lord Byron.",
            "She was born in Tokyo, Japan.",
            "She wrote notes on Charles Babbage's Analytical Engine.",
            "She is often called one of the first computer programmers.",
        ),
        2,
        "she was born in London",
    ),
    Biography(
        "Leonardo da Vinci",
        (
            "Leonardo da Vinci was an Italian painter of the Renaissance.",
            "He painted the Mona Lisa.",
            "He painted The Last Supper in Milan.",
            "He filled notebooks with drawings of machines and anatomy.",
            "He died in Moscow in 1819.",
        ),
        4,
        "he died in Amboise, France, in 1519",
    ),
    Biography(
        "Charles Darwin",
        (
            "Charles Darwin was an English naturalist.",
            "He sailed around the world on HMS Beagle.",
            "He published On the Origin of Species in 1959.",
            "He proposed the theory of evolution by natural selection.",
            "He was buried in Westminster Abbey.",
        ),
        2,
        "On the Origin of Species appeared in 1859",
    ),
    Biography(
        "Wolfgang Amadeus Mozart",
        (
            "Wolfgang Amadeus Mozart was a composer of the Classical period.",
            "He was born in Salzburg.",
            "He composed the opera The Magic Flute.",
            "He wrote more than six hundred works.",
            "He died in Chicago in 1891.",
        ),
        4,
        "he died in Vienna in 1791",
    ),
    Biography(
        "Nelson Mandela",
        (
            "Nelson Mandela was a South African anti-apartheid leader.",
            "He spent twenty-seven years in prison.",
            "He became President of South Africa in 1994.",
            "He shared the Nobel Peace Prize in 1993.",
            "He was born in Norway.",
        ),
        4,
        "he was born in Mvezo, South Africa",
    ),
)


def riskiest(scores: list[float | None]) -> list[int]:
    """The sentences that share the highest score (one, unless the method ties them)."""
    top = max(s for s in scores if s is not None)
    return [i for i, s in enumerate(scores) if s == top]


def planted_plan(method: str, *, model: ModelLike, gateway: Gateway, n: int = 3) -> Plan:
    """Each biography scored by ``method`` (SelfCheck-Prompt regenerates ``n`` passages; FIBE's exam
    is answered ``n`` times; a grounded method reads ``Biography.documents``); a hit when the planted
    sentence alone scores highest."""
    if method not in registry.sentence_methods():
        choices = ", ".join(registry.sentence_methods())
        raise ConfigError(f"bench planted scores sentences: {method!r} does not; available: {choices}")
    name, options = registry.configured(method)
    if "n" in inspect.signature(registry.get(name).detect).parameters:
        options["n"] = n
    det = detector(name, model, gateway=gateway, **options)
    stats = CallStats()

    def score(bio: Biography) -> dict[str, Any]:
        context = {det.spec.question_field: bio.prompt} if det.spec.question_field else {}
        if det.spec.context_field:  # a grounded method checks the biography against its documents
            context[det.spec.context_field] = bio.documents
        result = det.detect(text=" ".join(bio.sentences), sentences=list(bio.sentences), stats=stats, **context)
        scores = [u.score for u in result.units]
        top = riskiest(scores)
        return {
            "person": bio.person,
            "sentences": list(bio.sentences),
            "labels": ["planted" if i == bio.planted else "true" for i in range(len(bio.sentences))],
            "planted": bio.planted,
            "riskiest": top,
            "hit": top == [bio.planted],
            "events": dict(result.meta.events),
            "scores": {f"sentence {i}": s for i, s in enumerate(scores)},
        }

    return Plan(
        bench="planted",
        method=method,
        what="biography",
        items=BIOGRAPHIES,
        item_id=lambda bio: bio.person,
        score=score,
        summarise=lambda records: {
            "biographies": len(records),
            "hits": sum(r["hit"] for r in records),
            "hit_rate": sum(r["hit"] for r in records) / len(records),
            "chance": 1 / len(BIOGRAPHIES[0].sentences),
        },
        params={"method": method, "model": model_name(model), "n": n},
        report=_write_report,
        stats=stats,
        per_score={"sentences": "sentence", "labels": "label"},
        positive=("planted",),
    )


def run_planted(method: str, out: str | Path, progress: bool = True, **options: Any) -> BenchResult:
    """Every biography scored by ``method`` (``planted_plan``'s options); results.json and report.md."""
    return run(planted_plan(method, **options), out, progress)


def describe(result: BenchResult) -> str:
    """Hit or miss per biography, then the hit rate."""
    lines = []
    for item in result.items:
        r = item.record
        mark = "hit " if r["hit"] else "miss"
        bio = next(b for b in BIOGRAPHIES if b.person == r["person"])
        lines.append(f"  {mark}  {r['person']}: riskiest '{bio.sentences[r['riskiest'][0]]}'")
    m = result.metrics
    lines.append(
        f"{result.params['method']}: {m['hits']} of {m['biographies']} planted falsehoods ranked riskiest "
        f"(hit rate {m['hit_rate']:.2f}; chance {m['chance']:.2f}); {result.meta.cost()}"
    )
    return "\n".join(lines)


def _write_report(result: BenchResult, out: Path, failed: str) -> None:
    write_text(
        out / "report.md",
        f"# Planted falsehoods: {result.params['method']} on {result.params['model']}\n\n"
        + describe(result).replace("\n", "\n\n")
        + "\n"
        + failed,
    )


@dataclass(frozen=True, kw_only=True)
class PlantedSettings(Settings):
    method: str = option(REQUIRED, "a method that scores sentences (halluscope methods lists them)", "--method")
    model: str = option(REQUIRED, "model spec, e.g. local:qwen2.5-coder-1.5b", "--model")
    n: int = option(3, "N: SelfCheck's regenerated passages, FIBE's exam answers", "--samples", type=int)


def _plans(settings: PlantedSettings, gateway: Callable[[], Gateway]) -> list[Plan]:
    return [planted_plan(settings.method, model=settings.model, gateway=gateway(), n=settings.n)]


BENCHMARK = Benchmark(
    name="planted",
    help="our planted-falsehood biographies: does a method rank the false sentence riskiest",
    description=__doc__ or "",
    settings=PlantedSettings,
    plans=_plans,
    describe=lambda results, _settings: describe(results[0]),
)
