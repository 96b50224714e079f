"""Weights-only models: attention code of their own (BLOOM's ALiBi, DeBERTa, Falcon, MPT, GPT-Neo, XGLM) that
never calls transformers' attention interface. attn reads the weights the model returns (output_attentions):
they equal eager's (they are eager's), and Q, K, V, scores and symmetry are null with the reason.
tests/test_architectures_all.py holds every such type to `weights-only`; this file holds the JSON, the terminal
and the refusals of what needs Q and K, on a tiny BLOOM."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import isolate, save_tiny
from typer.testing import CliRunner

from attn_cli.cli import app

TEXT = "the cat sat on the mat"


@pytest.fixture(scope="module")
def bloom_dir(tmp_path_factory):
    from transformers import BloomConfig, BloomModel

    torch.manual_seed(0)
    config = BloomConfig(vocab_size=30522, hidden_size=32, n_layer=2, n_head=4, initializer_range=0.1)
    return save_tiny(BloomModel(config), tmp_path_factory.mktemp("tiny-bloom"))


def attn(monkeypatch, *args):
    isolate(monkeypatch, 120)
    return CliRunner().invoke(app, list(args))


def test_json_weights_equal_eager_and_what_needs_qkv_is_null_with_the_reason(bloom_dir, monkeypatch):
    from transformers import AutoModel, AutoTokenizer

    result = attn(monkeypatch, "inspect", TEXT, "--model", str(bloom_dir), "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    model = AutoModel.from_pretrained(bloom_dir, attn_implementation="eager").eval()
    ids = AutoTokenizer.from_pretrained(bloom_dir)(TEXT, return_tensors="pt")
    with torch.no_grad():
        eager = model(**ids, output_attentions=True).attentions
    for layer in document["layers"]:
        for head in layer["heads"]:
            got = np.array(head["weights"])
            assert np.abs(got - eager[layer["layer"]][0, head["head"]].numpy()).max() <= 1e-5
            assert head["scores"] is None and head["q"] is None and head["k"] is None and head["v"] is None
            assert "BloomModel computes attention in its own code" in head["without_qkv"]
            assert head["symmetry"]["relative"] is None and "no scores" in head["symmetry"]["not_applicable"]
            assert (np.triu(got, 1) == 0).all()  # causal: the future is masked


def test_terminal_draws_the_weights_and_says_in_one_line_why_there_are_no_scores(bloom_dir, monkeypatch):
    result = attn(monkeypatch, "inspect", TEXT, "--model", str(bloom_dir), "--layer", "1", "--head", "0")
    assert result.exit_code == 0, result.output
    assert "the model's own softmax (weights only: no Q, K, V)" in result.stdout
    assert "nan" not in result.stdout
    scores = attn(monkeypatch, "inspect", TEXT, "--model", str(bloom_dir), "--head", "0", "--show", "scores")
    assert scores.exit_code == 0 and "no scores: BloomModel computes attention" in scores.stdout
    assert "matrix size limit" not in scores.stdout


def test_heads_scores_the_models_own_weights_as_eager_returns_them(bloom_dir, monkeypatch):
    """attn heads on a weights-only model scores the weights the model returns: every head score of a padded
    batch of two texts is the same score of eager's weights (1e-5), and the command draws and writes them."""
    from transformers import AutoModel, AutoTokenizer

    import attn_cli
    from attn_cli.math.head_scores import head_scores, token_flags
    from attn_cli.math.score_names import SCORES

    short = "a dog ran"
    model = attn_cli.load(str(bloom_dir), device="cpu")
    report = model.heads([TEXT, short])
    eager_model = AutoModel.from_pretrained(bloom_dir, attn_implementation="eager").eval()
    tokenizer = AutoTokenizer.from_pretrained(bloom_dir)
    per_text = []
    for text in (TEXT, short):
        encoded = tokenizer(text, return_tensors="pt")
        with torch.no_grad():
            eager = eager_model(**encoded, output_attentions=True).attentions  # per layer (1, H, T, T)
        tokens = model.inspect(text, layers="0", heads="0").tokens
        count = len(tokens)
        allowed = torch.ones(count, count, dtype=torch.bool).tril()[None]  # BLOOM is causal
        per_text.append([head_scores(layer, allowed, token_flags([tokens]))[0][0] for layer in eager])  # (H, S)
    for layer in range(2):
        expected = torch.stack([per_text[0][layer], per_text[1][layer]]).nanmean(0)  # (H, len(SCORES))
        for head in range(4):
            got = report.head(layer, head).scores
            for index, name in enumerate(SCORES):
                if got[name] is not None:
                    assert got[name] == pytest.approx(float(expected[head, index]), abs=1e-5), (layer, head, name)
    result = attn(monkeypatch, "heads", TEXT, "--model", str(bloom_dir), "--json")
    assert result.exit_code == 0, result.output
    assert len(json.loads(result.stdout)["heads"]) == 8


