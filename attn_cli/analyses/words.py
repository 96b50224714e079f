"""--words: an inspect report's heads seen over words instead of subword pieces.

The one place the merge is applied (inspect_texts calls it per text); every view then draws the words
because it draws the report. Per head (math/words.py): weights to a word summed over its pieces, from
a word averaged over its pieces; the mask merged (a word may attend a word when any of its pieces
may attend any of the other's); a learned sink's share of a word's row averaged over its pieces, as the row is;
entropy, self-weight and top keys recomputed from the merged rows.

What does not merge is left out or kept at token level, never given a word-level number it does not
have: scores (softmax inputs do not add up over pieces) are left out; symmetry and score statistics
are properties of the token-level score matrix and are kept as they are; norms and q/k/v are refused.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import torch

from attn_cli.analyses.inspect_report import HeadReport, LayerReport, TopKeys
from attn_cli.data.capture import Capture, Word
from attn_cli.data.selection import Analysis, Selection, Window
from attn_cli.data.words import words_from_markers
from attn_cli.math import measures
from attn_cli.math.words import merge_mask, merge_rows, merge_weights
from attn_cli.plumbing.errors import BadInput


def check_words(selection: Selection, analysis: Analysis) -> None:
    """Refuse, before the model runs, what --words cannot merge."""
    if selection.rows is not None or selection.cols is not None:
        raise BadInput(
            "--words merges whole rows and columns; --rows/--cols windows count tokens",
            "drop --rows/--cols, or drop --words",
        )
    if analysis.measure:  # a measure is of tokens, like the norms: not a sum over a word's pieces
        raise BadInput(
            f"--words with --measure {analysis.measure}: a word's {analysis.measure} is not the sum of its pieces' "
            f"{analysis.measure}s",
            "use --measure weights with --words",
        )
    if analysis.vectors:
        raise BadInput(
            "--words merges attention weights; q, k, v and outputs are per token",
            "drop --words for --include qkv, --save-tensors or the q/k/v panels",
        )


def words_of(capture: Capture) -> list[Word]:
    """The tokenizer's words for the capture, or, where it gave none, words guessed from the markers."""
    return capture.words if capture.words is not None else words_from_markers(capture.tokens)


def check_window(window: Window) -> None:
    if not window.is_whole:
        raise BadInput(
            f"--words needs whole matrices, and {window.tokens} tokens over the selected heads pass the size limit",
            "pass --full, or select fewer heads with --layer/--head",
        )


def merge_layers(layers: Iterable[LayerReport], words: Sequence[Word], top_k: int) -> Iterator[LayerReport]:
    """Each layer's heads over words, as the layers come (a lazy report stays lazy)."""
    groups = [word.pieces for word in words]
    texts = [word.text for word in words]
    for layer in layers:
        yield LayerReport(layer.layer, [merge_head(head, groups, texts, top_k) for head in layer.heads])


def merge_head(head: HeadReport, groups: Sequence[Sequence[int]], texts: Sequence[str], top_k: int) -> HeadReport:
    """One head's whole (T, T) weights and mask -> (W, W), and the per-row statistics of the word rows."""
    weights = torch.from_numpy(head.weights)  # (T, T), masked cells 0
    allowed = ~torch.from_numpy(head.masked(head.weights)).isnan()  # (T, T): NaN where masked (scores or blocked)
    merged = merge_weights(weights, groups)  # (W, W), rows sum to 1
    merged_allowed = merge_mask(allowed, groups)  # (W, W)
    top = TopKeys.of(measures.top_key_tensors(merged, merged_allowed, top_k), texts)  # (W, ≤k)
    return HeadReport(
        head=head.head,
        kv_head=head.kv_head,
        scale=head.scale,
        window=Window.whole(len(groups)),
        scores=None,
        weights=merged.numpy(),
        symmetry=head.symmetry,  # of the token-level scores, which --words does not change
        entropy=measures.row_entropy(merged).numpy(),
        self_weight=measures.self_weight(merged).numpy(),
        top=top,
        score_stats=head.score_stats,  # likewise token-level
        formula=head.formula,
        allowed=merged_allowed.numpy(),
        # (W,) a learned sink's share of each word row, the mean of its pieces' as the row is: with it, rows sum to 1
        sink=None if head.sink is None else merge_rows(torch.from_numpy(head.sink), groups).numpy(),
    )
