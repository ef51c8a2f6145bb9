"""`halluscope bench ...`: the papers' benchmark protocols, and --compare-prompt around any of them."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from halluscope.backends.entailment import entailment_judge, zero_shot_judge
from halluscope.bench import clue, icl, phr_synthetic, qa, truthfulqa, wikibio
from halluscope.bench.report import markdown_table
from halluscope.bench.runner import BenchResult
from halluscope.bench.wikibio import BENCH_METHODS
from halluscope.cli.common import data_option, gateway_of, print_json, registry, report_failures
from halluscope.errors import ConfigError
from halluscope.prompts.registry import parse_ref
from halluscope.scoring import CLUSTER_RULES
from halluscope.scoring.fewl import VARIANTS


def _mode(args: argparse.Namespace, default: str) -> Any:
    """--strict / --lax, else the method's own default (strict for short answers, lax for paragraphs)."""
    return "strict" if args.strict else "lax" if args.lax else default


def _fewl_options(args: argparse.Namespace) -> dict[str, Any]:
    """The reference side of FEWL, shared by both TruthfulQA benchmarks."""
    refs = args.reference or []
    if args.n is not None and len(refs) > 1:
        raise ConfigError(f"--diversify asks one --reference model for N answers; {len(refs)} references given")
    return {"references": refs, "n": args.n, "neighbours": args.neighbours, "wrong_model": args.wrong_model}


def _finish(args: argparse.Namespace, results: Sequence[BenchResult], lines: str) -> int:
    """Print the results (a person's lines, or the BenchResults without their items as JSON) and
    each failed item on stderr; the exit code says whether any failed."""
    what = results[0].bench
    status = report_failures([f for r in results for f in r.failures], what)
    if args.json:
        shown = [r.model_dump(mode="json", exclude={"items"}) for r in results]
        print_json(shown[0] if len(shown) == 1 else shown)
        return status
    print(lines)
    print(f"wrote {args.out}: results.json, report.md and plots")
    return status


def cmd_bench_wikibio(args: argparse.Namespace) -> int:
    gateway = gateway_of(args)
    judge = entailment_judge(args.judge, gateway) if args.judge else None
    results = wikibio.run_bench(
        args.method.split(","), args.out, args.data, args.limit, args.samples, not args.json, args.model, gateway, judge
    )
    return _finish(args, results, wikibio.describe(results))


def cmd_bench_qa(args: argparse.Namespace) -> int:
    if not args.model:
        raise ConfigError("bench qa needs --model to answer the questions (e.g. local:qwen2.5-coder-0.5b)")
    gateway = gateway_of(args)
    result = qa.run_qa_bench(
        args.dataset,
        args.out,
        not args.json,
        model=args.model,
        judge=entailment_judge(args.judge, gateway),
        gateway=gateway,
        data=args.data,
        limit=args.limit,
        n=args.samples,
        mode=_mode(args, "strict"),
        cluster_rule=args.cluster_rule,
    )
    return _finish(args, [result], qa.describe(result))


def cmd_bench_truthfulqa(args: argparse.Namespace) -> int:
    shown = _variant_list(args.method)
    gateway = gateway_of(args)
    result = truthfulqa.run_truthfulqa_bench(
        args.out, not args.json, gateway=gateway, data=args.data, limit=args.limit, **_fewl_options(args)
    )
    return _finish(args, [result], truthfulqa.describe_truthfulqa(result, shown))


def _variant_list(methods: str) -> list[str]:
    chosen = [m.strip() for m in methods.split(",") if m.strip()]
    unknown = [m for m in chosen if m not in VARIANTS]
    if unknown or not chosen:
        raise ConfigError(f"unknown --method {', '.join(unknown) or '(none)'}; known: {', '.join(VARIANTS)}")
    return chosen


def cmd_bench_truthfulqa_rank(args: argparse.Namespace) -> int:
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    gateway = gateway_of(args)
    result = truthfulqa.run_rank_bench(
        args.out,
        not args.json,
        models=models,
        gateway=gateway,
        mc=args.mc,
        data=args.data,
        limit=args.limit,
        **_fewl_options(args),
    )
    return _finish(args, [result], truthfulqa.describe_rank(result))


def _fewl_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--reference",
        action="append",
        metavar="SPEC",
        help="a reference model (repeat for N models; default: the default local model asked for 5 answers)",
    )
    p.add_argument("--diversify", dest="n", type=int, metavar="N", help="ask the one reference model for N answers")
    p.add_argument(
        "--neighbours", type=int, default=5, metavar="K", help="nearest questions of the penalty (default 5)"
    )
    p.add_argument(
        "--wrong-model", metavar="SPEC", help="the model that writes IW/CO answers (default: first reference)"
    )


