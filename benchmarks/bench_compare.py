"""What `attn compare` costs over `attn inspect` on the same input and selection.

The per-layer mode runs the model once and recomputes each variant from the
captured Q, K (and X for raw), so compare should cost little more than
inspect: target median <= 1.3x. Both are whole processes writing --json to a
temp file, interleaved (A, B, A, B, ...), compared by median wall time.

    .venv/bin/python benchmarks/bench_compare.py --repeat 5 [--text "..."] [--variant raw ...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from _timing import add_common_args, interleave, print_header, print_ratio, print_stderr_notes, print_table

TARGET_RATIO = 1.3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--text", default="我是一个男孩", help="text to compare on")
    parser.add_argument("--variant", action="append", help="variants for compare (default: shared-k)")
    add_common_args(parser)
    args = parser.parse_args()

    print_header(f"attn compare vs inspect, text {args.text!r}")
    attn = str(Path(sys.executable).with_name("attn"))
    variants = [arg for name in (args.variant or ["shared-k"]) for arg in ("--variant", name)]
    contenders = {
        "attn compare --json": [attn, "compare", args.text, *variants, "--json"],
        "attn inspect --json": [attn, "inspect", args.text, "--json"],
    }
    samples = interleave(contenders, args.repeat, args.warmup)
    print_table(samples)
    print_stderr_notes(samples)

    return 0 if print_ratio(samples, *contenders, TARGET_RATIO) else 1


if __name__ == "__main__":
    sys.exit(main())
