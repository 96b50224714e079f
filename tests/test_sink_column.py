"""A learned sink (GPT-OSS's s_aux) shown as the softmax's ⟨sink⟩ column: in inspect's heatmap, top table, SVG and
page, each row's weights plus its ⟨sink⟩ share sum to 1, and the share is what eager's `output_attentions` leaves
out of the row (1 − its sum); `attn heads` gives each head its mean (sink_mass). A model without a sink shows none.

One tiny gpt_oss (2 layers, 4 heads, hidden 64, sink logits −1 → 3 so they take a visible share), loaded once.
Tolerances: 1e-6 for sums of attn's own float32 numbers, 1e-5 against eager (float32).
"""

from __future__ import annotations

import io
import re

import numpy as np
import pytest
from rich.console import Console
from test_attention_forms import TEXT, eager_attentions, save_with_sinks

import attn_cli
from attn_cli.data.selection import Panel
from attn_cli.explore.view import query_panel
from attn_cli.render.figures import page_data, svg_figure
from attn_cli.render.heatmap import Heatmap
from attn_cli.render.terminal import render_report

SHORT = "The fox jumps, the fox runs."
PIECES = "Unbelievably, tokenization works"  # 11 tokens (un ##bel ##ie ##va ##bly …), 6 words


@pytest.fixture(scope="module")
def sink_dir(tmp_path_factory):
    return save_with_sinks(tmp_path_factory.mktemp("gpt_oss"), "gpt_oss")


@pytest.fixture(scope="module")
def sink_model(sink_dir):
    return attn_cli.load(str(sink_dir), device="cpu")


@pytest.fixture(scope="module")
def eager_share(sink_dir):
    """text -> (L, H, T): the share eager's weights leave out of each row, 1 − its sum."""
    return {
        text: np.stack([1 - weights.sum(-1).numpy() for weights in eager_attentions(sink_dir, text=text)])
        for text in (TEXT, SHORT)
    }


@pytest.fixture(scope="module")
def report(sink_model):
    return sink_model.inspect(TEXT)


def test_each_row_with_its_sink_sums_to_one_and_the_sink_is_what_eager_leaves_out(report, eager_share):
    document = report.to_json_dict()
    for layer, record in zip(report.layers, document["layers"]):
        for head, fields in zip(layer.heads, record["heads"]):
            assert np.abs(head.weights.sum(axis=1) + head.sink - 1).max() <= 1e-6
            assert np.abs(head.sink - eager_share[TEXT][layer.layer, head.head]).max() <= 1e-5
            assert fields["sink"] == pytest.approx(head.sink.tolist(), abs=1e-6)
            assert fields["sink_mass"] == pytest.approx(float(head.sink.mean()), abs=1e-6)
    assert float(report.layers[1].heads[3].sink.mean()) > 0.3  # the largest logit's share: a column worth seeing


def _drawn(renderable, width: int) -> list[str]:
    console = Console(file=io.StringIO(), width=width, color_system=None, legacy_windows=False)
    console.print(renderable)
    return console.file.getvalue().splitlines()


def test_the_terminal_draws_the_sink_column_after_the_keys_and_ranks_it_in_the_top_table(sink_model):
    report = sink_model.inspect(TEXT, layers="1", heads="3")
    head = report.layers[0].heads[0]
    tokens = [token.text for token in report.tokens]
    lines = _drawn(render_report(report, panels={Panel.weights, Panel.top}), 120)
    assert any(re.search(r"key →.* 16 │sink$", line) for line in lines)  # its head, after the last key's number
    rows = [line for line in lines if re.match(r"\s*\d+ \S+ .*│", line)][: len(tokens)]
    assert len(rows) == len(tokens)
    for row, share in zip(rows, head.sink):  # every row's last cell is its ⟨sink⟩ share, as the weights are written
        assert row.rsplit("│", 1)[1].strip() == (f"{share:.2f}".lstrip("0") if share < 0.995 else "1.00")
    listed = [line for line in lines if "⟨sink⟩ " in line and re.search(r"⟨sink⟩ \d\.\d\d", line)]
    assert len(listed) == len(tokens)  # a top-table row each: the sink ranked among the keys by its share
    assert f"⟨sink⟩ {head.sink[0]:.2f}" in listed[0]
    narrow = _drawn(render_report(report, panels={Panel.weights}), 40)  # shade cells: still set apart
    assert sum("│" in line for line in narrow) >= len(tokens) and all(len(line) <= 40 for line in narrow)
    panel = _drawn(query_panel(head, tokens, 1), 80)  # attn explore's selected query: its keys, then the sink
    assert panel[len(head.top[1]) + 1].split() == ["→", "⟨sink⟩", f"{head.sink[1]:.2f}", "█" * round(head.sink[1] * 10)]


