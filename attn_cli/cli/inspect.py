"""`attn inspect TEXT`: one model run, every selected head's attention."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from attn_cli.atomic import check_all_writable
from attn_cli.cli import options as opt
from attn_cli.cli.common import check_outputs, parse_panels, read_text, run_and_emit, run_options, toy_settings
from attn_cli.cli.edge import user_errors
from attn_cli.errors import BadInput

EPILOG = (
    "Examples:\n\n"
    "  attn inspect \"Hello, how are you?\"\n\n"
    "  attn inspect \"The cat sat\" --layer 2 --head 0-3 --show weights,top\n\n"
    "  attn inspect \"Hello\" --json | jq '.layers[0].heads[0].weights'\n\n"
    "  attn inspect \"我是一个男孩\" --shared-k --layer 0 --head 0\n\n"
    "  echo \"from stdin\" | attn inspect - --model ./my-bert --device cuda"
)


class Padding(str, Enum):
    left = "left"
    right = "right"


def inspect_command(
    texts: Annotated[list[str], typer.Argument(metavar="TEXT...", show_default=False,
        help="The text to inspect; - reads it from stdin. Several texts run as one padded batch.")],
    model: opt.Model = None,
    layer: opt.Layer = "all",
    head: opt.Head = "all",
    top_k: opt.TopK = None,
    show: Annotated[Optional[list[str]], typer.Option("--show", "-s",
        help=f"Panels, comma-separated or repeated: {', '.join(opt.PANEL_NAMES)}. "
             "Default: an overview and one head in detail.")] = None,
    as_json: opt.AsJson = False,
    include: opt.IncludeOpt = None,
    output: opt.Output = None,
    save: opt.Save = None,
    device: opt.Device = "auto",
    dtype: opt.DTypeOpt = opt.DType.auto,
    truncate: opt.Truncate = False,
    allow_pickle: opt.AllowPickle = False,
    revision: opt.Revision = None,
    trust_remote_code: opt.TrustRemoteCode = False,
    device_map: opt.DeviceMap = None,
    shared_k: Annotated[bool, typer.Option("--shared-k",
        help="Compute each query with the key's projection (Q := K): every score matrix becomes symmetric.")] = False,
    no_scale: Annotated[bool, typer.Option("--no-scale", help="Drop the 1/√d scale from the scores.")] = False,
    scoring: Annotated[Optional[str], typer.Option("--scoring",
        help="Scoring function on the model's Q and K: dot, scaled-dot (the model's own) or cosine.")] = None,
    propagate: opt.Propagate = False,
    pre_rope: Annotated[bool, typer.Option("--pre-rope",
        help="Show q and k before rotary position embeddings (RoPE models), for study.")] = False,
    full: opt.Full = False,
    rows: opt.Rows = None,
    cols: opt.Cols = None,
    save_tensors: Annotated[Optional[Path], typer.Option("--save-tensors",
        help="Write the selected heads' q, k, v, output, scores and weights to FILE.safetensors.")] = None,
    d_model: opt.DModel = None,
    toy_heads: opt.ToyHeads = None,
    toy_layers: opt.ToyLayers = None,
    positions: opt.Positions = None,
    seed: opt.Seed = None,
    config: opt.ConfigFile = None,
    weights: opt.Weights = None,
    save_weights: opt.SaveWeights = None,
    shared_projection: opt.SharedProjection = False,
    mask: opt.Mask = None,
    valid_len: opt.ValidLen = None,
    padding: Annotated[Optional[Padding], typer.Option("--padding",
        help="Pad a batch of several texts on the left or right. Default: the tokenizer's side.")] = None,
) -> None:
    """Show a transformer's attention for TEXT: weights heatmaps, symmetry and top-attended tokens."""
    from attn_cli.config import defaults
    from attn_cli.core import InspectRequest

    with user_errors():
        settings = defaults()
        panels = parse_panels(show)
        json_wanted = as_json or output is not None
        check_outputs(save, json_wanted)
        options = run_options(settings, text=texts[0], model=model, top_k=top_k, dtype=dtype, include=include,
                              layers=layer, heads=head, device=device, truncate=truncate,
                              allow_pickle=allow_pickle, propagate=propagate, revision=revision,
                              trust_remote_code=trust_remote_code, device_map=device_map,
                              batch_texts=tuple(read_text(text) for text in texts[1:]),
                              padding_side=padding.value if padding else None, pre_rope=pre_rope,
                              full=full, rows=rows, cols=cols)
        options["include_qkv"] |= wants_vectors(panels) or save_tensors is not None
        check_tensor_path(save_tensors, len(texts))
        check_all_writable({"-o": output, "--save-tensors": save_tensors, "--save-weights": save_weights})
        is_toy = options["model"] == "toy"  # the toy computes with its own scoring; others get a variant
        options["toy"] = toy_settings(d_model=d_model, heads=toy_heads, layers=toy_layers, positions=positions,
                                      seed=seed, config=config, weights=weights,
                                      shared_projection=shared_projection, mask=mask, valid_len=valid_len,
                                      scoring=scoring if is_toy else None)
        variant = single_variant(shared_k, no_scale, None if is_toy else scoring)
        request = InspectRequest(**options, variant=variant)
        run = inspect_texts if save_tensors is None else saving_tensors(save_tensors)
        if save_weights is not None:
            run = saving_toy_weights(run, save_weights)
        run_and_emit(run, request, settings, json_wanted=json_wanted, output=output, save=save,
                     render=lambda report, width: render_inspect(report, panels, width), command="attn inspect")


