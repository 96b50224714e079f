"""`attn heads show DIR [--head L.H]`: a corpus store in the terminal, as JSON and as the dashboard page, with
no model; and how `show` and `attn heads TEXT...` live side by side."""

from __future__ import annotations

import io
import json
import re

import pytest
from conftest import isolate
from rich.console import Console
from store_builder import INDUCTION, build_store
from typer.testing import CliRunner

from attn_cli.analyses.heads import HeadsReport
from attn_cli.analyses.store_read import open_store
from attn_cli.cli import app
from attn_cli.data import store_schema as schema
from attn_cli.render.heads_view import render_heads
from attn_cli.render.store_view import NEXT, QUERY_STYLE, example_line, sparkline

HOSTILE = "</script><img src=x onerror=alert(1)>"


@pytest.fixture(autouse=True)
def isolated_env(monkeypatch):
    isolate(monkeypatch, 80)
    monkeypatch.setenv("NO_COLOR", "1")


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return build_store(tmp_path_factory.mktemp("show") / "heads-store").path


def attn(*args):
    return CliRunner().invoke(app, [str(arg) for arg in args], catch_exceptions=False)


def ok(result):
    assert result.exit_code == 0, f"exit {result.exit_code}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def user_error(result, code: int, *fragments: str) -> str:
    assert result.exit_code == code, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def plain(renderable, width: int) -> str:
    stream = io.StringIO()
    Console(file=stream, width=width, no_color=True, color_system=None, height=10_000).print(renderable)
    return stream.getvalue()


def test_show_prints_the_grid_and_top_heads_as_attn_heads_does(store):
    out = ok(attn("heads", "show", store))
    report = open_store(store)
    lines = out.splitlines()
    assert lines[0].startswith(f"store {store} · 1 part")
    as_heads = HeadsReport(
        model=report.model,
        device=report.device,
        dtype=report.dtype,
        texts=report.texts,
        tokens=report.tokens,
        heads=report.heads,
        source=report.source,
    )
    grid = next(n for n, line in enumerate(lines) if line.startswith("attn heads ·"))  # under the store's line
    expected = plain(render_heads(as_heads, 80), 80).splitlines()
    assert lines[grid : grid + len(expected)] == expected
    assert lines[grid + len(expected) :] == ["", NEXT]  # and where to go next
    assert "L1  F.72 F.73 F.80  ·   I.77" in out
    assert max(map(len, lines)) <= 80


def test_a_mixed_heads_line_shows_its_dot_once_as_the_legend_does(store):
    # head 1.3 is mixed (the grid's "·" above); its chip is a dot, so no " · " may stand before it
    lines = ok(attn("heads", "show", store, "--layer", "1", "--head", "3", "--top", "1")).splitlines()
    head = next(line for line in lines if line.startswith("head 1.3"))
    assert re.fullmatch(r"head 1\.3  ·  mixed( · sink key .*)?", head), head


def test_a_store_of_one_text_says_one_text(tmp_path):
    """The count of texts is a noun in agreement: '1 text from …' and a score's '1 text', not '1 texts'."""
    from attn_cli.data.document import counted

    corpus = tmp_path / "one.txt"
    corpus.write_text("the cat sat on the mat\n")
    ok(attn("heads", "--file", corpus, "--model", "toy", "--store", tmp_path / "st"))
    out = ok(attn("heads", "show", tmp_path / "st", "--layer", "0", "--head", "0"))
    assert "1 text from" in out and re.search(r"│ .*  1 text$", out, re.M) and "1 texts" not in out, out
    assert counted(1_000, "text", grouped=True) == "1,000 texts" and counted(1, "layer") == "1 layer"


def test_head_dashboard_without_colour_marks_the_query_and_keys(store):
    out = ok(attn("heads", "show", store, "--layer", "1", "--head", "4", "--top", "3"))
    lines = out.splitlines()
    assert max(map(len, lines)) <= 80
    assert "head 1.4  I  induction · sink key [CLS]" in out
    for name in ("previous", "duplicate", "induction", "first", "last", "punctuation", "self", "broad", "sink"):
        assert any(re.match(rf" \S  {name} +│.{{20}}│", line) for line in lines), name
    top = open_store(store).examples(*INDUCTION).top["induction"]
    start = lines.index("Top texts by induction (score; the query, its keys and weights →)")
    shown = lines[start + 1 : start + 4]
    for line, example in zip(shown, top):
        assert f"text {example.text_id}" in line and f"[{example.token(example.query)}]" in line
        assert f"→ {example.token(example.keys[0])} {example.value:.2f}"[:-4] in line
    assert "{" + top[0].token(top[0].keys[0]) + "}" in shown[0]  # the key shown even 8 tokens before the query
    assert "A sample from each tenth of induction, lowest first" in out
    assert sum(1 for line in lines if re.match(r"  d\d ", line)) == 10
    assert "Top edges (single weights, the sink key excluded)" in out
    assert "[query] {key}" in out


