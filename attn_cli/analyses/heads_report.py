"""The report of `attn heads`: every selected head's scores over the texts, and its JSON document. No torch:
`attn heads show` reads one from a corpus store (analyses/store_read.py) without loading a model."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from attn_cli.data.capture import ModelInfo
from attn_cli.data.document import SCHEMA_VERSION, Document, counted, num_json
from attn_cli.math.score_names import BROAD_THRESHOLD, LABEL_THRESHOLD, SCORES, SINK_EPSILON
from attn_cli.plumbing.errors import BadInput

# The heads document's numbers (scores, their spread; a store's distributions and examples too): 6 decimals.
DIGITS = ".6f"


@dataclass(frozen=True)
class SinkKey:
    position: int  # within the text (0 = [CLS]/BOS)
    token: str  # as the tokenizer spells it
    texts: int  # in how many texts this key was the head's sink key


@dataclass
class HeadProfile:
    """One head: each score's mean and standard deviation over the texts where it is defined."""

    layer: int
    head: int
    kv_head: int
    # SCORES, then the scores plugins register (data/registry.score_names) → mean over texts; None where no
    # text defined it
    scores: dict[str, float | None]
    std: dict[str, float | None]  # population standard deviation over the same texts
    scored: dict[str, int]  # the same names → how many texts defined it
    label: str  # a SCORES name or "mixed" (heads.label)
    sink_key: SinkKey | None  # the key most rows put more than ε on, most often
    # An encoder–decoder model's heads (analyses/heads_stacks.py): "encoder", "decoder" or "cross"; None otherwise
    stack: str | None = None
    # score → why it is not defined for this head (score_names.CROSS_UNDEFINED, IMAGE_UNDEFINED): null, not 0
    not_defined: dict[str, str] = field(default_factory=dict)
    # a learned sink logit's (GPT-OSS's s_aux) mean share of each row's softmax, the ⟨sink⟩ column: the mean over
    # the texts of each text's mean over its rows. None: the head's layer has no learned sink (JSON: no field)
    sink_mass: float | None = None


