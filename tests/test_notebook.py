"""Reports inline in a notebook: each shows its --save html page in its own <iframe srcdoc>.

The unit tests read the display's HTML; the last tests execute examples/attention.ipynb headlessly (nbclient,
a kernel of this Python) and open its outputs, as one page, in Chromium (tests/test_browser.py's fixtures):
the head picker changes the view, hover shows a weight, and two displays on one page do not interfere.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from conftest import patience

from attn_cli.api import Model

DisplayFormatter = pytest.importorskip("IPython.core.formatters").DisplayFormatter
from attn_cli.render.figures import html_page  # noqa: E402 (after the importorskip above)

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "examples" / "attention.ipynb"
TEXT = "Hello, how are you?"


@pytest.fixture(scope="module")
def minilm(minilm_backend) -> Model:
    return Model(minilm_backend)


class Elements(HTMLParser):
    """The elements of an HTML fragment, in order, as (tag, attributes): srcdoc comes back unescaped."""

    def __init__(self, fragment: str):
        super().__init__()
        self.found: list[tuple[str, dict]] = []
        self.feed(fragment)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.found.append((tag, dict(attrs)))

    def tags(self) -> list[str]:
        return [tag for tag, _ in self.found]


def frames(fragment: str) -> list[str]:
    """The pages framed in a display, in order."""
    elements = Elements(fragment)
    assert set(elements.tags()) == {"iframe"}, "a display is frames and nothing else: no script of its own"
    return [attributes["srcdoc"] for _, attributes in elements.found]


def test_every_report_with_a_page_displays_that_page(minilm, tiny_gpt2_lm_dir):
    import attn_cli

    gpt2 = attn_cli.load(str(tiny_gpt2_lm_dir), device="cpu")
    reports = [
        minilm.inspect(TEXT),
        minilm.compare(TEXT, layers=0, heads="1-2"),
        minilm.heads([TEXT]),
        minilm.rollout(TEXT),
        minilm.diff(TEXT, "Hello, who are you?", layers=0),
        attn_cli.load("toy", heads=2, d_model=8).steps("I love you"),
        gpt2.generate("the cat", max_new_tokens=2, layers=1),
    ]
    for report in reports:
        assert frames(report._repr_html_()) == [html_page(report)], type(report).__name__
        bundle, _ = DisplayFormatter().format(report)  # what IPython stores in the notebook
        assert bundle["text/html"] == report._repr_html_()
        assert bundle["text/plain"].startswith(f"<attn {type(report).__name__}") and len(bundle["text/plain"]) < 200


def test_a_list_of_reports_is_a_list_of_summary_lines(minilm):
    """model.inspect([a, b]) returns a list; IPython prints it in two lines, not every matrix twice."""
    bundle, _ = DisplayFormatter().format(minilm.inspect(["short", "a longer one"], layers=0))
    assert bundle == {
        "text/plain": "[<attn InspectReport: minilm, 'short', 3 tokens, 1 layer × 12 heads>,\n "
        "<attn InspectReport: minilm, 'a longer one', 5 tokens, 1 layer × 12 heads>]"
    }


def test_a_subclass_of_the_heads_report_displays_the_heads_page(minilm):
    """attn heads --store's report is a HeadsReport subclass: it is drawn as heads, found through its bases."""
    from attn_cli.analyses.heads import HeadsReport

    class StoreReport(HeadsReport):
        pass

    report = minilm.heads([TEXT], layers="0-1")
    stored = StoreReport(**{field.name: getattr(report, field.name) for field in dataclasses.fields(report)})
    [page] = frames(stored._repr_html_())
    assert page == html_page(report) and "attn heads · minilm" in page


def test_a_batch_displays_a_page_per_text(minilm):
    from attn_cli.analyses.inspect_report import InspectBatch

    reports = minilm.inspect(["short", "a somewhat longer one"], layers=0)
    assert frames(InspectBatch(reports, reports[0].padding_side)._repr_html_()) == [html_page(r) for r in reports]


def test_hostile_text_stays_inside_its_frame(minilm):
    """Quotes and markup in the text are the page's text, escaped once for the srcdoc attribute."""
    text = "\"' onload=alert(1) </iframe><script>alert(2)</script> &amp; [b]x"
    report = minilm.inspect(text, layers=0, heads=0)
    [page] = frames(report._repr_html_())  # one iframe and nothing else: no script escaped it
    assert page == html_page(report)
    assert "<script>alert(2)" not in page  # and html_page escaped it for the page itself


def test_a_report_without_a_page_displays_tables(tmp_path):
    """attn models' catalog has no figure: its JSON document as tables, every value escaped."""
    from attn_cli.data.catalog import Catalog, CatalogEntry, Source

    entry = CatalogEntry("org/<b>bold</b>", next(iter(Source)), "bert", 2, 4, 4, 8, None, None)
    fragment = Catalog([entry], tmp_path)._repr_html_()
    elements = Elements(fragment)
    assert "iframe" not in elements.tags() and "script" not in elements.tags() and "b" in elements.tags()
    assert elements.tags().count("table") == 2  # the document's fields, then its list of models
    assert "org/&lt;b&gt;bold&lt;/b&gt;" in fragment and "<td>bert</td>" in fragment