@pytest.mark.parametrize("columns", [80, 120])
def test_every_line_fits_the_terminal(store, monkeypatch, columns):
    monkeypatch.setenv("COLUMNS", str(columns))
    for args in (
        (),
        ("--layer", "0", "--head", "2"),
        ("--layer", "1", "--head", "4", "--score", "first_token", "--top", "8"),
    ):
        assert max(map(len, ok(attn("heads", "show", store, *args)).splitlines())) <= columns


def test_in_colour_the_query_is_highlighted_not_bracketed(store):
    example = open_store(store).examples(*INDUCTION).top["induction"][0]
    line = example_line(example, 80, colour=True)
    query = example.token(example.query)
    assert f"[{query}]" not in line.plain and "{" not in line.plain
    styled = [line.plain[span.start : span.end] for span in line.spans if span.style == QUERY_STYLE]
    assert styled == [query]


def test_score_chooses_the_examples(store):
    out = ok(attn("heads", "show", store, "--layer", "1", "--head", "4", "--score", "previous_token"))
    assert "Top texts by previous token" in out and "A sample from each tenth of previous token" in out


def test_score_takes_the_names_the_views_print(store):
    """The histograms and the top table print duplicate, previous, first, last: --score takes them (and the
    legend's "duplicate token"), and shows the same dashboard as the full name."""
    full = ok(attn("heads", "show", store, "--layer", "1", "--head", "4", "--score", "duplicate_token", "--json"))
    for name in ("duplicate", "duplicate token", "Duplicate-Token"):
        assert ok(attn("heads", "show", store, "--layer", "1", "--head", "4", "--score", name, "--json")) == full
    assert "Top texts by previous token" in ok(
        attn("heads", "show", store, "--layer", "1", "--head", "4", "--score", "previous")
    )
    user_error(attn("heads", "show", store, "--score", "dup"), 2, "no score named 'dup'", "duplicate_token (duplicate)")


def test_json_is_the_attn_heads_document_and_the_head_dashboard(store):
    document = json.loads(ok(attn("heads", "show", store, "--json")))
    assert document == json.loads(json.dumps(open_store(store).to_json_dict()))
    head = json.loads(ok(attn("heads", "show", store, "--layer", "1", "--head", "4", "--top", "2", "--json")))
    assert head["command"] == "heads show" and (head["layer"], head["head"]) == INDUCTION
    assert head["examples"]["score"] == "induction" and len(head["examples"]["top"]) == 2
    assert len(head["scores"]["induction"]["hist"]) == schema.BINS


def test_o_writes_the_json_to_a_file(store, tmp_path):
    target = tmp_path / "head.json"
    result = attn("heads", "show", store, "--layer", "1", "--head", "4", "-o", target)
    assert ok(result) == "" and f"wrote {target}" in result.stderr
    assert json.loads(target.read_text())["examples"]["score"] == "induction"


def test_sparkline_heights():
    assert sparkline([0, 1, 2, 4, 8]) == " ▁▂▄█"
    assert sparkline([0, 0]) == "  "


def test_incomplete_store_is_shown_with_a_note(tmp_path):
    path = build_store(tmp_path / "partial", texts=9, complete=False, per_text=False).path
    result = attn("heads", "show", path)
    assert "incomplete: the run stopped after 9 texts" in ok(result)
    assert "covers 9 texts" in result.stderr and "--resume completes it" in result.stderr


# -- `show` beside `attn heads TEXT...` -----------------------------------------------------------------


def test_show_without_a_directory_says_how_to_score_the_word(tmp_path):
    user_error(attn("heads", "show"), 2, "needs a store directory", "attn heads -- show")


