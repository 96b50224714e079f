"""The terminal picture as a person sees it, at every width from 60 to 250 columns.

Every view is printed into a recording Rich Console of a given width: no line may be longer than
the width, no number may be cut ('1.…'), and in every heatmap mode (numbers, two-character and
one-character shade cells) the brightest cell must be the largest value, with a legend that
matches the scale. Reports come from the bundled MiniLM (loaded once) and the toy.
"""

from __future__ import annotations

import os
import re

import numpy as np
import pytest
from rich.cells import cell_len
from rich.console import Console
from rich.style import Style

from attn_cli.render.grid import HeadsGrid
from attn_cli.render.heatmap import Heatmap, legend
from attn_cli.render.layout import VectorTable
from attn_cli.render.scale import SHADES, CellFormat, Scale, luminance, stat

WIDTHS = (60, 80, 100, 120, 160, 250)
SENTENCE = "Hello, how are you?"
# 34 tokens with [CLS] and [SEP] under MiniLM's tokenizer
LONG = (
    "The quick brown fox jumps over the lazy dog while the small cat sleeps on a warm mat near the old "
    "red barn door, and the birds sing a happy song"
)
SHORT = "The cat sat on the mat while the dog slept by the fire."  # 16 tokens
FIFTY = " ".join(["the quick brown fox jumps over the lazy dog"] * 6)  # 56 tokens
SCREENS = (80, 120, 160, 200)  # terminal widths, each 50 lines tall
CUT = re.compile(r"\d…|…\d|\.…|-…|:…|: …")


@pytest.fixture(scope="module")
def model(minilm_backend):
    from attn_cli.api import Model

    return Model(minilm_backend)  # the session's MiniLM, loaded once for every test file


@pytest.fixture(scope="module")
def reports(model, tmp_path_factory):
    from conftest import save_tiny_gpt2_lm

    import attn_cli

    gpt2_lm = save_tiny_gpt2_lm(
        tmp_path_factory.mktemp("render-gpt2-lm"), n_embd=32, n_layer=1, n_head=4, n_positions=64
    )

    toy = attn_cli.load("toy", device="cpu")
    return {
        "hello": model.inspect(SENTENCE),
        "long": model.inspect(LONG),
        "short": model.inspect(SHORT),
        "fifty": model.inspect(FIFTY),
        "few": model.inspect(SENTENCE, layers="0-1", heads="1-3"),
        "long_one": model.inspect(LONG, layers=0, heads=2),
        "compare": model.compare("我是一个男孩", layers="0-1"),
        "compare_one": model.compare(SENTENCE, layers=0, heads=2, variants=["shared-k", "no-scale"]),
        "steps": toy.steps("I love you", layer=0, head=0),
        "rollout": model.rollout(SENTENCE),
        "diff": model.diff(SENTENCE, "Hello, who are they?"),
        "generate": attn_cli.load(str(gpt2_lm), device="cpu").generate("the cat sat on the", max_new_tokens=4),
        "toy": toy.inspect("I love you"),
    }


def printed(renderable, width: int, colour: bool = False, height: int | None = None) -> list[str]:
    """The text a terminal `width` columns wide (and `height` lines tall, Rich's 25 if None) shows."""
    console = Console(
        width=width,
        height=height,
        record=True,
        force_terminal=colour,
        color_system="truecolor" if colour else None,
        file=open(os.devnull, "w"),
    )
    console.print(renderable)
    return console.export_text().splitlines()


def assert_fits(lines: list[str], width: int) -> None:
    for line in lines:
        assert cell_len(line) <= width, f"{cell_len(line)} > {width}: {line!r}"
        assert not CUT.search(line), f"a cut number: {line!r}"


# -- every view at every width ------------------------------------------------------------------------


def views(reports):
    from attn_cli.render.compare_view import render_compare
    from attn_cli.render.diff_view import render_diff
    from attn_cli.render.generate_view import render_generate
    from attn_cli.render.rollout_view import render_rollout
    from attn_cli.render.steps_view import render_steps
    from attn_cli.render.terminal import Panel, render_report

    every = {Panel(name) for name in ("grid", "overview", "weights", "scores", "symmetry", "stats", "top")}
    return {
        "default": render_report(reports["hello"]),
        "default-long": render_report(reports["long"]),
        "panels": render_report(reports["few"], every),
        "long-panels": render_report(reports["long_one"], {Panel.weights, Panel.scores, Panel.top}),
        "compare": render_compare(reports["compare"]),
        "compare-one": render_compare(reports["compare_one"]),
        "steps": render_steps(reports["steps"]),
        "toy": render_report(reports["toy"]),
        "rollout": render_rollout(reports["rollout"]),
        "diff": render_diff(reports["diff"]),
        "generate": render_generate(reports["generate"]),
    }


