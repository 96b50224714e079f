"""End-to-end cost of `attn inspect TEXT --json` against bare transformers doing the same work.

Both contenders are whole processes, so the time covers interpreter start-up,
importing torch and transformers, loading the bundled all-MiniLM-L6-v2,
one forward pass and writing JSON (stdout goes to a temp file):

  attn  `attn inspect TEXT --json` (the venv's console script)
  peer  peer_transformers_inspect.py: AutoTokenizer/AutoModel (eager attention),
        forward with output_attentions=True, json.dump of tokens + weights

They run interleaved (A, B, A, B, ...); the table shows medians of wall time
and of peak RSS (ru_maxrss from os.wait4). Target: attn median <= 1.2x the peer's.

    .venv/bin/python benchmarks/bench_inspect.py --repeat 5 [--text "..."]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from _timing import add_common_args, interleave, print_header, print_ratio, print_stderr_notes, print_table

TARGET_RATIO = 1.2
PEER = Path(__file__).with_name("peer_transformers_inspect.py")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--text", default="Hello, how are you?", help="text to inspect")
    add_common_args(parser)
    args = parser.parse_args()

    print_header(f"attn inspect benchmark, text {args.text!r}")
    attn = str(Path(sys.executable).with_name("attn"))
    contenders = {
        "attn inspect --json": [attn, "inspect", args.text, "--json"],
        "bare transformers": [sys.executable, str(PEER), args.text],
    }
    samples = interleave(contenders, args.repeat, args.warmup)
    print_table(samples)
    print_stderr_notes(samples)

    return 0 if print_ratio(samples, "attn inspect --json", "bare transformers", TARGET_RATIO) else 1


if __name__ == "__main__":
    sys.exit(main())
