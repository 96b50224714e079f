"""`attn inspect --image FILE` and `attn rollout --image FILE`: a vision transformer's attention over an image."""

from __future__ import annotations

from attn_cli.cli.common import run_and_emit
from attn_cli.data.image import parse_query
from attn_cli.plumbing.errors import BadInput


def check_image_alone(texts, image: str) -> None:
    """An image run takes no text: the two are different models' inputs."""
    if texts:
        raise BadInput("give either text or --image, not both", "a vision transformer reads the image only")


def inspect_image_command(
    texts,
    image: str,
    query: str | None,
    *,
    loading,
    layer,
    head,
    top_k,
    panels,
    json_wanted,
    out,
    variant,
    rows,
    cols,
    full,
    include,
    measure,
) -> None:
    """The image's report: JSON, or the picture in the terminal (the head's overlay and every head's)."""
    check_image_alone(texts, image)
    chosen = parse_query(query)

    def run(progress, lazy: bool):
        loaded = loading.load()
        # The pictures need each head's query rows: whole matrices for the terminal and figures (ViT-base's 144
        # heads × 197² pass the cell limit that keeps JSON documents small), the limit for JSON as for text.
        keep = full or (not json_wanted and rows is None and cols is None)
        report = loaded.inspect_image(
            image,
            layers=layer,
            heads=head,
            top_k=top_k,
            variant=variant,
            rows=rows,
            cols=cols,
            full=keep,
            include=include,
            measure=measure,
            progress=progress,
        )
        if chosen is not None:
            report.image.token_of(*chosen)  # a patch off the grid fails before anything is drawn
        return report

    def render(report):
        if panels:  # the token views (heatmaps over 1 + patches tokens) when asked for by name
            from attn_cli.render.terminal import render_report

            return render_report(report, panels, out.per_head)
        from attn_cli.render.image_view import render_image_report

        return render_image_report(report, chosen)

    def figure(report, path):
        from attn_cli.cli.common import note
        from attn_cli.render.files import save_figure as write

        for warning in write(report, path, panels, out.dpi, out.per_head, query=chosen):
            note(warning)

    run_and_emit(
        run,
        label=loading.label,
        json_wanted=json_wanted,
        output=out.output,
        save=out.save,
        render=render,
        figure=figure,
    )
