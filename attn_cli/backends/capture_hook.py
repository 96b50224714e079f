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
import functools
import re
import sys
from collections.abc import Callable, Hashable, Iterator
from collections.abc import Set as AbstractSet
from typing import Any

import torch
from transformers import AttentionInterface, AttentionMaskInterface
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from attn_cli.data.capture import LayerCapture
from attn_cli.math.masks import AttentionMask
from attn_cli.math.scoring import Softcapped
from attn_cli.plumbing.errors import BadInput, UnsupportedModel

CAPTURE_NAME = "attn_capture"

# Keyword arguments that change the attention math beyond q·kᵀ·scale + mask.
# We cannot yet reproduce them, so a model that passes them is refused rather
# than shown wrong numbers.
# (softcap, Gemma 2's attention-logit softcapping, is reproduced: scoring.Softcapped.)
_UNSUPPORTED_KWARGS = ("s_aux", "position_bias", "sinks")


class LayersCaptured(Exception):
    """Raised by a LayerRecorder with stop=True once every wanted layer is handed to its sink: nothing after
    the last of them can change their q, k and v, so the forward is not run on (its caller catches this)."""


class LayerRecorder:
    """Called by transformers for every attention layer during one forward pass."""

    def __init__(
        self,
        wanted_layers: AbstractSet[Hashable],  # layer numbers, or key_of's keys
        delegate_name: str,
        inject=None,
        keep_inputs: bool = False,
        pre_rope: bool = False,
        analysis_device=None,
        sink: Callable | None = None,
        key_of: Callable | None = None,
        keep_bias: bool = False,
        stop: bool = False,
        keep_sink: bool = False,
        edit: Callable | None = None,
        skip_rest: bool = False,
        generating: bool = False,
    ):
        # edit(layer, output) -> output: every head's output (B, T, H, D) as the delegate hands it back, before the
        # module's o_proj mixes the heads: the one place interventions act (analyses/ablate.py: ablation, patching,
        # importance gates). The heads are query heads, so under grouped-query attention an edit of one head
        # leaves the K and V it shares untouched.
        self.edit = edit
        # stop (with a sink): raise LayersCaptured after the last wanted layer is handed over, before its own
        # attention runs, for callers that read nothing but the records (attn heads: a 24-layer model asked for
        # layers 0-1 runs two layers, not 24)
        self.stop, self.handed = stop and sink is not None, set[Hashable]()
        # skip_rest (without a sink): once every wanted layer is recorded, an attention call's output is zeros
        # instead of its computation, for callers that read only the records (capture_batch: attn inspect's
        # --layer 3 of 4 layers spares the layer's own attention, the largest cost at 16k tokens). The forward
        # still runs to its end, so a recurrent-depth model still shows its loop (the refusal above); the
        # layers' records, made before their calls return, are those of the model as it runs.
        self.skip_rest = skip_rest and sink is None
        # key_of(module) -> what wanted_layers and records are keyed by, where a layer number alone does not
        # name an attention (an encoder–decoder model's ("cross", 0)); None: the layer number.
        self.key_of = key_of
        # keep_bias: record an additive position_bias (T5's relative position bias) in LayerCapture.bias instead
        # of refusing the model; only for callers whose analysis adds it to the scores (analyses/seq2seq.py).
        self.keep_bias = keep_bias
        # keep_sink: record a learned sink logit (s_aux) in LayerCapture.sink instead of refusing the model; only
        # for callers whose analysis puts it in the softmax (analyses/inspect.py's analyse_rows).
        self.keep_sink = keep_sink
        # generating: the forwards of model.generate(), whose later steps' keys are the cache (more than the queries);
        # every other forward runs over the text once, a key per token
        self.generating = generating
        self.wanted_layers = wanted_layers
        self.delegate_name = delegate_name
        self.inject = inject  # variant transform (q, k, scale) -> (q', k', scale'), or None
        self.keep_inputs = keep_inputs
        self.pre_rope = pre_rope  # record q and k rotated back to before RoPE (the model still uses RoPE)
        self.inputs: dict[int, torch.Tensor] = {}  # id(attention module) -> its input (B, T, d_model)
        self.rotary: dict[int, tuple] = {}  # id(attention module) -> the (cos, sin) it was given
        # Where records are kept: layers spread over devices by a device map come together here.
        self.analysis_device = analysis_device
        self.records: dict[Any, LayerCapture] = {}  # keyed as wanted_layers
        # sink(record): handed each record as it is made instead of keeping the last one per layer
        # (generation calls every layer once per new token).
        self.sink = sink
        self.parents: dict[int, torch.nn.Module] = {}  # id(attention module) -> the module holding it
        self.paths: dict[int, int] = {}  # id(attention module) -> the layer its path names (capturing fills it)
        self.calls = 0
        self.called: set[int] = set()  # id() of the attention modules that ran in this forward
        self.last_called: int | None = None  # id() of the one that ran last

    def __call__(self, module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        layer = layer_of(module, self.calls, self.paths)
        slot = layer if self.key_of is None else self.key_of(module)  # what records are keyed by
        self.calls += 1
        if self.sink is None:  # one forward, where each layer's attention runs once (generation: once a token)
            # … or twice in a row (DiffLlama's two softmaxes per head): a module that runs again after another
            # layer's did is a recurrent-depth model running its layers again (Dory's loops, HRM's cycles)
            again = id(module) in self.called and id(module) != self.last_called
            self.last_called = id(module)
            looped = again and isinstance(getattr(module, "layer_idx", None), int)
            if looped and module.layer_idx >= 0:
                raise UnsupportedModel(
                    f"{type(module).__name__} (layer {layer}) ran more than once in one forward: the model loops over its "
                    "layers (recurrent depth), and attn, which shows one attention per layer, would show only the "
                    "last pass"
                )
            self.called.add(id(module))
        # a sink that only gates the output (granite_swa) leaves the weights a plain softmax: nothing to refuse
        sink = None if kwargs.get("s_aux") is None or gates_output_only(module) else kwargs["s_aux"]
        allowed = ("position_bias",) * self.keep_bias + ("s_aux",) * (sink is None or self.keep_sink)
        refuse_unsupported(module, kwargs, allowed=allowed)
        # what the model's name-branching code would have handed its own implementation; seen: the mask it obeys
        attention_mask, kwargs, seen_mask = sparse_selection(self.delegate_name, key, attention_mask, kwargs)
        if scaling is None:
            scaling = query.shape[-1] ** -0.5
        if self.inject is not None:  # --propagate: the model runs on with the variant's q, k and scale
            query, key, scaling = self.inject(query, key, scaling)
        if slot in self.wanted_layers:
            if not self.generating and self.key_of is None and key.shape[-2] != query.shape[-2]:
                # one forward over the text, self-attention: a key per token, unless the layer adds keys of its own
                raise UnsupportedModel(
                    f"{type(module).__name__} (layer {layer}) attends over {key.shape[-2]} keys for "
                    f"{query.shape[-2]} tokens: keys that are not the text's tokens (compressed or pooled blocks of "
                    "them, memory slots), which attn, showing token × token attention, cannot place",
                    "choose the layers whose keys are the tokens with --layer",
                )
            per_head = per_head_mask(attention_mask)  # Doge's: (bias, allowed per head, allowed by any head) or None
            if per_head is not None:
                seen_mask = per_head[2]
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
                mask=allowed_mask(module, query, key, seen_mask, kwargs.get("is_causal"), self.delegate_name).to(
                    self.analysis_device or query.device
                ),
                scale=float(scaling),
                inputs=None if inputs is None else keep(inputs),
                w_o=output_projection(module, self.parents.get(id(module))),
                bias=None if kwargs.get("position_bias") is None else keep(kwargs["position_bias"]),
                scorer=None if kwargs.get("softcap") is None else Softcapped(kwargs["softcap"], scaling),
                sink=None if sink is None else keep(sink.reshape(-1)),  # (H,) one logit per query head
            )
            if per_head is not None:
                record.bias, record.head_mask = keep(per_head[0]), keep(per_head[1])
            if self.sink is not None:
                self.sink(record)
                self.handed.add(slot)
                if self.stop and self.handed >= self.wanted_layers:
                    raise LayersCaptured
            else:
                self.records[slot] = record
        if self.skip_rest and self.wanted_layers <= self.records.keys():
            # (B, T, H, D_v), as the delegates hand their output back: nothing reads it any more
            return query.new_zeros(query.shape[0], query.shape[2], query.shape[1], value.shape[-1]), None
        delegate = delegate_for(self.delegate_name, module)
        output = delegate(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs)
        if self.edit is None:
            return output
        return (self.edit(layer, output[0]), *output[1:])


