"""attn's plugin door (data/registry.py): every built-in analysis is found by its report's type, and an outside
package (tests/plugin_example, found through its entry point in the group "attn") adds a command, its JSON, a
figure, a notebook display and a head score without any attn_cli file changing for it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import patience

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "tests" / "plugin_example"  # the package and its *.dist-info (what pip install would write)


def test_every_report_type_is_drawn_by_its_registered_analysis():
    from attn_cli.analyses.heads_report import HeadsReport
    from attn_cli.analyses.inspect_report import InspectBatch, InspectReport
    from attn_cli.analyses.store_read import StoreReport
    from attn_cli.data.registry import plugins

    specs = {spec.report: spec for spec in plugins().analyses}
    assert {"inspect", "heads", "compare", "steps", "rollout", "attribute", "diff", "generate", "circuits"} <= {
        spec.name for spec in specs.values()
    }
    assert specs[InspectReport].figure.svg is not None and specs[InspectBatch].figure.one is not None
    assert specs[StoreReport].notebook is not None and specs[HeadsReport].notebook is None  # by type, not name


def test_a_subclass_is_found_through_its_base():
    from attn_cli.analyses.heads_report import HeadsReport
    from attn_cli.data.registry import analysis_for

    class Renamed(HeadsReport):  # a class name nobody registered
        pass

    spec = analysis_for(Renamed.__new__(Renamed))
    assert spec is not None and spec.report is HeadsReport


def test_a_figure_with_only_a_page_is_refused_as_svg_in_a_line(monkeypatch):
    """Figure's parts are each optional: a plugin's that gives a page and no items (nor svg) makes --save x.svg
    one BadInput line, not a TypeError from calling the missing drawing."""
    from attn_cli.data.registry import Figure
    from attn_cli.plumbing.errors import BadInput
    from attn_cli.render import figures

    page_only = Figure(page=lambda report, per_head: {"runs": [], "start": [0, 0]})
    monkeypatch.setattr(figures, "figure_of", lambda report: ("pageonly", page_only))
    with pytest.raises(BadInput, match="has no SVG figure"):
        figures.svg_figure(object())


def _attn(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(PLUGIN)]), "NO_COLOR": "1", "COLUMNS": "100"}
    return subprocess.run(
        [sys.executable, "-m", "attn_cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=patience(300),
    )


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("plugin")


def test_the_plugin_command_is_in_help_and_runs(workdir):
    helped = _attn("--help", cwd=workdir)
    assert helped.returncode == 0 and "first-weight" in helped.stdout
    shown = _attn("first-weight", "The cat sat.", "--model", "toy", cwd=workdir)
    assert shown.returncode == 0, shown.stderr
    assert "attn first-weight · toy" in shown.stdout and "L0" in shown.stdout


@pytest.fixture
def installed(monkeypatch):
    """The example plugin installed in this process: its package and *.dist-info on sys.path, and the registry
    asked again, so that it finds the plugin through its entry point as it would after pip install; its commands
    are added to a copy of the app's list, as `import attn_cli.cli` adds them (for this test only)."""
    from attn_cli.cli import app  # first, so that its import (in a fresh process) does not add them too
    from attn_cli.data import registry

    monkeypatch.syspath_prepend(str(PLUGIN))
    for cache in ("_manager", "_registry", "_measures", "_head_scores"):
        monkeypatch.setattr(registry, cache, None)
    monkeypatch.setattr(app, "registered_commands", list(app.registered_commands))
    registry.plugin_manager().hook.register_commands(app=app)
    return registry


def attn_here(*args):
    """attn in this process (Typer's CliRunner), as the terminal at 100 columns without colour would run it."""
    from typer.testing import CliRunner

    from attn_cli.cli import app

    return CliRunner().invoke(app, [str(arg) for arg in args], env={"COLUMNS": "100", "NO_COLOR": "1"})


