"""`attn patch`: activation patching per head, between a clean text and a corrupted one of the same length.

Denoising (the default): the corrupted text runs with one head's output taken from the clean run, at every
position (or, `by_position`, at one); noising: the clean text runs with one head's output from the corrupted
run. The metric is the logit difference of a `target` and a `foil` token after the text, and each patch is
placed on the scale from the corrupted run (0) to the clean run (1):

    recovery = (LD_patched − LD_corrupt) / (LD_clean − LD_corrupt)

so a denoising patch that restores the clean answer reads 1, and a noising patch that leaves the clean run
as it was reads 1 too (one that breaks it reads 0). These are TransformerLens' semantics for
`get_act_patch_attn_head_out_all_pos` and `_by_pos` (patching hook_z, the head's output before W_O), with
its normalised logit-difference metric. A patch is an ablation whose replacement is the other run's output
at the same position (analyses/ablate.py, backends/interventions.py); many patches share one forward.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import torch

from attn_cli.analyses.ablate import MAX_ROWS, OUTPUT_CELLS, metric_for
from attn_cli.backends.capabilities import Intervenes, require
from attn_cli.backends.interventions import HeadChanges, HeadOutputs
from attn_cli.data.capture import ModelInfo
from attn_cli.data.document import SCHEMA_VERSION, Document, counted, num_json
from attn_cli.data.selection import Spec, parse_heads_of_layers
from attn_cli.plumbing.errors import BadInput, UnsupportedModel

DIRECTIONS = ("denoising", "noising")


@dataclass
class Patch:
    layer: int
    head: int
    position: int | None  # None: every position
    value: float  # the logit difference of the patched run
    recovery: float  # its place between the corrupted run (0) and the clean run (1)


@dataclass
class PatchReport(Document):
    clean: str
    corrupt: str
    model: ModelInfo
    device: str
    dtype: str
    tokens: list  # the clean text's
    corrupt_tokens: list
    direction: str
    target: str
    foil: str
    measured: str
    clean_value: float  # the logit difference of the clean run
    corrupt_value: float  # … and of the corrupted run
    patches: list[Patch]
    by_position: bool = False
    truncated_from: int | None = None

    @property
    def text(self) -> str:  # what a figure's title line shows
        return self.clean

    def summary_shape(self) -> str:
        return f"{len(self.patches)} patched heads, {self.direction}"

    def grid(self) -> tuple[list[int], list[int], np.ndarray]:
        """Layers, heads and each head's recovery: (layers, heads) patched at every position, or (layers,
        positions, heads) one position at a time (TransformerLens' by-position layout); NaN where not patched."""
        layers = sorted({patch.layer for patch in self.patches})
        heads = sorted({patch.head for patch in self.patches})
        shape = (len(layers), len(self.tokens), len(heads)) if self.by_position else (len(layers), len(heads))
        grid = np.full(shape, np.nan)
        for patch in self.patches:
            layer, head = layers.index(patch.layer), heads.index(patch.head)
            grid[(layer, head) if patch.position is None else (layer, patch.position, head)] = patch.recovery
        return layers, heads, grid

    def top(self, count: int = 5) -> list[Patch]:
        """The patches whose recovery is farthest from nothing happening (0 denoising, 1 noising)."""
        rest = 0.0 if self.direction == "denoising" else 1.0
        return sorted(self.patches, key=lambda patch: -abs(patch.recovery - rest))[:count]

    def to_arrow(self):
        """One row per patch: layer, head, position (null: every position), value (the logit difference), recovery."""
        from attn_cli.data.tables import records

        return records([asdict(patch) for patch in self.patches])

    def to_json_dict(self) -> dict:
        layers, heads, grid = self.grid()
        return {
            "schema_version": SCHEMA_VERSION,
            "command": "patch",
            "clean": self.clean,
            "corrupt": self.corrupt,
            "model": asdict(self.model),
            "device": self.device,
            "dtype": self.dtype,
            "tokens": [asdict(token) for token in self.tokens],
            "corrupt_tokens": [asdict(token) for token in self.corrupt_tokens],
            "direction": self.direction,
            "target": self.target,
            "foil": self.foil,
            "measured": self.measured,
            "clean_value": num_json(self.clean_value),
            "corrupt_value": num_json(self.corrupt_value),
            "by_position": self.by_position,
            "patches": [
                {
                    "layer": patch.layer,
                    "head": patch.head,
                    "position": patch.position,
                    "value": num_json(patch.value),
                    "recovery": num_json(patch.recovery),
                }
                for patch in self.patches
            ],
            "grid": {
                "layers": layers,
                "heads": heads,
                "axes": ["layer", "position", "head"] if self.by_position else ["layer", "head"],
                "recovery": np.vectorize(num_json, otypes=[object])(grid).tolist(),
            },
            "truncated_from": self.truncated_from,
        }


def patch(
    backend,
    clean: str,
    corrupt: str,
    layers: Spec = "all",
    heads: Spec = "all",
    *,
    target: str,
    foil: str,
    by_position: bool = False,
    direction: str = "denoising",
    truncate: bool = False,
) -> PatchReport:
    """Every selected head patched from one run into the other, and where each patched run lands between them."""
    model = require(backend, Intervenes, "attn patch")
    if direction not in DIRECTIONS:
        raise BadInput(f"--direction {direction!r} is not a direction", f"choose {', '.join(DIRECTIONS)}")
    pairs = parse_heads_of_layers(layers, heads, backend.info)
    clean_fed, corrupt_fed = model.intervention_input(clean, truncate), model.intervention_input(corrupt, truncate)
    if not clean_fed.logits:  # the model first: no other text would make it serve (exit 1, as require's refusals)
        raise UnsupportedModel(
            f"attn patch reads a language model's logits, and {backend.info.name} has no language-model head",
            "use a causal language model, such as --model lab or a GPT-2",
        )
    if len(clean_fed.ids) != len(corrupt_fed.ids):
        raise BadInput(
            f"the clean text is {counted(len(clean_fed.ids), 'token')} and the corrupted one "
            f"{len(corrupt_fed.ids)}: a head's output is patched position by position",
            "make the corrupted text as many tokens long (change words for words of one token each)",
        )
    measure = metric_for(model, clean_fed, clean, "logit-diff", target, foil, truncate)
    source, run = (clean_fed, corrupt_fed) if direction == "denoising" else (corrupt_fed, clean_fed)
    kept = HeadOutputs()
    source_logits = model.edited_forward(source, kept)
    run_logits = model.edited_forward(run, HeadChanges({}))
    source_value, run_value = float(measure(source_logits)[0]), float(measure(run_logits)[0])
    clean_value, corrupt_value = (source_value, run_value) if direction == "denoising" else (run_value, source_value)
    count = len(run.ids)
    units = [(layer, head, position) for layer, head in pairs for position in (range(count) if by_position else [None])]
    touched = sorted({layer for layer, _ in pairs})
    replacements = {layer: kept.outputs[layer] for layer in touched}  # (1, T, H, D): the other run's outputs
    rows = max(1, min(MAX_ROWS, len(units), OUTPUT_CELLS // (count * run_logits.shape[-1])))
    span = clean_value - corrupt_value
    if abs(span) < 1e-6:
        raise BadInput(
            f"the clean and the corrupted text give the same {measure.measured} ({clean_value:.4g}): "
            "there is nothing to recover",
            "corrupt the clean text where it decides between --target and --foil",
        )
    patches: list[Patch] = []
    for start in range(0, len(units), rows):
        chunk = units[start : start + rows]
        gates = {layer: torch.ones(len(chunk), count, backend.info.heads) for layer in touched}
        for row, (layer, head, position) in enumerate(chunk):
            gates[layer][row, slice(None) if position is None else position, head] = 0.0
        values = measure(model.edited_forward(run, HeadChanges(gates, replacements), len(chunk)))
        for (layer, head, position), value in zip(chunk, values.tolist()):
            recovery = (value - corrupt_value) / span if span else float("nan")
            patches.append(Patch(layer, head, position, value, recovery))
    return PatchReport(
        clean=clean,
        corrupt=corrupt,
        model=backend.info,
        device=backend.device,
        dtype=backend.dtype,
        tokens=clean_fed.tokens,
        corrupt_tokens=corrupt_fed.tokens,
        direction=direction,
        target=target,
        foil=foil,
        measured=measure.measured,
        clean_value=clean_value,
        corrupt_value=corrupt_value,
        patches=patches,
        by_position=by_position,
        truncated_from=clean_fed.truncated_from,
    )
