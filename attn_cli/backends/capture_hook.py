"""Capture Q, K, V through transformers' attention interface, then delegate.

transformers >= 5 sends every attention layer through `ALL_ATTENTION_FUNCTIONS`
under the name in `config._attn_implementation`. We register one more name,
`attn_capture`, whose function records what the layer hands it and then calls
the implementation the model had (sdpa, eager, flash …), so the model's own
output is unchanged and its fast kernels still run. No model code is copied.

Masks are built per implementation name: the mask function of the delegate is
registered under our name too, or transformers would silently pass
`attention_mask=None` and padded batches would come out wrong.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator

import torch
from transformers import AttentionInterface, AttentionMaskInterface
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from attn_cli.data.capture import LayerCapture
from attn_cli.math.masks import AttentionMask
from attn_cli.plumbing.errors import BadInput, UnsupportedModel

CAPTURE_NAME = "attn_capture"

# Keyword arguments that change the attention math beyond q·kᵀ·scale + mask.
# We cannot yet reproduce them, so a model that passes them is refused rather
# than shown wrong numbers.
_UNSUPPORTED_KWARGS = ("softcap", "s_aux", "position_bias", "sinks")


class LayersCaptured(Exception):
    """Raised by a LayerRecorder with stop=True once every wanted layer is handed to its sink: nothing after
    the last of them can change their q, k and v, so the forward is not run on (its caller catches this)."""


class LayerRecorder:
    """Called by transformers for every attention layer during one forward pass."""

    def __init__(
        self,
        wanted_layers: set[int],
        delegate_name: str,
        inject=None,
        keep_inputs: bool = False,
        pre_rope: bool = False,
        analysis_device=None,
        sink: Callable | None = None,
        key_of: Callable | None = None,
        keep_bias: bool = False,
        stop: bool = False,
    ):
        # stop (with a sink): raise LayersCaptured after the last wanted layer is handed over, before its own
        # attention runs, for callers that read nothing but the records (attn heads: a 24-layer model asked for
        # layers 0-1 runs two layers, not 24)
        self.stop, self.handed = stop and sink is not None, set()
        # key_of(module) -> what wanted_layers and records are keyed by, where a layer number alone does not
        # name an attention (an encoder–decoder model's ("cross", 0)); None: the layer number.
        self.key_of = key_of
        # keep_bias: record an additive position_bias (T5's relative position bias) in LayerCapture.bias instead
        # of refusing the model; only for callers whose analysis adds it to the scores (analyses/seq2seq.py).
        self.keep_bias = keep_bias
        self.wanted_layers = wanted_layers
        self.delegate_name = delegate_name
        self.inject = inject  # variant transform (q, k, scale) -> (q', k', scale'), or None
        self.keep_inputs = keep_inputs
        self.pre_rope = pre_rope  # record q and k rotated back to before RoPE (the model still uses RoPE)
        self.inputs: dict[int, torch.Tensor] = {}  # id(attention module) -> its input (B, T, d_model)
        self.rotary: dict[int, tuple] = {}  # id(attention module) -> the (cos, sin) it was given
        # Where records are kept: layers spread over devices by a device map come together here.
        self.analysis_device = analysis_device
        self.records: dict[int, LayerCapture] = {}
        # sink(record): handed each record as it is made instead of keeping the last one per layer
        # (generation calls every layer once per new token).
        self.sink = sink
        self.parents: dict[int, torch.nn.Module] = {}  # id(attention module) -> the module holding it
        self.calls = 0

    def __call__(self, module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        layer = layer_of(module, self.calls)
        slot = layer if self.key_of is None else self.key_of(module)  # what records are keyed by
        self.calls += 1
        refuse_unsupported(module, kwargs, allowed=("position_bias",) if self.keep_bias else ())
        if scaling is None:
            scaling = query.shape[-1] ** -0.5
        if self.inject is not None:  # --propagate: the model runs on with the variant's q, k and scale
            query, key, scaling = self.inject(query, key, scaling)
        if slot in self.wanted_layers:
            inputs = self.inputs.get(id(module))
            seen_q, seen_k = (
                unrotate(module, query, key, self.rotary.get(id(module))) if self.pre_rope else (query, key)
            )
            # The whole batch: query (B, H, T, D), key/value (B, H_kv, T, D), the mask,
            # inputs (B, T, d_model). The backend cuts it into one LayerCapture per sequence.
            keep = lambda tensor: tensor.detach().to(self.analysis_device or tensor.device)  # noqa: E731
            record = LayerCapture(
                layer=layer,
                q=keep(seen_q),
                k=keep(seen_k),
                v=keep(value),
                mask=allowed_mask(module, query, key, attention_mask, kwargs.get("is_causal")).to(
                    self.analysis_device or query.device
                ),
                scale=float(scaling),
                inputs=None if inputs is None else keep(inputs),
                w_o=output_projection(module, self.parents.get(id(module))),
                bias=None if kwargs.get("position_bias") is None else keep(kwargs["position_bias"]),
            )
            if self.sink is not None:
                self.sink(record)
                self.handed.add(slot)
                if self.stop and self.handed >= self.wanted_layers:
                    raise LayersCaptured
            else:
                self.records[slot] = record
        delegate = delegate_for(self.delegate_name, module)
        return delegate(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs)


def layer_of(module, calls: int) -> int:
    """The layer an attention call belongs to: the module's layer_idx, else how many calls came before."""
    layer = getattr(module, "layer_idx", None)
    return calls if layer is None else int(layer)


