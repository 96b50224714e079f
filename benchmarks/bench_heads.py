"""Throughput of `attn heads --file` against bare transformers doing the same work, in the same run.

A deterministic corpus of --texts sentences of 10–30 words (_corpus.py) is written to a
temp file; all 72 heads of the bundled all-MiniLM-L6-v2 on CPU are scored over it by

  attn   attn_heads_inprocess.py: attn_cli.load("minilm").heads(file=…, batch_size=…), the call
         `attn heads --file` makes (sdpa forward with Q/K captured; weights recomputed a block of
         heads at a time; texts sorted by length within windows of 16 batches)
  peer   peer_heads.py: transformers eager attention with output_attentions=True, batches in file
         order, and the same nine formulas in torch over the returned weights
  cli    (with --cli) `python -m attn_cli heads --file CORPUS --json -o FILE`, a whole process

Each contender is a whole process (interleaved A, B, A, B after a warm-up); each reports its
timed scoring phase (after loading) on stderr. The table shows medians: texts/s of the scoring
phase, whole-process wall time and peak RSS (ru_maxrss). It also checks that attn's and the
peer's per-head means agree. Target: attn texts/s >= the peer's, with peak RSS no higher.

    .venv/bin/python benchmarks/bench_heads.py --repeat 3 [--texts 1000] [--batch-size 32] [--cli]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
from pathlib import Path

from _corpus import write_corpus
from _timing import add_common_args, interleave, print_header, print_stderr_notes

HERE = Path(__file__).parent


def scoring_seconds(sample) -> float:
    found = re.search(r"BENCH score_s=([0-9.]+)", sample.stderr)
    if found is None:
        raise SystemExit(f"no BENCH line in the contender's stderr:\n{sample.stderr[-2000:]}")
    return float(found.group(1))


def max_difference(first: Path, second: Path) -> float:
    a, b = json.loads(first.read_text()), json.loads(second.read_text())
    worst = 0.0
    for x, y in zip(a["heads"], b["heads"], strict=True):
        for name, value in x["scores"].items():
            other = y["scores"][name]
            if (value is None) != (other is None):
                return float("inf")
            if value is not None:
                worst = max(worst, abs(value - other))
    return worst


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=1000, help="sentences in the corpus (default 1000)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--cli", action="store_true", help="also time the attn heads command as a whole process")
    add_common_args(parser)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-heads-"))
    corpus = work / "corpus.txt"
    write_corpus(corpus, args.texts)
    print_header(
        f"attn heads benchmark: {args.texts} sentences of 10-30 words, all-MiniLM-L6-v2, all 72 heads, "
        f"CPU, batch size {args.batch_size}"
    )
    batch = ["--batch-size", str(args.batch_size)]
    contenders = {
        "attn heads (API)": [
            sys.executable,
            str(HERE / "attn_heads_inprocess.py"),
            str(corpus),
            *batch,
            "--out",
            str(work / "attn.json"),
        ],
        "peer (eager, output_attentions)": [
            sys.executable,
            str(HERE / "peer_heads.py"),
            str(corpus),
            *batch,
            "--out",
            str(work / "peer.json"),
        ],
    }
    if args.cli:
        contenders["attn heads --file (CLI)"] = [
            sys.executable,
            "-m",
            "attn_cli",
            "heads",
            "--file",
            str(corpus),
            *batch,
            "--device",
            "cpu",
            "--json",
            "-o",
            str(work / "cli.json"),
        ]
    samples = interleave(contenders, args.repeat, args.warmup)

    width = max(len(name) for name in contenders)
    print(f"{'contender':<{width}}  runs  scoring s  texts/s  whole process s  peak RSS MiB")
    rates, rss = {}, {}
    for name, runs in samples.items():
        wall = statistics.median(s.wall_s for s in runs)
        rss[name] = statistics.median(s.max_rss_mib for s in runs)
        if name.endswith("(CLI)"):
            print(
                f"{name:<{width}}  {len(runs):>4}  {'-':>9}  {args.texts / wall:>7.1f}  {wall:>15.2f}  "
                f"{rss[name]:>12.1f}   (texts/s of the whole process)"
            )
            continue
        scoring = statistics.median(scoring_seconds(s) for s in runs)
        rates[name] = args.texts / scoring
        print(
            f"{name:<{width}}  {len(runs):>4}  {scoring:>9.2f}  {rates[name]:>7.1f}  {wall:>15.2f}  {rss[name]:>12.1f}"
        )
    print()
    print_stderr_notes(
        {name: [s for s in runs if "error" in s.stderr.lower()] or runs[:0] for name, runs in samples.items()}
    )
    attn, peer = "attn heads (API)", "peer (eager, output_attentions)"
    ratio = rates[attn] / rates[peer]
    memory = rss[attn] / rss[peer]
    difference = max_difference(work / "attn.json", work / "peer.json")
    print(f"throughput ratio attn / peer  {ratio:.2f}x  (target >= 1.0x: {'PASS' if ratio >= 1.0 else 'FAIL'})")
    print(f"peak RSS attn / peer          {memory:.2f}x  (target <= 1.0x: {'PASS' if memory <= 1.0 else 'FAIL'})")
    print(f"largest |attn - peer| over the 72 x 9 mean scores: {difference:.2e}")
    return 0 if ratio >= 1.0 and memory <= 1.0 and difference < 1e-3 else 1


if __name__ == "__main__":
    sys.exit(main())
