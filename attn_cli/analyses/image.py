"""`attn inspect --image` and `attn rollout --image`: a vision transformer's attention over an image's patches.

The capture comes from backends/vision.py; from there on an image is analysed exactly as a text is
(analyse_capture), its tokens being [CLS], the model's other special tokens and the patches r{row}c{col}.
"""

from __future__ import annotations

from attn_cli.analyses.inspect import Progress, analyse_capture
from attn_cli.analyses.inspect_report import InspectReport
from attn_cli.backends.vision import check_image_backend
from attn_cli.data.selection import Analysis, Selection
from attn_cli.plumbing.errors import BadInput


def inspect_image(
    backend,
    image,
    source: str,
    selection: Selection,
    analysis: Analysis,
    *,
    variant: str = "baseline",
    lazy: bool = False,
    progress: Progress | None = None,
) -> InspectReport:
    """One PIL image through the model; every selected head's report, as inspect_texts makes for a text.

    variant: a counterfactual recomputed per layer from the captured q and k (shared-k, no-scale,
    scoring=…); injecting it into the model (propagate) is for text only.
    """
    from attn_cli.analyses.variants import variant_named

    check_image_backend(backend)
    chosen = variant_named(variant)
    if chosen.uses_layer_input:
        raise BadInput(f"the {chosen.name} variant needs each layer's input, which attn keeps for text models only")
    layers, heads = selection.resolve(backend.info)
    capture = backend.capture_image(image, layers, source=source)
    window = selection.window(len(capture.tokens), len(layers) * len(heads), analysis.cell_limit)
    analysed = analyse_capture(capture, layers, heads, chosen, analysis, window, progress)
    return InspectReport(
        text=source,
        model=backend.info,
        device=capture.device,
        dtype=capture.dtype,
        tokens=capture.tokens,
        layers=analysed if lazy else list(analysed),  # lazy: the iterator itself, analysed as it is read
        window=window,
        variant=chosen.name,
        image=capture.image,
    )
