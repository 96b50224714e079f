"""attn diff: a model against itself changes nothing; a perturbed head ranks first, earlier layers stay."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from typer.testing import CliRunner

import attn_cli
from attn_cli.plumbing.errors import BadInput

TEXT = "The cat sat on the mat, and the dog sat on the rug."


@pytest.fixture(scope="module")
def perturbed_bert_dir(tiny_bert_dir, tmp_path_factory):
    """tiny_bert_dir with layer 1 head 2's W_Q rows replaced: only that head's scores change."""
    from transformers import BertModel

    directory = tmp_path_factory.mktemp("tiny-bert-perturbed")
    model = BertModel.from_pretrained(tiny_bert_dir, local_files_only=True)
    head_dim = model.config.hidden_size // model.config.num_attention_heads
    with torch.no_grad():
        query = model.encoder.layer[1].attention.self.query.weight  # (d_model, H·D): head h is rows h·D:(h+1)·D
        query[2 * head_dim : 3 * head_dim] = torch.randn(
            head_dim, query.shape[1], generator=torch.Generator().manual_seed(7)
        )
    model.save_pretrained(directory)
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(tiny_bert_dir / name, directory / name)
    return directory


def test_a_model_against_itself_changes_nothing(tiny_bert_dir):
    model = attn_cli.load(str(tiny_bert_dir), device="cpu")
    report = model.diff(TEXT, against=attn_cli.load(str(tiny_bert_dir), device="cpu"))
    assert report.comparable and len(report.heads) == 8
    for change in report.heads:
        assert change.js_divergence == pytest.approx(0, abs=1e-9) and change.top1_agreement == 1.0
        assert change.entropy.baseline == change.entropy.variant
        assert change.label[0] == change.label[1]
        assert all(
            value.baseline == value.variant or (value.baseline != value.baseline and value.variant != value.variant)
            for value in change.scores.values()
        )  # equal, or both undefined (NaN)


def test_the_perturbed_head_ranks_first_and_earlier_layers_are_unchanged(tiny_bert_dir, perturbed_bert_dir):
    report = attn_cli.load(str(tiny_bert_dir), device="cpu").diff(
        TEXT, against=attn_cli.load(str(perturbed_bert_dir), device="cpu")
    )
    first = report.heads[0]
    assert (first.layer, first.head) == (1, 2) and first.js_divergence > 0.01
    assert all(change.js_divergence == 0 for change in report.heads if change.layer == 0)
    assert all(change.js_divergence < first.js_divergence for change in report.heads[1:])


def test_diff_carries_the_head_scores_of_attn_heads(minilm_backend):
    """The scores diff reports are attn heads' own for each text."""
    from attn_cli.api import Model

    model = Model(minilm_backend)
    a, b = "Hello, how are you?", "The cat sat on the mat."
    report = model.diff(a, b, layers=0)
    previous = next(c for c in report.heads if (c.layer, c.head) == (0, 2))
    for text, side in ((a, "baseline"), (b, "variant")):
        expected = model.heads(text, layers=0).head(0, 2).scores["previous_token"]
        assert getattr(previous.scores["previous_token"], side) == pytest.approx(expected, abs=1e-5)
    assert previous.label == ("previous_token", "previous_token")


def test_two_texts_of_one_model(minilm_backend):
    from attn_cli.api import Model

    model = Model(minilm_backend)
    same_length = model.diff("The cat sat on the mat.", "The dog sat on the rug.", layers="0-1")
    assert same_length.comparable and len(same_length.heads) == 24
    js = [change.js_divergence for change in same_length.heads]
    assert js == sorted(js, reverse=True) and js[0] > 0
    other_length = model.diff("The cat sat.", "The big dog sat on the rug.", layers=0)
    assert not other_length.comparable and other_length.heads[0].js_divergence is None
    deltas = [abs(c.entropy.variant - c.entropy.baseline) for c in other_length.heads]
    assert deltas == sorted(deltas, reverse=True)


def test_shapes_and_tokenizers_must_match(tiny_bert_dir, tiny_llama_dir):
    bert = attn_cli.load(str(tiny_bert_dir), device="cpu")
    with pytest.raises(BadInput, match="differ in shape"):
        bert.diff(TEXT, against=attn_cli.load(str(tiny_llama_dir), device="cpu"))
    with pytest.raises(BadInput, match="two texts"):
        bert.diff(TEXT)


def test_cli_diff_json_and_view(tiny_bert_dir, perturbed_bert_dir):
    from attn_cli.cli import app

    runner = CliRunner()
    result = runner.invoke(
        app, ["diff", TEXT, "--model", str(tiny_bert_dir), "--against-model", str(perturbed_bert_dir), "--json"]
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["command"] == "diff" and document["mode"] == "models" and document["comparable"]
    assert set(document["heads"][0]["scores"]) >= {"previous_token", "induction", "sink"}
    assert set(document["heads"][0]["label"]) == {"a", "b"}
    assert (document["heads"][0]["layer"], document["heads"][0]["head"]) == (1, 2)
    view = runner.invoke(app, ["diff", "The cat sat.", "The dog sat.", "--model", str(tiny_bert_dir)])
    assert view.exit_code == 0 and "most changed heads" in view.stdout and "B − A" in view.stdout
    wrong = runner.invoke(app, ["diff", "only one text"])
    assert wrong.exit_code == 2 and "two texts" in wrong.stderr
