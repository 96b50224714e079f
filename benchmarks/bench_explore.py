"""attn explore: how fast the app answers once the model is loaded, driven by Textual's pilot.

Measured on the real path, from the key press to the new content rendered:

- load: from creating the app to the first screen (Textual start-up, importing torch and
  transformers, loading the model, the first run);
- move: pressing a key that selects another head (l, j, k, h in turn), until the repaint that
  follows it is done (ExploreApp.mark_painted runs after the screen refresh). Between presses the
  app is idle for --think seconds, as between a person's key presses; meanwhile it renders the
  heads one key away. "cold" moves clear that cache first, so the heatmap is rendered after the press;
- sentence: `e`, the new 10-word sentence put in the box, then Enter, until the screen shows it
  (a model run, the all-heads grid and the heatmap of the new report; every sentence is new).

    python benchmarks/bench_explore.py                 # MiniLM on CPU, 160 × 50
    python benchmarks/bench_explore.py --model toy --size 80x24

Targets (issue 11): move ≤ 50 ms and sentence ≤ 150 ms, medians, on CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

WORDS = (
    "the quick brown fox jumps over a lazy dog near river while cat sleeps under warm sun and bird "
    "sings songs about green hills far away"
).split()


def sentence(index: int) -> str:
    """A new 10-word sentence for each index."""
    return " ".join(WORDS[(index * 7 + step * 3) % len(WORDS)] for step in range(10)).capitalize() + f" {index}."


def summary(name: str, samples: list[float], target: float | None = None) -> str:
    ms = sorted(value * 1000 for value in samples)
    median = statistics.median(ms)
    p90 = ms[min(len(ms) - 1, int(round(0.9 * (len(ms) - 1))))]
    verdict = "" if target is None else f"   target ≤ {target:.0f} ms: {'PASS' if median <= target else 'FAIL'}"
    return (
        f"{name:<28} median {median:7.1f} ms   p90 {p90:7.1f}   min {ms[0]:6.1f}   max {ms[-1]:7.1f}   "
        f"n={len(ms)}{verdict}"
    )


async def bench(args) -> None:
    from attn_cli.api import load
    from attn_cli.explore.app import ExploreApp

    width, height = (int(part) for part in args.size.split("x"))
    start = time.perf_counter()
    app = ExploreApp(
        lambda: load(args.model, device=args.device),
        "The cat sat on the mat.",
        model_name=args.model,
        threads=args.threads,
    )
    async with app.run_test(size=(width, height)) as pilot:
        while app.paints == 0 and app.error is None:
            await pilot.pause(0.01)
        if app.error is not None:
            raise SystemExit(f"load failed: {app.error}")
        load_s = app.painted_at - start
        info = app.model.info

        async def timed_key(key: str, cold: bool) -> float:
            await pilot.pause(args.think)
            if cold:
                app.maps_lines.clear()
            app.painted.clear()
            pressed = time.perf_counter()
            await pilot.press(key)
            await asyncio.wait_for(app.painted.wait(), 60)
            return app.painted_at - pressed

        keys = ["l", "l", "j", "l", "k", "h"]
        await timed_key("l", False)  # warm-up
        moves = [await timed_key(keys[i % len(keys)], False) for i in range(args.moves)]
        cold = [await timed_key(keys[i % len(keys)], True) for i in range(args.moves // 2)]

        sentences = []
        await timed_key("l", False)
        for index in range(args.sentences + 1):
            text = sentence(index)
            await pilot.pause(args.think)
            await pilot.press("e")
            while getattr(app.focused, "id", None) != "sentence":  # the edit box is open
                await pilot.pause(0.01)
            app.screen.query_one("#sentence").value = text
            await pilot.pause()
            app.looked.clear()
            pressed = time.perf_counter()
            await pilot.press("enter")
            while (text, "baseline") not in app.looks:
                await asyncio.wait_for(app.looked.wait(), 60)
                app.looked.clear()
            if index:  # the first one is a warm-up
                sentences.append(app.looks[(text, "baseline")] - pressed)
        tokens = len(app.report.tokens)
        await pilot.press("q")

    # For scale: the model run alone (model.inspect as the app calls it, with its threads) on new sentences of
    # the same length.
    import torch

    torch.set_num_threads(app.threads)
    inspect_only = []
    for index in range(args.sentences):
        began = time.perf_counter()
        app.model.inspect(sentence(100 + index), top_k=5)
        inspect_only.append(time.perf_counter() - began)

    load_avg = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    print(
        f"attn explore · {info.name} ({info.layers} layers × {info.heads} heads) on {args.device}, {width} × {height}"
    )
    print(
        f"python {platform.python_version()}, {os.cpu_count()} CPUs, torch threads {app.threads}, "
        f"load average {load_avg}\n"
    )
    print(f"{'load (start → first screen)':<28} {load_s:.2f} s   (model load + first run: {app.load_seconds:.2f} s)")
    print(summary("move to another head", moves, 50))
    print(summary("move, nothing cached", cold))
    print(summary(f"new 10-word sentence ({tokens} tok)", sentences, 150))
    print(summary("  of which: model.inspect", inspect_only))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--size", default="160x50", help="terminal size WxH (default 160x50)")
    parser.add_argument("--moves", type=int, default=30, help="timed head moves (default 30)")
    parser.add_argument("--sentences", type=int, default=10, help="timed new sentences (default 10)")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch CPU threads (default: attn explore's, torch's choice less one core)",
    )
    parser.add_argument("--think", type=float, default=0.3, help="idle seconds before each key (default 0.3)")
    asyncio.run(bench(parser.parse_args()))


if __name__ == "__main__":
    main()
