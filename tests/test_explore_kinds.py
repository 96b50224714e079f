"""attn explore on an encoder–decoder model (a source, a target, three stacks of attention) and on a vision
transformer (an image, its patches), driven by Textual's pilot on tiny random models built from configs."""

from __future__ import annotations

import re

import numpy as np
import pytest

pytest.importorskip("textual")

from conftest import until  # noqa: E402
from test_explore import run  # noqa: E402
from test_seq2seq import SOURCE, TARGET, tiny_seq2seq  # noqa: E402
from vision_models import halves, planted_left  # noqa: E402

from attn_cli.explore.app import ExploreApp  # noqa: E402
from attn_cli.explore.session import Session  # noqa: E402


@pytest.fixture(scope="module")
def marian(tmp_path_factory):
    import attn_cli

    return attn_cli.load(str(tiny_seq2seq("marian", tmp_path_factory.mktemp("marian"))), device="cpu")


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """The ViT whose layer 0 head 0 attends only to the red left half of `image` (tests/vision_models.py)."""
    import attn_cli

    directory = planted_left(tmp_path_factory.mktemp("planted-vit"))
    return attn_cli.load(str(directory), device="cpu"), halves(tmp_path_factory.mktemp("img") / "halves.png")


def heatmap_axes(detail: str) -> tuple[list[str], list[str]]:
    """The heatmap's row tokens ('▶2 die', ' 3 katze' → die, katze) and its key list ('keys 0:the  1:cat')."""
    lines = detail.splitlines()
    keys_line = next(line for line in lines if line.strip().startswith("keys "))
    keys = [entry.split(":", 1)[1] for entry in keys_line.strip()[len("keys ") :].split()]
    first = next(i for i, line in enumerate(lines) if "key →" in line) + 1
    last = next(i for i, line in enumerate(lines) if line.strip().startswith("keys "))
    rows = [line.lstrip(" ▶").split()[1] for line in lines[first:last]]
    return rows, keys


def plain(renderable) -> str:
    import io

    from rich.console import Console

    console = Console(width=200, file=io.StringIO())
    console.print(renderable)
    return console.file.getvalue()


def texts(units) -> list[str]:
    return [unit.text for unit in units]


def test_a_cross_head_reads_as_target_rows_by_source_columns_and_c_switches_the_stack(marian):
    pair = marian.inspect(SOURCE, target=TARGET, top_k=5)
    source, target = texts(pair.tokens), texts(pair.target_tokens)
    assert len(source) != len(target)  # never square

    async def scenario():
        app = ExploreApp(lambda: marian, SOURCE, model_name="marian", target=TARGET)
        async with app.run_test(size=(160, 50)) as pilot:
            await until(pilot, lambda: app.model is not None)
            assert app.session.stack == "cross"  # where it starts: what an encoder–decoder model adds
            assert app.status_view().plain.startswith(f"cross layer {app.layer} head {app.head} · query 1:")
            assert heatmap_axes(app.query_one("#detail").text()) == (target, source)
            assert f"cross: layer {app.layer} · head {app.head}" in app.query_one("#detail").text()
            assert app.query_one("#grid").text().startswith("All cross heads")
            header = plain(app.query_one("#header").content)
            assert "source tokens" in header and "target tokens" in header and "c: next stack" in header
            # the panel says why a cross head has no self-weight and no symmetry (the report holds null)
            detail = " ".join(app.query_one("#detail").text().split())
            assert (
                f"self-weight not defined: cross-attention: queries are the {len(target)} target tokens and keys "
                f"the {len(source)} source tokens, so no key is the query itself"
            ) in detail
            assert f"Symmetry not defined: {app.report.head(app.layer, app.head).symmetry.reason}" in detail
            keys_line = str(app.query_one("#keys").render())
            assert "c stack" in keys_line and "t target" in keys_line and "v variant" not in keys_line
            shown = {}
            for _ in range(3):
                await pilot.press("c")
                await pilot.pause()
                shown[app.session.stack] = heatmap_axes(app.query_one("#detail").text())
                assert app.status_view().plain.startswith(app.session.stack)
            assert shown == {"encoder": (source, source), "decoder": (target, target), "cross": (target, source)}
            await pilot.press("c", *["right_square_bracket"] * len(source))  # encoder: the query over the source
            assert app.query == len(source) - 1
            await pilot.press("c")  # decoder: the target is shorter, so the query row is its last
            assert app.query == min(len(source), len(target)) - 1
            await pilot.press("v")  # no variants for a pair (the API refuses them): the key is off
            assert app.variant == "baseline"

    run(scenario())