def layer_of(module, calls: int, paths: dict | None = None) -> int:
    """The layer an attention call belongs to: the module's layer_idx, else the layer its path names (Zamba2's
    shared block says layer_idx = -1 and sits at layers.N), else how many calls came before."""
    layer = getattr(module, "layer_idx", None)
    if isinstance(layer, int) and layer >= 0:
        return layer
    if paths and id(module) in paths:
        return paths[id(module)]
    return calls if layer is None else int(layer)


_INDEX = re.compile(r"(?:^|\.)(\d+)(?:\.|$)")


def attention_modules(model) -> dict[int, int]:
    """id(module) -> its layer, for every module whose forward calls the attention interface: its layer_idx
    where that is a layer (>= 0), else the first index in its path (layers.3.self_attn -> 3), else left out."""
    found = {}
    for name, module in model.named_modules():
        if not calls_interface(type(module)):
            continue
        layer = getattr(module, "layer_idx", None)
        if not (isinstance(layer, int) and layer >= 0):
            index = _INDEX.search(name)
            layer = int(index.group(1)) if index else None
        if layer is not None:
            found[id(module)] = layer
    return found


_CALLS_INTERFACE: dict[type, bool] = {}  # module class -> calls_interface, read once per class


def calls_interface(cls: type) -> bool:
    """Whether a module class's forward hands its attention to transformers' attention interface."""
    import inspect

    if cls not in _CALLS_INTERFACE:
        forward = cls.__dict__.get("forward")
        found = False
        if forward is not None and cls.__module__.startswith("transformers."):
            try:
                source = inspect.getsource(forward)
                found = "ALL_ATTENTION_FUNCTIONS" in source or "attention_interface" in source
            except (OSError, TypeError):
                pass
        _CALLS_INTERFACE[cls] = found
    return _CALLS_INTERFACE[cls]


