"""attn explore: the Textual app driven by its pilot, and once in a real terminal (tmux)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("textual")

from conftest import modules_loaded_by, needs_program, patience, until  # noqa: E402

from attn_cli.api import Model, load  # noqa: E402
from attn_cli.explore.app import ExploreApp  # noqa: E402
from attn_cli.plumbing.errors import BadInput  # noqa: E402

TEXT = "The cat sat on the mat."
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def minilm(minilm_backend):
    return Model(minilm_backend)


@pytest.fixture(scope="module")
def toy():
    return load("toy", heads=2, causal="true")


def run(coroutine):
    return asyncio.run(coroutine)


async def submit_sentence(pilot, app, text: str) -> None:
    """`e`, the edit box focused, the old sentence cleared, `text` pasted (one event, as a terminal sends a paste;
    the pilot waits ~50 ms after each key, and test_explore_kinds types key by key), Enter (the run is not awaited)."""
    from textual import events

    await pilot.press("e")
    await until(pilot, lambda: getattr(app.focused, "id", None) == "sentence")
    app.focused.value = ""
    app.post_message(events.Paste(text))
    await until(pilot, lambda: app.focused.value == text)
    await pilot.press("enter")


def panel_numbers(head, query: int) -> list[str]:
    """What the side panel must show for this query row: top keys' weights, entropy, self-weight."""
    return (
        [f"{key.index}:{key.token}" for key in head.top[query]]
        + [f"{key.weight:.2f}" for key in head.top[query]]
        + [f"entropy {head.entropy[query]:.2f}", f"self-weight {head.self_weight[query]:.2f}"]
    )


def test_keys_move_the_selection_and_show_the_apis_numbers(minilm):
    async def scenario():
        app = ExploreApp(lambda: minilm, TEXT, model_name="minilm")
        async with app.run_test(size=(160, 50)) as pilot:
            await until(pilot, lambda: app.model is not None)
            app.select(0, 0)
            await pilot.press("l", "right")
            assert (app.layer, app.head) == (0, 2)
            await pilot.press("j")
            assert (app.layer, app.head) == (1, 2)
            await pilot.press("k", "left", "h")
            assert (app.layer, app.head) == (0, 0)
            await pilot.press("h")  # heads run on across layers, round to the last one
            assert (app.layer, app.head) == (5, 11)
            await pilot.press("down")  # layers stop at the last
            assert (app.layer, app.head) == (5, 11)
            await pilot.press("l", "l", "l")
            assert (app.layer, app.head) == (0, 2)
            # the shown numbers are the API's for that head and query row
            await pilot.press("right_square_bracket", "right_square_bracket")
            await pilot.pause()
            expected = minilm.inspect(TEXT, top_k=5).head(0, 2)
            shown = app.query_one("#detail").text()
            for number in panel_numbers(expected, app.query):
                assert number in shown
            assert "layer 0 · head 2" in shown
            assert app.status_view().plain.startswith(f"layer 0 head 2 · query {app.query}:")
            # ◂ marks the selected head in the grid, on layer 0's first line
            grid = app.query_one("#grid").text().splitlines()
            assert sum(line.count("◂") for line in grid if "◂ the selected head" not in line) == 1  # but the key
            assert "◂" in next(line for line in grid if line.startswith("L0"))
            # up/down in the heatmap move the query row instead of the layer
            await pilot.press("tab")
            assert app.focused is app.query_one("#detail")
            before = app.query
            await pilot.press("down")
            assert (app.query, app.layer) == (before + 1, 0)
            await pilot.press("q")
        assert app.return_code == 0

    run(scenario())


def test_j_and_k_follow_the_focus_like_the_arrows():
    """In the grid j/k change the layer; in the heatmap (after tab) they move the query row, as ↓/↑ do."""
    model = load("toy", heads=2, layers=2)

    async def scenario():
        app = ExploreApp(lambda: model, TEXT, model_name="toy")
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: app.model is not None)
            app.select(0, 0)
            assert app.focused is app.query_one("#grid") and (app.layer, app.query) == (0, 1)
            await pilot.press("j")
            assert (app.layer, app.query) == (1, 1)
            await pilot.press("k")
            assert (app.layer, app.query) == (0, 1)
            await pilot.press("tab")
            assert app.focused is app.query_one("#detail")
            await pilot.press("j", "j")
            assert (app.layer, app.query) == (0, 3)
            await pilot.press("k")
            assert (app.layer, app.query) == (0, 2)
            await pilot.pause()
            assert "▶2 " in app.query_one("#detail").text()  # the marked row moved with it

    run(scenario())