def test_the_plugin_writes_its_json_and_its_figures(installed, workdir):
    result = attn_here("first-weight", "The cat sat.", "--model", "toy", "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["command"] == "first-weight" and document["tokens"] == ["The", "cat", "sat", "."]
    assert len(document["first_weight"]) == 1 and len(document["first_weight"][0]) == 4  # the toy: 1 layer × 4 heads
    for name in ("figure.svg", "page.html"):
        saved = attn_here("first-weight", "The cat sat.", "--model", "toy", "--save", workdir / name)
        assert saved.exit_code == 0, saved.output
    svg = (workdir / "figure.svg").read_text()
    assert "attn first-weight · toy" in svg and svg.count("<rect") > 4  # the title line and the grid's cells
    assert "first-token weight" in (workdir / "page.html").read_text()


def test_the_plugin_report_and_head_score_show_in_a_notebook(installed):
    """The plugin's report is drawn in a notebook, and its head score is a column of a heads report's table (the
    DataFrame a notebook reads) and a grid of its page, computed by Model.heads over two texts."""
    import attn_first_weight

    import attn_cli

    model = attn_cli.load("toy")
    report = attn_first_weight.first_weight(model, "the cat sat")
    html = report._repr_html_()
    assert html.startswith("<iframe") and "first-token weight" in html, html[:200]
    heads = model.heads(["the cat sat", "a dog ran off"])
    table = heads.to_arrow()
    assert {"first_mass", "first_mass_std", "first_mass_scored"} <= set(table.column_names)
    assert table.column("first_mass_scored").to_pylist() == [2] * 4
    assert "mean weight on the first token" in heads._repr_html_()
    assert installed.score_names()[-1] == "first_mass"


def test_attn_heads_computes_the_plugins_head_score(installed, workdir):
    """`attn heads` with the example installed: its first_mass (each head's mean weight on key 0) is in every
    head's scores, equal to the mean of column 0 of the weights attn inspect writes for the same text (the JSON's
    6 decimals: 1e-6); the terminal's top table and the SVG figure show it; a corpus store keeps it (its
    per-text column, `attn heads show`'s histogram line), and for attn without the plugin a store written with
    it holds another run."""
    import numpy as np
    import pyarrow.parquet as pq

    text = "The cat sat on the mat."
    heads = json.loads(attn_here("heads", text, "--model", "toy", "--json").stdout)["heads"]
    inspected = json.loads(attn_here("inspect", text, "--model", "toy", "--json").stdout)
    weights = {
        (layer["layer"], head["head"]): np.array(head["weights"], float)
        for layer in inspected["layers"]
        for head in layer["heads"]
    }
    assert len(heads) == len(weights) == 4
    for head in heads:
        assert list(head["scores"])[-1] == "first_mass" and head["scored"]["first_mass"] == 1
        expected = weights[head["layer"], head["head"]][:, 0].mean()
        assert abs(head["scores"]["first_mass"] - expected) <= 1e-6

    corpus, store, figure = workdir / "corpus.txt", workdir / "store", workdir / "heads.svg"
    corpus.write_text("the cat sat\na dog ran off\nthe cat sat on the mat\n")
    run = ("heads", "--file", corpus, "--model", "toy", "--store", store, "--per-text")
    stored = attn_here(*run, "--save", figure)
    assert stored.exit_code == 0, stored.output
    assert " +  first_mass " in stored.stdout
    assert "mean weight on the first token (first_mass)" in figure.read_text()  # its title, and the name --score takes
    column = pq.read_table(store / "texts.parquet").column("first_mass").to_pylist()
    assert len(column) == 3 * 4 and all(0 <= value <= 1 for value in column)
    shown = attn_here("heads", "show", store, "--layer", "0", "--head", "1")
    assert shown.exit_code == 0, shown.output
    assert " +  first_mass " in shown.stdout and "3 texts" in shown.stdout
    installed._head_scores = {}  # attn without the plugin
    again = attn_here(*run, "--resume")
    assert again.exit_code == 2, again.output
    assert "holds another run: its scores differ (the store's first_mass: a plugin's head score" in again.output


def test_without_the_plugin_there_is_no_such_command(workdir):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-m", "attn_cli", "--help"], cwd=workdir, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0 and "first-weight" not in result.stdout


def test_the_plugins_measure_is_shown_written_and_drawn_by_inspect(installed, workdir):
    """The example's Measure (--measure value: α_ij·‖v_j‖) through attn inspect with no attn_cli file changed for
    it: the terminal's heatmap title, the JSON field beside the weights (each weight times its key's value norm,
    recomputed here from the same run's --include qkv to 1e-5 relative), the SVG and the page."""
    import numpy as np

    figure = workdir / "value.svg"
    shown = attn_here("inspect", "The cat sat.", "--model", "toy", "--measure", "value", "--save", figure)
    assert shown.exit_code == 0, shown.output
    assert "weights × value norms α·‖v‖" in shown.stdout
    assert "weights × value norms α·‖v‖" in figure.read_text()
    written = attn_here("inspect", "The cat sat.", "--model", "toy", "--measure", "value", "--include", "qkv", "--json")
    assert written.exit_code == 0, written.output
    for head in json.loads(written.stdout)["layers"][0]["heads"]:
        weights, values = np.array(head["weights"], float), np.array(head["v"], float)
        expected = weights * np.linalg.norm(values, axis=-1)[None, :]
        assert np.allclose(np.array(head["value_norms"], float), expected, rtol=1e-5, atol=1e-7)
    refused = attn_here("inspect", "The cat sat.", "--model", "toy", "--measure", "nope")
    assert refused.exit_code == 2 and refused.stderr.count("\n") == 1
    assert "'nope' is not a measure" in refused.stderr and "weights, norm, value" in refused.stderr
