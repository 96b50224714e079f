"""`attn explore [TEXT]`: a full-screen terminal app that loads the model once and looks around it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from attn_cli.cli import options as opt
from attn_cli.cli.common import model_options
from attn_cli.cli.edge import user_errors

EPILOG = (
    "Keys: ← → / h l heads, ↑ ↓ / k j layers, [ ] query token, e edit the sentence, v variant, "
    "s scores/weights, g grid metric, x export, ? help, q quit.\n\n"
    "Examples:\n\n"
    "  attn explore \"The cat sat on the mat.\"\n\n"
    "  attn explore \"I love you\" --model toy -O heads=2 -O causal=true"
)


def explore_command(
    text: Annotated[Optional[str], typer.Argument(metavar="[TEXT]", show_default=False,
        help="The sentence to start with (default: an example sentence).")] = None,
    model: opt.Model = None,
    option: opt.ModelOptions = None,
    device: opt.Device = "auto",
    dtype: opt.DTypeOpt = opt.DType.auto,
    truncate: opt.Truncate = False,
    allow_pickle: opt.AllowPickle = False,
    revision: opt.Revision = None,
    trust_remote_code: opt.TrustRemoteCode = False,
    device_map: opt.DeviceMap = None,
    threads: Annotated[Optional[int], typer.Option("--threads", min=1,
        help="CPU threads torch may use (default: torch's choice less one core, which the screen needs; "
             "1 on 2 cores).")] = None,
    export_dir: Annotated[Optional[Path], typer.Option("--export-dir",
        help="Where x writes its .svg, .html and .json files (default: the current directory).")] = None,
) -> None:
    """Look around a model in a full-screen terminal app: every head, any sentence, without reloading."""
    with user_errors():
        from attn_cli.errors import BadInput

        options = model_options(option, revision=revision, allow_pickle=allow_pickle,
                                trust_remote_code=trust_remote_code, device_map=device_map)
        if text is not None and not text.strip():
            raise BadInput("the text is empty", "pass a sentence, or leave it out for the example")
        if export_dir is not None and not export_dir.is_dir():
            raise BadInput(f"--export-dir {export_dir}: not a directory")

        from attn_cli.explore.app import DEFAULT_TEXT, ExploreApp

        def load():
            from attn_cli.cli.common import load_model

            return load_model(model, device=device, dtype=dtype, options=options)

        from attn_cli.config import defaults

        app = ExploreApp(load, text or DEFAULT_TEXT, model_name=model or defaults()["inspect"]["model"],
                         truncate=truncate, export_dir=export_dir, threads=threads)
        app.run()
        if app.error is not None:
            raise app.error
        raise typer.Exit(app.return_code or 0)
