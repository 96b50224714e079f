"""bench_heads.py's in-process attn contender: attn_cli.load("minilm").heads(file=…), the call
`attn heads --file` makes, timed from after loading; prints the timed phase and the means as JSON.

    python benchmarks/attn_heads_inprocess.py corpus.txt [--batch-size 32]
"""

import argparse
import time

from _timing import emit_result

import attn_cli


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("corpus")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--out", help="write the per-head means here as JSON (default: stdout)")
    args = parser.parse_args()
    model = attn_cli.load("minilm", device="cpu")
    start = time.perf_counter()
    report = model.heads(file=args.corpus, batch_size=args.batch_size)
    elapsed = time.perf_counter() - start
    document = report.to_json_dict()
    emit_result(
        {
            "texts": report.texts,
            "score_s": elapsed,
            "heads": [{"layer": h["layer"], "head": h["head"], "scores": h["scores"]} for h in document["heads"]],
        },
        args.out,
    )


if __name__ == "__main__":
    main()
