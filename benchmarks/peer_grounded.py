"""openevals' RAG groundedness evaluator and Arize Phoenix's faithfulness evaluator on the items
`halluscope bench grounded` scores, through the same local model behind llama-cpp-python's
OpenAI-compatible server: each peer's own package and prompt, requests and prompt tokens counted on
the wire, wall time measured, AUC-ROC (and accuracy) against the human labels.

It runs in the peers' own venv (halluscope is never imported there, nor the peers in halluscope's):

    python3 -m venv /tmp/peer-rag
    /tmp/peer-rag/bin/pip install openevals==0.2.2 arize-phoenix-evals==3.9.4 openai
    .venv/bin/python -m llama_cpp.server --model MODEL.gguf --model_alias judge --n_ctx 4096 \\
        --chat_format chatml-function-calling --port 8012 &
    /tmp/peer-rag/bin/python benchmarks/peer_grounded.py --base-url http://127.0.0.1:8012/v1 --model judge \\
        --dataset rte --data ../shared/data --out docs/results/peers/grounded-rte.json

Both peers ask for structured output: openevals through LangChain's ChatOpenAI with tool calling
(llama-cpp-python's server refuses the json_schema response format openevals' OpenAI path sends),
Phoenix through its OpenAI adapter. Both answer a label, not a probability: AUC-ROC over a binary score
equals balanced accuracy. A reply that is not a label is recorded as a failure (score None), never
guessed. Phoenix's HallucinationEvaluator now grounds a response in the conversation; its
FaithfulnessEvaluator is the one that grounds it in a given context, the question asked here.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import time
from pathlib import Path
from typing import Any

import httpx

WIKIBIO = Path("wikibio_gpt3_hallucination") / "wikibio_gpt3_hallucination.json"


class Wire:
    """Requests and prompt tokens as the server reported them, for every call an httpx client makes."""

    def __init__(self) -> None:
        self.requests = 0
        self.prompt_tokens = 0

    def hook(self, response: httpx.Response) -> None:
        response.read()
        self.requests += 1
        with contextlib.suppress(ValueError, AttributeError):  # an error body has no usage
            self.prompt_tokens += int(response.json().get("usage", {}).get("prompt_tokens", 0))


def items(dataset: str, data: Path, limit: int | None) -> list[dict[str, Any]]:
    """What both peers and halluscope's bench score: (question, context, text, positive label)."""
    if dataset == "rte":
        rows = [json.loads(line) for line in (data / "rte" / "val.jsonl").read_text().splitlines() if line.strip()]
        out = [
            {
                "id": f"pair {r['idx']}",
                "question": "",
                "context": r["premise"],
                "text": r["hypothesis"],
                "positive": r["label"] == "not_entailment",
            }
            for r in rows
        ]
    else:
        passages = json.loads((data / WIKIBIO).read_text())
        out = []
        for i, p in enumerate(passages[:limit] if limit else passages):
            concept = re.match(r"\s*(.+?)\s*(?:\(|,| is | was )", p["wiki_bio_text"])
            question = f"This is a Wikipedia passage about {concept.group(1) if concept else ''}:"
            for s, (sentence, label) in enumerate(zip(p["gpt3_sentences"], p["annotation"], strict=True)):
                out.append(
                    {
                        "id": f"passage {i} sentence {s}",
                        "question": question,
                        "context": p["wiki_bio_text"],
                        "text": sentence,
                        "positive": label != "accurate",
                    }
                )
        return out
    return out[:limit] if limit else out


def openevals_scorer(base_url: str, model: str, wire: Wire) -> Any:
    from langchain_openai import ChatOpenAI
    from openevals.llm import create_llm_as_judge
    from openevals.prompts import RAG_GROUNDEDNESS_PROMPT

    chat = ChatOpenAI(
        model=model,
        base_url=base_url,
        api_key="local",
        temperature=0,
        http_client=httpx.Client(event_hooks={"response": [wire.hook]}, timeout=600),
    )
    judge = create_llm_as_judge(
        prompt=RAG_GROUNDEDNESS_PROMPT,
        feedback_key="groundedness",
        judge=chat,
        structured_output_kwargs={"method": "function_calling"},
    )

    def score(item: dict[str, Any]) -> float:
        result = judge(context=item["context"], outputs=item["text"])
        return 0.0 if bool(result["score"]) else 1.0  # grounded -> not hallucinated

    return score