def test_clicks_select_a_head_and_a_query_row(minilm):
    async def scenario():
        app = ExploreApp(lambda: minilm, TEXT, model_name="minilm")
        async with app.run_test(size=(160, 50)) as pilot:
            await until(pilot, lambda: app.model is not None)
            grid = app.grid_renderable
            thumb, lines = grid.geometry
            # layer 1, head 3: its thumbnail's first line, one column in
            await pilot.click("#grid", offset=(grid.label_width + 3 * (thumb + 1) + 1, grid.top + lines))
            assert (app.layer, app.head) == (1, 3)
            line = next(number for number, row in app.detail_rows.items() if row == 4)
            await pilot.click("#detail", offset=(5, line))
            assert app.query == 4

    run(scenario())


def test_edit_runs_the_new_sentence_and_empty_text_is_a_message(minilm):
    async def scenario():
        app = ExploreApp(lambda: minilm, TEXT, model_name="minilm")
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: app.model is not None)
            await submit_sentence(pilot, app, "Dogs bark loudly")
            await until(pilot, lambda: app.text == "Dogs bark loudly")
            assert [token.text for token in app.report.tokens] == ["[CLS]", "dogs", "bark", "loudly", "[SEP]"]
            assert "loudly" in app.query_one("#detail").text()
            await submit_sentence(pilot, app, "   ")
            await pilot.pause()
            assert "the text is empty" in str(app.query_one("#message").render())
            assert app.text == "Dogs bark loudly"

    run(scenario())


@pytest.mark.slow
def test_a_long_session_keeps_only_the_last_sentences(toy):
    """Reports and drawn lines of old sentences are let go (KEEP_TEXTS of them stay); what is shown still works."""
    from attn_cli.explore.session import KEEP_TEXTS

    async def scenario():
        app = ExploreApp(lambda: toy, "one two three", model_name="toy")
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: app.model is not None)
            sentences = [f"{index} here" for index in range(KEEP_TEXTS + 2)]  # short: each is typed key by key
            for sentence in sentences:
                await submit_sentence(pilot, app, sentence)
                await until(pilot, lambda: app.text == sentence)
                before = app.variant
                await pilot.press("v")  # the next variant too: its report is the same sentence's
                await until(pilot, lambda: app.variant != before)
                await pilot.press("l", "j")
            await pilot.pause()
            texts = {text for text, _ in app.reports}
            assert texts == set(sentences[-KEEP_TEXTS:])
            alive = {id(report) for report in app.reports.values()}
            assert all(id(entry[0]) in alive for entry in [*app.headers.values(), *app.grid_lines.values()])
            await pilot.press("h")
            assert "here" in app.query_one("#detail").text()

    run(scenario())


def test_variant_shared_k_is_shown_beside_the_baseline_and_symmetric(minilm):
    async def scenario():
        app = ExploreApp(lambda: minilm, TEXT, model_name="minilm")
        async with app.run_test(size=(160, 50)) as pilot:
            await until(pilot, lambda: app.model is not None)
            app.select(0, 0)
            await pilot.press("v")
            await until(pilot, lambda: app.variant == "shared-k")
            shown = app.query_one("#detail").text()
            assert "baseline: layer 0 · head 0" in shown and "shared-k: layer 0 · head 0" in shown
            statistics = shown[shown.index("\n shared-k\n") :]
            assert ": symmetric" in statistics
            assert app.shown_report().head(0, 0).symmetry.symmetric
            assert "not symmetric" in shown[: shown.index("\n shared-k\n")]
            await pilot.press("s")
            assert "scores = q·kᵀ" in app.query_one("#detail").text()
            await pilot.press("g")
            assert "Mean entropy" in app.query_one("#grid").text()
            await pilot.press("g")
            assert "asymmetry" in app.query_one("#grid").text()

    run(scenario())


