"""Encoder–decoder models (BART, mBART, Marian, T5): three kinds of attention in one forward pass.

The encoder's self-attention (source × source), the decoder's causal self-attention (target × target) and
its cross-attention (target queries × source keys) all go through transformers' attention interface, so
the same hook (capture_hook.py) sees them; what tells them apart is where each attention module sits in
the model, found once from the module names. The decoder runs teacher-forced: its inputs are the start
token followed by the target's tokens but the last, as in training (row i is what predicts target token i).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import torch

from attn_cli.backends.capture_hook import LayerRecorder, capturing
from attn_cli.backends.hf_info import WITHOUT_QKV, stack_config, stop_reason
from attn_cli.backends.validate import check_finite, check_finite_record
from attn_cli.data.capture import Capture, LayerCapture, ModelInfo, Token
from attn_cli.math.masks import AttentionMask
from attn_cli.plumbing.errors import BadInput, UnsupportedModel

STACKS = ("encoder", "decoder", "cross")
# Names of cross-attention modules: BART/Marian/mBART encoder_attn, T5 EncDecAttention, BERT-style crossattention
# NLLB-MoE: cross_attention; T5Gemma: cross_attn
_CROSS_NAMES = ("encoder_attn", "EncDecAttention", "crossattention", "cross_attention", "cross_attn")


def is_seq2seq(model) -> bool:
    return bool(getattr(model.config, "is_encoder_decoder", False))


def stack_roles(model) -> dict[int, tuple[str, int]]:
    """id(attention module) -> (stack, layer) for every attention module of an encoder–decoder model.

    The layer is the first number in the module's path (encoder.layers.3.self_attn, decoder.block.3.layer.1
    .EncDecAttention): not every model gives its encoder's attention a layer_idx (Marian does not)."""
    roles = {}
    for name, module in model.named_modules():
        parts = name.split(".")
        numbers = [int(part) for part in parts if part.isdigit()]
        if (
            not numbers
            or not (hasattr(module, "layer_idx") or hasattr(module, "is_causal"))
            or not parts[-1][:1].isalpha()
        ):
            continue
        layer = numbers[0]
        # the outermost stack name: EncoderDecoderModel's BERT decoder sits at decoder.bert.encoder.layer.N
        stack = next((part for part in parts if part in ("encoder", "decoder")), None)
        if any(cross in parts for cross in _CROSS_NAMES):
            roles[id(module)] = ("cross", int(layer))
        elif stack is not None:
            roles[id(module)] = (stack, int(layer))
    return roles


def stack_info(info: ModelInfo, config, stack: str) -> ModelInfo:
    """The ModelInfo of one stack: the encoder's layers and heads, or the decoder's (decoder and cross)."""
    if stack == "encoder":
        return dataclasses.replace(info, causal=False)
    inner = stack_config(config, "decoder")
    if inner is not config:  # an encoder–decoder of two configs (EncoderDecoderModel, T5Gemma): the decoder's own
        kv = getattr(inner, "num_key_value_heads", None) or inner.num_attention_heads
        head_dim = getattr(inner, "head_dim", None) or inner.hidden_size // inner.num_attention_heads
        return dataclasses.replace(
            info,
            layers=inner.num_hidden_layers,
            heads=inner.num_attention_heads,
            kv_heads=kv,
            head_dim=head_dim,
            causal=stack == "decoder",
        )
    layers = next(
        (getattr(config, name) for name in ("decoder_layers", "num_decoder_layers") if getattr(config, name, None)),
        info.layers,
    )
    heads = getattr(config, "decoder_attention_heads", None) or info.heads
    return dataclasses.replace(info, layers=layers, heads=heads, kv_heads=heads, causal=stack == "decoder")


def parse_stacks(spec: str | Sequence[str] | None) -> list[str]:
    """--stack encoder|decoder|cross (comma-separated or a list), or all of them, in model order."""
    names = [
        name.strip()
        for name in ([spec] if isinstance(spec, str) else list(spec or ["all"]))
        for name in name.split(",")
        if name.strip()
    ]
    if names == ["all"]:
        return list(STACKS)
    for name in names:
        if name not in STACKS:
            raise BadInput(f"--stack {name!r}", f"use {', '.join(STACKS)} or all")
    return [stack for stack in STACKS if stack in names]


def decoder_ids(backend, target: str) -> list[int]:
    """The decoder's teacher-forced inputs: the start token, then the target's tokens but the last."""
    config = backend.model.config
    start = getattr(config, "decoder_start_token_id", None)
    if start is None:
        start = config.pad_token_id
    if start is None:
        raise UnsupportedModel(
            f"{backend.info.name} names no decoder start token (decoder_start_token_id)", "set it in config.json"
        )
    labels = backend.tokenizer(text_target=target, add_special_tokens=True)["input_ids"]
    return [int(start)] + list(labels[:-1])


