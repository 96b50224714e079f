"""Long inputs: `attn inspect` on 1k, 4k and 16k tokens against bare transformers.

The model is the tiny Llama of the long-inputs issue (hidden 256, 4 layers,
8 heads, 2 kv heads, 65,536 positions), built from a config with seed 0 and
saved to a temporary directory. Per length T, whole processes, interleaved:

  attn   attn inspect - --model DIR --layer 3 --head 0 --top-k 5 --json  (text on stdin)
  sdpa   peer_long_forward.py sdpa: the plain forward, what running the model costs
  eager  peer_long_forward.py eager: output_attentions=True, as other tools do (T <= 4096 only:
         at 16k its attention tensors alone need ~34 GB)

Targets: at 16k, attn peak RSS <= 1.5 GB and wall time <= 1.5x sdpa; at 4k, attn
>= 5x faster and >= 3x smaller than eager.

Whole processes all pay the same ~4-5 s of importing torch and transformers and
loading the model, which caps any whole-process ratio. So each length is also
timed in one process with the models already loaded (--in-process, default on):
attn's Model.inspect plus writing its JSON, the sdpa forward, and the eager
forward with output_attentions plus the top-5 of layer 3 head 0.

    .venv/bin/python benchmarks/bench_long.py --repeat 3 [--lengths 1024,4096,16384] [--record]
        [--also ../other-checkout]

Each run prints its figures (attn / sdpa per length, attn's peak RSS, the in-process ratio) beside
those recorded in benchmarks/records/bench_long.json and says which grew by more than 10 %;
--record writes this run's figures there (commit, date and load with them). --also DIR adds
another checkout's attn (an older commit: `git worktree add DIR COMMIT`) as one more contender in
the same interleaved rounds, so two commits are measured side by side under the same load.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _timing import (
    add_common_args,
    compare_with_record,
    git_commit,
    interleave,
    median_wall,
    print_header,
    print_stderr_notes,
    print_table,
)

PEER = Path(__file__).with_name("peer_long_forward.py")
EAGER_MAX_TOKENS = 4096


def build_model(directory: Path) -> None:
    """The tiny Llama, saved with the bundled MiniLM tokenizer (a word per token: "word word …")."""
    import torch
    from transformers import LlamaConfig, LlamaModel

    from attn_cli.backends.minilm import minilm_dir

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=30522,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=2,
        max_position_embeddings=65536,
    )
    LlamaModel(config).save_pretrained(directory)
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(minilm_dir() / name, directory / name)


# Another checkout's attn (its folder first on sys.path: `python -c` puts the working directory there, which
# would be this checkout's), whatever its entry point was (attn_cli.launch since the registry; attn_cli.cli before).
LAUNCHER = (
    "import sys; sys.path.insert(0, {tree!r}); sys.argv[0] = 'attn'\n"
    "try:\n    from attn_cli.launch import main\n"
    "except ImportError:\n    from attn_cli.cli import main\n"
    "sys.exit(main())"
)


def contenders(model: Path, text_file: Path, tokens: int, also: list[str]) -> dict[str, list[str]]:
    attn = Path(sys.executable).with_name("attn")
    inspect = f"inspect - --model '{model}' --layer 3 --head 0 --top-k 5 --json < '{text_file}'"
    # exec: the shell becomes attn, so wait4's rusage is attn's own.
    runs = {
        "attn inspect": ["sh", "-c", f"exec '{attn}' {inspect}"],
        "bare sdpa forward": [sys.executable, str(PEER), "sdpa", str(model), str(text_file)],
    }
    for tree in also:
        tree = str(Path(tree).resolve())
        runs[f"attn @ {git_commit(tree)}"] = [
            "sh",
            "-c",
            f"exec '{sys.executable}' -c \"$0\" {inspect}",
            LAUNCHER.format(tree=tree),
        ]
    if tokens <= EAGER_MAX_TOKENS:
        runs["eager output_attentions"] = [sys.executable, str(PEER), "eager", str(model), str(text_file)]
    return runs


def median_rss(samples) -> float:
    return statistics.median(s.max_rss_mib for s in samples)


def verdicts(tokens: int, samples: dict) -> list[tuple[str, bool]]:
    attn, sdpa = samples["attn inspect"], samples["bare sdpa forward"]
    lines = [(f"time vs sdpa forward: {median_wall(attn) / median_wall(sdpa):.2f}x", True)]
    if tokens >= 16384:
        lines = [
            (f"peak RSS {median_rss(attn):.0f} MiB (target <= 1536)", median_rss(attn) <= 1536),
            (
                f"time {median_wall(attn) / median_wall(sdpa):.2f}x the sdpa forward (target <= 1.5x)",
                median_wall(attn) / median_wall(sdpa) <= 1.5,
            ),
        ]
    if "eager output_attentions" in samples:
        eager = samples["eager output_attentions"]
        speed, size = median_wall(eager) / median_wall(attn), median_rss(eager) / median_rss(attn)
        target = tokens >= 4096
        lines += [
            (f"{speed:.1f}x faster than eager" + (" (target >= 5x)" if target else ""), speed >= 5 or not target),
            (f"{size:.1f}x smaller than eager" + (" (target >= 3x)" if target else ""), size >= 3 or not target),
        ]
    return lines


def time_in_process(model: Path, text: str, tokens: int, repeat: int) -> dict[str, float]:
    """Median seconds of each contender's work with every model already loaded (one process)."""
    import io
    import time

    import torch
    from transformers import AutoModel, AutoTokenizer

    import attn_cli
    from attn_cli.render.files import write_json

    loaded = attn_cli.load(str(model), device="cpu")
    tokenizer = AutoTokenizer.from_pretrained(model, local_files_only=True)
    inputs = tokenizer(text, return_tensors="pt")
    sdpa = AutoModel.from_pretrained(model, local_files_only=True, attn_implementation="sdpa").eval()

    def attn() -> None:
        write_json(loaded.inspect(text, layers="3", heads="0", top_k=5, lazy=True), io.StringIO())

    def sdpa_forward() -> None:
        with torch.inference_mode():
            sdpa(**inputs)

    work = {"attn inspect": attn, "bare sdpa forward": sdpa_forward}
    if tokens <= EAGER_MAX_TOKENS:
        eager = AutoModel.from_pretrained(model, local_files_only=True, attn_implementation="eager").eval()

        def eager_forward() -> None:
            with torch.inference_mode():
                eager(**inputs, output_attentions=True).attentions[3][0, 0].topk(5, dim=-1)

        work["eager output_attentions"] = eager_forward
    times: dict[str, list[float]] = {name: [] for name in work}
    for _ in range(repeat):
        for name, run in work.items():
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def print_in_process(seconds: dict[str, float]) -> None:
    print(
        "  in one process, models loaded (median s): "
        + ", ".join(f"{name} {value:.2f}" for name, value in seconds.items())
    )
    attn = seconds["attn inspect"]
    line = f"  in-process: attn {attn / seconds['bare sdpa forward']:.2f}x the sdpa forward"
    if "eager output_attentions" in seconds:
        line += f", {seconds['eager output_attentions'] / attn:.1f}x faster than eager"
    print(line)