def refuse_unsupported(module, kwargs: dict, allowed: tuple = ()) -> None:
    """allowed: what this recorder reproduces after all (T5's position_bias when it keeps the bias)."""
    for name in _UNSUPPORTED_KWARGS:
        if kwargs.get(name) is not None and name not in allowed:
            raise UnsupportedModel(
                f"{type(module).__name__} passes {name!r} to its attention function, which attn cannot reproduce yet",
                "no numbers are shown rather than wrong ones",
            )


class WeightKeeper:
    """For gradients with respect to the attention weights (`attn attribute --method gradient`): every
    selected layer's softmax weights (B, H, T, T) as the model multiplies them with V, kept in the
    autograd graph, so torch.autograd.grad(target, weights) is ∂target/∂A with every later path counted.

    It runs the model's own eager attention (sdpa and flash never materialise the weights); capturing()
    then builds eager's additive masks. Run under torch.enable_grad(), never inference_mode.
    """

    def __init__(self, wanted_layers: set[int]):
        self.wanted_layers = wanted_layers
        self.weights: dict[int, torch.Tensor] = {}  # layer -> (B, H, T, T), in the graph
        self.parents: dict[int, torch.nn.Module] = {}
        self.keep_inputs = self.pre_rope = False
        self.calls = 0

    def __call__(self, module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        layer = layer_of(module, self.calls)
        self.calls += 1
        refuse_unsupported(module, kwargs)
        eager = getattr(sys.modules[type(module).__module__], "eager_attention_forward", None)
        if eager is None:
            raise UnsupportedModel(
                f"{type(module).__name__} has no eager attention that hands back its weights",
                "gradients need the softmax weights the model multiplies",
            )
        output, weights = eager(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs)
        if layer in self.wanted_layers:
            self.weights[layer] = weights
        return output, weights


def delegate_for(name: str, module) -> Callable:
    """The attention function the model had. Eager lives in each model's own file."""
    if name == "eager" or name not in ALL_ATTENTION_FUNCTIONS:
        eager = getattr(sys.modules[type(module).__module__], "eager_attention_forward", None)
        if eager is not None:
            return eager
        return ALL_ATTENTION_FUNCTIONS["sdpa"]
    return ALL_ATTENTION_FUNCTIONS[name]


# Where architectures keep the attention output projection W_O, relative to the attention module the
# hook sees: Llama/Qwen/Mistral o_proj, BART/OPT out_proj, DistilBERT out_lin, GPT-2 c_proj (a Conv1D,
# stored transposed), and the BERT family's sibling output.dense (the hook sees BertSelfAttention).
_OWN_OUTPUT = ("o_proj", "out_proj", "out_lin", "c_proj", "dense")
_SIBLING_OUTPUT = ("output.dense",)


def output_projection(module, parent=None) -> torch.Tensor | None:
    """The attention output projection W_O of `module` as (d_model, H·D), or None where it is not found.

    This is the one place that knows where each architecture keeps it.
    """
    candidates = [getattr(module, name, None) for name in _OWN_OUTPUT]
    if parent is not None:
        candidates += [parent.get_submodule(path) if _has(parent, path) else None for path in _SIBLING_OUTPUT]
    for layer in candidates:
        weight = getattr(layer, "weight", None)
        if weight is None or weight.dim() != 2:
            continue
        if type(layer).__name__ == "Conv1D":  # transformers' Conv1D keeps (in, out): x @ W + b
            return weight.detach().T
        return weight.detach()  # nn.Linear keeps (out, in): x @ Wᵀ + b
    return None


def _has(module, path: str) -> bool:
    try:
        module.get_submodule(path)
    except AttributeError:
        return False
    return True


def unrotate(module, query, key, position_embeddings):
    """q and k as they were before RoPE, with the model's own apply_rotary_pos_emb.

    RoPE maps x to x·cos + J(x)·sin with J a quarter turn in each plane (J² = -1),
    so the same map with -sin is its exact inverse: rotating back by -θ.
    """
    apply = getattr(sys.modules[type(module).__module__], "apply_rotary_pos_emb", None)
    if position_embeddings is None or apply is None:
        raise BadInput(
            f"--pre-rope: {type(module).__name__} has no rotary position embeddings",
            "its q and k are already what it multiplies",
        )
    cos, sin = position_embeddings
    return apply(query, key, cos, -sin)


def allowed_mask(module, query, key, attention_mask, is_causal_kwarg) -> AttentionMask:
    """Which key each query may attend, for the whole batch.

    Accepts every mask format transformers builds: None (sdpa relies on
    `is_causal`: kept as a rule, no T × T tensor), boolean (sdpa), additive
    float (eager), 2-D padding (flash).
    """
    batch, q_len, k_len = query.shape[0], query.shape[-2], key.shape[-2]
    device = query.device
    # The same rule sdpa applies when no full mask is given.
    causal = is_causal_kwarg if is_causal_kwarg is not None else getattr(module, "is_causal", True)
    causal = bool(causal) and q_len > 1
    if attention_mask is None:
        return AttentionMask(q_len, k_len, causal, None, device)
    if attention_mask.dim() == 2:  # (B, Tk) padding mask, 1 = real token
        rule = AttentionMask(q_len, k_len, causal, None, device).full()  # (Tq, Tk)
        dense = attention_mask.bool()[:, None, :] & rule  # (B, Tq, Tk)
        return AttentionMask(q_len, k_len, False, dense, device)
    mask = attention_mask[:, 0] if attention_mask.dim() == 4 else attention_mask  # (B or 1, Tq, Tk)
    if mask.dtype != torch.bool:
        mask = mask > torch.finfo(mask.dtype).min / 2  # additive: 0 allowed, dtype-min masked
    return AttentionMask(q_len, k_len, False, mask.expand(batch, q_len, k_len).clone(), device)


@contextlib.contextmanager
def capturing(model, recorder: LayerRecorder | WeightKeeper) -> Iterator:
    """Route the model's attention through `recorder` for the duration of the block."""
    original = model.config._attn_implementation
    masked_as = "eager" if isinstance(recorder, WeightKeeper) else original  # the masks its delegate reads
    mask_function = ALL_MASK_ATTENTION_FUNCTIONS.get(masked_as) or ALL_MASK_ATTENTION_FUNCTIONS["sdpa"]
    AttentionInterface.register(CAPTURE_NAME, recorder)
    AttentionMaskInterface.register(CAPTURE_NAME, mask_function)
    model.set_attn_implementation(CAPTURE_NAME)
    recorder.parents = {id(child): parent for parent in model.modules() for child in parent.children()}
    hooks = []
    if recorder.keep_inputs or recorder.pre_rope:  # what each attention module is called with
        for module in model.modules():
            if hasattr(module, "layer_idx"):
                hooks.append(module.register_forward_pre_hook(_input_keeper(recorder), with_kwargs=True))
    try:
        yield recorder
    finally:
        for hook in hooks:
            hook.remove()
        model.set_attn_implementation(original)


def _input_keeper(recorder: LayerRecorder):
    def keep(module, args, kwargs):
        recorder.inputs[id(module)] = args[0] if args else kwargs.get("hidden_states")  # X (B, T, d_model)
        if "position_embeddings" in kwargs:  # RoPE models pass (cos, sin) per position
            recorder.rotary[id(module)] = kwargs["position_embeddings"]

    return keep