def target_tokens(backend, ids: list[int]) -> list[Token]:
    texts = backend.tokenizer.convert_ids_to_tokens(ids)
    special = set(backend.tokenizer.all_special_ids)
    return [Token(i, texts[i], ids[i], ids[i] in special) for i in range(len(ids))]


def capture_pair(
    backend, source: str, target: str | None, wanted: Mapping[str, Sequence[int]]
) -> tuple[list[Token], list[Token], dict[str, Capture]]:
    """One teacher-forced forward over SOURCE → TARGET: the source's tokens, the decoder's input tokens, and
    a Capture per stack asked for in `wanted` (stack -> layers). The cross Capture's tokens are the target's
    (queries), its keys the source's. target None: only the encoder runs (wanted holds the encoder only)."""
    encoding, _ = backend._encode(source, truncate=False)
    ids = [] if target is None else decoder_ids(backend, target)  # None: the encoder alone runs (wanted: encoder)
    limit = backend.info.max_positions
    if limit is not None and len(ids) > limit:
        raise BadInput(f"the target is {len(ids)} tokens but {backend.info.name} has {limit} positions", "shorten it")
    fed = {name: torch.tensor([value], device=backend.model.device) for name, value in backend._fed(encoding).items()}
    if target is not None:
        fed["decoder_input_ids"] = torch.tensor([ids], device=backend.model.device)  # (1, T_target)
    roles = stack_roles(backend.model)
    recorder = LayerRecorder(
        {(stack, layer) for stack, layers in wanted.items() for layer in layers},
        backend.model.config._attn_implementation,
        analysis_device=backend.device,
        key_of=lambda module: roles.get(id(module)),
        keep_bias=True,
    )
    with capturing(backend.model, recorder), torch.inference_mode():
        (backend.model if target is not None else backend.model.get_encoder())(**fed)
    if recorder.calls == 0:  # attention code of its own (FSMT, ProphetNet …): the weights it returns
        recorder.records = pair_weights_only(backend, fed, wanted)
    missing = sorted(
        {stack for stack, layers in wanted.items() for layer in layers if (stack, layer) not in recorder.records}
    )
    if missing:  # some attention of the pair goes through the interface, this stack's does not (LongT5's local
        # encoder attention, Pegasus-X's block attention, BigBird-Pegasus' block-sparse attention)
        seen = sorted(set(wanted) - set(missing))
        raise UnsupportedModel(
            f"{type(backend.model).__name__}'s {' and '.join(missing)} attention does not go through transformers' "
            "attention interface, so attn cannot see its Q, K and V",
            f"--stack {','.join(seen)} shows the attention it can see" if seen else None,
        )
    source_tokens, targets = backend._tokens(encoding), target_tokens(backend, ids)
    captures = {}
    for stack, layers in wanted.items():
        queries = source_tokens if stack == "encoder" else targets
        captures[stack] = Capture(
            tokens=queries,
            model=stack_info(backend.info, backend.model.config, stack),
            device=backend.device,
            dtype=backend.dtype,
            layers={layer: only_sequence(recorder.records[(stack, layer)]) for layer in layers},
            keys=source_tokens if stack == "cross" else None,
            word_grouping=backend._words(source_tokens, encoding, source) if stack == "encoder" else None,
        )
    return source_tokens, targets, dict(zip(captures, check_finite(list(captures.values()))))


