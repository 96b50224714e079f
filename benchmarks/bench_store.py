"""`attn heads --store` against the physical floor, and its peak memory as the corpus grows.

A deterministic corpus of --texts sentences (_corpus.py); all 72 heads of the bundled all-MiniLM-L6-v2 on
CPU, batch size 32. Each contender is one process (this file with --contender NAME), interleaved after a
warm-up (the order rotated each round), and reports its timed phase (after loading) on stderr:

  floor   a bare sdpa forward of the model over the same length-sorted batches attn runs (one part:
          texts sorted by length, then text_id), tokenizing included, nothing captured or scored
  heads   model.heads(file=…): `attn heads --file` without a store (the fold, nothing written)
  store   model.heads(file=…, store=DIR): the same plus the parts, examples and the four tables
  whole   the store run with the forward run to its end: attn stops it once the last selected layer's q and k
          are handed over (here layer 5's: its attention output, feed-forward and the pooler are never run),
          which the floor, a plain forward, does not; this shows what that stop is worth
  stopped the floor stopped where attn stops: the same forward through attn's capture hook, whose sink keeps
          nothing, up to the last layer's q, k and v; store / stopped is the cost of scoring and the store alone

It prints each as a ratio to the floor (target for the store run: <= 1.5x), then the peak RSS (ru_maxrss
of the child) of a store run over --rss-lines corpora (default 10,000 and 100,000 lines; target: the
larger within 10 % of the smaller).

    .venv/bin/python benchmarks/bench_store.py [--texts 1000] [--repeat 3] [--rss-lines 10000 100000]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _corpus import write_corpus
from _timing import add_common_args, print_header, run_once

HERE = Path(__file__).parent
BATCH = 32


def contender(name: str, corpus: str, store: str | None) -> None:
    import attn_cli

    model = attn_cli.load("minilm", device="cpu")
    if name == "whole":  # the forward is not stopped after the last selected layer
        from attn_cli.backends import capture_hook

        init = capture_hook.LayerRecorder.__init__
        capture_hook.LayerRecorder.__init__ = lambda self, *args, **kwargs: init(
            self, *args, **{**kwargs, "stop": False}
        )
    cpu = time.process_time()
    if name in ("floor", "stopped"):
        elapsed = floor(model.backend, corpus, stopped=name == "stopped")
    else:
        start = time.perf_counter()
        model.heads(file=corpus, batch_size=BATCH, store=store if name in ("store", "whole") else None)
        elapsed = time.perf_counter() - start
    # CPU seconds too (all threads): on a shared machine they move less with the load than wall time
    print(f"BENCH score_s={elapsed:.4f} cpu_s={time.process_time() - cpu:.4f}", file=sys.stderr)


def floor(backend, corpus: str, stopped: bool = False) -> float:
    """The forward alone over attn's batches: parts of PART_TEXTS sorted by (length, text_id). stopped: through
    attn's capture hook with a sink that keeps nothing, stopped after the last layer's q, k and v are made."""
    import contextlib

    import torch

    from attn_cli.analyses.fold import PART_TEXTS
    from attn_cli.backends.capture_hook import LayerRecorder, LayersCaptured, capturing

    texts = [line.rstrip("\n") for line in open(corpus, encoding="utf-8") if line.strip()]
    tokenizer, model = backend.tokenizer, backend.model
    recorder = LayerRecorder(
        set(range(backend.info.layers)), model.config._attn_implementation, sink=lambda record: None, stop=True
    )
    start = time.perf_counter()
    with torch.inference_mode(), capturing(model, recorder) if stopped else contextlib.nullcontext():
        for first in range(0, len(texts), PART_TEXTS):
            part = sorted(enumerate(texts[first : first + PART_TEXTS]), key=lambda item: (len(item[1]), item[0]))
            for at in range(0, len(part), BATCH):
                batch = tokenizer([text for _, text in part[at : at + BATCH]], padding=True, return_tensors="pt")
                recorder.handed.clear()
                try:
                    model(**batch)
                except LayersCaptured:
                    pass
    return time.perf_counter() - start


def seconds(sample, kind: str = "score_s") -> float:
    found = re.search(rf"BENCH .*{kind}=([0-9.]+)", sample.stderr)
    if found is None:
        raise SystemExit(f"no BENCH line in the contender's stderr:\n{sample.stderr[-2000:]}")
    return float(found.group(1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=1000)
    parser.add_argument("--rss-lines", type=int, nargs="*", default=[10_000, 100_000])
    parser.add_argument("--contender", help=argparse.SUPPRESS)
    parser.add_argument("--corpus", help=argparse.SUPPRESS)
    parser.add_argument("--store", help=argparse.SUPPRESS)
    add_common_args(parser)
    args = parser.parse_args()
    if args.contender:
        contender(args.contender, args.corpus, args.store)
        return 0
    work = Path(tempfile.mkdtemp(prefix="bench-store-"))
    corpus = work / "corpus.txt"
    write_corpus(corpus, args.texts)
    print_header(
        f"attn heads --store benchmark: {args.texts} sentences of 10-30 words, all-MiniLM-L6-v2, "
        f"all 72 heads, CPU, batch size {BATCH}"
    )
    me = [sys.executable, str(Path(__file__).resolve())]
    contenders = {name: [*me, "--contender", name, "--corpus", str(corpus)] for name in ("floor", "stopped", "heads")}
    for name in ("store", "whole"):
        contenders[name] = [*me, "--contender", name, "--corpus", str(corpus), "--store", str(work / "s")]
    if args.repeat > 0:  # --repeat 0: only the memory runs
        timings(_interleave_fresh(contenders, args.repeat, args.warmup, work))
    if len(args.rss_lines) >= 2:
        peaks = {}
        for lines in args.rss_lines:
            path = work / f"rss-{lines}.txt"
            write_corpus(path, lines)
            sample = run_once(
                [*me, "--contender", "store", "--corpus", str(path), "--store", str(work / f"rss-{lines}")]
            )
            peaks[lines] = sample.max_rss_mib
            print(f"peak RSS of a store run over {lines:,} lines: {peaks[lines]:.1f} MiB ({seconds(sample):.1f} s)")
        small, large = peaks[args.rss_lines[0]], peaks[args.rss_lines[-1]]
        growth = large / small - 1
        print(f"growth {growth:+.1%} (target within 10 %: {'PASS' if abs(growth) <= 0.10 else 'FAIL'})")
    return 0


def timings(runs: dict) -> None:
    medians = {name: statistics.median(seconds(s) for s in samples) for name, samples in runs.items()}
    cpu = {name: statistics.median(seconds(s, "cpu_s") for s in samples) for name, samples in runs.items()}
    # each round runs every contender once, one after another: its store / floor is paired against the host's
    # speed of the moment, which drifts over minutes on a shared machine
    paired = statistics.median(seconds(store) / seconds(floor) for store, floor in zip(runs["store"], runs["floor"]))
    print(f"{'contender':<8}  runs  scoring s  x floor   CPU s  x floor")
    for name, value in medians.items():
        print(
            f"{name:<8}  {len(runs[name]):>4}  {value:>9.2f}  {value / medians['floor']:>6.2f}x  "
            f"{cpu[name]:>6.2f}  {cpu[name] / cpu['floor']:>6.2f}x"
        )
    for name, samples in runs.items():  # round by round: how far the host's speed moved
        print(f"  {name:<8} each round: {' '.join(f'{seconds(sample):.2f}' for sample in samples)} s")
    for what, seconds_ in (("wall", medians), ("CPU", cpu)):
        ratio = seconds_["store"] / seconds_["floor"]
        print(
            f"{what}: store / floor {ratio:.2f}x (target <= 1.5x: {'PASS' if ratio <= 1.5 else 'FAIL'}); "
            f"heads / floor {seconds_['heads'] / seconds_['floor']:.2f}x; "
            f"store with the whole forward / floor {seconds_['whole'] / seconds_['floor']:.2f}x; "
            f"store / stopped floor {seconds_['store'] / seconds_['stopped']:.2f}x"
        )
    wall = medians["store"] / medians["floor"]
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"the target is written in wall time: {'met' if wall <= 1.5 else 'NOT met'} ({wall:.2f}x; the median of "
        f"each round's store / floor: {paired:.2f}x); load average after the runs {load} (a loaded machine moves "
        f"the wall ratio: compare the CPU ratio)"
    )


def _interleave_fresh(contenders: dict, repeat: int, warmup: int, work: Path) -> dict:
    """_timing.interleave, with a new store directory for every store run (a store needs an empty one), and the
    order rotated from round to round."""
    count = iter(range(10**6))

    def fresh(cmd: list[str]) -> list[str]:
        return [part if part != str(work / "s") else str(work / f"s{next(count)}") for part in cmd]

    samples = {name: [] for name in contenders}
    names = list(contenders)
    for round_ in range(warmup + repeat):
        # each round starts one contender later: over len(names) rounds each runs once in every position, so a
        # host that slows under sustained load (the last of five back-to-back runs came out slowest) favours none
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            print(f"  {'warm-up' if round_ < warmup else 'run'} {round_ + 1}: {name}", file=sys.stderr, flush=True)
            sample = run_once(fresh(contenders[name]))
            if round_ >= warmup:
                samples[name].append(sample)
    return samples


if __name__ == "__main__":
    sys.exit(main())