def per_head_mask(attention_mask):
    """A mask with one (T_q, T_k) per head — Doge's float mask, a learned per-key bias with each head's top-k
    keys, dtype-min elsewhere — as (bias (B, H, T_q, T_k) with 0 where masked, allowed (B, H, T_q, T_k),
    allowed by any head (B, 1, T_q, T_k)); None for the usual masks shared by every head."""
    if attention_mask is None or attention_mask.dim() != 4 or attention_mask.shape[1] == 1:
        return None
    if attention_mask.dtype == torch.bool:
        allowed = attention_mask
        bias = torch.zeros(attention_mask.shape, dtype=torch.float32, device=attention_mask.device)
    else:
        allowed = attention_mask > torch.finfo(attention_mask.dtype).min / 2
        bias = attention_mask.masked_fill(~allowed, 0.0)
    return bias, allowed, allowed.any(dim=1, keepdim=True)


def gates_output_only(module) -> bool:
    """Whether the module's learned sink (s_aux) only scales each head's output (granite_swa: its eager attention
    multiplies the output by sigmoid(logsumexp − sink)) rather than joining the softmax (GPT-OSS): its weights
    are then a plain softmax."""
    return _eager_gates(type(module))


_GATES: dict[type, bool] = {}  # module class -> _eager_gates, read once per class


def _eager_gates(cls: type) -> bool:
    import inspect

    if cls not in _GATES:
        eager = getattr(sys.modules.get(cls.__module__), "eager_attention_forward", None)
        try:
            _GATES[cls] = eager is not None and "sink_scale" in inspect.getsource(eager)
        except (OSError, TypeError):
            _GATES[cls] = False
    return _GATES[cls]


