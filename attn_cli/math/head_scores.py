"""What a head does: its scores per text, and their mean and spread over a corpus (pure torch).

Shapes: B texts padded to T tokens (on the right: position 0 is each text's first
token), h heads of one layer, a block of c query rows start:start + c.

Every "where does the weight go" score is TransformerLens' detect_head "mul"
measure with a 0/1 target pattern P:

    score = Σ_{i∈R} Σ_j A[i, j]·P[i, j]  /  Σ_{i∈R} Σ_j A[i, j]

over the rows R that count: a row counts when it may attend at least two keys (a
row with one key has no choice: the first row of a causal model) and at least one
of its allowed keys is a target. Rows of A sum to 1, so this is the mean, over those
rows, of the weight on the targets. A text with no such row has no score (None):
it is left out of that score's mean over texts.

    previous_token   P[i, i-1] = 1                     (row 0 has no target)
    duplicate_token  P[i, j] = 1 where j < i and id_j = id_i
    induction        P[i, j] = 1 where j-1 < i and id_{j-1} = id_i  (the token after an earlier copy)
    first_token      P[i, 0] = 1                       ([CLS] / BOS, or the first word)
    last_token       P[i, j] = 1 on separators j ≠ i: special tokens after position 0 ([SEP], EOS),
                     or the last token when the text has none (a separator's weight on itself is
                     self; so in a causal model, whose rows never see a final separator but its
                     own, last_token is undefined)
    punctuation      P[i, j] = 1 on punctuation tokens (not special)
    self             P[i, i] = 1

Special tokens are ordinary tokens for previous, duplicate and induction (a text holds
one [CLS] and one [SEP], so they never repeat). Three more scores are not weight shares:

    broad      mean over counted rows of H(A[i]) / log(allowed keys of row i)  (1 = uniform)
    sink       the share of counted rows that put more than ε = 0.3 of their weight on one
               key (Gu et al. 2024), for the key that most rows do that to (ties: the
               earliest key); that key is the head's sink key.
    retrieval  only where a text marks a needle (the retrieval probe, TokenFlags.target):
               |g ∩ k| / |k| (Wu et al. 2024), k the needle's tokens, g those the head
               copies: row i, whose next token id_{i+1} is a needle token being copied,
               copies it when argmax_j A[i, j] is a needle position holding id_{i+1}
               (ties: the earliest key). Teacher-forced: rows read the copy as given.

Padding is never a key or a row: `allowed` is False there.

Cross-attention (an encoder–decoder's target queries × source keys, T_q ≠ T_k in general) keeps only the
scores that read the keys alone: first_token, last_token, punctuation, broad and sink (cross_scores;
score_names.CROSS_UNDEFINED says why the others are not defined).
"""

from __future__ import annotations

import functools
import math
import unicodedata
from dataclasses import dataclass

import torch

from attn_cli.math import measures
from attn_cli.math.score_names import (  # noqa: F401
    BROAD,
    BROAD_THRESHOLD,
    LABEL_THRESHOLD,
    MIXED,
    RETRIEVAL,
    SCORES,
    SHARES,
    SINK,
    SINK_EPSILON,
)

_MARKERS = ("##", "Ġ", "▁", "Ċ")  # subword markers of WordPiece, byte-level BPE and SentencePiece


@dataclass
class TokenFlags:
    """What the patterns need to know about a padded batch of texts. All (B, T)."""

    ids: torch.Tensor  # long token ids (anything where real is False)
    real: torch.Tensor  # bool: not padding
    separator: torch.Tensor  # bool: [SEP]/EOS, or the last token of a text without one
    punctuation: torch.Tensor  # bool
    # retrieval: the id a row is to copy next, id_{i+1} where token i + 1 is a needle token's copy, else -1;
    # and the needle's own positions. None: no text marks a needle (the score is undefined).
    target: torch.Tensor | None = None  # long
    needle: torch.Tensor | None = None  # bool


@functools.lru_cache(maxsize=1 << 16)  # a corpus repeats its tokens: asked per token of every text
def is_punctuation(text: str) -> bool:
    """A token that is only punctuation once subword markers are stripped: "," "?" "Ġ." "##!"."""
    for marker in _MARKERS:
        text = text.replace(marker, "")
    return bool(text) and all(unicodedata.category(char).startswith("P") for char in text)


