"""The `halluscope` command line. Errors a user can fix print as one line and exit 2."""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from tqdm import tqdm

from halluscope.backends.cache import CallCache, default_cache_dir, move_aside
from halluscope.backends.entailment import entailment_judge, zero_shot_judge
from halluscope.backends.gateway import DEFAULT_TIMEOUT, CallStats, Gateway
from halluscope.backends.local import ModelNotInstalledError, default_local_model, registry_rows
from halluscope.demo import print_report, run_demo
from halluscope.errors import CacheError, ConfigError, HalluscopeError, redact_credentials
from halluscope.evaluators.datasets import data_root, list_datasets, source_summary
from halluscope.prompts.registry import PromptRegistry, parse_ref, prompt_diff
from halluscope.results import DetectionResult, Unit
from halluscope.scoring import CLUSTER_RULES


def _data_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", metavar="DIR", help="benchmark data directory (default: HALLUSCOPE_DATA)")


def _common() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    g = common.add_argument_group("prompts, cache and calls")
    g.add_argument(
        "--prompts",
        action="append",
        default=[],
        metavar="DIR",
        help="directory of your own prompt YAML files (adds versions or overrides; also HALLUSCOPE_PROMPTS)",
    )
    g.add_argument(
        "--prompt",
        action="append",
        default=[],
        metavar="ID@VERSION",
        help="use this version of a prompt, e.g. fibe.create@2 (repeatable)",
    )
    g.add_argument(
        "--cache-dir",
        metavar="DIR",
        help="model-call cache directory (default: HALLUSCOPE_CACHE_DIR or the user cache dir)",
    )
    g.add_argument("--no-cache", action="store_true", help="neither read nor write the model-call cache")
    g.add_argument("--concurrency", type=int, help="concurrent calls per model (default: HALLUSCOPE_CONCURRENCY or 4)")
    g.add_argument("--yes", action="store_true", help=f"run even with more than {SAMPLES_WITHOUT_YES} samples per item")
    g.add_argument(
        "--delimit",
        action="store_true",
        help="fence the user text in every prompt in triple quotes (a text cannot pose as the prompt); "
        "off by default: version 1 prompts are the papers' own (HALLUSCOPE_DELIMIT=1 turns it on)",
    )
    g.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help="seconds one model request may take before it is retried "
        f"(default: HALLUSCOPE_TIMEOUT or {DEFAULT_TIMEOUT:g})",
    )
    return common


SOME_FAILED = 1  # exit code of a benchmark that finished with some items failed (listed in its results)
SAMPLES_WITHOUT_YES = 100  # more samples per item than this is likely a typo: it needs --yes


def _check_counts(args: argparse.Namespace) -> None:
    """--samples and --limit must be >= 1 (0 once meant 'the default' and --limit -1 'all but the last');
    a sample count that would run for days needs --yes."""
    for flag in ("samples", "limit"):
        value = getattr(args, flag, None)
        if value is not None and value < 1:
            raise ConfigError(f"--{flag} must be at least 1, got {value}")
    samples = getattr(args, "samples", None)
    if samples is not None and samples > SAMPLES_WITHOUT_YES and not getattr(args, "yes", False):
        raise ConfigError(
            f"--samples {samples} asks for {samples:,} model samples per item (more than {SAMPLES_WITHOUT_YES}); "
            "pass --yes to run it anyway"
        )


def _report_failures(failed: list[dict[str, Any]], what: str) -> int:
    """Each item a benchmark could not score, one line on stderr; the exit code says whether any failed."""
    for f in failed:
        print(f"halluscope: {what} {f['item']} failed: {redact_credentials(f['error'])}", file=sys.stderr)
    return SOME_FAILED if failed else 0


def _registry(args: argparse.Namespace) -> PromptRegistry:
    return PromptRegistry.from_env(args.prompts, args.prompt)


def _gateway(args: argparse.Namespace) -> Gateway:
    cache = None if args.no_cache else CallCache(args.cache_dir)
    if args.timeout is not None and not args.timeout > 0:
        raise ConfigError(f"--timeout must be a positive number of seconds, got {args.timeout:g}")
    if args.concurrency is not None and args.concurrency < 1:
        raise ConfigError(f"--concurrency must be at least 1, got {args.concurrency}")
    return Gateway.from_env(cache, _registry(args), args.concurrency, args.timeout, args.delimit)


def _print_json(obj: Any) -> None:
    print(redact_credentials(json.dumps(obj, indent=2, ensure_ascii=False)))


# ---------------------------------------------------------------- commands


def cmd_demo(args: argparse.Namespace) -> int:
    report = run_demo(_gateway(args), args.model, args.judge, progress=not args.json)
    if args.json:
        print(report.to_result().to_json())
    else:
        print_report(report, sys.stdout)
    return 0


def cmd_prompts_list(args: argparse.Namespace) -> int:
    reg = _registry(args)
    rows = [
        {
            "ref": p.ref,
            "id": p.id,
            "version": p.version,
            "default": reg.default_version(p.id) == p.version,
            "override": reg.is_override(p),
            "kind": p.kind,
            "source": p.source,
        }
        for p in reg.all()
    ]
    if args.json:
        _print_json(rows)
        return 0
    width = max(len(f"{r['id']}@{r['version']}") for r in rows)
    for r in rows:
        mark = ("*" if r["default"] else " ") + ("o" if r["override"] else " ")
        ref = f"{r['id']}@{r['version']}"
        print(f"{mark} {ref:<{width}}  {r['source']}")
    print("\n* default version   o overridden by a file of yours")
    return 0


