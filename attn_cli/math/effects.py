"""What an intervention changed in a model's output: the metrics `attn ablate` measures, one value per row.

Every function takes a batch of R rows (the same text run R times, each with other heads changed) and returns
(R,) values; the row without a change gives the clean value. Logits are (R, T, V) over the vocabulary at every
position (logits[:, p] predicts the token at p + 1); hidden states are (R, T, d). Everything is computed in
float64, so a difference of two runs is not rounding noise of a float32 log-softmax.
"""

from __future__ import annotations

import torch


def next_token_loss(logits: torch.Tensor, ids: torch.Tensor, predicted: torch.Tensor) -> torch.Tensor:
    """The mean negative log-likelihood, in nats, of the tokens at `predicted` positions (P,), each given the
    text before it: -log softmax(logits[:, p - 1])[ids[p]] averaged over p. ids: (T,) the text's token ids."""
    logprobs = logits[:, predicted - 1].double().log_softmax(-1)  # (R, P, V)
    chosen = ids[predicted].to(logits.device)  # (P,)
    return -logprobs.gather(-1, chosen[None, :, None].expand(logits.shape[0], -1, 1))[..., 0].mean(-1)


def masked_loss(logits: torch.Tensor, positions: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """A masked language model's mean negative log-likelihood, in nats, of the tokens `ids` (P,) at the [MASK]
    `positions` (P,): -log softmax(logits[:, p])[id] averaged (logits at the position itself, not shifted)."""
    logprobs = logits[:, positions].double().log_softmax(-1)  # (R, P, V)
    chosen = ids.to(logits.device)[None, :, None].expand(logits.shape[0], -1, 1)
    return -logprobs.gather(-1, chosen)[..., 0].mean(-1)


def output_kl(clean: torch.Tensor, logits: torch.Tensor, predicted: torch.Tensor) -> torch.Tensor:
    """KL(clean ‖ changed) of the next-token distributions, in nats, averaged over the predictions of the tokens
    at `predicted` (the same positions next_token_loss scores). clean: (T, V) the unchanged run's logits."""
    reference = clean[predicted - 1].double().log_softmax(-1)  # (P, V)
    changed = logits[:, predicted - 1].double().log_softmax(-1)  # (R, P, V)
    return (reference.exp() * (reference - changed)).sum(-1).mean(-1)


def logit_difference(logits: torch.Tensor, position: int, target: int, foil: int) -> torch.Tensor:
    """logit(target) − logit(foil) of the prediction made at `position` (of the token after it)."""
    row = logits[:, position].double()  # (R, V)
    return row[:, target] - row[:, foil]


def mean_pooled(hidden: torch.Tensor) -> torch.Tensor:
    """The sentence embedding a sentence-transformers model pools: the mean of the last hidden states over the
    text's tokens (R, T, d) -> (R, d). One unpadded text: every token counts, special tokens included."""
    return hidden.double().mean(1)


def cosine_distance(clean: torch.Tensor, pooled: torch.Tensor) -> torch.Tensor:
    """1 − cos(clean, pooled[r]) per row: 0 where the embedding kept its direction, up to 2. clean: (d,)."""
    return 1 - torch.nn.functional.cosine_similarity(pooled.double(), clean.double()[None], dim=-1)


def token_losses(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Each token's negative log-likelihood given the tokens before it, in nats: (B, T) from logits (B, T, V) and
    ids (B, T); position 0, which nothing predicts, is 0. Differentiable (head-importance gates)."""
    losses = torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2).float(), ids[:, 1:], reduction="none")
    return torch.nn.functional.pad(losses, (1, 0))
