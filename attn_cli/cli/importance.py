"""`attn importance TEXT... | --file FILE`: each head's importance to a language model's loss."""

from __future__ import annotations

from typing import Annotated

import typer

from attn_cli.cli import options as opt
from attn_cli.cli.common import registered_view, run_and_emit, save_figure, texts_or_corpus
from attn_cli.cli.edge import user_errors
from attn_cli.cli.loading import Loading, loads_model
from attn_cli.cli.output import Output, writes_output

EPILOG = (
    "Michel et al. 2019: a gate ξ = 1 on every head's output, and the head's importance |∂L/∂ξ|, the "
    "first-order estimate of what removing it does to L, a text's mean loss of its own next tokens; the mean "
    "over the texts, one backward pass per batch. Then the pruning curve: the loss as heads are removed, "
    "least important first. Language models only (an encoder has no loss of its own).\n\n"
    "Examples:\n\n"
    '  attn importance "the cat saw a dog . the cat saw a dog" --model lab\n\n'
    "  attn importance --file corpus.txt --limit 1000 --model ./my-gpt2 --save importance.html\n\n"
    "  attn importance --file corpus.txt --model lab --json | jq '.order[-3:]'"
)


@loads_model
@writes_output(save="Also save the importance grid: FILE.svg, .png, .pdf or .html.", scale=False)
def importance_command(
    texts: Annotated[
        list[str] | None,
        typer.Argument(metavar="TEXT", show_default=False, help="Texts to measure; - reads one from stdin."),
    ] = None,
    file: opt.CorpusFile = None,
    limit: Annotated[int | None, typer.Option("--limit", "-n", help="Measure at most N texts.")] = None,
    batch_size: opt.BatchSize = 8,
    loading: Loading = Loading(),
    out: Output = Output(),
    truncate: opt.Truncate = False,
) -> None:
    """Each head's importance to the model's loss (gradient of a gate on its output) and the pruning curve."""
    with user_errors():
        json_wanted = out.check()
        given = texts_or_corpus(texts, file)

        def run(progress, lazy: bool):
            return loading.load().importance(given, file=file, limit=limit, batch_size=batch_size, truncate=truncate)

        run_and_emit(
            run,
            label=loading.label,
            json_wanted=json_wanted,
            output=out.output,
            save=out.save,
            render=registered_view(),
            figure=lambda report, path: save_figure(report, path, dpi=out.dpi),
        )