@dataclass
class HeadsReport(Document):
    model: ModelInfo
    device: str
    dtype: str
    texts: int  # texts scored
    tokens: int  # tokens in them, special tokens included
    heads: list[HeadProfile]
    source: str  # "arguments", a file path, or "probe"
    probe: dict | None = None  # {"kind": "induction", "seed", "length", "text"} for --probe
    interrupted: bool = False  # stopped by Ctrl-C: the scores cover the texts done
    truncated: int = 0  # texts cut to the model's positions by --truncate
    target: str | None = None  # an encoder–decoder pair's target (the decoder ran teacher-forced on it); text: source
    decoder_layers: int | None = None  # … and its decoder's layers (model.layers: the encoder's)
    # an image's patch grid (PatchGrid.to_json; JSON "image") when the input was one. Not named image: a report
    # with .image is drawn as a picture (render/files.py), and this one is a heads grid
    patch_grid: dict | None = None
    thresholds: dict = field(
        default_factory=lambda: {"label": LABEL_THRESHOLD, "broad": BROAD_THRESHOLD, "sink_epsilon": SINK_EPSILON}
    )

    def summary_shape(self) -> str:
        return f"{counted(self.texts, 'text')}, {counted(self.tokens, 'token')}, {counted(len(self.heads), 'head')}"

    @property
    def score_names(self) -> tuple[str, ...]:
        """The scores this report holds, in order: the built-in ones (SCORES), then any a plugin registered."""
        return tuple(self.heads[0].scores) if self.heads else SCORES

    def head(self, layer: int, head: int, stack: str | None = None) -> HeadProfile:
        """report.head(0, 2).scores["previous_token"]; an encoder–decoder model's: report.head(0, 2, "cross")."""
        found = [
            profile
            for profile in self.heads
            if profile.layer == layer and profile.head == head and (stack is None or profile.stack == stack)
        ]
        if len(found) > 1:
            raise BadInput(
                f"head {layer}.{head} is in several stacks: {', '.join(str(profile.stack) for profile in found)}",
                "name one: report.head(0, 2, 'cross')",
            )
        if not found:
            raise BadInput(
                f"head {layer}.{head}{'' if stack is None else ' of ' + stack} is not in this report",
                f"it holds layers {spans(p.layer for p in self.heads)} × heads {spans(p.head for p in self.heads)}"
                if self.heads
                else "it holds no heads",
            )
        return found[0]

    def top(self, score: str, count: int = 5) -> list[HeadProfile]:
        """The heads with the highest mean of `score` (defined ones only), highest first."""
        if score not in self.score_names:
            raise BadInput(f"no score named {score!r}", f"scores: {', '.join(self.score_names)}")
        defined = [(value, profile) for profile in self.heads if (value := profile.scores[score]) is not None]
        defined.sort(key=lambda pair: (-pair[0], pair[1].layer, pair[1].head))
        return [profile for _, profile in defined[:count]]

    def to_json_dict(self) -> dict:
        document = corpus_document(self, "heads")
        if self.probe is not None:
            document["probe"] = dict(self.probe)
        if self.target is not None:
            from attn_cli.analyses.seq2seq import TEACHER_FORCED

            document.update(target=self.target, teacher_forcing=TEACHER_FORCED)
        if self.patch_grid is not None:
            document["image"] = dict(self.patch_grid)
        document["heads"] = [
            {
                **({} if profile.stack is None else {"stack": profile.stack}),
                "layer": profile.layer,
                "head": profile.head,
                "kv_head": profile.kv_head,
                "label": profile.label,
                "scores": {name: num_json(value, DIGITS) for name, value in profile.scores.items()},
                "std": {name: num_json(value, DIGITS) for name, value in profile.std.items()},
                "texts": self.texts,
                "scored": dict(profile.scored),
                "sink_key": None if profile.sink_key is None else asdict(profile.sink_key),
                **({} if profile.sink_mass is None else {"sink_mass": num_json(profile.sink_mass, DIGITS)}),
                **({"not_defined": dict(profile.not_defined)} if profile.not_defined else {}),
            }
            for profile in self.heads
        ]
        return document

    def to_arrow(self):
        """One row per (layer, head): layer, head, kv_head, label, then per score (score_names) its mean over the
        texts (previous_token, …), its std (previous_token_std) and how many texts defined it
        (previous_token_scored); then the sink key (sink_position, sink_token, sink_texts; null if none), and for
        a model with learned sinks each head's sink_mass."""
        from attn_cli.data.tables import records

        learned = any(profile.sink_mass is not None for profile in self.heads)

        def row(profile: HeadProfile) -> dict:
            sink = profile.sink_key
            return {
                **({} if profile.stack is None else {"stack": profile.stack}),
                "layer": profile.layer,
                "head": profile.head,
                "kv_head": profile.kv_head,
                "label": profile.label,
                **{
                    column: value
                    for name in self.score_names
                    for column, value in (
                        (name, profile.scores[name]),
                        (f"{name}_std", profile.std[name]),
                        (f"{name}_scored", profile.scored[name]),
                    )
                },
                "sink_position": None if sink is None else sink.position,
                "sink_token": None if sink is None else sink.token,
                "sink_texts": None if sink is None else sink.texts,
                # a model with learned sinks: each head's mean share of the ⟨sink⟩ column, as in the JSON
                **({"sink_mass": profile.sink_mass} if learned else {}),
            }

        return records([row(profile) for profile in self.heads], strings=("sink_token",))


def corpus_document(report, command: str) -> dict:
    """The head of a corpus run's JSON document (heads, diagnose): what ran, on what, how much of it."""
    document = {
        "schema_version": SCHEMA_VERSION,
        "command": command,
        "model": asdict(report.model),
        "device": report.device,
        "dtype": report.dtype,
        "source": report.source,
        "texts": report.texts,
        "tokens": report.tokens,
        "interrupted": report.interrupted,
        "thresholds": dict(report.thresholds),
    }
    if report.truncated:
        document["truncated"] = report.truncated
    return document


def spans(numbers) -> str:
    """Sorted distinct numbers as runs: 0, 1, 2, 3, 5 -> "0-3, 5"."""
    runs: list[list[int]] = []
    for number in sorted(set(numbers)):
        if runs and number == runs[-1][1] + 1:
            runs[-1][1] = number
        else:
            runs.append([number, number])
    return ", ".join(str(low) if low == high else f"{low}-{high}" for low, high in runs)
