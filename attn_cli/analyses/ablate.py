"""`attn ablate`: what removing a head does to the model's own output.

For every selected head (or for the selected heads together, `together`), the model runs the text again with
that head's output replaced, where the head's output exists on its own (backends/interventions.py), and a
metric of its output is compared with the unchanged run's (math/effects.py). The replacement (`method`):

zero      the head outputs nothing
mean      the head outputs its mean output over the reference texts' tokens (default: the text's own tokens)
resample  at each position the head outputs what it did at a token drawn from the reference (seeded)

The metric: a language model's `loss` of the text's own next tokens (or of `target`'s, a continuation of the
text), `logit-diff` between a `target` and a `foil` token after the text, or `kl` of its next-token
distributions; an encoder's `cosine` distance of its mean-pooled sentence embedding.

Many ablations share one forward: R copies of the text, each with other heads removed, so all 72 heads of a
MiniLM take a few batched forwards instead of 72.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from attn_cli.analyses.ablate_store import AblationStore
from attn_cli.backends.capabilities import Intervenes, IntervenesImage, require
from attn_cli.backends.interventions import Fed, HeadChanges, HeadOutputs
from attn_cli.data.capture import ModelInfo
from attn_cli.data.document import SCHEMA_VERSION, Document, counted, num_json
from attn_cli.data.selection import Spec, parse_heads_of_layers
from attn_cli.data.unknown import UNKNOWN_TOKENS
from attn_cli.math import effects
from attn_cli.plumbing.errors import BadInput

METHODS = ("zero", "mean", "resample")
LM_METRICS = ("loss", "logit-diff", "kl")
ENCODER_METRICS = ("cosine",)
MASKED_METRICS = ("masked-loss", "cosine")  # an encoder with its masked-language-model head
METRICS = LM_METRICS + ENCODER_METRICS + ("masked-loss",)
# what a metric is measured in (cosine distance, 1 − cos, has no unit)
UNITS = {"loss": "nats", "logit-diff": "logits", "kl": "nats", "cosine": "", "masked-loss": "nats"}
OUTPUT_CELLS = 2**25  # float32 cells of output one batched forward may return (128 MiB): sets its rows
MAX_ROWS = 64


@dataclass
class Ablation:
    heads: list[tuple[int, int]]  # the (layer, head) pairs removed together
    value: float  # the metric with them removed (over a corpus: its mean over the texts)
    effect: float  # value − the clean run's value (over a corpus: the mean of each text's)
    std: float | None = None  # over a corpus: the effect's standard deviation over the texts
    examples: list[tuple[float, str]] = field(default_factory=list)  # over a corpus: (effect, text), largest first


@dataclass
class AblationReport(Document):
    text: str
    model: ModelInfo
    device: str
    dtype: str
    tokens: list
    method: str
    metric: str
    measured: str  # what the metric reads, in words
    clean: float  # the metric on the unchanged run
    ablations: list[Ablation]
    together: bool = False
    target: str | None = None
    foil: str | None = None
    predicted: list[int] = field(default_factory=list)  # the positions whose tokens the loss or KL scores
    reference: str | None = None  # where mean and resample replacements came from
    seed: int = 0
    truncated_from: int | None = None
    texts: int = 1  # over a corpus (--file): how many texts the values are means over

    @property
    def units(self) -> str:
        return UNITS[self.metric]

    def summary_shape(self) -> str:
        return f"{counted(len(self.ablations), 'ablation')}, {self.metric} {self.clean:.4g} clean"

    def grid(self) -> tuple[list[int], list[int], np.ndarray] | None:
        """Layers, heads and each single head's effect (layers, heads), NaN where that head was not ablated
        alone; None when the heads were ablated together."""
        single = [ablation for ablation in self.ablations if len(ablation.heads) == 1]
        if self.together or not single:
            return None
        layers = sorted({ablation.heads[0][0] for ablation in single})
        heads = sorted({ablation.heads[0][1] for ablation in single})
        grid = np.full((len(layers), len(heads)), np.nan)
        for ablation in single:
            layer, head = ablation.heads[0]
            grid[layers.index(layer), heads.index(head)] = ablation.effect
        return layers, heads, grid

    def top(self, count: int = 5) -> list[Ablation]:
        """The ablations that changed the metric most, by |effect|."""
        return sorted(self.ablations, key=lambda ablation: -abs(ablation.effect))[:count]

    def to_arrow(self):
        """One row per ablation: heads ("1.0,1.1"), layer and head (null for a set), value, effect, and over a
        corpus std and the text where the effect was largest."""
        from attn_cli.data.tables import records

        return records(
            [
                {
                    "heads": ",".join(f"{layer}.{head}" for layer, head in ablation.heads),
                    "layer": ablation.heads[0][0] if len(ablation.heads) == 1 else None,
                    "head": ablation.heads[0][1] if len(ablation.heads) == 1 else None,
                    "value": ablation.value,
                    "effect": ablation.effect,
                    **(
                        {"std": ablation.std, "largest_in": ablation.examples[0][1] if ablation.examples else None}
                        if self.texts > 1
                        else {}
                    ),
                }
                for ablation in self.ablations
            ],
            strings=("largest_in",),
        )

    def to_json_dict(self) -> dict:
        grid = self.grid()
        return {
            "schema_version": SCHEMA_VERSION,
            "command": "ablate",
            "text": self.text,
            "model": asdict(self.model),
            "device": self.device,
            "dtype": self.dtype,
            "tokens": [asdict(token) for token in self.tokens],
            "method": self.method,
            "metric": self.metric,
            "units": self.units,
            "measured": self.measured,
            "target": self.target,
            "foil": self.foil,
            "predicted": self.predicted,
            "reference": self.reference,
            "seed": self.seed,
            "together": self.together,
            "clean": num_json(self.clean),
            "ablations": [
                {
                    "heads": [list(pair) for pair in ablation.heads],
                    "value": num_json(ablation.value),
                    "effect": num_json(ablation.effect),
                    **(
                        {
                            "std": num_json(ablation.std),
                            "examples": [{"effect": num_json(e), "text": text} for e, text in ablation.examples],
                        }
                        if self.texts > 1
                        else {}
                    ),
                }
                for ablation in self.ablations
            ],
            "texts": self.texts,
            "grid": None
            if grid is None
            else {
                "layers": grid[0],
                "heads": grid[1],
                "effect": [[num_json(value) for value in row] for row in grid[2]],
            },
            "truncated_from": self.truncated_from,
        }


@dataclass
class Metric:
    name: str
    measured: str  # in words
    fed: Fed  # the run it reads: the text, or the text and its target continuation
    predicted: torch.Tensor  # (P,) positions whose tokens loss and kl score
    position: int = -1  # logit-diff: the prediction read
    target_id: int = -1
    foil_id: int = -1
    clean_output: torch.Tensor | None = None  # kl, cosine: the clean run's logits (T, V) or pooled embedding (d,)
    targets: torch.Tensor | None = None  # masked-loss: the token ids (P,) expected at the [MASK] positions

    @property
    def hidden(self) -> bool:
        """Whether the metric reads the last hidden states (cosine), not a head's logits."""
        return self.name == "cosine"

    def __call__(self, output: torch.Tensor) -> torch.Tensor:
        """The metric of each row of a forward's output: (R,)."""
        if self.name == "masked-loss":
            assert self.targets is not None
            return effects.masked_loss(output, self.predicted, self.targets)
        if self.name == "loss":
            return effects.next_token_loss(output, self.fed.ids, self.predicted)
        if self.name == "logit-diff":
            return effects.logit_difference(output, self.position, self.target_id, self.foil_id)
        assert self.clean_output is not None
        if self.name == "kl":
            return effects.output_kl(self.clean_output, output, self.predicted)
        return effects.cosine_distance(self.clean_output, effects.mean_pooled(output))


