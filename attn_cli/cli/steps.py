"""`attn steps TEXT`: one head through the attention formula, stage by stage."""

from __future__ import annotations

import dataclasses
from typing import Annotated

import typer

from attn_cli.cli import options as opt
from attn_cli.cli.common import read_text, registered_view, run_and_emit, save_figure
from attn_cli.cli.edge import user_errors
from attn_cli.cli.inspect import SAVE_HELP
from attn_cli.cli.loading import Loading, loads_model
from attn_cli.cli.output import Output, writes_output

EPILOG = (
    "The model is the toy unless --model (or ATTN_MODEL) names another.\n\n"
    "Examples:\n\n"
    '  attn steps "I Love Nature Language Processing"\n\n'
    '  attn steps "早上好" --head 2 -O causal=true\n\n'
    '  attn steps "I Love Nature Language Processing" -O shared_projection=true -O heads=1\n\n'
    '  attn steps "Hello, how are you?" --model minilm --layer 0 --head 2'
)


@loads_model
@writes_output(save=SAVE_HELP)
def steps_command(
    text: opt.Text,
    loading: Loading = Loading(),
    layer: Annotated[str, typer.Option("--layer", "-l", help="The layer to walk.")] = "0",
    head: Annotated[str, typer.Option("--head", "-H", help="The head to walk.")] = "0",
    out: Output = Output(),
) -> None:
    """Walk one head through X, Q, K, V, Q·Kᵀ, ÷√d, mask, softmax, ·V, concat and W_O on your sentence."""
    with user_errors():
        json_wanted = out.check()
        text = read_text(text)
        if loading.model is None:  # the textbook lab's command: the toy unless a model is named
            loading = dataclasses.replace(loading, model="toy")

        def run(progress, lazy: bool):
            return loading.load().steps(text, layer=layer, head=head)

        run_and_emit(
            run,
            label=loading.label,
            json_wanted=json_wanted,
            output=out.output,
            save=out.save,
            render=registered_view(per_head=out.per_head),
            figure=lambda report, path: save_figure(report, path, dpi=out.dpi, scale=out.scale),
        )
