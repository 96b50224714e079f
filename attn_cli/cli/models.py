"""`attn models`: the built-in models and those in the local Hugging Face cache, with their shapes."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from attn_cli.cli.common import emit_json, emit_terminal
from attn_cli.cli.edge import user_errors
from attn_cli.cli.output import Output, writes_output
from attn_cli.plumbing.atomic import check_all_writable

EPILOG = (
    "Examples:\n\n"
    "  attn models\n\n"
    "  attn models --json | jq -r '.models[] | select(.kv_heads < .heads) | .name'\n\n"
    "  attn models --cache-dir /data/hf-cache"
)

CacheDir = Annotated[
    Path | None,
    typer.Option(
        "--cache-dir",
        envvar="HF_HUB_CACHE",
        show_default=False,
        help="The Hugging Face cache to list. Default: huggingface_hub's own (HF_HUB_CACHE, else HF_HOME/hub).",
    ),
]


@writes_output()
def models_command(out: Output = Output(), cache_dir: CacheDir = None) -> None:
    """List the models attn runs without a download: built-ins and the Hugging Face cache, with their shapes."""
    from attn_cli.backends.catalog import list_models
    from attn_cli.plumbing.config import defaults

    with user_errors():
        check_all_writable({"-o": out.output})
        catalog = list_models(cache_dir)
        if out.json_wanted:
            emit_json(catalog, out.output)
        else:
            from attn_cli.render.models_view import render_models

            emit_terminal(lambda: render_models(catalog), None, defaults()["render"]["fallback_width"])
