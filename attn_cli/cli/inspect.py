"""`attn inspect TEXT`: one model run, every selected head's attention."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from attn_cli.cli import options as opt
from attn_cli.cli.common import note, parse_panels, read_text, run_and_emit
from attn_cli.cli.edge import user_errors
from attn_cli.cli.loading import Loading, loads_model
from attn_cli.cli.output import Output, writes_output
from attn_cli.plumbing.errors import BadInput

EPILOG = (
    "Examples:\n\n"
    '  attn inspect "Hello, how are you?"\n\n'
    '  attn inspect "The cat sat" --layer 2 --head 0-3 --show weights,top\n\n'
    "  attn inspect \"Hello\" --json | jq '.layers[0].heads[0].weights'\n\n"
    '  attn inspect "Time flies like an arrow." --variant shared-k --layer 0 --head 0\n\n'
    '  attn inspect "I love you" --model toy -O heads=1 -O causal=true\n\n'
    '  attn inspect "The cat sat on the mat." --measure norm --layer 3\n\n'
    '  attn inspect "Unbelievably, tokenization works" --words --layer 0 --head 2\n\n'
    '  echo "from stdin" | attn inspect - --model ./my-bert --device cuda\n\n'
    "  attn inspect --image cat.png --model google/vit-base-patch16-224 --layer 11 --query 3,7"
)


class Padding(str, Enum):
    left = "left"
    right = "right"


SAVE_HELP = (
    "Also save a figure: FILE.svg (vector heatmaps with full labels, for papers), FILE.pdf or FILE.png (the same "
    "figure drawn; needs the \\[figures] extra) or FILE.html (one offline page: every head, hover a token to see "
    "its attention)."
)


@loads_model
@writes_output(save=SAVE_HELP)
def inspect_command(
    texts: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="TEXT",
            show_default=False,
            help="The text to inspect; - reads it from stdin. Several texts run as one padded batch.",
        ),
    ] = None,
    loading: Loading = Loading(),
    layer: opt.Layer = "all",
    head: opt.Head = "all",
    top_k: opt.TopK = None,
    show: Annotated[
        list[str] | None,
        typer.Option(
            "--show",
            "-s",
            help=f"Panels, comma-separated or repeated: {', '.join(opt.PANEL_NAMES)}. "
            "Default: every head as a grid, and the most focused head in detail.",
        ),
    ] = None,
    out: Output = Output(),
    include: opt.IncludeOpt = None,
    truncate: opt.Truncate = False,
    variant: Annotated[
        list[str] | None,
        typer.Option(
            "--variant",
            "-V",
            metavar="VARIANT",
            help="Run a counterfactual instead of the real model: shared-k (Q := K: every score matrix symmetric), "
            "no-scale (no 1/√d), raw (softmax(X·Xᵀ)·X) or scoring=dot|scaled-dot|cosine (the scores recomputed from "
            "the model's Q and K). The toy computes bilinear or additive scores itself: -O scoring=bilinear. "
            "Several side by side: attn compare.",
        ),
    ] = None,
    propagate: opt.Propagate = False,
    pre_rope: Annotated[
        bool,
        typer.Option(
            "--pre-rope",
            metavar=opt.FLAG,
            help="Show q and k before rotary position embeddings (RoPE models), for study.",
        ),
    ] = False,
    full: opt.Full = False,
    rows: opt.Rows = None,
    cols: opt.Cols = None,
    save_tensors: Annotated[
        Path | None,
        typer.Option(
            "--save-tensors", help="Write the selected heads' q, k, v, output, scores and weights to FILE.safetensors."
        ),
    ] = None,
    padding: Annotated[
        Padding | None,
        typer.Option(
            "--padding", help="Pad a batch of several texts on the left or right. Default: the tokenizer's side."
        ),
    ] = None,
    measure: Annotated[
        str,
        typer.Option(
            "--measure",
            help="weights, or norm: the value-weighted norms ‖α_ij·v_j·W_Oʰ‖ (how much each token really hands "
            'over through the head), shown instead of the weights and added to the JSON as "norms"; or the name '
            "of a measure a plugin registers.",
        ),
    ] = "weights",
    words: opt.Words = False,
    target: opt.Target = None,
    stack: opt.Stack = "all",
    image: opt.Image = None,
    query: opt.Query = None,
) -> None:
    """Show a transformer's attention for TEXT: weights heatmaps, symmetry and top-attended tokens."""
    with user_errors():
        panels = parse_panels(show)
        json_wanted = out.check(save_tensors=save_tensors)
        chosen = single_variant(variant)
        if image is not None:
            from attn_cli.cli.image import inspect_image_command

            if target is not None:
                raise BadInput("--target is the decoder's text of an encoder–decoder model", "drop it with --image")

            return inspect_image_command(
                texts,
                image,
                query,
                loading=loading,
                layer=layer,
                head=head,
                top_k=top_k,
                panels=panels,
                json_wanted=json_wanted,
                out=out,
                variant=chosen,
                rows=rows,
                cols=cols,
                full=full,
                include=include_of(include),
                measure=measure,
            )
        if query is not None:
            raise BadInput("--query picks a patch of an image", "use it with --image FILE")
        if not texts:
            raise BadInput("no text given", "pass a sentence, - to read it from stdin, or --image FILE")
        check_tensor_path(save_tensors, len(texts))
        texts = [read_text(text) for text in texts]
        if words and panels and any(panel.value == "scores" for panel in panels):
            raise BadInput(
                "--words leaves scores out: softmax inputs of pieces do not add up to a word's score",
                "drop scores from --show, or drop --words",
            )
        # the q, k and v panels and --save-tensors need the vectors, as --include qkv keeps them for JSON
        qkv = wants_vectors(panels) or save_tensors is not None
        included = include_of(include) + (("qkv",) if qkv and "qkv" not in include_of(include) else ())

        def run(progress, lazy: bool):
            from attn_cli.analyses.inspect_report import InspectBatch
            from attn_cli.data.selection import Selection

            loaded = loading.load()
            if target is not None or loaded.seq2seq:
                if len(texts) > 1:
                    raise BadInput(
                        "an encoder–decoder model takes one source TEXT and its --target", "run each pair alone"
                    )
                return loaded.inspect(
                    texts[0],
                    layers=layer,
                    heads=head,
                    top_k=top_k,
                    rows=rows,
                    cols=cols,
                    full=full,
                    target=None if target is None else read_text(target, "--target"),
                    stacks=stack,
                    variant=chosen,
                    propagate=propagate,
                    pre_rope=pre_rope,
                    include=included,
                    measure=measure,
                    words=words,
                    progress=progress,
                )
            reports = loaded.inspect(
                texts,
                layers=layer,
                heads=head,
                top_k=top_k,
                variant=chosen,
                propagate=propagate,
                truncate=truncate,
                padding=padding and padding.value,
                pre_rope=pre_rope,
                rows=rows,
                cols=cols,
                full=full,
                include=included,
                measure=measure,
                lazy=lazy and save_tensors is None,
                words=words,
                progress=progress,
            )
            report = reports[0] if len(reports) == 1 else InspectBatch(reports, reports[0].padding_side)
            layers, heads = Selection(layers=layer, heads=head).resolve(loaded.info)
            warn_about_matrices(reports, full, len(layers) * len(heads))
            if save_tensors is not None:
                from attn_cli.render.files import save_tensors as write_tensors

                write_tensors(report, save_tensors)
            return report

        run_and_emit(
            run,
            label=loading.label,
            json_wanted=json_wanted,
            output=out.output,
            save=out.save,
            render=lambda report: render_inspect(report, panels, out.per_head),
            figure=lambda report, path: save_figure(report, panels, path, out.dpi, out.scale),
        )


