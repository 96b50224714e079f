"""`attn heads --engine ray` against the local engine: the overhead of one Ray worker and the gain of two.

A deterministic corpus of --texts sentences (_corpus.py); all 72 heads of the bundled all-MiniLM-L6-v2 on
CPU, batch size 32, no store. Each contender is one process (this file with --contender NAME), interleaved
after a warm-up; it loads the model (and, for Ray, starts a local cluster of --cpus CPUs) before its timer
and reports the timed call, model.heads(file=…), on stderr:

  local   the local engine, torch with --cpus threads
  ray1    --engine ray, one worker of --cpus threads (the overhead: target <= 1.25x local)
  ray2    --engine ray, two workers of --cpus/2 threads each (on 2 cores: one thread each, so they do not fight)

A Ray contender's time includes starting its workers and loading the model in each: a cost per run that a
longer corpus amortises (the table also gives texts/s after the first chunk is back, the steady rate).

    .venv/bin/python benchmarks/bench_ray.py [--texts 2000] [--repeat 3] [--cpus 2]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _corpus import write_corpus
from _timing import add_common_args, interleave, print_header

BATCH = 32
TARGET = 1.25


def contender(name: str, corpus: str, cpus: int) -> None:
    import torch

    import attn_cli

    torch.set_num_threads(cpus)
    model = attn_cli.load("minilm", device="cpu")
    options = {}
    if name != "local":
        import ray

        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        ray.init(address="local", num_cpus=cpus, include_dashboard=False, log_to_driver=False)  # a new cluster
        options = {"engine": "ray", "workers": 1 if name == "ray1" else 2}
    seen = []
    start = time.perf_counter()
    model.heads(file=corpus, batch_size=BATCH, progress=lambda done, total: seen.append((time.perf_counter(), done)),
                **options)
    elapsed = time.perf_counter() - start
    (first, first_done), (last, last_done) = seen[0], seen[-1]
    steady = (last_done - first_done) / (last - first) if last > first else float("nan")
    print(f"BENCH score_s={elapsed:.4f} steady_texts_s={steady:.2f}", file=sys.stderr)


def value(sample, kind: str) -> float:
    found = re.search(rf"BENCH .*{kind}=([0-9.na]+)", sample.stderr)
    if found is None:
        raise SystemExit(f"no BENCH line in the contender's stderr:\n{sample.stderr[-2000:]}")
    return float(found.group(1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=2000)
    parser.add_argument("--cpus", type=int, default=2, help="CPUs of the local cluster, threads of the local run")
    parser.add_argument("--contender", help=argparse.SUPPRESS)
    parser.add_argument("--corpus", help=argparse.SUPPRESS)
    add_common_args(parser)
    args = parser.parse_args()
    if args.contender:
        contender(args.contender, args.corpus, args.cpus)
        return 0
    work = Path(tempfile.mkdtemp(prefix="bench-ray-"))
    corpus = work / "corpus.txt"
    write_corpus(corpus, args.texts)
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print_header(f"attn heads --engine ray benchmark: {args.texts} sentences of 10-30 words, all-MiniLM-L6-v2, "
                 f"all 72 heads, CPU, batch size {BATCH}, {args.cpus} CPUs; before: {load}")
    me = [sys.executable, str(Path(__file__).resolve())]
    contenders = {name: [*me, "--contender", name, "--corpus", str(corpus), "--cpus", str(args.cpus)]
                  for name in ("local", "ray1", "ray2")}
    runs = interleave(contenders, args.repeat, args.warmup)
    medians = {name: statistics.median(value(s, "score_s") for s in samples) for name, samples in runs.items()}
    steady = {name: statistics.median(value(s, "steady_texts_s") for s in samples) for name, samples in runs.items()}
    print(f"{'contender':<9} runs  call s   x local  texts/s  steady texts/s")
    for name, seconds in medians.items():
        print(f"{name:<9} {len(runs[name]):>4}  {seconds:>6.2f}  {seconds / medians['local']:>6.2f}x  "
              f"{args.texts / seconds:>7.1f}  {steady[name]:>14.1f}")
    ratio = medians["ray1"] / medians["local"]
    print(f"ray, one worker / local: {ratio:.2f}x (target <= {TARGET}x: {'PASS' if ratio <= TARGET else 'FAIL'}); "
          f"two workers / local: {medians['ray2'] / medians['local']:.2f}x")
    print(f"after: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
