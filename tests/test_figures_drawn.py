"""--save FILE.png and FILE.pdf (the SVG drawn by cairo), their fonts, and --scale head, opened as a reader would:
magic bytes, sizes, a rendered pixel of a known cell (Pillow), the PDF's page and fonts (pypdf)."""

from __future__ import annotations

import io
import json
import re
import sys

import numpy as np
import pytest
from conftest import IN_CI
from typer.testing import CliRunner

from attn_cli.cli import app

try:
    import cairosvg  # noqa: F401
except (ImportError, OSError) as error:  # OSError: cairocffi finds no libcairo on the system
    if IN_CI:  # .ci/run installs cairosvg and libcairo2: without them CI fails, never skips
        raise RuntimeError(f"cairosvg cannot draw here ({error})") from error
    pytest.skip(f"cairosvg cannot draw here ({error}); pip install -e '.[test]' and libcairo2", allow_module_level=True)

runner = CliRunner()
CAUSAL = ("--model", "toy", "-O", "heads=1", "-O", "causal=true", "--layer", "0", "--head", "0", "--show", "weights")
SENTENCE = "the cat sat on the mat"
SEQUENTIAL_BRIGHTEST, SEQUENTIAL_DARKEST = (252, 250, 170), (34, 32, 38)  # render/scale.py's ends


def attn(*args, ok: bool = True):
    result = runner.invoke(app, [str(arg) for arg in args])
    if ok:
        assert result.exit_code == 0, result.output
    return result


def svg_size(svg: str) -> tuple[int, int]:
    width, height = re.search(r'<svg[^>]*width="(\d+)" height="(\d+)"', svg).groups()
    return int(width), int(height)


def cell_box(svg: str, query: str, key: str) -> tuple[float, float, float]:
    """(x, y, size) in SVG px of the heatmap cell titled 'query → key'."""
    for x, y, size, title in re.findall(
        r'<rect x="([\d.]+)" y="([\d.]+)" width="([\d.]+)" height="[\d.]+" '
        r'fill="#[0-9a-f]{6}"><title>([^<]*)</title>',
        svg,
    ):
        if title.startswith(f"{query} → {key}:"):
            return float(x), float(y), float(size)
    raise AssertionError(f"no cell {query} → {key}")


def pixel(png: bytes, x: float, y: float, zoom: float) -> tuple[int, int, int]:
    from PIL import Image

    return Image.open(io.BytesIO(png)).convert("RGB").getpixel((round(x * zoom), round(y * zoom)))


def close(rgb, expected, tolerance: int = 2) -> bool:
    return all(abs(a - b) <= tolerance for a, b in zip(rgb, expected))


@pytest.fixture(scope="module")
def drawn(tmp_path_factory):
    """The same causal toy head saved as SVG, PNG at 192 dpi (2 px per SVG px) and PDF."""
    folder = tmp_path_factory.mktemp("drawn")
    paths = {suffix: folder / f"figure.{suffix}" for suffix in ("svg", "png", "pdf")}
    for suffix, path in paths.items():
        attn("inspect", SENTENCE, *CAUSAL, "--save", path, *(("--dpi", "192") if suffix == "png" else ()))
    return {suffix: path.read_bytes() for suffix, path in paths.items()}


def test_png_opens_at_the_svg_size_times_dpi_over_96(drawn):
    from PIL import Image

    assert drawn["png"][:8] == b"\x89PNG\r\n\x1a\n"
    width, height = svg_size(drawn["svg"].decode())
    assert Image.open(io.BytesIO(drawn["png"])).size == (width * 2, height * 2)


def test_a_weight_of_one_is_the_brightest_colour_and_a_masked_cell_is_blank(drawn):
    svg = drawn["svg"].decode()
    x, y, size = cell_box(svg, "the", "the")  # query 0 of a causal head sees only key 0: weight exactly 1
    assert close(pixel(drawn["png"], x + 2, y + 2, 2), SEQUENTIAL_BRIGHTEST)
    # query 0 → key 1 is masked: no cell drawn, the white page shows (its title names no such cell)
    assert close(pixel(drawn["png"], x + size + 2, y + 2, 2), (255, 255, 255))
    x, y, size = cell_box(svg, "cat", "the")  # query 1 sees keys 0 and 1: a weight under 1, not blank
    assert not close(pixel(drawn["png"], x + 2, y + 2, 2), (255, 255, 255))