def cmd_bench_clue(args: argparse.Namespace) -> int:
    gateway = gateway_of(args)
    result = clue.run_clue_bench(
        args.out,
        not args.json,
        model=args.model,
        scorer=zero_shot_judge(args.judge, gateway),
        gateway=gateway,
        data=args.data,
        limit=args.limit,
        n=args.samples,
        theta_h=args.theta_h,
        theta_l=args.theta_l,
        prefilter=args.prefilter,
    )
    return _finish(args, [result], clue.describe(result))


def _numbers(text: str, flag: str, kind: type[int] | type[float]) -> list[Any]:
    """A comma-separated --flag value as numbers of one kind; a bad one names the flag."""
    try:
        return [kind(part) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        what = "integers" if kind is int else "numbers"
        raise ConfigError(f"{flag} must be comma-separated {what}, got {text!r}") from exc


def cmd_bench_phr_synthetic(args: argparse.Namespace) -> int:
    result = phr_synthetic.run_phr_synthetic(
        args.out,
        not args.json,
        ns=_numbers(args.n, "--n", int),
        problems=args.problems,
        m=args.M,
        k=args.K,
        n_imagined=args.imagined,
        epsilon=args.epsilon,
        seed=args.seed,
    )
    return _finish(args, [result], markdown_table(result.metrics["rows"], phr_synthetic.COLUMNS, digits=4))


def cmd_bench_phr(args: argparse.Namespace) -> int:
    result = icl.run_phr_bench(
        args.task,
        args.out,
        not args.json,
        model=args.model,
        ns=_numbers(args.n, "--n", int),
        contexts=args.contexts,
        queries=args.queries,
        m=args.M,
        k=args.K,
        n_imagined=args.imagined,
        epsilons=_numbers(args.epsilon, "--epsilon", float),
        eval_size=args.eval_size,
        exact=not args.draws and not args.sampled,
        responses="sampled" if args.sampled else "distribution",
        reuse_prefix=not args.no_prefix_reuse,
        seed=args.seed,
        data=args.data,
    )
    table = markdown_table(result.metrics["rows"], icl.COLUMNS, digits=3)
    return _finish(
        args, [result], f"{table}\nrandom-guess error {result.metrics['random_error']:.2f}; {result.meta.cost()}"
    )


def _judge_options(p: argparse.ArgumentParser, who: str, strictness: bool) -> None:
    """--judge, and optionally --strict / --lax, for the methods that cluster answers by entailment."""
    p.add_argument(
        "--judge",
        metavar="SPEC",
        help=f"{who}: entailment judge, a model spec or nli:PATH (default: the default local model)",
    )
    if strictness:
        group = p.add_mutually_exclusive_group()
        group.add_argument(
            "--strict", action="store_true", help="equivalence = entailment both ways (semantic-entropy's default)"
        )
        group.add_argument(
            "--lax",
            action="store_true",
            help="equivalence = no contradiction, not both neutral (semantic-entropy-paragraph's default)",
        )
        p.add_argument(
            "--cluster-rule",
            choices=CLUSTER_RULES,
            default="paper",
            help="greedy clustering: an answer joins the first equivalent cluster (paper, default) or the "
            "last (the official code's get_semantic_ids); they differ only when the judge is not transitive",
        )


def cmd_bench_compare(args: argparse.Namespace) -> int:
    """The benchmark with prompt version A, then B, on the same items and the same cache; then the report."""
    from halluscope.bench.compare import compare_runs, prompt_pair

    prompt_id = parse_ref(args.compare_prompt)[0]
    chosen = [r for r in args.prompt if parse_ref(r)[0] == prompt_id]
    if len(chosen) > 1:
        raise ConfigError(f"--prompt names {prompt_id} more than once; give version A once")
    a, b = prompt_pair(registry(args), chosen[0] if chosen else None, args.compare_prompt)
    others = [r for r in args.prompt if parse_ref(r)[0] != prompt_id]
    out = Path(args.out)
    outs = (out / "A", out / "B")
    for label, prompt, run_out in (("A", a, outs[0]), ("B", b, outs[1])):
        print(f"== {label}: {prompt.ref}", file=sys.stderr)
        run_args = argparse.Namespace(**{**vars(args), "prompt": [*others, f"{prompt.id}@{prompt.version}"]})
        run_args.out, run_args.compare_prompt = str(run_out), None
        args.func(run_args)
    report = compare_runs(args.bench_command, (a, b), outs, out)
    if args.json:
        print_json({k: v for k, v in report.items() if k != "item_changes"})
        return 0
    for label in ("a", "b"):
        side = report[label]
        print(f"{label.upper()} {side['prompt']}: {side['calls']} calls made, {side['replayed']} replayed (cache)")
    moved = [r for r in report["metrics"] if r["a"] is not None and r["b"] is not None and r["a"] != r["b"]]
    for row in moved[:12]:
        print(f"  {row['metric']}: {row['a']:.4g} -> {row['b']:.4g}")
    print(
        f"{report['items_changed']} of {report['items_compared']} item scores changed; "
        f"wrote {out}/compare.md and compare.json"
    )
    return 0


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    """`bench BENCHMARK` for each protocol."""
    bench = sub.add_parser("bench", help="run a paper's benchmark protocol").add_subparsers(
        dest="bench_command", required=True, metavar="BENCHMARK"
    )
    p = bench.add_parser("wikibio", parents=[common], help="WikiBio GPT-3 hallucination (SelfCheckGPT/FIBE protocol)")
    p.add_argument(
        "--method",
        required=True,
        help="one or several methods, comma-separated: " + ", ".join(BENCH_METHODS),
    )
    p.add_argument("--model", help="model spec for model-based methods, e.g. local:qwen2.5-coder-1.5b")
    _judge_options(p, "semantic-entropy-paragraph", strictness=False)
    p.add_argument("--limit", type=int, help="only the first K passages")
    p.add_argument(
        "--samples",
        type=int,
        help="N: the dataset's samples SCGP and unigram use (of 20), and FIBE's exam answers (at most 10) "
        "(default 20, or 10 when a FIBE variant runs)",
    )
    p.set_defaults(func=cmd_bench_wikibio)

    p = bench.add_parser(
        "qa",
        parents=[common],
        help="closed-book QA (TriviaQA, SQuAD): semantic entropy's AUROC / AURAC protocol",
        description="Answer each question once at temperature 0.1 (graded against the dataset's answers) and "
        "M times at temperature 1 (scored by semantic entropy); report how well each score predicts wrong answers.",
    )
    p.add_argument("--dataset", required=True, choices=("triviaqa", "squad"))
    p.add_argument("--method", default="semantic-entropy", choices=("semantic-entropy",))
    p.add_argument("--model", help="model spec that answers, e.g. local:qwen2.5-coder-0.5b")
    _judge_options(p, "semantic entropy", strictness=True)
    p.add_argument("--samples", type=int, default=10, help="M: sampled answers per question (default 10)")
    p.add_argument("--limit", type=int, help="only the first K questions")
    p.set_defaults(func=cmd_bench_qa)

    p = bench.add_parser(
        "phr-synthetic",
        help="PHR exactness check: Algorithm 1 vs Definition 4 on exact Bayesian linear regression",
        description="Random problems per context size n; the PHR of Definition 4 and the THR of the true "
        "mechanism computed exactly, against Algorithm 1 (and Algorithm 3's aleatoric entropy) run on "
        "the model's samples and log-probabilities only.",
    )
    p.add_argument("--n", default="2,8,32", help="context sizes, comma-separated (default 2,8,32)")
    p.add_argument("--problems", type=int, default=100, help="problems per n (default 100)")
    p.add_argument("--M", type=int, default=40, help="imagined completions per problem (default 40)")
    p.add_argument("--K", type=int, default=2000, help="responses per quantile and per rate (default 2000)")
    p.add_argument("--imagined", type=int, default=100, help="N - n, imagined pairs per completion (default 100)")
    p.add_argument("--epsilon", type=float, default=0.05, help="the likely set's epsilon (default 0.05)")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=cmd_bench_phr_synthetic)

    p = bench.add_parser(
        "phr",
        help="PHR on an in-context learning task vs the model hallucination rate and the error rate",
        description="Jesson et al., Section 3.2: per context size n, response-balanced contexts, a disjoint "
        "D_eval and held-out queries (<= 116 tokens); the PHR against the MHR at the low epsilon and "
        "against the empirical error rate at the high one. Defaults are the paper's budget; on a CPU try "
        "--contexts 8 --queries 5 --M 5.",
    )
    p.add_argument("--task", required=True, choices=("sst2", "subj", "agnews", "rte", "wnli", "mqp"))
    p.add_argument("--n", default="2,4,8,16", help="context sizes, comma-separated (default 2,4,8,16)")
    p.add_argument("--contexts", type=int, default=50, help="contexts D_n per n (default 50)")
    p.add_argument("--queries", type=int, default=10, help="queries per context (default 10)")
    p.add_argument("--M", type=int, default=10, help="imagined completions per context (default 10)")
    p.add_argument("--K", type=int, default=50, help="responses per draw where drawn (default 50)")
    p.add_argument("--imagined", type=int, default=5, help="N - n, imagined pairs per completion (default 5)")
    p.add_argument("--eval-size", type=int, help="|D_eval| for the MHR (default: N - n)")
    p.add_argument(
        "--epsilon", default="0.05,0.75", help="low (vs MHR) and high (vs error) epsilon (default 0.05,0.75)"
    )
    p.add_argument(
        "--model",
        default="local:qwen2.5-coder-0.5b",
        help="a log-prob model spec (local:, transformers:, openai-compatible:)",
    )
    p.add_argument(
        "--draws", action="store_true", help="K draws from the next-token distribution instead of the exact computation"
    )
    p.add_argument(
        "--sampled",
        action="store_true",
        help="K sampled one-token responses scored by teacher forcing (any completion server)",
    )
    p.add_argument(
        "--no-prefix-reuse", action="store_true", help="evaluate every prompt from its first token (local GGUF models)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=cmd_bench_phr)

    p = bench.add_parser(
        "clue",
        parents=[common],
        help="CLUE's QA protocol on QNLI: U(c) vs answer concept scores, concept-level hallucination detection",
        description="Wang et al., Sections 5.1-5.2: per question, D_R / D_L / D_I answers; mean Pearson of U(c) "
        "with each answer's concept scores, and detection of hallucinated concepts on D_R against the "
        "question-relevance baseline (macro and micro AUROC/AUPRC).",
    )
    p.add_argument("--dataset", default="qnli", choices=("qnli",))
    p.add_argument("--limit", type=int, help="only the first K questions")
    p.add_argument("--model", default="local:qwen2.5-coder-1.5b", help="model that answers and extracts concepts")
    p.add_argument("--judge", metavar="SPEC", help="zero-shot scorer: a model spec or nli:PATH (default: local model)")
    p.add_argument("--samples", type=int, default=5, help="N outputs per question (default 5)")
    p.add_argument("--theta-h", type=float, default=0.6, help="S^a above it: entailed concept (default 0.6)")
    p.add_argument("--theta-l", type=float, default=0.2, help="S^a below it: hallucinated concept (default 0.2)")
    p.add_argument("--prefilter", type=float, metavar="COS", help="merge: ask only pairs with embedding cosine >= COS")
    p.set_defaults(func=cmd_bench_clue)

    p = bench.add_parser(
        "truthfulqa",
        parents=[common],
        help="FEWL on TruthfulQA v1: does the best answer score above the incorrect ones (Table 3, ablations)",
        description="Wei et al., Section 4.2: every labelled answer scored by FEWL; (a) best above the first "
        "incorrect answer, (b) best highest among all labelled answers; every ablation from one run.",
    )
    p.add_argument("--method", default="single,single+penalty,multi,fewl,fewl-uniform", help="variants to report")
    p.add_argument("--limit", type=int, help="only the first K questions")
    _fewl_arguments(p)
    p.set_defaults(func=cmd_bench_truthfulqa)

    p = bench.add_parser(
        "truthfulqa-rank",
        parents=[common],
        help="rank models by mean FEWL and by TruthfulQA MC1 accuracy; Kendall's tau",
        description="Wei et al., Section 4.3: each model answers the questions, FEWL ranks the models; the "
        "ground truth is each model's MC1 accuracy (log-probs for local models, else asked).",
    )
    p.add_argument("--models", required=True, help="models to rank, comma-separated specs")
    p.add_argument("--mc", default="auto", choices=("auto", "logprobs", "ask"), help="how MC1 is read (default auto)")
    p.add_argument("--limit", type=int, help="only the first K questions")
    _fewl_arguments(p)
    p.set_defaults(func=cmd_bench_truthfulqa_rank)
    for name, bench_parser in bench.choices.items():
        bench_parser.add_argument("--out", default=f"out/{name}", help=f"output directory (default out/{name})")
        bench_parser.add_argument("--json", action="store_true")
        if name != "phr-synthetic":  # the exactness check reads no data and calls no model
            data_option(bench_parser)
            bench_parser.add_argument(
                "--compare-prompt",
                metavar="ID@VERSION",
                help="run the benchmark twice, with --prompt ID@A (or the default version) and with this version, "
                "and write a side-by-side report (OUT/compare.md; the runs in OUT/A and OUT/B)",
            )
