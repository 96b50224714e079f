"""Rich renderables for `attn circuits`: a table of every head's circuits, the composition grids (rows: the
reading head, columns: the writing head) and the strongest pairs. Sized to the width it is drawn at;
readable at 80 columns. Nothing here prints: the CLI does.
"""

from __future__ import annotations

import numpy as np
from rich.console import Group, RenderableType
from rich.style import Style
from rich.table import Table
from rich.text import Text

from attn_cli.analyses.circuits import MODE_NAMES, CircuitsReport
from attn_cli.data.document import counted
from attn_cli.render.heatmap import legend
from attn_cli.render.scale import Scale, luminance, stat

HEAD_TITLE = "Per head: singular values σ of QK = W_Q·W_Kᵀ and OV = W_V·W_O, copying, position"
SINGULAR_SHOWN = 3  # singular values per circuit in the table
GRID_ROWS = 24  # reading heads drawn one a row; more and the grid shows layer pairs (the strongest head pair)
NORM_NAMES = {"layernorm": "LayerNorm", "rmsnorm": "RMSNorm"}
FORMULAS = {"q": "‖OV_w·QK_r‖", "k": "‖OV_w·QK_rᵀ‖", "v": "‖OV_w·OV_r‖"}


class CircuitsView:
    def __init__(self, report: CircuitsReport):
        self.report = report

    def __rich_console__(self, console, options):
        yield render_circuits(self.report, options.max_width)


def render_circuits(report: CircuitsReport, width: int) -> RenderableType:
    parts: list[RenderableType] = [
        _header(report),
        Text(""),
        Text(HEAD_TITLE, style="bold"),
        _head_table(report),
        _head_notes(report),
        Text(""),
    ]
    if report.model.layers < 2:
        parts.append(Text("composition: one layer, so no head reads what another wrote", style="dim"))
    else:
        for mode in ("q", "k", "v"):
            parts += [composition_grid(report, mode, width), Text("")]
        parts.append(_top_pairs(report, width))
    if report.notes:
        parts += [Text("")] + [Text(f"· {note}", style="dim") for note in report.notes]
    return Group(*parts)


def _header(report: CircuitsReport) -> Text:
    info = report.model
    text = Text.assemble(
        ("attn circuits", "bold"),
        f" · {info.name} ({info.architecture}, {counted(info.layers, 'layer')} × "
        f"{counted(info.heads, 'head')}, head dim {info.head_dim}) · {report.device}, {report.dtype}\n",
    )
    processing = report.processing
    folded = " and ".join(NORM_NAMES[kind] for kind in processing["norms_folded"]) or "no norm"
    line = f"From the weights (no text is run), as TransformerLens loads them: {folded} folded into W_Q, W_K, W_V"
    if processing["centred"]:
        line += "; W_O, W_E, W_pos centred"
    if processing["unembedding"]:
        line += "; W_U centred"
    text.append(line + ".", style="dim")
    return text


def _head_table(report: CircuitsReport) -> Table:
    """layer.head, the top singular values and Frobenius norm of QK and OV, the copying score, the split."""
    table = Table(box=None, pad_edge=False, padding=(0, 1, 0, 0), header_style="bold")
    table.add_column("head", justify="right", no_wrap=True)
    for circuit in ("QK", "OV"):
        for rank in range(SINGULAR_SHOWN):
            table.add_column(f"{circuit} σ{rank + 1}" if rank == 0 else f"σ{rank + 1}", justify="right", no_wrap=True)
    table.add_column("copy", justify="right", no_wrap=True)
    split = any(head.split is not None for head in report.heads)
    if split:
        table.add_column("content", justify="right", no_wrap=True)
        table.add_column("position", justify="right", no_wrap=True)
    for head in report.heads:
        row = [Text(f"{head.layer}.{head.head}", style="bold")]
        for values in (head.qk_singular, head.ov_singular):
            row += [Text(stat(float(value))) for value in values[:SINGULAR_SHOWN]]
            row += [Text("")] * (SINGULAR_SHOWN - len(values[:SINGULAR_SHOWN]))
        row.append(_copying(head.copying))
        if split:
            shares = head.split or {}
            row += [_share(shares.get("content")), _share(shares.get("position"))]
        table.add_row(*row)
    return table


def _copying(value: float | None) -> Text:
    if value is None:
        return Text("—", style="dim")
    style = "bold green" if value >= 0.5 else "green" if value > 0 else "red" if value <= -0.5 else ""
    return Text(f"{value:+.2f}", style=style)


def _share(value: float | None) -> Text:
    if value is None:
        return Text("—", style="dim")
    return Text(f"{value:.2f}", style="bold" if value >= 0.5 else "")


def _head_notes(report: CircuitsReport) -> Text:
    text = Text(style="dim")
    text.append("copy: Σλ/Σ|λ| of the eigenvalues λ of W_E·OV·W_U (1: the head copies the token it reads); ")
    text.append(report.copying_note or "")
    if report.copying_note is None:
        text.append(f"W_U: {report.processing['unembedding']}")
    text.append(f"\ncontent/position: {report.position_note}")
    return text


