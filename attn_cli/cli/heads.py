"""`attn heads TEXT... | --file FILE | --probe induction|retrieval`: what every head does, on your text or a corpus."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from attn_cli.cli import options as opt
from attn_cli.cli.common import (
    emit_json,
    emit_terminal,
    note,
    progress_on_stderr,
    read_text,
    registered_view,
    save_figure,
)
from attn_cli.cli.edge import user_errors
from attn_cli.cli.loading import Loading, loads_model
from attn_cli.cli.output import Output, figure_help, writes_output
from attn_cli.plumbing.errors import BadInput

EPILOG = (  # \\[ keeps Rich from reading [i,j] as markup
    "Scores, each in \\[0, 1], per text, then mean and std over the texts. A: the head's weights over real "
    "tokens (padding excluded). A row counts when it may attend two keys or more.\n\n"
    'Weight shares, Σ A⊙P / Σ A over the counted rows with a target (TransformerLens detect_head "mul"): '
    "previous_token P\\[i,i-1]; duplicate_token P\\[i,j] j<i, same id; induction P\\[i,j] id(j-1) = id(i), "
    "j-1<i; first_token P\\[i,0]; last_token \\[SEP]/EOS j≠i (else the last token); punctuation; "
    "self P\\[i,i].\n\n"
    "broad: mean entropy(row) / log(allowed keys). sink: share of rows putting > 0.3 on one key (named).\n\n"
    "retrieval (--probe retrieval only): share of the needle's tokens the head copies, i.e. the row before each "
    "token of the copy has its largest weight on that token in the needle (Wu et al. 2024, teacher-forced).\n\n"
    "label: the largest weight share when > 0.5, else broad when >= 0.85, else sink when > 0.5, else mixed.\n\n"
    "Examples:\n\n"
    '  attn heads "Hello, how are you?"\n\n'
    "  attn heads --file corpus.txt --limit 1000 --batch-size 32\n\n"
    "  attn heads --file corpus.jsonl --json -o heads.json\n\n"
    "  attn heads --file corpus.parquet --column text --store heads-store/ --per-text\n\n"
    "  attn heads --file s3://bucket/corpus/ --store heads-store/ --engine ray --address head:6379 --workers 8 "
    "--gpus-per-worker 1\n\n"
    "  attn heads --probe induction --model ./my-gpt2 --seed 1\n\n"
    "  attn heads --probe retrieval --model ./my-gpt2 --probe-length 200\n\n"
    '  attn heads "the cat sat" --target "die Katze sass" --model Helsinki-NLP/opus-mt-en-de --stack cross\n\n'
    "  attn heads --image cat.png --model google/vit-base-patch16-224\n\n"
    "Encoder–decoder models: one SOURCE --target TARGET pair, every stack's heads (encoder, decoder, cross). "
    "A cross head's queries are target tokens and its keys source tokens, so previous_token, duplicate_token, "
    "induction and self are not defined for it (null in JSON, with the reason); the others read the keys only."
)


class Engine(str, Enum):
    local = "local"
    ray = "ray"


class Probe(str, Enum):
    induction = "induction"
    retrieval = "retrieval"


@loads_model
@writes_output(save=figure_help("each score as a layers × heads grid"), scale=False)
def heads_command(
    texts: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="TEXT",
            show_default=False,
            help="Texts to score; - reads one from stdin. Several run as padded batches.",
        ),
    ] = None,
    file: Annotated[
        Path | None,
        typer.Option(
            "--file",
            "-f",
            help='A corpus: a text per line, JSONL with a "text" field per line, a Parquet or Arrow file or a '
            "directory of them, or a saved datasets directory; - reads stdin.",
        ),
    ] = None,
    probe: Annotated[
        Probe | None,
        typer.Option(
            "--probe",
            help="induction: a seeded random token sequence repeated twice (Olsson et al. 2022); retrieval: a needle "
            "of random tokens inside a random haystack, then the needle again (Wu et al. 2024). Needs no text.",
        ),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the --probe sequence.")] = 0,
    probe_length: Annotated[
        int,
        typer.Option(
            "--probe-length", help="Tokens in each half of the induction probe; in the retrieval probe's haystack."
        ),
    ] = 50,
    limit: Annotated[int | None, typer.Option("--limit", "-n", help="Score at most N texts.")] = None,
    batch_size: opt.BatchSize = 32,
    loading: Loading = Loading(),
    layer: opt.Layer = "all",
    head: opt.Head = "all",
    out: Output = Output(),
    truncate: opt.Truncate = False,
    store: Annotated[
        Path | None,
        typer.Option(
            "--store",
            metavar="DIR",
            help="Also write the corpus store to DIR: Parquet tables of per-head summaries, top and decile examples "
            "and top edges (DuckDB, pandas and polars read them).",
        ),
    ] = None,
    resume: Annotated[
        bool,
        typer.Option(
            "--resume", metavar=opt.FLAG, help="Continue the store in DIR: complete parts are kept, the rest is scored."
        ),
    ] = False,
    per_text: Annotated[
        bool, typer.Option("--per-text", metavar=opt.FLAG, help="Also store every text's scores (texts.parquet).")
    ] = False,
    top: Annotated[
        int, typer.Option("--top", help="Top texts per head and score, and top edges per head, stored.")
    ] = 10,
    samples: Annotated[int, typer.Option("--samples", help="Texts stored from each decile of each score.")] = 5,
    column: Annotated[
        str, typer.Option("--column", help="The text column of a Parquet, Arrow or datasets corpus.")
    ] = "text",
    part_texts: Annotated[int, typer.Option("--part-texts", help="Texts a part: the unit of --resume.")] = 2048,
    engine: Annotated[
        Engine,
        typer.Option(
            "--engine",
            help="local: score here; ray: score on Ray workers, the same result (pip install 'attn-cli\\[ray]').",
        ),
    ] = Engine.local,
    address: Annotated[
        str | None,
        typer.Option(
            "--address",
            metavar="ADDR",
            help="With --engine ray: the Ray "
            "cluster to join (host:port); default: the one Ray finds, else a local one.",
        ),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(
            "--workers",
            help="With --engine ray: workers, each loading the model once (default: GPUs / --gpus-per-worker, else 1).",
        ),
    ] = None,
    gpus_per_worker: Annotated[
        float,
        typer.Option(
            "--gpus-per-worker",
            metavar="G",
            help="With --engine ray: GPUs a worker takes (with --device-map, the model spreads over them).",
        ),
    ] = 0.0,
    target: opt.Target = None,
    stack: opt.Stack = "all",
    image: opt.Image = None,
) -> None:
    """What every head does: previous-token, duplicate, induction, [CLS]/[SEP], punctuation, self, broad, sink."""
    with user_errors():
        json_wanted = out.check()
        sources = [
            name for name, given in (("TEXT", texts), ("--file", file), ("--probe", probe), ("--image", image)) if given
        ]
        if len(sources) != 1:
            raise BadInput(
                f"{' and '.join(sources)} are separate sources" if sources else "no text given",
                "pass TEXT..., --file FILE, --probe induction|retrieval or --image FILE",
            )
        given: str | list[str] | None = [read_text(text) for text in texts] if texts else None
        if target is not None:
            if not given or len(given) != 1:
                raise BadInput(
                    "--target goes with one source TEXT", "attn heads SOURCE --target TARGET --model SEQ2SEQ"
                )
            given, target = given[0], read_text(target, "--target")
        from attn_cli.analyses.ray_engine import check_engine, is_url

        on_ray = check_engine(engine.value, address, workers, gpus_per_worker)  # no Ray: how to install it
        source = _url(file) if on_ray else file
        if source is not None and not (on_ray and is_url(source)):
            from attn_cli.plumbing.corpus import open_corpus

            open_corpus(source, column)  # a missing path, a wrong format or column fails before the model loads
        if store is not None:
            from attn_cli.analyses.store_writer import check_store

            check_store(store, resume)  # a non-empty directory that is not a store to resume: before loading
        elif resume or per_text:
            raise BadInput(f"{'--resume' if resume else '--per-text'} goes with --store DIR")
        with progress_bar() as progress:
            if on_ray:  # the workers start (and load the model) while this process loads its own
                from attn_cli.analyses.ray_engine import prestart

                prestart(loading.loaded_as(), address=address, workers=workers, gpus_per_worker=gpus_per_worker)
            loaded = loading.load()
            report = loaded.heads(
                given or None,
                file=source,
                probe=probe and probe.value,
                seed=seed,
                probe_length=probe_length,
                layers=layer,
                heads=head,
                batch_size=batch_size,
                limit=limit,
                truncate=truncate,
                progress=progress,
                store=store,
                resume=resume,
                per_text=per_text,
                top=top,
                samples=samples,
                column=column,
                part_texts=part_texts,
                engine=engine.value,
                address=address,
                workers=workers,
                gpus_per_worker=gpus_per_worker,
                target=target,
                stacks=stack,
                image=image,
            )
        from attn_cli.data.document import counted

        if report.truncated:
            note(f"warning: {counted(report.truncated, 'text')} cut to the model's positions (--truncate)")
        if report.probe and report.probe["length"] < report.probe["requested"]:
            from attn_cli.analyses.heads import UNBOUNDED_PROBE_LENGTH

            positions = report.model.max_positions
            why = (
                f"{report.model.name} has {positions} positions"
                if positions is not None
                else f"{report.model.name} has no position limit, and {UNBOUNDED_PROBE_LENGTH} is the most then"
            )
            shape = "tokens twice" if report.probe["kind"] == "induction" else "haystack tokens"
            note(f"note: the probe is {report.probe['length']} {shape}, not {report.probe['requested']}: {why}")
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
        if store is not None:  # after the view on stdout; on stderr beside a JSON document
            state = "incomplete: --resume continues it" if report.interrupted else "complete"
            line = f"store: {store} ({state}); read it with DuckDB, pandas or polars: {store}/heads.parquet …"
            note(line, style="") if json_wanted or report.interrupted else typer.echo(line)
        if report.interrupted:
            from attn_cli.plumbing import interrupts

            order = (
                ""
                if report.source in ("arguments", "probe")
                else " (texts run shortest first within each part of --part-texts, so not exactly the first lines)"
            )
            note(f"interrupted: scored {report.texts:,} texts before Ctrl-C; the report covers those{order}")
            interrupts.reported()  # said here, with the report: the edge adds no "error: interrupted"
            raise typer.Exit(130)


def _url(file: Path | None) -> Path | str | None:
    """--file as typed when it is a URL: a Path folds s3://bucket/key into s3:/bucket/key."""
    import re

    text = None if file is None else str(file)
    return text.replace(":/", "://", 1) if text and re.match(r"^[a-z][a-z0-9+]*:/[^/]", text) else file


def progress_bar(doing: str = "scoring heads"):
    """The progress bar of common.progress_on_stderr, with texts/s and the time left (attn heads, diagnose)."""
    from rich.progress import ProgressColumn, TimeRemainingColumn

    class Speed(ProgressColumn):
        def render(self, task):
            return Text("" if task.speed is None else f"{task.speed:,.1f} texts/s", style="cyan")

    return progress_on_stderr("loading the model …", doing, Speed(), TimeRemainingColumn())
