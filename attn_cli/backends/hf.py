"""The Hugging Face backend: any transformers model whose attention uses the attention interface."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib.util
import inspect
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from attn_cli.backends.capture_hook import (
    LayerRecorder,
    LayersCaptured,
    branches_on_name,
    capturing,
    check_capture_changes_nothing,
)
from attn_cli.backends.hf_info import WITHOUT_QKV, from_pretrained_dtype, model_info, stop_reason
from attn_cli.backends.validate import (
    VISION_TYPES,
    check_config_file,
    check_finite,
    check_finite_record,
    check_tokenizer,
    load_model,
)
from attn_cli.backends.vision import VisionBackend, load_vision_backend
from attn_cli.data.capture import Capture, LayerCapture, Token, sequence_of
from attn_cli.math.masks import AttentionMask
from attn_cli.plumbing.errors import AttnError, BadInput, InputTooLong, ModelNotFound, UnsupportedModel


@dataclass(frozen=True)
class Options:
    """How to fetch and load a Hugging Face model. Safe by default: safetensors only, no remote code."""

    revision: str | None = None  # a hub id's branch, tag or commit
    allow_pickle: bool = False  # also load pickle checkpoints (pytorch_model.bin), which can run code
    trust_remote_code: bool = False  # run Python code shipped with a hub model (never by default)
    device_map: str | dict | None = None  # accelerate placement ("auto", or module → device) for big models


def load(name: str, *, device: str, dtype: str, options: Options) -> HFBackend | VisionBackend:
    """A local model directory, or a hub id resolved through the Hugging Face cache."""
    from attn_cli.backends.hf_files import resolve_model_dir

    directory = resolve_model_dir(name, revision=options.revision, allow_pickle=options.allow_pickle)
    config = check_config_file(directory)
    if config.get("model_type") in VISION_TYPES:  # images, not text: backends/vision.py
        return load_vision_backend(
            name, directory, config, device=device, dtype=dtype, allow_pickle=options.allow_pickle
        )
    return load_hf_backend(
        name,
        directory,
        device=device,
        dtype=dtype,
        allow_pickle=options.allow_pickle,
        trust_remote_code=options.trust_remote_code,
        device_map=options.device_map,
    )


@dataclass
class PaddedRun:
    """A batch as the model ran it, padded on the right (HFBackend.capture_padded)."""

    tokens: list[list[Token]]  # per text, padding excluded
    real: torch.Tensor  # (B, T) bool: not padding
    truncated: int  # texts --truncate cut


class HFBackend:
    def __init__(self, name: str, model, tokenizer, device: str, lm=None):
        self.model = model  # the base model: hidden states only (a single forward never computes logits)
        self.lm = lm  # the same model with its language-model head, for a checkpoint that has one
        self.classifier = None  # the same model with its sequence-classification head, for a checkpoint that has one
        self.masked_lm = None  # the same model with its masked-language-model head, for a checkpoint that has one
        self.tokenizer = tokenizer
        self.device = device
        self.dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
        self.info = model_info(name, model)
        # a model whose code branches on the attention implementation's name is checked once, on its first
        # input, to come out the same with the capture as without (capture_hook.capture_difference)
        self.unchecked = branches_on_name(model)
        # whether the model's attention never calls the interface (BLOOM, Falcon …): known after its first forward,
        # then no forward is run with the capture only to find that again (its weights come from output_attentions)
        self.own_attention = False
        # accelerate's offload directory (--device-map), kept as long as the backend
        self.offload_folder: tempfile.TemporaryDirectory | None = None

    def _guard(self, inputs: dict) -> None:
        """The first forward of a name-branching model: the capture must not change its output (else refused)."""
        if self.unchecked:
            check_capture_changes_nothing(self.model, inputs)
            self.unchecked = False

    def capture_batch(
        self,
        texts: Sequence[str],
        layers: Sequence[int],
        *,
        truncate: bool = False,
        inject=None,
        keep_inputs: bool = False,
        padding_side: str | None = None,
        pre_rope: bool = False,
    ) -> list[Capture]:
        """Run the texts as one padded batch; one Capture per text, its padding cut away."""
        self._one_stack()
        encodings = [self._encode(text, truncate) for text in texts]  # with word ids: Capture.words reads them
        batch = self._pad([encoding for encoding, _ in encodings], padding_side)
        recorder = LayerRecorder(
            set(layers),
            self.model.config._attn_implementation,
            inject,
            keep_inputs,
            pre_rope,
            analysis_device=self.device,
            keep_sink=True,  # every capture_batch record goes through analyse_rows, which puts it in the softmax
            skip_rest=True,  # the model's output is not read: attention after the last wanted layer is not run
        )
        first_device = self.model.device  # where the inputs go: the device itself, or a device map's first
        fed = {name: tensor.to(first_device) for name, tensor in batch.items()}
        self._guard(fed)
        if not self.own_attention:
            with capturing(self.model, recorder), torch.inference_mode():
                self.model(**fed)
            self.own_attention = recorder.calls == 0
        if self.own_attention:  # attention code of its own: the weights it returns, without Q, K and V
            recorder.records = self._weights_only(fed, set(layers))
        unseen = sorted(set(layers) - set(recorder.records))
        if unseen:  # a layer the config counts made no attention call (a recurrent stack reusing its blocks …)
            shown = ", ".join(map(str, unseen[:8])) + (" …" if len(unseen) > 8 else "")
            raise UnsupportedModel(
                f"{self.info.architecture}: layer {shown} made no attention call attn could see "
                f"(the attention calls came from layer {', '.join(map(str, sorted(recorder.records)[:8]))})",
                "choose those layers with --layer",
            )
        real = batch["attention_mask"].bool()  # (B, T) False at padding
        tokens = [self._tokens(encoding) for encoding, _ in encodings]
        return check_finite(
            [
                Capture(
                    tokens=tokens[index],
                    model=self.info,
                    device=self.device,
                    dtype=self.dtype,
                    layers={
                        layer: sequence_of(record, index, real[index]) for layer, record in recorder.records.items()
                    },
                    truncated_from=truncated_from,
                    padding_side=(padding_side or self.tokenizer.padding_side) if len(texts) > 1 else None,
                    word_grouping=self._words(tokens[index], encoding, text),
                )
                for index, (text, (encoding, truncated_from)) in enumerate(zip(texts, encodings))
            ]
        )

    def _weights_only(self, fed: dict, layers: set[int]) -> dict[int, LayerCapture]:
        """The selected layers' weights as the model returns them with output_attentions (its own eager code),
        for a model whose attention does not go through the attention interface: records whose q, k and v
        are empty (B, H, T, 0) and whose `weights` are (B, H, T, T). A key every head of a layer gives exactly
        0 is masked (the model's causal mask, its windows, padding)."""
        try:
            with torch.inference_mode():
                attentions = getattr(self.model(**fed, output_attentions=True), "attentions", None)
        except Exception:  # a model that cannot hand its weights back (its own attention code fails to)
            attentions = None
        attentions = tuple(attentions or ())
        count = fed["input_ids"].shape[1]
        returned = [weights for weights in attentions if weights is not None]
        unlike = [why for why in (_unlike_softmax_rows(weights, count, self.info.heads) for weights in returned) if why]
        if not returned or unlike:
            what = f"the attention weights it returns {unlike[0]}" if unlike else "returns no attention weights either"
            raise UnsupportedModel(
                f"{type(self.model).__name__} does not route attention through transformers' attention interface, "
                f"and {what}",
                "models of transformers >= 5 with an attn_implementation setting are supported",
            )
        records = {}
        real = fed["attention_mask"].bool().to(self.device)  # (B, T)
        for layer in sorted(layers):
            if layer >= len(attentions) or attentions[layer] is None:
                continue
            weights = attentions[layer].detach().to(self.device, torch.float32)  # (B, H, T, T)
            batch, heads, count = weights.shape[:3]
            allowed = (weights > 0).any(dim=1) & real[:, None, :]  # (B, T, T)
            empty = weights.new_zeros(batch, heads, count, 0)
            records[layer] = LayerCapture(
                layer=layer,
                q=empty,
                k=empty,
                v=empty,
                mask=AttentionMask(count, count, False, allowed, weights.device),
                scale=float("nan"),
                weights=weights,
                without_qkv=WITHOUT_QKV.format(name=type(self.model).__name__),
            )
        return records

    def capture_generation(
        self,
        prompt: str,
        layers: Sequence[int],
        sink,
        *,
        max_new_tokens: int,
        sample: bool = False,
        temperature: float = 1.0,
        seed: int | None = None,
        on_token=None,
    ) -> tuple[list[Token], list[int], str]:
        """model.generate() on the prompt, handing sink(record) every selected layer's capture at every step
        (the first step holds the whole prompt; each later one the new token's query over the KV cache).

        Returns the prompt's tokens, the generated ids and why it stopped ("eos" or "max_new_tokens").
        on_token(text): each new piece of text as it comes.
        """
        from transformers.generation.streamers import BaseStreamer

        self._one_stack()
        if self.lm is None:
            raise UnsupportedModel(
                f"{self.info.name} has no language-model head in its checkpoint, so it cannot generate",
                "use a checkpoint saved with its *ForCausalLM / *LMHeadModel class",
            )
        encoding, _ = self._encode(prompt, truncate=False)
        limit = self.info.max_positions
        if limit is not None and len(encoding["input_ids"]) + max_new_tokens > limit:
            raise InputTooLong(
                f"the prompt and {max_new_tokens} new tokens pass {self.info.name}'s {limit} positions",
                "shorten the prompt or ask for fewer tokens",
            )
        inputs = {name: torch.tensor([value], device=self.model.device) for name, value in self._fed(encoding).items()}
        ids = inputs.pop("input_ids")  # (1, P); generate() continues the token types, if any, itself
        inputs.setdefault("attention_mask", torch.ones_like(ids))

        class Streamer(BaseStreamer):
            def __init__(self):
                self.prompt_seen = False
                self.ids: list[int] = []  # generated so far
                self.text = ""  # their decoded text, handed out so far

            def put(self, value):
                if not self.prompt_seen:  # generate() hands the prompt first
                    self.prompt_seen = True
                    return
                self.ids += value.reshape(-1).tolist()
                if on_token is not None:
                    # what decoding all of them adds: one token decoded alone loses the space before it
                    text = tokenizer.decode(self.ids)
                    on_token(text[len(self.text) :])
                    self.text = text

            def end(self):
                pass

        tokenizer = self.tokenizer

        def handed(record) -> None:  # every step's q, k, v checked, as capture_batch checks its captures
            check_finite_record(record)
            sink(record)

        recorder = LayerRecorder(
            set(layers),
            self.model.config._attn_implementation,
            analysis_device=self.device,
            sink=handed,
            keep_sink=True,  # generate's step_row puts a learned sink logit in its softmax
            generating=True,
        )
        self._guard({"input_ids": ids, **inputs})
        if seed is not None:
            torch.manual_seed(seed)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        with capturing(self.lm, recorder), torch.inference_mode():
            out = self.lm.generate(
                input_ids=ids,
                **inputs,
                max_new_tokens=max_new_tokens,
                do_sample=sample,
                temperature=temperature if sample else None,
                top_k=None if not sample else 0,
                top_p=None,
                use_cache=True,
                pad_token_id=pad,
                streamer=Streamer(),
            )
        generated = out[0, ids.shape[1] :].tolist()
        return self._tokens(encoding), generated, stop_reason(generated, self.lm.generation_config.eos_token_id)

    def capture_padded(
        self,
        texts: Sequence[str],
        layers: Sequence[int],
        sink: Callable,
        *,
        truncate: bool = False,
        hidden: Callable | None = None,
        sinks: bool = False,
    ) -> PaddedRun:
        """The texts as one batch padded on the right, as the model ran it (not cut per text), for scoring
        many texts without copying each one out: sink(run, record) is handed each selected layer's
        LayerCapture of the whole batch — q (B, H, T, D), k and v (B, H_kv, T, D), the mask — as the
        forward makes it, and nothing is kept, so one layer's q, k and v are alive at a time.
        Rows and keys at padding are False in run.real (B, T); only real tokens are checked finite.

        hidden(run, states): also hand over the residual stream after every layer, states[l] (B, T, d_model)
        the output of layer l, as the layer wrote it: transformers' hidden states without the
        embeddings, and with the last one not replaced by the final norm's output (last_hidden_state).
        """
        self._one_stack()
        encodings = self._encode_batch(texts, truncate)
        batch = self._pad([encoding for encoding, _ in encodings], "right")
        run = PaddedRun(
            tokens=[self._tokens(encoding) for encoding, _ in encodings],
            real=batch["attention_mask"].bool().to(self.device),
            truncated=sum(cut is not None for _, cut in encodings),
        )

        def handed(record) -> None:  # a per-head mask (Doge's) goes along: LayerScores.add reads it
            check_finite_record(record, run.real)
            sink(run, record)

        # without hidden, nothing after the last selected layer's q, k and v is read: the forward stops there
        recorder = LayerRecorder(
            set(layers),
            self.model.config._attn_implementation,
            analysis_device=self.device,
            sink=handed,
            stop=hidden is None,
            keep_sink=sinks,  # record.sink (H,): the caller's softmax takes it in (attn heads'); else refused
        )
        fed = {name: tensor.to(self.model.device) for name, tensor in batch.items()}
        self._guard(fed)
        outputs = None
        if not self.own_attention or hidden is not None:  # (the residual stream comes from this forward)
            with capturing(self.model, recorder), torch.inference_mode(), _untied_last_state(self.model.config):
                try:
                    outputs = self.model(**fed, **({"output_hidden_states": True} if hidden is not None else {}))
                except LayersCaptured:
                    pass
            self.own_attention = recorder.calls == 0
        if self.own_attention:  # attention code of its own: each selected layer's weights as the model returns them
            for _, record in sorted(self._weights_only(fed, set(layers)).items()):
                handed(record)  # q, k and v empty; LayerCapture.weights (B, H, T, T), the scoring reads those
        if hidden is not None:
            assert outputs is not None  # with hidden, the forward runs to its end (no stop)
            hidden(run, [state.to(self.device) for state in outputs.hidden_states[1:]])
        return run

    def attention_gradients(self, text: str, layers: Sequence[int], target=None, *, truncate: bool = False):
        """The weights of `layers` and a target's gradient with respect to them (backends/gradients.py)."""
        from attn_cli.backends.gradients import attention_gradients

        return attention_gradients(self, text, layers, target, truncate=truncate)

    def intervention_input(self, text: str, truncate: bool = False):
        """The text as one forward's inputs (backends/interventions.py's Fed)."""
        from attn_cli.backends.interventions import Fed

        self._one_stack()
        encoding, truncated_from = self._encode(text, truncate)
        batch = self._pad([encoding], None)
        fed = {name: tensor.to(self.model.device) for name, tensor in batch.items()}
        self._guard(fed)
        masked = self.masked_lm is not None
        return Fed(
            fed,
            self._tokens(encoding),
            truncated_from,
            logits=self.lm is not None,
            mask_id=self.tokenizer.mask_token_id if masked else None,
        )

    def intervention_batch(self, texts: Sequence[str], truncate: bool = False):
        """The texts as one right-padded forward's inputs (backends/interventions.py's FedBatch)."""
        from attn_cli.backends.interventions import FedBatch

        self._one_stack()
        encodings = [self._encode(text, truncate)[0] for text in texts]
        batch = self._pad(encodings, "right")
        fed = {name: tensor.to(self.model.device) for name, tensor in batch.items()}
        self._guard(fed)
        return FedBatch(fed, [self._tokens(encoding) for encoding in encodings], logits=self.lm is not None)

    def edited_forward(self, fed, edit, rows: int = 1, *, grad: bool = False, hidden: bool = False):
        """rows copies of fed with edit(layer, output) in every attention layer: logits with a language-model
        (or masked-language-model) head, else, or with hidden, the last hidden states (backends/interventions.py)."""
        from attn_cli.backends.interventions import edited_forward

        head = None if hidden else self.lm if self.lm is not None else self.masked_lm
        return edited_forward(self.model if head is None else head, head is not None, fed.repeated(rows), edit, grad)

    def _one_stack(self) -> None:
        """What runs the model on one text: an encoder–decoder model (HFPairBackend) refuses it."""

    def kv_groups(self) -> dict[int, int]:
        """layer -> query heads per kv head, as each attention module says it (num_key_value_groups): the
        model info's one count is the config's, which a layer may not share."""
        found: dict[int, int] = {}
        for module in self.model.modules():
            group, layer = getattr(module, "num_key_value_groups", None), getattr(module, "layer_idx", None)
            if isinstance(group, int) and group > 0 and isinstance(layer, int) and layer >= 0:
                found.setdefault(layer, group)
        return found

    def provenance(self) -> dict[str, str | None]:
        """The checkpoint's revision (a hub commit, when it came from the hub) and the tokenizer's name."""
        return {
            "revision": getattr(self.model.config, "_commit_hash", None),
            "tokenizer": getattr(self.tokenizer, "name_or_path", None),
        }

    def circuit_weights(self):
        """Every head's W_Q, W_K, W_V, W_O, the norms, embeddings and unembedding (backends/circuit_weights.py)."""
        from attn_cli.backends.circuit_weights import hf_circuit_weights

        return hf_circuit_weights(self.model, self.lm, self.info)

    def tokens(self, text: str, truncate: bool = False) -> tuple[list[Token], int | None]:
        """The text's tokens as a forward sees them, and its length before --truncate cut it (or None)."""
        encoding, truncated_from = self._encode(text, truncate)
        return self._tokens(encoding), truncated_from

    def encoder_blocks(self, text: str, layers: Sequence[int], truncate: bool = False):
        """Each selected layer's pieces on one text: residual, LayerNorms, values (backends/encoder_blocks.py)."""
        from attn_cli.backends.encoder_blocks import capture_blocks

        batch = self._pad([self._encode(text, truncate)[0]], None)
        return capture_blocks(self.model, {name: value.to(self.model.device) for name, value in batch.items()}, layers)

    def decoder_blocks(self, text: str, truncate: bool = False):
        """Every layer's residual states, weights, values and W_O on one text (backends/decoder_blocks.py)."""
        from attn_cli.backends.decoder_blocks import capture_decoder_blocks

        self._one_stack()
        batch = self._pad([self._encode(text, truncate)[0]], None)
        fed = {name: value.to(self.model.device) for name, value in batch.items()}
        return capture_decoder_blocks(self.model, fed, self.model.config._attn_implementation)

    def logit_blocks(self, text: str, target: str | int, truncate: bool = False):
        """decoder_blocks from the language model's forward, with how its last residual became `target`'s logit
        (backends/decoder_blocks.capture_logit_blocks): (blocks, LogitReadout)."""
        from attn_cli.backends.decoder_blocks import capture_logit_blocks
        from attn_cli.backends.gradients import one_token_id

        if self.lm is None:
            raise UnsupportedModel(
                f"{self.info.name} has no language-model head in its checkpoint: alti-logit splits a next-token logit",
                "use a checkpoint saved with its *ForCausalLM / *LMHeadModel class",
            )
        token_id = one_token_id(self.tokenizer, target, "give one token of its vocabulary, as attn generate shows them")
        unknown = self.tokenizer.unk_token
        if unknown is not None and token_id == self.tokenizer.unk_token_id and target != unknown:
            raise BadInput(
                f"--explain {target!r} is not in {self.info.name}'s vocabulary (its tokenizer makes it {unknown})",
                "give one token of its vocabulary, as attn generate shows them",
            )
        self._one_stack()
        batch = self._pad([self._encode(text, truncate)[0]], None)
        fed = {name: value.to(self.model.device) for name, value in batch.items()}
        blocks, readout = capture_logit_blocks(
            self.model, self.lm, fed, self.model.config._attn_implementation, token_id
        )
        readout.token = self.tokenizer.convert_ids_to_tokens(token_id)
        return blocks, readout

    def rerun_zeroing_values(self, layer: int, inputs: torch.Tensor) -> torch.Tensor:
        """Layer `layer` on its input x (T, d), once per token with its values zeroed, then once untouched."""
        from attn_cli.backends.encoder_blocks import rerun_zeroing_values

        return rerun_zeroing_values(self.model, layer, inputs)

    def _tokens(self, encoding) -> list[Token]:
        ids, special = encoding["input_ids"], encoding["special_tokens_mask"]
        texts = self.tokenizer.convert_ids_to_tokens(ids)
        return [Token(i, texts[i], ids[i], bool(special[i])) for i in range(len(ids))]

    @staticmethod
    def _words(tokens: list[Token], encoding: dict, text: str):
        """Which tokens make which word, from the tokenizer's word ids and offsets, grouped when first asked
        (Capture.word_grouping); None where it has none. A partial, not a closure: a Capture stays picklable."""
        from attn_cli.data.words import words_from_tokenizer

        if "word_ids" not in encoding or "offset_mapping" not in encoding:
            return None
        return functools.partial(words_from_tokenizer, tokens, encoding["word_ids"], encoding["offset_mapping"], text)

    def _pad(self, encodings: list[dict], padding_side: str | None) -> dict[str, torch.Tensor]:
        """Model inputs for the batch: padded to the longest text, position ids kept per text."""
        fed = [self._fed(encoding) for encoding in encodings]
        if len(encodings) > 1 and self.tokenizer.pad_token is None:  # decoders often have none
            self.tokenizer.pad_token = self.tokenizer.eos_token or self.tokenizer.unk_token
        # One text needs no padding, and asking for it fails on a tokenizer without a pad token (GPT-2's)
        batch = self.tokenizer.pad(
            {name: [e[name] for e in fed] for name in fed[0]},
            padding=len(encodings) > 1,
            padding_side=padding_side,
            return_tensors="pt",
        )
        batch = dict(batch)
        if "attention_mask" not in batch:
            batch["attention_mask"] = torch.ones_like(batch["input_ids"])
        if (padding_side or self.tokenizer.padding_side) == "left" and self._takes_position_ids():
            # Left padding shifts every real token right; give each text its own positions from 0,
            # as generate() does, so absolute-position models see what they see unpadded.
            batch["position_ids"] = (batch["attention_mask"].cumsum(-1) - 1).clamp_min(0)
        return batch

    def _fed(self, encoding: dict) -> dict:
        """The one rule for what a forward is fed, for every command (inspect, heads' batches, generate …):
        the tokenizer's outputs that the model's forward names. So input_ids and attention_mask, and
        token_type_ids to a model that takes them (BERT; GPT-2, which adds them as embeddings), as
        model(**tokenizer(text)) would; never special_tokens_mask, nor what a model would only swallow into
        **kwargs (a Llama given a BERT tokenizer's token_type_ids)."""
        parameters = self._forward_parameters()
        return {name: value for name, value in encoding.items() if name in parameters}

    def _takes_position_ids(self) -> bool:
        return "position_ids" in self._forward_parameters()

    def _forward_parameters(self):
        """The names model.forward takes: inspect.signature once per backend (it is slow, and asked per text)."""
        if "_forward_names" not in self.__dict__:
            self._forward_names = frozenset(inspect.signature(self.model.forward).parameters)
        return self._forward_names

    def _encode(self, text: str, truncate: bool) -> tuple[dict, int | None]:
        """Tokenize one text, checking its length against the model's positions (not the tokenizer's limit)."""
        return self._checked(text, self._tokenize(text), truncate)

    def _encode_batch(self, texts: Sequence[str], truncate: bool) -> list[tuple[dict, int | None]]:
        """_encode of each text, a fast tokenizer called once for the batch (it encodes a list in one call, a
        third of the time of one call per text), without the word ids and offsets that only --words reads."""
        if not getattr(self.tokenizer, "is_fast", False) or len(texts) < 2:
            return [self._encode(text, truncate) for text in texts]
        encoding = self.tokenizer(list(texts), return_special_tokens_mask=True)
        return [
            self._checked(text, {name: values[i] for name, values in encoding.items()}, truncate)
            for i, text in enumerate(texts)
        ]

    def _checked(self, text: str, encoding: dict, truncate: bool) -> tuple[dict, int | None]:
        """_encode's checks of a text's encoding: ids the model embeds, and its length (cut with truncate)."""
        limit = self.info.max_positions
        count = len(encoding["input_ids"])
        vocab = getattr(self.model.config, "vocab_size", None)
        if vocab is not None and count and max(encoding["input_ids"]) >= vocab:
            raise AttnError(
                f"the tokenizer produced id {max(encoding['input_ids'])} but {self.info.name} "
                f"has only {vocab} embeddings",
                "the tokenizer files do not belong to this model",
            )
        if limit is None or count <= limit:
            return encoding, None
        if not truncate:
            raise InputTooLong(
                f"the text {_opening(text)} is {count} tokens but {self.info.name} has {limit} positions",
                f"shorten it, or pass --truncate to keep the first {limit} tokens",
            )
        return self._tokenize(text, truncation=True, max_length=limit), count

    def _tokenize(self, text: str, **cut) -> dict:
        """The tokenizer's encoding as a dict; a fast tokenizer's also with each token's word id ("word_ids")
        and character offsets ("offset_mapping"), for --words. _fed never hands those to the model."""
        fast = getattr(self.tokenizer, "is_fast", False)
        encoding = self.tokenizer(text, return_special_tokens_mask=True, return_offsets_mapping=fast, **cut)
        fields = dict(encoding)
        if fast:
            fields["word_ids"] = encoding.word_ids()
        return fields


class HFPairBackend(HFBackend):
    """An encoder–decoder model (backends/hf_seq2seq.py): three stacks of attention, two token lists. Whatever
    runs the model on one text refuses it; capture_pair and capture_pair_generation run it on a source and
    a target (backends/capabilities.Seq2Seq)."""

    def _one_stack(self) -> None:
        raise UnsupportedModel(
            f"{self.info.name} is an encoder–decoder model ({self.info.architecture}): "
            "this command reads one stack of attention",
            "attn inspect SOURCE --target TARGET shows its encoder, decoder and cross-attention",
        )

    def stack_info(self, stack: str):
        """The ModelInfo of one stack: the encoder's layers and heads, or the decoder's (decoder and cross)."""
        from attn_cli.backends.hf_seq2seq import stack_info

        return stack_info(self.info, self.model.config, stack)

    def capture_pair(self, source: str, target: str, wanted) -> tuple:
        """Teacher-forced on target: source tokens, decoder tokens and a Capture per stack
        (hf_seq2seq.capture_pair)."""
        from attn_cli.backends.hf_seq2seq import capture_pair

        return capture_pair(self, source, target, wanted)

    def capture_pair_generation(self, source: str, wanted, sink, **how) -> tuple:
        """Generate from the source, handing sink(stack, record) each step's decoder and cross captures
        (hf_seq2seq.capture_pair_generation)."""
        from attn_cli.backends.hf_seq2seq import capture_pair_generation

        return capture_pair_generation(self, source, wanted, sink, **how)


@contextlib.contextmanager
def _untied_last_state(config):
    """transformers replaces the last hidden state by last_hidden_state (after the final norm) unless the
    config says tie_last_hidden_states = False: say so for the block, so every state is a layer's output."""
    before = config.__dict__.get("tie_last_hidden_states", _UNSET)
    config.tie_last_hidden_states = False
    try:
        yield
    finally:
        if before is _UNSET:
            del config.tie_last_hidden_states
        else:
            config.tie_last_hidden_states = before


_UNSET = object()


def _opening(text: str, words: int = 6) -> str:
    """The text's first words, quoted, so an error about one text of a corpus says which one."""
    shown = text.split()[:words]
    return repr(" ".join(shown) + (" …" if len(text.split()) > words else ""))


def load_hf_backend(
    name: str,
    directory: Path,
    *,
    device: str,
    dtype: str = "auto",
    allow_pickle: bool = False,
    trust_remote_code: bool = False,
    device_map: str | dict | None = None,
) -> HFBackend:
    """Load model and tokenizer from a local directory, offline; remote code only when asked for.

    device_map ("auto", …) hands placement to accelerate's big-model dispatch; the captured
    Q, K and V are then moved to `device` for analysis, layer by layer.
    """
    import transformers
    from transformers import (
        AutoModel,
        AutoModelForCausalLM,
        AutoModelForMaskedLM,
        AutoModelForSeq2SeqLM,
        AutoModelForSequenceClassification,
        AutoTokenizer,
    )

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    placement: dict = {}
    offload = None
    if device_map is not None:
        if importlib.util.find_spec("accelerate") is None:
            raise AttnError("--device-map needs accelerate", "pip install 'attn-cli[big]' (or pip install accelerate)")
        # Whatever does not fit the devices goes to disk; the folder lives as long as the backend.
        offload = tempfile.TemporaryDirectory(prefix="attn-offload-")
        placement = {"device_map": device_map, "offload_folder": offload.name}
    from attn_cli.backends.hf_files import saved_head

    check_config_file(directory)
    try:
        tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True, trust_remote_code=trust_remote_code)
        head = saved_head(directory)
        if head == "masked" and not _has_masked_lm_class(directory):  # no masked-LM class for it: the base model
            head = None
        model_class = {
            "causal": AutoModelForCausalLM,
            "seq2seq": AutoModelForSeq2SeqLM,
            "classifier": AutoModelForSequenceClassification,
            "masked": AutoModelForMaskedLM,
        }.get(head or "", AutoModel)
        model = load_model(
            model_class.from_pretrained,
            directory,
            local_files_only=True,
            use_safetensors=None if allow_pickle else True,
            dtype=from_pretrained_dtype(dtype),
            trust_remote_code=trust_remote_code,
            **placement,
        )
    except (OSError, ValueError) as error:
        raise ModelNotFound(f"could not load the model in {directory}: {error}") from error
    check_tokenizer(tokenizer, directory)
    model.config.use_cache = False  # one forward over the whole text; no KV cache needed
    model.eval()
    if device_map is None:
        model.to(device)
    lm = model if head in ("causal", "seq2seq") else None
    from attn_cli.backends.hf_seq2seq import is_seq2seq

    kind = HFPairBackend if is_seq2seq(model) else HFBackend
    backend = kind(name, model if head is None else model.base_model, tokenizer, device, lm)
    backend.classifier = model if head == "classifier" else None  # its logits: attn attribute's gradient target
    backend.masked_lm = model if head == "masked" else None  # its logits at [MASK]: attn ablate's masked-loss
    backend.offload_folder = offload
    if head == "causal" and kind is HFBackend and not backend.info.causal:
        # a checkpoint saved with its causal-LM head is a decoder, whatever its attention modules say: Doge's
        # declare no is_causal (its own mask function builds the causal mask the capture then sees)
        backend.info = dataclasses.replace(backend.info, causal=True)
    return backend


