"""attn attribute --method gradient|flow: equal to Chefer et al.'s and Abnar & Zuidema's own code on MiniLM and on
a tiny pre-LN GPT-2 (≤ 1e-4, tests/fixtures/relevance_reference.json, made by
tests/fixtures/make_relevance_fixture.py), and their invariants."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import cli_json, save_tiny_gpt2_lm

from attn_cli.api import Model
from attn_cli.plumbing.errors import BadInput, UnsupportedModel

REFERENCE = json.loads((Path(__file__).parent / "fixtures" / "relevance_reference.json").read_text())
TEXT = REFERENCE["text"]


@pytest.fixture(scope="module")
def minilm(minilm_backend) -> Model:
    return Model(minilm_backend)


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory) -> Model:
    """The seeded tiny GPT-2 with its LM head the fixture was made from (its checksum says it is the same)."""
    from attn_cli.api import load

    directory = save_tiny_gpt2_lm(tmp_path_factory.mktemp("relevance-gpt2"))
    model = load(str(directory), device="cpu")
    made = float(sum(p.detach().double().abs().sum() for p in model.backend.lm.parameters()))
    assert made == pytest.approx(REFERENCE["models"]["tiny-gpt2"]["checksum"], rel=1e-9)
    return model


@pytest.mark.parametrize("name", ["minilm", "gpt2"])
@pytest.mark.parametrize("method", ["gradient", "flow"])
def test_equals_the_reference_code(request, name, method):
    reference = REFERENCE["models"]["minilm" if name == "minilm" else "tiny-gpt2"]
    report = request.getfixturevalue(name).attribute(TEXT, method=method)
    assert [token.text for token in report.tokens] == reference["tokens"]
    np.testing.assert_allclose(report.matrix, np.array(reference[method]), atol=1e-4, rtol=0)
    if method == "gradient":
        assert report.target["kind"] == reference["target"]["kind"]
        assert report.target.get("token_id") == reference["target"].get("token_id")
        assert report.per_layer.shape == (len(report.layers), len(report.tokens), len(report.tokens))
        assert (report.per_layer >= 0).all()  # the positive part of ∇A ⊙ A, averaged over heads
    else:
        assert report.per_layer is None
        np.testing.assert_allclose(report.matrix.sum(-1), 1.0, atol=1e-6)  # rows normalised, as theirs


def test_a_target_that_does_not_depend_on_the_input_gives_the_identity(minilm_backend):
    from attn_cli.analyses.attribute import gradient

    constant = lambda outputs: torch.ones((), requires_grad=True)  # noqa: E731  (no path from the weights)
    per_layer, matrix, target = gradient(minilm_backend, TEXT, list(range(6)), target=constant)
    assert target == {"kind": "custom"}
    assert not per_layer.any()
    np.testing.assert_array_equal(matrix, np.eye(len(matrix)))


def test_relevancy_rule():
    from attn_cli.math.relevance import gradient_weighted, relevancy

    weights = torch.softmax(torch.randn(3, 4, 4), -1)
    grads = torch.randn(3, 4, 4)
    mixed = gradient_weighted(weights, grads)
    np.testing.assert_allclose(mixed, (grads * weights).clamp(min=0).mean(0).double(), atol=1e-12)
    np.testing.assert_allclose(relevancy([mixed, mixed]), (torch.eye(4) + mixed) @ (torch.eye(4) + mixed), atol=1e-6)
    assert torch.equal(relevancy([torch.zeros(4, 4)]), torch.eye(4, dtype=torch.float64))


def test_the_weights_the_gradients_are_taken_of_are_inspects_and_the_model_is_left_as_it_was(minilm):
    backend = minilm.backend
    run = backend.attention_gradients(TEXT, [0, 5])
    report = minilm.inspect(TEXT, layers=[0, 5])
    for layer in report.layers:
        for head in layer.heads:
            np.testing.assert_allclose(run.weights[layer.layer][head.head].numpy(), head.weights, atol=1e-5)
    assert backend.model.config._attn_implementation == "sdpa"
    assert all(parameter.grad is None for parameter in backend.model.parameters())


def test_targets(minilm, gpt2):
    chosen = minilm.attribute(TEXT, method="gradient", explain=7, layers="4-5")
    assert chosen.target["kind"] == "embedding-dimension" and chosen.target["dimension"] == 7
    assert chosen.layers == [4, 5] and chosen.per_layer.shape[0] == 2
    with pytest.raises(BadInput, match="out of range"):
        minilm.attribute(TEXT, method="gradient", explain=384)
    with pytest.raises(BadInput, match="not an output dimension"):
        minilm.attribute(TEXT, method="gradient", explain="cat")
    assert gpt2.attribute(TEXT, method="gradient", explain="cat").target["token"] == "cat"
    with pytest.raises(BadInput, match="2 tokens"):
        gpt2.attribute(TEXT, method="gradient", explain="cat sat")


def test_flow_refuses_long_texts_with_the_limit(minilm):
    from attn_cli.analyses.attribute import FLOW_MAX_TOKENS

    with pytest.raises(BadInput, match=f"at most {FLOW_MAX_TOKENS} tokens; this text is 42"):
        minilm.attribute(" ".join(["word"] * 40), method="flow")


def test_the_toy_has_no_gradients():
    from attn_cli.api import load

    with pytest.raises(UnsupportedModel, match="needs a Hugging Face model"):
        load("toy").attribute("a b", method="gradient")


def test_json_names_the_target():
    document = cli_json("attribute", TEXT, "--method", "gradient", "--layer", "5")
    assert document["method"] == "gradient" and document["layers"] == [5]
    assert document["target"]["kind"] == "embedding-norm"
    assert len(document["per_layer"]) == 1 and document["attribution"][0][0] >= 1.0


def test_a_sequence_classifier_explains_a_class_logit(tmp_path):
    from conftest import save_tiny
    from transformers import BertConfig, BertForSequenceClassification

    from attn_cli.api import load

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=30522,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
        id2label={0: "negative", 1: "positive"},
        label2id={"negative": 0, "positive": 1},
    )
    classifier = BertForSequenceClassification(config)
    save_tiny(classifier, tmp_path)
    model = load(str(tmp_path), device="cpu")
    with torch.no_grad():
        logits = classifier(**model.backend.tokenizer(TEXT, return_tensors="pt")).logits[0]
    top = model.attribute(TEXT, method="gradient")
    assert top.target["kind"] == "class-logit" and top.target["index"] == int(logits.argmax())
    chosen = model.attribute(TEXT, method="gradient", explain="positive")
    assert chosen.target["index"] == 1 and chosen.target["logit"] == pytest.approx(float(logits[1]), abs=1e-5)
    assert model.attribute(TEXT, method="gradient", explain=0).target["label"] == "negative"
    with pytest.raises(BadInput, match="negative, positive"):
        model.attribute(TEXT, method="gradient", explain="neutral")


def test_grouped_query_attention_and_rope(tiny_llama_dir):
    """A Llama whose 8 query heads read 2 kv heads: the gradient reaches every query head's weights."""
    from attn_cli.api import load

    model = load(str(tiny_llama_dir), device="cpu")
    run = model.backend.attention_gradients(TEXT, [0, 1])
    assert run.weights[1].shape == run.grads[1].shape == (8, 9, 9)
    assert run.grads[0].abs().sum() > 0 and torch.triu(run.weights[0], 1).abs().max() == 0  # causal
    report = model.attribute(TEXT, method="gradient")
    assert report.target["kind"] == "embedding-norm" and np.isfinite(report.matrix).all()
