"""What a backend can do beyond `capture_batch`, as types: one runtime-checkable Protocol per capability.

`Backend` (backends/base.py) declares the one method every backend has. Everything else an analysis may
need is a capability here; an analysis asks `require(backend, Capability, command)` once, before it
starts, and gets the backend back typed, or the one-line refusal (an UnsupportedModel naming the command
and the model, with a hint). `supports(backend, Capability)` is the question without the refusal, for
an analysis that has another way (heads without `capture_padded` re-pads `capture_batch`'s captures).

A capability is a method set, checked by `isinstance` against the Protocol: a backend gains one by
defining its methods, with nothing to register. A Protocol says only that the methods exist (runtime
checks cannot see signatures), so each method's docstring here is the contract.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

from attn_cli.data.capture import ModelInfo, Token
from attn_cli.plumbing.errors import UnsupportedModel


@runtime_checkable
class CapturesPadded(Protocol):
    """Score many texts without copying each out: the batch as the model ran it, layer by layer."""

    def capture_padded(
        self,
        texts: Sequence[str],
        layers: Sequence[int],
        sink: Callable,
        *,
        truncate: bool = False,
        hidden=None,
        sinks: bool = False,
    ) -> Any:
        """sink(run, record) gets each selected layer's LayerCapture of the whole padded batch; returns the run.
        sinks: the caller puts a learned sink logit (record.sink) in its softmax; else such a model is refused."""
        ...


@runtime_checkable
class CapturesGeneration(Protocol):
    """Generate from a prompt, handing over every step's capture; the tokenizer names the new ids."""

    tokenizer: Any

    def capture_generation(
        self, prompt: str, layers: Sequence[int], sink, *, max_new_tokens: int, **how
    ) -> tuple[list[Token], list[int], str]:
        """(the prompt's tokens, the generated ids, why it stopped)."""
        ...


@runtime_checkable
class HasTokenizer(Protocol):
    """A transformers tokenizer: its vocabulary (heads' probes draw words from it) and names for ids."""

    tokenizer: Any


@runtime_checkable
class Tokenizes(Protocol):
    """A text's tokens as a forward sees them, without running it."""

    def tokens(self, text: str, truncate: bool = False) -> tuple[list[Token], int | None]: ...


@runtime_checkable
class EncoderBlocks(Protocol):
    """A post-LN encoder layer's pieces (residual, values, LayerNorms) and the layer re-run with values zeroed."""

    def encoder_blocks(self, text: str, layers: Sequence[int], truncate: bool = False) -> Any: ...

    def rerun_zeroing_values(self, layer: int, inputs: Any) -> Any: ...


@runtime_checkable
class DecoderBlocks(Protocol):
    """A pre-norm decoder's residual stream before and after each layer's attention and FFN, with each head's
    weights, values and W_O slice (backends/decoder_blocks.py's DecoderBlock per layer)."""

    def decoder_blocks(self, text: str, truncate: bool = False) -> Any: ...


@runtime_checkable
class LogitBlocks(Protocol):
    """DecoderBlocks from a language model's forward, with how its last residual became one token's logit
    (backends/decoder_blocks.py's LogitReadout)."""

    def logit_blocks(self, text: str, target: str | int, truncate: bool = False) -> Any: ...


@runtime_checkable
class AttentionGradients(Protocol):
    """The weights of some layers and a target's gradient with respect to them."""

    def attention_gradients(self, text: str, layers: Sequence[int], target=None, *, truncate: bool = False) -> Any: ...


@runtime_checkable
class CircuitWeights(Protocol):
    """Every head's W_Q, W_K, W_V, W_O, the norms, embeddings and unembedding."""

    def circuit_weights(self) -> Any: ...


@runtime_checkable
class Seq2Seq(Protocol):
    """An encoder–decoder model: three stacks of attention (encoder, decoder, cross), two token lists."""

    tokenizer: Any

    def stack_info(self, stack: str) -> ModelInfo:
        """The ModelInfo of one stack: the encoder's layers and heads, or the decoder's (decoder and cross)."""
        ...

    def capture_pair(self, source: str, target: str, wanted) -> tuple:
        """Teacher-forced on target: (source tokens, decoder tokens, a Capture per stack)."""
        ...

    def capture_pair_generation(self, source: str, wanted, sink, *, max_new_tokens: int, **how) -> tuple:
        """Generate from the source: (source tokens, decoder ids with the start token, why it stopped)."""
        ...


@runtime_checkable
class CapturesImage(Protocol):
    """A vision transformer: one image's capture over its patches."""

    def capture_image(self, image, layers: Sequence[int], source: str = "image") -> Any: ...


@runtime_checkable
class Provenance(Protocol):
    """Where the weights came from, for a store's identity: the checkpoint's revision and the tokenizer's name."""

    def provenance(self) -> dict[str, str | None]: ...


