"""Options shared by the commands, declared once (Typer reads the Annotated metadata)."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from attn_cli.data.selection import Panel


class DType(str, Enum):
    auto = "auto"
    float32 = "float32"
    float16 = "float16"
    bfloat16 = "bfloat16"


class Include(str, Enum):
    qkv = "qkv"


MODEL_PANEL = "Model"  # the loading options, grouped in --help
OUTPUT_SETTINGS = ("save_weights",)  # -O settings that name a file attn writes (the toy's); others are read
PANEL_NAMES = tuple(panel.value for panel in Panel)  # --show

Text = Annotated[
    str, typer.Argument(metavar="TEXT", help="The text to inspect; - reads it from stdin.", show_default=False)
]
Image = Annotated[
    str | None,
    typer.Option(
        "--image",
        metavar="FILE",
        help="Read an image (PNG, JPEG; - reads stdin) with a vision transformer (ViT, DeiT, DINOv2, CLIP or SigLIP "
        "vision) instead of text.",
    ),
]
Query = Annotated[
    str | None,
    typer.Option(
        "--query",
        metavar="PATCH",
        help="With --image: draw the attention from this patch, given as ROW,COL (3,7). Default: from [CLS].",
    ),
]
Target = Annotated[
    str | None,
    typer.Option(
        "--target",
        help="Encoder–decoder models (BART, Marian, T5 …): the decoder runs teacher-forced on TARGET; TEXT is "
        "the source. Cross-attention heads are target rows × source columns.",
    ),
]
Stack = Annotated[
    str, typer.Option("--stack", help="Encoder–decoder models: encoder, decoder, cross (comma-separated) or all.")
]
Model = Annotated[
    str | None,
    typer.Option(
        "--model",
        "-m",
        envvar="ATTN_MODEL",
        rich_help_panel=MODEL_PANEL,
        help="minilm (bundled), a local Hugging Face model directory, or a hub id in the HF cache.",
    ),
]
Layer = Annotated[str, typer.Option("--layer", "-l", help="Layers: 3, 0,2, 1-4 or all.")]
LayerRange = Annotated[  # rollout and attribute multiply consecutive layers
    str, typer.Option("--layer", "-l", help="The consecutive layers to roll out: all, or a range like 0-3.")
]
Head = Annotated[str, typer.Option("--head", "-H", help="Heads: 3, 0,2, 1-4 or all.")]
TopK = Annotated[int | None, typer.Option("--top-k", "-k", help="Most-attended keys per query. Default: 3.")]
FLAG = ""  # the metavar of an on/off flag: Typer would print <bool> in its type column

IncludeOpt = Annotated[
    list[Include] | None, typer.Option("--include", help="Extra JSON fields: qkv adds q, k, v and output per head.")
]


class ColourScale(str, Enum):
    fixed = "fixed"
    head = "head"


Device = Annotated[
    str,
    typer.Option(
        "--device",
        "-d",
        envvar="ATTN_DEVICE",
        rich_help_panel=MODEL_PANEL,
        help="auto, cpu, cuda, cuda:N or mps. auto picks CUDA, then MPS, then CPU.",
    ),
]
DTypeOpt = Annotated[
    DType,
    typer.Option(
        "--dtype",
        rich_help_panel=MODEL_PANEL,
        metavar="DTYPE",
        help="Model weights dtype: auto (as saved), float32, float16 or bfloat16. Analysis is always float32.",
    ),
]
Truncate = Annotated[
    bool,
    typer.Option("--truncate", metavar=FLAG, help="Cut text longer than the model's positions instead of failing."),
]
AllowPickle = Annotated[
    bool,
    typer.Option(
        "--allow-pickle",
        metavar=FLAG,
        rich_help_panel=MODEL_PANEL,
        help="Allow pickle checkpoints (pytorch_model.bin). Pickles can run code: only for sources you trust.",
    ),
]
Propagate = Annotated[
    bool,
    typer.Option(
        "--propagate",
        metavar=FLAG,
        help="Inject the variant into every layer so its effect compounds through the model "
        "(default: recompute each layer from the real model's inputs).",
    ),
]
Revision = Annotated[
    str | None,
    typer.Option("--revision", rich_help_panel=MODEL_PANEL, help="Branch, tag or commit of a hub model (org/name)."),
]
TrustRemoteCode = Annotated[
    bool,
    typer.Option(
        "--trust-remote-code",
        metavar=FLAG,
        rich_help_panel=MODEL_PANEL,
        help="Run Python code shipped with a hub model. Off by default: only for sources you trust.",
    ),
]
DeviceMap = Annotated[
    str | None,
    typer.Option(
        "--device-map",
        rich_help_panel=MODEL_PANEL,
        help="Let accelerate place a model too large for one device (auto, balanced, sequential); "
        "needs the \\[big] extra. Captured Q, K, V are analysed on --device.",
    ),
]
Full = Annotated[
    bool,
    typer.Option(
        "--full",
        metavar=FLAG,
        help="Keep whole score and weight matrices however large (JSON grows with heads × tokens²).",
    ),
]
Words = Annotated[
    bool,
    typer.Option(
        "--words",
        metavar=FLAG,
        help="Merge subword pieces into words: attention to a word is the sum over its pieces, from a word the "
        "mean over them (rows still sum to 1). Scores are left out: they do not add up over pieces.",
    ),
]
Rows = Annotated[str | None, typer.Option("--rows", help="Keep only query rows START:STOP of the matrices.")]
Cols = Annotated[str | None, typer.Option("--cols", help="Keep only key columns START:STOP of the matrices.")]


# A backend's own settings (backends/*.py declare them as `Options`).
ModelOptions = Annotated[
    list[str] | None,
    typer.Option(
        "--option",
        "-O",
        metavar="KEY=VALUE",
        show_default=False,
        rich_help_panel=MODEL_PANEL,
        help="A setting of the model's backend, repeatable. The toy: d_model, heads, layers, positions, seed, "
        "scoring, additive_hidden, shared_projection, causal, valid_len, config, weights, save_weights "
        "(e.g. -O heads=1 -O causal=true). Hugging Face models: revision, allow_pickle, trust_remote_code, "
        "device_map; the bundled minilm: device_map.",
    ),
]

CorpusFile = Annotated[
    Path | None,
    typer.Option(
        "--file", "-f", help='A corpus: a text per line, or JSONL with a "text" field per line; - reads stdin.'
    ),
]
BatchSize = Annotated[int, typer.Option("--batch-size", "-b", help="Texts per padded batch.")]
