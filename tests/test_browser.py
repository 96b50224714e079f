"""The --save figures, opened as a person would: the HTML page in a real headless Chromium, offline.

Needs Debian's `chromium` and the pip `playwright` package (its own browser download is not used:
the page is opened with executable_path pointing at the system browser). Without either, these
tests skip and say why; `.ci/run` installs both where it can.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ElementTree

import numpy as np
import pytest

SENTENCE = "Hello, how are you?"
from conftest import open_page  # the browser and offline_page fixtures are conftest's  # noqa: E402 (after the importorskip above)


@pytest.fixture(scope="module")
def model(minilm_backend):
    from attn_cli.api import Model

    return Model(minilm_backend)


@pytest.fixture(scope="module")
def pages(model, tmp_path_factory):
    from attn_cli.render.files import save_figure

    folder = tmp_path_factory.mktemp("figures")
    files = {
        "inspect": (model.inspect(SENTENCE), folder / "inspect.html"),
        "compare": (model.compare(SENTENCE, layers=0, heads="1-2"), folder / "compare.html"),
        "hostile": (
            model.inspect("</script><script>alert(1)</script> [b]x", layers=0, heads=0),
            folder / "hostile.html",
        ),
        "norms": (model.inspect(SENTENCE, layers="0-1", measure="norm"), folder / "norms.html"),
    }
    for report, path in files.values():
        save_figure(report, path)
    return {name: path for name, (_, path) in files.items()}


def test_the_page_works_offline_grid_and_head_view(offline_page, pages):
    page, requests, errors = offline_page
    open_page(page, pages["inspect"])
    assert requests == [] and errors == []
    assert page.locator("canvas.thumb").count() == 72  # every head of MiniLM, at a glance
    assert page.locator("#current").text_content() == "layer 0 · head 2"  # the most focused head
    assert page.locator("canvas.thumb.selected").count() == 1
    assert page.locator("svg.headview line").count() > 0
    assert page.locator("table.matrix td").count() == 64  # 8 × 8 tokens


def test_a_click_on_a_thumbnail_changes_the_shown_head(offline_page, pages):
    page, _, errors = offline_page
    open_page(page, pages["inspect"])
    before = page.locator("table.matrix").inner_text()
    page.locator("canvas.thumb[data-layer='3'][data-head='7']").click()
    assert page.locator("#current").text_content() == "layer 3 · head 7"
    assert page.locator("#layer").input_value() == "3" and page.locator("#head").input_value() == "7"
    assert page.locator("table.matrix").inner_text() != before
    page.select_option("#head", "2")
    assert page.locator("#current").text_content() == "layer 3 · head 2"
    assert errors == []


def test_hovering_a_token_shows_its_attention(offline_page, pages):
    page, _, errors = offline_page
    open_page(page, pages["inspect"])  # layer 0 head 2: each token attends to the one before it
    page.locator("svg.headview .tok-left[data-i='3']").hover()  # 'how'
    info = page.locator("#info").text_content()
    assert "“how” (3) attends to , 1.00" in info
    visible = page.locator("svg.headview line:visible")
    assert visible.count() == 1  # only the hovered query's lines remain
    assert page.locator("svg.headview .w-right").nth(2).text_content() == "1.00"  # weight beside ','
    page.locator("svg.headview .tok-right[data-i='1']").hover()  # who attends to 'hello'?
    assert "is attended by , 1.00" in page.locator("#info").text_content()
    page.locator("table.matrix td[data-q='1'][data-k='0']").hover()
    assert "weight 1.00" in page.locator("#info").text_content()
    assert errors == []


def test_compare_shows_the_runs_side_by_side(offline_page, pages):
    page, requests, errors = offline_page
    open_page(page, pages["compare"])
    assert requests == [] and errors == []
    names = page.locator(".run h2").all_text_contents()
    assert names == ["baseline", "shared-k"]
    assert page.locator("table.matrix").count() == 2
    page.locator(".run[data-run='0'] .tok-left[data-i='2']").hover()
    info = page.locator("#info").text_content()
    assert "baseline:" in info and "shared-k:" in info  # one hover, both runs


def test_measure_norm_shows_the_norms_beside_the_weights(offline_page, pages, model):
    """--measure norm: a second run of every head's ‖α·v·W_Oʰ‖, its numbers the report's, each head
    coloured 0 → its own largest (as the terminal)."""
    page, requests, errors = offline_page
    open_page(page, pages["norms"])
    assert requests == [] and errors == []
    names = page.locator(".run h2").all_text_contents()
    assert names == ["weights", "value-weighted norms ‖α·v·W_Oʰ‖"]
    norms = model.inspect(SENTENCE, layers=0, heads=2, measure="norm").head(0, 2).norms
    page.select_option("#layer", "0")
    page.select_option("#head", "2")
    cell = page.locator(".run[data-run='1'] table.matrix td[data-q='3'][data-k='2']")
    assert cell.text_content() == f"{norms[3, 2]:.2f}".lstrip("0")
    cell.hover()
    assert f"norm {norms[3, 2]:.2f}" in page.locator("#info").text_content()
    brightest = page.locator(".run[data-run='1'] svg.headview line").evaluate_all(
        "lines => Math.max(...lines.map(l => +l.getAttribute('stroke-opacity')))"
    )
    assert brightest == pytest.approx(1, abs=1e-3)  # the head's largest norm is its full colour (4 decimals kept)


def test_user_text_cannot_break_out_of_the_page(offline_page, pages):
    page, _, errors = offline_page
    dialogs = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    open_page(page, pages["hostile"])
    assert dialogs == [] and errors == []
    assert "</script>" in page.locator("h1 + p").text_content()


def test_the_html_names_nothing_to_fetch(pages):
    text = pages["inspect"].read_text(encoding="utf-8")
    assert not re.search(r"(src|href)\s*=\s*[\"']?(https?:)?//", text)
    assert "default-src 'none'" in text
    data = text.split('<script id="attn-data" type="application/json">')[1].split("</script>")[0]
    assert "</" not in data
    assert json.loads(data)["tokens"][1] == "hello"


def test_the_legend_says_which_colour_scale_and_scale_head_spans_the_heads_own_range(offline_page, model, tmp_path):
    from attn_cli.render.files import save_figure

    page, _, errors = offline_page
    report = model.inspect(SENTENCE, layers=3, heads="10-11")  # head 11 is broad: its largest weight is small
    weights = report.head(3, 11).weights
    low, high = float(np.nanmin(weights)), float(np.nanmax(weights))
    row, col = np.unravel_index(np.nanargmax(weights), weights.shape)
    paths = {name: tmp_path / f"{name}.html" for name in ("fixed", "head")}
    save_figure(report, paths["fixed"])
    save_figure(report, paths["head"], per_head=True)
    brightest = "rgb(252, 250, 170)"  # render/scale.py's SEQUENTIAL top
    for name, path in paths.items():
        open_page(page, path)
        page.locator("canvas.thumb[data-layer='3'][data-head='11']").click()
        legend = page.locator(".legend").text_content()
        cell = page.locator(f"table.matrix td[data-q='{row}'][data-k='{col}']")
        background = cell.evaluate("td => getComputedStyle(td).backgroundColor")
        if name == "fixed":
            assert "weight 0 → 1.00: fixed scale, the same for every head" in legend
            assert background != brightest  # 0.3-odd on the 0 → 1 scale: far from the top
        else:
            assert f"weight {low:.2f} → {high:.2f}: per-head scale, this head's min → max" in legend, legend
            assert background == brightest  # the head's largest weight: the top of its own scale
            assert "each on its own colour scale" in page.locator(".grid-title").text_content()
    assert errors == []


def test_svg_is_a_vector_figure_with_full_labels(model, tmp_path):
    from attn_cli.render.files import save_figure
    from attn_cli.render.terminal import Panel

    path = tmp_path / "figure.svg"
    report = model.inspect("Hello, extraordinarily long tokenisation", layers=0, heads="1-2")
    save_figure(report, path, {Panel.weights})
    root = ElementTree.parse(path).getroot()  # well-formed XML
    svg = "{http://www.w3.org/2000/svg}"
    texts = [node.text for node in root.iter(f"{svg}text")]
    tokens = [token.text for token in report.tokens]
    for token in tokens:  # full labels, never clipped: on both axes
        assert texts.count(token) >= 2, token
    assert any("layer 0 · head 1" in (text or "") for text in texts)
    assert any("minilm" in (text or "") for text in texts)
    assert len(list(root.iter(f"{svg}rect"))) >= 2 * len(tokens) ** 2 // 2
    assert list(root.iter(f"{svg}linearGradient"))  # the colour bar
    assert "<image" not in path.read_text(encoding="utf-8")


def test_svg_with_measure_norm_draws_the_norms_on_their_own_scale(model, tmp_path):
    from attn_cli.render.files import save_figure

    path = tmp_path / "norms.svg"
    report = model.inspect(SENTENCE, layers=3, heads=5, measure="norm")
    save_figure(report, path)
    svg = "{http://www.w3.org/2000/svg}"
    texts = [node.text or "" for node in ElementTree.parse(path).getroot().iter(f"{svg}text")]
    assert any("value-weighted norms ‖α·v·W_Oʰ‖" in text for text in texts)
    assert "norm" in texts and "weight" not in texts  # the colour bar's caption
    from attn_cli.render.scale import stat

    largest = float(np.nanmax(report.head(3, 5).norms))
    assert stat(largest) in texts and stat(largest / 2) in texts  # its ticks: 0, half, the largest


def test_svg_opens_in_chromium(browser, model, tmp_path):
    from attn_cli.render.files import save_figure

    path = tmp_path / "figure.svg"
    save_figure(model.inspect(SENTENCE, layers=0, heads=2), path)
    page = browser.new_page()
    page.goto(path.as_uri())
    assert page.locator("text", has_text="[CLS]").count() >= 2
    page.close()


# -- no two labels of a figure overlap ------------------------------------------------------------------


def text_boxes(path) -> list[tuple[str, float, float, float, float]]:
    """Every unrotated <text> of an SVG as (text, left, top, right, bottom) in px, from its x, y, anchor and
    font size (characters 0.6 em wide, as DejaVu Sans' are on average; wide ones count double)."""
    svg = "{http://www.w3.org/2000/svg}"
    boxes = []
    for node in ElementTree.parse(path).getroot().iter(f"{svg}text"):
        if node.get("transform"):  # the slanted key labels: parallel, one per column
            continue
        text, size = node.text or "", float(node.get("font-size"))
        width = sum(2 if ord(ch) > 0x2E80 else 1 for ch in text) * size * 0.6
        x, y = float(node.get("x")), float(node.get("y"))
        left = {"start": x, "middle": x - width / 2, "end": x - width}[node.get("text-anchor", "start")]
        boxes.append((text, left, y - 0.8 * size, left + width, y + 0.2 * size))
    return boxes


def overlaps(boxes) -> list[tuple[str, str]]:
    return [
        (a[0], b[0])
        for index, a in enumerate(boxes)
        for b in boxes[index + 1 :]
        if a[1] < b[3] and b[1] < a[3] and a[2] < b[4] and b[2] < a[4]
    ]


@pytest.mark.parametrize("text", ["Hi", "Hi you", "a b c", "Hello, how are you?"])
def test_no_two_labels_of_an_svg_figure_overlap(model, tmp_path, text):
    """A short text's colour bar is taller than its cells: its label and the axes caption once shared a line."""
    from attn_cli.render.files import save_figure
    from attn_cli.render.terminal import Panel

    for name, report, panels in (
        ("default", model.inspect(text), None),
        ("panels", model.inspect(text, layers=0, heads="0-1"), {Panel.weights, Panel.scores}),
    ):
        path = tmp_path / f"{name}.svg"
        save_figure(report, path, panels)
        boxes = text_boxes(path)
        assert any(box[0] == "rows: queries · columns: keys" for box in boxes)
        assert overlaps(boxes) == [], (text, name)
        width = float(ElementTree.parse(path).getroot().get("width"))
        assert max(box[3] for box in boxes) <= width, (text, name)  # nothing past the figure's right edge


# -- the figures of heads, generate, rollout and diff -------------------------------------------------------


@pytest.fixture(scope="module")
def command_reports(model, tmp_path_factory):
    from conftest import save_tiny_gpt2_lm

    import attn_cli

    gpt2 = save_tiny_gpt2_lm(tmp_path_factory.mktemp("figure-gpt2"), n_embd=32, n_layer=2, n_head=2, n_positions=64)
    return {
        "heads": model.heads([SENTENCE, "The cat sat on the mat."], layers="0-1"),
        "rollout": model.rollout(SENTENCE),
        "diff": model.diff("The cat sat on the mat.", "The dog sat on the rug.", layers=0),
        "generate": attn_cli.load(str(gpt2), device="cpu").generate("the cat sat on the", max_new_tokens=4),
    }


def cell(page, run: int, row: int, col: int) -> str:
    return page.locator(f".run[data-run='{run}'] table.matrix td[data-q='{row}'][data-k='{col}']").text_content()


def test_command_figures_are_svg_heatmaps_with_labels(command_reports, tmp_path):
    from attn_cli.render.files import save_figure

    svg = "{http://www.w3.org/2000/svg}"
    for name, report in command_reports.items():
        path = tmp_path / f"{name}.svg"
        save_figure(report, path)
        root = ElementTree.parse(path).getroot()
        texts = [node.text or "" for node in root.iter(f"{svg}text")]
        assert any(text.startswith(f"attn {name} · ") for text in texts), name
        assert list(root.iter(f"{svg}linearGradient")), name
        assert overlaps(text_boxes(path)) == [], name
    heads = ElementTree.parse(tmp_path / "heads.svg").getroot()
    texts = [node.text or "" for node in heads.iter(f"{svg}text")]
    assert "previous token score" in texts and "L1" in texts and "h11" in texts
    diff = [node.text or "" for node in ElementTree.parse(tmp_path / "diff.svg").getroot().iter(f"{svg}text")]
    assert "cat→dog" in diff and "weight change" in diff


def test_command_pages_show_the_reports_numbers(offline_page, command_reports, tmp_path):
    from attn_cli.render.files import save_figure
    from attn_cli.render.scale import CellFormat

    page, requests, errors = offline_page
    weight = CellFormat(2, True).text
    paths = {}
    for name, report in command_reports.items():
        paths[name] = tmp_path / f"{name}.html"
        save_figure(report, paths[name])

    heads = command_reports["heads"].to_json_dict()
    open_page(page, paths["heads"])
    score = next(h for h in heads["heads"] if h["layer"] == 1 and h["head"] == 4)["scores"]["first_token"]
    assert page.locator(".run h2").nth(3).text_content() == "first token ([CLS]/BOS) score"
    assert cell(page, 3, 1, 4) == weight(score)

    rollout = command_reports["rollout"].to_json_dict()
    open_page(page, paths["rollout"])
    assert cell(page, 0, 2, 0) == weight(rollout["rollout"][2][0])
    assert page.locator("table.matrix td").count() == len(rollout["tokens"]) ** 2
    page.locator("svg.headview .tok-left[data-i='2']").hover()  # a rolled-out row: where it comes from
    assert f"“{rollout['tokens'][2]['text']}” (2) comes from " in page.locator("#info").text_content()

    report = command_reports["generate"]
    generated = report.to_json_dict()
    open_page(page, paths["generate"])
    page.select_option("#layer", "1")
    page.select_option("#head", "0")
    rows = generated["layers"][1]["heads"][0]["weights"]  # a row per generated token
    count = report.prompt_tokens
    assert cell(page, 0, count, 1) == weight(rows[0][1])
    assert page.locator("table.matrix tr").count() == 1 + len(report.tokens) - count  # header + generated rows

    diff = command_reports["diff"]
    open_page(page, paths["diff"])
    top = diff.heads[0]
    assert page.locator("#current").text_content() == f"layer {top.layer} · head {top.head}"
    change = diff.b.head(top.layer, top.head).weights - diff.a.head(top.layer, top.head).weights
    i, j = np.unravel_index(np.argmax(np.abs(change)), change.shape)
    assert cell(page, 2, i, j) == CellFormat(2, False, bare=True).text(change[i, j])
    assert page.locator(".run[data-run='2'] th.row").nth(2).text_content() == "cat→dog"
    assert page.locator(".run[data-run='1'] th.row").nth(2).text_content() == "dog"
    assert requests == [] and errors == []


def test_circuits_page_shows_the_composition_and_copying_numbers(offline_page, tmp_path):
    """attn circuits --save x.html: the K-composition grid (rows read, columns write) and the copying scores,
    a score between −0.05 and 0 written "0", never "-0.0"."""
    from conftest import save_tiny_gpt2_lm

    import attn_cli
    from attn_cli.render.files import save_figure

    page, requests, errors = offline_page
    report = attn_cli.load(str(save_tiny_gpt2_lm(tmp_path / "gpt2", n_layer=3)), device="cpu").circuits()
    path = tmp_path / "circuits.html"
    save_figure(report, path)
    open_page(page, path)
    assert requests == [] and errors == []
    assert page.locator(".run h2").nth(1).text_content().startswith("K-composition")
    k = report.score("k", (0, 2), (1, 3))  # row 3 (reader 1.3), column 2 (writer 0.2)
    assert cell(page, 1, 3, 2) == f"{k:.2f}".removeprefix("0")
    copying = [cell(page, 3, head.layer, head.head) for head in report.heads]
    assert "-0.0" not in copying
    assert copying == [("0" if abs(head.copying) < 0.05 else f"{head.copying:.1f}") for head in report.heads]


def test_key_labels_that_fit_their_columns_stand_upright(offline_page, tmp_path):
    """The matrix's key labels run up their columns (rotated 180°), which turns a CJK character upside down; when
    every label fits its column (one CJK character each, with the toy) they stand upright, as in the SVG."""
    import attn_cli
    from attn_cli.render.files import save_figure

    page, _, errors = offline_page
    toy = attn_cli.load("toy")
    for text, upright in (("我今天去图书馆看书", True), ("The cat sat on the mat.", False)):
        path = tmp_path / f"{upright}.html"
        save_figure(toy.inspect(text, layers=0, heads=0), path)
        open_page(page, path)
        labels = page.locator("table.matrix th.col span")
        assert labels.count() == len(toy.inspect(text, layers=0, heads=0).tokens)
        modes = labels.evaluate_all("spans => spans.map(s => getComputedStyle(s).writingMode)")
        assert set(modes) == {"horizontal-tb" if upright else "vertical-rl"}, (text, modes)
    assert errors == []
