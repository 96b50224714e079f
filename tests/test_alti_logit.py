"""attn attribute --method alti-logit (math/alti_logit.py, analyses/alti_logit.py): against mt-upc/logit-explanations'
own code (tests/fixtures/alti_logit/make_fixture.py ran it), the decomposition's invariants, the lab decoder's
copied token, the refusals.

Tolerances: 1e-4 absolute against the reference (float32 logits of size ≤ 3 on a 32-wide model, computed in another
order); the parts sum to the model's logit within 1e-4 · (1 + |logit|) (float32 sums of ~100 terms); a token after
the explained position contributes exactly 0."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

import attn_cli
from attn_cli.plumbing.errors import BadInput, UnsupportedModel

FIXTURES = Path(__file__).parent / "fixtures" / "alti_logit"
REFERENCE = json.loads((FIXTURES / "gpt2_alti_logit_reference.json").read_text())
LAB_TEXT = "the cat saw a dog . the cat saw a"  # "dog" was said after "a" at position 4: it is copied


def maker():
    spec = importlib.util.spec_from_file_location("alti_logit_make_fixture", FIXTURES / "make_fixture.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def reference_gpt2(tmp_path_factory):
    """The tiny GPT-2 the reference ran on, built again; its parameters' SHA-256 is the fixture's."""
    make = maker()
    directory = tmp_path_factory.mktemp("alti-logit-gpt2")
    built = make.build_model(directory)
    assert make.weights_sha256(built) == REFERENCE["weights_sha256"], "not the model the reference ran on"
    return attn_cli.load(str(directory), device="cpu")


@pytest.fixture(scope="module")
def tiny_llama_lm(tmp_path_factory):
    """A 2-layer Llama with its own LM head: RMSNorm (γ drawn around 1), RoPE, 4 query heads on 2 kv heads."""
    from transformers import LlamaConfig, LlamaForCausalLM

    make = maker()
    config = LlamaConfig(
        vocab_size=512,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" in name:
                parameter.add_(0.2 * torch.randn_like(parameter))
            else:
                parameter.normal_(0, 0.3)
    directory = tmp_path_factory.mktemp("alti-logit-llama")
    model.save_pretrained(directory)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (directory / name).write_bytes((make.LAB_DIR / name).read_bytes())
    return attn_cli.load(str(directory), device="cpu")


@pytest.fixture(scope="module")
def lab():
    return attn_cli.load("lab", device="cpu")


@pytest.mark.parametrize("index", range(len(REFERENCE["targets"])))
def test_alti_logit_equals_the_authors_code(reference_gpt2, index):
    expected = REFERENCE["targets"][index]
    report = reference_gpt2.attribute(REFERENCE["text"], method="alti-logit", explain=expected["token"])
    assert [token.text for token in report.tokens] == REFERENCE["tokens"]
    assert report.target["token_id"] == expected["token_id"] and report.position == len(REFERENCE["tokens"]) - 1
    close = dict(atol=1e-4, rtol=0)
    np.testing.assert_allclose(report.contributions, expected["alti_logit"], **close)
    np.testing.assert_allclose(report.per_layer, expected["alti_logit_per_layer"], **close)
    np.testing.assert_allclose(report.sources, expected["per_layer_sources"], **close)
    np.testing.assert_allclose(report.heads, expected["heads"], **close)
    np.testing.assert_allclose(report.terms["mlp"], expected["mlp"], **close)
    np.testing.assert_allclose(report.terms["attention_bias"], expected["attention_bias"], **close)
    for ours, theirs in (("embedding", "embedding"), ("final_norm_bias", "final_norm_bias")):
        assert report.terms[ours] == pytest.approx(expected[theirs], abs=1e-4)
    assert report.target["logit"] == pytest.approx(expected["logit"], abs=1e-4)


@pytest.mark.parametrize("name", ["reference_gpt2", "tiny_llama_lm", "lab"])
def test_the_parts_sum_to_the_models_logit(request, name):
    """Tokens' ALTI-Logit + embedding + FFNs + attention biases + final-norm and LM-head biases = the logit the
    model computed; each layer's heads add up to its sources, and carrying down through ALTI keeps the sum."""
    model = request.getfixturevalue(name)
    report = model.attribute(LAB_TEXT, method="alti-logit", explain="cat")
    with torch.no_grad():
        logits = model.backend.lm(torch.tensor([[token.id for token in report.tokens]])).logits
    logit = float(logits[0, -1, report.target["token_id"]])
    assert report.total == pytest.approx(logit, abs=1e-4 * (1 + abs(logit)))
    np.testing.assert_allclose(report.heads.sum(1), report.sources.sum(1), atol=1e-5)
    np.testing.assert_allclose(report.per_layer.sum(1), report.sources.sum(1), atol=1e-4)


def test_a_token_after_the_explained_position_contributes_nothing(tiny_llama_lm):
    """Explained at position 4 of 11: every later token's part is exactly 0, per head and carried down."""
    from attn_cli.math.alti_logit import decompose_logit

    blocks, readout = tiny_llama_lm.backend.logit_blocks(LAB_TEXT, "cat")
    parts = decompose_logit(blocks, readout.norm, readout.unembedding, readout.unembedding_bias, 4)
    assert parts.by_head_source[..., 5:].abs().max() == 0
    assert parts.contributions[5:].abs().max() == 0 and parts.contributions[:5].abs().max() > 0
    logit = float(readout.logits[4])
    assert parts.total() == pytest.approx(logit, abs=1e-4 * (1 + abs(logit)))


