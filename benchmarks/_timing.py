"""Shared helpers for the benchmarks: time whole processes and read their peak memory, or calls in one process.

Each run is one child process, started with subprocess.Popen and reaped with
os.wait4, which returns that child's own rusage: its ru_maxrss is the peak
resident set of exactly that process (RUSAGE_CHILDREN would give the maximum
over every child reaped so far). Wall time runs from just before the spawn to
the reap, so it includes interpreter start-up and exit.

Contenders run interleaved (A, B, A, B, ...) after untimed warm-up runs, so
that drift on a shared, noisy machine hits both alike, and are summarised by
medians. POSIX only (os.wait4).

In one process (time_calls), each call is timed twice: wall (time.perf_counter) and CPU
(time.process_time: this process, every thread of it). On a loaded machine the CPU seconds
are the steadier figure, since waiting for a core is not counted.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass
class Sample:
    wall_s: float
    max_rss_mib: float
    stdout_bytes: int
    stderr: str


def add_common_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per contender (default 5)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed runs per contender first (default 1)")


def run_once(cmd: list[str]) -> Sample:
    """Run cmd once (stdin empty, stdout and stderr to temp files); fail loudly on a non-zero exit."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, so Popen must not wait again
        stdout_bytes = out.seek(0, os.SEEK_END)
        err.seek(0)
        stderr = err.read().decode("utf-8", "replace")
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited with {proc.returncode}:\n{stderr[-2000:]}")
    rss_bytes = usage.ru_maxrss if sys.platform == "darwin" else usage.ru_maxrss * 1024  # Linux: KiB
    return Sample(wall, rss_bytes / 2**20, stdout_bytes, stderr)


def interleave(contenders: dict[str, list[str]], repeat: int, warmup: int = 1) -> dict[str, list[Sample]]:
    """Run every contender `warmup` times untimed, then `repeat` timed rounds of A, B, ..., each round starting
    one contender later (A B C, B C A, C A B, ...): over as many rounds as contenders each runs once in every
    position, so a host that is slower for the first (or last) process of a round favours none (bench_store
    found the last of five back-to-back runs slowest, whichever contender it was)."""
    names = list(contenders)
    samples: dict[str, list[Sample]] = {name: [] for name in contenders}
    for round_ in range(warmup + repeat):
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            timed = round_ >= warmup
            label = f"run {round_ - warmup + 1}/{repeat}" if timed else f"warm-up {round_ + 1}/{warmup}"
            print(f"  {label}: {name}", file=sys.stderr, flush=True)
            sample = run_once(contenders[name])
            if timed:
                samples[name].append(sample)
    return samples


def median_wall(samples: list[Sample]) -> float:
    return statistics.median(s.wall_s for s in samples)


def print_header(title: str) -> None:
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"{title}\npython {platform.python_version()} on {platform.machine()}, "
        f"{os.cpu_count()} CPUs, load average {load}\n"
    )


def print_table(samples: dict[str, list[Sample]]) -> None:
    """One row per contender: median/min/max wall time, median peak RSS, stdout size."""
    width = max(len(name) for name in samples)
    print(f"{'contender':<{width}}  runs  median s   min s    max s   peak RSS MiB  stdout bytes")
    for name, runs in samples.items():
        walls = [s.wall_s for s in runs]
        rss = statistics.median(s.max_rss_mib for s in runs)
        print(
            f"{name:<{width}}  {len(runs):>4}  {median_wall(runs):>8.3f}  {min(walls):>6.3f}  "
            f"{max(walls):>7.3f}  {rss:>12.1f}  {runs[-1].stdout_bytes:>12}"
        )
    print()


def print_stderr_notes(samples: dict[str, list[Sample]]) -> None:
    """Say which contenders wrote to stderr (first run that did, first lines)."""
    for name, runs in samples.items():
        noisy = [s for s in runs if s.stderr.strip()]
        if noisy:
            lines = noisy[0].stderr.strip().splitlines()
            print(f"note: {name} wrote to stderr in {len(noisy)}/{len(runs)} runs, e.g.:")
            for line in lines[:5]:
                print(f"    {line}")
            if len(lines) > 5:
                print(f"    ... ({len(lines) - 5} more lines)")
            print()


def print_ratio(samples: dict[str, list[Sample]], ours: str, peer: str, target: float) -> bool:
    """Medians of two contenders, their ratio and PASS/FAIL against `target` (ours / peer <= target)."""
    ours_s, peer_s = median_wall(samples[ours]), median_wall(samples[peer])
    ratio = ours_s / peer_s
    rss = statistics.median(s.max_rss_mib for s in samples[ours]) / statistics.median(
        s.max_rss_mib for s in samples[peer]
    )
    width = max(len(ours), len(peer)) + 8
    print(f"{ours + ' median':<{width}} {ours_s:.3f} s")
    print(f"{peer + ' median':<{width}} {peer_s:.3f} s")
    print(f"{'ratio':<{width}} {ratio:.2f}x  (target <= {target}x: {'PASS' if ratio <= target else 'FAIL'})")
    print(f"{'peak RSS':<{width}} {rss:.2f}x the peer's")
    return ratio <= target


