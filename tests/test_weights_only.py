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
