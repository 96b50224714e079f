"""What recording attention costs during generation: attn generate against plain model.generate().

A tiny Llama with its language-model head (hidden 256, 4 layers, 8 heads reading 2 kv heads,
RoPE) is built with save_pretrained in a temporary directory and loaded once. Both contenders
generate 64 tokens greedily from the same prompt in the same process, interleaved (A, B, A, B):
attn records every layer's and head's attention row at every step (model.generate through
attn_cli's Model.generate); the peer is transformers' own `generate()` on the same model object,
with the same settings. Target: attn median ≤ 1.3× the peer's.

    .venv/bin/python benchmarks/bench_generate.py [--repeat 7] [--tokens 64]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _timing import print_header

TARGET_RATIO = 1.3
PROMPT = "Once upon a time, in a small village by the sea, there lived"


def build_model(directory: Path) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from attn_cli.backends.minilm import minilm_dir

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=30522,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=2,
        max_position_embeddings=1024,
    )
    LlamaForCausalLM(config).eval().save_pretrained(directory)
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(minilm_dir() / name, directory / name)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()
    print_header(f"attn generate vs plain generate(), {args.tokens} new tokens, tiny Llama (4 layers × 8 heads)")

    import torch

    import attn_cli

    with tempfile.TemporaryDirectory() as folder:
        build_model(Path(folder))
        model = attn_cli.load(folder, device="cpu")
    backend = model.backend
    ids = torch.tensor([backend.tokenizer(PROMPT)["input_ids"]])

    def attn() -> int:
        report = model.generate(PROMPT, max_new_tokens=args.tokens)
        return len(report.tokens) - report.prompt_tokens

    def plain() -> int:
        with torch.inference_mode():
            out = backend.lm.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=args.tokens,
                do_sample=False,
                temperature=None,
                top_k=None,
                top_p=None,
                use_cache=True,
                pad_token_id=backend.tokenizer.pad_token_id,
            )
        return out.shape[1] - ids.shape[1]

    contenders = {"attn model.generate (all 32 heads recorded)": attn, "transformers generate()": plain}
    for run in contenders.values():  # warm-up
        run()
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(args.repeat):
        for name, run in contenders.items():
            start = time.perf_counter()
            produced = run()
            times[name].append(time.perf_counter() - start)
            assert produced == args.tokens, f"{name} generated {produced} tokens"
    print(f"{'contender':<46} {'median s':>9} {'min s':>7}")
    for name, samples in times.items():
        print(f"{name:<46} {statistics.median(samples):>9.3f} {min(samples):>7.3f}")
    ours, theirs = (statistics.median(samples) for samples in times.values())
    ratio = ours / theirs
    met = ratio <= TARGET_RATIO
    print(f"\nratio attn / generate(): {ratio:.2f}x (target <= {TARGET_RATIO}x: {'met' if met else 'NOT met'})")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
