"""The pieces of a pre-norm decoder layer that `attn routes` decomposes: the residual stream before the
attention, after it and after the feed-forward, and each head's weights, values and slice of W_O.

A pre-norm decoder layer (GPT-2, Llama, Qwen, Mistral, the lab decoder; LayerNorm or RMSNorm) computes

    mid  = x + Attn(Norm1(x))        Attn(·)_i = Σ_h Σ_j A^h_ij v^h_j W^h_O + b_O
    post = mid + FFN(Norm2(mid))

so the attention's output splits exactly over (source token j, head h), and the FFN is one block
(post − mid). The q, k and v come from attn's own capture (capture_hook.LayerRecorder: the model's
attention runs unchanged); the residual states from hooks on each decoder layer and attention module.

Refused: post-norm encoders (BERT: `attn attribute`), sandwich norms around the attention output (Gemma 2/3,
whose attention output is normalised before it joins the residual) and parallel attention + FFN blocks
(GPT-J, Falcon, Phi, NeoX with parallel residual): their layer is not the sum above.

Shapes: T tokens, d = d_model, H query heads, D head dim. Everything handed out is float32 on the CPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from attn_cli.backends.capture_hook import LayerRecorder, attention_modules, capturing, output_projection
from attn_cli.data.capture import sequence_of
from attn_cli.math.alti_logit import FinalNorm
from attn_cli.math.attention import expand_kv, masked_softmax
from attn_cli.plumbing.errors import UnsupportedModel

SUPPORTED = "pre-norm decoders (GPT-2, Llama, Qwen, Mistral, the lab decoder)"
# children whose presence means the attention or FFN output is normalised before it joins the residual
_SANDWICH = ("post_feedforward_layernorm", "pre_feedforward_layernorm", "post_attn_norm", "post_attention_norm")
_FINAL_NORMS = ("ln_f", "norm", "final_layernorm", "final_layer_norm")  # the base model's norm before the LM head


@dataclass
class DecoderBlock:
    """One decoder layer as the model ran it on one text (batch dimension dropped)."""

    layer: int
    resid_pre: torch.Tensor  # (T, d) x: the layer's input
    resid_mid: torch.Tensor  # (T, d) x + Attn(Norm1(x)) (the attention module's own output added)
    resid_post: torch.Tensor  # (T, d) the layer's output
    weights: torch.Tensor  # (H, T, T) A: every query head's attention weights (masked keys exactly 0)
    values: torch.Tensor  # (H, T, D) v per query head (grouped kv heads repeated)
    w_o: torch.Tensor  # (H, D, d) head h's rows of the output projection (x·W)
    b_o: torch.Tensor  # (d,) the output projection's bias (zeros where it has none)
    attention_out: torch.Tensor  # (T, d) what the attention module returned: Σ_h Σ_j A v W_O + b_O


def refuse_unless_pre_norm(model) -> None:
    """UnsupportedModel unless the model is a decoder whose layers are the pre-norm sum in the docstring."""
    config = model.config
    name = type(model).__name__
    decoder = getattr(config, "is_decoder", False) or any(
        arch.endswith(("ForCausalLM", "LMHeadModel")) for arch in (getattr(config, "architectures", None) or [])
    )
    decoder = decoder or getattr(config, "model_type", "") in {"gpt2", "llama", "qwen2", "qwen3", "mistral"}
    if not decoder or getattr(config, "is_encoder_decoder", False):
        raise UnsupportedModel(
            f"{name} is not a decoder: routes and decoder attribution are defined for {SUPPORTED}",
            "for a BERT-family encoder use attn attribute (ALTI, GlobEnc, value zeroing)",
        )
    parallel = getattr(config, "use_parallel_residual", False) or getattr(config, "parallel_attn", False)
    sandwich = [path for path, _ in model.named_modules() if path.rsplit(".", 1)[-1] in _SANDWICH]
    if parallel or sandwich or getattr(config, "model_type", "") in {"gptj", "phi", "phi3", "codegen"}:
        raise UnsupportedModel(
            f"{name}'s layers normalise the attention output or run attention and FFN in parallel",
            f"attn routes decomposes {SUPPORTED}",
        )


def capture_decoder_blocks(model, fed: dict, delegate: str) -> list[DecoderBlock]:
    """One forward pass over `fed` (one text, unpadded): every layer's DecoderBlock."""
    return _capture(model, model, fed, delegate)[0]


@dataclass
class LogitReadout:
    """How the residual after the last layer becomes one token's logit (batch dimension dropped)."""

    norm: FinalNorm  # the final norm, as math/alti_logit reads it
    normalised: torch.Tensor  # (T, d) what the model's own final norm returned
    unembedding: torch.Tensor  # (d,) the token's row of the LM head
    unembedding_bias: float  # the LM head's bias for the token (0 where it has none)
    logits: torch.Tensor  # (T,) the token's logit at every position, as the model computed it
    token_id: int
    token: str = ""  # the token as the vocabulary spells it (the backend's tokenizer says)