@pytest.mark.parametrize("width", WIDTHS)
def test_every_view_fits_every_width(reports, width):
    for name, view in views(reports).items():
        lines = printed(view, width)
        assert lines, name
        assert_fits(lines, width)


@pytest.mark.parametrize("width", WIDTHS)
def test_coloured_default_views_fit(reports, width):
    """With colour the grid may draw half blocks (a character a token): it must still fit."""
    from attn_cli.render.terminal import render_report

    for name in ("hello", "long"):
        assert_fits(printed(render_report(reports[name]), width, colour=True), width)


def test_models_view_fits():
    from attn_cli.backends.catalog import list_models
    from attn_cli.render.models_view import render_models

    catalog = list_models(None)
    for width in WIDTHS:
        assert_fits(printed(render_models(catalog), width), width)


def test_default_view_of_a_short_sentence_fits_one_80_by_50_screen(reports):
    from attn_cli.render.terminal import render_report

    lines = printed(render_report(reports["hello"]), 80)
    assert len(lines) <= 50, "\n".join(lines)
    text = "\n".join(lines)
    assert "Every head" in text and "In detail: layer 0 head 2" in text
    assert "h11" in text and "L5" in text  # the grid is labelled by layer and head


def test_a_34_token_sentence_renders_at_80_columns_with_readable_labels(reports):
    from attn_cli.render.terminal import weights_heatmap

    report = reports["long"]
    assert len(report.tokens) == 34
    tokens = [token.text for token in report.tokens]
    lines = printed(weights_heatmap(report.head(0, 2), tokens, 0), 80)
    assert_fits(lines, 80)
    text = "\n".join(lines)
    assert "do not fit" not in text and "need" not in text.split("keys")[0]  # drawn, not refused
    for token in tokens:  # every key token in full, under the map
        assert f":{token}" in text


# -- the heatmap's modes ------------------------------------------------------------------------------


def cells_of(heatmap: Heatmap, width: int):
    """Render the heatmap and read each cell back: (text, style) per (row, column)."""
    console = Console(width=width, force_terminal=True, color_system="truecolor", file=open("/dev/null", "w"))
    lines = console.render_lines(heatmap, console.options.update_width(width), pad=False)
    rows, cols = heatmap.matrix.shape
    body = [line for line in lines if re.match(r"^\s*\d+ t\d", "".join(s.text for s in line))]
    assert len(body) == rows
    mode = None
    for cell, gap in ((4, 1), (2, 0), (1, 0)):
        if heatmap.width_for(cell, gap) <= width:
            mode = (cell, gap)
            break
    cell, gap = mode
    out = []
    for line in body:
        chars = [(ch, seg.style) for seg in line for ch in seg.text]
        start = heatmap.label_width + 1
        row = []
        for j in range(cols):
            part = chars[start + j * (cell + gap) : start + j * (cell + gap) + cell]
            row.append(("".join(ch for ch, _ in part), part[-1][1] if part else None))
        out.append(row)
    return mode, out


def brightness(text: str, style, numbers: bool) -> float:
    if not numbers and not text.strip():  # no ink: the terminal's own background, the darkest there is
        return 0.0
    colour = style.bgcolor if numbers else style.color
    return luminance(colour.get_truecolor())


@pytest.mark.parametrize("width, expected", [(200, (4, 1)), (60, (2, 0)), (44, (1, 0))])
@pytest.mark.parametrize("kind", ["weights", "scores"])
def test_brighter_always_means_more_in_every_mode(width, expected, kind):
    rng = np.random.default_rng(0)
    if kind == "weights":
        logits = rng.normal(size=(20, 20)) * 2
        matrix = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
        scale = Scale.weights()
    else:
        matrix = rng.normal(size=(20, 20)) * 3
        scale = Scale.scores(matrix)
    tokens = [f"t{i}" for i in range(20)]
    heatmap = Heatmap(matrix, tokens, "test", scale)
    mode, cells = cells_of(heatmap, width)
    assert mode == expected
    numbers = mode[1] == 1
    values = np.abs(matrix) if kind == "scores" else matrix
    shown = np.array([[brightness(text, style, numbers) for text, style in row] for row in cells])
    # the brightest cell is the largest value, and brightness never falls as the value rises
    # (for scores: as |score| rises, on each side of 0; a colour is rounded to 1/255 a channel)
    assert np.unravel_index(np.argmax(shown), shown.shape) == np.unravel_index(np.argmax(values), values.shape)
    for side in [matrix >= 0, matrix < 0] if kind == "scores" else [matrix == matrix]:
        order = np.argsort(values[side])
        assert np.all(np.diff(shown[side][order]) >= -0.005)
    order = np.argsort(values, axis=None)
    if not numbers:  # the ink of the glyphs rises too, and the glyph is the legend's
        ink = np.array([[(" " + SHADES).index(text.ljust(1)[0]) for text, _ in row] for row in cells])
        assert np.all(np.diff(ink.reshape(-1)[order]) >= 0)
        for (text, _), value in zip((c for row in cells for c in row), matrix.reshape(-1)):
            assert text.ljust(mode[0]) == scale.shade(value) * mode[0]  # a line's trailing blanks are trimmed
    if kind == "scores" and numbers:  # one number format for the whole matrix
        decimals = {len(text.strip().split(".")[1]) if "." in text else 0 for row in cells for text, _ in row}
        assert len(decimals) == 1