def in_child(*args: str) -> str:
    """Run this script's --child step in a fresh process and return its stdout.

    The driver never imports torch: Linux keeps ru_maxrss across fork and exec, so a
    large driver would inflate every contender's measured peak RSS.
    """
    result = subprocess.run([sys.executable, __file__, "--child", *args], check=True, capture_output=True, text=True)
    return result.stdout


def child(step: str, *args: str) -> None:
    if step == "build":
        build_model(Path(args[0]))
    else:  # time: model dir, text file, tokens, repeat
        model, text_file, tokens, repeat = Path(args[0]), Path(args[1]), int(args[2]), int(args[3])
        print(json.dumps(time_in_process(model, text_file.read_text(), tokens, repeat)))


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        child(*sys.argv[2:])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="1024,4096,16384", help="token counts, comma-separated")
    parser.add_argument(
        "--no-in-process", dest="in_process", action="store_false", help="skip the timing with models already loaded"
    )
    parser.add_argument("--record", action="store_true", help="write this run's figures as the record")
    parser.add_argument(
        "--also", action="append", default=[], metavar="DIR", help="another checkout's attn as one more contender"
    )
    add_common_args(parser)
    args = parser.parse_args()
    figures: dict[str, float] = {}
    print_header("attn on long inputs (tiny Llama: hidden 256, 4 layers, 8 heads, 2 kv heads)")
    passed = True
    with tempfile.TemporaryDirectory() as scratch:
        model = Path(scratch) / "tiny-llama"
        in_child("build", str(model))
        for tokens in (int(value) for value in args.lengths.split(",")):
            text_file = Path(scratch) / f"text-{tokens}.txt"
            text_file.write_text(" ".join(["word"] * (tokens - 2)))  # + [CLS] and [SEP]
            print(f"--- T = {tokens} tokens")
            samples = interleave(contenders(model, text_file, tokens, args.also), args.repeat, args.warmup)
            print_table(samples)
            print_stderr_notes(samples)
            for line, ok in verdicts(tokens, samples):
                print(f"  {line}{'' if ok else '  FAIL'}")
                passed &= ok
            attn, sdpa = samples["attn inspect"], samples["bare sdpa forward"]
            figures[f"T={tokens} attn / sdpa (whole processes)"] = median_wall(attn) / median_wall(sdpa)
            figures[f"T={tokens} attn peak RSS MiB"] = median_rss(attn)
            for name in samples:
                if name.startswith("attn @ "):
                    print(f"  {name}: {median_wall(samples[name]) / median_wall(sdpa):.2f}x the sdpa forward")
            if args.in_process:
                seconds = json.loads(in_child("time", str(model), str(text_file), str(tokens), str(args.repeat)))
                print_in_process(seconds)
                figures[f"T={tokens} attn / sdpa (in one process)"] = (
                    seconds["attn inspect"] / seconds["bare sdpa forward"]
                )
            print()
    grown = compare_with_record("bench_long", figures, args.record)
    if grown:
        print(f"grew by more than 10 %: {', '.join(grown)}")
    return 0 if passed and not grown else 1


if __name__ == "__main__":
    sys.exit(main())