# -- the notebook, executed and opened in Chromium ---------------------------------------------------------


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """examples/attention.ipynb run headlessly in a kernel of this Python, seeing this checkout's attn_cli
    (it runs without Chromium; only the tests that open its outputs need one)."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    folder = tmp_path_factory.mktemp("notebook")
    spec = folder / "jupyter" / "kernels" / "attn-test"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "attn tests",
                "language": "python",
            }
        )
    )
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("JUPYTER_PATH", str(folder / "jupyter"))  # the kernel spec above, found first
        patch.setenv("PYTHONPATH", str(ROOT))
        patch.setenv("HF_HUB_OFFLINE", "1")
        patch.setenv("ATTN_DEVICE", "cpu")
        nbclient.NotebookClient(
            notebook,
            timeout=round(patience(600)),
            startup_timeout=round(patience(180)),
            kernel_name="attn-test",
            resources={"metadata": {"path": str(folder)}},
        ).execute()
    return notebook


def html_outputs(notebook) -> list[str]:
    return [
        output["data"]["text/html"]
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.outputs
        if "text/html" in output.get("data", {})
    ]


@pytest.mark.slow
def test_the_notebook_runs_and_stores_no_giant_text(executed):
    errors = [
        output
        for cell in executed.cells
        if cell.cell_type == "code"
        for output in cell.outputs
        if output.output_type == "error"
    ]
    assert errors == []
    streams = [
        output.text
        for cell in executed.cells
        if cell.cell_type == "code"
        for output in cell.outputs
        if output.output_type == "stream"
    ]
    assert not [text for text in streams if "Warning" in text]  # no TqdmWarning from loading the model
    plain = [
        output["data"]["text/plain"]
        for cell in executed.cells
        if cell.cell_type == "code"
        for output in cell.outputs
        if "text/html" in output.get("data", {})
    ]
    assert (
        "<attn InspectReport: minilm, 'The cat sat on the mat because it was tired.', 13 tokens, 6 layers × 12 heads>"
        in plain
    )
    framed = [fragment for fragment in html_outputs(executed) if fragment.startswith("<iframe")]
    assert len(framed) == 3  # inspect, heads, compare; the DataFrames are pandas' own tables


@pytest.fixture
def notebook_page(executed, tmp_path, offline_page):  # noqa: F811
    """The executed notebook's HTML outputs as one page, one after another as a notebook shows them."""
    page, requests, errors = offline_page
    path = tmp_path / "notebook.html"
    path.write_text(
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8"></head><body style="width:1000px">\n'
        + "\n".join(f'<div class="output">{fragment}</div>' for fragment in html_outputs(executed))
        + "\n</body></html>\n",
        encoding="utf-8",
    )
    page.goto(path.as_uri())
    shown = [frame for frame in page.frames if frame != page.main_frame]
    for frame in shown:
        frame.wait_for_selector("body[data-ready='1']", timeout=patience(10) * 1000)
    return page, shown, requests, errors


def test_the_outputs_work_offline_in_chromium(notebook_page):
    page, (inspect, heads, compare), requests, errors = notebook_page
    assert requests == [] and errors == []
    assert inspect.locator("canvas.thumb").count() == 72 and compare.locator("canvas.thumb").count() == 24
    assert inspect.locator("#current").text_content() == "layer 0 · head 2"  # the most focused head
    for element in page.locator("iframe.attn-page").all():  # each frame fits its page: no scrolling inside
        height = element.bounding_box()["height"]
        scrolled = element.element_handle().content_frame().evaluate("document.documentElement.scrollHeight")
        assert 300 < height and scrolled <= height + 1
    width = inspect.evaluate("document.documentElement.scrollWidth")
    assert width <= inspect.evaluate("document.documentElement.clientWidth")  # the grid fits the cell's width


def test_the_head_picker_and_hover_work_and_displays_do_not_interfere(notebook_page):
    page, (inspect, heads, compare), _, errors = notebook_page
    before = compare.locator("#current").text_content()
    inspect.select_option("#layer", "3")
    assert inspect.locator("#current").text_content() == "layer 3 · head 2"
    inspect.locator("canvas.thumb[data-layer='0'][data-head='2']").click()
    assert inspect.locator("#current").text_content() == "layer 0 · head 2"
    inspect.locator("table.matrix td[data-q='3'][data-k='2']").hover()  # 'sat' → 'cat': the previous token
    assert inspect.locator("#info").text_content() == "“sat” (query 3) → “cat” (key 2): weight 1.00 · baseline"
    assert compare.locator("#current").text_content() == before  # the other display did not move
    assert compare.locator("#info").text_content().startswith("Hover a token")  # idle: what hovering shows there
    compare.select_option("#layer", "1")
    assert compare.locator("#current").text_content().startswith("layer 1")
    assert inspect.locator("#current").text_content() == "layer 0 · head 2"
    assert errors == []
