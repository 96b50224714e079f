"""`attn heads show DIR [--layer L --head H]`: a corpus store's heads, or one head's dashboard, with no model loaded.

`attn heads` takes texts, so `show` is its sub-command only as the first word after `heads`
(cli/__init__.py's TextsOrSubcommands); `attn heads -- show` scores the word "show" as a text.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from attn_cli.cli.common import emit_json, emit_terminal, note
from attn_cli.cli.edge import user_errors
from attn_cli.cli.output import Output, writes_output
from attn_cli.plumbing.errors import BadInput

EPILOG = (
    "A store is the directory `attn heads --file CORPUS --store DIR` writes. Without --head: the heads grid "
    "and the top heads per score, as `attn heads` prints them. With --layer L --head H: that head's dashboard: a "
    "histogram per score over the texts, its top texts and a sample from each tenth of one score (--score, "
    "default the head's label), and its top edges, each a line of context with the query token and the keys it "
    "attends highlighted (marked \\[query] {key} without colour), weights after →.\n\n"
    "Examples:\n\n"
    "  attn heads show heads-store\n\n"
    "  attn heads show heads-store --layer 1 --head 4 --score induction --top 3\n\n"
    "  attn heads show heads-store --save dashboard.html\n\n"
    '  attn heads -- show      (scores the word "show" as a text)'
)


@writes_output(
    save="Also write the dashboard page (FILE.html): a head finder and every head's dashboard, offline.",
    dpi=False,
    scale=False,
)
def heads_show_command(
    store: Annotated[
        Path | None,
        typer.Argument(
            metavar="DIR", show_default=False, help="A store written by attn heads --file CORPUS --store DIR."
        ),
    ] = None,
    layer: Annotated[
        int | None,
        typer.Option(
            "--layer", "-l", metavar="LAYER", help="With --head: the layer of the head whose dashboard to show."
        ),
    ] = None,
    head: Annotated[
        str | None,
        typer.Option(
            "--head", "-H", metavar="HEAD", help="Show this head's dashboard (with --layer): --layer 1 --head 4."
        ),
    ] = None,
    score: Annotated[
        str | None,
        typer.Option(
            "--score",
            metavar="SCORE",
            help="The score whose top texts and decile samples --head shows (default: the head's label).",
        ),
    ] = None,
    top: Annotated[int, typer.Option("--top", help="Top texts and top edges shown.")] = 5,
    out: Output = Output(),
) -> None:
    """A corpus store's heads (no model needed), or with --layer L --head H one head's dashboard."""
    with user_errors():
        if store is None:
            raise BadInput(
                "attn heads show needs a store directory: attn heads show DIR",
                'to score the word "show" as a text, write attn heads -- show',
            )
        for save in out.save:
            if save.suffix.lower() not in (".html", ".htm"):
                raise BadInput(
                    f"--save {save}: attn heads show writes the dashboard page, an .html file",
                    "use --save dashboard.html",
                )
        if top < 1:
            raise BadInput(f"--top {top}: show at least 1", "use --top 5")
        json_wanted = out.check()
        place = head_place(layer, head)
        from attn_cli.analyses.store_read import open_store

        try:
            report = open_store(store)
        except BadInput as error:
            if not store.exists():  # perhaps `attn heads show me` meant the text "show me"
                error.hint = f'{error.hint}; to score "show {store}" as text, write attn heads -- show {store}'
            raise
        incomplete = report.incomplete_note()
        if incomplete:
            note(incomplete)
        dashboard = report.dashboard(*place, score=score, top=top) if place is not None else None
        if score is not None and dashboard is None:
            report.check_score(score)
            note("note: --score chooses the examples of a --head dashboard; without --head it changes nothing")
        if json_wanted:
            emit_json(dashboard or report, out.output)
            return
        from attn_cli.plumbing.config import defaults
        from attn_cli.render.store_view import DashboardView, StoreView

        emit_terminal(
            lambda: DashboardView(dashboard) if dashboard is not None else StoreView(report),
            out.save,
            defaults()["render"]["fallback_width"],
            figure=lambda path: save_page(report, path, top, place),
        )


def head_place(layer: int | None, head: str | None) -> tuple[int, int] | None:
    """--layer 1 --head 4 → (1, 4); neither → None (the store's grid). --head 1.4, the old LAYER.HEAD form,
    still works for one release, with a note."""
    if head is not None and "." in head and layer is None:
        place = parse_head(head)
        note(
            f"note: attn heads show --head {head.strip()} (LAYER.HEAD) is deprecated and goes in the next release; "
            f"use --layer {place[0]} --head {place[1]}"
        )
        return place
    if head is None and layer is None:
        return None
    if head is None or layer is None:
        given, missing = ("--layer", "--head") if head is None else ("--head", "--layer")
        raise BadInput(f"{given} picks a head's dashboard together with {missing}", "write --layer 1 --head 4")
    if not head.strip().isdigit():
        raise BadInput(f"--head {head!r} is not a head number", "write --layer 1 --head 4 (layer 1, head 4)")
    if layer < 0:
        raise BadInput(f"--layer {layer} is not a layer number", "write --layer 1 --head 4 (layer 1, head 4)")
    return layer, int(head)


def parse_head(text: str) -> tuple[int, int]:
    """'1.4' → (1, 4)."""
    layer, dot, head = text.strip().partition(".")
    if not dot or not layer.isdigit() or not head.isdigit():
        raise BadInput(f"--head {text!r} is not LAYER.HEAD", "write it like --layer 1 --head 4 (layer 1, head 4)")
    return int(layer), int(head)


def save_page(report, path: Path, top: int, start) -> None:
    from attn_cli.plumbing.atomic import atomic_path
    from attn_cli.render.dashboard_page import dashboard_html
    from attn_cli.render.files import write_figure

    with atomic_path(path, "--save") as temp:
        write_figure(temp, dashboard_html(report, top, start).encode("utf-8"))