def test_pdf_opens_with_the_svg_page_size_and_embedded_fonts(drawn):
    from pypdf import PdfReader

    assert drawn["pdf"][:5] == b"%PDF-"
    reader = PdfReader(io.BytesIO(drawn["pdf"]))
    assert len(reader.pages) == 1
    width, height = svg_size(drawn["svg"].decode())
    box = reader.pages[0].mediabox
    assert (float(box.width), float(box.height)) == pytest.approx((width * 0.75, height * 0.75))  # 96 px = 72 pt
    fonts = reader.pages[0]["/Resources"]["/Font"]
    assert fonts
    for font in fonts.values():
        font = font.get_object()
        descriptor = (font["/DescendantFonts"][0].get_object() if "/DescendantFonts" in font else font).get(
            "/FontDescriptor"
        )
        if descriptor is not None:  # Type 3 fonts carry their glyphs inline
            assert any(key in descriptor.get_object() for key in ("/FontFile", "/FontFile2", "/FontFile3"))
    assert "the cat sat" in reader.pages[0].extract_text()


def test_without_cairosvg_png_is_one_line_naming_the_extra_before_the_model_loads(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "cairosvg", None)  # import cairosvg raises ImportError
    for name in ("figure.png", "figure.pdf"):
        result = attn(
            "inspect", "hello", "--model", str(tmp_path / "no-such-model"), "--save", tmp_path / name, ok=False
        )
        assert result.exit_code == 2
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "attn-cli[figures]" in lines[0] and "cairosvg" in lines[0], result.stderr
        assert not (tmp_path / name).exists()


@pytest.mark.parametrize(
    "args, words",
    [
        (("--save", "x.svg", "--dpi", "300"), "--save x.svg is vector"),
        (
            (
                "--dpi",
                "300",
            ),
            "no --save was given",
        ),
        (("--save", "x.png", "--dpi", "5"), "--dpi 5 is out of range"),
        (("--save", "x.jpg"), "use FILE.png"),
    ],
)
def test_dpi_and_format_mistakes_are_usage_errors(tmp_path, monkeypatch, args, words):
    monkeypatch.chdir(tmp_path)
    result = attn("inspect", "hello", "--model", "toy", *args, ok=False)
    assert result.exit_code == 2 and words in result.stderr, result.stderr


def test_a_png_past_cairos_size_is_refused_in_one_line(tmp_path):
    from attn_cli.plumbing.errors import AttnError
    from attn_cli.render.raster import draw

    with pytest.raises(AttnError, match="lower --dpi"):
        draw(
            '<svg xmlns="http://www.w3.org/2000/svg" width="4000" height="10" viewBox="0 0 4000 10"></svg>',
            ".png",
            1200,
        )


# -- fonts ----------------------------------------------------------------------------------------------

CJK = "中文"


def glyph_png(text: str, family: str | None = None) -> bytes:
    """One label drawn as the figures draw text (through with_fallback_fonts), as PNG bytes."""
    from attn_cli.render.raster import draw

    svg = (
        '<svg xmlns="http://www.w3.org/2000/svg" width="60" height="40" viewBox="0 0 60 40" '
        'font-family="DejaVu Sans, sans-serif"><rect width="100%" height="100%" fill="white"/>'
        f'<text x="5" y="30" font-size="24">{text}</text></svg>'
    )
    return draw(svg, ".png", 96)


def test_cjk_text_is_drawn_with_a_font_that_has_it_or_named_as_missing():
    from attn_cli.render.fonts import covering_family, with_fallback_fonts

    svg = '<svg font-family="DejaVu Sans"><text x="1" y="2">我爱中文 text</text><text>plain</text></svg>'
    fixed, missing = with_fallback_fonts(svg)
    family = covering_family("DejaVu Sans", "".join(sorted(set("我爱中文text"))))
    if family is None:  # no CJK font installed: said, never silently boxes
        assert missing == sorted("我爱中文")
        assert fixed == svg
        return
    assert missing == []
    assert f'<text x="1" y="2" font-family="{family}">我爱中文 text</text>' in fixed
    assert "<text>plain</text>" in fixed  # what DejaVu draws keeps the figure's font
    # not tofu: two different characters draw two different pictures (missing glyphs all draw one box)
    first, second = glyph_png("中")[0], glyph_png("文")[0]
    assert first != second


