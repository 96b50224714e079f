"""`attn explore [TEXT]`: a full-screen terminal app that loads the model once and looks around it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from attn_cli.cli import options as opt
from attn_cli.cli.edge import user_errors
from attn_cli.cli.loading import Loading, loads_model

EPILOG = (
    "Keys: ← → / h l heads, ↑ ↓ / k j layers, [ ] query token, tab the grid or the selected head (a small "
    "screen: the next page), PgUp PgDn scroll, e edit the sentence, v variant, s scores/weights, g grid metric, "
    "x export, Esc clear the message, ? help, q or Ctrl-C quit; an encoder–decoder model: c next stack, t edit "
    "the target. It needs a terminal.\n\n"
    "Examples:\n\n"
    '  attn explore "The cat sat on the mat."\n\n'
    '  attn explore "I love you" --model toy -O heads=2 -O causal=true\n\n'
    '  attn explore "The cat sat." --target "Die Katze saß." --model Helsinki-NLP/opus-mt-en-de\n\n'
    "  attn explore --image cat.png --model google/vit-base-patch16-224"
)


def not_a_terminal(streams: dict) -> str | None:
    """Which of the named streams are not a terminal, as the error says it; None when all are."""
    missing = [name for name, stream in streams.items() if stream is None or not stream.isatty()]
    if not missing:
        return None
    names = f"{', '.join(missing[:-1])} and {missing[-1]}" if len(missing) > 1 else missing[0]
    return f"attn explore needs a terminal: {names} {'is' if len(missing) == 1 else 'are'} not one"


def check_look(text: str | None, target: str | None, image: Path | None) -> None:
    """A sentence (and an encoder–decoder model's target), or an image file: never both, before the screen opens."""
    from attn_cli.plumbing.errors import BadInput

    if target is not None and not target.strip():
        raise BadInput("the target is empty", "pass the decoder's text with --target, or leave it out")
    if image is None:
        return
    if text is not None or target is not None:
        raise BadInput(
            "give either a sentence (and --target) or --image, not both", "a vision transformer reads the image only"
        )
    if str(image) == "-":
        raise BadInput(
            "attn explore reads its keys from stdin, so it cannot read the image there", "give the image as a file"
        )
    if not image.is_file():
        raise BadInput(f"--image {image}: no such file")


@loads_model
def explore_command(
    text: Annotated[
        str | None,
        typer.Argument(
            metavar="TEXT", show_default=False, help="The sentence to start with (default: an example sentence)."
        ),
    ] = None,
    loading: Loading = Loading(),
    truncate: opt.Truncate = False,
    threads: Annotated[
        int | None,
        typer.Option(
            "--threads",
            min=1,
            help="CPU threads torch may use (default: torch's choice less one core, which the screen needs; "
            "1 on 2 cores).",
        ),
    ] = None,
    export_dir: Annotated[
        Path | None,
        typer.Option(
            "--export-dir", help="Where x writes its .svg, .html and .json files (default: the current directory)."
        ),
    ] = None,
    target: Annotated[
        str | None,
        typer.Option(
            "--target",
            help="Encoder–decoder models (BART, Marian, T5 …): the decoder runs teacher-forced on TARGET; TEXT is the "
            "source. c shows the next stack (encoder, decoder, cross-attention), t edits the target.",
        ),
    ] = None,
    image: Annotated[
        Path | None,
        typer.Option(
            "--image",
            metavar="FILE",
            help="Look at an image (PNG, JPEG) with a vision transformer (ViT, DeiT, DINOv2, CLIP or SigLIP vision) "
            "instead of text: the selected head's attention from the query token over the picture.",
        ),
    ] = None,
) -> None:
    """Look around a model in a full-screen terminal app: every head, any sentence, without reloading."""
    with user_errors():
        from attn_cli.plumbing.errors import BadInput

        problem = not_a_terminal({"stdin": sys.stdin, "stdout": sys.stdout, "stderr": sys.stderr})
        if problem:  # keys would never come (stdin), or the screen would be drawn into a file (Textual: stderr)
            raise BadInput(problem, "run it in a terminal; for output to a file or a pipe use attn inspect")
        if text is not None and not text.strip():
            raise BadInput("the text is empty", "pass a sentence, or leave it out for the example")
        check_look(text, target, image)
        if export_dir is not None and not export_dir.is_dir():
            raise BadInput(f"--export-dir {export_dir}: not a directory")
        loading.options()  # a malformed -O fails here, before the screen opens

        from attn_cli.explore.app import DEFAULT_TEXT, ExploreApp

        def load():
            return loading.load()

        app = ExploreApp(
            load,
            str(image) if image is not None else text or DEFAULT_TEXT,
            model_name=loading.name,
            truncate=truncate,
            export_dir=export_dir,
            threads=threads,
            target=target,
            image=image is not None,
        )
        app.run()
        if app.error is not None:
            raise app.error
        raise typer.Exit(app.return_code or 0)
