"""`attn rollout TEXT`: attention rolled out across layers (Abnar & Zuidema 2020)."""

from __future__ import annotations

from enum import Enum
from typing import Annotated

import typer

from attn_cli.cli import options as opt
from attn_cli.cli.common import read_text, registered_view, run_and_emit, save_figure
from attn_cli.cli.edge import user_errors
from attn_cli.cli.loading import Loading, loads_model
from attn_cli.cli.output import Output, figure_help, writes_output
from attn_cli.plumbing.errors import BadInput

EPILOG = (
    "Each layer's heads are fused (mean by default) and mixed half and half with the identity for the "
    "residual path, rows renormalised; the layers are multiplied, first to last.\n\n"
    "Examples:\n\n"
    '  attn rollout "The cat sat on the mat."\n\n'
    '  attn rollout "The cat sat on the mat." --layer 0-2 --head-fusion max\n\n'
    "  attn rollout \"Hello\" --json | jq '.rollout'\n\n"
    "  attn rollout --image cat.png --model facebook/dinov2-small"
)


class HeadFusion(str, Enum):
    mean = "mean"
    max = "max"
    min = "min"


@loads_model
@writes_output(save=figure_help("the rollout matrix"))
def rollout_command(
    text: Annotated[
        str | None,
        typer.Argument(metavar="TEXT", show_default=False, help="The text to roll out; - reads it from stdin."),
    ] = None,
    loading: Loading = Loading(),
    layer: opt.LayerRange = "all",
    head_fusion: Annotated[
        HeadFusion, typer.Option("--head-fusion", help="How each layer's heads become one: mean, max or min.")
    ] = HeadFusion.mean,
    top_k: opt.TopK = None,
    out: Output = Output(),
    truncate: opt.Truncate = False,
    image: opt.Image = None,
) -> None:
    """Roll attention out across layers: which input tokens each output token comes from."""
    with user_errors():
        json_wanted = out.check()
        if image is not None:
            from attn_cli.cli.image import check_image_alone

            check_image_alone([text] if text else [], image)
        else:
            if text is None:
                raise BadInput("no text given", "pass a sentence, - to read it from stdin, or --image FILE")
            text = read_text(text)

        def run(progress, lazy: bool):
            loaded = loading.load()
            return loaded.rollout(
                text, image=image, layers=layer, head_fusion=head_fusion.value, top_k=top_k, truncate=truncate
            )

        run_and_emit(
            run,
            label=loading.label,
            json_wanted=json_wanted,
            output=out.output,
            save=out.save,
            render=registered_view(per_head=out.per_head),
            figure=lambda report, path: save_figure(report, path, dpi=out.dpi, scale=out.scale),
        )
