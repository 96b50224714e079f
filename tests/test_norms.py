"""Value-weighted attention (--measure norm): ‖α_ij · v_j·W_Oʰ‖ equals a hand computation from the
model's own parameters (transformers' eager weights, its value and output projections), 1e-5."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

import attn_cli
from attn_cli.api import Model

TEXT = "The cat sat on the mat, and the dog sat too."
TOLERANCE = 1e-5


def reference(directory, text: str, attention, value, output, norm=None):
    """Per layer (H, T, T) norms from transformers' eager weights and the layer's own linear maps.

    attention(model, layer) -> the attention module; value/output(module) -> nn.Linear (v, W_O);
    norm(model, layer) -> the layernorm before attention (pre-norm models), or None.
    """
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
    model = AutoModel.from_pretrained(directory, local_files_only=True, attn_implementation="eager").eval()
    config = model.config
    heads, kv_heads = (
        config.num_attention_heads,
        getattr(config, "num_key_value_heads", None) or config.num_attention_heads,
    )
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    with torch.no_grad():
        out = model(**tokenizer(text, return_tensors="pt"), output_attentions=True, output_hidden_states=True)
        norms = []
        for layer, alpha in enumerate(out.attentions):  # alpha (1, H, T, T)
            x = out.hidden_states[layer][0]  # (T, d_model): the residual stream entering the layer
            if norm is not None:
                x = norm(model, layer)(x)
            module = attention(model, layer)
            v = value(module)(x).view(-1, kv_heads, head_dim).transpose(0, 1)  # (H_kv, T, D)
            w_o = output(model, layer).weight  # (d_model, H·D)
            per_head = []
            for h in range(heads):
                f = v[h // (heads // kv_heads)] @ w_o[:, h * head_dim : (h + 1) * head_dim].T  # (T, d_model)
                per_head.append(alpha[0, h] * f.norm(dim=-1)[None, :])  # α_ij · ‖f(x_j)‖
            norms.append(torch.stack(per_head))
    return norms


def report_norms(report) -> list[torch.Tensor]:
    return [torch.from_numpy(np.stack([head.norms for head in layer.heads])) for layer in report.layers]


def test_minilm_norms_equal_the_hand_computation(minilm_backend):
    from attn_cli.backends.minilm import minilm_dir

    expected = reference(
        minilm_dir(),
        TEXT,
        attention=lambda model, layer: model.encoder.layer[layer].attention.self,
        value=lambda module: module.value,
        output=lambda model, layer: model.encoder.layer[layer].attention.output.dense,
    )
    got = report_norms(Model(minilm_backend).inspect(TEXT, measure="norm"))
    for layer, (g, e) in enumerate(zip(got, expected)):
        assert (g - e).abs().max().item() <= TOLERANCE, layer


def test_llama_norms_with_grouped_query_attention(tiny_llama_dir):
    expected = reference(
        tiny_llama_dir,
        TEXT,
        attention=lambda model, layer: model.layers[layer].self_attn,
        value=lambda module: module.v_proj,
        output=lambda model, layer: model.layers[layer].self_attn.o_proj,
        norm=lambda model, layer: model.layers[layer].input_layernorm,
    )
    report = attn_cli.load(str(tiny_llama_dir), device="cpu").inspect(TEXT, measure="norm")
    for g, e in zip(report_norms(report), expected):
        assert (g - e).abs().max().item() <= TOLERANCE
    head = report.head(1, 5)
    assert head.norms[np.triu_indices(len(report.tokens), 1)].max() == 0  # causal: the future carries nothing


def test_gpt2_conv1d_output_projection_is_transposed(tiny_gpt2_dir):
    expected = reference(
        tiny_gpt2_dir,
        TEXT,
        attention=lambda model, layer: model.h[layer].attn,
        value=lambda module: lambda x: module.c_attn(x).split(module.split_size, dim=-1)[2],
        output=lambda model, layer: type("W", (), {"weight": model.h[layer].attn.c_proj.weight.T}),
        norm=lambda model, layer: model.h[layer].ln_1,
    )
    report = attn_cli.load(str(tiny_gpt2_dir), device="cpu").inspect(TEXT, measure="norm")
    for g, e in zip(report_norms(report), expected):
        assert (g - e).abs().max().item() <= TOLERANCE


def test_toy_norms_use_its_own_w_o():
    model = attn_cli.load("toy")
    report = model.inspect("I love you", measure="norm", include=("qkv",))
    w_o = model.backend.weights["layers.0.w_o"]
    head = report.head(0, 1)
    f = torch.from_numpy(head.tensors["v"]) @ w_o[:, 8:16].T  # (T, d_model)
    np.testing.assert_allclose(head.norms, head.weights * f.norm(dim=-1).numpy()[None, :], atol=1e-6)


def test_cli_measure_norm_json_and_terminal():
    from attn_cli.cli import app

    runner = CliRunner()
    result = runner.invoke(app, ["inspect", "Hello, how are you?", "--measure", "norm", "--layer", "0", "--json"])
    assert result.exit_code == 0, result.output
    head = json.loads(result.stdout)["layers"][0]["heads"][2]
    assert len(head["norms"]) == 8 and head["norms"][3][2] > 1  # the previous-token head carries "," to "how"
    shown = runner.invoke(
        app, ["inspect", "Hello", "--measure", "norm", "--layer", "0", "--head", "2", "--show", "weights"]
    )
    assert shown.exit_code == 0 and "value-weighted norms" in shown.stdout
    for default in (["--layer", "2", "--head", "5"], []):  # the default view's head in detail: norms too
        shown = runner.invoke(app, ["inspect", "The cat sat on the mat.", "--measure", "norm", *default])
        assert shown.exit_code == 0 and "value-weighted norms" in shown.stdout, default
        assert "· weights = softmax" not in shown.stdout
    cosine = runner.invoke(app, ["inspect", "Hello", "--measure", "norm", "--variant", "scoring=cosine", "--json"])
    assert cosine.exit_code == 0  # a scoring variant keeps the heads' own values and W_O


def test_raw_has_no_per_head_projection_to_weigh():
    from attn_cli.plumbing.errors import BadInput

    with pytest.raises(BadInput, match="raw has no per-head projections"):
        attn_cli.load("toy").inspect("a b c", variant="raw", measure="norm")