def _has_masked_lm_class(directory: Path) -> bool:
    """Whether transformers maps this checkpoint's config to a masked-LM class (its head is then loaded too; a
    config without one loads as the base model, as before masked heads were read)."""
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES

    try:
        kind = AutoConfig.from_pretrained(directory, local_files_only=True).model_type
    except (OSError, ValueError):
        return False
    return kind in MODEL_FOR_MASKED_LM_MAPPING_NAMES


def _unlike_softmax_rows(weights, count: int, heads: int) -> str:
    """ "" where a layer's returned attentions are (B, H, T, T) softmax rows of the config's H heads over the
    text's own tokens: non-negative, each row summing to 1; else how they differ, for the refusal (Longformer's
    banded windows, Reformer's chunks, ConvBERT's halved heads, an unnormalised score are refused, not shown)."""
    if not isinstance(weights, torch.Tensor):
        return f"are not a tensor ({type(weights).__name__})"
    if weights.dim() != 4 or tuple(weights.shape[1:]) != (heads, count, count):
        return f"are {tuple(weights.shape)}, not {heads} heads of {count} × {count} for a {count}-token text"
    sums = weights.float().sum(-1)
    if not bool((weights >= 0).all()) or not bool(((sums - 1).abs() <= 1e-3).all()):
        low, high = float(sums.min()), float(sums.max())
        return f"are not softmax rows (≥ 0, each summing to 1): rows sum to {low:.3g} … {high:.3g}"
    return ""