def test_e_edits_the_source_and_t_the_target(marian):
    async def scenario():
        app = ExploreApp(lambda: marian, SOURCE, model_name="marian", target=TARGET)
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: app.model is not None)
            await pilot.press("t")
            await until(pilot, lambda: getattr(app.focused, "id", None) == "sentence")
            assert app.focused.value == TARGET and "a new target" in app.focused.border_title
            app.focused.value = ""
            await pilot.press(*"der hund", "enter")
            await until(pilot, lambda: app.session.target == "der hund")
            expected = marian.inspect(SOURCE, target="der hund", top_k=5)
            assert heatmap_axes(app.query_one("#detail").text()) == (
                texts(expected.target_tokens),
                texts(expected.tokens),
            )
            await pilot.press("e")
            await until(pilot, lambda: getattr(app.focused, "id", None) == "sentence")
            assert app.focused.value == SOURCE and "a new source" in app.focused.border_title
            app.focused.value = ""
            await pilot.press(*"a dog barks", "enter")
            await until(pilot, lambda: app.text == "a dog barks")
            expected = marian.inspect("a dog barks", target="der hund", top_k=5)
            assert heatmap_axes(app.query_one("#detail").text()) == (
                texts(expected.target_tokens),
                texts(expected.tokens),
            )
            await pilot.press("t")
            await until(pilot, lambda: getattr(app.focused, "id", None) == "sentence")
            app.focused.value = " "
            await pilot.press("enter")
            await pilot.pause()
            assert "the target is empty" in str(app.query_one("#message").render()) and app.session.target == "der hund"

    run(scenario())


def test_a_text_model_has_no_stack_key(tmp_path):
    from attn_cli.api import load

    toy = load("toy", heads=2, layers=2)

    async def scenario():
        app = ExploreApp(lambda: toy, "I love you", model_name="toy")
        async with app.run_test(size=(120, 30)) as pilot:
            await until(pilot, lambda: app.model is not None)
            keys_line = str(app.query_one("#keys").render())
            assert "c stack" not in keys_line and "t target" not in keys_line and "v variant" in keys_line
            await pilot.press("t", "c")  # off: nothing to edit, no stack
            assert app.focused is app.query_one("#grid") and app.session.stack is None
            assert app.status_view().plain.startswith("layer ")

    run(scenario())


def test_the_session_switches_stacks_and_keeps_every_stack_drawn(marian):
    session = Session(lambda: marian, SOURCE, model_name="marian", target=TARGET)
    try:
        session.loaded(*session.submit(session.load).result())
    finally:
        session.close()
    assert session.kind == "pair" and session.stacks() == ["encoder", "decoder", "cross"]
    assert session.report.keys is not None and session.variants() == ("baseline",)
    assert [session.next_stack() for _ in range(3)] == ["encoder", "decoder", "cross"]
    reports, heads = session.forget_old_texts()
    look = session.reports[(SOURCE, "baseline")]
    assert {id(look)} | {id(stack) for stack in look.stacks} <= reports
    assert all(id(head) in heads for stack in look.stacks for _, head in stack.heads())


def picture_brightness(strips) -> np.ndarray:
    """The detail view's picture as brightness per cell (the sum of its two pixels' RGB), rows × columns."""
    rows = []
    for strip in strips:
        segments = [segment for segment in strip if segment.text.strip(" ")]
        if segments and all(set(segment.text) == {"▀"} for segment in segments):
            rows.append(
                [
                    sum(segment.style.color.get_truecolor()) + sum(segment.style.bgcolor.get_truecolor())
                    for segment in segments
                    for _ in segment.text
                ]
            )
    return np.array(rows, dtype=float)


