"""--save for an image: the SVG embeds the image (data: PNG) under a heat overlay per head; the HTML page draws
every head over the image and a click on a patch makes it the query, offline."""

from __future__ import annotations

import re

import pytest
from vision_models import halves, planted_left


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """(the planted ViT's directory, a picture of two halves)."""
    return planted_left(tmp_path_factory.mktemp("planted-vit")), halves(tmp_path_factory.mktemp("img") / "halves.png")


@pytest.fixture(scope="module")
def planted_report(planted):
    import attn_cli

    directory, image = planted
    return attn_cli.load(str(directory), device="cpu").inspect_image(image, layers=0)


def test_save_draws_what_the_terminal_shows_with_its_scale(planted, tmp_path):
    """With token views named (--show weights) the terminal draws heatmaps on --scale's colours; --save drew the
    pictures whatever --show and --scale said. It draws the same views now, on the same scale; without --show,
    the pictures (each spread from its least to its most attended patch, in the terminal as in the file)."""
    from typer.testing import CliRunner

    from attn_cli.cli import app

    directory, image = planted
    common = ["inspect", "--image", str(image), "--model", str(directory), "--layer", "0", "--head", "0"]
    saved = {}
    for name, extra in (("fixed", ["--show", "weights"]), ("head", ["--show", "weights", "--scale", "head"])):
        result = CliRunner().invoke(app, [*common, *extra, "--save", str(tmp_path / f"{name}.svg")])
        assert result.exit_code == 0, result.output
        saved[name] = (tmp_path / f"{name}.svg").read_text()
    assert "data:image/png" not in saved["fixed"] and "data:image/png" not in saved["head"]  # the token views
    assert saved["fixed"] != saved["head"]
    result = CliRunner().invoke(app, [*common, "--save", str(tmp_path / "pictures.svg")])
    assert result.exit_code == 0, result.output
    assert "data:image/png" in (tmp_path / "pictures.svg").read_text()


def test_the_svg_embeds_the_image_and_lights_the_left_half(planted_report):
    from attn_cli.render.image_figures import image_svg

    svg = image_svg(planted_report)
    assert svg.count('href="data:image/png;base64,') == 4  # one picture per head of layer 0, offline
    assert "http" not in svg.replace('xmlns="http://www.w3.org/2000/svg"', "")
    first = svg[svg.index("L0 H0") : svg.index("L0 H1")]  # head 0's 16 patches, row by row
    opacity = [float(value) for value in re.findall(r'fill-opacity="([0-9.]+)"', first)]
    assert len(opacity) == 16
    for index, value in enumerate(opacity):
        assert (value > 0.7) if index % 4 < 2 else (value < 0.01), (index, value)


def test_the_page_draws_offline_and_a_click_makes_a_patch_the_query(planted_report, tmp_path, offline_page):
    from conftest import open_page

    from attn_cli.render.image_figures import image_html

    path = tmp_path / "image.html"
    path.write_text(image_html(planted_report), encoding="utf-8")
    page, requests, errors = offline_page
    open_page(page, path)
    assert "attention from [CLS]" in page.locator("#app p").first.text_content()
    canvas = page.locator("canvas").first
    box = canvas.bounding_box()

    def pixel(x: float, y: float) -> list[int]:  # the first head's canvas, at shares of its size
        return page.evaluate(f"""() => Array.from(document.querySelector("canvas").getContext("2d")
            .getImageData({x} * 224, {y} * 224, 1, 1).data)""")

    left, right = pixel(0.2, 0.5), pixel(0.8, 0.5)
    assert sum(left[:3]) > 3 * sum(right[:3])  # the left half lit, the right dark
    page.mouse.click(box["x"] + box["width"] * 0.9, box["y"] + box["height"] * 0.1)
    assert "attention from r0c3" in page.locator("#app p").first.text_content()
    assert requests == [] and errors == []


def decode(coded: dict, patches: int):
    """coded_rows' base64 back to numbers: the (T + 1, P) weights and the (T + 1, 2) [smallest, largest] per row."""
    import base64

    import numpy as np

    codes = np.frombuffer(base64.b64decode(coded["codes"]), np.uint8).reshape(-1, patches)
    ranges = np.frombuffer(base64.b64decode(coded["ranges"]), "<f4").reshape(-1, 2).astype(np.float64)
    return ranges[:, :1] + codes / 255 * (ranges[:, 1:] - ranges[:, :1]), ranges


@pytest.mark.parametrize("specials", [["[CLS]"], []])
def test_the_page_data_decodes_to_the_weights_within_a_510th_of_each_rows_range(specials):
    """Every query row on the patches, then the patches' mean row (SigLIP's query: no [CLS]): each within
    (largest − smallest) / 510 of the report's weight (+ 1e-7 for the float32 ends); the smallest and the
    largest of each row exactly (code 0 and 255)."""
    from types import SimpleNamespace

    import numpy as np

    from attn_cli.render.image_figures import coded_rows

    rng = np.random.default_rng(0)
    grid = SimpleNamespace(rows=3, cols=5, specials=specials)
    tokens = len(specials) + 15
    weights = rng.dirichlet(np.ones(tokens) * 0.3, size=tokens)  # (T, T), rows sum to 1
    decoded, ranges = decode(coded_rows(grid, weights), 15)
    first = len(specials)
    expected = np.vstack([weights[:, first:], weights[first:, first:].mean(axis=0)])  # (T + 1, P)
    assert decoded.shape == expected.shape == (tokens + 1, 15)
    tolerance = (ranges[:, 1:] - ranges[:, :1]) / 510 + 1e-7
    assert (np.abs(decoded - expected) <= tolerance).all()
    assert np.allclose(decoded.min(axis=1), expected.min(axis=1), atol=1e-7)
    assert np.allclose(decoded.max(axis=1), expected.max(axis=1), atol=1e-7)


