"""Where a Ray worker's start goes: timestamps (time.time(), comparable across processes) from the actor's
creation asked for in the driver to its first chunk back, on a local cluster of --cpus CPUs started first.

1. A probe actor does what a Scorer's start does, one step at a time: torch, transformers, the
   transformers.modeling_utils the model classes import, attn's scoring modules, then a real
   ray_engine.Scorer (the model loaded, its SHA-256 checked), then two chunks of 4 batches of 32 (the
   corpus's shortest texts) through Scorer.run, as a run sends them.
2. The real call, model.heads(file=…, engine="ray", workers=1): when the Scorer actor was asked for, when
   it was ready (its model loaded), when the first part was cut (its chunks go out at once), when the
   first chunk came back, and the whole call.

    .venv/bin/python benchmarks/ray_worker_start.py [--texts 2000] [--cpus 2]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _corpus import write_corpus

BATCH, CHUNK = 32, 4


def process_start() -> float:
    """This process's start as a Unix time (/proc/self/stat's starttime, clock ticks after boot)."""
    boot = next(int(line.split()[1]) for line in open("/proc/stat") if line.startswith("btime"))
    ticks = int(open("/proc/self/stat").read().rsplit(")", 1)[1].split()[19])
    return boot + ticks / os.sysconf("SC_CLK_TCK")


class Probe:
    """A Scorer's start, step by step; run() is Scorer.run, timed."""

    def __init__(self, loaded_as: dict, threads: int):
        marks = [("worker process started", process_start()), ("actor constructor entered", time.time())]
        import torch

        marks.append(("import torch", time.time()))
        import transformers

        marks.append(("import transformers", time.time()))
        import transformers.modeling_utils  # noqa: F401  (what a model class imports)

        marks.append(("import transformers.modeling_utils", time.time()))
        from attn_cli.analyses import heads, ray_engine  # noqa: F401

        marks.append(("import attn's scoring modules", time.time()))
        self.scorer = ray_engine.Scorer(loaded_as, threads)
        marks.append(("model loaded (Scorer: hash check, tokenizer, from_pretrained)", time.time()))
        self.marks = marks
        self.heavy = sorted(
            name for name in ("rich", "typer", "textual", "pandas", "attn_cli.cli") if name in sys.modules
        )
        del torch

    def started(self):
        return self.marks, self.heavy

    def run(self, job, batches):
        begun = time.time()
        return self.scorer.run(job, batches), begun, time.time()


def probe(model, corpus: Path, cpus: int) -> None:
    import ray

    from attn_cli.analyses import fold as folding
    from attn_cli.analyses import ray_engine

    texts = [line for line in corpus.read_text().splitlines() if line.strip()]
    batches = list(folding._part_batches(list(enumerate(texts)), BATCH))
    job = ray_engine.Job(list(range(6)), list(range(12)), False, False, (6, 12), 10, 5, False)
    asked = time.time()
    actor = ray.remote(Probe).options(num_cpus=cpus).remote(model.loaded_as, cpus)
    refs = [actor.run.remote(job, batches[at : at + CHUNK]) for at in (0, CHUNK)]  # queued before it is ready
    chunks = []
    for ref in refs:
        _, begun, ended = ray.get(ref)
        chunks.append((begun, ended, time.time()))
    marks, heavy = ray.get(actor.started.remote())
    print("1. the probe actor: seconds after the previous line (the first: after the actor was asked for)")
    previous = asked
    for what, when in marks:
        print(f"   {what:<64} {when - previous:+7.2f}")
        previous = max(previous, when)
    for number, (begun, ended, back) in enumerate(chunks, 1):
        print(
            f"   chunk {number}: waited {begun - previous:5.2f}, scored {ended - begun:5.2f}, back {back - ended:5.2f}"
        )
        previous = back
    print(
        f"   first chunk back {chunks[0][2] - asked:.2f} s after the actor was asked for; "
        f"heavy modules in the worker: {heavy or 'none'}"
    )
    ray.kill(actor)


def real_call(model, corpus: Path) -> None:
    from attn_cli.analyses import fold as folding
    from attn_cli.analyses import ray_engine

    marks, made, ready, cut = {}, ray_engine.Workers.__init__, ray_engine.Workers.ready, folding._part_batches

    def making(self, *args):
        marks.setdefault("Scorer actor asked for", time.time())
        made(self, *args)

    def readying(self):
        actors = ready(self)
        marks.setdefault("worker ready (model loaded), chunks start going out", time.time())
        return actors

    def cutting(part, size):
        marks.setdefault("first part read, cut and sent", time.time())
        return cut(part, size)

    ray_engine.Workers.__init__, ray_engine.Workers.ready, folding._part_batches = making, readying, cutting
    start = time.time()
    model.heads(
        file=str(corpus),
        batch_size=BATCH,
        engine="ray",
        workers=1,
        progress=lambda done, total: marks.setdefault("first chunk back", time.time()),
    )
    marks["call returned"] = time.time()
    print("2. model.heads(engine='ray', workers=1): seconds after the call began")
    for what, when in marks.items():
        print(f"   {what:<64} {when - start:7.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=2000)
    parser.add_argument("--cpus", type=int, default=2)
    args = parser.parse_args()
    import logging

    import ray
    import torch

    import attn_cli

    corpus = Path(tempfile.mkdtemp(prefix="ray-start-")) / "corpus.txt"
    write_corpus(corpus, args.texts)
    torch.set_num_threads(args.cpus)
    model = attn_cli.load("minilm", device="cpu")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    print(f"before: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    begun = time.time()
    ray.init(
        address="local", num_cpus=args.cpus, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR
    )
    print(f"ray.init (a local cluster, not part of either timing): {time.time() - begun:.2f} s")
    probe(model, corpus, args.cpus)
    real_call(model, corpus)
    print(f"after: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
