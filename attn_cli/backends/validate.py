"""Checks that a loaded Hugging Face model is what it claims to be, so attn never reports a number that
was not computed from the user's weights. Every failure is one line and exit 1.

- config.json must be a JSON object with positive sizes. Encoder–decoder models (BART, Marian, T5, …) load:
  their three kinds of attention are kept apart (backends/hf_seq2seq.py).
- Every weight the model needs must come from the checkpoint: weights transformers would initialise at
  random (a config declaring more layers than the file holds) are refused, naming how many and which,
  unless ATTN_ALLOW_MISSING_WEIGHTS=1. A pooler (after the last attention layer) may be missing.
- The tokenizer must have a vocabulary (no tokenizer files → every word would be [UNK]).
- Captured q, k, v (and layer inputs) must be finite: NaN or Inf weights or a float16 overflow are errors.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from attn_cli.plumbing.errors import AttnError, ModelNotFound, UnsupportedModel

ALLOW_MISSING = "ATTN_ALLOW_MISSING_WEIGHTS"
# What attn reads, said by every refusal of a model it cannot (audio, video, vision–language decoders …)
SUPPORTED = (
    "attn supports text models through a tokenizer: encoder-only (BERT …), decoder-only (GPT-2, Llama …) "
    "and encoder–decoder (BART, mBART, Marian, T5), and images through vision transformers (ViT, DeiT, "
    "DINOv2, the CLIP and SigLIP vision towers); not audio, video or vision–language models"
)
# The images attn reads (backends/vision.py): config.json's model_type → the transformers class holding the
# vision tower. A whole CLIP/SigLIP checkpoint (text and vision) is read through its vision tower only.
VISION_TYPES = {
    "vit": "ViTModel",
    "deit": "DeiTModel",
    "dinov2": "Dinov2Model",
    "dinov2_with_registers": "Dinov2WithRegistersModel",
    "clip_vision_model": "CLIPVisionModel",
    "clip": "CLIPVisionModel",
    "siglip_vision_model": "SiglipVisionModel",
    "siglip": "SiglipVisionModel",
}
# images, video, audio, an image's region features (LXMERT), a protein (Evolla)
_OTHER_INPUTS = (
    "pixel_values",
    "pixel_values_videos",
    "input_features",
    "input_values",
    "visual_feats",
    "protein_input_ids",
)
# Document models whose forward will not run without a layout box per token (LayoutLM and LiLT default them to 0)
_NEEDS_BOXES = ("bros",)
_HARMLESS_MISSING = ("pooler.",)  # computed after every attention layer: cannot change what attn reports
# Sizes that must be positive integers when a config gives them (GPT-2 spells them n_head, n_layer, n_embd).
_SIZES = (
    "num_attention_heads",
    "num_hidden_layers",
    "hidden_size",
    "num_key_value_heads",
    "head_dim",
    "vocab_size",
    "max_position_embeddings",
    "n_head",
    "n_layer",
    "n_embd",
    "n_positions",
)


def one_line(text: object) -> str:
    """Transformers' multi-line messages, as one line."""
    return " ".join(str(text).split())


