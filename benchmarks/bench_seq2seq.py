"""One process, an encoder–decoder model loaded once: what one look at a source → target pair costs.

Builds a Marian-shaped model with random weights (opus-mt-en-de's sizes: 6 + 6 layers, 8 heads, d_model
512; MiniLM's tokenizer, so the vocabulary is 30522), saves it as a user's checkpoint, loads it once with
`attn_cli.load`, then inspects short translation pairs: every encoder, decoder and cross-attention head
(scores, weights, symmetry, entropy, top keys, score statistics). The peer, in the same process and
interleaved pair by pair, is bare transformers: the same model with eager attention and
`output_attentions=True` over the same source and decoder ids, its encoder, decoder and cross attentions
turned into Python lists. Target: attn / peer ≤ 1.5× (per-pair medians of wall time; the CPU-time
ratio is printed beside it, the steadier figure on a loaded machine).

    .venv/bin/python benchmarks/bench_seq2seq.py [--pairs 30] [--device cpu] [--threads N]
"""

from __future__ import annotations

import argparse
import io
import shutil
import sys
import tempfile
import time
from pathlib import Path

from _timing import print_call_ratio, print_calls, print_header, print_threads, time_calls

TARGET_RATIO = 1.5
OURS, PEER = "attn model.inspect(source, target=…)", "transformers eager output_attentions"
PAIRS = [
    ("The cat sat on the mat.", "Die Katze saß auf der Matte."),
    ("My neighbour reads every evening.", "Mein Nachbar liest jeden Abend."),
    ("The old train is late again today.", "Der alte Zug ist heute wieder spät."),
    ("A small bird sings when it rains.", "Ein kleiner Vogel singt, wenn es regnet."),
    ("Our teacher missed the last bus home.", "Unser Lehrer verpasste den letzten Bus nach Hause."),
]


def build(directory: Path) -> None:
    import torch
    from transformers import MarianConfig, MarianMTModel

    from attn_cli.backends.minilm import minilm_dir

    torch.manual_seed(0)
    config = MarianConfig(
        vocab_size=30522,
        d_model=512,
        encoder_layers=6,
        decoder_layers=6,
        encoder_attention_heads=8,
        decoder_attention_heads=8,
        encoder_ffn_dim=2048,
        decoder_ffn_dim=2048,
        max_position_embeddings=512,
        pad_token_id=0,
        eos_token_id=102,
        decoder_start_token_id=0,
        bos_token_id=101,
        forced_eos_token_id=102,
    )
    MarianMTModel(config).eval().save_pretrained(directory)
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(Path(minilm_dir()) / name, directory / name)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=30)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, help="torch intra-op threads (default: torch's own)")
    args = parser.parse_args()
    print_header(f"encoder–decoder: load once, inspect {args.pairs} source → target pairs (every stack, head)")

    import torch
    from transformers import AutoModelForSeq2SeqLM

    import attn_cli

    if args.threads:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="attn-bench-marian-") as folder:
        directory = Path(folder)
        build(directory)
        start = time.perf_counter()
        model = attn_cli.load(str(directory), device=args.device)
        load_s = time.perf_counter() - start
        eager = (
            AutoModelForSeq2SeqLM.from_pretrained(directory, local_files_only=True, attn_implementation="eager")
            .eval()
            .to(args.device)
        )
    tokenizer = model.backend.tokenizer

    def ours(pair) -> None:
        model.inspect(pair[0], target=pair[1])

    def peer(pair) -> None:
        from attn_cli.backends.hf_seq2seq import decoder_ids

        with torch.inference_mode():
            inputs = tokenizer(pair[0], return_tensors="pt").to(args.device)
            target = torch.tensor([decoder_ids(model.backend, pair[1])], device=args.device)
            out = eager(**inputs, decoder_input_ids=target, output_attentions=True)
        io.StringIO().write(
            repr(
                [
                    layer[0].tolist()
                    for layer in (*out.encoder_attentions, *out.decoder_attentions, *out.cross_attentions)
                ]
            )
        )

    pairs = [PAIRS[i % len(PAIRS)] for i in range(args.pairs)]
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else lambda: None
    calls = time_calls({OURS: ours, PEER: peer}, pairs, pairs[0], sync)

    print(f"attn_cli.load (Marian-shaped, random weights): {load_s:.2f} s (once)")
    print_threads(torch)
    print()
    print_calls(calls)
    met = print_call_ratio(calls, OURS, PEER, TARGET_RATIO)
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