def test_a_character_no_font_has_gives_one_warning_line(tmp_path, monkeypatch):
    monkeypatch.setattr("attn_cli.render.fonts.covering_family", lambda primary, characters: None)
    result = attn(
        "inspect", f"{CJK} cat", "--model", "toy", "--layer", "0", "--head", "0", "--save", tmp_path / "figure.png"
    )
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1, result.stderr
    assert "中 文" in warnings[0] and "empty boxes" in warnings[0] and "fonts-noto-cjk" in warnings[0]
    assert (tmp_path / "figure.png").read_bytes()[:4] == b"\x89PNG"


# -- --scale head ---------------------------------------------------------------------------------------


def causal_weights(tmp_path) -> np.ndarray:
    """The causal toy head's weights, masked cells NaN (from the JSON: their scores are null)."""
    document = json.loads(attn("inspect", SENTENCE, *CAUSAL[:-2], "--json").stdout)
    head = document["layers"][0]["heads"][0]
    weights = np.array(head["weights"], dtype=float)
    scores = np.array([[np.nan if v is None else v for v in row] for row in head["scores"]], dtype=float)
    return np.where(np.isnan(scores), np.nan, weights)


def by_hand(share: float) -> str:
    """SEQUENTIAL (render/scale.py) at `share`, interpolated by hand: five stops, four equal steps."""
    stops = [(34, 32, 38), (96, 80, 110), (210, 80, 60), (245, 140, 30), (252, 250, 170)]
    position = share * 4
    index = min(int(position), 3)
    part = position - index
    return "#{:02x}{:02x}{:02x}".format(
        *tuple(int(round(a + (b - a) * part)) for a, b in zip(stops[index], stops[index + 1]))
    )


def test_scale_head_colours_each_cell_between_the_heads_own_min_and_max(tmp_path):
    weights = causal_weights(tmp_path)
    low, high = np.nanmin(weights), np.nanmax(weights)
    assert high == pytest.approx(1.0) and low > 0  # a causal row 0 puts 1 on itself; the rest spread
    path = tmp_path / "head.svg"
    result = attn("inspect", SENTENCE, *CAUSAL, "--scale", "head", "--save", path)
    svg = path.read_text()
    tokens = SENTENCE.split()
    value = weights[3, 1]  # 'on' → 'cat'
    expected = by_hand((value - low) / (high - low))
    assert re.search(rf'fill="{expected}"><title>on → cat: ', svg), expected
    fixed = tmp_path / "fixed.svg"
    attn("inspect", SENTENCE, *CAUSAL, "--save", fixed)
    assert re.search(rf'fill="{by_hand(value)}"><title>on → cat: ', fixed.read_text())  # the fixed scale: the weight
    low_label = f"{low:.3f}".rstrip("0").rstrip(".")
    assert "per-head colour scale (min → max)" in svg  # the caption says which scale, the colour bar its range:
    assert f">{low_label}</text>" in svg and ">1</text>" in svg
    legend = [line for line in result.stdout.splitlines() if line.startswith("weight ")]
    assert legend and legend[-1].startswith(f"weight {low_label} ") and " 1 · per-head scale" in legend[-1], legend
    assert tokens[0] in result.stdout


def test_scale_head_grid_says_each_head_has_its_own_scale(tmp_path):
    result = attn("inspect", SENTENCE, "--model", "toy", "--scale", "head", "--show", "grid")
    assert "its min" in result.stdout and "its max" in result.stdout, result.stdout
    fixed = attn("inspect", SENTENCE, "--model", "toy", "--show", "grid")
    assert "its min" not in fixed.stdout and "the same scale for every head" in fixed.stdout


