"""`attn patch CLEAN --corrupt CORRUPT --target T --foil F`: activation patching per head."""

from __future__ import annotations

from typing import Annotated

import typer

from attn_cli.cli import options as opt
from attn_cli.cli.ablate import HeadPairs
from attn_cli.cli.common import read_text, registered_view, run_and_emit, save_figure
from attn_cli.cli.edge import user_errors
from attn_cli.cli.loading import Loading, loads_model
from attn_cli.cli.output import Output, writes_output

EPILOG = (
    "Two texts of as many tokens that differ where it matters: the clean one, whose answer is --target, and "
    "the corrupted one, whose answer is --foil. Denoising (the default) runs the corrupted text with one "
    "head's output taken from the clean run; noising runs the clean text with one head's output from the "
    "corrupted run. Each patch is placed on the scale from the corrupted run (0) to the clean run (1) by the "
    "logit difference of --target and --foil after the text: recovery = (patched − corrupted) / (clean − "
    "corrupted). The heads are patched before the output projection mixes them (TransformerLens' hook_z).\n\n"
    "Examples:\n\n"
    '  attn patch "only party company among there world keeps on may business only party" '
    '--corrupt "only party company among there world keeps on may business only world" '
    "--target company --foil keeps --model lab\n\n"
    "  attn patch CLEAN --corrupt CORRUPT --target company --foil keeps --model lab --by-position --head 1.0,1.1\n\n"
    "  attn patch CLEAN --corrupt CORRUPT --target company --foil keeps --model lab --json | jq '.patches | max_by(.recovery)'"
)


@loads_model
@writes_output(save="Also save the recoveries: FILE.svg, .png, .pdf or .html.", scale=False)
def patch_command(
    clean: Annotated[str, typer.Argument(metavar="CLEAN", help="The clean text ('-' reads stdin).")],
    corrupt: Annotated[
        str, typer.Option("--corrupt", metavar="TEXT", help="The corrupted text: as many tokens as CLEAN.")
    ],
    target: Annotated[
        str, typer.Option("--target", metavar="TOKEN", help="The clean text's answer: one token after the text.")
    ],
    foil: Annotated[
        str, typer.Option("--foil", metavar="TOKEN", help="The corrupted text's answer: one token after the text.")
    ],
    loading: Loading = Loading(),
    layer: opt.Layer = "all",
    head: HeadPairs = "all",
    by_position: Annotated[
        bool, typer.Option("--by-position", metavar=opt.FLAG, help="Patch one head at one position at a time.")
    ] = False,
    direction: Annotated[
        str,
        typer.Option(
            "--direction",
            metavar="denoising|noising",
            help="denoising: the corrupted run with a head from the clean run; noising: the reverse.",
        ),
    ] = "denoising",
    out: Output = Output(),
    truncate: opt.Truncate = False,
) -> None:
    """Activation patching per head: which heads carry the difference between two texts."""
    with user_errors():
        json_wanted = out.check()
        clean = read_text(clean, "the clean text")

        def run(progress, lazy: bool):
            loaded = loading.load()
            return loaded.patch(
                clean,
                corrupt,
                target=target,
                foil=foil,
                layers=layer,
                heads=head,
                by_position=by_position,
                direction=direction,
                truncate=truncate,
            )

        run_and_emit(
            run,
            label=loading.label,
            json_wanted=json_wanted,
            output=out.output,
            save=out.save,
            render=registered_view(),
            figure=lambda report, path: save_figure(report, path, dpi=out.dpi),
        )