def test_export_writes_svg_html_and_json(toy, tmp_path):
    async def scenario():
        app = ExploreApp(lambda: toy, TEXT, model_name="toy", export_dir=tmp_path)
        async with app.run_test(size=(100, 30)) as pilot:
            await until(pilot, lambda: app.model is not None)
            app.select(0, 0)
            await pilot.press("l", "x")
            await pilot.pause()
        names = sorted(path.name for path in tmp_path.iterdir())
        assert [name[name.rindex("-1") + 2 :] for name in names] == ["-head.svg", ".html", ".json", ".svg"]
        screen = next(tmp_path.glob("*1.svg")).read_text(encoding="utf-8")
        assert screen.startswith("<svg") and "attn" in screen
        document = json.loads(next(tmp_path.glob("*.json")).read_text(encoding="utf-8"))
        assert document["command"] == "inspect" and document["text"] == TEXT
        figure = next(tmp_path.glob("*-head.svg")).read_text(encoding="utf-8")
        assert "layer 0 · head 1" in figure
        assert "attn explore · toy" in figure and "attn inspect" not in figure  # explore's head, titled so

    run(scenario())


def test_a_small_terminal_says_so(toy):
    async def scenario():
        app = ExploreApp(lambda: toy, TEXT, model_name="toy")
        async with app.run_test(size=(100, 30)) as pilot:
            await until(pilot, lambda: app.model is not None)
            await pilot.resize_terminal(40, 10)
            await pilot.pause()
            message = app.query_one("#too-small")
            assert message.display and app.screen.has_class("small")
            assert "needs a terminal of at least 60 × 16" in str(message.render())
            assert not app.query_one("#main").region.area  # nothing else is drawn
            await pilot.resize_terminal(100, 30)
            await pilot.pause()
            assert not app.screen.has_class("small")
            await pilot.press("q")
        assert app.return_code == 0

    run(scenario())


def screen_text(app) -> str:
    """The whole screen as the terminal shows it, as plain text (the compositor's lines)."""
    return "\n".join(line.text.rstrip() for line in app.screen._compositor.render_strips())


def plain(screen: str) -> str:
    """The screen's words, each run of spaces, line ends and box sides one space (the help wraps its lines)."""
    return re.sub(r"[\s│]+", " ", screen)


def test_a_screen_shrunk_too_small_and_grown_again_is_drawn_as_before(minilm):
    """80 × 24 → 50 × 12 (too small) → 80 × 24 draws the screen it drew before, with no key pressed: the grid's
    page, scrolled to the selected layer, the grid still focused (the keys line and status say so); 160 × 50
    has room for the grid and the heatmap side by side."""

    async def scenario():
        app = ExploreApp(lambda: minilm, TEXT, model_name="minilm")
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: app.model is not None and app.paints)
            before = screen_text(app)
            assert "tab: heatmap" in before and before.splitlines()[-1].startswith("↑↓ layer")
            for size in [(50, 12), (80, 24), (60, 16), (80, 24), (160, 50), (80, 24)]:
                await pilot.resize_terminal(*size)
                await pilot.pause(0.1)
                shown = screen_text(app)
                if size == (50, 12):
                    assert "needs a terminal of at least 60 × 16" in shown
                elif size == (80, 24):
                    assert shown == before, f"after {size}:\n{shown}"
                elif size == (160, 50):
                    assert "All heads" in shown and "▶1 the" in shown and "tab switches" in shown
            assert app.focused is app.query_one("#grid")

    run(scenario())


def test_the_grids_head_titles_read_alike(minilm):
    """12 heads: in 40 columns the thumbnails are 2 wide, too narrow for 'h10', so no title has the 'h' (it read
    'h8 h9 10 11'); in 160 columns every title has it."""
    from rich.console import Console

    from attn_cli.explore.drawn import Drawn

    report = minilm.inspect(TEXT, top_k=5)
    console = Console(width=200, color_system=None)
    drawn = Drawn(console, lambda: console.options)
    for width, titles in ((40, [str(head) for head in range(12)]), (160, [f"h{head}" for head in range(12)])):
        _, _, lines = drawn.thumbnail_lines(report, width)
        assert "".join(segment.text for segment in lines[1]).split() == titles