def test_legend_is_true_and_does_not_wrap():
    for scale in (Scale.weights(), Scale.scores(np.array([[-3.0, 1.5]]))):
        for width in (30, 60, 80):
            text = legend(scale, width)
            assert text.cell_len <= width
            plain = text.plain
            assert plain.split(" ")[1] == scale.low_label and scale.high_label in plain
        glyphs = [span for span in legend(scale, 80).spans if span.style and getattr(span.style, "color", None)]
        lums = [luminance(span.style.color.get_truecolor()) for span in glyphs]
        assert lums == sorted(lums) or scale.diverging
    assert Scale.scores(np.array([[-3.0, 1.5]])).low_label == "-3.00"


def test_weights_use_one_fixed_scale_and_scores_a_diverging_one():
    weak, strong = np.full((2, 2), 0.1), np.eye(2)
    scale = Scale.weights()  # the same for every head: a weight's colour never depends on its neighbours
    assert scale.colour(0.1) == Scale.weights().colour(0.1)
    assert luminance(scale.rgb(1.0)) > luminance(scale.rgb(0.5)) > luminance(scale.rgb(0.0))
    scores = Scale.scores(np.array([[-2.0, 1.0]]))
    assert scores.limit == 2.0 and scores.share(0) == 0 and scores.share(-2) == scores.share(2) == 1
    assert scores.rgb(-2) != scores.rgb(2)  # the sign is the hue
    assert weak.max() < strong.max()


def test_too_narrow_heatmap_says_what_to_do_in_one_line():
    matrix = np.full((70, 70), 1 / 70)
    lines = printed(Heatmap(matrix, [f"tok{i}" for i in range(70)], "big"), 60)
    assert len(lines) <= 2
    assert "pick a window" in lines[0] or "--cols" in " ".join(lines)
    cols = int(re.search(r"--cols 0:(\d+)", " ".join(lines)).group(1))
    # the suggested window really fits: one character a cell is one character
    assert Heatmap(matrix[:, :cols], [f"tok{i}" for i in range(70)], "big").width_for(1, 0) <= 60


def test_key_columns_are_numbered_never_a_lone_digit_without_its_token():
    tokens = [f"word{i}" for i in range(30)]
    lines = printed(Heatmap(np.eye(30), tokens, "t"), 80)
    header = [line for line in lines[1:3]]
    assert "1 1 1" in header[0] and "0 1 2" in header[1]  # tens above units: columns 10, 11, 12 read downwards
    assert all(f"{i}:word{i}" in "\n".join(lines) for i in range(30))


def test_stat_is_one_format():
    assert [stat(v) for v in (0, 5.2e-8, -0.004, 0.1234, 5.104, 11.94, 99.996, 3531, 52000, -0.0)] == [
        "0",
        "5.2e-8",
        "-4.0e-3",
        "0.12",
        "5.10",
        "11.9",
        "100",
        "3531",
        "5.2e4",
        "0",
    ]
    assert CellFormat(1, False).text(-0.04) == "0.0"  # never '-0.0'


@pytest.mark.parametrize("width", SCREENS)
@pytest.mark.parametrize("colour", [False, True])
def test_default_view_of_a_short_sentence_fits_one_screen_at_every_width(reports, width, colour):
    """A wider terminal must not make the grid taller than the screen: the thumbnails shrink to the lines
    the rest of the view leaves."""
    from attn_cli.render.terminal import render_report

    for name in ("hello", "short"):
        lines = printed(render_report(reports[name]), width, colour, height=50)
        assert_fits(lines, width)
        assert len(lines) <= 50, f"{name} at {width}×50: {len(lines)} lines\n" + "\n".join(lines)
        text = "\n".join(lines)
        assert "Every head" in text and "In detail" in text and "keys 0:" in text


