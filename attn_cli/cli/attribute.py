"""`attn attribute TEXT --method alti|globenc|value-zeroing|…`: contributions through whole layers, rolled out;
`--method alti-logit --explain TOKEN`: one next-token logit split over the input tokens and the heads."""

from __future__ import annotations

from typing import Annotated

import typer

from attn_cli.cli import options as opt
from attn_cli.cli.common import read_text, registered_view, run_and_emit, save_figure
from attn_cli.cli.edge import user_errors
from attn_cli.cli.loading import Loading, loads_model
from attn_cli.cli.output import Output, figure_help, writes_output

EPILOG = (
    "Each layer's token-to-token contributions count the residual path, the value vectors and the "
    "LayerNorms (post-LN BERT-family encoders such as minilm); the layers' matrices are multiplied, first to "
    "last. alti: Ferrando et al. 2022 (also on pre-norm decoders: GPT-2, Llama, --model lab); globenc: Modarressi et al. 2022; value-zeroing: Mohebbi et al. 2023 "
    "(T extra runs of every layer); gradient: Chefer et al. 2021, R = I, R += E_h[(∇A ⊙ A)⁺]·R per layer, "
    "for --explain; flow: Abnar & Zuidema 2020, max-flow through the residual-mixed layers (≤ 32 tokens); "
    "alti-logit: Ferrando et al. 2023, the logit of --explain TOKEN after the text split over the input tokens "
    "and the heads (pre-norm decoders with their LM head).\n\n"
    "Examples:\n\n"
    '  attn attribute "The cat sat on the mat."\n\n'
    '  attn attribute "The cat sat on the mat." --method value-zeroing --vs attention\n\n'
    '  attn attribute "The cat sat on the mat." --method gradient --explain 7\n\n'
    '  attn attribute "the cat saw a dog . the cat saw a" --model lab --method alti-logit --explain dog\n\n'
    "  attn attribute \"Hello\" --json | jq '.attribution'"
)


@loads_model
@writes_output(save=figure_help("the rolled-out contributions (and the attention rollout with --vs)"))
def attribute_command(
    text: opt.Text,
    loading: Loading = Loading(),
    method: Annotated[
        str,
        typer.Option("--method", metavar="NAME", help="alti, alti-logit, globenc, value-zeroing, gradient or flow."),
    ] = "alti",
    layer: opt.LayerRange = "all",
    vs: Annotated[
        str | None,
        typer.Option(
            "--vs", metavar="attention", help="Show the raw attention rollout over the same layers beside the method."
        ),
    ] = None,
    explain: Annotated[
        str | None,
        typer.Option(
            "--explain",
            metavar="TOKEN|LABEL|INDEX",
            help="alti-logit (required) and gradient: the next token whose logit is explained (a language model; "
            "gradient's default its top prediction), "
            "a class's label or index (a sequence classifier; default the top class), or a dimension of the "
            "mean-pooled embedding (other models; default the embedding's norm).",
        ),
    ] = None,
    top_k: opt.TopK = None,
    out: Output = Output(),
    truncate: opt.Truncate = False,
) -> None:
    """Where each output token's information comes from, through whole layers (ALTI, GlobEnc, value zeroing,
    gradient-weighted attention, attention flow), or one next-token logit's parts (ALTI-Logit)."""
    with user_errors():
        json_wanted = out.check()
        text = read_text(text)

        def run(progress, lazy: bool):
            loaded = loading.load()
            return loaded.attribute(
                text, method=method, layers=layer, top_k=top_k, truncate=truncate, vs=vs, explain=explain
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
