"""openevals' RAG groundedness evaluator and Arize Phoenix's faithfulness evaluator on the items
`halluscope bench grounded` scores, through the same local model behind llama-cpp-python's
OpenAI-compatible server: each peer's own package and prompt, requests and prompt tokens counted on
the wire, wall time measured, every item's score kept (benchmarks/grounded_compare.py scores them
against the human labels beside halluscope's, like for like).

It runs in the peers' own venv (halluscope is never imported there, nor the peers in halluscope's):

    python3 -m venv /tmp/peer-rag
    /tmp/peer-rag/bin/pip install openevals==0.2.2 arize-phoenix-evals==3.9.4 openai langchain-openai
    .venv/bin/python -m llama_cpp.server --model MODEL.gguf --model_alias judge --n_ctx 4096 \\
        --chat_format chatml-function-calling --port 8012 &
    /tmp/peer-rag/bin/python benchmarks/peer_grounded.py --base-url http://127.0.0.1:8012/v1 --model judge \\
        --served local:qwen2.5-coder-1.5b --dataset rte --data ../shared/data --out docs/results/peers/grounded-rte.json

Each peer runs at its best fair settings, recorded with its rows (``SETTINGS``): temperature 0, its
own prompt, structured output by tool calling (llama-cpp-python's server refuses the json_schema
response format with a 500, which Phoenix does not take as its cue to fall back). ``openevals`` and
``phoenix`` answer a label: they are compared on decisions (accuracy, balanced accuracy, precision,
recall, F1), never on an AUC, since an AUC-ROC over a binary score is its balanced accuracy.
``openevals-continuous`` is openevals asked for its graded score (``continuous=True``), which has an AUC.
A reply that is not a label or a score is recorded as a failure (score None), never guessed. Phoenix's
HallucinationEvaluator grounds a response in the conversation; its FaithfulnessEvaluator is the one
that grounds it in a given context, the question asked here.

Prompt tokens are counted twice: as the server reports them (``prompt_tokens``), and the peer's own
messages alone in the model's chat template (``own_prompt_tokens``, tokenised by the server's
/extras/tokenize): the difference is what the server's function-calling format injects (the tool's
schema and its instructions), which a provider with native tool calling would count differently.

The output is a record of docs/results (``{"title", "runs": {peer: RUN}}``, benchmarks/records.py):
each run says its command, commit, model, settings, cost and every item's row; a stopped run resumes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from records import commit  # noqa: E402 - beside this script; stdlib only, as the peers' venv needs

WIKIBIO = Path("wikibio_gpt3_hallucination") / "wikibio_gpt3_hallucination.json"


SETTINGS = {
    "openevals": {
        "package": "openevals 0.2.2",
        "prompt": "openevals.prompts.RAG_GROUNDEDNESS_PROMPT (create_llm_as_judge)",
        "temperature": 0,
        "structured_output": "tool calling (LangChain ChatOpenAI, method='function_calling')",
        "output": "label: grounded or not",
    },
    "openevals-continuous": {
        "package": "openevals 0.2.2",
        "prompt": "openevals.prompts.RAG_GROUNDEDNESS_PROMPT (create_llm_as_judge, continuous=True)",
        "temperature": 0,
        "structured_output": "tool calling (LangChain ChatOpenAI, method='function_calling')",
        "output": "graded: a groundedness score in [0, 1]; risk = 1 - score",
    },
    "phoenix": {
        "package": "arize-phoenix-evals 3.9.4",
        "prompt": "phoenix.evals.metrics.faithfulness.FaithfulnessEvaluator's",
        "temperature": 0,
        "structured_output": "tool calling (its OpenAI adapter, TOOL_CALLING preferred)",
        "output": "label: faithful or unfaithful",
    },
}
GRADED = ("openevals-continuous",)  # the peers whose score ranks items: the only ones given an AUC


class Wire:
    """Requests and prompt tokens as the server reported them, and the tokens of the peer's own messages
    in the chat template (without what the server's function-calling format adds), for every call."""

    def __init__(self, base_url: str) -> None:
        self.requests = 0
        self.prompt_tokens = 0
        self.own_prompt_tokens = 0
        self._tokenize = base_url.rsplit("/v1", 1)[0] + "/extras/tokenize"

    def on_request(self, request: httpx.Request) -> None:
        with contextlib.suppress(ValueError):
            messages = json.loads(request.content or b"{}").get("messages") or []
            if messages:
                self.own_prompt_tokens += self.count(chatml(messages))

    def on_response(self, response: httpx.Response) -> None:
        response.read()
        self.requests += 1
        with contextlib.suppress(ValueError, AttributeError):  # an error body has no usage
            self.prompt_tokens += int(response.json().get("usage", {}).get("prompt_tokens", 0))

    def count(self, text: str) -> int:
        reply = httpx.post(self._tokenize, json={"input": text}, timeout=60)
        reply.raise_for_status()
        return len(reply.json()["tokens"])

    def client(self) -> httpx.Client:
        return httpx.Client(event_hooks={"request": [self.on_request], "response": [self.on_response]}, timeout=600)


def chatml(messages: list[dict[str, Any]]) -> str:
    """The messages as Qwen2.5's chat template lays them out, up to the assistant's turn."""
    turns = []
    for m in messages:
        content = m.get("content")
        text = content if isinstance(content, str) else "".join(p.get("text", "") for p in content or [])
        turns.append(f"<|im_start|>{m.get('role', 'user')}\n{text}<|im_end|>\n")
    return "".join(turns) + "<|im_start|>assistant\n"


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


def openevals_scorer(base_url: str, model: str, wire: Wire, continuous: bool = False) -> Any:
    from langchain_openai import ChatOpenAI
    from openevals.llm import create_llm_as_judge
    from openevals.prompts import RAG_GROUNDEDNESS_PROMPT

    chat = ChatOpenAI(model=model, base_url=base_url, api_key="local", temperature=0, http_client=wire.client())
    judge = create_llm_as_judge(
        prompt=RAG_GROUNDEDNESS_PROMPT,
        feedback_key="groundedness",
        judge=chat,
        continuous=continuous,
        structured_output_kwargs={"method": "function_calling"},
    )

    def score(item: dict[str, Any]) -> float:
        found = judge(context=item["context"], outputs=item["text"])["score"]
        if continuous:
            if isinstance(found, bool) or not isinstance(found, int | float) or not 0 <= found <= 1:
                raise ValueError(f"not a score in [0, 1]: {found!r}")
            return 1.0 - float(found)  # grounded -> not hallucinated
        return 0.0 if bool(found) else 1.0

    return score


def phoenix_scorer(base_url: str, model: str, wire: Wire) -> Any:
    from phoenix.evals import LLM
    from phoenix.evals.metrics.faithfulness import FaithfulnessEvaluator

    llm = LLM(
        provider="openai",
        model=model,
        base_url=base_url,
        api_key="local",
        sync_client_kwargs={"http_client": wire.client()},
    )
    from phoenix.evals.llm.types import ObjectGenerationMethod

    # tool calling at once: its discovery tries json_schema first and falls back only on a 400, where
    # llama-cpp-python's server answers the unsupported format with a 500
    llm._sync_adapter._preferred_method = ObjectGenerationMethod.TOOL_CALLING
    evaluator = FaithfulnessEvaluator(llm=llm, temperature=0.0)  # the server's default would be 0.8

    def score(item: dict[str, Any]) -> float:
        found = evaluator.evaluate({"input": item["question"], "output": item["text"], "context": item["context"]})
        label = found[0].label
        if label not in ("faithful", "unfaithful"):
            raise ValueError(f"not a label: {label!r} ({found[0].explanation!r})")
        return 1.0 if label == "unfaithful" else 0.0

    return score


SCORERS = {
    "openevals": lambda url, model, wire: openevals_scorer(url, model, wire),
    "openevals-continuous": lambda url, model, wire: openevals_scorer(url, model, wire, continuous=True),
    "phoenix": phoenix_scorer,
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--model", required=True, help="the server's model alias")
    ap.add_argument("--served", required=True, help="what the server serves, for the record (local:qwen2.5-coder-1.5b)")
    ap.add_argument("--dataset", choices=("rte", "wikibio"), required=True)
    ap.add_argument("--data", required=True, type=Path)
    ap.add_argument("--limit", type=int)
    ap.add_argument("--peer", action="append", choices=tuple(SCORERS))
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args()
    todo = items(args.dataset, args.data, args.limit)
    record: dict[str, Any] = json.loads(args.out.read_text()) if args.out.exists() else {}
    record.setdefault("title", f"Peers' grounded checks on {args.dataset}, the same items and model as halluscope's")
    runs = record.setdefault("runs", {})
    for peer in args.peer or list(SCORERS):
        wire = Wire(args.base_url)
        scorer = SCORERS[peer](args.base_url, args.model, wire)
        before = runs.get(peer, {})  # a run stopped part-way resumes: its rows, requests, tokens and time kept
        rows = [r for r in before.get("rows", []) if r["error"] is None]
        done = {r["id"] for r in rows}
        wire.requests, wire.prompt_tokens = before.get("calls", 0), before.get("prompt_tokens", 0)
        wire.own_prompt_tokens = before.get("own_prompt_tokens", 0)
        began = time.perf_counter() - before.get("seconds", 0.0)
        for n, item in enumerate(todo, start=1):
            if item["id"] in done:
                continue
            try:
                rows.append({"id": item["id"], "positive": item["positive"], "score": scorer(item), "error": None})
            except Exception as exc:  # noqa: BLE001 - a peer's failure on an item is recorded, the run goes on
                error = f"{type(exc).__name__}: {str(exc)[:300]}"
                rows.append({"id": item["id"], "positive": item["positive"], "score": None, "error": error})
            print(f"{peer} {n}/{len(todo)} {rows[-1]['score']} {rows[-1]['error'] or ''}", flush=True)
            if n % 10 == 0:
                runs[peer] = run_entry(peer, args, todo, rows, wire, began)
                write(args.out, record)
        runs[peer] = run_entry(peer, args, todo, rows, wire, began)
        write(args.out, record)
        print(json.dumps({k: v for k, v in runs[peer].items() if k != "rows"}))


def write(out: Path, record: dict[str, Any]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1) + "\n")


def run_entry(
    peer: str,
    args: argparse.Namespace,
    todo: list[dict[str, Any]],
    rows: list[dict[str, Any]],
    wire: Wire,
    began: float,
) -> dict[str, Any]:
    """The peer's run as a record run: how it was made, what it cost, its settings and every row."""
    return {
        "command": shlex.join([sys.executable, *sys.argv]),
        "commit": commit(),
        "recorded": True,
        "machine": "2 cores, x86_64",
        "models": [args.served],
        "items": len(todo),
        "item": "pair" if args.dataset == "rte" else "sentence",
        "done": len(rows),
        "scored": sum(r["score"] is not None for r in rows),
        "calls": wire.requests,
        "cache_hits": 0,
        "prompt_tokens": wire.prompt_tokens,
        "own_prompt_tokens": wire.own_prompt_tokens,
        "seconds": round(time.perf_counter() - began, 1),
        "settings": SETTINGS[peer],
        "graded": peer in GRADED,
        "rows": rows,
    }


if __name__ == "__main__":
    main()
