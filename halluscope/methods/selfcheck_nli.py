"""SelfCheck-NLI: SelfCheckGPT's NLI variant, the one its authors recommend (Manakul et al. 2023).

Each sentence r_i against each sample S^j with an NLI classifier: score(i) = mean_j P(contradiction),
renormalised over entailment and contradiction (``scoring.selfcheck_nli_score``). As SelfCheckGPT's
``SelfCheckNLI``, the classifier reads the pair as (sentence, sample): its DeBERTa
(potsawee/deberta-v3-large-mnli, a two-way head without neutral; ``halluscope models pull
deberta-v3-large-mnli``, then ``judge="nli:deberta-v3-large-mnli"``) was fine-tuned with the hypothesis
first. The same samples and sentence split as SelfCheck-Prompt: given samples cost no call, and N
regenerated ones cost N (FIBE's E.1 prompt). The classifier runs one forward pass per batch of pairs.
"""

from __future__ import annotations

from dataclasses import dataclass

from halluscope.backends.entailment import NLIEntailment, judge_target, nli_checkpoint
from halluscope.backends.models import ModelLike
from halluscope.backends.providers.nli import nli_spec
from halluscope.backends.steps import Blocking, Steps
from halluscope.errors import ConfigError
from halluscope.methods.sampling import sampled_passage
from halluscope.results import DetectionResult, Unit
from halluscope.runtime import contract, options
from halluscope.runtime.contract import Flag, Method, Need, RunContext, arg
from halluscope.scoring.selfcheck import selfcheck_nli_score

NAME = "selfcheck-nli"
SUMMARY = "SelfCheck-NLI: how strongly an NLI classifier finds each sentence contradicted by the samples"
SELFCHECKGPT_NLI = "deberta-v3-large-mnli"  # potsawee/deberta-v3-large-mnli, SelfCheckGPT's: `models pull` fetches it


Inputs = options.SampledText  # SelfCheck-Prompt's item: a text, and its samples or their source


@dataclass(frozen=True, kw_only=True)
class Options:
    judge: NLIEntailment | str | None = arg(
        help=f"the NLI classifier: nli:{SELFCHECKGPT_NLI} (SelfCheckGPT's, after `halluscope models pull "
        f"{SELFCHECKGPT_NLI}`) or nli:PATH, a checkpoint directory",
        flags=(Flag(("--judge",), metavar="nli:NAME|PATH"),),
        refers="model",
    )
    model: ModelLike | None = options.model("writes the samples when none are given")
    n: int = options.samples(5, "samples regenerated when none are given")


@dataclass(frozen=True)
class Prepared(contract.Prepared):
    nli: NLIEntailment | None = None


def classifier(judge: NLIEntailment | str | None) -> NLIEntailment:
    """The NLI classifier from what a user passes: a loaded one, or nli:NAME (a pulled checkpoint) or
    nli:PATH (a checkpoint directory)."""
    if isinstance(judge, NLIEntailment):
        return judge
    nli, target = judge_target(judge, "an NLIEntailment") if isinstance(judge, str) else (False, "")
    if nli:
        return nli_checkpoint(target)
    raise ConfigError(
        f"SelfCheck-NLI needs an NLI classifier: judge='{nli_spec(SELFCHECKGPT_NLI)}' (SelfCheckGPT's, after "
        f"`halluscope models pull {SELFCHECKGPT_NLI}`) or '{nli_spec('PATH')}', a checkpoint directory, got {judge!r}"
    )


def prepare(opts: Options, ctx: RunContext) -> Prepared:
    """The classifier, loaded once."""
    return Prepared(options=opts, nli=classifier(opts.judge))


def run(prepared: Prepared, inputs: Inputs, ctx: RunContext) -> Steps[DetectionResult]:
    """Each sentence's mean P(contradiction) over the samples, the per-sample values in its evidence."""
    opts: Options = prepared.options
    _, found, samples, given = yield from sampled_passage(
        "SelfCheck-NLI", inputs, opts.model, opts.n, ctx.gateway, ctx.plan
    )
    assert prepared.nli is not None
    ctx.plan(prepared.nli.replies_for(len(found) * len(samples)))
    pairs = [(sentence, sample) for sentence in found for sample in samples]
    nli = prepared.nli  # P(contradiction) of each pair, renormalised over entailment and contradiction
    contradiction: list[float] = yield Blocking(lambda stats: [c for _, c in nli.two_way(pairs, stats)])
    per = len(samples)
    units = [
        Unit(
            text=sentence,
            score=selfcheck_nli_score(contradiction[i * per : (i + 1) * per]),
            evidence={"contradiction": contradiction[i * per : (i + 1) * per]},
        )
        for i, sentence in enumerate(found)
    ]
    meta = ctx.meta(NAME, n=len(samples), samples_given=given, judge=prepared.nli.name)
    return DetectionResult(method=NAME, units=units, meta=meta, evidence={"samples": samples})


METHOD = Method.from_module(
    __name__,
    scores=(0.0, 1.0),
    needs=(
        Need("text", "sentences"),
        Need("judge", judge=f"(nli:{SELFCHECKGPT_NLI} or nli:PATH, an NLI checkpoint)"),
    ),
    draws_samples=options.sampled_draw,
)
detect, adetect = METHOD.detect, METHOD.adetect
