"""Two timings in one process, each beside its peer, as ratios.

1. MiniLM loaded once: `model.ablate` of all 72 heads (zero-ablation, each alone, cosine distance of the pooled
embedding) beside the obvious peer, a loop of 72 hooked forwards. Target: ≤ 0.5× the loop.

The peer is what a user writes without attn: for each head, a forward pre-hook on that layer's
attention.output.dense (the projection that mixes the heads) zeroes the head's slice of its input, one
forward per head, plus one clean forward; then the same cosine distance. attn batches the ablations (each row
of a forward is the text with another head removed). Both give the same 72 numbers: checked (1e-6) before
timing.

2. Head importance over 1,000 texts (benchmarks/_corpus.py's sentences) on a GPT-2 built from a seeded config
(4 layers × 8 heads, d_model 256, MiniLM's tokenizer; nothing downloaded), batches of 8, no pruning curve,
beside one plain forward pass over the same batches (the model's own forward under inference_mode, its
language-model head included). Target: ≤ 3× the forward.

    .venv/bin/python benchmarks/bench_ablate.py [--repeat 7] [--words 24] [--texts 1000] [--threads N]
"""

from __future__ import annotations

import argparse
import sys

from _corpus import sentences
from _timing import median_of, print_call_ratio, print_calls, print_header, print_threads, time_calls

TARGET_RATIO = 0.5
IMPORTANCE_TARGET = 3.0
WORDS = "the old committee finally approved the new budget after a long and heated debate in the hall".split()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--words", type=int, default=24, help="words in the text (default 24)")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--texts", type=int, default=1000, help="importance: texts of the corpus (default 1000)")
    parser.add_argument("--threads", type=int, help="torch intra-op threads (default: torch's own)")
    args = parser.parse_args()

    import torch

    import attn_cli

    if args.threads:
        torch.set_num_threads(args.threads)
    model = attn_cli.load("minilm", device="cpu")
    backend = model.backend
    text = " ".join((WORDS * (args.words // len(WORDS) + 1))[: args.words])
    fed = backend.intervention_input(text)
    layers, heads, size = backend.info.layers, backend.info.heads, backend.info.head_dim
    print_header(f"attn ablate vs a loop of hooked forwards, MiniLM ({layers} × {heads} heads), {len(fed.ids)} tokens")
    print_threads(torch)

    def loop() -> list[float]:
        def pooled(layer: int | None, head: int) -> torch.Tensor:
            def zero(module, inputs):
                mixed = inputs[0].clone()
                mixed[..., head * size : (head + 1) * size] = 0
                return (mixed,)

            hook = None if layer is None else backend.model.encoder.layer[layer].attention.output.dense
            handle = None if hook is None else hook.register_forward_pre_hook(zero)
            try:
                with torch.inference_mode():
                    return backend.model(**fed.inputs).last_hidden_state[0].double().mean(0)
            finally:
                if handle is not None:
                    handle.remove()

        clean = pooled(None, 0)
        return [
            1 - float(torch.cosine_similarity(pooled(layer, head), clean, dim=0))
            for layer in range(layers)
            for head in range(heads)
        ]

    ours = [ablation.value for ablation in model.ablate(text).ablations]
    theirs = loop()
    worst = max(abs(a - b) for a, b in zip(ours, theirs))
    print(f"same numbers: the 72 effects differ by at most {worst:.1e} (≤ 1e-6 required)")
    if worst > 1e-6:
        return 1
    calls = time_calls({"loop": lambda _: loop(), "attn": lambda _: model.ablate(text)}, [text] * args.repeat, text)
    print_calls(calls)
    met = print_call_ratio(calls, "attn", "loop", TARGET_RATIO)
    print(f"medians: attn {median_of(calls['attn']):.3f} s, loop {median_of(calls['loop']):.3f} s")
    return 0 if met and importance(args) else 1


def importance(args) -> bool:
    import tempfile
    from pathlib import Path

    import torch
    from bench_routes import build

    import attn_cli

    texts = sentences(args.texts)
    with tempfile.TemporaryDirectory(prefix="bench-importance") as folder:
        build(Path(folder), lm=True)
        model = attn_cli.load(folder, device="cpu")
        backend = model.backend
        batches = [backend.intervention_batch(texts[start : start + 8]) for start in range(0, len(texts), 8)]
        print_header(f"\nhead importance over {len(texts)} texts vs one forward over them, GPT-2 (4 × 8 heads, d 256)")

        def forward():
            with torch.inference_mode():
                for fed in batches:
                    backend.lm(**fed.inputs)

        calls = time_calls(
            {"forward": lambda _: forward(), "attn": lambda _: model.importance(texts, prune=False)},
            [None] * max(3, args.repeat // 2),
            None,
        )
    print_calls(calls)
    return print_call_ratio(calls, "attn", "forward", IMPORTANCE_TARGET)


if __name__ == "__main__":
    sys.exit(main())
