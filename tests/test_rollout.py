"""Attention rollout equals numpy on the captured weights (float32 vs float64: 1e-5)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from attn_cli.api import Model
from attn_cli.plumbing.errors import BadInput

TEXT = "The cat sat on the mat."


def numpy_rollout(weights: list[np.ndarray], fuse) -> np.ndarray:
    """The definition: Â_l = 0.5·fuse(A_l) + 0.5·I, rows renormalised; Â_L ⋯ Â_1."""
    result = np.eye(weights[0].shape[-1])
    for layer in weights:  # (H, T, T)
        mixed = 0.5 * fuse(layer.astype(np.float64), axis=0) + 0.5 * np.eye(layer.shape[-1])
        mixed /= mixed.sum(-1, keepdims=True)
        result = mixed @ result
    return result


@pytest.fixture(scope="module")
def minilm(minilm_backend) -> Model:
    return Model(minilm_backend)


@pytest.mark.parametrize(("fusion", "fuse"), [("mean", np.mean), ("max", np.max), ("min", np.min)])
@pytest.mark.parametrize("layers", ["all", "1-3", "4"])
def test_rollout_equals_numpy_on_the_captured_weights(minilm, fusion, fuse, layers):
    report = minilm.rollout(TEXT, layers=layers, head_fusion=fusion)
    inspected = minilm.inspect(TEXT, layers=layers)
    weights = [np.stack([head.weights for head in layer.heads]) for layer in inspected.layers]
    np.testing.assert_allclose(report.matrix, numpy_rollout(weights, fuse), atol=1e-5)
    np.testing.assert_allclose(report.matrix.sum(-1), 1.0, atol=1e-5)
    assert report.layers == [layer.layer for layer in inspected.layers]


def test_causal_rollout_never_reaches_the_future(tiny_llama_dir):
    import attn_cli

    matrix = attn_cli.load(str(tiny_llama_dir), device="cpu").rollout(TEXT).matrix
    assert np.triu(matrix, 1).max() == 0


def test_rollout_refuses_gaps_and_unknown_fusions(minilm):
    with pytest.raises(BadInput, match="consecutive"):
        minilm.rollout(TEXT, layers="0,2")
    with pytest.raises(BadInput, match="head_fusion=.median."):
        minilm.rollout(TEXT, head_fusion="median")


def test_cli_rollout_json_equals_the_api_and_the_view_shows_sources(minilm):
    from attn_cli.cli import app

    runner = CliRunner()
    result = runner.invoke(app, ["rollout", TEXT, "--layer", "0-2", "--head-fusion", "max", "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document == minilm.rollout(TEXT, layers="0-2", head_fusion="max").to_json_dict()
    assert document["command"] == "rollout" and document["layers"] == [0, 1, 2]
    assert len(document["rollout"]) == len(document["tokens"]) == len(document["top"])
    view = runner.invoke(app, ["rollout", TEXT])
    assert view.exit_code == 0 and "where each output token comes from" in view.stdout
    assert runner.invoke(app, ["rollout", TEXT, "--head-fusion", "median"]).exit_code == 2


@pytest.mark.parametrize(
    "scale, phrase",
    [
        ("fixed", " 0  ░▒▒▓▓██ 1 · brighter = more"),
        ("head", " · per-matrix scale: this matrix's min → max · brighter = more"),
    ],
)
def test_the_rollout_and_attribution_legends_speak_of_the_matrix_not_a_head(minilm, monkeypatch, scale, phrase):
    """One matrix over layers (heads fused): its legend says nothing of heads, at 120 columns where every phrase fits."""
    from attn_cli.cli import app

    monkeypatch.setenv("COLUMNS", "120")
    monkeypatch.setenv("NO_COLOR", "1")
    for command in (["rollout", TEXT], ["attribute", TEXT]):
        result = CliRunner().invoke(app, [*command, "--scale", scale])
        assert result.exit_code == 0, result.output
        legends = [line for line in result.stdout.splitlines() if "░▒▒▓▓██" in line]
        assert legends and all(phrase in line for line in legends), legends
        assert "head" not in " ".join(legends)
