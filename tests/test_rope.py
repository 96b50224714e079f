"""RoPE: what attn shows is what the model multiplies (post-rotation); --pre-rope shows the projections."""

from __future__ import annotations

import pytest
import torch
from typer.testing import CliRunner

from attn_cli.api import Model

TEXT = "rotary embeddings turn q and k by their position"


@pytest.fixture(scope="module")
def llama(tiny_llama_dir):
    from attn_cli.backends.registry import load_backend

    return load_backend(str(tiny_llama_dir), device="cpu")


def projections(backend, layer: int):
    """Independently: q_proj / k_proj of layer `layer` on its normalised input, per head. (H, T, D) each."""
    model = backend.model
    inputs = backend.tokenizer(TEXT, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**inputs, output_hidden_states=True).hidden_states[layer]
        block = model.layers[layer]
        x = block.input_layernorm(hidden)[0]  # (T, d_model)
        attention = block.self_attn
        q = attention.q_proj(x).view(x.shape[0], -1, attention.head_dim).transpose(0, 1)
        k = attention.k_proj(x).view(x.shape[0], -1, attention.head_dim).transpose(0, 1)
    return q, k


def test_pre_rope_q_and_k_are_the_projections(llama):
    report = Model(llama).inspect(TEXT, layers="1", pre_rope=True, include=("qkv",))
    assert report.pre_rope and report.to_json_dict()["pre_rope"] is True
    q, k = projections(llama, 1)
    for head in report.layers[0].heads:
        torch.testing.assert_close(torch.from_numpy(head.tensors["q"]), q[head.head], atol=1e-5, rtol=0)
        torch.testing.assert_close(torch.from_numpy(head.tensors["k"]), k[head.kv_head], atol=1e-5, rtol=0)


def test_post_rope_is_what_the_model_uses_and_pre_rope_is_not(llama):
    post = Model(llama).inspect(TEXT, layers="1", include=("qkv",))
    pre = Model(llama).inspect(TEXT, layers="1", pre_rope=True)
    for head, pre_head in zip(post.layers[0].heads, pre.layers[0].heads):
        q, k = torch.from_numpy(head.tensors["q"]), torch.from_numpy(head.tensors["k"])
        scores = torch.from_numpy(head.scores)
        recomputed = q @ k.T * head.scale
        allowed = ~scores.isnan()
        torch.testing.assert_close(recomputed[allowed], scores[allowed], atol=1e-5, rtol=1e-5)
        pre_scores = torch.from_numpy(pre_head.scores)
        assert pre_scores[0, 0] == pytest.approx(float(scores[0, 0]), abs=1e-5)  # position 0: no rotation
        assert (pre_scores - scores)[allowed].abs().max() > 1e-3  # later positions: rotated


def test_pre_rope_on_a_model_without_rope_is_bad_usage():
    from attn_cli.cli import app

    result = CliRunner().invoke(app, ["inspect", "Hello", "--pre-rope", "--layer", "0", "--head", "0"])
    assert result.exit_code == 2
    assert "no rotary position embeddings" in result.stderr
