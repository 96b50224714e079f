"""The pieces of a post-LayerNorm encoder layer (the BERT family) that `attn attribute` decomposes.

ALTI, GlobEnc and value zeroing look inside a whole layer, not only its attention: the residual
connection, the output projection's bias and both LayerNorms. Their references are written for the
post-LN BERT family (BERT, RoBERTa, ELECTRA, MiniLM): x → LN1(x + Attn(x)) → LN2(h + FFN(h)). Those
are the modules found here, by the names transformers gives them; any other layout is refused.

Shapes: T tokens, d = d_model, H heads, D head dim. Everything handed out is float32 on the CPU.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from attn_cli.plumbing.errors import UnsupportedModel

SUPPORTED = "post-LayerNorm BERT-family encoders (BERT, RoBERTa, ELECTRA, MiniLM)"


@dataclass(frozen=True)
class NormParameters:
    weight: torch.Tensor  # (d,) γ
    bias: torch.Tensor  # (d,) β
    eps: float


@dataclass
class Block:
    """One layer as the model ran it on one text (batch dimension dropped)."""

    layer: int
    inputs: torch.Tensor  # (T, d) x: the layer's input (the previous layer's output)
    weights: torch.Tensor  # (H, T, T) A: every head's attention weights
    values: torch.Tensor  # (H, T, D) v = x·W_V + b_V, per head
    w_o: torch.Tensor  # (H, D, d) head h's rows of the output projection (x·W)
    b_o: torch.Tensor  # (d,)
    ln1: NormParameters  # after the attention and its residual
    pre_ln1: torch.Tensor  # (T, d) x + Attn(x) + b_O: what LN1 normalises
    ln2: NormParameters  # after the feed-forward and its residual
    pre_ln2: torch.Tensor  # (T, d) what LN2 normalises
    outputs: torch.Tensor  # (T, d) the layer's output


def encoder_layers(model) -> list:
    """The model's layers, each checked for the post-LN BERT layout; UnsupportedModel otherwise."""
    layers = getattr(getattr(model, "encoder", None), "layer", None)
    config = model.config
    if layers is None or not all(_is_post_ln(layer) for layer in layers) or getattr(config, "is_decoder", False):
        raise UnsupportedModel(
            f"{type(model).__name__} is not a post-LayerNorm BERT-family encoder",
            f"GlobEnc and value zeroing are defined here for {SUPPORTED} (ALTI, alti-logit, gradient and flow "
            "also run on pre-norm decoders)",
        )
    if getattr(config, "position_embedding_type", "absolute") != "absolute":
        raise UnsupportedModel(
            f"{type(model).__name__} uses {config.position_embedding_type} position scores inside its attention",
            f"attn attribute supports {SUPPORTED} with absolute positions",
        )
    return list(layers)


def _is_post_ln(layer) -> bool:
    names = (
        "attention.self.query",
        "attention.self.key",
        "attention.self.value",
        "attention.output.dense",
        "attention.output.LayerNorm",
        "output.LayerNorm",
        "intermediate",
    )
    try:
        return all(layer.get_submodule(name) is not None for name in names)
    except AttributeError:
        return False


def _norm(module) -> NormParameters:
    return NormParameters(module.weight.detach().float().cpu(), module.bias.detach().float().cpu(), float(module.eps))


def capture_blocks(model, inputs: dict, layers) -> list[Block]:
    """One forward pass over `inputs` (one text, unpadded), recording each selected layer's pieces."""
    modules, layers = encoder_layers(model), list(layers)
    seen: dict[tuple[int, str], torch.Tensor] = {}

    def keep(layer, name, tensor):
        seen[layer, name] = tensor.detach()[0].float().cpu()  # batch of one

    hooks = []
    for layer in layers:
        module = modules[layer]
        hooks += [
            module.register_forward_pre_hook(lambda _m, args, layer=layer: keep(layer, "x", args[0])),
            module.register_forward_hook(lambda _m, _a, out, layer=layer: keep(layer, "out", _first(out))),
            *[
                module.get_submodule(f"attention.self.{name}").register_forward_hook(
                    lambda _m, _a, out, layer=layer, name=name: keep(layer, name, out)
                )
                for name in ("query", "key", "value")
            ],
            module.attention.output.LayerNorm.register_forward_pre_hook(
                lambda _m, args, layer=layer: keep(layer, "pre_ln1", args[0])
            ),
            module.output.LayerNorm.register_forward_pre_hook(
                lambda _m, args, layer=layer: keep(layer, "pre_ln2", args[0])
            ),
        ]
    try:
        with torch.inference_mode():
            model(**inputs)
    finally:
        for hook in hooks:
            hook.remove()
    heads = model.config.num_attention_heads
    return [
        _block(layer, modules[layer], {name: tensor for (at, name), tensor in seen.items() if at == layer}, heads)
        for layer in layers
    ]


def _first(output):
    return output[0] if isinstance(output, tuple) else output


def _block(layer: int, module, seen: dict, heads: int) -> Block:
    split = lambda t: t.reshape(t.shape[0], heads, -1).transpose(0, 1)  # noqa: E731  (T, d) → (H, T, D)
    q, k, v = split(seen["query"]), split(seen["key"]), split(seen["value"])
    # No padding (one text) and absolute positions: the weights are the plain scaled softmax.
    weights = torch.softmax(q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5, dim=-1)  # (H, T, T)
    dense = module.attention.output.dense
    w_o = dense.weight.detach().float().cpu().T.reshape(heads, -1, dense.weight.shape[0])  # (H, D, d)
    return Block(
        layer,
        seen["x"],
        weights,
        v,
        w_o,
        dense.bias.detach().float().cpu(),
        _norm(module.attention.output.LayerNorm),
        seen["pre_ln1"],
        _norm(module.output.LayerNorm),
        seen["pre_ln2"],
        seen["out"],
    )


def rerun_zeroing_values(model, layer: int, inputs: torch.Tensor) -> torch.Tensor:
    """Layer `layer` run again on its original input x (T, d) once per token j with token j's value
    vectors zeroed in every head (v_j = 0, bias included), and once untouched (last): (T + 1 copies, T tokens,
    d) outputs. The untouched copy is the baseline: the same call's arithmetic, so a token whose values
    change nothing gives exactly the baseline (the model's own forward may round differently).

    The runs are one batch of T + 1 copies of the layer (T + 1 layer runs of compute, one call)."""
    module = encoder_layers(model)[layer]
    count = inputs.shape[0]
    device, dtype = next(module.parameters()).device, next(module.parameters()).dtype
    batch = inputs.to(device, dtype).unsqueeze(0).expand(count + 1, -1, -1).contiguous()  # (T + 1, T, d)
    chosen = torch.arange(count, device=device)

    def zero(_module, _args, output):  # output (T + 1 copies, T tokens, d): copy j < T loses token j's value
        output = output.clone()
        output[chosen, chosen] = 0
        return output

    with _hooked(module.attention.self.value, zero), torch.inference_mode():
        out = _first(module(batch))
    return out.float().cpu()


@contextlib.contextmanager
def _hooked(module, hook):
    handle = module.register_forward_hook(hook)
    try:
        yield
    finally:
        handle.remove()