def token_flags(tokens: list[list], device="cpu", needle: bool = False) -> TokenFlags:
    """TokenFlags of texts given as lists of capture.Token (text, id, special), padded on the right.

    needle: each text is a retrieval probe, whose only repeated tokens are the needle and its copy
    (analyses/heads.retrieval_probe): a token whose id comes again later is the needle's, and its later
    occurrence is the copy, which the row before it is to produce."""
    count, longest = len(tokens), max(len(text) for text in tokens)
    lengths = torch.tensor([len(text) for text in tokens])
    real = torch.arange(longest)[None, :] < lengths[:, None]  # (B, T): row-major, as the texts' tokens follow
    flat = [token for text in tokens for token in text]  # one tensor per flag for the batch, not per text
    ids = torch.zeros(count, longest, dtype=torch.long)
    ids[real] = torch.tensor([token.id for token in flat], dtype=torch.long)
    separator = torch.zeros(count, longest, dtype=torch.bool)
    separator[real] = torch.tensor([token.special and token.index > 0 for token in flat], dtype=torch.bool)
    unmarked = ~separator.any(-1) & (lengths > 0)  # (B,) a text with no separator: its last token stands for one
    separator[unmarked, lengths[unmarked] - 1] = True
    punctuation = torch.zeros(count, longest, dtype=torch.bool)
    punctuation[real] = torch.tensor(
        [not token.special and is_punctuation(token.text) for token in flat], dtype=torch.bool
    )
    flags = TokenFlags(ids.to(device), real.to(device), separator.to(device), punctuation.to(device))
    if needle:
        flags.target, flags.needle = (tensor.to(device) for tensor in needle_targets(ids, real))
    return flags


