"""--save for an image: the SVG embeds the image (data: PNG) under a heat overlay per head; the HTML page draws
every head over the image and a click on a patch makes it the query, offline."""

from __future__ import annotations

import re

import pytest

from vision_models import halves, planted_left


@pytest.fixture(scope="module")
def planted_report(tmp_path_factory):
    import attn_cli

    directory = planted_left(tmp_path_factory.mktemp("planted-vit"))
    image = halves(tmp_path_factory.mktemp("img") / "halves.png")
    return attn_cli.load(str(directory), device="cpu").inspect_image(image, layers=0)


def test_the_svg_embeds_the_image_and_lights_the_left_half(planted_report):
    from attn_cli.render.image_figures import image_svg

    svg = image_svg(planted_report)
    assert svg.count('href="data:image/png;base64,') == 4  # one picture per head of layer 0, offline
    assert "http" not in svg.replace('xmlns="http://www.w3.org/2000/svg"', "")
    first = svg[svg.index("L0 H0"):svg.index("L0 H1")]  # head 0's 16 patches, row by row
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


def test_the_page_opens_on_the_query_patch(planted_report, tmp_path, offline_page):
    """--save FILE.html --query 1,2: the page starts from that patch, outlined; its button goes back to [CLS]."""
    from conftest import open_page

    from attn_cli.render.image_figures import image_html, image_page_data

    assert image_page_data(planted_report)["query"] is None and image_page_data(planted_report, (1, 2))["query"] == [1, 2]
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