def refuse_unsupported(module, kwargs: dict, allowed: tuple = ()) -> None:
    """allowed: what this recorder reproduces after all (T5's position_bias when it keeps the bias)."""
    if kwargs.get("s_aux") is not None and "s_aux" not in allowed:
        raise UnsupportedModel(
            f"{type(module).__name__} adds a learned sink logit (s_aux) to its softmax, which this command does "
            "not reproduce yet",
            "attn inspect, rollout and compare show it (the ⟨sink⟩ share of each row)",
        )
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
        self.paths: dict[int, int] = {}
        self.calls = 0

    def __call__(self, module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        layer = layer_of(module, self.calls, self.paths)
        self.calls += 1
        refuse_unsupported(module, kwargs)
        attention_mask, kwargs, _ = sparse_selection("eager", key, attention_mask, kwargs)
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


# The implementations a sparse-indexer model (DeepSeek-V3.2's lightning indexer: deepseek_v32, glm_moe_dsa, axk2,
# dots3_note, hy_v4, mistral_large4) folds its top-k selection into the mask for; any other name gets `indices=`.
_MASKED_SPARSE = ("eager", "sdpa")


def sparse_selection(delegate_name: str, key, attention_mask, kwargs: dict) -> tuple:
    """(mask for the delegate, kwargs for the delegate, the mask the attention obeys) of a layer call.

    A sparse-indexer layer checks `config._attn_implementation in ("eager", "sdpa")`: under those names it
    folds its per-query top-k keys into the mask; under any other (ours) it passes them as `indices`
    (B, T_q, top_k) for a sparse kernel, and an eager or sdpa delegate would ignore them: the model would
    run dense. So the branch the model takes under the delegate's name is taken here, with the model's own
    code's arithmetic (a scatter into a (B, 1, T_q, T_k) "not selected" mask), and the mask recorded is
    always the one with the selection in it. Other calls come back as they are, at the cost of one lookup.
    """
    indices = kwargs.get("indices")
    if indices is None or attention_mask is None:
        return attention_mask, kwargs, attention_mask
    batch, q_len, k_len = indices.shape[0], indices.shape[1], key.shape[-2]
    unselected = (
        indices.new_ones((batch, q_len, k_len), dtype=torch.bool).scatter(-1, indices.long(), False).unsqueeze(1)
    )  # (B, 1, T_q, T_k), True = not among the query's top-k
    if attention_mask.dtype == torch.bool:
        masked = attention_mask & ~unselected
    else:
        masked = attention_mask.masked_fill(unselected, torch.finfo(attention_mask.dtype).min)
    if delegate_name not in _MASKED_SPARSE:  # a kernel that reads `indices` itself gets what the model hands it
        return attention_mask, kwargs, masked
    return masked, {**kwargs, "indices": None}, masked


# Model code that decides something by the attention implementation's name: `_attn_implementation == "eager"`,
# `in ("eager", "sdpa")`, `!= "sdpa"` … Under attn's name such a branch can go the other way than under the
# implementation the model had, and change the model: it is checked (capture_difference) before the first numbers.
_NAME_BRANCH = re.compile(r"_attn_implementation\s*(?:==|!=|\bnot\s+in\b|\bin\b)")


def branches_on_name(model) -> bool:
    """Whether any of the model's own transformers modules compares the attention implementation's name."""
    files = {getattr(sys.modules.get(type(module).__module__), "__file__", None) for module in model.modules()}
    return any(_source_branches(path) for path in files if path and "/transformers/models/" in path.replace("\\", "/"))


@functools.lru_cache(maxsize=64)
def _source_branches(path: str) -> bool:
    try:
        with open(path, encoding="utf-8") as file:
            return _NAME_BRANCH.search(file.read()) is not None
    except OSError:  # no source to read (a frozen install): check it
        return True


# How far the model's output with capture may be from its output without: the same branch runs the same
# kernels, so the two are equal bit for bit; 1e-5 of the output's magnitude leaves room and nothing more.
CAPTURE_TOLERANCE = 1e-5


def capture_difference(model, inputs: dict) -> float:
    """max |Δ| of the model's output (its first output: the last hidden state) run on `inputs` with attn's
    capture routing every attention call and without, relative to the output's largest finite magnitude (at
    least 1); NaN or infinite values in the same places on both runs count as equal. 0 when the capture
    changes nothing; the guard of models that branch on the implementation's name."""
    with torch.inference_mode():
        plain = _first_output(model(**inputs)).float()
        # records nothing, so refuses nothing: what the analysis will refuse is said by the run itself
        with capturing(model, LayerRecorder(set(), model.config._attn_implementation, keep_bias=True, keep_sink=True)):
            captured = _first_output(model(**inputs)).float()
    # a NaN or infinity the model makes without the capture too is unchanged by it (the finite checks of the
    # capture refuse it in their own words); any other difference counts, a NaN one as NaN
    same = (plain == captured) | (plain.isnan() & captured.isnan())
    gap = torch.where(same, 0.0, (plain - captured).abs())
    finite = plain[plain.isfinite()]
    return float(gap.max()) / max(1.0, float(finite.abs().max()) if finite.numel() else 1.0)


def _first_output(outputs) -> torch.Tensor:
    return outputs[0] if isinstance(outputs, (tuple, list)) else outputs.to_tuple()[0]


def check_capture_changes_nothing(model, inputs: dict) -> None:
    """Refuse (one line) a model whose output the capture would change: its numbers would not be its own."""
    difference = capture_difference(model, inputs)
    if not difference <= CAPTURE_TOLERANCE:
        kind = getattr(model.config, "model_type", type(model).__name__)
        raise UnsupportedModel(
            f"{kind}: routing its attention through attn's capture changes the model's output "
            f"(max |Δ| {difference:.2g} of the last hidden state)",
            "its attention code branches on the attention implementation's name in a way attn does not "
            "reproduce; no numbers are shown rather than wrong ones",
        )


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


def allowed_mask(module, query, key, attention_mask, is_causal_kwarg, delegate: str = "sdpa") -> AttentionMask:
    """Which key each query may attend, for the whole batch, as the implementation `delegate` (the one the
    model runs, which the capture hands the call on to) applies it.

    Accepts every mask format transformers builds: None (sdpa relies on
    `is_causal`: kept as a rule, no T × T tensor), boolean (sdpa), additive
    float (eager), 2-D padding (flash).
    """
    batch, q_len, k_len = query.shape[0], query.shape[-2], key.shape[-2]
    device = query.device
    if attention_mask is None and delegate == "eager":
        # eager adds the mask it is given and nothing else: None masks nothing, whatever `is_causal` says. (A
        # model that supports only eager may leave is_causal unset on a bidirectional attention, Splinter's:
        # sdpa's default below would make it causal.)
        causal = False
    else:  # the same rule sdpa applies when no full mask is given
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
    recorder.paths = _negative_layers(model)
    hooks = []
    if isinstance(recorder, LayerRecorder) and (recorder.keep_inputs or recorder.pre_rope):  # what each module is given
        for module in model.modules():
            if hasattr(module, "layer_idx"):
                hooks.append(module.register_forward_pre_hook(_input_keeper(recorder), with_kwargs=True))
    try:
        yield recorder
    finally:
        for hook in hooks:
            hook.remove()
        model.set_attn_implementation(original)


def _negative_layers(model) -> dict[int, int]:
    """attention_modules for the modules whose layer_idx does not say their layer (Zamba2's -1): usually none,
    and then nothing is looked up."""
    if not any(isinstance(getattr(m, "layer_idx", None), int) and m.layer_idx < 0 for m in model.modules()):
        return {}
    return attention_modules(model)


def _input_keeper(recorder: LayerRecorder):
    def keep(module, args, kwargs):
        recorder.inputs[id(module)] = args[0] if args else kwargs.get("hidden_states")  # X (B, T, d_model)
        if "position_embeddings" in kwargs:  # RoPE models pass (cos, sin) per position
            recorder.rotary[id(module)] = kwargs["position_embeddings"]

    return keep
