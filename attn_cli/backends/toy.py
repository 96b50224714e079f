"""The textbook model (`--model toy`): seeded word embeddings, W_Q, W_K, W_V, softmax, W_O.

It is the small example of the background articles, made deterministic: the
same token gets the same vector in every sentence and run (derived from the
seed and the token), the projections come from the seed or a .safetensors file,
and every choice a pretrained model fixes is open: the scoring function, the
mask, shared projections. Shapes: B texts, T tokens, d = d_model, H heads,
Dh = d / H.

Each layer is X ← X + W_O·concat_h(softmax(score(Q_h, K_h) + mask)·V_h).
"""

from __future__ import annotations

import hashlib
import itertools
import math
import re
import typing
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields, make_dataclass
from pathlib import Path

import torch

from attn_cli.backends.base import parse_options
from attn_cli.backends.toy_checks import (
    MAX_TOKENS,
    check_finite_weights,
    check_sizes,
    check_token_count,
    read_toml_table,
)
from attn_cli.backends.validate import check_finite, check_finite_tensor
from attn_cli.data.capture import Capture, LayerCapture, ModelInfo, Token, sequence_of
from attn_cli.math import attention, scoring
from attn_cli.math.masks import AttentionMask
from attn_cli.plumbing.errors import AttnError, BadInput

# CJK (and kana, hangul) one character a token; otherwise words, and each punctuation mark.
_TOKEN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\u3040-\u30ff\uac00-\ud7af\uf900-\ufaff]|\w+|[^\w\s]")


@dataclass(frozen=True)
class ToyConfig:
    d_model: int = 32
    heads: int = 4
    layers: int = 1
    positions: str = "none"  # none | sinusoidal
    seed: int = 0
    scoring: str = "scaled-dot"  # dot | scaled-dot | cosine | bilinear | additive
    additive_hidden: int = 16
    shared_projection: bool = False  # W_Q = W_K = W_V, as the article's fc[0]
    causal: bool = False  # mask the future
    valid_len: int | None = None  # keys at or past this position are masked (the articles' masked softmax)

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads


# The options `attn.load("toy", …)` and `-O key=value` take: every ToyConfig field (None: from
# configs/toy.toml and the config file), and the files. A new ToyConfig field is an option by itself.
_SETTINGS = typing.get_type_hints(ToyConfig)
Options = make_dataclass(
    "Options",
    [
        *((field.name, _SETTINGS[field.name] | None, None) for field in fields(ToyConfig)),
        ("config", Path | None, None),  # a TOML file with a [toy] table, over configs/toy.toml
        ("weights", Path | None, None),  # W_Q, W_K, W_V, W_O … from a .safetensors file
        ("save_weights", Path | None, None),  # write the weights in use to a .safetensors file
    ],
    frozen=True,
)
LABEL = "the toy model"


def load(name: str, *, device: str, dtype: str, options) -> ToyBackend:
    """The toy from its options (backends/base.py contract). It computes in float32."""
    from attn_cli.plumbing.atomic import check_writable

    if dtype not in ("auto", "float32"):
        raise BadInput(f"--dtype {dtype}: the toy computes in float32")
    check_writable(options.save_weights, "-O save_weights")  # before anything is computed
    config = toy_config(options)
    weights = load_weights(options.weights, config) if options.weights else None
    backend = ToyBackend(config, weights, device)
    if options.save_weights is not None:
        save_weights(backend.base_weights, config, options.save_weights)
    return backend


def toy_config(options=None) -> ToyConfig:
    """configs/toy.toml, then options.config (a TOML file), then the options given (None: not given).

    Values from the files are checked like the options themselves: a wrong type is a BadInput.
    """
    from attn_cli.plumbing.config import config_dir

    options = options if options is not None else Options()
    values: dict = {}
    for path in (config_dir() / "toy.toml", options.config):
        if path is not None:
            values.update(_read_table(path))
    settings = [field.name for field in fields(ToyConfig)]
    values.update({name: getattr(options, name) for name in settings if getattr(options, name) is not None})
    check_sizes(values)
    config = ToyConfig(**values)
    _check(config)
    return config


def _read_table(path: Path) -> dict:
    """The [toy] table of a TOML file, each value checked against the toy's options."""
    parsed = parse_options(f"{LABEL} (config {path})", Options, read_toml_table(path))
    return {name: value for name, value in asdict(parsed).items() if value is not None}


