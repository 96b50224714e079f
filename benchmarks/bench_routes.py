"""One process, the model loaded once: `model.routes` on a 256-token text beside one plain forward pass of
the same text (the model's own forward, no capture), as a ratio, and beside the reference implementation's
routes of the same prediction on the same model. Target: routes ≤ 3× the forward.

The model is a GPT-2 built from a seeded config (4 layers, 8 heads, d_model 256, 512 positions, MiniLM's
tokenizer; no LM head), saved to a temporary directory: nothing is downloaded. `--model llama` runs a Llama
of the same size instead (8 heads, 8 kv heads, MLP 1024, RoPE, RMSNorm; no LM head). Routes runs one captured
forward, splits each layer's attention over (source, head) only for the states its pruned search reaches,
and prunes.

The reference is llm-transparency-tool's own routes code (facebookresearch/llm-transparency-tool, commit
f1340f0; CC BY-NC 4.0, so it is run from its own checkout, never copied here), run as
tests/fixtures/routes/make_fixture.py runs it: a TransparentLlm answered from a plain transformers forward
(eager attention, the decomposed attention computed with torch; that script's `LabLlm` for the Llama, the same
reads from GPT-2's blocks for the GPT-2, in benchmarks/peer_routes_reference.py), then its `build_full_graph`
and `build_paths_to_predictions`: what its app runs after a forward. It runs in a worker process (the
reference and its pins on that process's PYTHONPATH only: this process never imports it) with the model
loaded once, the same text, position (the last token's), threshold (0.04, the reference app's default and
attn's) and torch threads; its calls are interleaved with attn's (forward, routes, reference, forward, …), and
the worker times each with its own clocks, so the pipe is not timed. The route each finds is compared edge
for edge. Without a checkout (or with --no-reference) the reference is left out and the run says so.

    git clone https://github.com/facebookresearch/llm-transparency-tool /tmp/lltt   # commit f1340f0
    pip install --no-deps --target /tmp/lltt-pins einops jaxtyping==0.2.25 typeguard==2.13.3
    .venv/bin/python benchmarks/bench_routes.py [--repeat 7] [--tokens 256] [--threads N] [--model llama]
        [--reference /tmp/lltt] [--pins /tmp/lltt-pins] [--no-reference]   # the defaults where those exist
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from _timing import Call, median_of, print_header, time_calls

TARGET_RATIO = 3.0
THRESHOLD = 0.04  # the reference app's default, attn's too
WORDS = "the old committee finally approved the new budget after a long and heated debate in the hall".split()
PEER = Path(__file__).with_name("peer_routes_reference.py")
REFERENCE, PINS = Path("/tmp/lltt"), Path("/tmp/lltt-pins")


def copy_tokenizer(directory: Path) -> None:
    from attn_cli.backends.minilm import minilm_dir

    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        if (minilm_dir() / name).exists():
            shutil.copy(minilm_dir() / name, directory / name)


def build(directory: Path, lm: bool = False) -> None:
    """The seeded GPT-2 (lm: with its language-model head, for bench_ablate's importance) and MiniLM's tokenizer."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, GPT2Model

    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=30522, n_embd=256, n_layer=4, n_head=8, n_positions=512, bos_token_id=101, eos_token_id=102
    )
    (GPT2LMHeadModel if lm else GPT2Model)(config).eval().save_pretrained(directory)
    copy_tokenizer(directory)


def build_llama(directory: Path) -> None:
    """--model llama: a seeded Llama of the GPT-2's size, without its LM head, and MiniLM's tokenizer."""
    import torch
    from transformers import LlamaConfig, LlamaModel

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=30522,
        hidden_size=256,
        intermediate_size=1024,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=8,
        max_position_embeddings=512,
        bos_token_id=101,
        eos_token_id=102,
        pad_token_id=0,
    )
    LlamaModel(config).eval().save_pretrained(directory)
    copy_tokenizer(directory)


