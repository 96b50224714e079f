"""Captured attention equals transformers' own (`output_attentions=True` under eager).

Tolerance: max |Δweight| ≤ 1e-5 in float32 (the design's bar). The captured run
uses the model's default sdpa kernels, the reference eager: they differ by
float round-off only (~1e-6 after six layers).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import attn_cli as attn
from attn_cli.api import Model

TOLERANCE = 1e-5
SENTENCES = [
    "Hello, how are you?",
    "早上好",
    "Wait... what?! (really) -- yes; no: maybe.",
    "I love 🍕 and 🎉 parties",
]


def eager_attentions(directory, text: str) -> tuple[torch.Tensor, ...]:
    """transformers' reference: per layer (1, H, T, T) weights from the eager implementation."""
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
    model = AutoModel.from_pretrained(directory, local_files_only=True, attn_implementation="eager").eval()
    with torch.no_grad():
        return model(**tokenizer(text, return_tensors="pt"), output_attentions=True).attentions


def report_weights(report) -> torch.Tensor:
    """(layers, heads, T, T) from a report's per-head weight lists."""
    return torch.from_numpy(np.stack([[head.weights for head in layer.heads] for layer in report.layers]))


def assert_matches_eager(report, reference) -> None:
    expected = torch.cat(reference)  # (layers, H, T, T)
    got = report_weights(report)
    assert got.shape == expected.shape
    assert (got - expected).abs().max().item() <= TOLERANCE


@pytest.fixture(scope="module")
def minilm_path():
    from attn_cli.backends.minilm import minilm_dir

    return minilm_dir()


@pytest.mark.parametrize("text", SENTENCES)
def test_minilm_weights_match_transformers_eager(minilm_backend, minilm_path, text):
    report = Model(minilm_backend).inspect(text)
    assert_matches_eager(report, eager_attentions(minilm_path, text))


def test_tiny_bert_loaded_by_path_matches_eager(tiny_bert_dir):
    text = "A tiny model, loaded the way a user's is."
    report = attn.load(str(tiny_bert_dir), device="cpu").inspect(text)
    assert report.model.layers == 2 and report.model.heads == 4 and report.model.head_dim == 8
    assert_matches_eager(report, eager_attentions(tiny_bert_dir, text))


def test_capture_under_eager_equals_capture_under_sdpa(tiny_bert_dir):
    from attn_cli.backends.registry import load_backend

    text = "the same weights whatever the kernel"
    backend = load_backend(str(tiny_bert_dir), device="cpu")
    assert backend.model.config._attn_implementation == "sdpa"
    under_sdpa = report_weights(Model(backend).inspect(text))
    backend.model.set_attn_implementation("eager")
    under_eager = report_weights(Model(backend).inspect(text))
    assert (under_sdpa - under_eager).abs().max().item() <= TOLERANCE


def test_capturing_leaves_the_model_output_unchanged(minilm_backend):
    """The hook delegates to the model's own kernel, so hidden states are bit-identical."""
    from attn_cli.backends.capture_hook import LayerRecorder, capturing

    model, tokenizer = minilm_backend.model, minilm_backend.tokenizer
    inputs = tokenizer("Hello, how are you?", return_tensors="pt")
    with torch.no_grad():
        plain = model(**inputs).last_hidden_state
        recorder = LayerRecorder(set(range(6)), model.config._attn_implementation)
        with capturing(model, recorder):
            captured = model(**inputs).last_hidden_state
    assert torch.equal(plain, captured)
    assert sorted(recorder.records) == list(range(6))
    assert model.config._attn_implementation == "sdpa"  # restored afterwards


def test_only_selected_layers_are_kept(minilm_backend):
    capture = Model(minilm_backend).capture("Hello there", layers=[1, 4])
    assert sorted(capture.layers) == [1, 4]
    layer = capture.layers[4]
    assert layer.q.shape == (12, len(capture.tokens), 32)
    assert layer.k.shape == layer.v.shape == (12, len(capture.tokens), 32)
    assert layer.scale == pytest.approx(32**-0.5)


def test_default_model_tokens(minilm_backend):
    report = Model(minilm_backend).inspect("Hello, how are you?", layers="0", heads="0")
    assert [t.text for t in report.tokens] == ["[CLS]", "hello", ",", "how", "are", "you", "?", "[SEP]"]
    assert [t.special for t in report.tokens] == [True] + [False] * 6 + [True]


def test_tampered_weights_are_refused(tmp_path):
    from attn_cli.backends.minilm import verify_weights
    from attn_cli.plumbing.errors import ModelIntegrityError

    fake = tmp_path / "model.safetensors"
    fake.write_bytes(b"not the published weights")
    with pytest.raises(ModelIntegrityError):
        verify_weights(fake)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")
@pytest.mark.parametrize("model_fixture", ["minilm", "tiny_llama_dir"])
def test_parity_on_cuda(request, model_fixture, minilm_path):
    """The same bar on a GPU: capture on cuda, reference eager on the CPU."""
    directory = minilm_path if model_fixture == "minilm" else request.getfixturevalue(model_fixture)
    text = "Hello, how are you?"
    report = attn.load(str(directory), device="cuda").inspect(text)
    assert report.device.startswith("cuda")
    assert_matches_eager(report, eager_attentions(directory, text))


def test_attention_after_the_last_captured_layer_is_not_run(minilm_backend, monkeypatch):
    """capture_batch reads only its records: once every wanted layer is recorded, later attention calls hand back
    zeros instead of running (inspect --layer 1 of 6 runs one attention, not six). The records are those of a
    capture that runs every layer (bit for bit), and the model is left as it was."""
    from attn_cli.backends import capture_hook

    texts = ["Hello, how are you?", "The cat sat on the mat, and the cat slept."]
    fed = minilm_backend.tokenizer(texts, padding=True, return_tensors="pt")
    with torch.inference_mode():
        before = minilm_backend.model(**fed).last_hidden_state
    calls: list[int] = []
    real = capture_hook.delegate_for

    def counted(name, module):
        calls.append(module.layer_idx)
        return real(name, module)

    monkeypatch.setattr(capture_hook, "delegate_for", counted)
    one = minilm_backend.capture_batch(texts, [1])
    assert calls == [0]  # layer 1's own attention, and layers 2-5's, spared
    calls.clear()
    every = minilm_backend.capture_batch(texts, list(range(6)))
    assert calls == [0, 1, 2, 3, 4]
    for alone, together in zip(one, every):
        for name in ("q", "k", "v"):
            assert torch.equal(getattr(alone.layers[1], name), getattr(together.layers[1], name))
        masks = alone.layers[1].mask, together.layers[1].mask
        assert torch.equal(*(mask.rows(0, mask.queries) for mask in masks))
    with torch.inference_mode():
        assert torch.equal(minilm_backend.model(**fed).last_hidden_state, before)
