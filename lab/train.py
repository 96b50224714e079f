"""Train the lab decoder (`--model lab`): a 2-layer Llama-shaped decoder on random words with repeated
spans, the data on which a previous-token head and an induction head form (Olsson et al. 2022).

    python lab/train.py                  # regenerate attn_cli/backends/lab_model and docs/lab-loss.svg
    python lab/train.py --out DIR        # somewhere else (--steps N for a shorter run)

Why here and not in the package: training is how the shipped files were made, not something attn does
when it runs; the package only loads what this writes (attn_cli/backends/lab.py checks its SHA-256).

The data: each row is <bos> then 127 tokens: again and again a few fresh tokens, then a span of 3 to 60
fresh tokens written 2 or 3 times (span lengths and offsets vary, so no fixed distance back predicts
the copy: only its content does). Tokens are drawn uniformly from the 504 words of lab/words.txt and
. , ? ! (no bigram statistics to learn). The loss is measured only on the tokens that can be predicted:
a copy's tokens after its first (nothing before a copy announces that it starts).

Why rotary positions (a Llama config) and not GPT-2's learned ones: a previous-token head needs the same
"one position back" at every position. With rotary positions that is one relative offset; with learned
absolute positions every position's vector must learn it on its own, and the earlier GPT-2 recipe
stayed in the bag-of-tokens plateau for thousands of steps (README, "The lab decoder"). Rotary
positions also carry past the rows trained on, but not well enough: trained on rows of 64 tokens,
the induction score on the probe's 101 stayed near 0.75; the rows are 128 tokens, the probe's
length and more.

Reproducible: a fixed seed for the data (random.Random) and the initialisation (torch), one CPU thread and
torch's deterministic algorithms, so a run regenerates the shipped model.safetensors bit for bit on the
same CPU kind and torch build (the float sums of another machine's kernels may round differently).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import random
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
WORDS = Path(__file__).resolve().parent / "words.txt"
OUT = ROOT / "attn_cli" / "backends" / "lab_model"
FIGURE = ROOT / "docs" / "lab-loss.svg"

SPECIALS = ("<pad>", "<unk>", "<bos>", "<eos>")  # ids 0-3; never drawn in the data
MARKS = (".", ",", "?", "!")  # ids 4-7, drawn like words
SEED = 0
POSITIONS = 128  # the config's max_position_embeddings: the probe's 2 × 50 tokens + <bos> fit
LENGTH = 128  # tokens a training row holds, <bos> included
STEPS = 2000
BATCH = 32
LEARNING_RATE = 3e-3
WARMUP = 100  # steps of linear warm-up, then constant
WIDTH, HEADS, MLP = 64, 4, 64  # d_model, heads per layer (of dimension 16), the gated MLP's width
INIT = 0.02  # std of the initial weights
SPAN = (3, 60)  # the shortest and longest repeated span
PREFIX = 8  # at most this many fresh tokens before each span


def read_words(path: Path = WORDS) -> list[str]:
    """The vocabulary's words in order (lines starting # are the file's note)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def vocabulary(words: list[str]) -> dict[str, int]:
    return {token: index for index, token in enumerate((*SPECIALS, *MARKS, *words))}


def build_tokenizer(vocab: dict[str, int]):
    """A word-level tokenizer: lowercased, split on whitespace and punctuation, <bos> before every text.
    Unknown words are <unk>; decoding joins tokens with spaces."""
    from tokenizers import Tokenizer, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A <bos> $B", special_tokens=[("<bos>", vocab["<bos>"])]
    )
    tokenizer.add_special_tokens(list(SPECIALS))
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token="<bos>",
        eos_token="<eos>",
        unk_token="<unk>",
        pad_token="<pad>",
        model_max_length=POSITIONS,
    )


def model_config(vocab_size: int):
    """2 layers × 4 heads of dimension 16, rotary positions, a small gated MLP, RMSNorm, tied embeddings."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=WIDTH,
        intermediate_size=MLP,
        num_hidden_layers=2,
        num_attention_heads=HEADS,
        num_key_value_heads=HEADS,
        max_position_embeddings=POSITIONS,
        initializer_range=INIT,
        tie_word_embeddings=True,
        bos_token_id=SPECIALS.index("<bos>"),
        eos_token_id=SPECIALS.index("<eos>"),
        pad_token_id=SPECIALS.index("<pad>"),
    )


def sequence(rng: random.Random, first: int, stop: int, length: int) -> tuple[list[int], list[bool]]:
    """`length` token ids from first..stop-1 and whether each can be predicted from the ones before it:
    a few fresh tokens, a span, the span again (once or twice), and so on to the end. A copy's tokens
    after its first are predictable (the token that followed the same token in the earlier copy)."""
    fresh = lambda count: [rng.randrange(first, stop) for _ in range(count)]  # noqa: E731
    ids: list[int] = []
    predictable: list[bool] = []
    while len(ids) < length:
        prefix = fresh(rng.randint(0, PREFIX))
        room = max(SPAN[0] + 1, (length - len(ids) - len(prefix)) // 2)  # room for two copies, mostly
        span = fresh(rng.randint(SPAN[0], max(SPAN[0], min(room, SPAN[1]))))
        copies = rng.choice((2, 2, 3))
        ids += prefix + span * copies
        predictable += [False] * (len(prefix) + len(span)) + ([False] + [True] * (len(span) - 1)) * (copies - 1)
    return ids[:length], predictable[:length]


IGNORED = -100  # the label Hugging Face's loss leaves out


def batch(rng: random.Random, bos: int, first: int, stop: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(BATCH, LENGTH) input ids (<bos> then a sequence) and labels: the id where predictable, else IGNORED."""
    rows = [sequence(rng, first, stop, LENGTH - 1) for _ in range(BATCH)]
    ids = [[bos, *row] for row, _ in rows]
    labels = [
        [IGNORED, *(token if known else IGNORED for token, known in zip(row, known_row))] for row, known_row in rows
    ]
    return torch.tensor(ids), torch.tensor(labels)