def ablate(
    backend,
    text: str | None,
    layers: Spec = "all",
    heads: Spec = "all",
    *,
    image=None,
    image_source: str = "image",
    together: bool = False,
    method: str = "zero",
    metric: str | None = None,
    target: str | None = None,
    foil: str | None = None,
    reference: Sequence[str] | None = None,
    reference_name: str | None = None,
    seed: int = 0,
    truncate: bool = False,
    pool: dict[int, torch.Tensor] | None = None,
) -> AblationReport:
    """Every selected head's ablation (or one of them all together) and what it did to the metric, on a text or
    (image: a PIL image, named image_source) on an image through a vision transformer. pool: the reference's head
    outputs, made already (a corpus reads one reference for every text)."""
    if method not in METHODS:
        raise BadInput(f"--method {method!r} is not an ablation", f"choose {', '.join(METHODS)}")
    if method == "zero" and reference is not None:
        raise BadInput("--reference is where mean and resample replacements come from", "add --method mean or resample")
    model: Intervenes | IntervenesImage
    if image is not None:
        seeing = require(backend, IntervenesImage, "attn ablate --image")
        if reference is not None or target is not None or foil is not None or metric not in (None, "cosine"):
            raise BadInput(
                "an image is measured by the cosine distance of its mean-pooled embedding",
                "leave --metric, --target, --foil and --reference out (mean and resample draw from the image itself)",
            )
        fed, model = seeing.intervention_image(image, image_source), seeing
        measure = Metric(
            "cosine", "cosine distance of the mean-pooled image embedding", fed, torch.zeros(0, dtype=torch.long)
        )
        text = image_source
    else:
        reading = require(backend, Intervenes, "attn ablate")
        assert text is not None
        fed, model = reading.intervention_input(text, truncate), reading
        measure = metric_for(reading, fed, text, metric, target, foil, truncate)
    pairs = parse_heads_of_layers(layers, heads, backend.info)
    sets = [pairs] if together else [[pair] for pair in pairs]
    clean_output = model.edited_forward(measure.fed, HeadChanges({}), hidden=measure.hidden)
    if measure.name in ("kl", "cosine"):
        measure.clean_output = clean_output[0] if measure.name == "kl" else effects.mean_pooled(clean_output)[0]
    # kl and cosine compare a run with the clean one: 0 on the clean run by definition (not 1e-16 of rounding)
    clean = 0.0 if measure.name in ("kl", "cosine") else float(measure(clean_output)[0])
    touched = sorted({layer for chosen in sets for layer, _ in chosen})
    if pool is None:
        pool = _reference_outputs(model, measure.fed, reference, touched, truncate) if method != "zero" else {}
    count = len(measure.fed.tokens)
    rows = max(1, min(MAX_ROWS, len(sets), OUTPUT_CELLS // (count * clean_output.shape[-1])))
    draws = torch.Generator().manual_seed(seed)
    values: list[float] = []
    for start in range(0, len(sets), rows):
        chunk = sets[start : start + rows]
        gates = {layer: torch.ones(len(chunk), backend.info.heads) for layer in touched}
        for row, chosen in enumerate(chunk):
            for layer, head in chosen:
                gates[layer][row, head] = 0.0
        changes = HeadChanges(gates, _replacements(method, pool, len(chunk), count, draws))
        output = model.edited_forward(measure.fed, changes, len(chunk), hidden=measure.hidden)
        values.extend(float(value) for value in measure(output))
    return AblationReport(
        text=text,
        model=backend.info,
        device=backend.device,
        dtype=backend.dtype,
        tokens=measure.fed.tokens,
        method=method,
        metric=measure.name,
        measured=measure.measured,
        clean=clean,
        ablations=[Ablation(chosen, value, value - clean) for chosen, value in zip(sets, values)],
        together=together,
        target=target,
        foil=foil,
        predicted=[int(position) for position in measure.predicted],
        reference=None
        if method == "zero"
        else reference_name or _named(reference, f"the {'image' if image is not None else 'text'} itself"),
        seed=seed,
        truncated_from=fed.truncated_from,
    )


EXAMPLES = 3  # texts kept per ablation over a corpus: where removing the heads changed the metric most
CORPUS_MEASURED = {
    "loss": "mean loss of each text's next tokens",
    "kl": "mean KL(clean ‖ ablated) of each text's predictions",
    "cosine": "cosine distance of each text's mean-pooled sentence embedding",
}


def ablate_corpus(
    backend,
    texts: Iterable[str],
    layers: Spec = "all",
    heads: Spec = "all",
    *,
    together: bool = False,
    method: str = "zero",
    metric: str | None = None,
    reference: Sequence[str] | None = None,
    reference_name: str | None = None,
    seed: int = 0,
    truncate: bool = False,
    progress=None,
    store: AblationStore | None = None,
) -> AblationReport:
    """ablate() on every text of a corpus, each text its own clean run: the mean value and effect of every
    ablation over the texts, the effect's standard deviation, and the texts where it was largest. store: each
    text's values are written there as they are made, and the texts it holds already are not run again."""
    records: list[dict] = [] if store is None else list(store.records)
    pairs = parse_heads_of_layers(layers, heads, backend.info)
    sets = [pairs] if together else [[pair] for pair in pairs]
    pool = None  # a reference's head outputs are the same for every text: made once
    if reference is not None and method != "zero":
        touched = sorted({layer for layer, _ in pairs})
        pool = _reference_outputs(require(backend, Intervenes, "attn ablate"), None, reference, touched, truncate)
    shown: AblationReport | None = None  # the one text's own report, for a corpus of one
    for index, text in enumerate(texts):
        if store is not None:
            store.check_corpus(index, text)
        if index < len(records):
            continue
        report = ablate(
            backend,
            text,
            layers,
            heads,
            together=together,
            method=method,
            metric=metric,
            reference=reference,
            reference_name=reference_name,
            seed=seed + index,
            truncate=truncate,
            pool=pool,
        )
        shown = report
        values_ = [ablation.value for ablation in report.ablations]
        record = {"index": index, "text": text, "metric": report.metric, "clean": report.clean, "values": values_}
        if store is not None:
            store.append(record)
        records.append(record)
        if progress is not None:
            progress(index + 1)
    if not records:
        raise BadInput("the corpus has no texts", "give --file a file with a text per line")
    if len(records) == 1 and shown is not None:
        return shown
    values = np.array([record["values"] for record in records])  # (texts, ablations)
    clean = np.array([record["clean"] for record in records])  # (texts,)
    effects_ = values - clean[:, None]
    order = np.argsort(-effects_, axis=0, kind="stable")[:EXAMPLES]  # (EXAMPLES, N) the texts with the largest
    ablations = [
        Ablation(
            chosen,
            float(values[:, column].mean()),
            float(effects_[:, column].mean()),
            float(effects_[:, column].std()),
            [(float(effects_[row, column]), records[row]["text"]) for row in order[:, column]],
        )
        for column, chosen in enumerate(sets)
    ]
    name = records[0]["metric"]
    return AblationReport(
        text=f"{len(records)} texts",
        model=backend.info,
        device=backend.device,
        dtype=backend.dtype,
        tokens=[],
        method=method,
        metric=name,
        measured=f"{CORPUS_MEASURED.get(name, name)}, averaged over the texts",
        clean=float(clean.mean()),
        ablations=ablations,
        together=together,
        reference=None if method == "zero" else reference_name or _named(reference, "each text itself"),
        seed=seed,
        texts=len(records),
    )


def _named(reference: Sequence[str] | None, itself: str) -> str:
    """Where mean and resample replacements came from, in words."""
    return itself if reference is None else counted(len(reference), "reference text")


def metric_for(model, fed: Fed, text: str, metric, target, foil, truncate: bool) -> Metric:
    """The metric asked for (or the model's default), with the run and the positions it reads."""
    lm, masked = fed.logits, fed.mask_id is not None
    if metric is None:
        metric = ("logit-diff" if target is not None and foil is not None else "loss") if lm else "cosine"
        metric = "masked-loss" if masked and target is not None else metric
    if metric not in METRICS:
        raise BadInput(f"--metric {metric!r} is not a metric", f"choose {', '.join(METRICS)}")
    if masked:
        if metric not in MASKED_METRICS:
            raise BadInput(
                f"--metric {metric} reads a language model's next-token predictions",
                f"this masked language model takes {', '.join(MASKED_METRICS)}",
            )
        if metric == "masked-loss":
            return _masked(model, fed, target, foil, truncate)
    if metric == "masked-loss":
        raise BadInput("--metric masked-loss needs a masked-language-model head", "use a *ForMaskedLM checkpoint")
    if lm and metric not in LM_METRICS:
        raise BadInput(
            f"--metric {metric} reads an encoder's embedding", f"this language model takes {', '.join(LM_METRICS)}"
        )
    if not lm and metric not in ENCODER_METRICS:
        raise BadInput(
            f"--metric {metric} reads a language model's predictions, and this model has no language-model head",
            f"an encoder takes {', '.join(ENCODER_METRICS)}",
        )
    if metric == "cosine":
        if target is not None or foil is not None:
            raise BadInput(
                "--target and --foil name tokens a language model predicts", "leave them out for --metric cosine"
            )
        return Metric(
            metric, "cosine distance of the mean-pooled sentence embedding", fed, torch.zeros(0, dtype=torch.long)
        )
    if metric == "logit-diff":
        if target is None or foil is None:
            raise BadInput(
                "--metric logit-diff needs --target and --foil", "two single tokens that may follow the text"
            )
        position = text_end(fed) - 1
        target_id, foil_id = (
            next_token_id(model, fed, text, word, name, truncate)
            for word, name in ((target, "--target"), (foil, "--foil"))
        )
        measured = f"logit({target!r}) − logit({foil!r}) after the text"
        return Metric(metric, measured, fed, torch.zeros(0, dtype=torch.long), position, target_id, foil_id)
    if foil is not None:
        raise BadInput(
            f"--foil is for --metric logit-diff, not {metric}", "leave --foil out, or add --metric logit-diff"
        )
    run, predicted = fed, own_tokens(fed)
    if target is not None:
        run = model.intervention_input(joined(text, target), truncate)
        predicted = continuation(fed, run, target)
    if not len(predicted):
        raise BadInput("the text has no token after its first to predict", "give a longer text, or --target")
    what = (
        f"the {counted(len(predicted), 'token')} of --target"
        if target is not None
        else f"the text's {counted(len(predicted), 'next token')}"
    )
    measured = ("mean loss of " if metric == "loss" else "mean KL(clean ‖ ablated) of the predictions of ") + what
    return Metric(metric, measured, run, predicted)


def _masked(model, fed: Fed, target, foil, truncate: bool) -> Metric:
    """masked-loss: the loss of --target's tokens, one per [MASK] of the text, in order."""
    positions = [token.index for token in fed.tokens if token.id == fed.mask_id]
    if not positions:
        raise BadInput(
            "--metric masked-loss scores the text's [MASK] tokens, and it has none", "write [MASK] in the text"
        )
    if target is None or foil is not None:
        raise BadInput("--metric masked-loss needs --target (a word per [MASK]) and no --foil")
    expected = [token.id for token in model.intervention_input(target, truncate).tokens if not token.special]
    if len(expected) != len(positions):
        raise BadInput(
            f"--target {target!r} is {counted(len(expected), 'token')}, and the text has {counted(len(positions), '[MASK]')}",
            "give one token per [MASK], in order",
        )
    measured = f"mean loss of {target!r} at the text's {counted(len(positions), '[MASK]')}"
    return Metric(
        "masked-loss",
        measured,
        fed,
        torch.tensor(positions, dtype=torch.long),
        targets=torch.tensor(expected, dtype=torch.long),
    )


def text_end(fed: Fed) -> int:
    """How many tokens the text has before any special tokens the tokenizer puts after it (an [SEP], an EOS)."""
    end = len(fed.tokens)
    while end > 1 and fed.tokens[end - 1].special:
        end -= 1
    return end


def own_tokens(fed: Fed) -> torch.Tensor:
    """The positions a language model predicts from the text itself: every token after the first that is not
    a special token."""
    return torch.tensor([token.index for token in fed.tokens[1:] if not token.special], dtype=torch.long)


def joined(text: str, continuation: str) -> str:
    return text + ("" if text[-1:].isspace() or continuation[:1].isspace() else " ") + continuation


def continuation(fed: Fed, run: Fed, target: str) -> torch.Tensor:
    """The positions of `run` (text + target) that are the target's tokens: after the text's own, which the
    joined text must begin with."""
    end = text_end(fed)
    if len(run.ids) <= end or not torch.equal(run.ids[:end], fed.ids[:end]):
        raise BadInput(
            f"--target {target!r} does not continue the text token by token",
            "the text's last word and the target's first merge into other tokens: start the target with a space",
        )
    stop = text_end(run)
    return torch.arange(end, stop, dtype=torch.long)


def next_token_id(model, fed: Fed, text: str, word: str, option: str, truncate: bool) -> int:
    """The id of `word` as the one token that follows the text."""
    run = model.intervention_input(joined(text, word), truncate)
    positions = continuation(fed, run, word)
    if len(positions) != 1:
        raise BadInput(
            f"{option} {word!r} is {counted(len(positions), 'token')} after the text",
            "give one token of the vocabulary",
        )
    if run.tokens[int(positions[0])].text in UNKNOWN_TOKENS:
        raise BadInput(
            f"{option} {word!r} is not in the model's vocabulary (it reads as {run.tokens[int(positions[0])].text})",
            "give a token the model knows",
        )
    return int(run.ids[positions[0]])


def _reference_outputs(model, fed: Fed | None, reference, layers: list[int], truncate: bool) -> dict[int, torch.Tensor]:
    """Every touched layer's head outputs at every reference token, (N, H, D) per layer (the text's own tokens
    when no reference is given)."""
    pooled: dict[int, list[torch.Tensor]] = {layer: [] for layer in layers}
    if reference is None:
        assert fed is not None  # no reference: the text's own tokens
    runs = [fed] if reference is None else [model.intervention_input(text, truncate) for text in reference]
    if not runs:
        raise BadInput("the reference has no texts", "give --reference a file with a text per line")
    for run in runs:
        kept = HeadOutputs()
        model.edited_forward(run, kept)
        for layer in layers:
            pooled[layer].append(kept.outputs[layer][0])  # (T, H, D)
    return {layer: torch.cat(outputs) for layer, outputs in pooled.items()}


def _replacements(method: str, pool: dict, rows: int, count: int, draws: torch.Generator) -> dict:
    """What the removed heads output instead, per layer: nothing (zero), the reference mean (H, D), or (R, T,
    H, D) outputs at reference tokens drawn per row and position (the same draw for every layer)."""
    if method == "zero":
        return {}
    if method == "mean":
        return {layer: outputs.mean(0) for layer, outputs in pool.items()}
    size = next(iter(pool.values())).shape[0]
    drawn = torch.randint(size, (rows, count), generator=draws)
    return {layer: outputs[drawn.to(outputs.device)] for layer, outputs in pool.items()}