def cmd_prompts_show(args: argparse.Namespace) -> int:
    p = _registry(args).get(args.ref)
    print(f"# {p.ref}  ({p.path})")
    print(p.to_yaml(), end="")
    return 0


def cmd_prompts_diff(args: argparse.Namespace) -> int:
    reg = _registry(args)
    a, b = reg.get(args.a), reg.get(args.b)
    text = prompt_diff(a, b)
    print(text if text else f"{a.ref} and {b.ref} are identical", end="" if text else "\n")
    return 0


def _key_values(pairs: Sequence[str], what: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"{what} {pair!r} must be KEY=VALUE")
        try:
            out[key] = yaml.safe_load(value) if what == "--param" else value
        except yaml.YAMLError:
            out[key] = value
    return out


def cmd_prompts_run(args: argparse.Namespace) -> int:
    gateway = _gateway(args)
    prompt = gateway.registry.get(args.ref)
    stats = CallStats()
    gateway.model(args.model)  # a missing key or bad spec fails before any progress is drawn
    with tqdm(total=args.samples, desc=prompt.id, disable=args.json or args.samples <= 3, leave=False) as bar:
        replies = gateway.sample(
            args.model,
            prompt,
            _key_values(args.var, "--var"),
            args.samples,
            stats=stats,
            on_reply=lambda _reply: bar.update(),
            **_key_values(args.param, "--param"),
        )
    result = DetectionResult(
        method=f"prompt:{prompt.id}",
        units=[
            Unit(
                text=r.text,
                score=None,
                parsed=r.ok,
                evidence={
                    "sample_index": r.sample_index,
                    "parsed": r.parsed,
                    "parse_error": r.parse_error,
                    "cached": r.cached,
                },
            )
            for r in replies
        ],
        meta=stats.meta(f"prompt:{prompt.id}"),
    )
    if args.json:
        print(result.to_json())
        return 0
    for r in replies:
        print(f"--- sample {r.sample_index}{' (cached)' if r.cached else ''}")
        print(r.text)
        print(f"parsed: {json.dumps(r.parsed, ensure_ascii=False)}" if r.ok else f"PARSE FAILURE: {r.parse_error}")
    m = result.meta
    tokens = f"{m.tokens.prompt}+{m.tokens.completion} tokens"
    print(f"\n{prompt.ref}: {m.calls} calls, {m.cache_hits} cache hits, {tokens}, {m.seconds:.2f} s")
    return 0


def cmd_cache_stats(args: argparse.Namespace) -> int:
    stats = CallCache(args.cache_dir).stats()
    if args.json:
        _print_json(stats)
    else:
        print(f"{stats['directory']}: {stats['entries']} cached calls, {stats['bytes'] / 1e6:.2f} MB")
    return 0


def cmd_cache_clear(args: argparse.Namespace) -> int:
    """Empty the cache; a database that cannot be opened or cleared is moved aside and a new one made."""
    directory = Path(args.cache_dir) if args.cache_dir else default_cache_dir()
    try:
        removed = CallCache(directory).clear()
    except CacheError:
        moved = move_aside(directory)
        if moved is None:
            raise
        CallCache(directory).close()
        print(f"moved the damaged cache database aside to {moved}; {directory} now holds an empty cache")
        return 0
    print(f"removed {removed} cached calls from {directory}")
    return 0


DETECT_METHODS = (
    "semantic-entropy",
    "semantic-entropy-paragraph",
    "clue",
    "fewl",
    "selfcheck-prompt",
    "selfcheck-unigram",
    "fibe",
    "fibe+dq",
    "fibe+sbc",
    "fibe+sbc+dq",
    "fibe+selfcheck+sbc",
    "fibe+selfcheck+sbc+dq",
    "phr",
)


