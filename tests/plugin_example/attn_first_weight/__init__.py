"""An example attn plugin: how much of each head's weight goes to the first token ([CLS] / BOS).

It adds, through attn's hooks only:
- an analysis: `first_weight(model, text)` → a FirstWeightReport (a layers × heads grid), drawn in the terminal
  as a table, as an SVG figure and HTML page, and in a notebook;
- a command, `attn first-weight TEXT [--model M] [--json] [--save FILE]`;
- a head score, `first_mass`: a head's mean weight on the first key;
- a measure, `attn inspect --measure value`: each weight times the norm of its key's value vector, α_ij·‖v_j‖
  (the value-weighted norms without the output projection).

Importing it imports no torch: the engine uses attn's Python API, the drawing attn's render modules, each
imported when it is first used.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import typer

from attn_cli.data.document import SCHEMA_VERSION, Document
from attn_cli.data.registry import AnalysisSpec, Figure, HeadScore, Measure, hookimpl

COMMAND = "first-weight"


@dataclass
class FirstWeightReport(Document):
    text: str
    model: object  # attn_cli's ModelInfo
    tokens: list  # attn_cli's Tokens
    grid: list[list[float]]  # (layers, heads): each head's mean weight on the first token, over its rows

    def to_json_dict(self) -> dict:
        return {
            "schema_version": SCHEMA_VERSION,
            "command": COMMAND,
            "model": self.model.name,
            "text": self.text,
            "tokens": [token.text for token in self.tokens],
            "first_weight": self.grid,
        }


def first_weight(model, text: str) -> FirstWeightReport:
    """The engine, on attn's public API: inspect every head, keep the mean of each one's first column."""
    report = model.inspect(text)
    grid = [[float(head.weights[:, 0].mean()) for head in layer.heads] for layer in report.layers]
    return FirstWeightReport(text, report.model, report.tokens, grid)


def terminal(report: FirstWeightReport, panels=None, per_head: bool = False):
    from rich.table import Table

    table = Table(title=f"attn {COMMAND} · {report.model.name}: mean weight on {report.tokens[0].text!r}")
    table.add_column("layer")
    for head in range(len(report.grid[0])):
        table.add_column(f"h{head}", justify="right")
    for layer, row in enumerate(report.grid):
        table.add_row(f"L{layer}", *(f"{value:.2f}" for value in row))
    return table


def _labels(report):
    return [f"L{layer}" for layer in range(len(report.grid))], [f"h{head}" for head in range(len(report.grid[0]))]


def figure_items(report: FirstWeightReport, per_head: bool = False):
    import numpy as np

    from attn_cli.render.scale import Scale
    from attn_cli.render.svg import Heat

    rows, cols = _labels(report)
    grid = np.array(report.grid)
    return [Heat("first-token weight", grid, Scale.weights(), rows=rows, cols=cols, noun="weight")]


def figure_page(report: FirstWeightReport, per_head: bool = False) -> dict:
    import numpy as np

    from attn_cli.render.page_parts import one_run

    rows, cols = _labels(report)
    run = one_run("first-token weight", np.array(report.grid), rowTokens=rows, colTokens=cols, noun="", lines=False)
    return {"runs": [run], "start": [0, 0]}


def first_mass(weights, allowed, tokens):
    """weights (h, T, T), allowed (T, T), the text's tokens → (h,): each head's mean weight on key 0."""
    return weights[:, :, 0].mean(-1)


@hookimpl
def register_analyses(register) -> None:
    register(
        AnalysisSpec(
            COMMAND,
            FirstWeightReport,
            run=first_weight,
            terminal=terminal,
            figure=Figure(figure_items, figure_page),
            help="each head's mean weight on the first token",
        )
    )


@hookimpl
def register_head_scores(register) -> None:
    register(HeadScore("first_mass", first_mass, title="mean weight on the first token"))


def value_weighted(layer, heads, kv_heads, weights, window):
    """α_ij·‖v_j‖ over the window's cells: (h, rows, cols). layer.v is (H_kv, T, D), one per key/value head."""
    if weights is None:  # an empty window
        return None
    start, stop = window.cols
    values = layer.v[[kv or 0 for kv in kv_heads], start:stop].float().norm(dim=-1)  # (h, cols)
    return weights * values[:, None, :]


@hookimpl
def register_measures(register) -> None:
    register(
        Measure(
            "value", "weights × value norms α·‖v‖", field="value_norms", column="value_norm", compute=value_weighted
        )
    )


@hookimpl
def register_commands(app) -> None:
    @app.command(COMMAND)
    def first_weight_command(
        text: str = typer.Argument(..., help="The text."),
        model: str = typer.Option("minilm", "--model", help="A model name or directory."),
        as_json: bool = typer.Option(False, "--json", help="Write the JSON document to stdout."),
        save: Path | None = typer.Option(None, "--save", help="Write the figure: FILE.svg, .png, .pdf or .html."),
    ) -> None:
        """Each head's mean weight on the first token, as a layers × heads grid (an example plugin)."""
        import attn_cli
        from attn_cli.cli.common import registered_view, run_and_emit, save_figure
        from attn_cli.cli.edge import user_errors

        with user_errors():
            run_and_emit(
                lambda progress, lazy: first_weight(attn_cli.load(model, device="cpu"), text),
                label=model,
                json_wanted=as_json,
                output=None,
                save=save,
                render=registered_view(),
                figure=save_figure,
            )