def warn_about_matrices(reports, full: bool, heads_selected: int) -> None:
    """Say on stderr when whole matrices were left out, or when --full makes them large."""
    from attn_cli.data.selection import Analysis

    limit = Analysis.defaults().cell_limit
    if any(report.matrices_left_out for report in reports):
        note(
            f"note: scores and weights left out: the selected heads × tokens² pass the {limit:,}-cell limit; "
            "every per-row statistic is complete. Use --rows/--cols for a window, or --full for whole matrices."
        )
        return
    if full:
        cells = sum(len(report.tokens) ** 2 for report in reports) * heads_selected
        if cells > limit:
            note(f"warning: --full keeps {cells:,} cells per matrix kind (~{cells * 2 * 11 / 1e6:,.0f} MB of JSON)")


def check_tensor_path(path: Path | None, texts: int) -> None:
    if path is None:
        return
    if path.suffix != ".safetensors":
        raise BadInput(f"--save-tensors {path}: the file must end in .safetensors")
    if texts > 1:
        raise BadInput("--save-tensors takes one text", "run each text on its own")


def save_figure(report, panels, path, dpi, scale):
    from attn_cli.cli.common import save_figure as write
    from attn_cli.data.registry import registered_analysis

    if registered_analysis(report).figure.one is not None and path.suffix.lower() in (".html", ".htm"):  # a batch
        note(
            f"note: {path.name} shows the first of the {len(report.reports)} texts; the SVG, PDF and PNG figures "
            "show them all"
        )
    write(report, path, panels, dpi, scale)


def render_inspect(report, panels, per_head: bool = False):
    """The terminal view of inspect's report (one text, a batch or an encoder–decoder pair), as registered."""
    from attn_cli.data.registry import registered_analysis

    view = registered_analysis(report).terminal
    assert view is not None  # inspect registers a terminal view for each of its reports
    return view(report, panels, per_head)


def wants_vectors(panels) -> bool:
    """The q, k and v panels need the vectors kept, as --include qkv does for JSON."""
    return bool(panels) and any(panel.value in ("q", "k", "v") for panel in panels)


def include_of(include) -> tuple[str, ...]:
    """--include qkv … as the API's include=("qkv", …)."""
    return tuple(dict.fromkeys(item.value for item in include or ()))


def single_variant(variants: list[str] | None) -> str:
    """At most one --variant: each is its own counterfactual (attn compare sets several side by side)."""
    chosen = list(dict.fromkeys(variants or ()))
    if len(chosen) > 1:
        raise BadInput(f"{' and '.join(chosen)} are separate experiments", "pick one, or use attn compare for several")
    return chosen[0] if chosen else "baseline"
