"""`attn attribute TEXT --method alti|globenc|value-zeroing`: contributions through whole layers, rolled out."""

from __future__ import annotations

from typing import Annotated

import typer

from attn_cli.cli import options as opt
from attn_cli.cli.common import check_outputs, per_head_of, read_text, run_and_emit, save_figure
from attn_cli.cli.edge import user_errors
from attn_cli.cli.loading import Loading, loads_model

EPILOG = (
    "Each layer's token-to-token contributions count the residual path, the value vectors and the "
    "LayerNorms (post-LN BERT-family encoders such as minilm); the layers' matrices are multiplied, first to "
    "last. alti: Ferrando et al. 2022; globenc: Modarressi et al. 2022; value-zeroing: Mohebbi et al. 2023 "
    "(T extra runs of every layer); gradient: Chefer et al. 2021, R = I, R += E_h[(∇A ⊙ A)⁺]·R per layer, "
    "for --target; flow: Abnar & Zuidema 2020, max-flow through the residual-mixed layers (≤ 32 tokens).\n\n"
    "Examples:\n\n"
    '  attn attribute "The cat sat on the mat."\n\n'
    '  attn attribute "The cat sat on the mat." --method value-zeroing --vs attention\n\n'
    '  attn attribute "The cat sat on the mat." --method gradient --target 7\n\n'
    "  attn attribute \"Hello\" --json | jq '.attribution'"
)


@loads_model
def attribute_command(
    text: opt.Text,
    loading: Loading = Loading(),
    method: Annotated[
        str, typer.Option("--method", metavar="NAME", help="alti, globenc, value-zeroing, gradient or flow.")
    ] = "alti",
    layers: Annotated[
        str,
        typer.Option("--layers", "--layer", "-l", help="The consecutive layers to roll out: all, or a range like 0-3."),
    ] = "all",
    vs: Annotated[
        str | None,
        typer.Option(
            "--vs", metavar="attention", help="Show the raw attention rollout over the same layers beside the method."
        ),
    ] = None,
    target: Annotated[
        str | None,
        typer.Option(
            "--target",
            metavar="TOKEN|LABEL|INDEX",
            help="gradient: the next token whose logit is explained (a language model; default its top prediction), "
            "a class's label or index (a sequence classifier; default the top class), or a dimension of the "
            "mean-pooled embedding (other models; default the embedding's norm).",
        ),
    ] = None,
    top_k: opt.TopK = None,
    as_json: opt.AsJson = False,
    output: opt.Output = None,
    save: opt.SaveAttribution = None,
    dpi: opt.Dpi = None,
    scale: opt.ScaleOpt = opt.ColourScale.fixed,
    truncate: opt.Truncate = False,
) -> None:
    """Where each output token's information comes from, through whole layers (ALTI, GlobEnc, value zeroing,
    gradient-weighted attention, attention flow)."""
    with user_errors():
        json_wanted = check_outputs(save, as_json, output, dpi)
        text = read_text(text)

        def run(progress, lazy: bool):
            loaded = loading.load()
            return loaded.attribute(
                text, method=method, layers=layers, top_k=top_k, truncate=truncate, vs=vs, target=target
            )

        run_and_emit(
            run,
            label=loading.label,
            json_wanted=json_wanted,
            output=output,
            save=save,
            render=lambda report: render_attribution_view(report, per_head_of(scale)),
            figure=lambda report, path: save_figure(report, path, dpi=dpi, scale=scale),
        )


def render_attribution_view(report, per_head: bool = False):
    from attn_cli.render.attribution_view import render_attribution

    return render_attribution(report, per_head)