@pytest.mark.parametrize("size", [(80, 50), (160, 50)])
def test_the_planted_head_lights_the_left_half_of_the_image(planted, size, monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    model, image = planted

    async def scenario():
        app = ExploreApp(lambda: model, str(image), model_name="planted", image=True)
        async with app.run_test(size=size) as pilot:
            await until(pilot, lambda: app.model is not None)
            assert app.query == 0 and app.report.tokens[0].text == "[CLS]"  # from [CLS] by default
            assert "raw" not in app.session.variants() and "shared-k" in app.session.variants()
            app.select(0, 0)
            await pilot.press("tab")  # the picture (on a compact screen, its own page)
            await pilot.pause()
            detail = app.query_one("#detail")
            assert "layer 0 · head 0 · attention from 0:[CLS]" in detail.text()
            brightness = picture_brightness(detail.strips)
            assert brightness.shape[0] >= 8
            wide = brightness.shape[1]
            left, right = brightness[:, : wide // 2 - 1], brightness[:, wide // 2 + 1 :]
            assert left.min() > 3 * right.max()  # every left cell lit, no right cell
            await pilot.press("down", "down", "right_square_bracket")  # [CLS] → r0c0 → r1c0 → r1c1
            assert app.status_view().plain.startswith("layer 0 head 0 · query 6:r1c1")
            assert "attention from 6:r1c1" in detail.text()
            brightness = picture_brightness(detail.strips)
            assert brightness[:, : wide // 2 - 1].min() > 3 * brightness[:, wide // 2 + 1 :].max()
            await pilot.press("up", "up")
            assert app.query == 0
            assert "e edit" not in str(app.query_one("#keys").render())  # an image has no sentence to edit
            await pilot.press("e")
            assert app.focused is detail

    run(scenario())


def test_an_image_with_text_or_from_stdin_is_refused_before_the_screen_opens(tmp_path):
    from pathlib import Path

    from attn_cli.cli.explore import check_look
    from attn_cli.plumbing.errors import BadInput

    image = halves(tmp_path / "halves.png")
    check_look(None, None, image)
    with pytest.raises(BadInput, match="either a sentence"):
        check_look("a sentence", None, image)
    with pytest.raises(BadInput, match="cannot read the image there"):
        check_look(None, None, Path("-"))
    with pytest.raises(BadInput, match="no such file"):
        check_look(None, None, tmp_path / "missing.png")
    with pytest.raises(BadInput, match="the target is empty"):
        check_look("a source", " ", None)


def outlined_cells(widget) -> set[tuple[int, int]]:
    """(line, cell) of the widget's cells drawn in the query outline's cyan (render/image_view.MARK)."""
    from attn_cli.render.image_view import MARK

    found = set()
    for y, strip in enumerate(widget.strips):
        x = 0
        for segment in strip:
            style = segment.style
            colours = [] if style is None else [c for c in (style.color, style.bgcolor) if c is not None]
            if any(tuple(c.get_truecolor()) == MARK for c in colours):
                found.update((y, x + i) for i in range(segment.cell_length))
            x += segment.cell_length
    return found


def test_the_query_patch_is_outlined_and_g_shows_every_head_small_from_it(planted, monkeypatch):
    """The query patch is outlined in cyan on the picture as `attn inspect --query` outlines it (nothing for [CLS],
    which has no place on the image), on the bottom row, third column; `g` draws every head's picture from the query."""
    monkeypatch.delenv("NO_COLOR", raising=False)
    model, image = planted

    async def scenario():
        app = ExploreApp(lambda: model, str(image), model_name="planted", image=True)
        async with app.run_test(size=(160, 50)) as pilot:
            await until(pilot, lambda: app.model is not None)
            detail = app.query_one("#detail")
            assert not outlined_cells(detail)
            app.set_query(app.report.image.token_of(3, 2))  # the bottom row, third column of 4 × 4
            await pilot.pause()
            picture = [y for y, line in enumerate(detail.text().splitlines()) if "▀" in line]
            cells = [
                x
                for y, line in enumerate(detail.text().splitlines())
                if "▀" in line
                for x, char in enumerate(line)
                if char == "▀"
            ]
            marked = outlined_cells(detail)
            assert marked
            ys, xs = {y for y, _ in marked}, {x for _, x in marked}
            top, height = picture[0], len(picture)
            left, wide = min(cells), max(cells) + 1 - min(cells)
            assert 3 / 4 <= (min(ys) - top) / height and max(ys) < top + height
            assert 2 / 4 <= (min(xs) - left) / wide and (max(xs) + 1 - left) / wide <= 3 / 4 + 1e-9
            app.set_query(0)
            app.select(0, 0)
            await pilot.press("g")
            assert app.metric == "pictures"
            grid = app.query_one("#grid")
            assert grid.text().startswith("Every head from 0:[CLS]")
            assert "▸L0 H0" in grid.text() and "L1 H3" in grid.text()
            await pilot.press("right_square_bracket")
            assert grid.text().startswith("Every head from 1:r0c0")
            await pilot.press("g")
            assert app.metric == "entropy"

    run(scenario())


def test_x_exports_the_whole_pair_as_html_and_json(marian, tmp_path):
    import json

    async def scenario():
        app = ExploreApp(lambda: marian, SOURCE, model_name="marian", target=TARGET, export_dir=tmp_path)
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: app.model is not None)
            await pilot.press("x")
            await until(pilot, lambda: any(tmp_path.glob("*.json")))

    run(scenario())
    document = json.loads(next(tmp_path.glob("*.json")).read_text())
    assert document["target"] == TARGET and {layer["stack"] for layer in document["layers"]} == {
        "encoder",
        "decoder",
        "cross",
    }
    assert len(list(tmp_path.glob("*-head.svg"))) == 1 and len(list(tmp_path.glob("*.html"))) == 1


def test_under_no_color_the_picture_is_shaded_on_the_left(planted, monkeypatch):
    """Textual drops the colours under NO_COLOR: the picture must then be render/image_view's shaded fallback (the
    attention █ on the left half, blank on the right), not '▀' cells that all look alike."""
    monkeypatch.setenv("NO_COLOR", "1")
    model, image = planted

    async def scenario():
        app = ExploreApp(lambda: model, str(image), model_name="planted", image=True)
        async with app.run_test(size=(160, 50)) as pilot:
            await until(pilot, lambda: app.model is not None)
            app.select(0, 0)
            await pilot.pause()
            lines = app.query_one("#detail").text().splitlines()
            assert not any("▀" in line for line in lines)
            shaded = [line[1:] for line in lines if line[1:2] == "█"]  # the image's rows (red left), the gutter cut
            assert len(shaded) >= 8
            for line in shaded:  # the image in shades, two spaces, the attention in shades: both lit on the left
                image_part, attention = re.fullmatch(r"(█+[░▒▓]? +)(█+)", line.rstrip()).groups()
                assert abs(len(attention) * 2 - len(image_part)) <= 3  # the attention's lit half is the image's

    run(scenario())
