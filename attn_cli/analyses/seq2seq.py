"""`attn inspect SOURCE --target TARGET` on an encoder–decoder model: one teacher-forced forward, each stack of
attention analysed as its own report (encoder: source × source, decoder: target × target, cross: target ×
source), and one document (PairReport) holding them in the model's order.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from attn_cli.analyses.inspect import Progress, analyse_capture, check_texts
from attn_cli.analyses.inspect_report import (
    InspectReport,
    LayerReport,
    layer_json,
    layer_text,
    run_header,
)
from attn_cli.backends.capabilities import Seq2Seq, supports
from attn_cli.data.capture import Token
from attn_cli.data.document import Document, counted, dumps, object_chunks, short
from attn_cli.data.selection import Analysis, Selection
from attn_cli.plumbing.errors import BadInput

# How the decoder was run, said in the document: what its rows (and the cross-attention's) are
TEACHER_FORCED = (
    "the decoder's inputs are its start token, then the target's tokens but the last: "
    "row i is the position that predicts target token i"
)


@dataclass
class PairReport(Document):
    """Every selected stack of one source → target pair; stacks[i] is an InspectReport whose layers say their
    stack. The cross report's tokens are the target's (rows) and its keys the source's (columns)."""

    text: str  # the source
    target: str
    tokens: list[Token]  # the source's
    target_tokens: list[Token]  # the decoder's inputs (TEACHER_FORCED)
    stacks: list[InspectReport]
    truncated_from: None = None  # (run_header reads it) a pair is never cut

    def summary_shape(self) -> str:
        return (
            f"→ {short(self.target)}, {counted(len(self.tokens), 'source token')} × "
            f"{counted(len(self.target_tokens), 'target token')}"
        )

    @property
    def model(self):
        return self.stacks[0].model

    @property
    def device(self) -> str:
        return self.stacks[0].device

    @property
    def dtype(self) -> str:
        return self.stacks[0].dtype

    @property
    def teacher_forcing_note(self) -> str:
        return TEACHER_FORCED

    @property
    def matrices_left_out(self) -> bool:
        return any(report.matrices_left_out for report in self.stacks)

    def json_header(self) -> dict:
        return {
            **run_header(self, "inspect"),
            "target": self.target,
            "target_tokens": [token.to_json() for token in self.target_tokens],
            "teacher_forcing": TEACHER_FORCED,
            "variant": "baseline",
            "matrices_left_out": self.matrices_left_out,
        }

    def json_chunks(self) -> Iterator[str]:
        return object_chunks(
            self.json_header(),
            "layers",
            (iter([_with_tokens(layer_text(layer), report)]) for report in self.stacks for layer in report.layers),
        )

    def to_json_dict(self) -> dict:
        import json

        return {
            **self.json_header(),
            "layers": [
                json.loads(_with_tokens(dumps(layer_json(layer)), report))
                for report in self.stacks
                for layer in report.layers
            ],
        }


def _with_tokens(text: str, report: InspectReport) -> str:
    """A layer's JSON text with its "queries" and "keys" token lists where they are not the document's "tokens"
    (the source's): the decoder's (target × target) and the cross-attention's (target × source)."""
    if report.layer_list() and report.layer_list()[0].stack == "encoder":
        return text
    queries = dumps([token.to_json() for token in report.tokens])
    keys = dumps([token.to_json() for token in report.key_axis])
    return text.replace('"heads": [', f'"queries": {queries}, "keys": {keys}, "heads": [', 1)


def capture_stacks(backend, source: str, target: str | None, selection: Selection, stacks: Sequence[str]):
    """One teacher-forced forward of an encoder–decoder model: the (layers, heads) chosen per stack, the source's
    and the decoder's tokens, and a Capture per stack (hf_seq2seq.capture_pair)."""
    check_texts([source] if target is None else [source, target])
    if not supports(backend, Seq2Seq):
        raise BadInput(
            f"--target is for encoder–decoder models; {backend.info.name} has one stack of attention", "drop --target"
        )
    chosen = {stack: selection.resolve(backend.stack_info(stack)) for stack in stacks}
    source_tokens, target_tokens, captures = backend.capture_pair(
        source, target, {stack: layers for stack, (layers, _) in chosen.items()}
    )
    return chosen, source_tokens, target_tokens, captures


def inspect_pair(
    backend,
    source: str,
    target: str | None,
    selection: Selection,
    analysis: Analysis,
    stacks: Sequence[str],
    progress: Progress | None = None,
) -> PairReport:
    """Run the model once teacher-forced on target; one InspectReport per stack, in `stacks`' order."""
    from attn_cli.analyses.variants import VARIANTS

    if target is None and list(stacks) != ["encoder"]:
        raise BadInput("the decoder and cross-attention need a target", "pass --target TEXT")
    chosen, source_tokens, target_tokens, captures = capture_stacks(backend, source, target, selection, stacks)
    reports = []
    for stack, (layers, heads) in chosen.items():
        capture = captures[stack]
        keys = None if capture.keys is None else len(capture.keys)
        window = selection.window(len(capture.tokens), len(layers) * len(heads), analysis.cell_limit, keys)
        analysed = [
            LayerReport(layer.layer, layer.heads, stack)
            for layer in analyse_capture(capture, layers, heads, VARIANTS["baseline"], analysis, window, progress)
        ]
        reports.append(
            InspectReport(
                text=source if stack == "encoder" or target is None else target,  # None: only the encoder
                model=capture.model,
                device=capture.device,
                dtype=capture.dtype,
                tokens=capture.tokens,
                layers=analysed,
                window=window,
                keys=capture.keys,
            )
        )
    return PairReport(
        text=source, target=target or "", tokens=source_tokens, target_tokens=target_tokens, stacks=reports
    )