def _read_file(path: str, flag: str) -> str:
    """A user's text file as UTF-8 text; an unreadable, binary or non-UTF-8 file is one clear error."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read {flag} {path}: {exc}") from exc
    if b"\x00" in raw:
        raise ConfigError(f"{flag} {path} is a binary file, not text")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{flag} {path} is not UTF-8 text (byte {raw[exc.start]:#04x} at offset {exc.start}); "
            "convert it, e.g. iconv -f latin1 -t utf-8"
        ) from exc


def _read_json_list_or_text(path: str, flag: str) -> tuple[Any, str]:
    """A user's file as (its JSON, its text) when it opens with '[', else (None, its text)."""
    text = _read_file(path, flag)
    if not text.lstrip().startswith("["):
        return None, text
    try:
        return json.loads(text), text
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{flag} {path} is not valid JSON: {exc}") from exc


def _read_texts(path: str, flag: str, what: str, one_per_line: bool = False) -> list[str]:
    """A JSON list of strings, or plain text: one per line, or separated by lines of '---'."""
    texts, text = _read_json_list_or_text(path, flag)
    if texts is not None:
        if not isinstance(texts, list) or not all(isinstance(x, str) for x in texts):
            raise ConfigError(f"{flag} {path} must hold a JSON list of strings")
    elif one_per_line:
        texts = text.splitlines()
    else:
        texts = re.split(r"^---\s*$", text, flags=re.MULTILINE)
    texts = [x.strip() for x in texts if x.strip()]
    if not texts:
        raise ConfigError(f"{flag} {path} holds no {what}")
    return texts


def _read_samples(path: str, flag: str = "--samples-file") -> list[str]:
    return _read_texts(path, flag, "samples")


def cmd_semantic_entropy(args: argparse.Namespace) -> int:
    from halluscope.graphs import semantic_entropy

    if not args.question or not args.question.strip():
        raise ConfigError("semantic-entropy needs --question")
    answers = _read_samples(args.answers_file, "--answers-file") if args.answers_file else None
    if answers is None and not args.model:
        raise ConfigError("semantic-entropy needs --model to sample answers, or --answers-file")
    gateway = _gateway(args)
    with tqdm(desc=args.method, unit=" step", leave=False, disable=args.json) as bar:
        result = semantic_entropy.detect(
            args.question,
            model=args.model,
            answers=answers,
            judge=entailment_judge(args.judge, gateway),
            m=args.samples or 10,
            mode=_mode(args, "strict"),
            cluster_rule=args.cluster_rule,
            gateway=gateway,
            on_step=lambda _node: bar.update(),
        )
    if args.json:
        print(result.to_json())
        return 0
    unit = result.units[0]
    ev = unit.evidence
    print(f"semantic entropy of {len(ev['answers'])} answers to: {unit.text}")
    for n, cluster in enumerate(ev["clusters"], start=1):
        print(f"  cluster {n} ({len(cluster)}): " + " | ".join(ev["answers"][i] for i in cluster))
    likelihood = ev["likelihood_semantic_entropy"]
    print(
        f"  discrete SE {unit.score:.3f} nats over {len(ev['clusters'])} cluster(s)"
        + ("" if likelihood is None else f"; likelihood SE {likelihood:.3f}; naive entropy {ev['naive_entropy']:.3f}")
    )
    m = result.meta
    print(
        f"{m.calls} model calls ({m.params['pairs_judged']} pairs judged), {m.cache_hits} cache hits, {m.seconds:.1f} s"
    )
    return 0


def _mode(args: argparse.Namespace, default: str) -> Any:
    """--strict / --lax, else the method's own default (strict for short answers, lax for paragraphs)."""
    return "strict" if args.strict else "lax" if args.lax else default


def _text(args: argparse.Namespace) -> str:
    if not args.text and not args.file:
        raise ConfigError(f"{args.method} needs --text or --file")
    text = _read_file(args.file, "--file") if args.file else args.text
    if not text or not text.strip():
        raise ConfigError("the text to check is empty")
    return str(text)


def cmd_semantic_entropy_paragraph(args: argparse.Namespace) -> int:
    from halluscope.graphs import semantic_entropy_paragraph

    text = _text(args)
    if not args.question or not args.question.strip():
        raise ConfigError("semantic-entropy-paragraph needs --question: the question or prompt the text answers")
    if not args.model:
        raise ConfigError("semantic-entropy-paragraph needs --model (e.g. local:qwen2.5-coder-1.5b)")
    gateway = _gateway(args)
    with tqdm(desc=args.method, unit=" step", leave=False, disable=args.json) as bar:
        result = semantic_entropy_paragraph.detect(
            text,
            question=args.question,
            model=args.model,
            judge=entailment_judge(args.judge, gateway),
            mode=_mode(args, "lax"),
            cluster_rule=args.cluster_rule,
            gateway=gateway,
            on_step=lambda _node: bar.update(),
        )
    if args.json:
        print(result.to_json())
        return 0
    print(f"{result.method}: higher = more likely confabulated (nats; a sentence scores as its most uncertain claim)")
    for unit in result.units:
        print(f"  {unit.score:5.2f}  {unit.text}")
        for claim in unit.evidence["claims"]:
            print(f"         {claim['score']:5.2f}  claim: {claim['text']}")
    m = result.meta
    print(
        f"{m.params['claims']} claims, {m.params['questions']} questions, {m.calls} model calls "
        f"({m.params['pairs_judged']} pairs judged), {m.cache_hits} cache hits, {m.seconds:.1f} s"
    )
    if m.events:
        print(_handled(m.events))
    return 0


def cmd_clue(args: argparse.Namespace) -> int:
    from halluscope.graphs import clue

    if not args.question or not args.question.strip():
        raise ConfigError("clue needs --question: the prompt that the outputs answer")
    if not args.model:
        raise ConfigError("clue needs --model: it extracts the concepts (and samples outputs unless --outputs-file)")
    outputs = _read_samples(args.outputs_file, "--outputs-file") if args.outputs_file else None
    gateway = _gateway(args)
    with tqdm(desc=args.method, unit=" call", leave=False, disable=args.json) as bar:
        result = clue.detect(
            args.question,
            model=args.model,
            outputs=outputs,
            judge=args.judge,
            n=args.samples or 5,
            prefilter=args.prefilter,
            baseline=True,
            gateway=gateway,
            stats=CallStats(on_reply=bar.update),
        )
    if args.json:
        print(result.to_json())
        return 0
    print(f"clue: concept uncertainty U(c) in nats over {result.meta.params['n']} outputs, higher = more uncertain")
    for unit in result.units:
        merged = unit.evidence["merged"]
        print(f"  {unit.score:6.3f}  {unit.text}" + (f"  (merged: {'; '.join(merged)})" if merged else ""))
    m = result.meta
    print(
        f"{m.params['concepts_extracted']} concepts extracted, {m.params['concepts_kept']} kept "
        f"({m.params['merge_pairs']} pairs asked in merging); {m.calls} model calls, {m.cache_hits} cache hits, "
        f"{m.seconds:.1f} s"
    )
    if m.events:
        print(_handled(m.events))
    return 0


def cmd_diversity(args: argparse.Namespace) -> int:
    from halluscope.graphs import clue

    outputs = _read_samples(args.outputs_file, "--outputs-file")
    subconcepts = [c.strip() for c in args.subconcepts.split(",") if c.strip()]
    gateway = _gateway(args)
    stats = CallStats()
    out = clue.diversity(outputs, subconcepts, zero_shot_judge(args.judge, gateway), stats)
    summary = {"concept": args.concept, **{k: v for k, v in out.items() if k != "matrix"}, "calls": stats.calls}
    if args.json:
        _print_json({**summary, "matrix": out["matrix"]})
        return 0
    print(f"diversity of {args.concept!r} over {len(outputs)} outputs (CLUE Section 5.3)")
    for name, u, count in zip(out["subconcepts"], out["uncertainty"], out["counts"], strict=True):
        print(f"  {name:30s} U {u:7.3f}   outputs assigned {count}")
    print(f"harmonic mean {out['harmonic_mean']:.3f}   entropy {out['entropy']:.3f} nats")
    print(
        f"{stats.calls} model calls, {stats.cache_hits} cache hits"
        + (f"; {out['unscored']} unscored" if out["unscored"] else "")
    )
    return 0


def _read_questions(path: str) -> list[str]:
    """A question pool: a JSON list of strings, or one question per line."""
    return _read_texts(path, "--pool", "question", one_per_line=True)


def _fewl_options(args: argparse.Namespace) -> dict[str, Any]:
    """The reference side of FEWL, shared by detect and both benchmarks."""
    refs = args.reference or []
    if args.diversify is not None and len(refs) > 1:
        raise ConfigError(f"--diversify asks one --reference model for N answers; {len(refs)} references given")
    return {
        "references": refs,
        "diversify": args.diversify,
        "neighbours": args.neighbours,
        "wrong_model": args.wrong_model,
    }


def cmd_fewl(args: argparse.Namespace) -> int:
    from halluscope.graphs import fewl

    if not args.question or not args.question.strip():
        raise ConfigError("fewl needs --question: the question the answers answer")
    if not args.answer:
        raise ConfigError("fewl needs at least one --answer to score")
    pool = _read_questions(args.pool) if args.pool else []
    gateway = _gateway(args)
    with tqdm(desc="fewl", unit=" call", leave=False, disable=args.json) as bar:
        result = fewl.detect(
            args.question,
            args.answer,
            pool=pool,
            gateway=gateway,
            stats=CallStats(on_reply=bar.update),
            **_fewl_options(args),
        )
    if args.json:
        print(result.to_json())
        return 0
    m = result.meta
    refs = f"{', '.join(m.params['references'])} ({m.params['mode']}, N = {m.params['n']})"
    print(f"fewl: FEWL per answer (higher = less hallucinated); references {refs}")
    for unit in result.units:
        ev = unit.evidence
        if ev.get("fewl") is None:
            print(f"   n/a    {unit.text}  (no reference answer)")
            continue
        similarity = sum(ev["similarity"]) / len(ev["similarity"])
        lazy = sum(ev["penalty"]) / len(ev["penalty"])
        print(f"  {ev['fewl']:7.4f}  {unit.text}  (mean similarity {similarity:.3f}, penalty {lazy:.3f})")
    weights = ", ".join(f"{w:.3f}" for w in result.evidence["weights"])
    print(f"expertise weights lambda: {weights}; {len(result.evidence['wrong_answers'])} IW/CO pairs")
    if not m.params["penalty"]:
        print("no laziness penalty: give --pool FILE (questions to find neighbours in)")
    print(f"{m.calls} model calls, {m.cache_hits} cache hits, {m.seconds:.1f} s")
    if m.events:
        print(_handled(m.events))
    return 0


def _read_pairs(path: str, flag: str) -> list[tuple[str, str]]:
    """In-context examples: a JSON list of [input, label] pairs, or one 'input<TAB>label' per line."""
    rows, text = _read_json_list_or_text(path, flag)
    if rows is None:
        rows = [line.split("\t") for line in text.splitlines() if line.strip()]
    pairs = []
    for i, row in enumerate(rows if isinstance(rows, list) else [rows]):
        if not (isinstance(row, list) and len(row) == 2 and all(isinstance(x, str) and x.strip() for x in row)):
            raise ConfigError(f"{flag} {path}: example {i + 1} is not an (input, label) pair of texts: {row!r}")
        pairs.append((row[0].strip(), row[1].strip()))
    if not pairs:
        raise ConfigError(f"{flag} {path} holds no example")
    return pairs


def cmd_phr(args: argparse.Namespace) -> int:
    """The Posterior Hallucination Rate of one query, through the one detector API."""
    import halluscope

    if not args.context_file:
        raise ConfigError("phr needs --context-file: the in-context examples, as (input, label) pairs")
    if not args.query or not args.query.strip():
        raise ConfigError("phr needs --query: the input whose label the model is asked for")
    options: dict[str, Any] = {"m": args.samples} if args.samples else {}
    if args.model:
        options["model"] = args.model
    det = halluscope.detector("phr", gateway=_gateway(args), **options)
    result = det.detect(context=_read_pairs(args.context_file, "--context-file"), query=args.query, truth=args.truth)
    if not args.json:
        ev = result.units[0].evidence
        extra = f"; error rate {ev['error_rate']:.3f}" if ev.get("error_rate") is not None else ""
        print(
            f"PHR {ev['phr']:.3f} (higher = more likely hallucinated); total entropy {ev['total_entropy']:.3f}, "
            f"aleatoric {ev['aleatoric_entropy']:.3f}, epistemic (MI) {ev['mutual_information']:.3f} nats{extra}"
        )
    return _print_detection(result, args.json)


def cmd_detect(args: argparse.Namespace) -> int:
    from halluscope.graphs import fibe, selfcheck_prompt, selfcheck_unigram

    if args.method == "phr":
        return cmd_phr(args)
    if args.method == "semantic-entropy":
        return cmd_semantic_entropy(args)
    if args.method == "semantic-entropy-paragraph":
        return cmd_semantic_entropy_paragraph(args)
    if args.method == "clue":
        return cmd_clue(args)
    if args.method == "fewl":
        return cmd_fewl(args)
    text = _text(args)
    samples = _read_samples(args.samples_file) if args.samples_file else None
    concept = selfcheck_prompt.concept_from_prompt(args.question) if args.question else None
    gateway = _gateway(args)
    if args.method == "selfcheck-unigram":
        result = selfcheck_unigram.detect(
            text, samples=samples, model=args.model, concept=concept, n=args.samples or 5, gateway=gateway
        )
        return _print_detection(result, args.json)
    if not args.model:
        raise ConfigError(f"{args.method} needs --model (e.g. local:qwen2.5-coder-1.5b)")
    if args.method == "selfcheck-prompt" and not samples and not concept:
        raise ConfigError("selfcheck-prompt needs --samples-file, or --question to regenerate samples")
    with tqdm(desc=args.method, unit=" step", leave=False, disable=args.json) as bar:
        if args.method in fibe.VARIANTS:
            result = fibe.detect(
                text,
                model=args.model,
                variant=args.method,
                prompt=args.question,
                samples=samples,
                n=args.samples or 5,
                gateway=gateway,
                on_step=lambda _node: bar.update(),
            )
        else:
            result = selfcheck_prompt.detect(
                text,
                model=args.model,
                samples=samples,
                concept=concept,
                n=args.samples or 5,
                gateway=gateway,
                on_step=lambda _node: bar.update(),
            )
    return _print_detection(result, args.json)


def _handled(events: dict[str, int]) -> str:
    """Bad model answers a method handled, by kind."""
    return "handled: " + ", ".join(f"{k} {v}" for k, v in sorted(events.items()))


def _print_detection(result: DetectionResult, as_json: bool) -> int:
    if as_json:
        print(result.to_json())
        return 0
    print(f"{result.method}: higher = more likely hallucinated")
    for unit in result.units:
        score = "  inf" if unit.score is None else f"{unit.score:5.2f}"
        print(f"  {score}  {unit.text}")
    m = result.meta
    print(f"{m.calls} model calls, {m.cache_hits} cache hits, {m.parse_failures} unparsed answers, {m.seconds:.1f} s")
    if m.events:
        print(_handled(m.events))
    return 0


def cmd_bench_wikibio(args: argparse.Namespace) -> int:
    from halluscope.evaluators.wikibio import METRIC_COLUMNS, run_bench

    gateway = _gateway(args)
    runs = run_bench(
        args.method.split(","),
        args.out,
        args.data,
        args.limit,
        args.samples,
        progress=not args.json,
        model=args.model,
        gateway=gateway,
        judge=entailment_judge(args.judge, gateway) if args.judge else None,
    )
    status = _report_failures([f for r in runs for f in r["failed"]], "passage")
    if args.json:
        _print_json([{k: v for k, v in r.items() if k not in ("scores", "passages")} for r in runs])
        return status
    print(f"WikiBio: {runs[0]['n_passages']} passages, {runs[0]['n_sentences']} sentences")
    for r in runs:
        print(f"{r['method']}: {r['calls']} model calls, {r['cache_hits']} cache hits, {r['seconds']:.0f} s")
        if r.get("events"):
            print("  " + _handled(r["events"]))
        if r["failed"]:
            print(f"  {len(r['failed'])} passages failed (left out of the metrics; results.json has the reasons)")
        values = [(h, r["metrics"].get(k)) for k, h in METRIC_COLUMNS[1:]]
        print("  " + "  ".join(f"{h} {'n/a' if v is None else f'{v:.2f}'}" for h, v in values))
    print(f"wrote {args.out}/results.json, report.md, pr_nonfact.png, roc_nonfact.png")
    return status


def cmd_bench_qa(args: argparse.Namespace) -> int:
    from halluscope.evaluators.qa import SCORES, run_qa_bench

    if not args.model:
        raise ConfigError("bench qa needs --model to answer the questions (e.g. local:qwen2.5-coder-0.5b)")
    gateway = _gateway(args)
    run = run_qa_bench(
        args.dataset,
        args.out,
        model=args.model,
        judge=entailment_judge(args.judge, gateway),
        gateway=gateway,
        data=args.data,
        limit=args.limit,
        m=args.samples,
        mode=_mode(args, "strict"),
        cluster_rule=args.cluster_rule,
        progress=not args.json,
    )
    summary = {k: v for k, v in run.items() if k != "questions"}
    status = _report_failures(summary["failed"], "question")
    if args.json:
        _print_json(summary)
        return status
    metrics = summary["metrics"]
    low, high = metrics["accuracy_ci95"] or (float("nan"), float("nan"))
    accuracy = f"accuracy {metrics['accuracy']:.3f} [{low:.3f}, {high:.3f}]"
    print(f"{args.dataset}: {summary['n_questions']} questions, {accuracy}")
    for key, name in SCORES:
        score = metrics[key]
        if score is None:
            print(f"  {name}: n/a (no log-probs)")
            continue
        auroc = "n/a" if score["auroc"] is None else f"{score['auroc']:.3f}"
        print(f"  {name}: AUROC {auroc}  AURAC {score['aurac']:.3f}")
    print(
        f"{summary['calls']} model calls ({summary['pairs_judged']} pairs judged), {summary['cache_hits']} cache hits, "
        f"{summary['seconds'] / 60:.1f} min; wrote {args.out}/results.json, report.md, roc.png"
    )
    return status


def cmd_bench_truthfulqa(args: argparse.Namespace) -> int:
    from halluscope.evaluators.truthfulqa import run_truthfulqa_bench

    shown = _variant_list(args.method)
    gateway = _gateway(args)
    run = run_truthfulqa_bench(
        args.out, gateway=gateway, data=args.data, limit=args.limit, progress=not args.json, **_fewl_options(args)
    )
    summary = {k: v for k, v in run.items() if k != "questions"}
    summary["variants"] = [r for r in summary["variants"] if r["variant"] in shown]
    if args.json:
        _print_json(summary)
        return 0
    print(f"FEWL on TruthfulQA v1: {summary['n_questions']} questions, {summary['labelled_answers']} labelled answers")
    for r in summary["variants"]:
        a = "n/a" if r["best_above_first_incorrect"] is None else f"{r['best_above_first_incorrect']:.3f}"
        b = "n/a" if r["best_highest_share"] is None else f"{r['best_highest_count']} ({r['best_highest_share']:.1%})"
        paper = f"{r['paper_gpt35_share']:.1%} / {r['paper_gpt4_share']:.1%}"
        print(f"  {r['title']:24s} (a) {a}   (b) {b}   paper (b) {paper}")
    print(
        f"{summary['calls']} model calls, {summary['cache_hits']} cache hits, {summary['seconds'] / 60:.1f} min; "
        f"wrote {args.out}/results.json, report.md"
    )
    return 0


def _variant_list(methods: str) -> list[str]:
    from halluscope.scoring.fewl import VARIANTS

    chosen = [m.strip() for m in methods.split(",") if m.strip()]
    unknown = [m for m in chosen if m not in VARIANTS]
    if unknown or not chosen:
        raise ConfigError(f"unknown --method {', '.join(unknown) or '(none)'}; known: {', '.join(VARIANTS)}")
    return chosen


def cmd_bench_truthfulqa_rank(args: argparse.Namespace) -> int:
    from halluscope.evaluators.truthfulqa import run_rank_bench

    models = [m.strip() for m in args.models.split(",") if m.strip()]
    gateway = _gateway(args)
    summary = run_rank_bench(
        args.out,
        models=models,
        gateway=gateway,
        mc=args.mc,
        data=args.data,
        limit=args.limit,
        progress=not args.json,
        **_fewl_options(args),
    )
    if args.json:
        _print_json(summary)
        return 0
    print(f"ranking {len(models)} models on {summary['n_questions']} TruthfulQA questions")
    for r in summary["models"]:
        fewl_mean = "n/a" if r["fewl"] is None else f"{r['fewl']:.4f}"
        print(f"  {r['model']:32s} mean FEWL {fewl_mean}   MC1 accuracy {r['mc1_accuracy']:.3f} ({r['mc_mode']})")
    tau = "n/a" if summary["kendall_tau"] is None else f"{summary['kendall_tau']:.3f}"
    print(f"FEWL: {' > '.join(summary['ranking_fewl'])}")
    print(f"MC1:  {' > '.join(summary['ranking_mc1'])}")
    print(
        f"Kendall's tau {tau}; {summary['calls']} model calls, {summary['cache_hits']} cache hits, "
        f"{summary['seconds'] / 60:.1f} min; wrote {args.out}/results.json, report.md"
    )
    return 0


def _fewl_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--reference",
        action="append",
        metavar="SPEC",
        help="fewl: a reference model (repeat for N models; default: the default local model asked for 5 answers)",
    )
    p.add_argument(
        "--diversify", type=int, metavar="N", help="fewl: ask the one reference model for N diversified answers"
    )
    p.add_argument(
        "--neighbours",
        type=int,
        default=5,
        metavar="K",
        help="fewl: nearest questions of the laziness penalty (default 5)",
    )
    p.add_argument(
        "--wrong-model", metavar="SPEC", help="fewl: the model that writes IW/CO answers (default: first reference)"
    )


