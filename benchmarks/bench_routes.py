"""One process, the model loaded once: `model.routes` on a 256-token text beside one plain forward pass of
the same text (the model's own forward, no capture), as a ratio. Target: routes ≤ 3× the forward.

The model is a GPT-2 built from a seeded config (4 layers, 8 heads, d_model 256, 512 positions, MiniLM's
tokenizer), saved to a temporary directory: nothing is downloaded. Routes runs one captured forward, splits
each layer's attention over (source, head) only for the states its pruned search reaches, and prunes.
The reference implementation's time (llm-transparency-tool, TransformerLens) is not measured: it does not
install here (see the routes helper's report).

    .venv/bin/python benchmarks/bench_routes.py [--repeat 7] [--tokens 256] [--threads N]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from _timing import median_of, print_header, time_calls

TARGET_RATIO = 3.0
WORDS = "the old committee finally approved the new budget after a long and heated debate in the hall".split()


def build(directory: Path, lm: bool = False) -> None:
    """The seeded GPT-2 (lm: with its language-model head, for bench_ablate's importance) and MiniLM's tokenizer."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, GPT2Model

    from attn_cli.backends.minilm import minilm_dir

    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=30522, n_embd=256, n_layer=4, n_head=8, n_positions=512, bos_token_id=101, eos_token_id=102
    )
    (GPT2LMHeadModel if lm else GPT2Model)(config).eval().save_pretrained(directory)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        if (minilm_dir() / name).exists():
            shutil.copy(minilm_dir() / name, directory / name)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--threads", type=int, help="torch intra-op threads (default: torch's own)")
    args = parser.parse_args()

    import torch

    import attn_cli

    if args.threads:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="bench-routes") as folder:
        build(Path(folder))
        model = attn_cli.load(folder, device="cpu")
        words = (WORDS * (args.tokens // len(WORDS) + 2))[: args.tokens]
        text = " ".join(words)
        while len(model.backend.tokens(text)[0]) > args.tokens:
            words = words[:-1]
            text = " ".join(words)
        count = len(model.backend.tokens(text)[0])
        fed = {name: value for name, value in model.backend.tokenizer(text, return_tensors="pt").items()}
        print_header(f"attn routes vs one forward pass, tiny GPT-2 (4 layers × 8 heads, d 256), {count} tokens")

        def forward():
            with torch.inference_mode():
                model.backend.model(**fed)

        # one warm-up each, then A, B, A, B, … (the same text every round)
        calls = time_calls(
            {"forward": lambda _: forward(), "routes": lambda _: model.routes(text)}, [text] * args.repeat, text
        )
    floor = median_of(calls["forward"])
    ratio = median_of(calls["routes"]) / floor
    print(f"{'contender':<12}{'median s':>10}{'× forward':>11}")
    for name, runs in calls.items():
        print(f"{name:<12}{median_of(runs):>10.4f}{median_of(runs) / floor:>10.2f}×")
    met = ratio <= TARGET_RATIO
    print(f"\nroutes / forward = {ratio:.2f}× (target ≤ {TARGET_RATIO:g}×){'' if met else '  MISSED'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
