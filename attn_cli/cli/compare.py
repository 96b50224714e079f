"""`attn compare TEXT`: the real model beside counterfactual variants, head by head."""

from __future__ import annotations

from typing import Annotated

import typer

from attn_cli.cli import options as opt
from attn_cli.cli.common import read_text, registered_view, run_and_emit, save_figure
from attn_cli.cli.edge import user_errors
from attn_cli.cli.inspect import SAVE_HELP, include_of
from attn_cli.cli.loading import Loading, loads_model
from attn_cli.cli.output import Output, writes_output

EPILOG = (
    "Variants: shared-k (Q := K), no-scale (no 1/√d), raw (softmax(X·Xᵀ)·X, no projections), "
    "scoring=dot, scoring=scaled-dot, scoring=cosine.\n\n"
    "Examples:\n\n"
    '  attn compare "Time flies like an arrow."\n\n'
    '  attn compare "The cat sat on the mat" --variant no-scale --variant raw --layer 0\n\n'
    '  attn compare "Hello" --propagate --json | jq \'.diff["shared-k"].summary\''
)


@loads_model
@writes_output(save=SAVE_HELP)
def compare_command(
    text: opt.Text,
    variant: Annotated[
        list[str] | None,
        typer.Option(
            "--variant", "-V", help="A counterfactual to set beside the model (repeatable). Default: shared-k."
        ),
    ] = None,
    propagate: opt.Propagate = False,
    loading: Loading = Loading(),
    layer: opt.Layer = "all",
    head: opt.Head = "all",
    top_k: opt.TopK = None,
    out: Output = Output(),
    include: opt.IncludeOpt = None,
    truncate: opt.Truncate = False,
    full: opt.Full = False,
) -> None:
    """Set the real model beside counterfactuals: shared-K, no √d scale, raw softmax(XXᵀ)X, other scorings."""
    with user_errors():
        json_wanted = out.check()
        text = read_text(text)

        def run(progress, lazy: bool):
            loaded = loading.load()
            return loaded.compare(
                text,
                variants=variant or ("shared-k",),
                propagate=propagate,
                layers=layer,
                heads=head,
                top_k=top_k,
                truncate=truncate,
                full=full,
                include=include_of(include),
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
