"""The picture: an image's attention drawn where it belongs. A ViT planted to attend only to the red left half
of an image must light the left half, in the JSON and in the terminal's cells (colour and NO_COLOR)."""

from __future__ import annotations

import numpy as np
import pytest
from rich.console import Console
from vision_models import halves, planted_left


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    import attn_cli

    directory = planted_left(tmp_path_factory.mktemp("planted-vit"))
    image = halves(tmp_path_factory.mktemp("img") / "halves.png")
    return directory, image, attn_cli.load(str(directory), device="cpu").inspect_image(image, layers=0)


def test_the_planted_head_attends_only_to_the_left_half_in_the_json(planted):
    from conftest import cli_json

    directory, image, _ = planted
    document = cli_json("inspect", "--image", str(image), "--model", str(directory), "--layer", "0", "--head", "0")
    tokens = [token["text"] for token in document["tokens"]]
    weights = np.array(document["layers"][0]["heads"][0]["weights"], dtype=float)
    cols = document["image"]["grid"]["cols"]
    left = [index for index, name in enumerate(tokens) if name.startswith("r") and int(name.split("c")[1]) < cols // 2]
    assert len(left) == 8
    for query in (0, tokens.index("r3c3"), tokens.index("r0c0")):  # [CLS], a right patch, a left patch
        assert weights[query, left].sum() > 0.999


def cells(picture, width: int, **console):
    """The rendered picture as rows of (character, foreground rgb, background rgb)."""
    render = Console(width=width, force_terminal=True, **console)
    lines, row = [], []
    for segment in render.render(picture, render.options):
        if segment.text == "\n":
            lines.append(row)
            row = []
            continue
        style = segment.style
        colour = lambda c: None if c is None else tuple(c.get_truecolor())  # noqa: E731
        row += [(char, colour(style and style.color), colour(style and style.bgcolor)) for char in segment.text]
    return [line for line in lines if line]


@pytest.mark.parametrize("width", [80, 160])
def test_the_overlay_lights_the_left_half_of_the_picture(planted, width):
    from attn_cli.data.image import query_row
    from attn_cli.render.image_view import Picture

    _, _, report = planted
    row, name = query_row(report.image, report.head(0, 0).weights, None)
    assert name == "[CLS]" and row.shape == (4, 4)
    drawn = cells(Picture(report.image, row, width=width), width, color_system="truecolor")
    assert drawn and all(char == "▀" for line in drawn for char, _, _ in line)
    wide = len(drawn[0])
    brightness = np.array([[sum(top) + sum(bottom) for _, top, bottom in line] for line in drawn], dtype=float)
    left, right = brightness[:, : wide // 2 - 1], brightness[:, wide // 2 + 1 :]
    assert left.min() > 3 * right.max()  # every left cell is lit, no right cell is


def test_without_colour_the_attention_is_shaded_on_the_left(planted):
    from attn_cli.data.image import query_row
    from attn_cli.render.image_view import Picture

    _, _, report = planted
    row, _ = query_row(report.image, report.head(0, 0).weights, None)
    drawn = cells(Picture(report.image, row, width=40), 82, no_color=True, color_system=None)
    text = ["".join(char for char, _, _ in line) for line in drawn]
    assert len(text) == 20  # the image (40 wide, shaded by brightness), two spaces, the attention
    image = [line[:40] for line in text]
    attention = [line[42:] for line in text]
    assert all(line[:19] == "█" * 19 and line[21:].strip() == "" for line in attention), attention
    assert all(line[:19] == "█" * 19 and line[21:].strip() == "" for line in image), image  # red left, dark right


def test_the_terminal_view_draws_the_image_and_every_head(planted):
    from typer.testing import CliRunner

    from attn_cli.cli import app

    directory, image, _ = planted
    result = CliRunner().invoke(
        app, ["inspect", "--image", str(image), "--model", str(directory)], env={"COLUMNS": "100", "NO_COLOR": "1"}
    )
    assert result.exit_code == 0, result.output
    out = " ".join(result.stdout.split())  # wrapped at 100 columns
    assert "4 × 4 patches of 8 px" in out and "attention from [CLS]" in out
    assert "L0 H0" in out and "L1 H3" in out  # every head as a small picture
    assert result.stdout.startswith("attn inspect · ")  # titled as every other view, not "inspect ·"


def test_query_picks_a_patch_and_off_the_grid_is_an_error(planted):
    from typer.testing import CliRunner

    from attn_cli.cli import app

    directory, image, _ = planted
    result = CliRunner().invoke(
        app,
        ["inspect", "--image", str(image), "--model", str(directory), "--layer", "0", "--head", "0", "--query", "3,3"],
        env={"COLUMNS": "80"},
    )
    assert result.exit_code == 0, result.output
    assert "attention from r3c3" in result.stdout
    result = CliRunner().invoke(app, ["inspect", "--image", str(image), "--model", str(directory), "--query", "9,0"])
    assert result.exit_code == 2 and "outside the 4 × 4 patch grid" in result.stderr


def numpy_rollout(attentions: list[np.ndarray]) -> np.ndarray:
    """Abnar & Zuidema from scratch: each layer's heads averaged, half identity, rows renormalised, multiplied."""
    result = np.eye(attentions[0].shape[-1])
    for layer in attentions:
        mixed = 0.5 * layer.mean(axis=0) + 0.5 * np.eye(layer.shape[-1])
        result = (mixed / mixed.sum(axis=-1, keepdims=True)) @ result
    return result


def test_rollout_from_cls_over_the_patches_equals_a_numpy_recomputation(tmp_path_factory):
    from test_vision import eager_attentions
    from vision_models import build, noise

    import attn_cli
    from attn_cli.plumbing.images import read_image

    directory = build("dinov2", tmp_path_factory.mktemp("rollout-dinov2"), seed=3)
    image = noise(tmp_path_factory.mktemp("img") / "noise.png", seed=3)
    report = attn_cli.load(str(directory), device="cpu").rollout(image=image)
    expected = numpy_rollout([layer.astype(np.float64) for layer in eager_attentions(directory, read_image(image))])
    np.testing.assert_allclose(report.matrix, expected, atol=1e-5)
    assert report.image.rows == 4 and report.to_json_dict()["image"]["special_tokens"][0] == "[CLS]"


def test_rollout_of_an_image_in_the_terminal(planted):
    from typer.testing import CliRunner

    from attn_cli.cli import app

    directory, image, _ = planted
    result = CliRunner().invoke(
        app, ["rollout", "--image", str(image), "--model", str(directory)], env={"COLUMNS": "80", "NO_COLOR": "1"}
    )
    assert result.exit_code == 0, result.output
    assert "rollout from [CLS] over layers 0-1 (mean of the heads)" in " ".join(result.stdout.split())
    assert result.stdout.startswith("attn rollout · ")


def test_the_terminal_keeps_whole_matrices_past_the_cell_limit(planted, monkeypatch):
    """The picture needs every head's query row: a run past the cell limit (ViT-base: 144 heads × 197²) still draws."""
    import dataclasses

    from typer.testing import CliRunner

    from attn_cli.cli import app
    from attn_cli.data.selection import Analysis

    directory, image, _ = planted
    original = Analysis.defaults
    monkeypatch.setattr(
        Analysis, "defaults", staticmethod(lambda **given: dataclasses.replace(original(**given), cell_limit=10))
    )
    result = CliRunner().invoke(
        app, ["inspect", "--image", str(image), "--model", str(directory)], env={"COLUMNS": "100", "NO_COLOR": "1"}
    )
    assert result.exit_code == 0, result.output
    assert "left out" not in result.stdout and "attention from [CLS]" in " ".join(result.stdout.split())


@pytest.mark.parametrize("width", [80, 160])
def test_the_query_patch_is_outlined_in_colour(planted, width):
    """--query r,c: the border cells of that patch's place turn the outline's cyan, and only there; without a
    query (from [CLS], not a patch) nothing is cyan."""
    from attn_cli.data.image import query_row
    from attn_cli.render.image_view import MARK, Picture

    _, _, report = planted
    row, _ = query_row(report.image, report.head(0, 0).weights, (1, 2))
    plain = cells(Picture(report.image, row, width=width), width, color_system="truecolor")
    drawn = cells(Picture(report.image, row, width=width, query=(1, 2)), width, color_system="truecolor")
    lines, wide = len(drawn), len(drawn[0])  # 4 × 4 patches: patch (1, 2) is lines/4 … lines/2, columns wide/2 …
    marked = {
        (y, x) for y, line in enumerate(drawn) for x, (_, top, bottom) in enumerate(line) if MARK in (top, bottom)
    }
    assert marked and not any(MARK in (top, bottom) for line in plain for _, top, bottom in line)
    ys, xs = {y for y, _ in marked}, {x for _, x in marked}
    assert (min(ys), max(ys)) == (lines // 4, lines // 2 - 1) and (min(xs), max(xs)) == (wide // 2, 3 * wide // 4 - 1)
    assert (lines // 4 + 1, wide // 2 + 2) not in marked  # an outline: the patch's inside keeps its picture
    assert drawn[lines // 4 + 1][wide // 2 + 2] == plain[lines // 4 + 1][wide // 2 + 2]


def test_without_colour_the_query_patch_is_outlined_in_ascii(planted):
    from attn_cli.data.image import query_row
    from attn_cli.render.image_view import Picture

    _, _, report = planted
    row, _ = query_row(report.image, report.head(0, 0).weights, (1, 2))
    drawn = cells(Picture(report.image, row, width=40, query=(1, 2)), 82, no_color=True, color_system=None)
    text = ["".join(char for char, _, _ in line) for line in drawn]
    for picture in ([line[:40] for line in text], [line[42:] for line in text]):  # the image and the attention
        assert picture[5][20:30] == "+--------+" and picture[9][20:30] == "+--------+"  # patch 1, 2: lines 5-9
        assert all(line[20] == line[29] == "|" for line in picture[6:9])
        assert "+" not in "".join(picture[:5] + picture[10:])
    small = cells(
        Picture(report.image, row, width=8, query=(1, 2), with_image=False), 8, no_color=True, color_system=None
    )
    assert ["".join(char for char, _, _ in line)[4:6] for line in small][1] == "++"  # a patch of 2 cells: filled


def test_the_svg_outlines_the_query_patch(planted):
    from attn_cli.render.image_figures import image_svg

    _, _, report = planted
    assert "#00e5ff" not in image_svg(report)
    assert image_svg(report, (1, 2)).count('stroke="#00e5ff"') == len(report.heads())
