"""`attn diagnose TEXT... | --file FILE`: the model's attention sinks and massive activations."""

from __future__ import annotations

from typing import Annotated

import typer

from attn_cli.cli import options as opt
from attn_cli.cli.common import emit_json, emit_terminal, note, registered_view, save_figure, texts_or_corpus
from attn_cli.cli.edge import user_errors
from attn_cli.cli.loading import Loading, loads_model
from attn_cli.cli.output import Output, figure_help, writes_output

EPILOG = (
    "Per text, then the mean over the texts. A: a head's weights over real tokens (padding excluded).\n\n"
    "Sink rate (Gu et al. 2024): a head's first-token weight α = (1/T) Σ_i A\\[i,0] over all T rows; "
    "a layer's sink rate is the share of its heads with α > ε (--epsilon, 0.3), the model's the mean over layers.\n\n"
    "Massive activations (Sun et al. 2024): entries of the residual stream h after each layer with "
    "|h\\[t,k]| > ratio × median |h| of that layer and text (--ratio, 100) and |h\\[t,k]| > floor (--floor, 100). "
    "Sun et al. use > 100 and about 1,000× the median: --ratio 1000.\n\n"
    "Examples:\n\n"
    '  attn diagnose "Hello, how are you?"\n\n'
    "  attn diagnose --file corpus.txt --limit 500 --json -o diagnose.json\n\n"
    "  attn diagnose --file corpus.txt --model ./my-gpt2 --ratio 1000 --save sinks.svg"
)


@loads_model
@writes_output(save=figure_help("each head's first-token weight as a layers × heads grid"), scale=False)
def diagnose_command(
    texts: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="TEXT",
            show_default=False,
            help="Texts to diagnose; - reads one from stdin. Several run as padded batches.",
        ),
    ] = None,
    file: opt.CorpusFile = None,
    epsilon: Annotated[
        float,
        typer.Option(
            "--epsilon",
            metavar="EPSILON",
            help="A head sinks when its mean first-token weight exceeds this (Gu et al. 2024).",
        ),
    ] = 0.3,
    ratio: Annotated[
        float,
        typer.Option(
            "--ratio", metavar="RATIO", help="Massive: larger than this many times the layer's median magnitude."
        ),
    ] = 100.0,
    floor: Annotated[
        float, typer.Option("--floor", metavar="FLOOR", help="Massive: and larger than this in absolute value.")
    ] = 100.0,
    limit: Annotated[int | None, typer.Option("--limit", "-n", help="Diagnose at most N texts.")] = None,
    batch_size: opt.BatchSize = 32,
    loading: Loading = Loading(),
    out: Output = Output(),
    truncate: opt.Truncate = False,
) -> None:
    """The model's attention sinks (sink rate per layer) and massive activations of its residual stream."""
    with user_errors():
        json_wanted = out.check()
        texts = texts_or_corpus(texts, file)
        from attn_cli.cli.heads import progress_bar

        with progress_bar("diagnosing") as progress:
            report = loading.load().diagnose(
                texts or None,
                file=file,
                epsilon=epsilon,
                ratio=ratio,
                floor=floor,
                batch_size=batch_size,
                limit=limit,
                truncate=truncate,
                progress=progress,
            )
        if report.truncated:
            from attn_cli.data.document import counted

            note(f"warning: {counted(report.truncated, 'text')} cut to the model's positions (--truncate)")
        if json_wanted:
            emit_json(report, out.output)
        else:
            from attn_cli.plumbing.config import defaults

            emit_terminal(
                lambda: registered_view()(report),
                out.save,
                defaults()["render"]["fallback_width"],
                figure=lambda path: save_figure(report, path, dpi=out.dpi),
            )
        if report.interrupted:
            from attn_cli.plumbing import interrupts

            note(f"interrupted: diagnosed {report.texts:,} texts before Ctrl-C; the report covers those")
            interrupts.reported()
            raise typer.Exit(130)
