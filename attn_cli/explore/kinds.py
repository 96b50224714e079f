"""What the explorer draws differently for an encoder–decoder pair and for an image (no Textual here).

A pair (analyses/seq2seq.PairReport) is shown one stack at a time — encoder, decoder or cross-attention — each
an InspectReport the usual views draw; its header lists the source's and the target's tokens and says what the
stack's rows and columns are. An image (InspectReport.image) is drawn as render/image_view draws it for
`attn inspect --image`: the selected head's attention from the query token laid over the picture.
"""

from __future__ import annotations

import numpy as np
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.segment import Segment
from rich.text import Text

from attn_cli.analyses.inspect_report import HeadReport
from attn_cli.explore.view import variant_label

STACK_KEY = "c"  # the key that shows the next stack (app.py binds it; the header names it)


def header_view(look, variant: str, stack: str | None, command: str = "attn explore") -> RenderableType:
    """The lines above the body: the model, then the tokens and the variant (a pair, which has no variants: the
    source's and the target's tokens and the stack shown; an image: its file and patch grid)."""
    from attn_cli.render.terminal import header

    variant_line = Text.assemble(("variant ", "dim"), (variant_label(variant), "bold magenta"))
    if variant != "baseline":
        variant_line.append(" beside the baseline", style="dim")
    from attn_cli.analyses.seq2seq import PairReport

    pair = isinstance(look, PairReport)  # its stacks are InspectReports; it has no image
    if not pair and look.image is not None:
        from attn_cli.render.image_view import header_line, image_lines

        return Group(header_line(look, command), image_lines(look.image), variant_line)
    if not pair or stack is None:  # a pair always has a stack shown
        return Group(header(look, command), variant_line)
    from attn_cli.render.seq2seq_view import STACK_TITLES
    from attn_cli.render.terminal import model_line, unit_list

    axes = STACK_TITLES[stack].split(" · ")[-1]  # 'target rows (queries) × source columns (keys)'
    return Group(
        model_line(look, command),
        unit_list(look.tokens, "source tokens"),
        unit_list(look.target_tokens, "target tokens (decoder inputs, teacher-forced)"),
        Text.assemble(("stack ", "dim"), (stack, "bold magenta"), (f": {axes} · {STACK_KEY}: next stack", "dim")),
    )


def picture_view(report, head: HeadReport, layer: int, query: int, scores: bool, label: str = "") -> RenderableType:
    """The head's attention (or scores) from token `query` over the image, with the legend of `attn inspect`, the
    query patch outlined."""
    from attn_cli.render.image_view import Picture, legend

    grid = report.image
    matrix = head.scores if scores else head.weights
    row = grid.on_grid(np.asarray(matrix)[query])  # (rows, cols): the query's values on the patches
    what = "scores" if scores else "attention"
    title = f"{label + ': ' if label else ''}layer {layer} · head {head.head} · {what} from {query}:"
    title += report.tokens[query].text
    return Group(Text(title, style="bold"), Picture(grid, row, query=query_patch(grid, query)), legend(row, what))


def query_patch(grid, query: int) -> tuple[int, int] | None:
    """Token `query`'s (row, column) on the patch grid: outlined on the pictures as `attn inspect --query` does;
    None for the model's own tokens ([CLS] first), which have no place on the image."""
    return divmod(query - len(grid.specials), grid.cols) if query >= len(grid.specials) else None


def pictures_view(
    report,
    base: HeadReport,
    other: HeadReport | None,
    other_name: str,
    other_error: str,
    layer: int,
    query: int,
    scores: bool,
) -> RenderableType:
    """The selected head's picture; with a variant, the variant's below the baseline's."""
    if other is None:
        parts = [picture_view(report, base, layer, query, scores)]
    else:
        parts = [
            picture_view(report, base, layer, query, scores, "baseline"),
            Text(""),
            picture_view(report, other, layer, query, scores, variant_label(other_name)),
        ]
    return Group(*parts, *([Text(other_error, style="yellow")] if other_error else []))


def heads_pictures(report, mark: tuple[int, int], query: int) -> RenderableType:
    """Every head's attention from the query token over the image, small (render/image_view.SmallPictures), the
    selected head's title marked ▸ (in front: a picture's title is cut to its width)."""
    from attn_cli.render.image_view import SmallPictures

    grid = report.image
    pictures = [
        (
            f"{'▸' if (layer, head.head) == mark else ''}L{layer} H{head.head}",
            grid.on_grid(np.asarray(head.weights)[query]),
        )
        for layer, head in report.heads()
    ]
    return Group(
        Text(f"Every head from {query}:{report.tokens[query].text}", style="bold"),
        SmallPictures(grid, pictures, query_patch(grid, query)),
        Text("each from its least to its most attended patch", style="dim"),
    )


def pictures_width(report) -> int:
    """Columns heads_pictures takes for a layer's heads a row (SmallPictures' pictures, at least 6 wide)."""
    across = max(len(layer.heads) for layer in report.layers)
    return across * (max(6, report.image.cols) + 1)


class NoColour:
    """`renderable` drawn as on a console without colour (render/image_view's pictures then shade the image and
    the attention): under NO_COLOR Textual keeps its console in colour and drops the colours on output, which
    would leave a picture of '▀' in one colour."""

    def __init__(self, renderable):
        self.renderable = renderable

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        plain = Console(width=options.max_width, no_color=True, color_system=None)
        for line in plain.render_lines(self.renderable, options.update(width=options.max_width), pad=False):
            yield from line
            yield Segment.line()


def query_below(query: int, step: int, report) -> int:
    """↑ ↓ on the selected head: the next query row (`step` = ±1); over an image, the patch `step` rows down the
    patch grid (the model's own tokens, [CLS] first, lie above its first row)."""
    grid = report.image
    if grid is None:
        return query + step
    first = len(grid.specials)
    if query < first:
        return query + step
    moved = query + step * grid.cols
    if moved < first:  # above the first row: the last of the model's own tokens ([CLS] for ViT), if any
        return first - 1 if first else query
    return moved if moved < len(report.tokens) else query