def pair_weights_only(backend, fed: dict, wanted: Mapping[str, Sequence[int]]) -> dict:
    """(stack, layer) -> a record of the weights the model returns with output_attentions, for an encoder–decoder
    whose attention does not go through the interface: q, k and v empty (1, H, T_q, 0), `weights` (1, H, T_q,
    T_k) of the encoder (source × source), the decoder (target × target) and the cross-attention (target ×
    source). A key every head gives exactly 0 is masked (the decoder's causal mask). Refused unless every layer
    asked for is there, as softmax rows of the stack's heads."""
    name = type(backend.model).__name__
    try:
        with torch.inference_mode():
            model = backend.model if "decoder_input_ids" in fed else backend.model.get_encoder()
            out = model(**fed, output_attentions=True)
    except Exception:  # its own attention code cannot hand the weights back
        out = None
    returned = {
        "encoder": getattr(out, "encoder_attentions", None) or getattr(out, "attentions", None),
        "decoder": getattr(out, "decoder_attentions", None),
        "cross": getattr(out, "cross_attentions", None),
    }
    source = fed["input_ids"].shape[1]
    target = fed["decoder_input_ids"].shape[1] if "decoder_input_ids" in fed else 0
    shapes = {"encoder": (source, source), "decoder": (target, target), "cross": (target, source)}
    records = {}
    for stack, layers in wanted.items():
        heads = stack_info(backend.info, backend.model.config, stack).heads
        for layer in layers:
            stacked = returned[stack]
            weights = stacked[layer] if stacked is not None and layer < len(stacked) else None
            if weights is None or tuple(weights.shape[1:]) != (heads, *shapes[stack]):
                raise UnsupportedModel(
                    f"{name} does not route attention through transformers' attention interface, and returns no "
                    f"{stack} attention weights of layer {layer} as {heads} heads of {shapes[stack][0]} × "
                    f"{shapes[stack][1]} either",
                    "models of transformers >= 5 with an attn_implementation setting are supported",
                )
            weights = weights.detach().to(backend.device, torch.float32)  # (1, H, T_q, T_k)
            rows = weights.float().sum(-1)
            if not bool((weights >= 0).all()) or not bool(((rows - 1).abs() <= 1e-3).all()):
                raise UnsupportedModel(
                    f"{name} does not route attention through transformers' attention interface, and the {stack} "
                    "attention weights it returns are not softmax rows",
                    "models of transformers >= 5 with an attn_implementation setting are supported",
                )
            batch, count_q, count_k = weights.shape[0], weights.shape[2], weights.shape[3]
            empty = weights.new_zeros(batch, weights.shape[1], count_q, 0)
            records[(stack, layer)] = LayerCapture(
                layer=layer,
                q=empty,
                k=empty,
                v=empty,
                mask=AttentionMask(count_q, count_k, False, (weights > 0).any(dim=1), weights.device),
                scale=float("nan"),
                weights=weights,
                without_qkv=WITHOUT_QKV.format(name=name),
            )
    return records


def only_sequence(record: LayerCapture) -> LayerCapture:
    """A batch-of-one record as one sequence: q (H, T_q, D), k and v (H_kv, T_k, D); nothing is padding."""
    mask = record.mask
    if mask.dense is not None and mask.dense.dim() == 3:
        mask = dataclasses.replace(mask, dense=mask.dense[0])
    rows = lambda tensor: None if tensor is None else tensor[0]  # noqa: E731
    return dataclasses.replace(
        record,
        q=record.q[0],
        k=record.k[0],
        v=record.v[0],
        mask=mask,
        inputs=rows(record.inputs),
        bias=rows(record.bias),
        weights=rows(record.weights),
    )  # bias and weights (H, T_q, T_k)


def capture_pair_generation(
    backend,
    source: str,
    wanted: Mapping[str, Sequence[int]],
    sink,
    *,
    max_new_tokens: int,
    sample: bool = False,
    temperature: float = 1.0,
    seed: int | None = None,
) -> tuple[list[Token], list[int], str]:
    """model.generate() from SOURCE (greedy, one beam), handing sink(stack, record) every selected decoder and
    cross layer's capture at every step: each step's one query (the decoder's newest input token) over the
    decoder's cache or over the source. Returns the source's tokens, the decoder's ids (its start token, then
    the generated ones) and why it stopped ("eos" or "max_new_tokens")."""
    if backend.lm is None:
        raise UnsupportedModel(
            f"{backend.info.name} has no language-model head in its checkpoint, so it cannot generate",
            "use a checkpoint saved with its *ForConditionalGeneration class",
        )
    encoding, _ = backend._encode(source, truncate=False)
    fed = {name: torch.tensor([value], device=backend.model.device) for name, value in backend._fed(encoding).items()}
    roles = stack_roles(backend.lm)

    def handed(record) -> None:
        check_finite_record(record)
        sink(recorder.current, record)

    class Recorder(LayerRecorder):  # says which stack the record it hands over is of
        def __call__(self, module, *args, **kwargs):
            self.current = (roles.get(id(module)) or ("", 0))[0]
            return super().__call__(module, *args, **kwargs)

    recorder = Recorder(
        {(stack, layer) for stack, layers in wanted.items() for layer in layers},
        backend.model.config._attn_implementation,
        analysis_device=backend.device,
        sink=handed,
        key_of=lambda module: roles.get(id(module)),
        keep_bias=True,
    )
    if seed is not None:
        torch.manual_seed(seed)
    with capturing(backend.lm, recorder), torch.inference_mode():
        out = backend.lm.generate(
            **fed,
            max_new_tokens=max_new_tokens,
            num_beams=1,
            do_sample=sample,
            temperature=temperature if sample else None,
            top_k=None if not sample else 0,
            top_p=None,
            use_cache=True,
        )
    if recorder.calls == 0:  # FSMT, MVP …: inspect reads the weights they return; generation hands none
        raise UnsupportedModel(
            WITHOUT_QKV.format(name=type(backend.model).__name__) + ", and generation records no attention of it",
            "attn inspect SOURCE --target TEXT shows its weights, teacher-forced",
        )
    ids = out[0].tolist()  # the decoder's start token, then what it generated
    return backend._tokens(encoding), ids, stop_reason(ids[1:], backend.lm.generation_config.eos_token_id)
