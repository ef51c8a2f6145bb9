"""A Hugging Face model directory made offline from a registry GGUF (``local.transformers_directory``),
so that `transformers:DIR` reads any layer of the same weights `local:NAME` runs (the Hub is out of
reach here).

    .venv/bin/python benchmarks/hf_from_gguf.py qwen2.5-coder-0.5b out/hf/qwen2.5-coder-0.5b
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from halluscope.backends.local import transformers_directory  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="a registry model's name (halluscope models list)")
    ap.add_argument("out", help="the directory to write")
    args = ap.parse_args()
    out = transformers_directory(args.model, args.out)
    print(f"wrote {out}: transformers:{out}")


if __name__ == "__main__":
    main()
