"""attn explore without a screen: the session's state (explore/session.py), the layout arithmetic
(explore/layout.py) and the drawn lines (explore/drawn.py), driven with plain pytest — no Textual app."""

from __future__ import annotations

import pytest
from conftest import modules_loaded_by

from attn_cli.api import load
from attn_cli.explore import layout
from attn_cli.explore.session import KEEP_TEXTS, Session

TEXT = "The cat sat on the mat."


def test_the_state_and_the_layout_do_not_import_textual():
    statement = "import attn_cli.explore.session, attn_cli.explore.layout, attn_cli.explore.drawn"
    assert modules_loaded_by(statement, ("textual",)) == []


@pytest.fixture(scope="module")
def toy():
    return load("toy", heads=4, layers=2)


def loaded_session(model, text: str = TEXT) -> Session:
    session = Session(lambda: model, text, model_name="toy")
    try:
        session.loaded(*session.submit(session.load).result())
    finally:
        session.close()  # the freeze after the load is undone; the state stays
    return session


def test_load_runs_the_first_sentence_on_the_model_thread(toy):
    session = loaded_session(toy)
    assert session.model is toy and session.report.text == TEXT and session.query == 1
    assert session.threads >= 1 and not session.frozen


def test_the_first_look_is_on_the_most_focused_head_as_in_inspect(minilm_backend):
    """`attn inspect` shows the most focused head (lowest mean entropy) first; so does the session (it started
    on layer 0 head 0)."""
    from attn_cli.api import Model
    from attn_cli.render.terminal import most_focused

    session = loaded_session(Model(minilm_backend))
    layer, head = most_focused(session.report.heads())
    assert (session.layer, session.head) == (layer, head.head) != (0, 0)


def test_a_load_failure_is_an_attn_error():
    from attn_cli.plumbing.errors import AttnError

    def failing():
        raise ValueError("broken weights")

    session = Session(failing, TEXT)
    with pytest.raises(AttnError, match="ValueError: broken weights"):
        session.submit(session.load).result()
    session.close()


def test_heads_run_on_across_layers_and_layers_stop_at_the_ends(toy):
    session = loaded_session(toy)
    session.layer, session.head = 0, 0
    assert session.head_after(1) == (0, 1)
    assert session.head_after(-1) == (1, 3)  # round to the last head
    session.layer, session.head = 0, 3
    assert session.head_after(1) == (1, 0)
    assert session.layer_after(1) == (1, 3) and session.layer_after(-1) == (0, 3)
    session.layer = 1
    assert session.layer_after(5) == (1, 3)
    assert session.neighbours() == [(0, 0), (1, 2), (0, 3)]  # next (round), previous, the layer above
    session.set_query(99)
    assert session.query == len(session.report.tokens) - 1
    session.set_query(-3)
    assert session.query == 0


def test_a_variant_runs_beside_the_baseline_and_a_bad_text_keeps_the_old_one(toy):
    session = loaded_session(toy)
    session.layer, session.head = 0, 0
    variant = session.next_variant()
    assert variant == "shared-k" and not session.cached(TEXT, variant)
    assert session.run_looks(TEXT, variant) == (True, "")
    assert session.cached(TEXT, variant)
    assert not session.show(TEXT, variant, "")  # not a new text
    assert session.shown_report().variant == "shared-k" and session.shown_report() is not session.report
    base, other, error = session.selected_heads(60)
    assert base is session.report.head(0, 0) and other is session.shown_report().head(0, 0) and error == ""
    session.next_metric()
    assert session.metric == "entropy"


def test_a_long_session_keeps_only_the_last_sentences(toy):
    session = loaded_session(toy)
    sentences = [f"sentence number {index} here" for index in range(KEEP_TEXTS + 2)]
    for sentence in sentences:
        assert session.run_looks(sentence, "baseline") == (True, "")
        assert session.show(sentence, "baseline", "")
        reports, heads = session.forget_old_texts()
    assert {text for text, _ in session.reports} == set(sentences[-KEEP_TEXTS:])
    assert reports == {id(report) for report in session.reports.values()}
    assert id(session.report.head(1, 3)) in heads


def test_a_long_text_gets_a_window_around_the_query():
    session = loaded_session(load("toy", heads=16, layers=2), " ".join(["word"] * 300))
    assert session.report.matrices_left_out
    session.set_query(150)
    base, _, _ = session.selected_heads(100)
    rows, cols = layout.head_window(150, len(session.report.tokens), 100)
    assert (base.window.rows, base.window.cols) == (rows, cols)
    assert session.selected_heads(100)[0] is base  # run once per window


def test_the_layout_is_arithmetic_of_sizes():
    assert layout.too_small(59, 40) and layout.too_small(80, 15) and not layout.too_small(60, 16)
    assert layout.grid_height(24, 4) == 17 and layout.grid_height(10, 6) == 6
    assert layout.body_split(160, 80) == (80, False)
    assert layout.body_split(100, 80) == (99, True)  # beside it the heatmap would have 20 columns
    assert layout.detail_width(160, 80, False) == 78 and layout.detail_width(100, 99, True) == 99
    rows, cols = layout.head_window(150, 302, 100)
    assert rows == (134, 166) and cols[1] - cols[0] == 64 and cols[0] <= 150 < cols[1]
    assert layout.head_window(0, 302, 30) == ((0, 32), (0, 10))  # 30 less the labels
    assert layout.head_window(0, 302, 20) == ((0, 32), (0, 8))  # at least 8 keys


def test_drawn_lines_are_rendered_once_and_forgotten_with_their_reports(toy):
    from rich.console import Console

    from attn_cli.explore.drawn import Drawn

    session = loaded_session(toy)
    session.layer, session.head = 0, 0
    console = Console(width=120, color_system=None, force_terminal=False)
    drawn = Drawn(console, lambda: console.options)
    lines, rows = drawn.detail(session, 60)
    text = "\n".join("".join(segment.text for segment in line) for line in lines)
    assert (
        "layer 0 · head 0" in text and "▶" in text and sorted(rows.values()) == list(range(len(session.report.tokens)))
    )
    assert drawn.detail(session, 60)[0][1:] == lines[1:]  # drawn again from the kept lines
    assert len(drawn.maps_lines) == 1 and len(drawn.panels) == 1
    assert drawn.grid_layout(session.report, "weights", (0, 0), (160, 50), 4)[1] is False
    drawn.header_view(session.report, "baseline", 120)
    drawn.forget(set(), set())
    assert not (drawn.maps_lines or drawn.panels or drawn.headers)
