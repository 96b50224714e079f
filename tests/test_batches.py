"""Several texts in one padded batch: each text's attention is what it is alone, padding in no statistic.

Tolerance 1e-5 on weights (float32): padded and unpadded runs differ by kernel round-off only.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from attn_cli.api import Model

TEXTS = ("Hi there", "A much longer sentence, so the first one needs padding.", "Mid length text")


def weights(report) -> torch.Tensor:
    return torch.from_numpy(np.stack([[head.weights for head in layer.heads] for layer in report.layers]))


@pytest.fixture(scope="module")
def backends(minilm_backend, tiny_llama_dir, tiny_gpt2_dir):
    from attn_cli.backends.registry import load_backend

    return {
        "bert": minilm_backend,
        "llama": load_backend(str(tiny_llama_dir), device="cpu"),  # RoPE: relative positions
        "gpt2": load_backend(str(tiny_gpt2_dir), device="cpu"),  # absolute positions: left padding needs position ids
    }


@pytest.mark.parametrize("architecture", ["bert", "llama", "gpt2"])
@pytest.mark.parametrize("side", ["left", "right"])
def test_each_text_in_a_batch_matches_its_own_run(backends, architecture, side):
    backend = backends[architecture]
    batch = Model(backend).inspect(list(TEXTS), padding=side)
    assert len(batch) == len(TEXTS)
    for text, report in zip(TEXTS, batch):
        alone = Model(backend).inspect(text)
        assert [t.text for t in report.tokens] == [t.text for t in alone.tokens]  # no padding tokens
        assert report.padding_side == side
        got, expected = weights(report), weights(alone)
        assert got.shape == expected.shape
        assert (got - expected).abs().max() <= 1e-5
        for _, head in report.heads():  # every statistic is over real tokens only
            assert len(head.entropy) == len(head.self_weight) == len(head.top) == len(alone.tokens)


def test_padding_never_receives_weight_inside_the_batch(backends):
    """Straight from the capture: padded key columns are masked for every real query."""
    backend = backends["llama"]
    encodings = [backend._encode(text, False)[0] for text in TEXTS]
    batch = backend._pad(encodings, "left")
    from attn_cli.backends.capture_hook import LayerRecorder, capturing

    recorder = LayerRecorder({0}, backend.model.config._attn_implementation)
    with torch.no_grad(), capturing(backend.model, recorder):
        backend.model(**batch)
    allowed = recorder.records[0].mask.dense  # (B, T, T): padding needs the full mask
    real = batch["attention_mask"].bool()  # (B, T)
    for b in range(len(TEXTS)):
        assert not allowed[b][real[b]][:, ~real[b]].any()


def test_cli_batch_json_and_bad_padding(tiny_llama_dir):
    from attn_cli.cli import app

    runner = CliRunner()
    result = runner.invoke(
        app,
        [
            "inspect",
            *TEXTS[:2],
            "--model",
            str(tiny_llama_dir),
            "--layer",
            "1",
            "--head",
            "0",
            "--padding",
            "left",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["command"] == "inspect" and document["padding"] == "left"
    assert [seq["text"] for seq in document["sequences"]] == list(TEXTS[:2])
    assert all(seq["padding"] == "left" and seq["model"]["causal"] for seq in document["sequences"])
    bad = runner.invoke(app, ["inspect", "a", "b", "--padding", "middle"])
    assert bad.exit_code == 2
