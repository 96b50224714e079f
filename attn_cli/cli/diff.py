"""`attn diff`: two texts on one model, or one text on two checkpoints, head by head."""

from __future__ import annotations

from typing import Annotated

import typer

from attn_cli.cli import options as opt
from attn_cli.cli.common import read_text, registered_view, run_and_emit, save_figure
from attn_cli.cli.edge import user_errors
from attn_cli.cli.loading import Loading, loads_model
from attn_cli.cli.output import Output, figure_help, writes_output
from attn_cli.plumbing.errors import BadInput

EPILOG = (
    "Examples:\n\n"
    '  attn diff "The cat sat on the mat." "The dog sat on the mat."\n\n'
    '  attn diff "Hello, how are you?" --model ./base --against-model ./finetuned\n\n'
    '  attn diff "A text" "Another text" --json | jq \'.heads[:3]\''
)


@loads_model
@writes_output(save=figure_help("A, B and B − A (the most changed head in the SVG, every head on the page)"))
def diff_command(
    texts: Annotated[
        list[str],
        typer.Argument(
            metavar="TEXT [TEXT_B]",
            show_default=False,
            help="Two texts to run on one model, or one text with --against-model; - reads one from stdin.",
        ),
    ],
    loading: Loading = Loading(),
    against_model: Annotated[
        str | None,
        typer.Option(
            "--against-model",
            help="A second checkpoint of the same shape and tokenizer to run TEXT on (B); --model is A.",
        ),
    ] = None,
    layer: opt.Layer = "all",
    head: opt.Head = "all",
    out: Output = Output(),
) -> None:
    """Compare every head between two texts, or between two checkpoints on one text; most changed first."""
    with user_errors():
        json_wanted = out.check()
        expected = 1 if against_model else 2
        if len(texts) != expected:
            from attn_cli.cli.vocabulary import looks_unquoted

            raise BadInput(
                f"diff takes {'one text with --against-model' if against_model else 'two texts'}, not {len(texts)}",
                'quote each text: attn diff "The cat sat." "The dog sat."'
                if looks_unquoted(texts)
                else "attn diff TEXT_A TEXT_B, or attn diff TEXT --against-model M",
            )
        texts = [read_text(text) for text in texts]

        def run(progress, lazy: bool):
            loaded = loading.load()
            if against_model is None:
                return loaded.diff(texts[0], texts[1], layers=layer, heads=head)
            other = loading.load(against_model)
            return loaded.diff(texts[0], against=other, layers=layer, heads=head)

        run_and_emit(
            run,
            label="running both …",
            json_wanted=json_wanted,
            output=out.output,
            save=out.save,
            render=registered_view(per_head=out.per_head),
            figure=lambda report, path: save_figure(report, path, dpi=out.dpi, scale=out.scale),
        )
