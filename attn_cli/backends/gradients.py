"""The attention weights of a Hugging Face model with the gradient of a target with respect to them.

The differentiable path (`attn attribute --method gradient`). `attn inspect` runs under
inference_mode and reads q and k; here the model runs once with autograd on, its attention routed
through capture_hook.WeightKeeper, which calls the model's own eager attention and keeps the softmax
weights it multiplies with V (still in the graph). torch.autograd.grad then gives ∂target/∂A for the
selected layers only: no parameter's .grad is touched, no output_attentions, and the model's
attention implementation is restored afterwards.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from attn_cli.backends.capture_hook import WeightKeeper, capturing
from attn_cli.data.capture import Token
from attn_cli.plumbing.errors import BadInput, UnsupportedModel


@dataclass
class GradientRun:
    tokens: list[Token]
    weights: dict[int, torch.Tensor]  # layer -> (H, T, T) the softmax weights
    grads: dict[int, torch.Tensor]  # layer -> (H, T, T) ∂target/∂weights
    target: dict  # what was differentiated: its kind, which output, its value (JSON-ready)
    truncated_from: int | None = None


def attention_gradients(
    backend, text: str, layers: Sequence[int], target: str | int | Callable | None = None, *, truncate: bool = False
) -> GradientRun:
    """One forward with autograd on; the weights of `layers` and the target's gradient with respect to them.

    target: None for the default of the model's kind (see `differentiated`), a token (a language model),
    an output dimension (an encoder), or a callable(outputs) -> scalar tensor.
    """
    encoding, truncated_from = backend._encode(text, truncate)
    fed = backend._pad([encoding], None)
    model = next(model for model in (backend.lm, backend.classifier, backend.model) if model is not None)
    keeper = WeightKeeper(set(layers))
    with capturing(model, keeper), torch.enable_grad():
        outputs = model(**{name: tensor.to(model.device) for name, tensor in fed.items()})
        if keeper.calls == 0:
            raise UnsupportedModel(
                f"{type(model).__name__} does not route attention through transformers' attention interface",
                "gradients need the weights the model multiplies",
            )
        value, described = differentiated(backend, outputs, target)
        weights = [keeper.weights[layer] for layer in layers]  # each (1, H, T, T)
        if not weights[0].requires_grad:
            raise UnsupportedModel(
                f"{backend.info.name}'s parameters do not require gradients",
                "the attention weights are not in an autograd graph",
            )
        # allow_unused + materialize_grads: a target that does not depend on a layer gets zeros, not an error
        grads = torch.autograd.grad(value, weights, allow_unused=True, materialize_grads=True)
    return GradientRun(
        tokens=backend._tokens(encoding),
        weights={layer: w[0].detach().float() for layer, w in zip(layers, weights)},
        grads={layer: g[0].detach().float() for layer, g in zip(layers, grads)},
        target=described,
        truncated_from=truncated_from,
    )


def differentiated(backend, outputs, target) -> tuple[torch.Tensor, dict]:
    """The scalar the gradient is taken of, and what it is.

    A language model: the logit of the next token after the text (the top prediction unless a token is
    given). A sequence classifier: a class's logit (the top class unless a label or an index is given).
    Another model: its sentence embedding, the mean of the last hidden states over the tokens (as
    sentence-transformers pools MiniLM): its Euclidean norm, or one dimension of it when an index is given.
    """
    if callable(target):
        return target(outputs), {"kind": "custom"}
    if backend.lm is not None:
        return _next_token_logit(backend.tokenizer, outputs.logits[0, -1], target)  # (V,)
    if backend.classifier is not None:
        return _class_logit(backend.classifier.config, outputs.logits[0], target)  # (classes,)
    pooled = outputs.last_hidden_state[0].mean(0)  # (d_model,)
    if target is None:
        norm = pooled.norm()
        return norm, {"kind": "embedding-norm", "pooling": "mean", "value": float(norm.detach())}
    dimension = _index(target, pooled.shape[0], "an output dimension of the mean-pooled embedding")
    return pooled[dimension], {
        "kind": "embedding-dimension",
        "pooling": "mean",
        "dimension": dimension,
        "value": float(pooled[dimension].detach()),
    }


def one_token_id(tokenizer, target: str | int, hint: str) -> int:
    """The vocabulary id of `target`: a token of the vocabulary as it is spelled there, or a text the tokenizer
    makes one token of; BadInput where it makes several (or none)."""
    vocab = tokenizer.get_vocab()
    ids = (
        [vocab[target]]
        if isinstance(target, str) and target in vocab
        else tokenizer(str(target), add_special_tokens=False)["input_ids"]
    )
    if len(ids) != 1:
        raise BadInput(f"--explain {target!r} is {len(ids)} tokens for this tokenizer", hint)
    return ids[0]


def _next_token_logit(tokenizer, logits: torch.Tensor, target) -> tuple[torch.Tensor, dict]:
    if target is None:
        token_id = int(logits.argmax())
    else:
        token_id = one_token_id(
            tokenizer, target, "give one token of its vocabulary, e.g. the top prediction attn names without --explain"
        )
    return logits[token_id], {
        "kind": "next-token-logit",
        "token_id": token_id,
        "token": tokenizer.convert_ids_to_tokens(token_id),
        "logit": float(logits[token_id].detach()),
        "top": target is None,
    }


def _class_logit(config, logits: torch.Tensor, target) -> tuple[torch.Tensor, dict]:
    labels = {str(label): int(index) for index, label in (config.id2label or {}).items()}
    if target is None:
        index = int(logits.argmax())
    else:
        index = (
            labels[target]
            if target in labels
            else _index(target, logits.shape[0], f"a label ({', '.join(labels)}) or a class index")
        )
    return logits[index], {
        "kind": "class-logit",
        "index": index,
        "label": (config.id2label or {}).get(index),
        "logit": float(logits[index].detach()),
        "top": target is None,
    }


def _index(target, count: int, what: str) -> int:
    try:
        index = int(str(target).removeprefix("dim:"))
    except ValueError:
        raise BadInput(f"--explain {target!r} is not {what}", f"give an index 0-{count - 1}") from None
    if not 0 <= index < count:
        raise BadInput(f"--explain {index} is out of range", f"{what} is 0-{count - 1}")
    return index