def check_config_file(directory: Path) -> dict:
    """Before transformers reads it: config.json is a JSON object, its sizes positive, of a modality attn
    reads. Returns the config."""
    path = Path(directory) / "config.json"
    try:
        config = json.loads(path.read_bytes())
    except OSError as error:
        raise ModelNotFound(f"cannot read {path}: {error.strerror or error}") from None
    except ValueError as error:  # JSONDecodeError, UnicodeDecodeError
        raise ModelNotFound(f"{path} is not valid JSON: {one_line(error)}") from None
    if not isinstance(config, dict):
        raise ModelNotFound(f"{path} must hold a JSON object, not a {type(config).__name__}")
    for name in _SIZES:
        value = config.get(name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise ModelNotFound(f"{path}: {name} is {value!r}", "it must be a positive integer")
    check_modality(config, path)
    return config


# Model types of modalities attn does not read (yet): each is refused in one line naming what it reads.
_AUDIO = (
    "whisper",
    "wav2vec2",
    "wav2vec2-conformer",
    "wav2vec2-bert",
    "hubert",
    "wavlm",
    "data2vec-audio",
    "unispeech",
    "unispeech-sat",
    "sew",
    "sew-d",
    "speech_to_text",
    "speecht5",
    "seamless_m4t",
    "seamless_m4t_v2",
    "audio-spectrogram-transformer",
    "clap",
    "encodec",
    "musicgen",
    "qwen2_audio",
    "mimi",
    # text to speech and music (their text encoders feed a decoder of audio codes or a vocoder), speech to text
    "dia",
    "vits",
    "fastspeech2_conformer",
    "fastspeech2_conformer_with_hifigan",
    "pocket_tts",
    "gradium_phonon_tts",
    "musicgen_melody",
    "kyutai_speech_to_text",
    "higgs_audio_v2_tokenizer",
)
_VIDEO = ("videomae", "vivit", "timesformer", "x_clip", "vjepa2", "video_llava", "llava_next_video")


def check_modality(config: dict, path: Path) -> None:
    """Audio, video and vision–language models (and image models other than the ViT family) are refused
    in one line naming what attn reads: text models and the vision transformers of backends/vision.py."""
    kind = str(config.get("model_type", ""))
    if kind in VISION_TYPES:
        return
    if kind in _AUDIO or "num_mel_bins" in config or "feat_extract_norm" in config:
        modality = "an audio model"
    elif kind in _VIDEO or "num_frames" in config:
        modality = "a video model"
    elif "vision_config" in config or "image_token_index" in config or "image_token_id" in config:
        modality = "a vision–language model"
    elif "num_channels" in config and "image_size" in config:
        modality = "an image model attn does not read yet"
    else:
        return
    raise UnsupportedModel(f"{kind or path} is {modality}", SUPPORTED)


def load_model(from_pretrained: Callable, directory: Path, modality: str = "text", **options):
    """from_pretrained(directory, **options) with its loading report checked. Errors of a broken
    checkpoint (safetensors header, shapes that do not fit the config, an unreadable pickle) become one
    line; a model with weights the checkpoint lacks is refused (exit 1)."""
    try:
        # Shapes that do not fit are reported in `loading` (and refused below) instead of a multi-line error.
        model, loading = from_pretrained(directory, output_loading_info=True, ignore_mismatched_sizes=True, **options)
    except (OSError, ValueError):
        raise  # the caller's "could not load the model" error
    except Exception as error:
        if isinstance(error, AttnError):
            raise
        raise ModelNotFound(
            f"could not load the model in {directory}: {type(error).__name__}: {_short(one_line(error))}"
        ) from error
    check_config(model, modality)
    check_loading(loading, directory)
    return model


def check_config(model, modality: str = "text") -> None:
    """A text model takes input_ids (an encoder–decoder one also decoder_input_ids, and says it is one); an
    image model (backends/vision.py) pixel_values."""
    import inspect

    config = model.config
    kind = getattr(config, "model_type", None) or type(model).__name__
    parameters = inspect.signature(model.forward).parameters
    # an encoder and a decoder of two texts; Funnel's "decoder" upsamples the encoder's own text (no decoder input)
    two_stacks = (
        isinstance(getattr(model, "encoder", None), torch_module())
        and isinstance(getattr(model, "decoder", None), torch_module())
        and "decoder_input_ids" in parameters
    )
    if two_stacks and not getattr(config, "is_encoder_decoder", False):
        raise UnsupportedModel(
            f"{kind} has an encoder and a decoder but its config says is_encoder_decoder=false",
            "attn would not know which attention is which; fix config.json",
        )
    if modality == "image":
        return
    with_ids = "input_ids" in parameters and (
        not getattr(config, "is_encoder_decoder", False) or "decoder_input_ids" in parameters
    )
    if not with_ids:
        raise UnsupportedModel(f"{kind} ({type(model).__name__}) is not a text model: it takes no token ids", SUPPORTED)
    table = getattr(config, "type_vocab_sizes", None)  # TAPAS: several token-type ids per token, not one
    if isinstance(table, (list, tuple)):
        raise UnsupportedModel(
            f"{kind} reads a question with a table: {len(table)} token-type ids per token (segment, column, row, "
            "ranks …) that its table tokenizer makes, which a plain text does not have",
            SUPPORTED,
        )
    if "shared_kv_states" in parameters:  # Gemma 4's assistants: every layer reuses the target model's keys
        raise UnsupportedModel(
            f"{kind} ({type(model).__name__}) drafts tokens for another model: its attention reads that model's "
            "keys and values (shared_kv_states) and hidden states, which a text alone does not give",
            "inspect the model it drafts for",
        )
    if kind in _NEEDS_BOXES and "bbox" in parameters:
        raise UnsupportedModel(
            f"{kind} ({type(model).__name__}) reads a document: a layout box per token (bbox) from its OCR "
            "processor, which a plain text does not have",
            SUPPORTED,
        )
    other = [name for name in _OTHER_INPUTS if name in parameters]
    if other:  # a vision–language or speech–text model: its text attention would be shown without its input
        raise UnsupportedModel(f"{kind} ({type(model).__name__}) also reads {', '.join(other)}", SUPPORTED)


def torch_module() -> type:
    import torch

    return torch.nn.Module


def check_loading(loading: dict, directory: Path) -> None:
    """Refuse weights the checkpoint lacked (initialised at random) or that did not fit."""
    mismatched = sorted(_shapes(entry) for entry in loading.get("mismatched_keys") or [])
    if mismatched:
        raise ModelNotFound(
            f"{directory}: {len(mismatched)} weight(s) do not fit the config's shapes: {_names(mismatched)}",
            "the config does not belong to these weights",
        )
    missing = sorted(name for name in loading.get("missing_keys") or [] if not name.startswith(_HARMLESS_MISSING))
    if missing and os.environ.get(ALLOW_MISSING, "").strip().lower() not in ("1", "true", "yes", "on"):
        raise ModelNotFound(
            f"{directory}: {len(missing)} weight(s) are missing from the checkpoint and would be random: "
            f"{_names(missing)}",
            f"the config does not match the weights; {ALLOW_MISSING}=1 runs it anyway",
        )


def check_tokenizer(tokenizer, directory: Path) -> None:
    """A tokenizer whose whole vocabulary is its special tokens has no files: every word would be [UNK]."""
    try:
        vocabulary = set(tokenizer.get_vocab().values())
    except Exception:  # a tokenizer that cannot list its vocabulary: nothing to judge
        return
    if not vocabulary - set(tokenizer.all_special_ids):
        raise ModelNotFound(
            f"{directory} has no tokenizer files (vocab.txt, tokenizer.json, …)",
            "every word would become an unknown token; copy the model's tokenizer files there",
        )


def check_finite(captures: list) -> list:
    """Captures whose q, k, v (or layer input) hold NaN or Inf are refused; returns the captures."""
    for capture in captures:
        for record in capture.layers.values():
            check_finite_record(record)
    return captures


def check_finite_record(record, real=None) -> None:
    """One LayerCapture's q, k, v and input must be finite; real (B, T) bool: only those tokens count
    (a padded batch's padding is never looked at)."""
    import torch

    for name in ("q", "k", "v", "inputs"):
        tensor = getattr(record, name, None)
        if tensor is None:
            continue
        # One reduction first, no copies: a finite sum means every value is finite (NaN and ±inf carry
        # through a sum). Only a sum that is not finite (a bad value, or a float32 overflow) looks closer.
        if bool(torch.isfinite(torch.sum(tensor, dtype=torch.float32))):
            continue
        if real is not None:  # (B, heads, T, D) -> the real tokens' (N, heads, D); inputs (B, T, d) -> (N, d)
            tensor = tensor[real] if name == "inputs" else tensor.transpose(1, 2)[real]
        check_finite_tensor(record.layer, name, tensor)


def check_finite_tensor(layer: int, name: str, tensor) -> None:
    """A layer's q, k, v or input (any shape) holding NaN or Inf is refused (exit 1), naming it."""
    import torch

    if not bool(torch.isfinite(tensor).all()):
        raise AttnError(
            f"layer {layer}: {name} holds NaN or infinite values",
            "the weights hold non-finite numbers or the dtype overflowed; try --dtype float32",
        )


def _shapes(entry) -> str:
    """transformers' (name, checkpoint shape, model shape) as "name (file 32×32, config 64×64)"."""
    if not isinstance(entry, (tuple, list)) or len(entry) < 3:
        return str(entry)
    name, saved, wanted = entry[:3]
    return f"{name} (file {'×'.join(map(str, saved))}, config {'×'.join(map(str, wanted))})"


def _names(names: list[str], shown: int = 5) -> str:
    more = len(names) - shown
    return ", ".join(names[:shown]) + (f" (+{more} more)" if more > 0 else "")


def _short(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