def cmd_bench_clue(args: argparse.Namespace) -> int:
    from halluscope.evaluators.clue import SUBSETS, run_clue_bench

    gateway = _gateway(args)
    run = run_clue_bench(
        args.out,
        model=args.model,
        scorer=zero_shot_judge(args.judge, gateway),
        gateway=gateway,
        data=args.data,
        limit=args.limit,
        n=args.samples,
        theta_h=args.theta_h,
        theta_l=args.theta_l,
        prefilter=args.prefilter,
        progress=not args.json,
    )
    summary = {k: v for k, v in run.items() if k != "questions"}
    status = _report_failures(summary["failed"], "question")
    if args.json:
        _print_json(summary)
        return status

    def num(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.3f}"

    print(f"CLUE on QNLI: {summary['n_questions']} questions, {summary['concepts_per_question']:.1f} concepts each")
    for key, name in SUBSETS:
        c = summary["correlation"][key]
        print(f"  Pearson(U, S^a) {key} ({name}): {num(c['mean'])}  (paper {c['paper']:.3f})")
    for method in ("CLUE", "baseline"):
        d = summary["detection"][method]
        print(
            f"  {method}: macro AUROC {num(d['macro_auroc'])} AUPRC {num(d['macro_auprc'])}, "
            f"micro AUROC {num(d['micro_auroc'])} AUPRC {num(d['micro_auprc'])}"
        )
    print(
        f"{summary['calls']} model calls, {summary['cache_hits']} cache hits, {summary['seconds'] / 60:.1f} min; "
        f"wrote {args.out}/results.json, report.md, correlation.png, roc.png, pr.png"
    )
    return status