def test_the_sink_column_is_headed_sink_wherever_the_word_fits_after_its_narrow_cell():
    # 12 keys of .05 and a sink of .4 (rows sum to 1): no model, the heatmap alone
    tokens = [f"tok{i}" for i in range(12)]
    heatmap = Heatmap(np.full((12, 12), 0.05), tokens, "t", sink=np.full(12, 0.4))
    for width, cell in ((heatmap.numbers_width, 4), (heatmap.width_for(2, 0) + 2, 2), (heatmap.width_for(1, 0) + 3, 1)):
        lines = _drawn(heatmap, width)
        header = next(n for n, line in enumerate(lines) if "key →" in line)  # the last line of the key numbers
        assert lines[header].endswith("│sink") and all(len(line) <= width for line in lines), (width, lines)
        assert len(lines[header + 1].rsplit("│", 1)[1]) == cell  # the cells under it are as narrow as the keys'
        assert re.search(r"│ sink:\s+⟨sink⟩", "\n".join(lines))  # the key list names it (a line may end after "sink:")
    lines = _drawn(heatmap, heatmap.width_for(1, 0) + 2)  # one column short of the word: its letter, named below
    assert next(line for line in lines if "key →" in line).endswith("│s") and re.search(
        r"│ s:\s+⟨sink⟩", "\n".join(lines)
    )


def test_words_keep_the_sink_share_each_word_row_the_mean_of_its_pieces(sink_model):
    tokens = sink_model.inspect(PIECES, layers="1")
    words = sink_model.inspect(PIECES, layers="1", words=True)
    assert len(words.words) < len(tokens.tokens)  # pieces did merge
    document = words.to_json_dict()
    for token_head, head, record in zip(tokens.layers[0].heads, words.layers[0].heads, document["layers"][0]["heads"]):
        expected = [token_head.sink[list(word.pieces)].mean() for word in words.words]
        assert head.sink == pytest.approx(expected, abs=1e-6)
        assert np.abs(head.weights.sum(axis=1) + head.sink - 1).max() <= 1e-6  # float32 sums
        assert record["sink"] == pytest.approx(head.sink.tolist(), abs=1e-6)
    lines = _drawn(render_report(words, panels={Panel.weights, Panel.top}), 120)
    assert any(line.endswith("│sink") for line in lines)  # the word heatmap's ⟨sink⟩ column
    assert any(re.search(r"⟨sink⟩ \d\.\d\d", line) for line in lines)  # and the top table's


def test_the_svg_and_the_page_show_the_sink_column(report):
    svg = svg_figure(report, panels={Panel.weights})
    for layer in report.layers:
        for head in layer.heads:
            for token, share in zip(report.tokens, head.sink):
                assert f"{token.text} → ⟨sink⟩ (the learned sink logit): {share:.4g}</title>" in svg
    data = page_data(report)
    for layer, shown in zip(report.layers, data["runs"][0]["layers"]):
        for head, record in zip(layer.heads, shown["heads"]):
            assert record["sink"] == pytest.approx(head.sink.tolist(), abs=1e-4)  # 4 decimals on the page


def test_heads_sink_mass_is_the_mean_over_rows_and_texts_of_the_sink_column(sink_model, eager_share):
    heads = sink_model.heads([TEXT, SHORT])
    document = heads.to_json_dict()
    for profile, record in zip(heads.heads, document["heads"]):
        expected = np.mean([eager_share[text][profile.layer, profile.head].mean() for text in (TEXT, SHORT)])
        assert profile.sink_mass == pytest.approx(float(expected), abs=1e-6)
        assert record["sink_mass"] == pytest.approx(float(expected), abs=1e-6)
    table = heads.to_arrow()  # the notebook's DataFrame has it as a column
    assert table.column("sink_mass").to_pylist() == [profile.sink_mass for profile in heads.heads]


def test_a_model_without_a_sink_shows_no_column_and_no_field(tiny_llama_dir):
    model = attn_cli.load(str(tiny_llama_dir), device="cpu")
    report = model.inspect(TEXT, layers="0", heads="0")
    assert not any("│" in line or "⟨sink⟩" in line for line in _drawn(render_report(report), 120))
    assert "sink" not in report.to_json_dict()["layers"][0]["heads"][0]
    assert "⟨sink⟩" not in svg_figure(report)
    assert "sink" not in page_data(report)["runs"][0]["layers"][0]["heads"][0]
    heads = model.heads(TEXT)
    assert all("sink_mass" not in record for record in heads.to_json_dict()["heads"])
    assert "sink_mass" not in heads.to_arrow().column_names
