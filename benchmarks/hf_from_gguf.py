"""A Hugging Face model directory made offline from a registry GGUF (dequantised to float32 by
transformers), so that `transformers:DIR` reads any layer of the same weights `local:NAME` runs (the
Hub is out of reach here). Written with safetensors: transformers will not save a model it loaded
from GGUF with save_pretrained.

    .venv/bin/python benchmarks/hf_from_gguf.py qwen2.5-coder-0.5b out/hf/qwen2.5-coder-0.5b
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from halluscope.backends.local import model_file  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="a registry model's name (halluscope models list)")
    ap.add_argument("out", help="the directory to write")
    args = ap.parse_args()
    from safetensors.torch import save_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = model_file(args.model)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.config.save_pretrained(out)
    tokenizer.save_pretrained(out)
    save_model(model, str(out / "model.safetensors"))
    print(f"wrote {out}: transformers:{out}")


if __name__ == "__main__":
    main()