# ---- the composition grids


def reader_grid(report: CircuitsReport, mode: str, max_rows: int = GRID_ROWS):
    """The part of a mode's (N, N) [writer, reader] scores that can be defined, turned to rows = reading heads
    (layers 1 …) and columns = writing heads (layers … L−2): (matrix, row names, column names, pooled).
    Past max_rows reading heads each cell is the strongest head pair of a (reader layer, writer layer)."""
    heads, layers = report.model.heads, report.model.layers - 1
    readers = report.composition[mode][:, heads:].T[:, :-heads]  # (N − H, N − H)
    if len(readers) <= max_rows:
        return (
            readers,
            [f"{index // heads + 1}.{index % heads}" for index in range(len(readers))],
            [f"{index // heads}.{index % heads}" for index in range(len(readers))],
            False,
        )
    blocks = readers.reshape(layers, heads, layers, heads)
    strongest = np.nan_to_num(blocks, nan=-np.inf).max(axis=(1, 3))
    pooled = np.where(np.isfinite(strongest), strongest, np.nan)
    return pooled, [f"L{layer + 1}" for layer in range(layers)], [f"L{layer}" for layer in range(layers)], True


def composition_grid(report: CircuitsReport, mode: str, width: int) -> RenderableType:
    """Rows: reading heads, columns: writing heads; a cell the score, blank where not an earlier layer."""
    heads = report.model.heads
    readers, row_names, col_names, pooled = reader_grid(report, mode)
    title = f"{MODE_NAMES[mode]} {FORMULAS[mode]}/(‖OV_w‖‖{'OV' if mode == 'v' else 'QK'}_r‖)"
    scale = Scale.magnitude(readers)
    label_width = max(len(name) for name in row_names) + 1
    cell = next((size for size in (4, 2, 1) if label_width + len(col_names) * (size + (size == 4)) <= width), 0)
    if cell == 0:
        return Text(
            f"{MODE_NAMES[mode]}: {len(col_names)} columns do not fit {width}; see --json or --save", style="yellow"
        )
    lines = [Text(title, style="bold"), _column_header(col_names, label_width, cell, 1 if pooled else heads)]
    for name, row in zip(row_names, readers):
        line = Text(name.rjust(label_width - 1) + " ", style="dim")
        for value in row:
            line.append_text(_cell(value, cell, scale))
        line.rstrip()
        lines.append(line)
    axes = (
        "rows: the reading layer, columns: the writing layer; a cell: their strongest head pair"
        if pooled
        else "rows: the reading head (layer.head), columns: the writing head; blank: not an earlier layer"
    )
    short = "rows read, columns write" + ("; a cell: the strongest head pair" if pooled else "")
    lines.append(Text(axes if len(axes) <= width else short, style="dim"))
    lines.append(legend(scale, width, "score"))
    return Group(*lines)


def _column_header(names: list[str], label_width: int, cell: int, group: int) -> Text:
    """Writer names over their cells when they fit a cell, else the layer ("L0") over its group of heads."""
    text = Text(" " * label_width, style="dim")
    if cell == 4:
        text.append(" ".join(name.rjust(4) for name in names))
        return text
    line = ""
    for start in range(0, len(names), group):
        layer = names[start].split(".")[0].removeprefix("L")
        line += f"L{layer}"[: group * cell].ljust(group * cell)
    text.append(line.rstrip())
    return text


def _cell(value: float, cell: int, scale: Scale) -> Text:
    if not np.isfinite(value):
        return Text(" " * (cell + (cell == 4)))
    colour = Style(color=scale.colour(value))
    if cell == 4:
        shown = "1.0" if value >= 0.995 else f"{value:.2f}"[1:] if value < 1 else f"{value:.1f}"
        ink = "black" if luminance(scale.rgb(value)) > 0.45 else "white"  # as the heatmaps write numbers
        return Text(shown.rjust(4) + " ", style=Style(color=ink, bgcolor=scale.colour(value)))
    return Text(scale.shade(value) * cell, style=colour)


def _top_pairs(report: CircuitsReport, width: int) -> Group:
    rows: list[RenderableType] = [
        Text("Strongest pairs (writer→reader score, ×: over the median of all pairs)", style="bold")
    ]
    for mode in ("q", "k", "v"):
        line = Text(f" {mode.upper()} ", style="bold")
        for pair in report.top(mode):
            entry = Text(f"  {pair.writer[0]}.{pair.writer[1]}→{pair.reader[0]}.{pair.reader[1]} {pair.score:.2f}")
            if pair.over_median is not None:
                entry.append(f" ×{pair.over_median:.1f}", style="dim")
            if len(line) + len(entry) > width:
                break
            line.append_text(entry)
        line.no_wrap = True
        rows.append(line)
    return Group(*rows)
