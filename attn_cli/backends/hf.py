"""The Hugging Face backend: any transformers model whose attention uses the attention interface."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import torch

from attn_cli.backends.base import Capture, ModelInfo, Token
from attn_cli.backends.capture_hook import LayerRecorder, capturing
from attn_cli.errors import InputTooLong, ModelNotFound, UnsupportedModel

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


class HFBackend:
    def __init__(self, name: str, model, tokenizer, device: str):
        self.model = model
        self.tokenizer = tokenizer
        self.device = device
        self.dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
        self.info = model_info(name, model)

    def capture(
        self, text: str, layers: Sequence[int], *, truncate: bool = False, inject=None, keep_inputs: bool = False
    ) -> Capture:
        encoding, truncated_from = self._encode(text, truncate)
        recorder = LayerRecorder(set(layers), self.model.config._attn_implementation, inject, keep_inputs)
        special = encoding.pop("special_tokens_mask")[0].tolist()
        inputs = {name: tensor.to(self.device) for name, tensor in encoding.items()}
        with capturing(self.model, recorder), torch.inference_mode():
            self.model(**inputs)
        if recorder.calls == 0:
            raise UnsupportedModel(
                f"{type(self.model).__name__} does not route attention through transformers' "
                "attention interface, so attn cannot see its Q, K and V",
                "models of transformers >= 5 with an attn_implementation setting are supported",
            )
        ids = encoding["input_ids"][0].tolist()
        texts = self.tokenizer.convert_ids_to_tokens(ids)
        tokens = [Token(i, texts[i], ids[i], bool(special[i])) for i in range(len(ids))]
        return Capture(tokens, self.info, self.device, self.dtype, recorder.records, truncated_from)

    def _encode(self, text: str, truncate: bool):
        """Tokenize, checking the length against the model's positions (not the tokenizer's limit)."""
        limit = self.info.max_positions
        encoding = self.tokenizer(text, return_tensors="pt", return_special_tokens_mask=True)
        count = encoding["input_ids"].shape[1]
        vocab = getattr(self.model.config, "vocab_size", None)
        if vocab is not None and count and int(encoding["input_ids"].max()) >= vocab:
            raise ModelNotFound(
                f"the tokenizer produced id {int(encoding['input_ids'].max())} but {self.info.name} "
                f"has only {vocab} embeddings",
                "the tokenizer files do not belong to this model",
            )
        if limit is None or count <= limit:
            return encoding, None
        if not truncate:
            raise InputTooLong(
                f"the text is {count} tokens but {self.info.name} has {limit} positions",
                f"shorten it, or pass --truncate to keep the first {limit} tokens",
            )
        encoding = self.tokenizer(
            text, return_tensors="pt", return_special_tokens_mask=True, truncation=True, max_length=limit
        )
        return encoding, count


def load_hf_backend(
    name: str, directory: Path, *, device: str, dtype: str = "auto", allow_pickle: bool = False
) -> HFBackend:
    """Load model and tokenizer from a local directory, offline, without remote code."""
    import transformers
    from transformers import AutoModel, AutoTokenizer

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    try:
        tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
        model = AutoModel.from_pretrained(
            directory,
            local_files_only=True,
            use_safetensors=None if allow_pickle else True,
            dtype="auto" if dtype == "auto" else _DTYPES[dtype],
        )
    except (OSError, ValueError) as error:
        raise ModelNotFound(f"could not load the model in {directory}: {error}") from error
    model.config.use_cache = False  # one forward over the whole text; no KV cache needed
    model.eval().to(device)
    return HFBackend(name, model, tokenizer, device)


def model_info(name: str, model) -> ModelInfo:
    """Dimensions and attention kind from the config and the attention modules."""
    config = model.config
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    causal = any(
        getattr(module, "is_causal", False) for module in model.modules() if hasattr(module, "layer_idx")
    )
    return ModelInfo(
        name=name,
        architecture=config.model_type,
        layers=config.num_hidden_layers,
        heads=heads,
        kv_heads=getattr(config, "num_key_value_heads", None) or heads,
        head_dim=head_dim,
        causal=causal,
        max_positions=getattr(config, "max_position_embeddings", None),
    )
