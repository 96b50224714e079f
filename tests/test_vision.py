"""Vision transformers: image input, token names, the JSON's patch grid, parity with eager output_attentions."""

from __future__ import annotations

import numpy as np
import pytest
from vision_models import build, noise, tiny_configs

ARCHITECTURES = tuple(tiny_configs())
# [CLS] first where the model has one; DeiT's distillation token; DINOv2's registers; SigLIP has none
SPECIALS = {
    "vit": ["[CLS]"],
    "deit": ["[CLS]", "[DIST]"],
    "dinov2": ["[CLS]", "[REG0]", "[REG1]", "[REG2]", "[REG3]"],
    "clip": ["[CLS]"],
    "siglip": [],
}
GRIDS = {"vit": (4, 4), "deit": (4, 4), "dinov2": (4, 4), "clip": (4, 4), "siglip": (4, 4)}


@pytest.fixture(scope="module")
def vision_dirs(tmp_path_factory):
    return {name: build(name, tmp_path_factory.mktemp(f"tiny-{name}")) for name in ARCHITECTURES}


@pytest.fixture(scope="module")
def picture(tmp_path_factory):
    return noise(tmp_path_factory.mktemp("img") / "noise.png")


def eager_attentions(directory, image) -> list[np.ndarray]:
    """transformers' own weights: the model loaded under eager, output_attentions=True. Each (H, T, T)."""
    import json

    import torch
    import transformers
    from transformers import AutoImageProcessor

    from attn_cli.backends.validate import VISION_TYPES

    kind = json.loads((directory / "config.json").read_text())["model_type"]
    model = getattr(transformers, VISION_TYPES[kind]).from_pretrained(directory, attn_implementation="eager").eval()
    pixels = AutoImageProcessor.from_pretrained(directory)(images=image, return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        out = model(pixel_values=pixels, output_attentions=True)
    return [layer[0].numpy() for layer in out.attentions]


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_weights_equal_eager_output_attentions(vision_dirs, picture, name):
    import attn_cli
    from attn_cli.plumbing.images import read_image

    image = read_image(picture)
    model = attn_cli.load(str(vision_dirs[name]), device="cpu")
    assert model.backend.model.config._attn_implementation == "sdpa"  # captured under sdpa, not eager
    report = model.inspect_image(picture)
    expected = eager_attentions(vision_dirs[name], image)
    for layer in report.layers:
        got = np.stack([head.weights for head in layer.heads])
        np.testing.assert_allclose(got, expected[layer.layer], atol=1e-5, rtol=0)
    names = [token.text for token in report.tokens]
    rows, cols = GRIDS[name]
    assert names == SPECIALS[name] + [f"r{r}c{c}" for r in range(rows) for c in range(cols)]


def test_json_carries_the_patch_grid_and_special_tokens(vision_dirs, picture):
    from conftest import cli_json

    document = cli_json("inspect", "--image", str(picture), "--model", str(vision_dirs["dinov2"]), "--layer", "0")
    image = document["image"]
    assert image["grid"] == {"rows": 4, "cols": 4}
    assert image["special_tokens"] == SPECIALS["dinov2"]
    assert image["patch_size"] == 7 and image["size"] == {"height": 28, "width": 28}
    assert document["tokens"][5]["text"] == "r0c0" and document["tokens"][-1]["text"] == "r3c3"
    assert len(document["layers"][0]["heads"][0]["weights"]) == 5 + 16


def test_image_read_from_stdin(vision_dirs, picture):
    import json

    from typer.testing import CliRunner

    from attn_cli.cli import app

    result = CliRunner().invoke(
        app,
        ["inspect", "--image", "-", "--model", str(vision_dirs["vit"]), "--json", "--layer", "0", "--head", "0"],
        input=picture.read_bytes(),
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["image"]["source"] == "-"


def run_cli(*args: str):
    from typer.testing import CliRunner

    from attn_cli.cli import app

    return CliRunner().invoke(app, list(args))


def test_text_on_an_image_model_is_one_clear_error(vision_dirs):
    result = run_cli("inspect", "a cat", "--model", str(vision_dirs["vit"]))
    assert result.exit_code == 1
    assert "vision model (vit): it reads images, not text" in result.stderr
    assert "--image FILE" in result.stderr and "Traceback" not in result.output


def test_image_on_a_text_model_is_one_clear_error(tiny_bert_dir, picture):
    result = run_cli("inspect", "--image", str(picture), "--model", str(tiny_bert_dir))
    assert result.exit_code == 1
    assert "text model (bert): --image needs a vision transformer" in result.stderr
    assert "ViT, DeiT" in result.stderr


def test_text_and_image_together_is_an_error(vision_dirs, picture):
    result = run_cli("inspect", "a cat", "--image", str(picture), "--model", str(vision_dirs["vit"]))
    assert result.exit_code == 2 or result.exit_code == 1
    assert "either" in result.stderr


def test_a_file_that_is_not_an_image_is_one_line(vision_dirs, tmp_path):
    bad = tmp_path / "notes.png"
    bad.write_text("not a picture")
    result = run_cli("inspect", "--image", str(bad), "--model", str(vision_dirs["vit"]))
    assert result.exit_code != 0
    assert "not an image Pillow can read" in result.stderr


def _png_header(path, width: int, height: int):
    """A PNG whose header claims width × height (its pixel data is a few bytes): what a decompression bomb shows."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0")) + chunk(b"IEND", b"")
    )
    return path


@pytest.mark.parametrize("side", [20000, 10000])  # over twice Pillow's limit (it raises), over it (it warns)
@pytest.mark.parametrize("command", ["inspect", "heads"])
def test_an_image_whose_header_claims_too_many_pixels_is_one_line(tmp_path, side, command):
    model = build("vit", tmp_path / "vit")
    bomb = _png_header(tmp_path / "bomb.png", side, side)
    result = run_cli(command, "--image", str(bomb), "--model", str(model))
    assert result.exit_code == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --image"), result.stderr
    assert f"too large: its header claims {side * side:,} pixels, over the limit of 89,478,485" in lines[0]


@pytest.mark.parametrize(
    "config, modality",
    [
        ({"model_type": "whisper", "num_mel_bins": 80}, "an audio model"),
        ({"model_type": "videomae", "num_frames": 16}, "a video model"),
        ({"model_type": "llava", "vision_config": {}, "text_config": {}}, "a vision–language model"),
    ],
)
def test_other_modalities_are_refused_naming_what_is_supported(tmp_path, config, modality):
    import json

    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "model.safetensors").write_bytes(b"")  # refused from the config, before the weights are read
    result = run_cli("inspect", "hello", "--model", str(tmp_path))
    assert result.exit_code == 1
    line = result.stderr.strip()
    assert f"{config['model_type']} is {modality}" in line and "ViT, DeiT, DINOv2" in line and "text models" in line


def test_a_whole_clip_checkpoint_is_read_through_its_vision_tower(tmp_path, picture):
    """openai/clip-… checkpoints hold text and vision: attn reads the vision tower (CLIPVisionModel)."""
    import torch
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel

    import attn_cli
    from attn_cli.plumbing.images import read_image

    torch.manual_seed(1)
    config = CLIPConfig(
        text_config=dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=37),
        vision_config=dict(
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=37,
            image_size=32,
            patch_size=8,
        ),
    )
    CLIPModel(config).save_pretrained(tmp_path)
    CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}).save_pretrained(tmp_path)
    report = attn_cli.load(str(tmp_path), device="cpu").inspect_image(picture)
    assert report.model.architecture == "clip_vision_model" and report.tokens[0].text == "[CLS]"
    expected = eager_attentions(tmp_path, read_image(picture))
    for layer in report.layers:
        np.testing.assert_allclose(np.stack([head.weights for head in layer.heads]), expected[layer.layer], atol=1e-5)