def emit_result(document: dict, path: str | None) -> None:
    """A contender's result: the JSON document (to `path`, or stdout), and the timed phase as a
    `BENCH score_s=… texts=…` line on stderr for the driver (document["score_s"], ["texts"])."""
    import json

    if path is None:
        json.dump(document, sys.stdout)
        sys.stdout.write("\n")
    else:
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(document, handle)
    print(f"BENCH score_s={document['score_s']:.4f} texts={document['texts']}", file=sys.stderr)


@dataclass
class Call:
    wall_s: float
    cpu_s: float  # time.process_time: every thread of this process


def time_calls(
    contenders: dict[str, Callable], inputs: Sequence, warmup, sync: Callable[[], None] = lambda: None
) -> dict[str, list[Call]]:
    """Every contender once on `warmup` (untimed: first-call allocations, lazy imports), then each input through
    every contender in turn (A, B, A, B, ...). sync() runs before each clock read (torch.cuda.synchronize)."""
    for run in contenders.values():
        run(warmup)
    calls: dict[str, list[Call]] = {name: [] for name in contenders}
    for item in inputs:
        for name, run in contenders.items():
            sync()
            wall, cpu = time.perf_counter(), time.process_time()
            run(item)
            sync()
            calls[name].append(Call(time.perf_counter() - wall, time.process_time() - cpu))
    return calls


def median_of(calls: list[Call], field: str = "wall_s") -> float:
    return statistics.median(getattr(call, field) for call in calls)


def print_calls(calls: dict[str, list[Call]]) -> None:
    """One row per contender: median and p90 wall seconds, median CPU seconds."""
    width = max(len(name) for name in calls) + 2
    print(f"{'contender':<{width}} {'median s':>9} {'p90 s':>7} {'CPU s':>7}")
    for name, runs in calls.items():
        walls = [call.wall_s for call in runs]
        p90 = statistics.quantiles(walls, n=10)[-1] if len(walls) > 1 else walls[0]
        print(f"{name:<{width}} {median_of(runs):>9.4f} {p90:>7.4f} {median_of(runs, 'cpu_s'):>7.4f}")


def print_call_ratio(calls: dict[str, list[Call]], ours: str, peer: str, target: float) -> bool:
    """ours / peer of the medians, wall and CPU, each against `target`; the verdict (returned) is the wall ratio's."""
    wall = median_of(calls[ours]) / median_of(calls[peer])
    cpu = median_of(calls[ours], "cpu_s") / median_of(calls[peer], "cpu_s")
    verdict = lambda ratio: "met" if ratio <= target else "NOT met"  # noqa: E731
    print(f"\nratio attn / peer (per-look medians): wall {wall:.2f}x, CPU {cpu:.2f}x")
    print(
        f"target: attn <= {target}x the peer: {verdict(wall)} (wall {wall:.2f}x); CPU time {verdict(cpu)} "
        f"({cpu:.2f}x, the steadier figure on a loaded machine)"
    )
    return wall <= target


def print_threads(torch) -> None:
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"torch threads {torch.get_num_threads()}; load average now {load}")


# The figures a run recorded (--record), one JSON file per benchmark, committed beside the scripts: a later run
# prints its figures beside them and says which grew. Only figures where lower is better (ratios, seconds, MiB).
RECORDS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "records")
GROWTH = 0.10  # a figure more than 10 % above its record is said to have grown


def git_commit(tree: str) -> str:
    """The checkout's commit (short), with "+" when it has uncommitted changes; "?" outside git."""
    try:
        commit = subprocess.run(
            ["git", "-C", tree, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", tree, "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return "?"
    return commit + ("+" if dirty.strip() else "")


def compare_with_record(name: str, figures: dict[str, float], record: bool, path: str | None = None) -> list[str]:
    """Print `figures` beside the ones recorded for benchmark `name` (benchmarks/records/NAME.json, or `path`)
    and return the keys that grew by more than GROWTH; with record=True, write these figures as the record
    (with the commit, the date and the load average, so the note says what they were measured on)."""
    import json
    from datetime import datetime, timezone

    path = path or os.path.join(RECORDS, f"{name}.json")
    grown: list[str] = []
    if os.path.exists(path):
        with open(path, encoding="utf-8") as handle:
            before = json.load(handle)
        print(f"against the record of {before['commit']} ({before['date']}, load {before['load']}):")
        width = max(len(key) for key in figures)
        for key, value in figures.items():
            old = before["figures"].get(key)
            if old is None:
                print(f"  {key:<{width}}  {value:10.3f}  (not recorded)")
                continue
            change = value / old - 1 if old else 0.0
            flag = f"  GREW by {change:.0%} (more than {GROWTH:.0%})" if change > GROWTH else ""
            print(f"  {key:<{width}}  {value:10.3f}  was {old:10.3f}  {change:+.0%}{flag}")
            if change > GROWTH:
                grown.append(key)
    else:
        print(f"no record yet at {path} (run with --record to write one)")
    if record:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        document = {
            "benchmark": name,
            "commit": git_commit(os.path.dirname(RECORDS)),
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "load": ", ".join(f"{x:.2f}" for x in os.getloadavg()),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "figures": {key: round(value, 4) for key, value in figures.items()},
        }
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(document, handle, indent=2)
            handle.write("\n")
        print(f"recorded to {path}")
    return grown