def capture_logit_blocks(model, lm, fed: dict, delegate: str, token_id: int) -> tuple[list[DecoderBlock], LogitReadout]:
    """One forward pass of the language model `lm` (whose base model is `model`) over `fed`: every layer's
    DecoderBlock and how the last residual became token_id's logit. UnsupportedModel where the final norm is
    neither a LayerNorm nor an RMSNorm, or the LM head is not a linear map."""
    head = lm.get_output_embeddings()
    final = next(
        (getattr(model, name) for name in _FINAL_NORMS if isinstance(getattr(model, name, None), torch.nn.Module)), None
    )
    if not isinstance(head, torch.nn.Linear) or final is None:
        raise UnsupportedModel(
            f"{type(lm).__name__}: attn found no final norm feeding a linear LM head",
            f"alti-logit decomposes {SUPPORTED}",
        )
    norm = final_norm(final)
    seen: dict[str, torch.Tensor] = {}

    def keep(_module, _args, out) -> None:  # returns None: a forward hook's value would replace the output
        seen["normalised"] = out.detach()[0].float().cpu()

    hook = final.register_forward_hook(keep)
    try:
        blocks, output = _capture(model, lm, fed, delegate)
    finally:
        hook.remove()
    bias = head.bias
    return blocks, LogitReadout(
        norm,
        seen["normalised"],
        head.weight[token_id].detach().float().cpu(),
        0.0 if bias is None else float(bias[token_id]),
        output.logits[0, :, token_id].detach().float().cpu(),
        token_id,
    )


def final_norm(module) -> FinalNorm:
    """The final norm's kind, γ, β and ε: torch's LayerNorm, or an RMSNorm (Llama's, Qwen's, Mistral's: x / rms ⊙ γ)."""
    weight = getattr(module, "weight", None)
    if isinstance(module, torch.nn.LayerNorm) and weight is not None:
        bias = module.bias
        return FinalNorm(
            "layernorm",
            weight.detach().float().cpu(),
            torch.zeros_like(weight, device="cpu", dtype=torch.float32)
            if bias is None
            else bias.detach().float().cpu(),
            float(module.eps),
        )
    eps = getattr(module, "variance_epsilon", getattr(module, "eps", None))
    if type(module).__name__.endswith("RMSNorm") and weight is not None and eps is not None:
        weight = weight.detach().float().cpu()
        return FinalNorm("rmsnorm", weight, torch.zeros_like(weight), float(eps))
    raise UnsupportedModel(
        f"the final norm is a {type(module).__name__}, neither a LayerNorm nor an RMSNorm",
        f"alti-logit decomposes {SUPPORTED}",
    )


def _capture(model, runner, fed: dict, delegate: str) -> tuple[list[DecoderBlock], Any]:
    """Every layer's DecoderBlock from one forward of `runner` (the base model, or its LM), and its output."""
    refuse_unless_pre_norm(model)
    found = attention_modules(model)  # id(attention module) -> layer
    modules = {id(module): module for module in model.modules() if id(module) in found}
    parents = {id(child): parent for parent in model.modules() for child in parent.children()}
    seen: dict[tuple[int, str], torch.Tensor] = {}

    def keep(layer, name, tensor):
        seen[layer, name] = tensor.detach()[0].float().cpu()  # batch of one

    def first(output):
        return output[0] if isinstance(output, tuple) else output

    hooks = []
    for key, module in modules.items():
        layer, block = found[key], parents[key]
        hooks += [
            module.register_forward_hook(lambda _m, _a, out, layer=layer: keep(layer, "attn", first(out))),
            block.register_forward_pre_hook(
                lambda _m, args, kwargs, layer=layer: keep(layer, "pre", args[0] if args else kwargs["hidden_states"]),
                with_kwargs=True,
            ),
            block.register_forward_hook(lambda _m, _a, out, layer=layer: keep(layer, "post", first(out))),
        ]
    layers = sorted(set(found.values()))
    recorder = LayerRecorder(set(layers), delegate, analysis_device="cpu", keep_sink=True)
    try:
        with capturing(model, recorder), torch.inference_mode():
            output = runner(**fed)
    finally:
        for hook in hooks:
            hook.remove()
    real = fed["attention_mask"][0].bool().cpu()
    by_layer = {layer: key for key, layer in found.items()}
    blocks = [
        _block(layer, sequence_of(recorder.records[layer], 0, real), seen, modules[by_layer[layer]], parents)
        for layer in layers
    ]
    return blocks, output


def _block(layer: int, record, seen: dict, module, parents: dict) -> DecoderBlock:
    if record.scorer is not None or record.bias is not None or record.sink is not None or record.head_mask is not None:
        raise UnsupportedModel(
            f"{type(module).__name__} scores attention beyond q·kᵀ·scale + mask (softcap, a bias or a sink)",
            f"attn routes decomposes {SUPPORTED}",
        )
    q = record.q.float()  # (H, T, D), after RoPE: what the model multiplied
    heads, count = q.shape[0], q.shape[1]
    k, v = expand_kv(record.k.float(), heads), expand_kv(record.v.float(), heads)
    weights = masked_softmax(q @ k.transpose(-1, -2) * record.scale, record.mask.rows(0, count).cpu())
    w_o = output_projection(module, parents.get(id(module)))  # (d, H·D)
    if w_o is None:
        raise UnsupportedModel(f"{type(module).__name__}: attn found no output projection", SUPPORTED)
    d_model = w_o.shape[0]
    w_o = w_o.float().cpu().T.reshape(heads, -1, d_model)  # (H, D, d)
    bias = _output_bias(module, parents.get(id(module)))
    attention_out = seen[layer, "attn"]
    return DecoderBlock(
        layer,
        seen[layer, "pre"],
        seen[layer, "pre"] + attention_out,
        seen[layer, "post"],
        weights,
        v,
        w_o,
        torch.zeros(d_model) if bias is None else bias,
        attention_out,
    )


def _output_bias(module, parent) -> torch.Tensor | None:
    for name in ("o_proj", "c_proj", "out_proj", "dense"):
        layer = getattr(module, name, None)
        if layer is not None and getattr(layer, "weight", None) is not None:
            bias = getattr(layer, "bias", None)
            return None if bias is None else bias.detach().float().cpu()
    return None