def test_the_lab_decoders_copied_token_comes_through_the_induction_heads(lab):
    """'dog' after the second 'a': layer 1's heads (all of them induction heads) carry over 90% of the logit, and
    over 99% of layer 1's attention part is read from position 5, 'dog' after the first 'a'; carried down through
    ALTI, over 90% of the tokens' part lands on that earlier 'a dog' (positions 4 and 5)."""
    report = lab.attribute(LAB_TEXT, method="alti-logit", explain="dog")
    logit = report.target["logit"]
    assert report.heads[1].sum() > 0.9 * logit
    assert report.sources[1][5] > 0.99 * report.sources[1].sum()
    assert report.contributions[4:6].sum() > 0.9 * report.contributions.sum()
    assert {(layer, head) for layer, head, _ in report.strongest_heads(4)} == {(1, 0), (1, 1), (1, 2), (1, 3)}


def test_refusals_say_why_in_one_line(lab, tiny_gpt2_dir, minilm_backend):
    from attn_cli.analyses.alti_logit import alti_logit

    with pytest.raises(BadInput, match="needs --explain TOKEN"):
        lab.attribute(LAB_TEXT, method="alti-logit")
    with pytest.raises(BadInput, match="is 2 tokens"):
        lab.attribute(LAB_TEXT, method="alti-logit", explain="dog cat")
    with pytest.raises(BadInput, match="'zebu' is not in lab's vocabulary"):
        lab.attribute(LAB_TEXT, method="alti-logit", explain="zebu")
    with pytest.raises(BadInput, match="through every layer"):
        lab.attribute(LAB_TEXT, method="alti-logit", explain="dog", layers=[1])
    with pytest.raises(UnsupportedModel, match="no language-model head"):
        attn_cli.load(str(tiny_gpt2_dir), device="cpu").attribute(LAB_TEXT, method="alti-logit", explain="cat")
    with pytest.raises(UnsupportedModel, match="is not a decoder"):
        alti_logit(minilm_backend, "The cat sat.", "cat")


def test_the_command_prints_bars_heads_and_the_rest_and_writes_json(tmp_path, monkeypatch):
    from attn_cli.cli import app

    monkeypatch.setenv("COLUMNS", "80")
    runner = CliRunner()
    args = ["attribute", LAB_TEXT, "--model", "lab", "--method", "alti-logit", "--explain", "dog"]
    svg = tmp_path / "alti.svg"
    result = runner.invoke(app, [*args, "--save", str(svg)])
    assert result.exit_code == 0, result.output
    drawn = result.output
    assert "ALTI-Logit of 'dog' after position 10 ('a'): logit 17.30" in drawn
    assert "L1 H3   +5.16" in drawn and "the model's logit 17.30" in drawn
    # the view fits 80 columns; the last line names the saved file, whose temporary path is as long as it is
    assert max(len(line) for line in drawn.splitlines() if not line.startswith("saved ")) <= 80
    written = runner.invoke(app, [*args, "--json"])
    assert written.exit_code == 0, written.output
    document = json.loads(written.stdout)
    assert document["method"] == "alti-logit" and document["target"]["token"] == "dog"
    assert len(document["contributions"]) == 11 and np.shape(document["heads"]) == (2, 4)
    assert document["total"] == pytest.approx(document["target"]["logit"], abs=1e-4)
    assert svg.read_text().count("<svg") >= 1
    refused = runner.invoke(app, args[:-2])
    assert refused.exit_code == 2 and "needs --explain TOKEN" in refused.output


def test_an_encoder_is_refused_first_as_a_capability_refusal_is():
    """A model that predicts no next token is refused as capabilities.require refuses any model a command cannot
    serve (`attn routes` on the same model): one line `attn attribute --method alti-logit: toy …; hint`, exit 1 —
    before --explain or --layer is checked, so fixing those first would not have helped."""
    from attn_cli.cli import app

    runner = CliRunner()
    text = "the cat sat on the mat"
    routes = runner.invoke(app, ["routes", text, "--model", "toy"], env={"COLUMNS": "300", "NO_COLOR": "1"})
    assert routes.exit_code == UnsupportedModel.exit_code == 1
    assert routes.output.startswith("error: attn routes: toy ") and len(routes.output.splitlines()) == 1
    for options in ([], ["--explain", "sat", "--layer", "0"], ["--vs", "attention"]):
        args = ["attribute", text, "--model", "toy", "--method", "alti-logit", *options]
        refused = runner.invoke(app, args, env={"COLUMNS": "300", "NO_COLOR": "1"})
        assert refused.exit_code == routes.exit_code, (options, refused.output)
        assert refused.output == (
            "error: attn attribute --method alti-logit: toy is not a decoder (it predicts no next token); use a "
            "pre-norm decoder with its LM head (GPT-2, Llama, Qwen, Mistral, --model lab); for an encoder, --method "
            "alti\n"
        )


def test_a_python_refusal_renames_a_whole_option_only():
    """From Python, "--method alti" becomes method='alti', but not the start of "--method alti-logit"."""
    from attn_cli.api import python_spelled

    spelled = python_spelled(
        "--method alti-logit reads it; --method alti does not", {"method": "alti"}, {"method": "alti"}
    )
    assert spelled == "method alti-logit reads it; method='alti' does not"
