"""`attn steps TEXT`: one head through the attention formula, stage by stage."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from attn_cli.atomic import check_all_writable
from attn_cli.cli import options as opt
from attn_cli.cli.common import check_outputs, run_and_emit, run_options, toy_settings
from attn_cli.cli.edge import user_errors

EPILOG = (
    "Examples:\n\n"
    "  attn steps \"I Love Nature Language Processing\"\n\n"
    "  attn steps \"早上好\" --head 2 --mask causal\n\n"
    "  attn steps \"I Love Nature Language Processing\" --shared-projection --toy-heads 1\n\n"
    "  attn steps \"Hello, how are you?\" --model minilm --layer 0 --head 2"
)


def steps_command(
    text: opt.Text,
    model: Annotated[Optional[str], typer.Option("--model", "-m",
        help="toy (default here), minilm, or a Hugging Face model directory / hub id.")] = None,
    layer: Annotated[str, typer.Option("--layer", "-l", help="The layer to walk.")] = "0",
    head: Annotated[str, typer.Option("--head", "-H", help="The head to walk.")] = "0",
    as_json: opt.AsJson = False,
    output: opt.Output = None,
    save: opt.Save = None,
    device: opt.Device = "auto",
    dtype: opt.DTypeOpt = opt.DType.auto,
    scoring: Annotated[Optional[str], typer.Option("--scoring",
        help="Toy: dot, scaled-dot, cosine, bilinear or additive.")] = None,
    d_model: opt.DModel = None,
    toy_heads: opt.ToyHeads = None,
    toy_layers: opt.ToyLayers = None,
    positions: opt.Positions = None,
    seed: opt.Seed = None,
    config: opt.ConfigFile = None,
    weights: opt.Weights = None,
    shared_projection: opt.SharedProjection = False,
    mask: opt.Mask = None,
    valid_len: opt.ValidLen = None,
) -> None:
    """Walk one head through X, Q, K, V, Q·Kᵀ, ÷√d, mask, softmax, ·V, concat and W_O on your sentence."""
    from attn_cli.config import defaults
    from attn_cli.steps import StepsRequest, run_steps

    with user_errors():
        settings = defaults()
        json_wanted = as_json or output is not None
        check_outputs(save, json_wanted)
        check_all_writable({"-o": output})
        options = run_options(settings, text=text, model=model or "toy", top_k=None, dtype=dtype, include=None,
                              layers=layer, heads=head, device=device)
        options["toy"] = toy_settings(d_model=d_model, heads=toy_heads, layers=toy_layers, positions=positions,
                                      seed=seed, config=config, weights=weights,
                                      shared_projection=shared_projection, mask=mask, valid_len=valid_len,
                                      scoring=scoring)
        request = StepsRequest(**options)
        run_and_emit(lambda request, progress, lazy: run_steps(request), request, settings,
                     json_wanted=json_wanted, output=output, save=save, render=render_steps_view,
                     command="attn steps")


def render_steps_view(report, width: int):
    from attn_cli.render.steps_view import render_steps

    return render_steps(report, width)
