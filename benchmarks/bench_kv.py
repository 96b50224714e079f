"""`attn kv` beside what running the model costs, in one process (the models loaded once), as ratios.

1. A corpus: the 1,000 sentences of _corpus.py on the bundled MiniLM, batches of 32, against bench_store.py's
   floor (a bare sdpa forward over the same length-sorted batches, tokenizing included). Target: ≤ 1.5x.
   The profile includes its needle probe (one short text).
2. Long inputs: the tiny Llama of bench_long.py (4 layers, 8 heads on 2 KV heads, hidden 256) on one text
   of T tokens, against its plain sdpa forward. Target at 16k: ≤ 1.3x. Past 256 rows the profile reads a
   sample of about 256 rows of the text (analyses/kv.py), whose weights it makes and sorts.

3. Memory (--rss 1000,10000): the peak RSS of a whole `attn kv --file` process over corpora of each size, each
   one process (os.wait4's ru_maxrss). Target: flat, the largest within 10 % of the smallest (the profile
   keeps sums and histograms, never a text's rows).

Contenders alternate (A, B, A, B …) after a warm-up; medians of wall and CPU seconds.

    .venv/bin/python benchmarks/bench_kv.py [--repeat 3] [--texts 1000] [--lengths 1024,16384] [--rss 1000,10000]
        [--record]

Its figures are printed beside benchmarks/records/bench_kv.json (a figure 10 % above its record fails the run);
--record writes them there.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from _corpus import write_corpus
from _timing import (
    compare_with_record,
    median_of,
    print_call_ratio,
    print_calls,
    print_header,
    print_threads,
    time_calls,
)

CORPUS_TARGET = 1.5
LONG_TARGET = 1.3


def corpus(args, figures: dict) -> bool:
    import torch
    from bench_store import BATCH, floor

    import attn_cli

    model = attn_cli.load("minilm", device="cpu")
    with tempfile.TemporaryDirectory(prefix="bench-kv") as folder:
        path = Path(folder) / "corpus.txt"
        write_corpus(path, args.texts)
        print_header(
            f"attn kv over {args.texts} texts vs the bare sdpa floor, MiniLM (6 × 12 heads), batches of {BATCH}"
        )
        print_threads(torch)
        calls = time_calls(
            {
                "floor": lambda _: floor(model.backend, str(path)),
                "kv": lambda _: model.kv_profile(file=str(path), batch_size=BATCH),
            },
            [None] * args.repeat,
            None,
        )
    print_calls(calls)
    figures[f"{args.texts} texts: kv / sdpa floor"] = median_of(calls["kv"]) / median_of(calls["floor"])
    return print_call_ratio(calls, "kv", "floor", CORPUS_TARGET)


def long(args, figures: dict) -> bool:
    import torch
    from bench_long import build_model

    import attn_cli

    met = True
    with tempfile.TemporaryDirectory(prefix="bench-kv-long") as folder:
        build_model(Path(folder))
        model = attn_cli.load(folder, device="cpu")
        for length in (int(part) for part in args.lengths.split(",")):
            text = " ".join(["word"] * (length - 2))  # a word per token, with [CLS] and [SEP]
            fed = model.backend.tokenizer(text, return_tensors="pt")
            print_header(
                f"\nattn kv on {fed['input_ids'].shape[1]} tokens vs the sdpa forward, tiny Llama (4 × 8 heads)"
            )

            def forward(_):
                with torch.inference_mode():
                    model.backend.model(**fed)

            calls = time_calls(
                {"sdpa": forward, "kv": lambda _: model.kv_profile(text, retrieval_probe=False, batch_size=1)},
                [None] * args.repeat,
                None,
            )
            print_calls(calls)
            figures[f"T={length} kv / sdpa forward (in one process)"] = median_of(calls["kv"]) / median_of(
                calls["sdpa"]
            )
            target = LONG_TARGET if length >= 16384 else None
            if target is not None:
                met = print_call_ratio(calls, "kv", "sdpa", target) and met
            else:
                print(f"kv / sdpa: {median_of(calls['kv']) / median_of(calls['sdpa']):.1f}x (no target below 16k)")
    return met


def memory(args, figures: dict) -> bool:
    from _timing import run_once

    sizes = [int(part) for part in args.rss.split(",")]
    peaks = []
    with tempfile.TemporaryDirectory(prefix="bench-kv-rss") as folder:
        print_header(f"\npeak RSS of attn kv --file over {', '.join(map(str, sizes))} texts (MiniLM, one process each)")
        for size in sizes:
            path = Path(folder) / f"corpus-{size}.txt"
            write_corpus(path, size)
            out = Path(folder) / f"profile-{size}.json"
            command = [sys.executable, "-m", "attn_cli", "kv", "--file", str(path), "--json", "-o", str(out)]
            sample = run_once(command)
            peaks.append(sample.max_rss_mib)
            print(f"{size:>7} texts: {sample.max_rss_mib:8.1f} MiB peak, {sample.wall_s:7.1f} s")
    growth = peaks[-1] / peaks[0] - 1
    figures[f"peak RSS MiB, {sizes[0]} texts"] = peaks[0]
    figures[f"peak RSS MiB, {sizes[-1]} texts"] = peaks[-1]
    met = growth <= 0.10
    print(f"largest / smallest: +{100 * growth:.1f} % (target ≤ 10 %): {'met' if met else 'NOT met'}")
    return met


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--texts", type=int, default=1000)
    parser.add_argument("--lengths", default="1024,16384", help="token counts of the long part (comma-separated)")
    parser.add_argument("--rss", default="", help="corpus sizes whose peak RSS is compared, e.g. 1000,10000")
    parser.add_argument("--record", action="store_true", help="write these figures to benchmarks/records/bench_kv.json")
    args = parser.parse_args()
    figures: dict[str, float] = {}
    # memory first: a child's peak RSS counts the parent's pages it was forked with, until it execs (this
    # process holds a 16k-token profile's after the long part: 980 MiB measured for a 535 MiB attn kv)
    fits = memory(args, figures) if args.rss else True
    met = corpus(args, figures)
    met = long(args, figures) and met
    grown = compare_with_record("bench_kv", figures, args.record)
    return 0 if fits and met and not grown else 1


if __name__ == "__main__":
    sys.exit(main())