def test_rollout_works_on_the_weights(bloom_dir, monkeypatch):
    result = attn(monkeypatch, "rollout", TEXT, "--model", str(bloom_dir), "--json")
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(
    "args",
    [
        ["compare", TEXT],
        ["inspect", TEXT, "--include", "qkv"],
        ["inspect", TEXT, "--variant", "shared-k"],
    ],
)
def test_what_needs_q_and_k_is_refused_in_one_line(bloom_dir, monkeypatch, args):
    result = attn(monkeypatch, *args, "--model", str(bloom_dir))
    assert result.exit_code in (1, 2), result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.output
    assert "BloomModel computes attention in its own code" in lines[0]  # why, in the one line


@pytest.mark.parametrize(
    "args", [["diff", TEXT, "the dog sat on the mat"], ["inspect", TEXT, "--words", "--head", "0"]]
)
def test_diff_and_words_read_the_mask_from_the_weights(bloom_dir, monkeypatch, args):
    """They read the mask from the scores' NaN, which a weights-only head has none of: HeadReport.masked."""
    result = attn(monkeypatch, *args, "--model", str(bloom_dir))
    assert result.exit_code == 0, result.output


@pytest.fixture(scope="module")
def fsmt_dir(tmp_path_factory):
    """A tiny FSMT (a translation encoder–decoder whose three attentions are code of its own), with its LM head."""
    from transformers import FSMTConfig, FSMTForConditionalGeneration

    torch.manual_seed(0)
    sizes = dict(encoder_layers=1, decoder_layers=1, encoder_attention_heads=4, decoder_attention_heads=4)
    config = FSMTConfig(
        src_vocab_size=30522, tgt_vocab_size=30522, d_model=16, encoder_ffn_dim=32, decoder_ffn_dim=32, **sizes
    )
    return save_tiny(FSMTForConditionalGeneration(config), tmp_path_factory.mktemp("tiny-fsmt"))


def test_an_encoder_decoder_of_its_own_attention_is_weights_only_in_inspect_and_heads(fsmt_dir, monkeypatch):
    """inspect's encoder, decoder and cross weights are eager's (1e-5), with Q, K and V null and the reason;
    attn heads scores those weights (no overflow from an empty q·kᵀ); generate, which records nothing of such a
    model, is refused in one line."""
    from transformers import AutoModelForSeq2SeqLM

    import attn_cli
    from attn_cli.analyses.heads_stacks import layer_weights

    source, target = "the cat sat", "die katze"
    model = attn_cli.load(str(fsmt_dir), device="cpu")
    report = model.inspect(source, target=target)
    eager_model = AutoModelForSeq2SeqLM.from_pretrained(fsmt_dir, attn_implementation="eager").eval()
    fed = {
        "input_ids": torch.tensor([[token.id for token in report.tokens]]),
        "decoder_input_ids": torch.tensor([[token.id for token in report.target_tokens]]),
    }
    with torch.no_grad():  # use_cache=False as attn runs it: with a cache FSMT builds no causal mask
        out = eager_model(**fed, output_attentions=True, use_cache=False)
    eager = {"encoder": out.encoder_attentions, "decoder": out.decoder_attentions, "cross": out.cross_attentions}
    seen = set()
    for stack in report.stacks:
        for layer in stack.layers:
            for head in layer.heads:
                want = eager[layer.stack][layer.layer][0, head.head].numpy()
                assert np.abs(head.weights - want).max() <= 1e-5, (layer.stack, layer.layer, head.head)
                assert "FSMTModel computes attention in its own code" in head.without_qkv
            seen.add(layer.stack)
    assert seen == {"encoder", "decoder", "cross"}
    from attn_cli.backends.hf_seq2seq import capture_pair

    _, _, captures = capture_pair(model.backend, source, target, {"cross": [0]})
    weights, _ = layer_weights(captures["cross"].layers[0], [0, 1, 2, 3], captures["cross"].model)
    assert torch.allclose(weights, out.cross_attentions[0][0], atol=1e-5)  # heads scores these, not q·kᵀ
    result = attn(monkeypatch, "generate", source, "--model", str(fsmt_dir), "--max-new-tokens", "2")
    assert result.exit_code == 1 and "generation records no attention" in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1