def test_scale_head_page_gives_each_head_its_range(tmp_path):
    path = tmp_path / "page.html"
    attn("inspect", SENTENCE, *CAUSAL, "--scale", "head", "--save", path)
    data = json.loads(
        re.search(r'<script id="attn-data" type="application/json">(.*?)</script>', path.read_text(), re.S).group(1)
    )
    run = data["runs"][0]
    head = run["layers"][0]["heads"][0]
    weights = np.array([[np.nan if v is None else v for v in row] for row in head["m"]])
    assert run["perHead"] is True
    assert head["low"] == pytest.approx(np.nanmin(weights), abs=1e-4) and head["limit"] == pytest.approx(1.0)
    plain = tmp_path / "plain.html"  # the fixed page carries no range of its own
    attn("inspect", SENTENCE, *CAUSAL, "--save", plain)
    assert '"perHead"' not in plain.read_text() and '"low"' not in plain.read_text()


def test_scale_is_one_option_on_every_command_that_draws_weights():
    for command in ("inspect", "compare", "generate", "rollout", "diff", "steps"):
        result = attn(command, "--help")
        assert "--scale" in result.stdout and "--dpi" in result.stdout, command
    assert "--dpi" in attn("heads", "--help").stdout


def test_scale_head_stretches_every_heads_grid_picture_to_the_full_range(tmp_path):
    """The terminal grid and the SVG grid: each head's largest weight drawn in the brightest colour, though no
    weight of the (non-causal) toy reaches 1."""
    from attn_cli.api import load
    from attn_cli.render.grid import HeadsGrid

    report = load("toy").inspect(SENTENCE)
    layers = [(layer.layer, layer.heads) for layer in report.layers]
    heads = [head for _, layer_heads in layers for head in layer_heads]
    assert max(float(np.nanmax(head.weights)) for head in heads) < 0.99
    for head in heads:
        values = HeadsGrid(layers, per_head=True).picture_values(head)
        assert np.nanmax(values) == pytest.approx(1.0) and np.nanmin(values) == pytest.approx(0.0)
        assert np.array_equal(HeadsGrid(layers).picture_values(head), head.weights)  # fixed: the weights
    brightest = 'fill="#fcfaaa"'
    for scale, least in (("head", len(heads)), ("fixed", 0)):
        path = tmp_path / f"{scale}.svg"
        attn("inspect", SENTENCE, "--model", "toy", "--show", "grid", "--scale", scale, "--save", path)
        count = path.read_text().count(brightest)
        assert count >= least if scale == "head" else count == 0, (scale, count)


def test_key_labels_that_fit_their_columns_stand_upright_in_the_svg():
    """A CJK character slanted 50° reads as another glyph: when every key label fits its column (the toy splits CJK
    per character) the labels stand upright, centred on their columns; a sentence with [CLS] stays slanted."""
    import re

    import attn_cli
    from attn_cli.render.figures import svg_figure

    toy = attn_cli.load("toy")
    chinese = svg_figure(toy.inspect("我今天去图书馆看书", layers=0, heads=0))
    assert "rotate(" not in chinese
    for character in "我今天去图书馆看":
        assert re.search(rf'text-anchor="middle" font-weight="normal">{character}</text>', chinese), character
    short = svg_figure(toy.inspect("the cat sat on a mat", layers=0, heads=0))
    assert "rotate(" not in short  # three letters fit a 28 px column too
    long = svg_figure(toy.inspect("the cat sat on internationalisation", layers=0, heads=0))
    assert long.count("rotate(-50") == 5  # one label too wide: every key label slanted, none upright beside them


def test_a_figure_is_the_same_bytes_whatever_was_drawn_before_it():
    """A colour bar's gradient id is numbered within its own document and prefixed with a digest of it: the same
    report draws the same SVG however many figures the process drew before (the gallery's freshness test ran
    into a process-wide counter), and two different figures share no id (both may be inlined in one page)."""
    import re

    import attn_cli
    from attn_cli.render.figures import svg_figure

    toy = attn_cli.load("toy")
    first, other = toy.inspect("the cat sat"), toy.inspect("a dog ran far")
    drawn = svg_figure(first)
    svg_figure(other)
    assert svg_figure(first) == drawn
    ids = lambda text: set(re.findall(r'id="([^"]+)"', text))  # noqa: E731
    assert ids(drawn) and not ids(drawn) & ids(svg_figure(other))