def test_a_small_screen_shows_one_page_at_a_time(minilm):
    """80 × 24: side by side the thumbnails were 2 × 2 characters and the query panel, the statistics and a
    variant's heatmap were below the fold with no key to reach them. Now the grid, the heatmap(s) and the
    panel are pages of the whole screen; tab goes to the next (the status line says which), shift+tab back."""

    async def scenario():
        app = ExploreApp(lambda: minilm, TEXT, model_name="minilm")
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: app.model is not None and app.paints)
            shown = screen_text(app)
            assert "All heads" in shown and "tab: heatmap" in shown and "▶" not in shown
            assert "tab: the selected head" in shown  # the first message says so too
            thumb, lines = app.grid_renderable.geometry
            assert thumb >= 4 and lines >= 4
            await pilot.press("tab")
            await pilot.pause(0.1)
            shown = screen_text(app)
            assert app.focused is app.query_one("#detail") and "All heads" not in shown
            assert f"▶{app.query} " in shown and "tab: query panel" in shown
            await pilot.press("tab")
            await pilot.pause(0.1)
            shown = screen_text(app)
            assert "entropy" in shown and "self-weight" in shown and "Symmetry" in shown and "tab: grid" in shown
            await pilot.press("v")
            await until(pilot, lambda: app.variant == "shared-k")
            await pilot.pause(0.1)
            shown = screen_text(app)
            assert "shared-k · query" in shown and "PgDn more" in shown  # the variant's panel after the baseline's
            await pilot.press("pagedown")  # the statistics below the fold
            await pilot.pause(0.1)
            shown = screen_text(app)
            assert ": symmetric" in shown and "PgUp back" in shown
            await pilot.press("shift+tab", *["j"] * 6)
            await pilot.pause(0.1)
            shown = screen_text(app)
            assert "shared-k: layer" in shown  # the variant's heatmap
            assert shown.count(f"▶{app.query} ") == 2  # the query row in view in both heatmaps
            await pilot.press("question_mark")
            await pilot.pause(0.1)
            assert "on pages of their own" in plain(screen_text(app)) and "on the right" not in plain(screen_text(app))
            await pilot.press("escape", "shift+tab")
            await pilot.pause(0.1)
            assert app.focused is app.query_one("#grid") and "All heads" in screen_text(app)

    run(scenario())


def test_help_says_where_the_selected_head_is(minilm):
    async def scenario():
        app = ExploreApp(lambda: minilm, TEXT, model_name="minilm")
        async with app.run_test(size=(160, 50)) as pilot:
            await until(pilot, lambda: app.model is not None and app.paints)
            await pilot.press("question_mark")
            await pilot.pause(0.1)
            assert app.screen.place == "on the right of the grid"  # (the help's lines wrap between the grid's)
            assert "statistics are on the" in screen_text(app)

    run(scenario())


def test_it_starts_on_the_most_focused_head_as_inspect_does(minilm):
    from attn_cli.render.terminal import most_focused

    layer, head = most_focused(minilm.inspect(TEXT, top_k=5).heads())
    assert (layer, head.head) != (0, 0)  # else this test would not tell

    async def scenario():
        app = ExploreApp(lambda: minilm, TEXT, model_name="minilm")
        async with app.run_test(size=(160, 50)) as pilot:
            await until(pilot, lambda: app.model is not None and app.paints)
            assert (app.layer, app.head) == (layer, head.head)
            assert app.status_view().plain.startswith(f"layer {layer} head {head.head} ·")

    run(scenario())


def test_esc_clears_a_stale_error_and_ctrl_c_quits(toy, tmp_path):
    gone = tmp_path / "gone"
    gone.mkdir()

    async def scenario():
        app = ExploreApp(lambda: toy, TEXT, model_name="toy", export_dir=gone)
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: app.model is not None)
            gone.rmdir()
            await pilot.press("x")
            await pilot.pause()
            assert str(app.query_one("#message").render()).startswith("error:")
            await pilot.press("escape")
            await pilot.pause()
            assert str(app.query_one("#message").render()).strip() == ""
            await pilot.press("ctrl+c")
            await pilot.pause()
        return app

    assert run(scenario()).return_code == 0


def test_a_load_failure_ends_the_app_with_the_error():
    def failing():
        raise BadInput("no model named 'nope'")

    async def scenario():
        app = ExploreApp(failing, TEXT, model_name="nope")
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: app.error is not None)
        return app

    app = run(scenario())
    assert isinstance(app.error, BadInput) and app.return_code == 1


