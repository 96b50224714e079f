"""`attn steps TEXT`: one head through the attention formula, stage by stage."""

from __future__ import annotations

from typing import Annotated

import typer

from attn_cli.cli import options as opt
from attn_cli.cli.common import (
    check_files,
    check_outputs,
    load_model,
    model_options,
    per_head_of,
    read_text,
    run_and_emit,
    save_figure,
)
from attn_cli.cli.edge import user_errors

EPILOG = (
    "Examples:\n\n"
    '  attn steps "I Love Nature Language Processing"\n\n'
    '  attn steps "早上好" --head 2 -O causal=true\n\n'
    '  attn steps "I Love Nature Language Processing" -O shared_projection=true -O heads=1\n\n'
    '  attn steps "Hello, how are you?" --model minilm --layer 0 --head 2'
)


def steps_command(
    text: opt.Text,
    model: Annotated[
        str | None,
        typer.Option("--model", "-m", help="toy (default here), minilm, or a Hugging Face model directory / hub id."),
    ] = None,
    option: opt.ModelOptions = None,
    layer: Annotated[str, typer.Option("--layer", "-l", help="The layer to walk.")] = "0",
    head: Annotated[str, typer.Option("--head", "-H", help="The head to walk.")] = "0",
    as_json: opt.AsJson = False,
    output: opt.Output = None,
    save: opt.Save = None,
    dpi: opt.Dpi = None,
    scale: opt.ScaleOpt = opt.ColourScale.fixed,
    device: opt.Device = "auto",
    dtype: opt.DTypeOpt = opt.DType.auto,
) -> None:
    """Walk one head through X, Q, K, V, Q·Kᵀ, ÷√d, mask, softmax, ·V, concat and W_O on your sentence."""
    with user_errors():
        json_wanted = check_outputs(save, as_json, output, dpi)
        check_files({"output": output, "save": save, "model": model, "option": option})
        text = read_text(text)
        options = model_options(option)
        model = "toy" if model is None else model

        def run(progress, lazy: bool):
            loaded = load_model(model, device=device, dtype=dtype, options=options)
            return loaded.steps(text, layer=layer, head=head)

        run_and_emit(
            run,
            label=f"running {model} …",
            json_wanted=json_wanted,
            output=output,
            save=save,
            render=lambda report: render_steps_view(report, per_head_of(scale)),
            figure=lambda report, path: save_figure(report, path, dpi=dpi, scale=scale),
        )


def render_steps_view(report, per_head: bool = False):
    from attn_cli.render.steps_view import render_steps

    return render_steps(report, per_head)