def _check(config: ToyConfig) -> None:
    if config.d_model < 1 or config.heads < 1 or config.layers < 1 or config.d_model % config.heads:
        raise BadInput(f"toy d_model {config.d_model} must split evenly over {config.heads} heads (and layers >= 1)")
    if config.positions not in ("none", "sinusoidal"):
        raise BadInput(f"toy positions {config.positions!r}", "use none or sinusoidal")
    if config.scoring not in (*scoring.PARAMETER_FREE, *scoring.PARAMETRISED):
        raise BadInput(
            f"unknown scoring {config.scoring!r}",
            f"choose from {', '.join((*scoring.PARAMETER_FREE, *scoring.PARAMETRISED))}",
        )
    if config.additive_hidden < 1:
        raise BadInput(f"toy additive_hidden {config.additive_hidden} must be at least 1")
    if config.valid_len is not None and config.valid_len < 0:
        raise BadInput(f"toy valid_len {config.valid_len} must be 0 or more")


BATCH_CELLS = 1 << 26  # scores a padded batch holds at most, (B, H, T, T): 256 MB in float32


def tokenize(text: str) -> list[str]:
    """Words and punctuation marks, one CJK character a token: "早上好" → 早 上 好."""
    return _TOKEN.findall(text)


def batch_groups(lengths: list[int], heads: int, cells: int = BATCH_CELLS) -> list[list[int]]:
    """The texts' indices in consecutive groups run as one padded batch each: a group's (B, H, T, T) scores at
    most `cells` (a text alone may pass it), so one long text (a line --truncate cut to MAX_TOKENS) does not
    pad the texts batched with it to its length."""
    groups: list[list[int]] = []
    longest = 0
    for index, length in enumerate(lengths):
        wider = max(longest, length)
        if groups and (len(groups[-1]) + 1) * heads * wider * wider <= cells:
            groups[-1].append(index)
            longest = wider
        else:
            groups.append([index])
            longest = length
    return groups


def tokenize_at_most(text: str, limit: int | None) -> tuple[list[str], int]:
    """(the first `limit` tokens (all for None), how many the text has): a 10 MB line is counted, not listed."""
    if limit is None:
        tokens = tokenize(text)
        return tokens, len(tokens)
    matches = _TOKEN.finditer(text)
    tokens = [match.group() for match in itertools.islice(matches, limit)]
    return tokens, len(tokens) + sum(1 for _ in matches)


def token_vector(token: str, seed: int, width: int) -> torch.Tensor:
    """The token's embedding: N(0, 1) numbers from a generator seeded by (seed, token). (width,)"""
    digest = hashlib.sha256(f"{seed}\0{token}".encode()).digest()
    generator = torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") & (2**63 - 1))
    return torch.randn(width, generator=generator)