def test_the_command_is_listed_and_the_cli_does_not_import_textual():
    assert modules_loaded_by("import attn_cli.cli", ("torch", "transformers", "textual")) == []
    from typer.testing import CliRunner

    from attn_cli.cli import app

    listed = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "120"})  # the entry point: test_cli's test_help
    assert listed.exit_code == 0 and "explore" in listed.stdout


def test_without_a_terminal_it_says_so_before_loading(tmp_path):
    """stdin a pipe, stdout a file (`attn explore < in > out.txt`): one line, exit 2, and no model loaded (the
    model named does not exist: looking for it first would fail with exit 1). It used to wait for keys."""
    out = tmp_path / "out.txt"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    with open(out, "w") as stdout:
        result = subprocess.run(
            [sys.executable, "-m", "attn_cli", "explore", TEXT, "--model", str(tmp_path / "nope")],
            stdin=subprocess.PIPE,
            stdout=stdout,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=patience(120),
        )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: attn explore needs a terminal: stdin, stdout and stderr are not one; run it in a terminal; for "
        "output to a file or a pipe use attn inspect"
    ]
    assert out.read_text() == ""


def test_the_terminal_check_names_each_stream_that_is_not_one():
    from types import SimpleNamespace

    from attn_cli.cli.explore import not_a_terminal

    tty, file = SimpleNamespace(isatty=lambda: True), SimpleNamespace(isatty=lambda: False)
    assert not_a_terminal({"stdin": tty, "stdout": tty, "stderr": tty}) is None
    assert (
        not_a_terminal({"stdin": tty, "stdout": file, "stderr": tty})
        == "attn explore needs a terminal: stdout is not one"
    )
    assert (
        not_a_terminal({"stdin": None, "stdout": file}) == "attn explore needs a terminal: stdin and stdout are not one"
    )


