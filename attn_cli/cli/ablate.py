"""`attn ablate TEXT`: what removing each head does to the model's own output."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from attn_cli.cli import options as opt
from attn_cli.cli.common import read_text, registered_view, run_and_emit, save_figure
from attn_cli.cli.edge import user_errors
from attn_cli.cli.loading import Loading, loads_model
from attn_cli.cli.output import Output, writes_output
from attn_cli.plumbing.errors import BadInput
from attn_cli.plumbing.textio import check_corpus, read_corpus

EPILOG = (
    "Each selected head's output is replaced where it exists on its own (before the output projection mixes "
    "the heads) and the text runs again; the table shows how much the metric moved. Many heads share one "
    "batched forward. A language model's metric is the loss of the text's own next tokens (or of --target, "
    "a continuation), the logit difference of --target and --foil, or the KL of its predictions; an "
    "encoder's is the cosine distance of its mean-pooled sentence embedding. Removing heads one by one hides "
    "redundant heads: --together removes the selected heads at once.\n\n"
    "Examples:\n\n"
    '  attn ablate "Hello, how are you?"\n\n'
    '  attn ablate "only party company among there world keeps on may business only" --model lab '
    '--target "party company among there world keeps on may business"\n\n'
    '  attn ablate "..." --model lab --head 1.0,1.1,1.2,1.3 --together\n\n'
    '  attn ablate "the cat saw a" --model lab --target dog --foil cat --method mean --reference corpus.txt\n\n'
    "  attn ablate --file corpus.txt --limit 500 --layer 5 --store ablations/\n\n"
    "  attn ablate --image cat.png --model facebook/dinov2-small\n\n"
    "  attn ablate \"Hello, how are you?\" --json | jq '.ablations | max_by(.effect)'"
)

HeadPairs = Annotated[
    str,
    typer.Option(
        "--head", "-H", help="Heads of each selected layer (3, 0,2, 1-4, all), or LAYER.HEAD pairs: 1.0,1.1,0.2."
    ),
]


@loads_model
@writes_output(save="Also save the effects grid: FILE.svg, .png, .pdf or .html.", scale=False)
def ablate_command(
    text: Annotated[
        str | None,
        typer.Argument(metavar="TEXT", show_default=False, help="The sentence to run; - reads it from stdin."),
    ] = None,
    loading: Loading = Loading(),
    layer: opt.Layer = "all",
    head: HeadPairs = "all",
    together: Annotated[
        bool, typer.Option("--together", metavar=opt.FLAG, help="Remove the selected heads at once, in one run.")
    ] = False,
    method: Annotated[
        str,
        typer.Option(
            "--method",
            metavar="zero|mean|resample",
            help="What a removed head outputs: nothing, its mean over --reference, or its output at a drawn "
            "--reference token.",
        ),
    ] = "zero",
    metric: Annotated[
        str | None,
        typer.Option(
            "--metric",
            metavar="loss|logit-diff|kl|cosine|masked-loss",
            help="What is measured. Default: loss (logit-diff with --target and --foil) for a language model, "
            "cosine for an encoder, masked-loss (of --target at the [MASK]s) for a masked-LM head with --target.",
        ),
    ] = None,
    target: Annotated[
        str | None,
        typer.Option(
            "--target", metavar="TEXT", help="A continuation of TEXT: the loss of its tokens, or logit-diff's token."
        ),
    ] = None,
    foil: Annotated[
        str | None, typer.Option("--foil", metavar="TOKEN", help="logit-diff: the token --target is set against.")
    ] = None,
    reference: Annotated[
        Path | None,
        typer.Option(
            "--reference",
            metavar="FILE",
            help="Texts (a line each, or JSONL) the mean and resample replacements come from. Default: TEXT itself.",
        ),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of --method resample's draws.")] = 0,
    file: Annotated[
        Path | None,
        typer.Option(
            "--file",
            "-f",
            help="A corpus instead of TEXT (a text per line, or JSONL; - reads stdin): each ablation's mean effect "
            "over the texts, its spread, and the texts where it was largest.",
        ),
    ] = None,
    limit: Annotated[int | None, typer.Option("--limit", "-n", help="With --file: at most N texts.")] = None,
    store: Annotated[
        Path | None,
        typer.Option(
            "--store",
            metavar="DIR",
            help="With --file: keep each text's ablations in DIR as they are made (run.json, texts.jsonl).",
        ),
    ] = None,
    resume: Annotated[
        bool,
        typer.Option("--resume", metavar=opt.FLAG, help="Continue the store in DIR from the text after its last."),
    ] = False,
    out: Output = Output(),
    truncate: opt.Truncate = False,
    image: opt.Image = None,
) -> None:
    """What removing each head does to the model's output (zero, mean or resample ablation)."""
    with user_errors():
        json_wanted = out.check()
        if file is not None:
            if text is not None or image is not None:
                raise BadInput("TEXT, --image and --file are separate sources", "pass one of them")
            check_corpus(file)  # a missing path or a directory fails before the model loads
            if resume and store is None:
                raise BadInput("--resume continues a store", "add --store DIR")
            if store is not None:
                from attn_cli.analyses.run_store import check_run_store

                check_run_store(store, resume, "ablate")  # before the model loads
        elif store is not None or resume:
            raise BadInput("--store keeps a corpus' ablations", "add --file CORPUS")
        elif image is not None:
            from attn_cli.cli.image import check_image_alone

            check_image_alone([text] if text else [], image)
        else:
            if text is None:
                raise BadInput("no text given", "pass a sentence, - to read it from stdin, or --image FILE")
            text = read_text(text)
        if reference is not None:
            check_corpus(reference, "--reference")  # said as --reference, before the model loads
        texts = None if reference is None else list(read_corpus(reference))

        def run(progress, lazy: bool):
            loaded = loading.load()
            report = loaded.ablate(
                text,
                image=image,
                file=file,
                limit=limit,
                store=store,
                resume=resume,
                progress=None
                if progress is None or file is None
                else lambda done: progress(done, limit, "ablating texts"),
                layers=layer,
                heads=head,
                together=together,
                method=method,
                metric=metric,
                target=target,
                foil=foil,
                reference=texts,
                seed=seed,
                truncate=truncate,
            )
            if reference is not None:
                report.reference = f"{reference} ({len(texts or [])} texts)"
            return report

        run_and_emit(
            run,
            label=loading.label,
            json_wanted=json_wanted,
            output=out.output,
            save=out.save,
            render=registered_view(),
            figure=lambda report, path: save_figure(report, path, dpi=out.dpi),
        )