def needle_targets(ids: torch.Tensor, real: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(target, needle) of texts whose repeated tokens are a needle and its copy: ids, real (B, T).

    needle[b, j]: token j occurs again later. target[b, i] = id_{i+1} when token i + 1 repeats an
    earlier one (it is the copy), else -1."""
    same = (ids[:, :, None] == ids[:, None, :]) & real[:, :, None] & real[:, None, :]  # (B, T, T)
    later = torch.ones_like(same[0]).triu(1)  # (T, T): key after query
    needle = (same & later).any(-1)  # (B, T): the same id again after j
    copy = (same & later.T).any(-1)  # (B, T): the same id before i
    target = torch.full_like(ids, -1)
    target[:, :-1] = torch.where(copy[:, 1:], ids[:, 1:], -1)
    return target, needle


def share_patterns(flags: TokenFlags, start: int, stop: int) -> torch.Tensor:
    """The seven target patterns P for query rows start:stop. -> (7, B, c, T) bool, order of SHARES."""
    ids = flags.ids
    count, keys = ids.shape
    query = torch.arange(start, stop, device=ids.device)[:, None]  # (c, 1)
    key = torch.arange(keys, device=ids.device)[None, :]  # (1, T)
    same = ids[:, start:stop, None] == ids[:, None, :]  # (B, c, T): id_j = id_i
    before = ids.new_full((count, keys), -1)  # (B, T): id_{j-1}, none for j = 0
    before[:, 1:] = ids[:, :-1]
    after_copy = (ids[:, start:stop, None] == before[:, None, :]) & (key >= 1)  # (B, c, T): id_{j-1} = id_i
    shape = (count, stop - start, keys)
    return torch.stack(
        [
            (key == query - 1).expand(shape),  # previous_token
            same & (key < query),  # duplicate_token
            after_copy & (key - 1 < query),  # induction
            (key == 0).expand(shape),  # first_token
            flags.separator[:, None, :] & (key != query),  # last_token: another token's separator
            flags.punctuation[:, None, :].expand(shape),  # punctuation
            (key == query).expand(shape),  # self
        ]
    )


def row_patterns(flags: TokenFlags, rows: torch.Tensor) -> torch.Tensor:
    """share_patterns for one query row per text and head: rows (B, h) -> (7, B, h, T) bool, order of SHARES
    (the targets of row rows[b, h] of text b; rows clamped to 0, where the caller has none)."""
    ids = flags.ids
    count, keys = ids.shape
    row = rows.clamp_min(0)[..., None]  # (B, h, 1)
    key = torch.arange(keys, device=ids.device)  # (T,)
    own = ids.gather(1, rows.clamp_min(0))[..., None]  # (B, h, 1): id_i
    before = ids.new_full((count, keys), -1)  # (B, T): id_{j-1}, none for j = 0
    before[:, 1:] = ids[:, :-1]
    shape = (*rows.shape, keys)
    return torch.stack(
        [
            (key == row - 1).expand(shape),  # previous_token
            (ids[:, None, :] == own) & (key < row),  # duplicate_token
            (before[:, None, :] == own) & (key >= 1) & (key - 1 < row),  # induction
            (key == 0).expand(shape),  # first_token
            flags.separator[:, None, :] & (key != row),  # last_token
            flags.punctuation[:, None, :].expand(shape),  # punctuation
            (key == row).expand(shape),  # self
        ]
    )


def _repeat_weights(weights: torch.Tensor, flags: TokenFlags, start: int, allowed: torch.Tensor):
    """Weight on the duplicate and induction targets of rows start:start + c, from the list of earlier
    copies (sparse: a row has few), never a dense (B, h, c, T) product.

    An earlier copy m of row i (m < i, id_m = id_i) is a duplicate target; the key after it,
    m + 1, is the induction target (j − 1 = m < i). Each counts when the row may attend it.
    Returns the weights (2, B, h, c) and whether each row has a target (2, B, c).
    """
    count, heads, rows, keys = weights.shape
    ids, real = flags.ids, flags.real
    query = torch.arange(start, start + rows, device=ids.device)[:, None]  # (c, 1)
    key = torch.arange(keys, device=ids.device)[None, :]  # (1, T)
    copies = (
        (ids[:, start : start + rows, None] == ids[:, None, :])
        & (key < query)
        & real[:, start : start + rows, None]
        & real[:, None, :]
    )  # (B, c, T)
    text, row, earlier = copies.nonzero(as_tuple=True)  # (n,) each
    after = (earlier + 1).clamp_max(keys - 1)
    on = weights.new_zeros(2, count, rows, heads)
    has = torch.zeros(2, count, rows, dtype=torch.bool, device=weights.device)
    for kind, target, ok in (
        (0, earlier, allowed[text, row, earlier]),
        (1, after, (earlier + 1 < keys) & allowed[text, row, after]),
    ):
        t, r, k = text[ok], row[ok], target[ok]
        on[kind].index_put_((t, r), weights[t, :, r, k], accumulate=True)  # weights[t, :, r, k]: (n, h)
        has[kind, t, r] = True
    return on.permute(0, 1, 3, 2), has


def _diagonal(matrix: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
    """matrix[..., r, columns[r]] for every row r: (..., c, T), (c,) -> (..., c)."""
    index = columns.view(*([1] * (matrix.dim() - 2)), -1, 1).expand(*matrix.shape[:-1], 1)
    return matrix.gather(-1, index).squeeze(-1)


class TextSums:
    """Running sums, over blocks of query rows, of every score's numerator and denominator.

    One per (texts, heads) group of one layer: shapes (B, h) per score, (B, h, T) for the sink.
    """

    def __init__(self, texts: int, heads: int, keys: int, device="cpu", dtype=torch.float32):
        # float32 by default: MPS has no float64; sums run over one text's rows only.
        # one row per score; the sink's stays 0 (it is taken from sink_rows)
        self.numerator = torch.zeros(len(SCORES), texts, heads, dtype=dtype, device=device)
        self.denominator = torch.zeros_like(self.numerator)  # broad: counted rows; retrieval: needle rows
        self.sink_rows = torch.zeros(texts, heads, keys, dtype=dtype, device=device)  # rows > ε per key
        self.rows = torch.zeros(texts, 1, dtype=dtype, device=device)  # counted rows per text

    def add(self, weights: torch.Tensor, allowed: torch.Tensor, flags: TokenFlags, start: int):
        """weights (B, h, c, T): rows start:start + c of softmax(S), masked cells 0; allowed (B, c, T).
        Returns each row's weight on the seven share patterns' targets (7, B, h, c) and whether it counts for
        them (7, B, c), for the examples' rows (edges.ScoreRows).

        The weight on each pattern's targets, per row, is taken without building the patterns
        (share_patterns is the definition; tests check this against it): a gathered diagonal
        for previous and self, column 0 for first, one product for separators and punctuation.
        """
        rows = weights.shape[-2]
        query = torch.arange(start, start + rows, device=weights.device)  # (c,) positions of the rows
        keys_allowed = allowed.sum(-1)  # (B, c)
        counted = keys_allowed >= 2  # (B, c) a row with a choice (never padding: it has no keys)
        previous = (query - 1).clamp_min(0)  # (c,) key i - 1 (row 0 has none)
        first_row = query == 0
        marks = torch.stack([flags.separator, flags.punctuation], -1)  # (B, T, 2)
        own = _diagonal(weights, query)  # (B, h, c): A[i, i]
        separator_row = flags.separator[:, start : start + rows]  # (B, c): a separator's own row …
        other_separator = allowed & flags.separator[:, None, :]  # … does not count its weight on itself
        other_separator[..., start : start + rows] &= ~torch.eye(rows, dtype=torch.bool, device=weights.device)
        repeats, has_repeat = _repeat_weights(weights, flags, start, allowed)  # (2, B, h, c), (2, B, c)
        on_targets = torch.stack(
            [  # (7, B, h, c): weight on each pattern's targets, per row
                _diagonal(weights, previous).masked_fill(first_row, 0.0),
                *repeats,
                weights[..., 0],
                *(weights @ marks[:, None].to(weights.dtype)).unbind(-1),
                own,
            ]
        )
        on_targets[4] -= own * separator_row[:, None]
        has_target = (
            torch.stack(
                [  # (7, B, c): the row may attend a target
                    _diagonal(allowed, previous) & ~first_row,
                    *has_repeat,
                    allowed[..., 0],
                    other_separator.any(-1),
                    (allowed & flags.punctuation[:, None, :]).any(-1),
                    _diagonal(allowed, query),
                ]
            )
            & counted
        )
        self._add_shares(slice(0, 7), on_targets, has_target)
        self._add_spread(weights, counted, keys_allowed)
        if flags.target is not None:
            self._add_retrieval(weights, flags, start)
        return on_targets, has_target

    def add_cross(self, weights: torch.Tensor, allowed: torch.Tensor, keys: TokenFlags) -> None:
        """Cross-attention: weights (B, h, c, T_k) of c target queries over the source's keys, allowed (B, c, T_k),
        keys: the source's TokenFlags. Only the scores that read the keys alone are added (first_token,
        last_token, punctuation, broad, sink; score_names.CROSS_UNDEFINED says why not the others): their sums
        stay 0 / 0, NaN in result(). A query is never a key here, so a separator's weight on itself (the square
        case's exception) does not arise: last_token is the weight on every source separator."""
        keys_allowed = allowed.sum(-1)  # (B, c)
        counted = keys_allowed >= 2  # (B, c)
        marks = torch.stack([keys.separator, keys.punctuation], -1)  # (B, T_k, 2)
        on_targets = torch.stack([weights[..., 0], *(weights @ marks[:, None].to(weights.dtype)).unbind(-1)])
        has_target = (
            torch.stack(
                [  # (3, B, c)
                    allowed[..., 0],
                    (allowed & keys.separator[:, None, :]).any(-1),
                    (allowed & keys.punctuation[:, None, :]).any(-1),
                ]
            )
            & counted
        )
        self._add_shares(slice(3, 6), on_targets, has_target)  # first_token, last_token, punctuation
        self._add_spread(weights, counted, keys_allowed)

    def _add_shares(self, scores: slice, on_targets: torch.Tensor, has_target: torch.Tensor) -> None:
        """on_targets (n, B, h, c): each row's weight on the targets of the n scores `scores`; has_target (n, B, c)."""
        rows_counted = has_target[:, :, None, :].to(on_targets.dtype)  # (n, B, 1, c)
        self.numerator[scores] += (on_targets * rows_counted).sum(-1)
        # Σ_j A[i, j] over the counted rows: each is a softmax over two keys or more, so it sums to 1
        self.denominator[scores] += rows_counted.sum(-1)

    def _add_spread(self, weights: torch.Tensor, counted: torch.Tensor, keys_allowed: torch.Tensor) -> None:
        """broad and sink of weights (B, h, c, T) over the counted rows (B, c), keys_allowed (B, c)."""
        # broad: H(row) / log(allowed keys), over counted rows
        spread = measures.row_entropy(weights) / keys_allowed.to(weights.dtype).clamp_min(2).log()[:, None, :]
        counted_rows = counted[:, None, :].to(weights.dtype)  # (B, 1, c)
        self.numerator[BROAD] += (spread * counted_rows).sum(-1)
        self.denominator[BROAD] += counted_rows.sum(-1)
        # sink: per key, how many counted rows put more than ε on it (a row with one key has no choice
        # and is not counted): the counted rows' 0/1 marks summed by a (1, c) @ (c, T) product per head.
        # (B, h, c, T) 0/1 in weights' dtype, written as such (a bool mask converted after takes several times longer)
        heavy = torch.gt(weights, SINK_EPSILON, out=torch.empty_like(weights))
        self.sink_rows += (counted_rows[:, :, None, :] @ heavy).squeeze(-2)  # (B, 1, 1, c) @ … -> (B, h, T)
        self.rows += counted.sum(-1, keepdim=True)

    def _add_retrieval(self, weights: torch.Tensor, flags: TokenFlags, start: int) -> None:
        """Rows whose next token is the needle's copy: a hit where the row's argmax key is the needle
        position holding that token (argmax takes the earliest of equal weights)."""
        assert flags.target is not None and flags.needle is not None  # called only when a text marks a needle
        rows = weights.shape[-2]
        target = flags.target[:, start : start + rows]  # (B, c)
        key = weights.argmax(-1)  # (B, h, c)
        on_needle = flags.needle.gather(1, key.flatten(1)).view_as(key)  # (B, h, c)
        copied = flags.ids.gather(1, key.flatten(1)).view_as(key) == target[:, None, :]
        wanted = (target >= 0)[:, None, :].to(weights.dtype)  # (B, 1, c)
        self.numerator[RETRIEVAL] += ((on_needle & copied).to(weights.dtype) * wanted).sum(-1)
        self.denominator[RETRIEVAL] += wanted.sum(-1)

    def result(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Per text and head: scores (B, h, 10), NaN where a score is undefined, and the sink key
        (B, h) long, -1 where no row puts more than ε on any key."""
        values = self.numerator / self.denominator  # (10, B, h); 0/0 = NaN: no row counted
        heaviest, key = self.sink_rows.max(-1)  # (B, h): the first key among equals
        values[SINK] = heaviest / self.rows  # (B, h); NaN when no row counted
        key = torch.where(heaviest > 0, key, torch.full_like(key, -1))
        return values.permute(1, 2, 0), key


def head_scores(weights: torch.Tensor, allowed: torch.Tensor, flags: TokenFlags):
    """Scores of whole matrices at once: weights (B, h, T, T), allowed (B, T, T). For tests and small inputs."""
    sums = TextSums(weights.shape[0], weights.shape[1], weights.shape[-1], weights.device, torch.float64)
    sums.add(weights.double(), allowed, flags, 0)
    return sums.result()


def cross_scores(weights: torch.Tensor, allowed: torch.Tensor, keys: TokenFlags):
    """head_scores of cross-attention: weights (B, h, T_q, T_k), allowed (B, T_q, T_k), keys the source's flags.
    NaN for the scores in CROSS_UNDEFINED (and retrieval); the sink key is a source position."""
    sums = TextSums(weights.shape[0], weights.shape[1], weights.shape[-1], weights.device, torch.float64)
    sums.add_cross(weights.double(), allowed, keys)
    return sums.result()


def label(scores) -> str:
    """The head's type: its largest weight share when above LABEL_THRESHOLD (ties: the earlier in SCORES),
    else "broad" when broad >= BROAD_THRESHOLD, else "sink" when above LABEL_THRESHOLD, else "mixed".

    scores: the values in SCORES order (None or NaN where undefined).
    """
    values = [(-1.0 if value is None or math.isnan(value) else float(value)) for value in scores]
    best = max(range(len(SHARES)), key=lambda index: (values[index], -index))
    if values[best] > LABEL_THRESHOLD:
        return SCORES[best]
    if values[BROAD] >= BROAD_THRESHOLD:
        return "broad"
    if values[SINK] > LABEL_THRESHOLD:
        return "sink"
    return MIXED
