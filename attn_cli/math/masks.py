"""Which keys each query may attend, without holding T × T when the rule is simple.

transformers hands attention either no mask at all (sdpa relies on `is_causal`)
or a full one (padding, sliding windows). A causal or open mask is kept as a
rule and its rows are made on demand, so a 16k-token causal input never
builds a 16k × 16k mask; a full mask is kept as given.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class AttentionMask:
    queries: int  # Tq
    keys: int  # Tk
    causal: bool = False  # key j allowed for query i only if j <= i + (Tk - Tq)
    dense: torch.Tensor | None = None  # (Tq, Tk) or batched (B, Tq, Tk) bool, True = allowed
    device: torch.device | str = "cpu"

    def rows(self, start: int, stop: int, first_key: int = 0, end_key: int | None = None) -> torch.Tensor:
        """Rows start:stop of the (Tq, Tk) mask, keys first_key:end_key: (stop - start, end - first) bool."""
        end_key = self.keys if end_key is None else end_key
        if self.dense is not None:
            return self._dense()[start:stop, first_key:end_key]
        allowed = torch.ones(stop - start, end_key - first_key, dtype=torch.bool, device=self.device)
        if self.causal:
            query = torch.arange(start, stop, device=self.device)[:, None] + (self.keys - self.queries)
            allowed &= torch.arange(first_key, end_key, device=self.device)[None, :] <= query
        return allowed

    def key_span(self, start: int, stop: int) -> tuple[int, int]:
        """The keys rows start:stop may attend lie in [first, end): the only columns worth computing.

        Causal rows never see the future, a sliding window only its band: for long inputs
        this skips half of S or more.
        """
        if self.dense is not None:
            seen = self._dense()[start:stop].any(dim=0).nonzero()
            return (int(seen[0]), int(seen[-1]) + 1) if len(seen) else (0, 0)
        if self.causal:
            return 0, min(self.keys, stop + self.keys - self.queries)
        return 0, self.keys

    def _dense(self) -> torch.Tensor:
        assert self.dense is not None  # called only where the rule is a dense mask
        return self.dense if self.dense.dim() == 2 else self.dense[0]

    def full(self) -> torch.Tensor:
        """(Tq, Tk) bool. Only for short inputs: this is the T × T the rule avoids."""
        return self.rows(0, self.queries)

    def valid_keys(self) -> torch.Tensor:
        """(Tk,) keys some query may attend: the non-padding tokens."""
        if self.dense is None:
            return torch.ones(self.keys, dtype=torch.bool, device=self.device)
        return self._dense().any(dim=-2)

    def for_sequence(self, sequence: int, keep: torch.Tensor) -> AttentionMask:
        """Sequence `sequence` of a batched mask with only the positions `keep` (padding removed)."""
        count = len(keep)
        if self.dense is None:
            return AttentionMask(count, count, self.causal, None, self.device)
        dense = self.dense if self.dense.dim() == 2 else self.dense[sequence]
        return AttentionMask(count, count, self.causal, dense.index_select(0, keep).index_select(1, keep), self.device)

    def to(self, device) -> AttentionMask:
        dense = None if self.dense is None else self.dense.to(device)
        return AttentionMask(self.queries, self.keys, self.causal, dense, device)
