"""A model run with some heads' outputs changed: the backend half of `attn ablate`.

The change happens where a head's output exists on its own: in the attention function, after the softmax
weights met V and before the module's output projection (o_proj, W_O) mixes the heads. capture_hook's
LayerRecorder hands every layer's output (B, T, H, D) to an edit; the edits here are

HeadChanges   row r of the batch keeps head h of layer l with gate[l][r, h] (1: untouched, 0: removed) and
              puts (1 − gate) × replacement in its place (zero, a mean, another run's output)
HeadOutputs   keeps every layer's per-head outputs and changes nothing (the mean and resample references)

so one forward of R copies of a text ablates R different head sets. The heads are query heads: under
grouped-query attention an ablated head's shared K and V still feed its group's other heads.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from attn_cli.data.capture import Token
from attn_cli.plumbing.errors import UnsupportedModel


@dataclass
class Fed:
    """One text as a forward takes it."""

    inputs: dict[str, torch.Tensor]  # the model's inputs, each (1, T), on the model's first device
    tokens: list[Token]
    truncated_from: int | None = None
    logits: bool = False  # edited_forward returns a language-model head's next-token logits, not hidden states
    mask_id: int | None = None  # a masked-language-model head's: edited_forward returns its logits; its [MASK] id

    @property
    def ids(self) -> torch.Tensor:
        return self.inputs["input_ids"][0]  # (T,)

    def repeated(self, rows: int) -> dict[str, torch.Tensor]:
        """The inputs for a batch of `rows` copies: (rows, T) views, no copy."""
        return {name: tensor.expand(rows, *tensor.shape[1:]) for name, tensor in self.inputs.items()}


@dataclass
class FedBatch:
    """Several texts as one padded forward takes them (right-padded: a causal model's real tokens never see
    the padding after them)."""

    inputs: dict[str, torch.Tensor]  # the model's inputs, each (B, T), on the model's first device
    tokens: list[list[Token]]  # each text's own tokens
    logits: bool = False  # edited_forward returns a language-model head's logits, not hidden states

    @property
    def real(self) -> torch.Tensor:
        return self.inputs["attention_mask"].bool()  # (B, T) False at padding

    def repeated(self, rows: int) -> dict[str, torch.Tensor]:
        if rows != 1:
            raise ValueError("a batch of texts runs once: one row per text")
        return self.inputs


@dataclass
class HeadChanges:
    """What every row of one batched forward does to each layer's heads.

    gates: layer -> (R, H) gates, or (R, T, H) per position; 1 keeps the head's output, 0 replaces it; a
        layer left out is untouched.
    replacements: layer -> what a removed head outputs instead, broadcastable to (R, T, H, D); absent: zero.
    """

    gates: dict[int, torch.Tensor]
    replacements: dict[int, torch.Tensor] = field(default_factory=dict)

    def __call__(self, layer: int, output: torch.Tensor) -> torch.Tensor:
        gate = self.gates.get(layer)
        if gate is None:
            return output
        check_heads(layer, output, gate.shape[-1])
        kept = gate.to(output.device, output.dtype)
        kept = kept[:, None, :, None] if kept.dim() == 2 else kept[..., None]  # (R, 1 or T, H, 1)
        replacement = self.replacements.get(layer)
        if replacement is None:
            return output * kept
        # a kept head (gate 1) gets 0 × replacement added: its output is unchanged to the bit
        return output * kept + (1 - kept) * replacement.to(output.device, output.dtype)


class HeadOutputs:
    """Keeps every layer's per-head output (R, T, H, D), detached, and changes nothing."""

    def __init__(self) -> None:
        self.outputs: dict[int, torch.Tensor] = {}

    def __call__(self, layer: int, output: torch.Tensor) -> torch.Tensor:
        self.outputs[layer] = output.detach()
        return output


def check_heads(layer: int, output: torch.Tensor, heads: int) -> None:
    """The delegate handed back one (B, T, H, D) output per query head (a model that mixes its heads inside
    its attention function, or returns another layout, cannot have one head changed)."""
    if output.dim() != 4 or output.shape[2] != heads:
        raise UnsupportedModel(
            f"layer {layer}'s attention output is {tuple(output.shape)}, not (batch, tokens, {heads} heads, head size)",
            "this model's heads cannot be changed one by one",
        )


def edited_forward(model, lm: bool, inputs: dict[str, torch.Tensor], edit, grad: bool) -> torch.Tensor:
    """`model` on inputs with `edit` in every attention layer: its logits (R, T, V) when `lm`, else its last
    hidden states (R, T, d)."""
    # the recorder keeps nothing (no wanted layers): a sink logit or a position bias is the model's own business
    # imported here: capture_hook imports transformers, which the toy and the lab decoder never need, and this
    # module is imported with every analysis (render/builtins.py registers them all)
    from attn_cli.backends.capture_hook import LayerRecorder, capturing

    recorder = LayerRecorder(set(), model.config._attn_implementation, edit=edit, keep_bias=True, keep_sink=True)
    with capturing(model, recorder), torch.enable_grad() if grad else torch.inference_mode():
        outputs = model(**inputs)
    if recorder.calls == 0:
        raise UnsupportedModel(
            f"{type(model).__name__} does not route attention through transformers' attention interface",
            "attn changes a head's output there",
        )
    return outputs.logits if lm else outputs.last_hidden_state
