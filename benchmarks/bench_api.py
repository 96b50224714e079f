"""One process, the model loaded once: what each further question costs through the Python API.

Loads the bundled MiniLM once with `attn_cli.load`, then inspects 50 different
short sentences (all 6 layers × 12 heads: scores, weights, symmetry, entropy,
top keys, score statistics), and separately the same plus writing the report's
JSON to memory, as `attn inspect --json` does. The peer, in the same process and
interleaved sentence by sentence, is bare transformers: the same model with
eager attention and `output_attentions=True`, its weights turned into Python
lists. Target: `model.inspect` per-sentence median ≤ 0.1 s on CPU.

    .venv/bin/python benchmarks/bench_api.py [--sentences 50] [--device cpu] [--threads N]
"""

from __future__ import annotations

import argparse
import io
import sys
import time

from _timing import median_of, print_calls, print_header, print_threads, time_calls

TARGET_SECONDS = 0.1
SUBJECTS = [
    "The cat",
    "My neighbour",
    "A tired student",
    "The old train",
    "Her brother",
    "This model",
    "The committee",
    "A small bird",
    "Our teacher",
    "The river",
]
PREDICATES = [
    "sat on the mat.",
    "reads every evening.",
    "missed the last bus home.",
    "is late again today.",
    "sings when it rains.",
]


def sentences(count: int) -> list[str]:
    """`count` different short sentences (6–10 tokens each)."""
    return [
        f"{SUBJECTS[i % len(SUBJECTS)]} {PREDICATES[(i // len(SUBJECTS)) % len(PREDICATES)]}"
        + ("" if i < len(SUBJECTS) * len(PREDICATES) else f" ({i})")
        for i in range(count)
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=50)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, help="torch intra-op threads (default: torch's own)")
    args = parser.parse_args()
    print_header(f"Python API: load once, inspect {args.sentences} sentences (all layers and heads)")

    import torch
    from transformers import AutoModel, AutoTokenizer

    import attn_cli
    from attn_cli.backends.minilm import minilm_dir
    from attn_cli.render.files import write_json

    if args.threads:
        torch.set_num_threads(args.threads)

    start = time.perf_counter()
    model = attn_cli.load("minilm", device=args.device)
    load_s = time.perf_counter() - start
    directory = minilm_dir()
    tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
    eager = AutoModel.from_pretrained(directory, local_files_only=True, attn_implementation="eager").eval()
    eager.to(args.device)

    def attn(text: str) -> None:
        model.inspect(text)

    def attn_json(text: str) -> None:
        write_json(model.inspect(text), io.StringIO())

    def peer(text: str) -> None:
        with torch.inference_mode():
            inputs = tokenizer(text, return_tensors="pt").to(args.device)
            attentions = eager(**inputs, output_attentions=True).attentions
        io.StringIO().write(repr([layer[0].tolist() for layer in attentions]))

    texts = sentences(args.sentences)
    contenders = {
        "attn model.inspect": attn,
        "attn model.inspect + JSON": attn_json,
        "transformers eager output_attentions": peer,
    }
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else lambda: None
    calls = time_calls(contenders, texts, texts[0], sync)

    print(f"attn_cli.load('minilm'): {load_s:.2f} s (once)")
    print_threads(torch)
    print()
    print_calls(calls)
    ours, peer_s = median_of(calls["attn model.inspect"]), median_of(calls["transformers eager output_attentions"])
    cpu = median_of(calls["attn model.inspect"], "cpu_s") / median_of(
        calls["transformers eager output_attentions"], "cpu_s"
    )
    print(
        f"\nratio attn / peer: wall {ours / peer_s:.2f}x, CPU {cpu:.2f}x "
        "(attn also computes scores, symmetry, entropy, top keys)"
    )
    met = ours <= TARGET_SECONDS
    print(f"target: attn per-sentence median <= {TARGET_SECONDS} s: {'met' if met else 'NOT met'} ({ours:.4f} s)")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