def test_a_vit_base_head_takes_a_byte_a_weight_on_the_page():
    """A ViT-base head (197 tokens: [CLS] and 14 × 14 patches) is 198 query rows × 196 patches, a byte each, and
    8 bytes a row for its ends, in base64: 4/3 · 198 · 204 ≈ 53.9 KB (at 4 decimals in JSON it was ≈ 270 KB:
    38.6 MB for the 144 heads). It scales as query rows × (patches + 8): a 7 × 7 grid's head is 51 · 57 of 198 · 204."""
    from types import SimpleNamespace

    import numpy as np

    from attn_cli.render.figures import script_json
    from attn_cli.render.image_figures import coded_rows

    def size(side: int) -> int:
        tokens = 1 + side * side
        weights = np.random.default_rng(0).dirichlet(np.ones(tokens), size=tokens)
        return len(script_json(coded_rows(SimpleNamespace(rows=side, cols=side, specials=["[CLS]"]), weights)))

    base = size(14)
    assert base <= 4 * -(-198 * 196 // 3) + 4 * -(-198 * 8 // 3) + 40  # the two base64 strings and their keys
    assert base < 55_000
    assert size(7) / base == pytest.approx(51 * 57 / (198 * 204), rel=0.03)  # 3 %: the keys and base64 padding


def test_without_cls_the_page_draws_the_patches_mean_row(tmp_path, offline_page):
    """SigLIP has no [CLS]: the page's query is the mean of the patches' rows (the last coded row). Its least
    attended patch is the bare image, its most attended one is tinted."""
    import numpy as np
    from conftest import open_page
    from vision_models import build, noise

    import attn_cli
    from attn_cli.data.image import query_row
    from attn_cli.render.image_figures import image_html

    report = attn_cli.load(str(build("siglip", tmp_path / "siglip")), device="cpu").inspect_image(
        noise(tmp_path / "noise.png"), layers=0, heads=0, full=True
    )
    row, name = query_row(report.image, report.head(0, 0).weights, None)
    assert name == "mean of the patches" and row.shape == (4, 4)
    path = tmp_path / "siglip.html"
    path.write_text(image_html(report), encoding="utf-8")
    page, requests, errors = offline_page
    open_page(page, path)
    assert "attention from the patches' mean" in page.locator("#app p").first.text_content()

    def centre(patch: int, bare: bool) -> list[int]:  # the patch's centre on the head's canvas, or on the bare image
        x, y = (patch % 4) * 56 + 28, (patch // 4) * 56 + 28
        return page.evaluate(f"""() => new Promise((done) => {{
            const canvas = document.querySelector("canvas");
            if (!{str(bare).lower()}) return done(Array.from(canvas.getContext("2d").getImageData({x}, {y}, 1, 1).data));
            const image = new Image(), plain = document.createElement("canvas");
            plain.width = plain.height = 224;
            image.onload = () => {{ plain.getContext("2d").drawImage(image, 0, 0, 224, 224);
                done(Array.from(plain.getContext("2d").getImageData({x}, {y}, 1, 1).data)); }};
            image.src = JSON.parse(document.getElementById("attn-data").textContent).image; }})""")

    least, most = int(np.argmin(row)), int(np.argmax(row))
    assert centre(least, False) == centre(least, True)
    assert centre(most, False) != centre(most, True)


def test_the_page_opens_on_the_query_patch(planted_report, tmp_path, offline_page):
    """--save FILE.html --query 1,2: the page starts from that patch, outlined; its button goes back to [CLS]."""
    from conftest import open_page

    from attn_cli.render.image_figures import image_html, image_page_data

    assert image_page_data(planted_report)["query"] is None and image_page_data(planted_report, (1, 2))["query"] == [
        1,
        2,
    ]
    path = tmp_path / "image.html"
    path.write_text(image_html(planted_report, (1, 2)), encoding="utf-8")
    page, requests, errors = offline_page
    open_page(page, path)
    assert "attention from r1c2" in page.locator("#app p").first.text_content()
    outline = page.evaluate("""() => Array.from(document.querySelector("canvas").getContext("2d")
        .getImageData(2.5 * 56, 1.5 * 56 - 27, 1, 1).data)""")  # the patch's top edge (each patch 56 px)
    assert outline[:3] == [0, 229, 255]
    page.locator("button").first.click()
    assert "attention from [CLS]" in page.locator("#app p").first.text_content()
    assert requests == [] and errors == []
