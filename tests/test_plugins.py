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


def test_the_plugin_writes_its_json_and_its_figures(workdir):
    result = _attn("first-weight", "The cat sat.", "--model", "toy", "--json", cwd=workdir)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["command"] == "first-weight" and document["tokens"] == ["The", "cat", "sat", "."]
    assert len(document["first_weight"]) == 1 and len(document["first_weight"][0]) == 4  # the toy: 1 layer × 4 heads
    for name in ("figure.svg", "page.html"):
        saved = _attn("first-weight", "The cat sat.", "--model", "toy", "--save", name, cwd=workdir)
        assert saved.returncode == 0, saved.stderr
    svg = (workdir / "figure.svg").read_text()
    assert "attn first-weight · toy" in svg and svg.count("<rect") > 4  # the title line and the grid's cells
    assert "first-token weight" in (workdir / "page.html").read_text()


def test_the_plugin_report_shows_in_a_notebook_and_its_head_score_is_registered(workdir):
    code = (
        "import attn_cli, attn_first_weight\n"
        "from attn_cli.data.registry import plugins\n"
        "report = attn_first_weight.first_weight(attn_cli.load('toy'), 'the cat sat')\n"
        "html = report._repr_html_()\n"
        "assert html.startswith('<iframe') and 'first-token weight' in html, html[:200]\n"
        "print(list(plugins().head_scores))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(PLUGIN)])}
    result = subprocess.run([sys.executable, "-c", code], cwd=workdir, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['first_mass']"


def test_without_the_plugin_there_is_no_such_command(workdir):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-m", "attn_cli", "--help"], cwd=workdir, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0 and "first-weight" not in result.stdout


def test_the_plugins_measure_is_shown_written_and_drawn_by_inspect(workdir):
    """The example's Measure (--measure value: α_ij·‖v_j‖) through attn inspect with no attn_cli file changed for
    it: the terminal's heatmap title, the JSON field beside the weights (each weight times its key's value norm,
    recomputed here from the same run's --include qkv to 1e-5 relative), the SVG and the page."""
    import numpy as np

    shown = _attn("inspect", "The cat sat.", "--model", "toy", "--measure", "value", "--save", "value.svg", cwd=workdir)
    assert shown.returncode == 0, shown.stderr
    assert "weights × value norms α·‖v‖" in shown.stdout
    assert "weights × value norms α·‖v‖" in (workdir / "value.svg").read_text()
    written = _attn(
        "inspect", "The cat sat.", "--model", "toy", "--measure", "value", "--include", "qkv", "--json", cwd=workdir
    )
    assert written.returncode == 0, written.stderr
    for head in json.loads(written.stdout)["layers"][0]["heads"]:
        weights, values = np.array(head["weights"], float), np.array(head["v"], float)
        expected = weights * np.linalg.norm(values, axis=-1)[None, :]
        assert np.allclose(np.array(head["value_norms"], float), expected, rtol=1e-5, atol=1e-7)
    refused = _attn("inspect", "The cat sat.", "--model", "toy", "--measure", "nope", cwd=workdir)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert "'nope' is not a measure" in refused.stderr and "weights, norm, value" in refused.stderr
