"""Start-up cost of the `attn` CLI: `attn --help` as a whole process.

`attn --help` should feel instant (target: median <= 0.3 s), which needs the
CLI module to leave torch and transformers unimported until a command runs.
This script checks that in a fresh interpreter, then times `attn --help`
(the venv's console script, next to sys.executable) interleaved with
`python -c pass`, the interpreter start-up floor, and prints both medians and
the ratio.

    .venv/bin/python benchmarks/bench_startup.py --repeat 5 [--record]

The figures are printed beside benchmarks/records/bench_startup.json (one 10 % above its record fails the run);
--record writes them there.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from _timing import (
    add_common_args,
    compare_with_record,
    interleave,
    median_wall,
    print_header,
    print_stderr_notes,
    print_table,
)

TARGET_S = 0.3
HEAVY = ("torch", "transformers")
CHECK = f"import sys, attn_cli.cli; print(' '.join(sorted({{m.split('.')[0] for m in sys.modules}} & {set(HEAVY)!r})))"


def heavy_imports() -> list[str]:
    """Top-level heavy packages that `import attn_cli.cli` leaves in sys.modules, in a fresh interpreter."""
    result = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, check=True)
    return result.stdout.split()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser)
    parser.add_argument("--record", action="store_true", help="write the figures to benchmarks/records/")
    args = parser.parse_args()

    print_header("attn start-up benchmark")
    loaded = heavy_imports()
    imports_ok = not loaded
    print(
        f"import attn_cli.cli loads {', '.join(HEAVY)}: "
        f"{'no -> OK' if imports_ok else 'YES (' + ', '.join(loaded) + ') -> FAIL'}\n"
    )

    attn = str(Path(sys.executable).with_name("attn"))
    samples = interleave(
        {"attn --help": [attn, "--help"], "python -c pass": [sys.executable, "-c", "pass"]}, args.repeat, args.warmup
    )
    print_table(samples)
    print_stderr_notes(samples)

    attn_s, floor_s = median_wall(samples["attn --help"]), median_wall(samples["python -c pass"])
    time_ok = attn_s <= TARGET_S
    print(f"attn --help median     {attn_s:.3f} s  (target <= {TARGET_S} s: {'PASS' if time_ok else 'FAIL'})")
    print(f"python -c pass median  {floor_s:.3f} s")
    print(f"ratio attn / python    {attn_s / floor_s:.2f}x")
    figures = {"attn --help median s": attn_s}  # not the ratio: its 11 ms floor makes it swing by tens of percent
    grown = compare_with_record("bench_startup", figures, args.record)
    return 0 if imports_ok and time_ok and not grown else 1


if __name__ == "__main__":
    sys.exit(main())