@contextlib.contextmanager
def deterministic():
    """One thread and deterministic kernels while training; the caller's settings back afterwards."""
    threads, strict = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(strict)


def learning_rate(step: int) -> float:
    return LEARNING_RATE * min(1.0, (step + 1) / WARMUP)


def train(steps: int = STEPS, seed: int = SEED, report=None, every: int = 100):
    """The trained LlamaForCausalLM (eval mode) and its loss at every step (mean over the predictable tokens).
    report(step, losses, model): called every `every` steps with the losses so far (it may run the model
    in eval mode; it must not change it: the training is the same with or without it)."""
    import transformers
    from transformers import LlamaForCausalLM

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()  # save_pretrained's, at every report
    vocab_size = len(vocabulary(read_words()))
    first = len(SPECIALS)
    with deterministic():
        torch.manual_seed(seed)
        model = LlamaForCausalLM(model_config(vocab_size))
        optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, betas=(0.9, 0.98), weight_decay=0.0)
        rng = random.Random(seed)
        losses = []
        for step in range(steps):
            model.train()
            for group in optimizer.param_groups:
                group["lr"] = learning_rate(step)
            ids, labels = batch(rng, SPECIALS.index("<bos>"), first, vocab_size)
            loss = model(input_ids=ids, labels=labels).loss  # next-token cross-entropy, predictable tokens only
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            if report is not None and (step + 1) % every == 0:
                with torch.random.fork_rng():  # whatever the report draws, the training's generator is untouched
                    report(step + 1, losses, model.eval())
    return model.eval(), losses


def probe_scores(model) -> dict:
    """What `attn heads --probe induction` says of the model as it stands: the model is saved to a
    temporary directory and attn's own API runs the probe on it. {"induction": (score, layer, head),
    "previous": (score, layer, head), "first", "second": the mean loss on the probe's first and second
    half (the second half is predictable by copying)}."""
    import attn_cli as attn

    with tempfile.TemporaryDirectory(prefix="lab-probe-") as directory:
        save(model, Path(directory))
        loaded = attn.load(directory, device="cpu")
        report = loaded.heads(probe="induction")
        tokenizer = loaded.backend.tokenizer
    best = lambda name: max(report.heads, key=lambda head: head.scores[name] or 0)  # noqa: E731
    induction, previous = best("induction"), best("previous_token")
    ids = torch.tensor([tokenizer(report.probe["text"])["input_ids"]])  # (1, 2·length + 1)
    length = report.probe["length"]
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, :-1]  # (2·length, V): row i predicts token i + 1
    losses = torch.nn.functional.cross_entropy(logits.float(), ids[0, 1:], reduction="none")
    return {
        "induction": (induction.scores["induction"], induction.layer, induction.head),
        "previous": (previous.scores["previous_token"], previous.layer, previous.head),
        "first": losses[:length].mean().item(),
        "second": losses[length + 1 :].mean().item(),
    }


def save(model, directory: Path) -> None:
    """The model (safetensors, config, generation config) and the tokenizer files, as from_pretrained reads them."""
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    build_tokenizer(vocabulary(read_words())).save_pretrained(directory)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT, help=f"model directory (default {OUT.relative_to(ROOT)})")
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--every", type=int, default=100, help="steps between probe reports (0: none)")
    parser.add_argument("--figure", type=Path, default=FIGURE, help="the loss curve SVG")
    args = parser.parse_args(argv)
    history: dict[str, list[tuple[int, float]]] = {"induction": [], "previous token": []}

    def report(step: int, losses: list[float], model) -> None:
        found = probe_scores(model)
        history["induction"].append((step, found["induction"][0]))
        history["previous token"].append((step, found["previous"][0]))
        print(
            f"step {step:5d}  loss {sum(losses[-100:]) / len(losses[-100:]):.3f}  probe: loss first half "
            f"{found['first']:.2f}, second {found['second']:.2f}; best induction head "
            "{1}.{2} {0:.2f}, previous-token head {4}.{5} {3:.2f}".format(*found["induction"], *found["previous"]),
            file=sys.stderr,
            flush=True,
        )

    started, cpu = time.perf_counter(), time.process_time()
    model, losses = train(args.steps, args.seed, report=report if args.every else None, every=args.every or 1)
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu
    save(model, args.out)
    from loss_figure import loss_svg

    chance = math.log(len(MARKS) + len(read_words()))  # uniform over the tokens the data draws
    title = f"The lab decoder's training (lab/train.py, seed {args.seed})"
    args.figure.write_text(loss_svg(losses, chance, title, history if args.every else None), encoding="utf-8")
    print(
        f"{args.steps} steps in {seconds:.0f} s ({cpu_seconds:.0f} s of CPU, probe reports included); "
        f"final loss (mean of the last 100) {sum(losses[-100:]) / len(losses[-100:]):.3f}; "
        f"wrote {args.out} and {args.figure}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