def phoenix_scorer(base_url: str, model: str, wire: Wire) -> Any:
    from phoenix.evals import LLM
    from phoenix.evals.metrics.faithfulness import FaithfulnessEvaluator

    llm = LLM(
        provider="openai",
        model=model,
        base_url=base_url,
        api_key="local",
        sync_client_kwargs={"http_client": httpx.Client(event_hooks={"response": [wire.hook]}, timeout=600)},
    )
    from phoenix.evals.llm.types import ObjectGenerationMethod

    # tool calling at once: its discovery tries json_schema first and falls back only on a 400, where
    # llama-cpp-python's server answers the unsupported format with a 500
    llm._sync_adapter._preferred_method = ObjectGenerationMethod.TOOL_CALLING
    evaluator = FaithfulnessEvaluator(llm=llm)

    def score(item: dict[str, Any]) -> float:
        found = evaluator.evaluate({"input": item["question"], "output": item["text"], "context": item["context"]})
        label = found[0].label
        if label not in ("faithful", "unfaithful"):
            raise ValueError(f"not a label: {label!r} ({found[0].explanation!r})")
        return 1.0 if label == "unfaithful" else 0.0

    return score


def auc_roc(y: list[bool], s: list[float]) -> float | None:
    pos = [x for x, t in zip(s, y, strict=True) if t]
    neg = [x for x, t in zip(s, y, strict=True) if not t]
    if not pos or not neg:
        return None
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return 100 * wins / (len(pos) * len(neg))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--model", required=True, help="the server's model alias")
    ap.add_argument("--dataset", choices=("rte", "wikibio"), required=True)
    ap.add_argument("--data", required=True, type=Path)
    ap.add_argument("--limit", type=int)
    ap.add_argument("--peer", action="append", choices=("openevals", "phoenix"))
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args()
    todo = items(args.dataset, args.data, args.limit)
    report: dict[str, Any] = json.loads(args.out.read_text()) if args.out.exists() else {}
    for peer in args.peer or ["openevals", "phoenix"]:
        wire = Wire()
        scorer = (openevals_scorer if peer == "openevals" else phoenix_scorer)(args.base_url, args.model, wire)
        before = report.get(peer, {})  # a run stopped part-way resumes: its rows, requests, tokens and time kept
        rows = [r for r in before.get("rows", []) if r["error"] is None]
        done = {r["id"] for r in rows}
        wire.requests, wire.prompt_tokens = before.get("requests", 0), before.get("prompt_tokens", 0)
        began = time.perf_counter() - before.get("seconds", 0.0)
        for n, item in enumerate(todo, start=1):
            if item["id"] in done:
                continue
            try:
                rows.append({"id": item["id"], "positive": item["positive"], "score": scorer(item), "error": None})
            except Exception as exc:  # noqa: BLE001 - a peer's failure on an item is recorded, the run goes on
                rows.append(
                    {
                        "id": item["id"],
                        "positive": item["positive"],
                        "score": None,
                        "error": f"{type(exc).__name__}: {str(exc)[:300]}",
                    }
                )
            print(f"{peer} {n}/{len(todo)} {rows[-1]['score']} {rows[-1]['error'] or ''}", flush=True)
            if n % 10 == 0:
                report[peer] = summary(todo, rows, wire, began)
                write(args.out, report)
        report[peer] = summary(todo, rows, wire, began)
        write(args.out, report)
        print(json.dumps({k: v for k, v in report[peer].items() if k != "rows"}))


def write(out: Path, report: dict[str, Any]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))


def summary(todo: list[dict[str, Any]], rows: list[dict[str, Any]], wire: Wire, began: float) -> dict[str, Any]:
    """The peer's numbers over the items scored so far (a failed item has no score and is counted apart)."""
    scored = [r for r in rows if r["score"] is not None]
    y, s = [r["positive"] for r in scored], [r["score"] for r in scored]
    return {
        "items": len(todo),
        "done": len(rows),
        "scored": len(scored),
        "auc_roc": auc_roc(y, s),
        "accuracy": 100 * sum((x >= 0.5) == t for x, t in zip(s, y, strict=True)) / len(s) if s else None,
        "requests": wire.requests,
        "prompt_tokens": wire.prompt_tokens,
        "seconds": round(time.perf_counter() - began, 1),
        "rows": rows,
    }


if __name__ == "__main__":
    main()
