"""`attn kv TEXT... | --file FILE`: how much KV cache each head needs, and what each cache policy loses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from attn_cli.cli import options as opt
from attn_cli.cli.common import emit_json, emit_terminal, note, registered_view, save_figure, texts_or_corpus
from attn_cli.cli.edge import user_errors
from attn_cli.cli.loading import Loading, loads_model
from attn_cli.cli.output import Output, writes_output
from attn_cli.plumbing.errors import BadInput

EPILOG = (
    "Per (layer, head), over every query row of every text: the attention on the first --sinks keys (sinks), "
    "within each --window of the row (local), the fewest keys that keep 0.9, 0.95 and 0.99 of a row, and what "
    "StreamingLLM (sinks + recent keys) and H2O (recent keys + heavy hitters) keep at --budget keys. The "
    "retrieval score comes from a needle-in-a-haystack probe (as attn heads --probe retrieval). A head is "
    "retrieval when that score is ≥ 0.5 or StreamingLLM keeps less than --mass of it; else streaming. Under "
    "grouped-query attention the cache is per KV head.\n\n"
    "Examples:\n\n"
    '  attn kv "only party company among there world keeps on may business only party" --model lab --budget 8\n\n'
    "  attn kv --file corpus.txt --limit 200 --model ./my-llama --export-dir pattern/\n\n"
    "  attn kv --file corpus.txt --model ./my-llama --json | jq '.kv_heads'"
)


@loads_model
@writes_output(save="Also save the grids: FILE.svg, .png, .pdf or .html.", scale=False)
def kv_command(
    texts: Annotated[
        list[str] | None,
        typer.Argument(metavar="TEXT", show_default=False, help="Texts to profile; - reads one from stdin."),
    ] = None,
    file: opt.CorpusFile = None,
    limit: Annotated[int | None, typer.Option("--limit", "-n", help="Profile at most N texts.")] = None,
    batch_size: opt.BatchSize = 8,
    budget: Annotated[int, typer.Option("--budget", help="Keys a row keeps under StreamingLLM and H2O.")] = 64,
    sinks: Annotated[int, typer.Option("--sinks", help="The first keys StreamingLLM always keeps.")] = 4,
    window: Annotated[
        str, typer.Option("--window", metavar="W,W…", help="Windows of local mass, comma-separated.")
    ] = "16,64,256,1024",
    mass: Annotated[
        float, typer.Option("--mass", help="The share of a row's attention a cache must keep (0 to 1).")
    ] = 0.95,
    no_probe: Annotated[
        bool, typer.Option("--no-probe", metavar=opt.FLAG, help="Skip the needle probe (no retrieval score).")
    ] = False,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the needle probe.")] = 0,
    store: Annotated[
        Path | None,
        typer.Option("--store", metavar="DIR", help="With --file: keep the running sums in DIR (resumable)."),
    ] = None,
    resume: Annotated[
        bool, typer.Option("--resume", metavar=opt.FLAG, help="Continue the store in DIR after the texts it covers.")
    ] = False,
    export_dir: Annotated[
        Path | None,
        typer.Option(
            "--export-dir",
            metavar="DIR",
            help="Also write DuoAttention's full_attention_heads.tsv and config.json, and kv_profile.json, there.",
        ),
    ] = None,
    loading: Loading = Loading(),
    out: Output = Output(),
    truncate: opt.Truncate = False,
) -> None:
    """How much KV cache each head needs, and what StreamingLLM and H2O keep of its attention."""
    with user_errors():
        json_wanted = out.check()
        given = texts_or_corpus(texts, file)
        windows = _windows(window)
        if file is not None:
            if resume and store is None:
                raise BadInput("--resume continues a store", "add --store DIR")
            if store is not None:
                from attn_cli.analyses.run_store import check_run_store

                check_run_store(store, resume, "kv")  # before the model loads
        elif store is not None or resume:
            raise BadInput("--store keeps a corpus' profile", "add --file CORPUS")
        if export_dir is not None and export_dir.exists() and not export_dir.is_dir():
            raise BadInput(f"--export-dir {export_dir} is a file", "give a directory (it is made if missing)")
        from attn_cli.cli.heads import progress_bar

        with progress_bar("profiling") as progress:
            report = loading.load().kv_profile(
                given,
                file=file,
                limit=limit,
                batch_size=batch_size,
                budget=budget,
                sinks=sinks,
                windows=windows,
                mass=mass,
                retrieval_probe=not no_probe,
                seed=seed,
                truncate=truncate,
                progress=progress,
                store=store,
                resume=resume,
            )
        if export_dir is not None:
            export(report, export_dir)
            note(f"wrote {export_dir}/full_attention_heads.tsv, config.json and kv_profile.json", style="dim")
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


def _windows(text: str) -> list[int]:
    try:
        windows = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise BadInput(
            f"--window {text!r} is not a list of window sizes", "give whole numbers: --window 16,64"
        ) from None
    if not windows or min(windows) < 1:
        raise BadInput(f"--window {text!r} is not a list of window sizes", "give whole numbers ≥ 1: --window 16,64")
    return windows


def export(report, directory: Path) -> None:
    """DuoAttention's pattern folder (its load_attn_pattern reads full_attention_heads.tsv and config.json):
    a row per layer, a column per KV head, 1.0 where the KV head keeps its whole cache; and the whole profile."""
    import numpy as np

    from attn_cli.render.files import write_json

    directory.mkdir(parents=True, exist_ok=True)
    np.savetxt(directory / "full_attention_heads.tsv", report.full_attention(), delimiter="\t")
    recent = report.settings.budget - report.settings.sinks
    (directory / "config.json").write_text(
        json.dumps({"sink_size": report.settings.sinks, "recent_size": recent}) + "\n"
    )
    with open(directory / "kv_profile.json", "w", encoding="utf-8") as stream:
        write_json(report, stream)