def test_show_with_a_sentence_is_not_a_store(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    user_error(
        attn("heads", "show", "me the heads"),
        2,
        "no such store directory",
        'to score "show me the heads" as text, write attn heads -- show me the heads',
    )


def test_double_dash_scores_show_as_a_text():
    """`attn heads -- show` is the old command on the text "show" (the model runs)."""
    document = json.loads(ok(attn("heads", "--layer", "0", "--head", "2", "--json", "--", "show")))
    assert document["command"] == "heads" and document["texts"] == 1 and document["source"] == "arguments"


def test_every_value_is_an_upper_case_word():
    """As every other command's help (tests/test_render_help.py): --head HEAD, --top N, --save FILE."""
    import typer

    from attn_cli.cli import HEADS_SHOW

    for option in HEADS_SHOW.params:
        if isinstance(option, typer.core.TyperOption) and not option.is_flag:
            assert re.fullmatch(r"[A-Z][A-Z_]*", option.metavar or ""), (option.opts, option.metavar)


def test_heads_help_lists_show_as_its_sub_command():
    """`attn heads show` is a real sub-command: listed under Commands in `attn heads --help`, with its own help."""
    listed = ok(attn("heads", "--help"))
    assert re.search(r"Commands.*\n.*heads show +A corpus store's heads", listed), listed
    assert "attn heads show [OPTIONS] [DIR]" in ok(attn("heads", "show", "--help"))


@pytest.mark.parametrize(
    "args, fragments",
    [
        (("--head", "1-4"), ("--head picks a head's dashboard together with --layer",)),
        (("--layer", "1", "--head", "1-4"), ("--head '1-4' is not a head number",)),
        (("--head", "1.x"), ("--head '1.x' is not LAYER.HEAD",)),
        (("--layer", "9", "--head", "0"), ("head 9.0 is not in this report",)),
        (
            ("--layer", "9", "--head", "9"),
            ("head 9.9 is not in this report; it holds layers 0-5 × heads 0-11",),
        ),
        (("--layer", "1", "--head", "4", "--score", "inductoin"), ("no score named 'inductoin'",)),
        (("--score", "inductoin"), ("no score named 'inductoin'",)),
        (("--save", "x.svg"), ("writes the dashboard page, an .html file",)),
        (("--top", "0"), ("--top 0",)),
        (("--save", "x.html", "--json"), ("--save writes a figure",)),
    ],
)
def test_bad_usage_is_one_line_and_exit_2(store, args, fragments):
    user_error(attn("heads", "show", store, *args), 2, *fragments)


def test_a_damaged_store_is_exit_1(tmp_path):
    path = build_store(tmp_path / "damaged", texts=6, per_text=False).path
    (path / schema.HEADS).write_bytes(b"garbage")
    user_error(attn("heads", "show", path), 1, "heads.parquet is not a readable Parquet table")


def test_save_writes_the_dashboard_page_with_every_token_escaped(tmp_path):
    path = build_store(tmp_path / "hostile", texts=9, per_text=False, hostile=HOSTILE).path
    page = tmp_path / "dashboard.html"
    result = attn("heads", "show", path, "--layer", "1", "--head", "4", "--save", page)
    ok(result)
    assert f"saved {page}" in result.stderr
    html = page.read_text()
    assert html.count("</script>") == 2  # the data's and the script's own: the token never closes one
    assert "<img" not in html and "onerror=alert(1)>" not in html
    data = json.loads(re.search(r'<script id="attn-data" type="application/json">(.*?)</script>', html, re.S)[1])
    assert data["start"] == [1, 4]
    assert any(HOSTILE in window(data, e) for e in data["examples"]["1.4"]["top"]["induction"])
    assert "http" not in html.replace("http://www.w3.org/2000/svg", "").replace("http-equiv", "")


def window(data: dict, example: dict) -> list[str]:
    """An example's tokens on the page: a slice of the run of its text's tokens that holds them."""
    for start, tokens in data["texts"][str(example["t"])]:
        if start <= example["s"] and example["s"] + example["c"] <= start + len(tokens):
            return tokens[example["s"] - start : example["s"] - start + example["c"]]
    raise AssertionError(f"no run of text {example['t']} holds {example['s']}…+{example['c']}")


def test_the_page_holds_each_texts_tokens_once_and_every_window_is_exact(store):
    from attn_cli.render.dashboard_page import dashboard_data

    report = open_store(store)
    data = dashboard_data(report, top=5)
    found = report.all_examples(5)
    count = 0
    for (layer, head), examples in found.items():
        page = data["examples"][f"{layer}.{head}"]
        pairs = [(page["edge"], examples.edge)]
        pairs += [
            (page[kind][score], getattr(examples, kind)[score])
            for kind in ("top", "decile")
            for score in getattr(examples, kind)
        ]
        for shown, kept in pairs:
            assert [window(data, e) for e in shown] == [list(e.tokens) for e in kept]
            count += len(kept)
    assert count == 72 * (9 * 5 + 9 * 10 + 5)  # top 5 per score, a sample per decile, 5 edges
    stored = sum(len(tokens) for runs in data["texts"].values() for _, tokens in runs)
    assert stored <= report.tokens  # each text's tokens at most once, not a copy per example


def test_show_loads_no_model_and_imports_no_torch(store):
    """Reading a store is quick: no model, and not even torch (seconds to import) is imported."""
    import subprocess
    import sys

    script = (
        "import sys; from typer.testing import CliRunner; from attn_cli.cli import app; "
        f"result = CliRunner().invoke(app, ['heads', 'show', {str(store)!r}, '--head', '1.4']); "
        "print(result.exit_code, 'torch' in sys.modules, 'transformers' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["0", "False", "False"], done.stderr


def test_the_old_spellings_still_work_with_a_note(store):
    """--head L.H, -s and -n (one release more): the same dashboard as --layer L --head H --score --top."""
    new = attn(
        "heads", "show", store, "--layer", "1", "--head", "4", "--score", "previous_token", "--top", "2", "--json"
    )
    old = attn("heads", "show", store, "--head", "1.4", "-s", "previous_token", "-n", "2", "--json")
    assert old.exit_code == 0 and old.stdout == ok(new)
    notes = old.stderr.strip().splitlines()
    assert len(notes) == 3 and all("deprecated" in line for line in notes), old.stderr
    assert "use --layer 1 --head 4" in old.stderr and "use --score" in old.stderr and "use --top" in old.stderr