@pytest.mark.parametrize("width", SCREENS)
def test_the_grid_of_a_50_token_sentence_fits_one_screen(reports, width):
    """Its detail heatmap cannot fit beside it (56 rows), so the grid gets the screen to itself."""
    from attn_cli.render.terminal import render_report

    lines = printed(render_report(reports["fifty"]), width, height=50)
    assert_fits(lines, width)
    start = next(i for i, line in enumerate(lines) if line.startswith("Every head"))
    end = next(i for i, line in enumerate(lines) if line.startswith("In detail"))
    assert end - start <= 50, "\n".join(lines[start:end])
    assert "L5" in "\n".join(lines[start:end])


def test_grid_max_lines_shrinks_the_thumbnails_not_the_layers(reports):
    report = reports["fifty"]
    layers = [(layer.layer, layer.heads) for layer in report.layers]
    free = printed(HeadsGrid(layers, "grid"), 160)
    grid = HeadsGrid(layers, "grid")
    grid.max_lines = 30
    kept = printed(grid, 160)
    assert len(free) > 30 >= len(kept)
    assert [line[:2] for line in kept if line.startswith("L")] == ["L0", "L1", "L2", "L3", "L4", "L5"]


# -- every head at a glance ----------------------------------------------------------------------------


def test_grid_fits_80_columns_and_shows_the_previous_token_head(reports):
    report = reports["hello"]
    layers = [(layer.layer, layer.heads) for layer in report.layers]
    lines = printed(HeadsGrid(layers, "grid"), 80)
    assert_fits(lines, 80)
    assert len(lines) <= 30
    # MiniLM layer 0 head 2 attends to the previous token: its thumbnail is a diagonal staircase
    column = lines[1].index("h2") - 1  # the thumbnail under 'h2'
    picture = [line[column : column + 4] for line in lines[2:6]]
    assert picture == ["▌   ", "▝▖  ", " ▝▖ ", "  ▝▖"], picture


def test_grid_without_colour_marks_only_real_attention(reports):
    report = reports["hello"]
    layers = [(layer.layer, layer.heads) for layer in report.layers]
    for width in WIDTHS:
        assert_fits(printed(HeadsGrid(layers, "grid"), width), width)
    narrow = re.sub(r"\s+", " ", " ".join(printed(HeadsGrid(layers, "grid"), 30)))
    assert narrow.startswith("all-heads grid: 12 heads need 39 columns") and "widen" in narrow


def _reference_cells(matrix, scale, ink_floor):
    """The grid's 2 × 2 quadrant pictures drawn one character at a time (the drawing before it was vectorised)."""
    from attn_cli.render.glyphs import CONTRAST, QUADRANTS

    def share(value):
        return min(1.0, abs(value) / scale.limit) if scale.diverging else min(1.0, max(0.0, value))

    def level(value):
        step = (2 * scale.limit if scale.diverging else 1.0) / 200
        return round(value / step) * step

    def style(fg, bg):
        return Style(color=scale.colour(level(fg)), bgcolor=scale.colour(level(bg)))

    matrix = np.nan_to_num(np.asarray(matrix, dtype=np.float64), nan=0.0)
    rows, cols = matrix.shape
    padded = np.zeros((rows + rows % 2, cols + cols % 2))
    padded[:rows, :cols] = matrix
    lines = []
    for top in range(0, padded.shape[0], 2):
        line = []
        for left in range(0, padded.shape[1], 2):
            block = [padded[top, left], padded[top, left + 1], padded[top + 1, left], padded[top + 1, left + 1]]
            high, low = max(block), min(block)
            ink = [value >= (high + low) / 2 and share(value) >= ink_floor for value in block]
            inked = sum(ink)
            mean = sum(block) / 4
            if share(high) - share(low) >= CONTRAST and 0 < inked < 4:
                glyph = QUADRANTS[sum(bit for bit, on in zip((8, 4, 2, 1), ink) if on)]
                fg = sum(value for value, on in zip(block, ink) if on) / inked
                bg = sum(value for value, on in zip(block, ink) if not on) / (4 - inked)
                line.append((glyph, style(fg, bg)))
            else:
                line.append(("█" if share(mean) >= max(0.25, ink_floor) else " ", style(mean, mean)))
        lines.append(line)
    return lines