def test_in_a_real_terminal(tmp_path):
    """Start `attn explore` in a 120 × 40 tmux pane (on the most focused head), move two heads, quit; exit 0."""
    needs_program("tmux")
    session = f"attn-explore-test-{os.getpid()}"
    status = tmp_path / "status"
    env = f"env -u COLUMNS -u LINES PYTHONPATH={ROOT} HF_HUB_OFFLINE=1"
    command = (
        f"cd {tmp_path} && {env} {sys.executable} -m attn_cli explore 'The cat sat on the mat.' "
        f"--model toy -O heads=4 -O layers=2; echo $? > {status}"
    )
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "120", "-y", "40", command], check=True)

    def pane() -> str:
        return subprocess.run(["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True).stdout

    def wait_for(text: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + patience(timeout)
        while time.monotonic() < deadline:
            shown = pane()
            if text in shown:
                return shown
            time.sleep(0.2)
        raise AssertionError(f"{text!r} never appeared; the pane shows:\n{pane()}")

    from attn_cli.render.terminal import most_focused

    layer, head = most_focused(load("toy", heads=4, layers=2).inspect(TEXT, top_k=5).heads())  # where it starts
    target, keys = (head.head + 2, ["l", "l"]) if head.head < 2 else (head.head - 2, ["h", "h"])
    try:
        wait_for(f"layer {layer} head {head.head} · query")
        subprocess.run(["tmux", "send-keys", "-t", session, *keys], check=True)
        shown = wait_for(f"layer {layer} head {target} · query")
        assert "attn explore · toy" in shown and "All heads · baseline" in shown and "q quit" in shown
        assert "Traceback" not in shown
        subprocess.run(["tmux", "send-keys", "-t", session, "q"], check=True)
        # polled until the app has quit (its exit status written), however busy the machine: a fixed 20 s
        # failed at load 10; patience() only bounds a hang
        deadline = time.monotonic() + patience(60)
        while not status.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert status.exists(), f"the app did not quit; the pane shows:\n{pane()}"
        assert status.read_text().strip() == "0"
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


def test_a_causal_decoder_with_grouped_query_attention(tiny_llama_dir):
    model = load(str(tiny_llama_dir), device="cpu")

    async def scenario():
        app = ExploreApp(lambda: model, TEXT, model_name=str(tiny_llama_dir))
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: app.model is not None)
            app.select(0, 0)
            await pilot.press("l", "l", "l", "l")
            assert (app.layer, app.head) == (0, 4)
            assert "(kv head 1)" in app.query_one("#detail").text()
            for variant in ("shared-k", "no-scale", "raw", "scoring=cosine", "baseline"):
                await pilot.press("v")
                await until(pilot, lambda: app.variant == variant)
                assert "error" not in str(app.query_one("#message").render())

    run(scenario())


def test_a_long_text_shows_a_window_of_the_selected_head():
    long_model = load("toy", heads=16, layers=2)
    text = " ".join(["word"] * 300)

    async def scenario():
        app = ExploreApp(lambda: long_model, text, model_name="toy")
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: app.model is not None)
            assert app.report.matrices_left_out
            assert "Mean entropy" in app.query_one("#grid").text()
            app.set_query(150)
            await pilot.pause()
            shown = app.query_one("#detail").text()
            assert "rows 134-165, keys " in shown  # the heatmap names its window
            assert "need" not in shown
            assert app.query in app.detail_rows.values()

    run(scenario())


def test_thumbnails_are_the_grids_own_pictures():
    """The app's grid is render's HeadsGrid drawing: the lines it keeps are what Rich renders of HeadsGrid,
    and the pictures drawn together for all heads are each head's own thumbnail."""
    from types import SimpleNamespace

    import numpy as np
    from conftest import half_blocks
    from rich.console import Console

    from attn_cli.explore.view import CachedGrid
    from attn_cli.render.glyphs import cells
    from attn_cli.render.grid import HeadsGrid

    rng = np.random.default_rng(0)
    for _trial in range(12):
        rows, cols = (int(n) for n in rng.integers(1, 24, size=2))
        layers = [
            (layer, [SimpleNamespace(head=head, weights=rng.dirichlet(np.ones(cols), size=rows)) for head in range(4)])
            for layer in range(3)
        ]
        heads = [head for _, row in layers for head in row]
        for colour in ("truecolor", None):
            console = Console(width=200, color_system=colour, force_terminal=True)
            for width in (30, 60, 100, 160):
                options = console.options.update(width=width, height=None, highlight=False)
                grid = CachedGrid(layers, "All heads", mark=(1, 2))
                drawn = HeadsGrid(layers, "All heads", mark=(1, 2))
                drawn.mark_phrase = grid.mark_phrase  # explore's caption: not "below", where it draws it beside
                assert grid.lines(console, options) == console.render_lines(drawn, options, pad=False)
                thumb, half = grid.layout(console, width)
                if thumb < 2:
                    continue
                ink_floor = 0.0 if colour else 0.2
                for head, picture in zip(heads, grid.pictures(thumb, half, ink_floor)):
                    own = (
                        half_blocks(head.weights, grid.scale)
                        if half
                        else grid.thumbnail(head.weights, thumb, ink_floor)
                    )
                    assert [cells(grid.scale, line) for line in picture] == own


def test_the_model_leaves_the_screen_a_core():
    """By default the model runs on torch's threads less one core, which the screen needs while it draws."""
    from attn_cli.explore.session import model_threads

    assert model_threads(None, 2, 2) == 1  # this kind of machine: torch would take both cores
    assert model_threads(None, 8, 16) == 8  # torch's own choice when it already leaves cores free
    assert model_threads(None, 16, 16) == 15
    assert model_threads(None, 4, 1) == model_threads(None, 2, None) == 1
    assert model_threads(3, 2, 2) == 3  # --threads wins


def test_a_new_sentence_is_drawn_by_the_worker_as_the_screen_draws_it(minilm):
    """The model thread renders the new look (grid, heatmap, panel); what the screen then shows is those
    lines, and they equal what the screen renders itself with nothing cached."""

    async def scenario():
        app = ExploreApp(lambda: minilm, TEXT, model_name="minilm")
        async with app.run_test(size=(160, 50)) as pilot:
            await until(pilot, lambda: app.model is not None)
            app.select(0, 0)
            await pilot.press("l", "l")
            await submit_sentence(pilot, app, "Dogs chase the red ball across the green park")
            await until(pilot, lambda: app.text.startswith("Dogs"))
            report = app.report
            _, _, grid_lines = app.grid_lines[(id(report), app.grid_columns)]  # rendered in the worker
            shown_grid = app.query_one("#grid").strips
            assert sum(line is kept for line, kept in zip(shown_grid, grid_lines)) == len(grid_lines) - 1  # but ◂
            shown_detail = app.query_one("#detail").strips
            base = report.head(0, 2)
            assert any(key[0] == id(base) for key in app.maps_lines) and any(key[0] == id(base) for key in app.panels)
            for cache in (app.grid_lines, app.maps_lines, app.panels, app.headers):
                cache.clear()
            app.redraw(header=True)
            await pilot.pause()
            assert app.query_one("#grid").strips == shown_grid
            assert app.query_one("#detail").strips == shown_detail
            assert "chase" in app.query_one("#detail").text()

    run(scenario())


def test_the_edit_box_and_the_keys_line(toy):
    """Esc keeps the old sentence; the keys line lists the keys where the focus is, and a click presses one;
    the collector's freeze after the load is undone when the app ends."""
    import gc

    async def scenario():
        app = ExploreApp(lambda: toy, "I love you", model_name="toy")
        async with app.run_test(size=(120, 30)) as pilot:
            await until(pilot, lambda: app.model is not None)
            assert app.frozen and gc.get_freeze_count() > 0
            keys = app.query_one("#keys")
            assert "e edit" in str(keys.render()) and "q quit" in str(keys.render())
            await pilot.press("e")
            await until(pilot, lambda: getattr(app.focused, "id", None) == "sentence")
            assert "esc keep the old sentence" in str(keys.render()) and "e edit" not in str(keys.render())
            await pilot.press("x", "escape")
            await pilot.pause()
            assert app.text == "I love you" and not app.query_one("#sentence").display
            assert app.focused is app.query_one("#grid")
            start, _, key = next(span for span in keys.keys if span[2] == "s")
            assert not app.scores
            await pilot.click("#keys", offset=(start + 1, 0))
            await until(pilot, lambda: app.scores)
            await pilot.resize_terminal(80, 24)  # 80 columns: the compact line, every key still on it
            await until(pilot, lambda: keys.size.width == 80)
            await pilot.pause()
            line = str(keys.render())
            assert line.startswith("↑↓ layer") and line.rstrip().endswith("q quit") and len(line.rstrip()) <= 80
        assert gc.get_freeze_count() == 0

    run(scenario())


def test_at_120_by_40_the_grid_uses_the_height_and_says_where_the_head_is(minilm):
    """6 layers at 120 × 40: each layer's thumbnails take every line the screen leaves (5 for a 9-token sentence,
    its whole matrix at 2 × 2 cells a character, not 4 with a spare line below the grid), and the grid's caption
    does not say the selected head is "below" when it is drawn on the right."""

    async def scenario():
        app = ExploreApp(lambda: minilm, TEXT, model_name="minilm")
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: app.model is not None and app.report is not None)
            [(_, grid, lines)] = app.drawn.grid_lines.values()
            assert grid.geometry == (5, 5)  # (thumbnail width, lines per layer)
            assert not app.query_one("#body").has_class("stacked")  # the head is beside the grid …
            caption = " ".join(strip.text for strip in lines)
            assert "◂ the selected head" in caption and "below" not in caption  # … and the caption says no other
            left = app.query_one("#left")
            assert left.virtual_size.height <= left.size.height  # the whole grid is on the screen

    run(scenario())


def test_z_removes_the_selected_head_and_says_what_the_model_lost():
    """On the lab decoder, the previous-token head 0.2 removed: the message line is attn ablate's own numbers."""
    lab = load("lab", device="cpu")
    text = "only party company among there world keeps on may business only party company"
    expected = lab.ablate(text, heads=[(0, 2)])

    async def scenario():
        app = ExploreApp(lambda: lab, text, model_name="lab")
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: app.model is not None)
            app.select(0, 2)
            await pilot.press("z")
            await until(pilot, lambda: "removed" in str(app.query_one("#message").render()))
            said = str(app.query_one("#message").render())
            assert said.startswith("head 0.2 removed: mean loss of the text's 13 next tokens")
            assert f"{expected.clean:.4g} → {expected.ablations[0].value:.4g}" in said
            app.select(0, 2)  # the same head: the line stays
            assert "removed" in str(app.query_one("#message").render())
            await pilot.press("right")  # another head: a line about head 0.2 would mislead, so it goes
            await pilot.pause()
            assert "removed" not in str(app.query_one("#message").render())
            await pilot.press("q")

    run(scenario())