@runtime_checkable
class KVGroups(Protocol):
    """Query heads per key/value head, layer by layer, where a model's layers differ (MiMo-V2-Flash's sliding
    layers have twice the kv heads of its full ones), so that a head's kv head is read from its own layer."""

    def kv_groups(self) -> dict[int, int]:
        """layer -> query heads per kv head, for the layers whose attention module says it."""


def kv_groups(backend) -> dict[int, int]:
    """layer -> query heads per kv head where the backend knows each layer's own (KVGroups), else none."""
    return backend.kv_groups() if isinstance(backend, KVGroups) else {}


@runtime_checkable
class Intervenes(Protocol):
    """Run a text with heads' outputs changed (attn ablate): the edit sees every head's output before the
    module's output projection mixes the heads (backends/interventions.py)."""

    def intervention_input(self, text: str, truncate: bool = False) -> Any:
        """The text as one forward's inputs: an interventions.Fed (its inputs (1, T), tokens, ids)."""

    def intervention_batch(self, texts: Sequence[str], truncate: bool = False) -> Any:
        """The texts as one right-padded forward's inputs: an interventions.FedBatch (inputs (B, T))."""

    def edited_forward(
        self, fed: Any, edit: Callable, rows: int = 1, *, grad: bool = False, hidden: bool = False
    ) -> Any:
        """The model on `rows` copies of fed with edit(layer, output (R, T, H, D)) -> output applied in every
        attention layer: the (masked) language model's logits (R, T, V) when it has its head, else or with
        hidden the last hidden states (R, T, d). grad: autograd on (importance gates), else inference mode."""


@runtime_checkable
class IntervenesImage(Protocol):
    """Run an image with heads' outputs changed (attn ablate --image), as Intervenes does a text."""

    def intervention_image(self, image: Any, source: str = "image") -> Any:
        """The image as one forward's inputs: an interventions.Fed (its pixel values (1, 3, H, W), patch tokens)."""

    def edited_forward(
        self, fed: Any, edit: Callable, rows: int = 1, *, grad: bool = False, hidden: bool = True
    ) -> Any:
        """As Intervenes.edited_forward: the last hidden states (R, T, d)."""


@dataclass(frozen=True)
class _Refusal:
    lacks: str  # what the model does not have, after its name
    hint: str  # what to use instead


_REFUSALS: dict[type, _Refusal] = {
    CapturesPadded: _Refusal("cannot run a padded batch", "use a Hugging Face model"),
    CapturesGeneration: _Refusal("does not generate", "use a causal Hugging Face model with its language-model head"),
    HasTokenizer: _Refusal("has no tokenizer", "use a Hugging Face model"),
    Tokenizes: _Refusal("has no tokenizer attn can run alone", "use a Hugging Face model, such as the default minilm"),
    EncoderBlocks: _Refusal(
        "cannot show a layer's residual and LayerNorms", "use a Hugging Face model, such as the default minilm"
    ),
    DecoderBlocks: _Refusal(
        "cannot show a layer's residual stream", "use a Hugging Face decoder, such as --model lab or a GPT-2"
    ),
    LogitBlocks: _Refusal(
        "cannot split a logit over its residual stream", "use a Hugging Face decoder, such as --model lab or a GPT-2"
    ),
    AttentionGradients: _Refusal("has no gradients", "use a Hugging Face model, such as the default minilm"),
    CircuitWeights: _Refusal(
        "has no weights attn reads as circuits", "try a GPT-2, BERT or Llama-style Hugging Face model"
    ),
    Seq2Seq: _Refusal("has one stack of attention", "this needs an encoder–decoder model (BART, Marian, T5)"),
    CapturesImage: _Refusal("reads text, not images", "--image needs a vision transformer (ViT, DeiT, DINOv2, CLIP)"),
    Provenance: _Refusal("does not say where its weights came from", "use a Hugging Face model"),
    IntervenesImage: _Refusal("cannot run an image", "--image needs a vision transformer (ViT, DeiT, DINOv2, CLIP)"),
    Intervenes: _Refusal(
        "cannot run with a head's output changed", "use a Hugging Face model, such as --model lab or the default minilm"
    ),
}

C = TypeVar("C")


def supports(backend, capability: type) -> bool:
    """Whether the backend has the capability's methods."""
    return isinstance(backend, capability)


def require(backend, capability: type[C], command: str, *, hint: str | None = None) -> C:
    """The backend, typed as having `capability`, or the one-line refusal naming the command and the model.

    command: how the user asked for it ("attn circuits", "attn attribute --method gradient").
    hint: what to do instead, when the command knows better than the capability's own hint.
    """
    if isinstance(backend, capability):
        return backend
    refusal = _REFUSALS.get(capability, _Refusal(f"lacks {capability.__name__}", "use a Hugging Face model"))
    raise UnsupportedModel(f"{command}: {backend.info.name} {refusal.lacks}", hint or refusal.hint)