def test_grid_pictures_are_drawn_as_one_character_at_a_time():
    """The vectorised pictures (all heads of a grid at once) are the plain per-character drawing."""
    from conftest import half_blocks

    from attn_cli.render.glyphs import quadrant_cells

    rng = np.random.default_rng(3)
    for trial in range(60):
        rows, cols = (int(n) for n in rng.integers(1, 16, size=2))
        for scale in (Scale.weights(), Scale("scores", 2.5)):
            matrix = (
                rng.normal(size=(rows, cols)) * 2
                if scale.diverging
                else rng.dirichlet(np.ones(cols) * rng.choice([0.1, 1.0]), size=rows)
            )
            if trial % 4 == 0:
                matrix[rng.random(matrix.shape) < 0.2] = np.nan
            for ink_floor in (0.0, 0.2):
                assert quadrant_cells(matrix, scale, ink_floor) == _reference_cells(matrix, scale, ink_floor)
            step = (2 * scale.limit if scale.diverging else 1.0) / 200
            levels = np.round(np.nan_to_num(matrix) / step) * step
            expected = [
                [
                    ("▀", Style(color=scale.colour(a), bgcolor=scale.colour(b)))
                    for a, b in zip(levels[top], levels[top + 1])
                ]
                if top + 1 < rows
                else [("▀", Style(color=scale.colour(a))) for a in levels[top]]
                for top in range(0, rows, 2)
            ]
            assert half_blocks(matrix, scale) == expected


def test_vector_table_never_cuts_a_number():
    rows = np.random.default_rng(1).normal(size=(3, 40)) * 20
    for width in (40, 60, 80, 200):
        lines = printed(VectorTable(rows, ["a", "b", "c"], "Q", (0, 3)), width)
        assert_fits(lines, width)


@pytest.mark.parametrize(
    "flags, formula",
    [
        ([], "weights = softmax(q·kᵀ·0.1768)"),
        (["--variant", "shared-k"], "weights = softmax(k·kᵀ·0.1768)"),  # Q := K: the title says what was multiplied
        (["--variant", "no-scale"], "weights = softmax(q·kᵀ)"),
        (["--variant", "scoring=cosine"], "weights = softmax(q̂·k̂ᵀ)"),
    ],
)
def test_a_counterfactual_heatmap_is_titled_with_its_own_formula(flags, formula):
    from typer.testing import CliRunner

    from attn_cli.cli import app

    result = CliRunner().invoke(
        app,
        ["inspect", "The cat sat", "--layer", "0", "--head", "2", "--show", "weights", *flags],
        env={"COLUMNS": "120"},
    )
    assert result.exit_code == 0, result.output
    assert f"layer 0 · head 2 (kv head 2) · {formula}" in result.stdout


def test_diff_change_heatmap_shows_two_decimals_and_both_tokens(reports):
    """B − A once printed one decimal ('0.0' in every cell while the colours differed) beside A's tokens only."""
    from attn_cli.render.diff_view import render_diff

    report = reports["diff"]
    lines = printed(render_diff(report), 160)
    start = next(i for i, line in enumerate(lines) if line.startswith("B − A"))
    rows = lines[start + 2 : start + 2 + len(report.a.tokens)]
    top = report.heads[0]
    change = report.b.head(top.layer, top.head).weights - report.a.head(top.layer, top.head).weights
    i, j = np.unravel_index(np.argmax(np.abs(change)), change.shape)
    assert CellFormat(2, False, bare=True).text(change[i, j]) in rows[i].split()
    assert any(re.search(r"(^|\s)-?\.\d\d(\s|$)", row) for row in rows)
    assert "how→who" in rows[3] and "you→they" in rows[5]
    assert [CellFormat(2, False, bare=True).text(v) for v in (0.214, -0.0049, -0.13, 0.05)] == [
        ".21",
        "0",
        "-.13",
        ".05",
    ]


def test_the_unknown_token_is_drawn_dim_italic_not_bold_like_a_word():
    """[UNK] is the tokenizer's stand-in, not a word of the text: in key lists, row labels and top keys."""
    from types import SimpleNamespace

    from attn_cli.render.heatmap import row_label
    from attn_cli.render.terminal import keys_text

    def style_of(text, word):
        return next(str(span.style) for span in text.spans if text.plain[span.start : span.end] == word)

    tokens = ["[CLS]", "我", "[UNK]", "[SEP]"]
    keys = Heatmap(np.eye(4), tokens, "test").key_list(80)
    assert style_of(keys, "[UNK]") == "dim italic" and style_of(keys, "我") == "bold"
    assert style_of(row_label(2, "[UNK]"), "[UNK]") == "dim italic"
    top = keys_text([SimpleNamespace(token="[UNK]", weight=0.5), SimpleNamespace(token="我", weight=0.4)])
    assert style_of(top, "[UNK]") == "dim italic" and style_of(top, "我") == "bold"
