"""The circuits of attention heads (Elhage et al. 2021), from the weights alone: no text is run.

Row-vector convention, as TransformerLens: a residual vector x (1, d) is read by a head as x·W_Q, x·W_K,
x·W_V (each (d, d_head)) and the head writes z·W_O (W_O (d_head, d)). So

    QK = W_Q · W_Kᵀ  (d, d): the score of query x and key y is x·QK·yᵀ (before the 1/√d_head scale)
    OV = W_V · W_O   (d, d): what a key y moves to the query's residual is y·OV (weighted by the pattern)

Both have rank ≤ d_head, so they are kept as Factored(A, B) = A·B with A (d, r), B (r, d) and every
quantity is computed from r × r cores: d × d is never made.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

VOCAB_CHUNK = 8192  # rows of the embedding multiplied at a time for W_U·W_E (d × d): memory stays small


@dataclass(frozen=True)
class Factored:
    """The matrix A·B, kept as its factors: a (..., m, r), b (..., r, n), r small (the head dimension)."""

    a: torch.Tensor
    b: torch.Tensor

    @property
    def T(self) -> Factored:  # noqa: N802 - the transpose, as torch and TransformerLens spell it
        return Factored(self.b.mT, self.a.mT)

    def norm(self) -> torch.Tensor:
        """Frobenius norm (...,): ‖AB‖² = trace(AᵀA · BBᵀ), two r × r Gram matrices."""
        return torch.sqrt(_gram_trace(self.a.mT @ self.a, self.b @ self.b.mT))

    def singular_values(self) -> torch.Tensor:
        """(..., r) largest first: A = Q_a R_a and Bᵀ = Q_b R_b (QR, Q with orthonormal columns), so
        AB = Q_a (R_a R_bᵀ) Q_bᵀ has the singular values of the r × r core R_a R_bᵀ."""
        _, r_a = torch.linalg.qr(self.a)
        _, r_b = torch.linalg.qr(self.b.mT)
        return torch.linalg.svdvals(r_a @ r_b.mT)

    def eigenvalues(self) -> torch.Tensor:
        """(..., r) complex: the nonzero eigenvalues of AB are those of BA (r × r), as TransformerLens."""
        return torch.linalg.eigvals(self.b @ self.a)


def _gram_trace(left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
    """trace(left · right) of symmetric r × r matrices (..., r, r): the sum of their elementwise product."""
    return (left * right).sum((-2, -1))


# ---- per head: the two circuits and their numbers


def qk_circuit(w_q: torch.Tensor, w_k: torch.Tensor) -> Factored:
    """W_Q·W_Kᵀ per head: w_q, w_k (..., d, r)."""
    return Factored(w_q, w_k.mT)


def ov_circuit(w_v: torch.Tensor, w_o: torch.Tensor) -> Factored:
    """W_V·W_O per head: w_v (..., d, r), w_o (..., r, d)."""
    return Factored(w_v, w_o)


def copying_scores(ov: Factored, w_e: torch.Tensor, w_u: torch.Tensor) -> torch.Tensor:
    """(...,) Σλ / Σ|λ| over the eigenvalues λ of the full OV circuit W_E·W_OV·W_U (vocab × vocab),
    Elhage et al.'s copying score: near 1 when the head writes back the token it reads.

    Its nonzero eigenvalues are those of W_O·(W_U·W_E)·W_V (r × r, TransformerLens' FactoredMatrix.BA);
    W_U·W_E (d × d) is summed over chunks of the vocabulary. w_e (V, d), w_u (d, V).
    """
    unembed_embed = torch.zeros(w_e.shape[1], w_e.shape[1], dtype=ov.a.dtype, device=ov.a.device)
    for start in range(0, w_e.shape[0], VOCAB_CHUNK):
        unembed_embed += w_u[:, start : start + VOCAB_CHUNK].to(ov.a) @ w_e[start : start + VOCAB_CHUNK].to(ov.a)
    eigenvalues = torch.linalg.eigvals(ov.b @ unembed_embed @ ov.a)  # (..., r)
    return eigenvalues.sum(-1).real / eigenvalues.abs().sum(-1)


@dataclass(frozen=True)
class PositionSplit:
    """Shares (...,) of the mean square of a head's direct-path score in its four terms; they sum to 1."""

    content: torch.Tensor  # token·token
    position: torch.Tensor  # position·position
    mixed: torch.Tensor  # token·position and position·token


def position_split(qk: Factored, w_e: torch.Tensor, w_pos: torch.Tensor) -> PositionSplit:
    """Where positions are added to the token embeddings (x = e_t + p_i), the direct-path score of query
    (t, i) and key (t', j) is the sum of four terms

        (e_t + p_i)·QK·(e_t' + p_j)ᵀ = e_t·QK·e_t'ᵀ + e_t·QK·p_jᵀ + p_i·QK·e_t'ᵀ + p_i·QK·p_jᵀ.

    Drawing t, t' uniformly from the vocabulary and i, j from the positions, each term's mean square is
    MS(X, Y) = ‖X·QK·Yᵀ‖²_F / (rows(X)·rows(Y)) = trace((Aᵀ G_X A)(Bᵀ G_Y B)) with G_X = XᵀX / rows(X) (d × d)
    and QK = A·B: r × r cores again. The shares are each term's MS over the sum of the four.
    w_e (V, d), w_pos (n, d).
    """
    grams = {"e": _mean_gram(w_e, qk.a), "p": _mean_gram(w_pos, qk.a)}
    a, b = qk.a, qk.b.mT  # (..., d, r) each: the query side and the key side

    def mean_square(query: str, key: str) -> torch.Tensor:
        return _gram_trace(a.mT @ grams[query] @ a, b.mT @ grams[key] @ b)

    terms = {pair: mean_square(*pair) for pair in ("ee", "ep", "pe", "pp")}
    total = sum(terms.values())
    return PositionSplit(
        content=terms["ee"] / total, position=terms["pp"] / total, mixed=(terms["ep"] + terms["pe"]) / total
    )


def _mean_gram(rows: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """XᵀX / rows(X) (d × d) in `like`'s dtype, a chunk of rows at a time."""
    gram = torch.zeros(rows.shape[1], rows.shape[1], dtype=like.dtype, device=like.device)
    for start in range(0, rows.shape[0], VOCAB_CHUNK):
        chunk = rows[start : start + VOCAB_CHUNK].to(like)
        gram += chunk.mT @ chunk
    return gram / rows.shape[0]


# ---- between heads: composition


MODES = ("q", "k", "v")


def composition_scores(qk: Factored, ov: Factored, layer_of: torch.Tensor, mode: str) -> torch.Tensor:
    """(N, N) scores of every pair (writer i, reader j) of the N heads, as TransformerLens'
    all_composition_scores: ‖OV_i · R_j‖_F / (‖OV_i‖_F ‖R_j‖_F) with R_j = QK_j (Q-composition: what i
    writes is read as a query), QK_jᵀ (K-composition: read as a key) or OV_j (V-composition: read as a
    value). NaN where the writer's layer is not before the reader's (TransformerLens writes 0 there).

    qk, ov: Factored over N heads ((N, d, r) and (N, r, d) factors); layer_of (N,) each head's layer.
    OV_i · R_j = V_i (O_i A_j) B_j with R_j = A_j B_j, so ‖·‖² = trace(V_iᵀV_i · M · B_jB_jᵀ · Mᵀ),
    M = O_i A_j (r × r): a writer at a time against every reader.
    """
    right = {"q": qk, "k": qk.T, "v": ov}[mode]
    left_gram = ov.a.mT @ ov.a  # (N, r, r) V_iᵀ V_i
    right_gram = right.b @ right.b.mT  # (N, r, r) B_j B_jᵀ
    left_norm, right_norm = ov.norm(), right.norm()  # (N,)
    scores = torch.full((len(layer_of), len(layer_of)), float("nan"), dtype=ov.a.dtype, device=ov.a.device)
    for writer in range(len(layer_of)):
        readers = (layer_of > layer_of[writer]).nonzero().squeeze(1)
        if len(readers) == 0:
            continue
        core = ov.b[writer] @ right.a[readers]  # (n, r, r) M = O_i A_j
        squared = _gram_trace(left_gram[writer] @ core @ right_gram[readers], core)  # trace(G_V M G_B Mᵀ)
        scores[writer, readers] = torch.sqrt(squared.clamp_min(0)) / (left_norm[writer] * right_norm[readers])
    return scores


# ---- LayerNorm folding, as TransformerLens processes weights when it loads a model


def fold_reading_norm(weight: torch.Tensor, norm_scale: torch.Tensor | None, centre: bool) -> torch.Tensor:
    """A weight that reads the normalised residual (W_Q, W_K, W_V: (..., d, r)) with the norm's scale folded
    in (diag(w)·W), and, after a LayerNorm (which removes the mean over d), centred over d, as TransformerLens'
    fold_ln: W − mean_d(W)."""
    if norm_scale is not None:
        weight = weight * norm_scale[:, None]
    return weight - weight.mean(-2, keepdim=True) if centre else weight


def centre_writing(weight: torch.Tensor) -> torch.Tensor:
    """A weight that writes to the residual stream ((..., d) last) minus its mean over d: the next LayerNorm
    removes that mean anyway (TransformerLens' center_writing_weights)."""
    return weight - weight.mean(-1, keepdim=True)


def fold_unembedding(w_u: torch.Tensor, norm_scale: torch.Tensor | None, centre_rows: bool) -> torch.Tensor:
    """W_U (d, V) with the final norm's scale folded in (and centred over d after a LayerNorm), then centred
    over the vocabulary (softmax ignores a constant added to every logit): TransformerLens' fold_ln and
    center_unembed."""
    w_u = fold_reading_norm(w_u, norm_scale, centre_rows)
    return w_u - w_u.mean(-1, keepdim=True)
