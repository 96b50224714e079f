"""A text's strongest single edge per head, off its sink key, found a block of query rows at a time (pure torch).

Shapes: B texts, h heads, a block of c query rows start:start + c, T keys.

The edge of a text and head is the largest weight A[i, j] over the rows that count (two allowed keys or
more, as in head_scores) and the keys j other than the text's own sink key for that head (head_scores'
sink key of that text: known once its last row block is scored, so the search keeps each key's column
maximum and its row, and leaves the sink's column out at the end). Ties: the earliest key, then the
earliest row. A text whose only weights are on its sink key (or that has no counted row) has no edge.
"""

from __future__ import annotations

import torch

from attn_cli.math import attention, scoring

WHOLE_MASK_CELLS = 1 << 21  # a (B, T, T) bool mask this small is built whole to pick rows from


def every_row(weights: torch.Tensor, start: int) -> bool:
    """Whether a block of rows start:start + c of weights (..., c, T) holds every row (T × T): one block."""
    return start == 0 and weights.shape[-2] == weights.shape[-1]


class ColumnMaxima:
    """Per (text, head, key): the largest weight any counted row puts on the key, and the first such row."""

    def __init__(self) -> None:
        self.best: torch.Tensor | None = None  # (B, h, T)
        self.row: torch.Tensor | None = None  # (B, h, T) long; None while `whole` stands in for it
        self.whole: torch.Tensor | None = None  # (B, h, T, T) every row's weights, where one block held them

    def add(self, weights: torch.Tensor, allowed: torch.Tensor, start: int) -> None:
        """weights (B, h, c, T) of rows start:start + c, allowed (B, c, T)."""
        single = allowed.sum(-1) == 1  # (B, c): a row with one key (causal row 0) has no choice
        if bool(single.any()):
            weights = weights.masked_fill(single[:, None, :, None], 0.0)
        if every_row(weights, start):  # short texts
            # the column maxima alone (a tenth of max(-2)'s time, which also finds every column's row);
            # edge() finds the one row it needs in these weights
            self.best, self.whole = weights.amax(-2), weights
            return
        best, row = weights.max(-2)  # (B, h, T): the first row among equals
        row = row + start
        if self.best is None:
            self.best, self.row = best, row
            return
        assert self.row is not None  # a first block of some rows came before this one
        better = best > self.best  # strictly: an earlier row keeps a tie
        self.best = torch.where(better, best, self.best)
        self.row = torch.where(better, row, self.row)

    def edge(self, sink: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """sink (B, h) each text's sink key, -1 for none -> (row, key, weight), each (B, h); where there is no
        edge: row and key -1, weight NaN."""
        assert self.best is not None, "edge() after add()"
        has_sink = (sink >= 0)[..., None]  # (B, h, 1)
        excluded = torch.zeros_like(self.best, dtype=torch.bool)
        excluded.scatter_(-1, sink.clamp_min(0)[..., None], has_sink)
        weight, key = self.best.masked_fill(excluded, -1.0).max(-1)  # (B, h): the first key among equals
        if self.row is not None:
            row = self.row.gather(-1, key[..., None])[..., 0]
        else:  # the first row whose weight on the key is its maximum (max is exact: equality finds it)
            assert self.whole is not None  # add() kept every row's weights in place of their rows
            column = self.whole.gather(-1, key[..., None, None].expand(*key.shape, self.whole.shape[-2], 1))
            row = (column[..., 0] == weight[..., None]).to(torch.uint8).argmax(-1)  # argmax: the first of equals
        none = weight <= 0
        return (row.masked_fill(none, -1), key.masked_fill(none, -1), weight.masked_fill(none, float("nan")))


class ScoreRows:
    """Per (share score, text, head): the counted row with the most weight on the score's targets (head_scores'
    seven patterns), found a block of rows at a time: the row an example of that score shows (the duplicate's
    earlier copy, the induction target …), rather than the text's strongest edge whatever the score."""

    def __init__(self) -> None:
        self.best: torch.Tensor | None = None  # (7, B, h)
        self.row: torch.Tensor | None = None  # (7, B, h) long

    def add(self, on_targets: torch.Tensor, has_target: torch.Tensor, start: int) -> None:
        """on_targets (7, B, h, c) each row's weight on each score's targets, has_target (7, B, c): rows start:…"""
        value = on_targets.masked_fill(~has_target[:, :, None, :], -1.0)
        best, row = value.max(-1)  # (7, B, h): the first row among equals
        row = row + start
        if self.best is None:
            self.best, self.row = best, row
            return
        assert self.row is not None
        better = best > self.best  # strictly: an earlier row keeps a tie
        self.best = torch.where(better, best, self.best)
        self.row = torch.where(better, row, self.row)

    def rows(self) -> torch.Tensor:
        """(7, B, h) each score's row, -1 where no counted row puts any weight on the score's targets."""
        assert self.best is not None and self.row is not None, "rows() after add()"
        return self.row.masked_fill(self.best <= 0, -1)


def target_key(weights: torch.Tensor, targets: torch.Tensor, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The row's strongest target: weights (B, h, T) of rows (B, h) (-1: none), targets (B, h, T) bool ->
    (key, weight) (B, h) each; -1 and NaN where the row is none or puts no weight on a target."""
    weight, key = weights.masked_fill(~targets, -1.0).max(-1)  # the first key among equals
    none = (weight <= 0) | (rows < 0)
    return key.masked_fill(none, -1), weight.masked_fill(none, float("nan"))


def strongest(weights: torch.Tensor, count: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The `count` largest weights of each row and their keys, strongest first: (..., T) -> (..., count) twice;
    key -1 and weight 0 past the row's allowed keys (or past T)."""
    kept = min(count, weights.shape[-1])
    values, keys = weights.topk(kept, dim=-1)
    keys = keys.masked_fill(values <= 0, -1)
    values = values.masked_fill(values <= 0, 0.0)
    if kept < count:
        pad = (0, count - kept)
        values, keys = torch.nn.functional.pad(values, pad), torch.nn.functional.pad(keys, pad, value=-1)
    return values, keys


def row_weights(
    q_heads, k_heads, rows, allowed_rows, scale: float, scorer, chunk: list[int], sink=None, bias=None, own=None
):
    """The weights of one query row per text and head: q_heads (B, h, T, D), k_heads (B, h, T, D), rows (B, h)
    (-1: none, any row is computed and unused), allowed_rows(start, stop) -> (B, c, T) -> (B, h, T).

    scorer: a learned scoring (the toy's), one head of one text at a time, as in scoring.scores.
    sink: (h,) learned sink logits, one more column of each row's softmax (attention.sink_softmax), or None.
    bias, own: (B, h, T, T) a per-head mask's bias and each head's own keys (Doge's), or None."""
    rows = rows.clamp_min(0)
    count, heads, keys, width = k_heads.shape
    q_rows = q_heads.gather(2, rows[:, :, None, None].expand(-1, -1, 1, q_heads.shape[-1]))  # (B, h, 1, D)
    if scorer is None:
        scores = scoring.scores(q_rows, k_heads, scale)[:, :, 0]  # (B, h, T)
    else:
        scores = torch.stack(
            [
                torch.stack(
                    [
                        scoring.scores(q_rows[b, h], k_heads[b, h], scale, scorer, head)[0]
                        for h, head in enumerate(chunk)
                    ]
                )
                for b in range(count)
            ]
        )
    if count * keys * keys <= WHOLE_MASK_CELLS:  # short texts: the whole (B, T, T) mask once, rows gathered
        allowed = allowed_rows(0, keys).gather(1, rows.reshape(count, heads, 1).expand(-1, -1, keys))
    else:  # long texts: each distinct row's mask row, where it was chosen
        allowed = torch.zeros(count, heads, keys, dtype=torch.bool, device=rows.device)
        for row in rows.unique().tolist():
            allowed |= (rows == row)[..., None] & allowed_rows(row, row + 1)[:, 0][:, None, :]
    if bias is not None:  # each head's own row of its bias and of its keys
        at = rows[:, :, None, None].expand(-1, -1, 1, keys)  # (B, h, 1, T)
        scores = scores + bias.gather(2, at)[:, :, 0]
        allowed = allowed & own.gather(2, at)[:, :, 0]
    if sink is not None:  # (B, h, 1, T): one row per head, as sink_softmax takes (h, rows, keys)
        return attention.sink_softmax(scores[:, :, None], allowed[:, :, None], sink)[0][:, :, 0]
    return attention.masked_softmax(scores, allowed)
