"""One process, the model loaded once: what one look at a 224 × 224 image costs a vision transformer.

A ViT-base-shaped model (12 layers × 12 heads, hidden 768, patch 16: 197 tokens) with random
weights is saved to a temporary directory and loaded once through `attn_cli.load`; each look is
`model.inspect_image(image)` (the image processor, the forward with Q, K and V captured under
sdpa, and every head's statistics and top keys: all 144 heads; their 197 × 197 matrices pass the
default cell limit and are left out; writing JSON or drawing is not in a look, nor in the peer's),
interleaved image by image with the peer: bare transformers, the same checkpoint under eager
attention with `output_attentions=True` (the image processor and the forward). Target: attn ≤ 1.5× the peer, per-look medians of wall time; the CPU-time ratio is printed
beside it (the steadier figure on a loaded machine).

    .venv/bin/python benchmarks/bench_vision.py [--looks 5] [--device cpu] [--threads N]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from _timing import print_call_ratio, print_calls, print_header, print_threads, time_calls

TARGET_RATIO = 1.5
OURS, PEER = "attn model.inspect_image", "transformers eager output_attentions"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--looks", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, help="torch intra-op threads (default: torch's own)")
    args = parser.parse_args()
    print_header(f"vision: load once, {args.looks} looks at a 224 × 224 image (ViT-base shape, random weights)")

    import numpy as np
    import torch
    from PIL import Image
    from transformers import ViTConfig, ViTImageProcessor, ViTModel

    import attn_cli

    if args.threads:
        torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    images = [Image.fromarray(rng.integers(0, 256, (224, 224, 3), dtype=np.uint8)) for _ in range(args.looks + 1)]
    with tempfile.TemporaryDirectory(prefix="attn-bench-vit-") as folder:
        directory = Path(folder)
        torch.manual_seed(0)
        ViTModel(ViTConfig(), add_pooling_layer=False).save_pretrained(directory)
        processor = ViTImageProcessor()
        processor.save_pretrained(directory)
        start = time.perf_counter()
        model = attn_cli.load(str(directory), device=args.device)
        load_s = time.perf_counter() - start
        eager = ViTModel.from_pretrained(directory, attn_implementation="eager", add_pooling_layer=False).eval()
        eager.to(args.device)

        def attn(image) -> None:
            left_out.append(model.inspect_image(image).matrices_left_out)

        def peer(image) -> None:
            with torch.inference_mode():
                pixels = processor(images=image, return_tensors="pt")["pixel_values"].to(args.device)
                attentions = eager(pixel_values=pixels, output_attentions=True).attentions
            [layer.cpu() for layer in attentions]

        left_out: list[bool] = []  # per look: the matrices passed the cell limit
        sync = torch.cuda.synchronize if args.device.startswith("cuda") else lambda: None
        calls = time_calls({OURS: attn, PEER: peer}, images[:-1], images[-1], sync)

    print(f"attn_cli.load (ViT-base shape): {load_s:.2f} s (once)")
    print_threads(torch)
    print(
        f"attn keeps every head's statistics and top keys"
        f"{'; the matrices pass the cell limit and are left out' if left_out[-1] else ' and whole matrices'}\n"
    )
    print_calls(calls)
    met = print_call_ratio(calls, OURS, PEER, TARGET_RATIO)
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
