"""`attn routes TEXT`: the information-flow graph of one prediction (Ferrando & Voita 2024)."""

from __future__ import annotations

from typing import Annotated

import typer

from attn_cli.cli import options as opt
from attn_cli.cli.common import read_text, registered_view, run_and_emit, save_figure
from attn_cli.cli.edge import user_errors
from attn_cli.cli.loading import Loading, loads_model
from attn_cli.cli.output import Output, writes_output

EPILOG = (
    "Every layer's residual stream is split into its parts (each source token through each head, the "
    "residual, the FFN), each weighted by its L1 proximity to the whole; the graph is kept from the explained "
    "state down through edges above --threshold. Pre-norm decoders (GPT-2, Llama, Qwen, Mistral, --model "
    "lab).\n\n"
    "Examples:\n\n"
    '  attn routes "the cat saw a dog . the cat saw a dog" --model lab --target dog\n\n'
    '  attn routes "the cat saw a dog" --model lab --position 2 --threshold 0.1\n\n'
    "  attn routes \"the cat saw a dog\" --model lab --json | jq '.edges'"
)


@loads_model
@writes_output(save="Also save the route graph: FILE.svg, .png, .pdf or .html (hover an edge).", scale=False)
def routes_command(
    text: opt.Text,
    loading: Loading = Loading(),
    target: Annotated[
        str | None,
        typer.Option(
            "--target", metavar="TOKEN", help="Explain the prediction that produced TOKEN's last occurrence in TEXT."
        ),
    ] = None,
    threshold: Annotated[
        float, typer.Option("--threshold", metavar="τ", help="Keep edges whose share is above τ (0 to 1).")
    ] = 0.04,
    position: Annotated[
        int | None,
        typer.Option("--position", metavar="P", help="Explain the prediction made at token P (default the last)."),
    ] = None,
    out: Output = Output(),
    truncate: opt.Truncate = False,
) -> None:
    """Which tokens, heads and FFN blocks one prediction is built from (information-flow routes)."""
    with user_errors():
        json_wanted = out.check()
        text = read_text(text)

        def run(progress, lazy: bool):
            loaded = loading.load()
            return loaded.routes(text, target=target, threshold=threshold, position=position, truncate=truncate)

        run_and_emit(
            run,
            label=loading.label,
            json_wanted=json_wanted,
            output=out.output,
            save=out.save,
            render=registered_view(),
            figure=lambda report, path: save_figure(report, path, dpi=out.dpi),
        )