def inspect_texts(request, progress=None, lazy: bool = False):
    """One report for one text; an InspectBatch for several (run together, padded)."""
    from attn_cli.core import run_inspect_batch
    from attn_cli.report import InspectBatch

    reports = run_inspect_batch(request, lazy=lazy, progress=progress)
    if len(reports) == 1:
        return reports[0]
    return InspectBatch(reports, reports[0].padding_side)


def check_tensor_path(path: Path | None, texts: int) -> None:
    if path is None:
        return
    if path.suffix != ".safetensors":
        raise BadInput(f"--save-tensors {path}: the file must end in .safetensors")
    if texts > 1:
        raise BadInput("--save-tensors takes one text", "run each text on its own")


def saving_tensors(path: Path):
    """inspect_texts, then the tensors to `path` (the report is kept whole: lazy is ignored)."""

    def run(request, progress=None, lazy: bool = False):
        from attn_cli.render.files import save_tensors

        report = inspect_texts(request, progress, lazy=False)
        save_tensors(report, path)
        return report

    return run


def saving_toy_weights(run, path: Path):
    """run, then the toy's weights to `path` (a toy-only option)."""

    def run_and_save(request, progress=None, lazy: bool = False):
        from attn_cli.backends.toy import load_toy, save_weights

        if request.model != "toy":
            raise BadInput("--save-weights saves the toy model's weights", "use it with --model toy")
        report = run(request, progress, lazy)
        toy = load_toy(toy=request.toy)
        save_weights(toy.base_weights, toy.config, path)
        return report

    return run_and_save


def render_inspect(report, panels, width: int):
    from rich.console import Group
    from rich.rule import Rule

    from attn_cli.render.terminal import render_report

    if not hasattr(report, "reports"):
        return render_report(report, panels, width)
    parts = []
    for index, single in enumerate(report.reports):
        parts += [Rule(f"text {index + 1} of {len(report.reports)} ({report.padding_side} padding removed)"),
                  render_report(single, panels, width)]
    return Group(*parts)


def wants_vectors(panels) -> bool:
    """The q, k and v panels need the vectors kept, as --include qkv does for JSON."""
    return bool(panels) and any(panel.value in ("q", "k", "v") for panel in panels)


def single_variant(shared_k: bool, no_scale: bool, scoring: str | None) -> str:
    """At most one of --shared-k, --no-scale, --scoring: each is its own counterfactual."""
    chosen = [name for name, on in (("shared-k", shared_k), ("no-scale", no_scale)) if on]
    if scoring is not None:
        chosen.append(scoring if scoring.startswith("scoring=") else f"scoring={scoring}")
    if len(chosen) > 1:
        raise BadInput(f"{' and '.join(chosen)} are separate experiments", "pick one, or use attn compare for several")
    return chosen[0] if chosen else "baseline"
