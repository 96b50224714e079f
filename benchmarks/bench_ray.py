"""`attn heads --engine ray` against the local engine: the overhead of one Ray worker and the gain of two.

A deterministic corpus of --texts sentences (_corpus.py); all 72 heads of the bundled all-MiniLM-L6-v2 on
CPU, batch size 32, no store. Each contender is one process (this file with --contender NAME), interleaved
after a warm-up; it loads the model (and, for Ray, starts a local cluster of --cpus CPUs) before its timer
and reports the timed call, model.heads(file=…), on stderr:

  local   the local engine, torch with --cpus threads
  ray1    --engine ray, one worker of --cpus threads (the overhead: target <= 1.25x local)
  ray2    --engine ray, two workers of --cpus/2 threads each (on 2 cores: one thread each, so they do not fight)

A Ray contender's time includes starting its workers and loading the model in each (a cold start: the
figure checked against the target): a cost per run that a longer corpus amortises (the table also gives
the seconds to the first chunk back, and texts/s after it: the steady rate). local and ray1 then make the
same call again in the same process, labelled warm: for ray1 on the workers the first call kept alive
(keep_workers=True), for local on the model that has run once; the warm figures are beside the target,
not checked against it. The timed call leaves out what the user also waits for (the cluster's start, the
driver's own model load), so two whole processes are timed beside it, as a user runs them:

  cli-local  attn heads --file CORPUS --device cpu --batch-size 32 --json -o FILE
  cli-ray1   the same with --engine ray --workers 1: a local cluster of all this machine's CPUs started
             and stopped inside, its one worker started before the driver loads its own model

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
    cold = timed_call(model, corpus, **options, **({"keep_workers": True} if name == "ray1" else {}))
    warm = timed_call(model, corpus, **options) if name in ("local", "ray1") else {}
    print(
        "BENCH "
        + " ".join(f"{kind}={figure:.4f}" for kind, figure in cold.items())
        + "".join(f" warm_{kind}={figure:.4f}" for kind, figure in warm.items()),
        file=sys.stderr,
    )


def timed_call(model, corpus: str, **options) -> dict[str, float]:
    """model.heads(file=corpus): its seconds, those to the first progress, texts/s after it, driver CPU s."""
    seen = []
    cpu, start = time.process_time(), time.perf_counter()
    model.heads(
        file=corpus, batch_size=BATCH, progress=lambda done, total: seen.append((time.perf_counter(), done)), **options
    )
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    (first, first_done), (last, last_done) = seen[0], seen[-1]
    steady = (last_done - first_done) / (last - first) if last > first else float("nan")
    return {"score_s": elapsed, "steady_texts_s": steady, "first_s": first - start, "driver_cpu_s": cpu}


def value(sample, kind: str) -> float:
    found = re.search(rf"BENCH (?:.* )?{kind}=([0-9.na]+)", sample.stderr)
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
    print_header(
        f"attn heads --engine ray benchmark: {args.texts} sentences of 10-30 words, all-MiniLM-L6-v2, "
        f"all 72 heads, CPU, batch size {BATCH}, {args.cpus} CPUs; before: {load}"
    )
    me = [sys.executable, str(Path(__file__).resolve())]
    contenders = {
        name: [*me, "--contender", name, "--corpus", str(corpus), "--cpus", str(args.cpus)]
        for name in ("local", "ray1", "ray2")
    }
    cli = [
        sys.executable,
        "-m",
        "attn_cli",
        "heads",
        "--file",
        str(corpus),
        "--device",
        "cpu",
        "--batch-size",
        str(BATCH),
        "--json",
        "-o",
        str(work / "heads.json"),
    ]
    contenders |= {"cli-local": cli, "cli-ray1": [*cli, "--engine", "ray", "--workers", "1"]}
    runs = interleave(contenders, args.repeat, args.warmup)
    calls = [name for name in runs if not name.startswith("cli-")]
    median = {
        name: {
            kind: statistics.median(value(s, kind) for s in runs[name])
            for kind in ("score_s", "first_s", "steady_texts_s", "driver_cpu_s")
        }
        for name in calls
    }
    print(f"{'the call':<9} runs  call s   x local  texts/s  first chunk s  steady texts/s  driver CPU s")
    for name, of in median.items():
        seconds = of["score_s"]
        print(
            f"{name:<9} {len(runs[name]):>4}  {seconds:>6.2f}  {seconds / median['local']['score_s']:>6.2f}x  "
            f"{args.texts / seconds:>7.1f}  {of['first_s']:>13.2f}  {of['steady_texts_s']:>14.1f}  "
            f"{of['driver_cpu_s']:>12.2f}"
        )
    walls = {name: statistics.median(s.wall_s for s in runs[name]) for name in ("cli-local", "cli-ray1")}
    print(f"\n{'process':<9} runs  wall s   x local")
    for name, seconds in walls.items():
        print(f"{name:<9} {len(runs[name]):>4}  {seconds:>6.2f}  {seconds / walls['cli-local']:>6.2f}x")
    ratios = {
        "the call": median["ray1"]["score_s"] / median["local"]["score_s"],
        "the whole process": walls["cli-ray1"] / walls["cli-local"],
    }
    print()
    for what, ratio in ratios.items():
        print(
            f"ray, one worker / local, {what}: {ratio:.2f}x (target <= {TARGET}x: "
            f"{'PASS' if ratio <= TARGET else 'FAIL'})"
        )
    print(f"ray, two workers / local, the call: {median['ray2']['score_s'] / median['local']['score_s']:.2f}x")
    warm = {name: statistics.median(value(s, "warm_score_s") for s in runs[name]) for name in ("local", "ray1")}
    print(
        f"warm, not checked: the same call again in the same process, local {warm['local']:.2f} s, ray1 on the "
        f"workers the first call kept {warm['ray1']:.2f} s: {warm['ray1'] / warm['local']:.2f}x "
        f"(ray1 warm / local cold: {warm['ray1'] / median['local']['score_s']:.2f}x)"
    )
    print(f"after: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    return 0 if all(ratio <= TARGET for ratio in ratios.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
