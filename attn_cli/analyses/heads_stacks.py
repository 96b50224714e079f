"""`attn heads` on one input that is not a batch of texts: an encoder–decoder pair (SOURCE --target TARGET), its
encoder, decoder and cross-attention heads each scored, or a vision transformer's image (--image FILE).

One forward pass gives a Capture per stack (backends/hf_seq2seq.capture_pair) or the image's Capture; each
selected layer's whole weights are made from its q and k as the model scored them (T5's position bias
included) and scored by math/head_scores.py: square heads as `attn heads` scores a text, cross heads by the
scores that read the keys alone (cross_scores). One input: every score's mean is its value, its std 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from attn_cli.analyses.heads_report import HeadProfile, HeadsReport, SinkKey
from attn_cli.data.capture import Capture, LayerCapture
from attn_cli.data.selection import Selection
from attn_cli.math.score_names import CROSS_UNDEFINED, IMAGE_UNDEFINED
from attn_cli.plumbing.errors import BadInput

# why a registered HeadScore (data/registry) is null for a cross head: it is given one text's square weights
CROSS_PLUGIN = "cross-attention: a registered head score reads a text's square weights (queries and keys one text)"


def heads_alone(
    backend, texts, target: str | None, stacks, image: tuple[Any, str] | None, selection: Selection, corpus: list[str]
) -> HeadsReport:
    """Model.heads on one encoder–decoder pair (texts: the source) or one image ((PIL image, its source name)).
    corpus: the corpus-run options given (file, probe, store …), which one pair or image refuses."""
    from attn_cli.backends.hf_seq2seq import parse_stacks

    kind = "an image" if image is not None else "an encoder–decoder pair"
    if corpus:
        raise BadInput(
            f"{', '.join(corpus)}: {kind} is scored alone, not as a corpus",
            "attn heads --image FILE --model VIT"
            if image is not None
            else "attn heads SOURCE --target TARGET --model SEQ2SEQ, one pair",
        )
    if image is not None:
        if texts is not None or target is not None:
            raise BadInput("give either text or --image, not both", "a vision transformer reads the image only")
        return heads_image(backend, *image, selection)
    if target is None:
        raise BadInput(
            f"{backend.info.name} is an encoder–decoder model: its decoder needs a target",
            "attn heads SOURCE --target TARGET (the decoder runs teacher-forced on it)",
        )
    if not isinstance(texts, str):
        raise BadInput("an encoder–decoder model takes one source text and its --target", "run each pair alone")
    return heads_pair(backend, texts, target, selection, parse_stacks(stacks))


def heads_pair(backend, source: str, target: str, selection: Selection, stacks: Sequence[str]) -> HeadsReport:
    """Every selected head of every stack in `stacks` (encoder, decoder, cross), teacher-forced on target."""
    from attn_cli.analyses.seq2seq import capture_stacks

    chosen, source_tokens, target_tokens, captures = capture_stacks(backend, source, target, selection, stacks)
    profiles = [
        profile
        for stack, (layers, heads) in chosen.items()
        for profile in score_capture(captures[stack], layers, heads, stack, CROSS_UNDEFINED if stack == "cross" else {})
    ]
    return HeadsReport(
        model=backend.info,
        device=backend.device,
        dtype=backend.dtype,
        texts=1,
        tokens=len(source_tokens) + len(target_tokens),
        heads=profiles,
        source="arguments",
        target=target,
        decoder_layers=backend.stack_info("decoder").layers,
    )


def heads_image(backend, image, source: str, selection: Selection) -> HeadsReport:
    """Every selected head of a vision transformer over one image: [CLS] (and registers) and the patches."""
    from attn_cli.backends.vision import check_image_backend

    check_image_backend(backend)
    layers, heads = selection.resolve(backend.info)
    capture = backend.capture_image(image, layers, source=source)
    return HeadsReport(
        model=backend.info,
        device=capture.device,
        dtype=capture.dtype,
        texts=1,
        tokens=len(capture.tokens),
        heads=score_capture(capture, layers, heads, None, IMAGE_UNDEFINED),
        source=source,
        patch_grid=capture.image.to_json(),
    )


def score_capture(
    capture: Capture, layers: list[int], heads: list[int], stack: str | None, not_defined: dict[str, str]
) -> list[HeadProfile]:
    """The heads' profiles over one capture; the scores named in not_defined are None whatever they computed to.
    A cross capture (capture.keys set) is scored by cross_scores, a square one by head_scores."""
    import torch

    from attn_cli.analyses.heads import extra_value, plugin_scores
    from attn_cli.data.registry import score_names
    from attn_cli.math.head_scores import cross_scores, head_scores, label, token_flags

    names = score_names()
    extra = plugin_scores(names)  # registered HeadScores: of a square matrix, so not of a cross one
    if capture.keys is not None:
        not_defined = {**not_defined, **dict.fromkeys((score.name for score in extra), CROSS_PLUGIN)}
    queries = token_flags([capture.tokens])
    keys = None if capture.keys is None else token_flags([capture.keys])
    key_tokens = capture.keys or capture.tokens
    profiles = []
    for layer in layers:
        weights, allowed = layer_weights(capture.layers[layer], heads, capture.model)  # (h, T_q, T_k), (T_q, T_k)
        values, sinks = (
            head_scores(weights[None], allowed[None], queries)
            if keys is None
            else cross_scores(weights[None], allowed[None], keys)
        )  # (1, h, len(SCORES)), (1, h)
        rows = values[0].double().cpu()
        if extra:  # (h, len(SCORES) + len(extra)): NaN for a cross matrix, said so in not_defined
            added = [
                torch.full((len(heads),), float("nan"), dtype=torch.float64)
                if keys is not None
                else extra_value(score, weights, allowed, capture.tokens)
                for score in extra
            ]
            rows = torch.cat([rows, torch.stack(added, 1)], 1)
        for head, row, sink in zip(heads, rows.tolist(), sinks[0].tolist()):
            means = [None if name in not_defined or value != value else value for name, value in zip(names, row)]
            profiles.append(
                HeadProfile(
                    layer=layer,
                    head=head,
                    kv_head=capture.model.kv_head_of(head),
                    scores=dict(zip(names, means)),
                    std={name: None if value is None else 0.0 for name, value in zip(names, means)},
                    scored={name: int(value is not None) for name, value in zip(names, means)},
                    label=label(means),
                    sink_key=None if sink < 0 else SinkKey(sink, key_tokens[sink].text, 1),
                    stack=stack,
                    not_defined={name: why for name, why in not_defined.items()},
                )
            )
    return profiles


def layer_weights(record: LayerCapture, heads: list[int], info):
    """One layer's whole softmax weights for `heads` and the mask: (h, T_q, T_k) float32 with masked cells 0,
    (T_q, T_k) bool. The scores are the model's: q·kᵀ·scale (or its own scorer) plus any position bias (T5)."""
    from attn_cli.math import attention

    if record.weights is not None:  # a weights-only model (FSMT, MVP): the weights it returned, no Q and K
        return record.weights.float()[heads], record.mask.full()
    q = record.q[heads].float()  # (h, T_q, D)
    k = record.k[[info.kv_head_of(head) for head in heads]].float()  # (h, T_k, D): each query head's key head
    scores = record.scorer_for(heads)(q, k)  # (h, T_q, T_k)
    if record.bias is not None:
        scores = scores + record.bias.float()[heads]  # (h, T_q, T_k)
    allowed = record.mask.full()  # (T_q, T_k)
    return attention.masked_softmax(scores, allowed), allowed