def sinusoidal_positions(count: int, width: int) -> torch.Tensor:
    """The transformer's sin/cos position code. (count, width)"""
    position = torch.arange(count, dtype=torch.float32)[:, None]
    rate = torch.exp(torch.arange(0, width, 2, dtype=torch.float32) * (-math.log(10000.0) / width))
    code = torch.zeros(count, width)
    code[:, 0::2] = torch.sin(position * rate)
    code[:, 1::2] = torch.cos(position * rate)[:, : width // 2]
    return code


def initial_weights(config: ToyConfig) -> dict[str, torch.Tensor]:
    """Every learned parameter, from the seed. Names are what the .safetensors file holds."""
    generator = torch.Generator().manual_seed(config.seed)
    d, h, heads, dh = config.d_model, config.additive_hidden, config.heads, config.head_dim

    def draw(*shape: int, fan_in: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator) / math.sqrt(fan_in)

    weights = {}
    for layer in range(config.layers):
        p = f"layers.{layer}."
        for name in ("q", "k", "v", "o"):
            weights[f"{p}w_{name}"], weights[f"{p}b_{name}"] = draw(d, d, fan_in=d), draw(d, fan_in=d)
        weights[f"{p}bilinear"] = draw(heads, dh, dh, fan_in=dh)  # per head W: qᵀ·W·k
        weights[f"{p}additive.w_q"] = draw(heads, h, dh, fan_in=dh)
        weights[f"{p}additive.w_k"] = draw(heads, h, dh, fan_in=dh)
        weights[f"{p}additive.w_v"] = draw(heads, h, fan_in=h)
    return weights


def share_projection(weights: dict[str, torch.Tensor], config: ToyConfig) -> dict[str, torch.Tensor]:
    """W_K = W_V = W_Q (and biases): one Linear used three times."""
    shared = dict(weights)
    for layer in range(config.layers):
        for name in ("k", "v"):
            shared[f"layers.{layer}.w_{name}"] = weights[f"layers.{layer}.w_q"]
            shared[f"layers.{layer}.b_{name}"] = weights[f"layers.{layer}.b_q"]
    return shared


def load_weights(path: Path, config: ToyConfig) -> dict[str, torch.Tensor]:
    """Weights from .safetensors, checked against the shapes this config needs."""
    from safetensors.torch import load_file

    try:
        loaded = load_file(str(path))
    except Exception as error:  # OSError, or safetensors' own error types for a bad file
        raise AttnError(f"cannot read toy weights {path}: {error}") from None
    expected = initial_weights(config)
    for name, tensor in expected.items():
        if name not in loaded or loaded[name].shape != tensor.shape:
            raise AttnError(
                f"{path} does not fit this toy: {name} should be {tuple(tensor.shape)}",
                "load it with the d_model, heads, layers and additive_hidden it was saved with",
            )
    check_finite_weights(loaded, path)
    return {name: loaded[name].float() for name in expected}


def save_weights(weights: dict[str, torch.Tensor], config: ToyConfig, path: Path) -> None:
    from safetensors.torch import save_file

    from attn_cli.plumbing.atomic import atomic_path

    metadata = {key: str(value) for key, value in asdict(config).items()}
    with atomic_path(path, "-O save_weights") as temp:
        save_file({name: tensor.contiguous() for name, tensor in weights.items()}, str(temp), metadata=metadata)


class ToyBackend:
    """The toy, registered like every other backend (registry.py)."""

    def __init__(self, config: ToyConfig, weights: dict[str, torch.Tensor] | None = None, device: str = "cpu"):
        self.config = config
        self.device = device
        self.dtype = "float32"
        # what -O save_weights=FILE writes
        self.base_weights = weights if weights is not None else initial_weights(config)
        used = share_projection(self.base_weights, config) if config.shared_projection else self.base_weights
        self.weights = {name: tensor.to(device) for name, tensor in used.items()}
        self.info = ModelInfo(
            "toy", "toy", config.layers, config.heads, config.heads, config.head_dim, config.causal, None
        )

    def capture_batch(
        self,
        texts: Sequence[str],
        layers: Sequence[int],
        *,
        truncate: bool = False,
        inject=None,
        keep_inputs: bool = False,
        padding_side: str | None = None,
        pre_rope: bool = False,
    ) -> list[Capture]:
        if pre_rope:
            raise BadInput("--pre-rope: the toy has no rotary position embeddings")
        # --truncate cuts a text to the toy's MAX_TOKENS, as a Hugging Face model's to its positions; cut:
        # (tokens, count before the cut) per text
        cut = [tokenize_at_most(text, MAX_TOKENS if truncate else None) for text in texts]
        token_lists = [tokens for tokens, _ in cut]
        for text, tokens in zip(texts, token_lists):
            if not tokens:
                raise BadInput(f"the toy found no words in {text!r}")
        check_token_count(token_lists)
        side = padding_side or "right"
        captures = []
        for group in batch_groups([len(tokens) for tokens in token_lists], self.config.heads):
            x, real = self.embed([token_lists[index] for index in group], side)  # (B, T, d), (B, T)
            records = self.forward(x, real, set(layers), inject)
            captures += [
                Capture(
                    tokens=[Token(i, token, _token_id(token), False) for i, token in enumerate(token_lists[index])],
                    model=self.info,
                    device=self.device,
                    dtype=self.dtype,
                    layers={layer: sequence_of(record, row, real[row]) for layer, record in records.items()},
                    padding_side=side if len(texts) > 1 else None,
                    truncated_from=cut[index][1] if cut[index][1] > len(token_lists[index]) else None,
                )
                for row, index in enumerate(group)
            ]
        return check_finite(captures)

    def embed(self, token_lists: list[list[str]], side: str) -> tuple[torch.Tensor, torch.Tensor]:
        """Token vectors (+ positions), padded with zeros: X (B, T, d) and real (B, T) bool."""
        width, longest = self.config.d_model, max(len(tokens) for tokens in token_lists)
        x = torch.zeros(len(token_lists), longest, width)
        real = torch.zeros(len(token_lists), longest, dtype=torch.bool)
        for b, tokens in enumerate(token_lists):
            rows = torch.stack([token_vector(token, self.config.seed, width) for token in tokens])  # (n, d)
            if self.config.positions == "sinusoidal":
                rows = rows + sinusoidal_positions(len(tokens), width)
            place = slice(0, len(tokens)) if side == "right" else slice(longest - len(tokens), longest)
            x[b, place], real[b, place] = rows, True
        return x.to(self.device), real.to(self.device)

    def mask(self, real: torch.Tensor) -> torch.Tensor:
        """(B, T, T) bool: real keys, then the causal rule and valid_len, counted per text from its first token."""
        position = real.long().cumsum(-1) - 1  # (B, T) each token's index within its text
        allowed = real[:, None, :].expand(-1, real.shape[1], -1).clone()  # (B, Tq, Tk)
        if self.config.causal:
            allowed &= position[:, None, :] <= position[:, :, None]
        if self.config.valid_len is not None:
            allowed &= (position < self.config.valid_len)[:, None, :]
        return allowed

    def forward(self, x: torch.Tensor, real: torch.Tensor, wanted: set[int], inject=None) -> dict[int, LayerCapture]:
        """Run every layer on X (B, T, d); keep the wanted layers' Q, K, V, mask and scorer."""
        allowed = self.mask(real)  # (B, T, T)
        records = {}
        for layer in range(self.config.layers):
            attended, record = self.attention_layer(layer, x, allowed, inject)
            if layer in wanted:
                records[layer] = record
            x = x + attended  # residual: each layer adds what attention gathered
        return records

    def attention_layer(self, layer: int, x: torch.Tensor, allowed: torch.Tensor, inject=None):
        """One multi-head attention over X (B, T, d) -> (output (B, T, d), LayerCapture of the batch)."""
        w = {
            name.split(".", 2)[2]: tensor
            for name, tensor in self.weights.items()
            if name.startswith(f"layers.{layer}.")
        }
        batch, count, heads, dh = x.shape[0], x.shape[1], self.config.heads, self.config.head_dim

        def project(name: str) -> torch.Tensor:
            flat = x @ w[f"w_{name}"].T + w[f"b_{name}"]  # (B, T, d)
            return flat.view(batch, count, heads, dh).transpose(1, 2)  # (B, H, T, Dh)

        q, k, v = project("q"), project("k"), project("v")
        for name, tensor in (("q", q), ("k", k), ("v", v)):  # named here, before their scores overflow too
            check_finite_tensor(layer, name, tensor)
        q, k, scale = self.scoring_view(q, k)
        if inject is not None:
            q, k, scale = inject(q, k, scale)
        scorer = self.scorer(w)
        if scorer is None:
            scores = scoring.scores(q, k, scale)  # (B, H, T, T)
        else:  # learned scorings score one head of one text at a time
            scores = torch.stack(
                [
                    torch.stack([scoring.scores(q[b, h], k[b, h], scale, scorer, h) for h in range(heads)])
                    for b in range(batch)
                ]
            )  # (B, H, T, T)
        weights = attention.masked_softmax(scores, allowed[:, None])  # (B, H, T, T)
        heads_out = attention.attend(weights, v)  # (B, H, T, Dh)
        concat = heads_out.transpose(1, 2).reshape(batch, count, self.config.d_model)  # (B, T, d)
        output = concat @ w["w_o"].T + w["b_o"]  # W_O
        mask = AttentionMask(count, count, False, allowed, x.device)
        return output, LayerCapture(
            layer, q, k, v, mask, scale, x, scorer, concat=concat, projected=output, w_o=w["w_o"]
        )

    def scoring_view(self, q: torch.Tensor, k: torch.Tensor):
        """dot, scaled-dot and cosine as (q, k, scale) for q·kᵀ·scale; the learned ones keep q, k as they are."""
        form = scoring.FORMS.get(self.config.scoring)
        scale = self.config.head_dim**-0.5
        return (q, k, 1.0) if form is None else form.transform(q, k, scale)  # learned: scale unused

    def scorer(self, w: dict[str, torch.Tensor]):
        """scorer(q_rows (c, Dh), keys (n, Dh), head) -> (c, n) for the parametrised scorings, else None."""
        if self.config.scoring == "bilinear":
            return lambda q, k, head: scoring.bilinear(q, k, w["bilinear"][head])
        if self.config.scoring == "additive":
            return lambda q, k, head: scoring.additive(
                q, k, w["additive.w_q"][head], w["additive.w_k"][head], w["additive.w_v"][head]
            )
        return None


def _token_id(token: str) -> int:
    """A stable id for a word (the toy has no vocabulary): the first 4 bytes of its SHA-256."""
    return int.from_bytes(hashlib.sha256(token.encode()).digest()[:4], "little")
