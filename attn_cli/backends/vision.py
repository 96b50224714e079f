"""Vision transformers: ViT, DeiT, DINOv2 (with registers), and the CLIP and SigLIP vision towers.

The image goes through the checkpoint's own image processor (offline), the model runs once on its
pixel values, and Q, K and V are captured through transformers' attention interface exactly as for
text models (capture_hook.py; no output_attentions), under the model's own sdpa. Tokens are named
from the patch grid (data/image.py): [CLS], [DIST], [REG0] …, then r{row}c{col}.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from attn_cli.backends.capabilities import CapturesImage, supports
from attn_cli.backends.capture_hook import LayerRecorder, capturing
from attn_cli.backends.hf_info import from_pretrained_dtype, model_info
from attn_cli.backends.validate import VISION_TYPES, check_finite, load_model
from attn_cli.data.capture import Capture, Token, sequence_of
from attn_cli.data.image import PatchGrid
from attn_cli.plumbing.errors import ModelNotFound, UnsupportedModel

SUPPORTED = "ViT, DeiT, DINOv2 (with registers), and the CLIP and SigLIP vision towers"


def load_vision_backend(
    name: str, directory: Path, config: dict, *, device: str, dtype: str, allow_pickle: bool = False
) -> VisionBackend:
    """The model and its image processor from a local directory, offline."""
    import transformers
    from transformers import AutoImageProcessor

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    model_class = getattr(transformers, VISION_TYPES[config["model_type"]])
    try:
        processor = AutoImageProcessor.from_pretrained(directory, local_files_only=True)
        model = load_model(
            model_class.from_pretrained,
            directory,
            modality="image",
            local_files_only=True,
            use_safetensors=None if allow_pickle else True,
            dtype=from_pretrained_dtype(dtype),
        )
    except (OSError, ValueError) as error:
        raise ModelNotFound(
            f"could not load the vision model in {directory}: {error}",
            "a vision checkpoint needs config.json, its weights and preprocessor_config.json",
        ) from error
    model.eval()
    model.to(device)
    return VisionBackend(name, model, processor, device)


class VisionBackend:
    """One loaded vision transformer: capture_image instead of capture_batch."""

    def __init__(self, name: str, model, processor, device: str):
        self.model = model
        self.processor = processor
        self.device = device
        self.dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
        self.info = model_info(name, model)

    def capture_image(self, image, layers: Sequence[int], source: str = "image") -> Capture:
        """Run one PIL image through the processor and the model; keep Q, K, V of `layers`."""
        pixels = self.pixel_values(image)  # (1, 3, H, W) normalised as the model expects
        recorder = LayerRecorder(set(layers), self.model.config._attn_implementation, analysis_device=self.device)
        with capturing(self.model, recorder), torch.inference_mode():
            self.model(pixel_values=pixels.to(self.model.device, self.model.dtype))
        grid = self.patch_grid(pixels, source)
        count = len(grid.specials) + grid.patches
        length = next(iter(recorder.records.values())).q.shape[2] if recorder.records else count
        if length != count:
            raise UnsupportedModel(
                f"{self.info.architecture} ran {length} tokens, but its {grid.rows} × {grid.cols} "
                f"patches and {len(grid.specials)} special tokens make {count}",
                f"attn reads the tokens of {SUPPORTED}",
            )
        real = torch.ones(length, dtype=torch.bool)
        tokens = [Token(index, text, -1, index < len(grid.specials)) for index, text in enumerate(grid.token_names())]
        return check_finite(
            [
                Capture(
                    tokens=tokens,
                    model=self.info,
                    device=self.device,
                    dtype=self.dtype,
                    layers={layer: sequence_of(record, 0, real) for layer, record in recorder.records.items()},
                    image=grid,
                )
            ]
        )[0]

    def intervention_image(self, image, source: str = "image"):
        """One image as a forward takes it (backends/interventions.py's Fed: its pixel values (1, 3, H, W))."""
        from attn_cli.backends.interventions import Fed

        pixels = self.pixel_values(image)
        grid = self.patch_grid(pixels, source)
        tokens = [Token(index, text, -1, index < len(grid.specials)) for index, text in enumerate(grid.token_names())]
        return Fed({"pixel_values": pixels.to(self.model.device, self.model.dtype)}, tokens)

    def edited_forward(self, fed, edit, rows: int = 1, *, grad: bool = False, hidden: bool = True):
        """rows copies of the image with edit(layer, output) in every attention layer: the last hidden states."""
        from attn_cli.backends.interventions import edited_forward

        return edited_forward(self.model, False, fed.repeated(rows), edit, grad)

    def pixel_values(self, image) -> torch.Tensor:
        return self.processor(images=image, return_tensors="pt")["pixel_values"]

    def patch_grid(self, pixels: torch.Tensor, source: str) -> PatchGrid:
        """The grid the model cut `pixels` (1, 3, H, W) into, its own tokens, and the image as it saw it."""
        config = self.model.config
        size = config.patch_size
        height, width = pixels.shape[-2:]
        return PatchGrid(
            source=source,
            rows=height // size,
            cols=width // size,
            patch_size=size,
            specials=special_tokens(self.model),
            pixels=self._seen(pixels[0]),
        )

    def _seen(self, pixels: torch.Tensor) -> np.ndarray:
        """(3, H, W) normalised → (H, W, 3) uint8: the processor's normalisation undone, for drawing."""
        mean = torch.tensor(getattr(self.processor, "image_mean", None) or [0.0] * 3)[:, None, None]
        std = torch.tensor(getattr(self.processor, "image_std", None) or [1.0] * 3)[:, None, None]
        if not getattr(self.processor, "do_normalize", True):
            mean, std = torch.zeros_like(mean), torch.ones_like(std)
        restored = (pixels.float() * std + mean).clamp(0, 1)
        return (restored.permute(1, 2, 0).numpy() * 255).round().astype(np.uint8)

    def _text_refused(self, *args, **kwargs):
        raise UnsupportedModel(
            f"{self.info.name} is a vision model ({self.info.architecture}): it reads images, not text",
            "pass --image FILE (PNG or JPEG; - reads stdin) to attn inspect, rollout, heads or explore",
        )

    capture_batch = _text_refused  # the one method every backend has (backends/base.Backend); it refuses


def special_tokens(model) -> tuple[str, ...]:
    """The model's own tokens before the patches, from its embeddings: [CLS] (ViT, DeiT, DINOv2; CLIP's
    class_embedding), DeiT's distillation token, DINOv2's registers. SigLIP has none."""
    embeddings = getattr(model, "embeddings", None) or getattr(getattr(model, "vision_model", None), "embeddings", None)
    names = []
    if hasattr(embeddings, "cls_token") or hasattr(embeddings, "class_embedding"):
        names.append("[CLS]")
    if hasattr(embeddings, "distillation_token"):
        names.append("[DIST]")
    registers = getattr(embeddings, "register_tokens", None)
    if registers is not None:
        names += [f"[REG{index}]" for index in range(registers.shape[1])]
    return tuple(names)


def check_image_backend(backend) -> None:
    """--image needs a vision transformer: a text model says so in one line."""
    if not supports(backend, CapturesImage):
        raise UnsupportedModel(
            f"{backend.info.name} is a text model ({backend.info.architecture}): --image needs a vision transformer",
            f"supported: {SUPPORTED}; give text to a text model",
        )