def _int_list(text: str, flag: str) -> list[int]:
    return [int(x) for x in _number_list(text, flag, int)]


def _float_list(text: str, flag: str) -> list[float]:
    return [float(x) for x in _number_list(text, flag, float)]


def _number_list(text: str, flag: str, kind: type[int] | type[float]) -> list[int | float]:
    """A comma-separated --flag value as numbers of one kind; a bad one names the flag."""
    try:
        return [kind(part) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        what = "integers" if kind is int else "numbers"
        raise ConfigError(f"{flag} must be comma-separated {what}, got {text!r}") from exc


def cmd_bench_phr_synthetic(args: argparse.Namespace) -> int:
    from halluscope.evaluators.phr_synthetic import COLUMNS, run_phr_synthetic
    from halluscope.evaluators.report import markdown_table

    result = run_phr_synthetic(
        args.out,
        ns=_int_list(args.n, "--n"),
        problems=args.problems,
        m=args.M,
        k=args.K,
        n_imagined=args.imagined,
        epsilon=args.epsilon,
        seed=args.seed,
        progress=not args.json,
    )
    if args.json:
        _print_json(result)
        return 0
    print(markdown_table(result["rows"], COLUMNS, digits=4))
    print(f"{result['seconds']:.1f} s; wrote {args.out}/results.json, report.md, phr_vs_n.png")
    return 0


def cmd_bench_phr(args: argparse.Namespace) -> int:
    from halluscope.evaluators.icl import COLUMNS, run_phr_bench
    from halluscope.evaluators.report import markdown_table

    result = run_phr_bench(
        args.task,
        args.out,
        model=args.model,
        ns=_int_list(args.n, "--n"),
        contexts=args.contexts,
        queries=args.queries,
        m=args.M,
        k=args.K,
        n_imagined=args.imagined,
        epsilons=_float_list(args.epsilon, "--epsilon"),
        eval_size=args.eval_size,
        exact=not args.draws and not args.sampled,
        responses="sampled" if args.sampled else "distribution",
        reuse_prefix=not args.no_prefix_reuse,
        seed=args.seed,
        data=args.data,
        progress=not args.json,
    )
    status = _report_failures(result["failed"], "query")
    if args.json:
        _print_json({k: v for k, v in result.items() if k != "records"})
        return status
    print(markdown_table(result["rows"], COLUMNS, digits=3))
    print(
        f"random-guess error {result['random_error']:.2f}; {result['meta']['calls']} model calls, "
        f"{result['meta']['cache_hits']} cached; {result['seconds']:.0f} s; wrote {args.out}/results.json, "
        "report.md, phr_icl.png"
    )
    return status


def cmd_models_list(args: argparse.Namespace) -> int:
    rows = registry_rows()
    if args.json:
        _print_json(rows)
        return 0
    for r in rows:
        state = f"{r['bytes'] / 1e6:8.1f} MB  {r['path']}" if r["installed"] else f"not installed: {r['install']}"
        print(f"{'*' if r['installed'] else ' '} local:{r['name']:<20} {state}")
        print(f"    {r['about']}")
    try:
        print(f"\ndefault model: local:{default_local_model()}")
    except ModelNotInstalledError as exc:
        print(f"\n{exc}")
    return 0


def cmd_data_list(args: argparse.Namespace) -> int:
    root = data_root(args.data)
    rows = [{"name": name, "source": source_summary(name, args.data)} for name in list_datasets(args.data)]
    if args.json:
        _print_json({"root": str(root), "datasets": rows})
    else:
        print(f"{root}")
        for r in rows:
            print(f"  {r['name']:<28} {r['source']}")
    return 0


# ---------------------------------------------------------------- parser


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


def build_parser() -> argparse.ArgumentParser:
    common = _common()
    parser = argparse.ArgumentParser(
        prog="halluscope", description="Measure and detect LLM hallucinations with published methods."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser(
        "demo",
        parents=[common],
        help="the main job, offline: semantic entropy and SelfCheck-Prompt on the local model",
        description="Semantic entropy for a question the model knows and one it cannot know, and "
        "SelfCheck-Prompt scores for a biography with a planted false sentence, on the embedded local "
        "model; a second run replays from the cache.",
    )
    p.add_argument("--model", help="model spec (default: the strongest installed local model)")
    p.add_argument("--judge", help="entailment judge spec (default: the model itself)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_demo)

    prompts = sub.add_parser("prompts", help="list, show, diff and try versioned prompts").add_subparsers(
        dest="prompts_command", required=True, metavar="ACTION"
    )
    p = prompts.add_parser("list", parents=[common], help="every prompt: id, version, source")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_prompts_list)
    p = prompts.add_parser("show", parents=[common], help="one prompt in full")
    p.add_argument("ref", metavar="ID[@VERSION]")
    p.set_defaults(func=cmd_prompts_show)
    p = prompts.add_parser("diff", parents=[common], help="unified diff of two prompt versions")
    p.add_argument("a", metavar="ID@A")
    p.add_argument("b", metavar="ID@B")
    p.set_defaults(func=cmd_prompts_diff)
    p = prompts.add_parser("run", parents=[common], help="render a prompt, call a model through the gateway, parse")
    p.add_argument("ref", metavar="ID[@VERSION]")
    p.add_argument("--model", required=True, help="model spec, e.g. anthropic:claude-sonnet-4-5")
    p.add_argument("--var", action="append", default=[], metavar="NAME=VALUE", help="a prompt variable (repeatable)")
    p.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="override a call parameter: temperature, top_p, max_tokens, stop, seed, logprobs",
    )
    p.add_argument("--samples", type=int, default=1, help="number of samples (sample indexes 0..N-1)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_prompts_run)

    cache = sub.add_parser("cache", help="the model-call cache").add_subparsers(
        dest="cache_command", required=True, metavar="ACTION"
    )
    p = cache.add_parser("stats", parents=[common], help="entries and size")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_cache_stats)
    p = cache.add_parser("clear", parents=[common], help="remove every cached call")
    p.set_defaults(func=cmd_cache_clear)

    p = sub.add_parser("detect", parents=[common], help="score the sentences of a text with one method")
    p.add_argument("method", choices=DETECT_METHODS, metavar="METHOD", help=", ".join(DETECT_METHODS))
    source = p.add_mutually_exclusive_group()
    source.add_argument("--text", help="the text to check")
    source.add_argument("--file", help="a file holding the text to check")
    p.add_argument(
        "--question",
        metavar="PROMPT",
        help="the prompt that produced the text, e.g. 'This is a Wikipedia passage about X:'; "
        "for semantic-entropy, the question",
    )
    p.add_argument("--model", help="model spec, e.g. local:qwen2.5-coder-1.5b")
    p.add_argument(
        "--samples",
        type=int,
        help="N: FIBE's exam answers, SCGP's samples to regenerate when none are given (default 5); "
        "M: semantic entropy's sampled answers (default 10); N: clue's sampled outputs (default 5)",
    )
    p.add_argument("--samples-file", help="samples you already have: a JSON list, or texts separated by '---' lines")
    p.add_argument("--answers-file", help="semantic-entropy: answers you already have (same formats)")
    p.add_argument("--outputs-file", help="clue: outputs you already have (same formats); default: sample N = 5")
    p.add_argument(
        "--prefilter",
        type=float,
        metavar="COS",
        help="clue: ask the scorer to merge only concept pairs with embedding cosine >= COS (default: every pair)",
    )
    _judge_options(p, "semantic entropy (entailment) and clue (zero-shot scorer)", strictness=True)
    p.add_argument("--context-file", help="phr: the in-context examples, a JSON list of [input, label] or TSV lines")
    p.add_argument("--query", help="phr: the input whose label the model is asked for")
    p.add_argument("--truth", help="phr: the query's true label (adds the error rate)")
    p.add_argument("--answer", action="append", help="fewl: an answer to score (repeatable)")
    p.add_argument("--pool", metavar="FILE", help="fewl: questions to find neighbours in (JSON list or one per line)")
    _fewl_arguments(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_detect)

    bench = sub.add_parser("bench", help="run a paper's benchmark protocol").add_subparsers(
        dest="bench_command", required=True, metavar="BENCHMARK"
    )
    p = bench.add_parser("wikibio", parents=[common], help="WikiBio GPT-3 hallucination (SelfCheckGPT/FIBE protocol)")
    p.add_argument(
        "--method",
        required=True,
        help="one or several methods, comma-separated: "
        + ", ".join(m for m in DETECT_METHODS if m not in ("semantic-entropy", "phr")),
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
            _data_option(bench_parser)
            bench_parser.add_argument(
                "--compare-prompt",
                metavar="ID@VERSION",
                help="run the benchmark twice, with --prompt ID@A (or the default version) and with this version, "
                "and write a side-by-side report (OUT/compare.md; the runs in OUT/A and OUT/B)",
            )

    p = sub.add_parser(
        "diversity",
        parents=[common],
        help="CLUE's conceptual diversity of outputs (harmonic mean and entropy over lower-level concepts)",
    )
    p.add_argument("--outputs-file", required=True, help="the outputs: a JSON list, or texts separated by '---' lines")
    p.add_argument("--concept", required=True, help="the upper-level concept, e.g. tone")
    p.add_argument("--subconcepts", required=True, help='lower-level concepts, comma-separated: "happy tone,sad tone"')
    p.add_argument("--judge", metavar="SPEC", help="zero-shot scorer: a model spec or nli:PATH (default: local model)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_diversity)

    models = sub.add_parser("models", help="the offline local-model registry").add_subparsers(
        dest="models_command", required=True, metavar="ACTION"
    )
    p = models.add_parser("list", help="each registry model: installed or not, size, path")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_models_list)

    data = sub.add_parser("data", help="benchmark data (HALLUSCOPE_DATA or --data)").add_subparsers(
        dest="data_command", required=True, metavar="ACTION"
    )
    p = data.add_parser("list", help="datasets found and their sources")
    _data_option(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_data_list)
    return parser


def cmd_bench_compare(args: argparse.Namespace) -> int:
    """The benchmark with prompt version A, then B, on the same items and the same cache; then the report."""
    from halluscope.evaluators.compare import compare_runs, prompt_pair

    prompt_id = parse_ref(args.compare_prompt)[0]
    chosen = [r for r in args.prompt if parse_ref(r)[0] == prompt_id]
    if len(chosen) > 1:
        raise ConfigError(f"--prompt names {prompt_id} more than once; give version A once")
    a, b = prompt_pair(_registry(args), chosen[0] if chosen else None, args.compare_prompt)
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
        _print_json({k: v for k, v in report.items() if k != "item_changes"})
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


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        _check_counts(args)
        if getattr(args, "compare_prompt", None):
            return cmd_bench_compare(args)
        return int(args.func(args))
    except HalluscopeError as exc:
        print(f"halluscope: error: {redact_credentials(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("halluscope: interrupted; finished calls are in the cache", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