class Reference:
    """The reference's worker (peer_routes_reference.py): one process, the model loaded once; each call runs
    its pipeline once and keeps the Call the worker timed (the first, the warm-up, included) and its route."""

    def __init__(self, checkout: Path, pins: Path, folder: Path, text: str, position: int, threads: int | None):
        text_file = folder / "text.txt"
        text_file.write_text(text, encoding="utf-8")
        # only the reference and its pins: the worker imports nothing of attn
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(pins), str(checkout)])}
        command = [sys.executable, str(PEER), str(folder), str(text_file), str(position), str(THRESHOLD)]
        self.process = subprocess.Popen(
            [*command, str(threads or 0)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        self.tokens = self._answer()["tokens"]
        self.calls: list[Call] = []
        self.route: list = []

    def _answer(self) -> dict:
        line = self.process.stdout.readline() if self.process.stdout else ""
        if not line:
            raise SystemExit(f"the reference's worker stopped (exit {self.process.wait()}); its stderr is above")
        return json.loads(line)

    def __call__(self, _text) -> None:
        assert self.process.stdin
        self.process.stdin.write("run\n")
        self.process.stdin.flush()
        answer = self._answer()
        self.calls.append(Call(answer["wall_s"], answer["cpu_s"]))
        self.route = answer["route"]

    def close(self) -> None:
        if self.process.stdin:
            self.process.stdin.close()
        self.process.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--threads", type=int, help="torch intra-op threads (default: torch's own)")
    parser.add_argument("--model", choices=("gpt2", "llama"), default="gpt2", help="the seeded model (default gpt2)")
    parser.add_argument(
        "--reference",
        type=Path,
        default=REFERENCE if REFERENCE.is_dir() else None,
        help="llm-transparency-tool's checkout (default /tmp/lltt where it exists; without one it is left out)",
    )
    parser.add_argument(
        "--pins", type=Path, default=PINS, help="einops, jaxtyping 0.2.25, typeguard 2.13.3 (default /tmp/lltt-pins)"
    )
    parser.add_argument("--no-reference", action="store_true", help="leave the reference out")
    args = parser.parse_args()
    if args.no_reference:
        args.reference = None
    if args.reference is not None and not (args.reference / "llm_transparency_tool").is_dir():
        parser.error(f"--reference {args.reference}: not a checkout of llm-transparency-tool")

    import torch

    import attn_cli

    if args.threads:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="bench-routes") as name:
        folder = Path(name)
        (build_llama if args.model == "llama" else build)(folder)
        model = attn_cli.load(name, device="cpu")
        words = (WORDS * (args.tokens // len(WORDS) + 2))[: args.tokens]
        text = " ".join(words)
        while len(model.backend.tokens(text)[0]) > args.tokens:
            words = words[:-1]
            text = " ".join(words)
        count = len(model.backend.tokens(text)[0])
        position = count - 1  # the last token's prediction, attn's default
        fed = {key: value for key, value in model.backend.tokenizer(text, return_tensors="pt").items()}
        shape = "GPT-2" if args.model == "gpt2" else "Llama"
        print_header(f"attn routes vs one forward pass, tiny {shape} (4 layers × 8 heads, d 256), {count} tokens")

        def forward():
            with torch.inference_mode():
                model.backend.model(**fed)

        routes = []
        contenders = {
            "forward": lambda _: forward(),
            "attn routes": lambda _: routes.append(model.routes(text, position=position, threshold=THRESHOLD)),
        }
        reference = None
        if args.reference is not None:
            reference = Reference(args.reference, args.pins, folder, text, position, torch.get_num_threads())
            contenders["reference"] = reference
        try:
            if reference is not None and reference.tokens != count:
                raise SystemExit(f"the reference's worker reads {reference.tokens} tokens, attn {count}")
            # one warm-up each, then forward, routes, reference, forward, … (the same text every round)
            calls = time_calls(contenders, [text] * args.repeat, text)
        finally:
            if reference is not None:
                reference.close()
    if reference is not None:
        calls["reference"] = reference.calls[1:]  # the worker's own clocks; its first call was the warm-up
    floor = median_of(calls["forward"])
    print(f"{'contender':<13}{'median s':>10}{'CPU s':>9}{'× forward':>11}")
    for label, runs in calls.items():
        print(f"{label:<13}{median_of(runs):>10.4f}{median_of(runs, 'cpu_s'):>9.4f}{median_of(runs) / floor:>10.2f}×")
    ratio = median_of(calls["attn routes"]) / floor
    met = ratio <= TARGET_RATIO
    print(f"\nattn routes / forward = {ratio:.2f}× (target ≤ {TARGET_RATIO:g}×){'' if met else '  MISSED'}")
    if reference is None:
        print("reference: not run (--no-reference, or no llm-transparency-tool checkout: --reference DIR)")
        return 0 if met else 1
    print(f"reference / attn routes = {median_of(calls['reference']) / median_of(calls['attn routes']):.1f}×")
    ours = sorted([edge.source, edge.target] for edge in routes[-1].edges)
    same = ours == reference.route
    print(
        f"route at position {position}, threshold {THRESHOLD:g}: attn {len(ours)} edges, reference "
        f"{len(reference.route)}, {'the same edges' if same else 'DIFFERENT edges'}"
    )
    return 0 if met and same else 1


if __name__ == "__main__":
    sys.exit(main())
