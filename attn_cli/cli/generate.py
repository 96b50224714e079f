"""`attn generate PROMPT`: generate text and see what each new token attended to."""

from __future__ import annotations

from typing import Annotated

import typer

from attn_cli.cli import options as opt
from attn_cli.cli.common import read_text, registered_view, run_and_emit, save_figure
from attn_cli.cli.edge import user_errors
from attn_cli.cli.loading import Loading, loads_model
from attn_cli.cli.output import Output, figure_help, writes_output

EPILOG = (
    "Greedy by default; --sample draws at --temperature with --seed. Row i of a head is the step that "
    "produced generated token i: the attention of the token before it over everything it could see.\n\n"
    "Examples:\n\n"
    '  attn generate "The capital of France is" --model ./my-gpt2 --max-new-tokens 8\n\n'
    '  attn generate "Once upon a time" --model org/name --sample --temperature 0.8 --seed 1 --layer 5\n\n'
    "  attn generate \"1, 2, 3,\" --model ./my-llama --json | jq '.text'"
)


@loads_model
@writes_output(save=figure_help("the recorded rows (generated tokens × the tokens they saw), head by head"))
def generate_command(
    prompt: Annotated[
        str, typer.Argument(metavar="PROMPT", show_default=False, help="The text to continue; - reads it from stdin.")
    ],
    loading: Loading = Loading(),
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens", help="Stop after this many tokens.")] = 20,
    sample: Annotated[
        bool, typer.Option("--sample", metavar=opt.FLAG, help="Sample instead of taking the likeliest token.")
    ] = False,
    temperature: Annotated[float, typer.Option("--temperature", help="Sampling temperature (with --sample).")] = 1.0,
    seed: Annotated[int | None, typer.Option("--seed", help="Seed for --sample.")] = None,
    layer: opt.Layer = "all",
    head: opt.Head = "all",
    top_k: opt.TopK = None,
    out: Output = Output(),
) -> None:
    """Generate from PROMPT with a causal model (or an encoder–decoder model: PROMPT is the source) and show what
    each generated token attended to."""
    with user_errors():
        json_wanted = out.check()
        prompt = read_text(prompt)

        def run(progress, lazy: bool):
            loaded = loading.load()
            pieces: list[str] = []

            def show(piece: str) -> None:  # the text as it is produced, in the transient progress line
                pieces.append(piece)
                if progress is not None:
                    progress(len(pieces), max_new_tokens, generating_line("".join(pieces)))

            return loaded.generate(
                prompt,
                max_new_tokens=max_new_tokens,
                sample=sample,
                temperature=temperature,
                seed=seed,
                layers=layer,
                heads=head,
                top_k=top_k,
                on_token=show,
            )

        run_and_emit(
            run,
            label=loading.label,
            json_wanted=json_wanted,
            output=out.output,
            save=out.save,
            render=registered_view(per_head=out.per_head),
            figure=lambda report, path: save_figure(report, path, dpi=out.dpi, scale=out.scale),
        )


def generating_line(text: str, cells: int = 24) -> str:
    """'generating …' and the last `cells` terminal cells of the text so far, on one line, as Rich markup.

    Marks and control characters are left out: terminals disagree on their width, and a live line one
    cell wider than measured wraps and leaves a copy of itself behind."""
    import unicodedata

    from rich.cells import cell_len
    from rich.markup import escape

    shown = "".join(ch for ch in " ".join(text.split()) if not unicodedata.category(ch).startswith(("M", "C")))
    if cell_len(shown) > cells:
        while cell_len(shown) > cells - 1:
            shown = shown[1:]
        shown = "…" + shown
    return "generating " + escape(shown)
