"""`attn compare` and the variants on the real MiniLM weights: shared-K symmetry, the √d scale, raw, cosine."""

from __future__ import annotations

import json
import math

import pytest
import torch
from typer.testing import CliRunner

from attn_cli.api import Model

TEXT = "我是一个男孩, and the boy is me."


def matrix(rows) -> torch.Tensor:
    """A report's matrix → float64 tensor; masked (NaN) cells become -inf."""
    return torch.from_numpy(rows).double().nan_to_num(nan=-math.inf)


@pytest.fixture(scope="module")
def compared(minilm_backend):
    return Model(minilm_backend).compare(TEXT, variants=("shared-k", "no-scale", "raw", "scoring=cosine"))


def all_heads(run):
    return [head for layer in run for head in layer.heads]


def test_shared_k_makes_every_head_symmetric(compared):
    heads = all_heads(compared.runs["shared-k"])
    assert len(heads) == 72
    for head in heads:
        assert head.symmetry.relative <= 1e-6 and head.symmetry.symmetric
    assert compared.summaries["shared-k"].symmetric_heads == 72


def test_shared_k_weights_satisfy_detailed_balance(compared):
    """α_ij·Z_i = α_ji·Z_j, i.e. log α_ij + log Z_i is symmetric (Z_i: row i's normaliser)."""
    for head in all_heads(compared.runs["shared-k"]):
        scores = matrix(head.scores)
        log_z = torch.logsumexp(scores, dim=-1, keepdim=True)  # (T, 1)
        balanced = torch.log(matrix(head.weights)) + log_z  # = S_ij where α_ij > 0
        finite = balanced.isfinite() & balanced.T.isfinite()
        assert (balanced - balanced.T)[finite].abs().max() <= 1e-3  # float32 weights, logs up to ~30


def test_baseline_heads_are_not_symmetric(compared):
    """The comparison is real: trained W_Q ≠ W_K gives asymmetric scores in every head."""
    heads = all_heads(compared.runs["baseline"])
    assert all(not head.symmetry.symmetric and head.symmetry.relative > 0.1 for head in heads)


def test_shared_k_pulls_attention_to_the_diagonal(compared):
    summary = compared.summaries["shared-k"]
    assert summary.self_weight.variant > 2 * summary.self_weight.baseline


def test_no_scale_scores_are_baseline_times_sqrt_d(compared):
    root_d = math.sqrt(compared.model.head_dim)
    for base, unscaled in zip(all_heads(compared.runs["baseline"]), all_heads(compared.runs["no-scale"])):
        torch.testing.assert_close(matrix(unscaled.scores), matrix(base.scores) * root_d, rtol=1e-5, atol=1e-4)
        assert unscaled.scale == 1.0


def test_raw_equals_softmax_of_x_xt_from_the_layer_input(compared, minilm_backend):
    """Independently: transformers' hidden_states[l] is layer l's input X (BERT attends to its layer input)."""
    tokenizer, model = minilm_backend.tokenizer, minilm_backend.model
    with torch.no_grad():
        hidden = model(**tokenizer(TEXT, return_tensors="pt"), output_hidden_states=True).hidden_states
    for layer in compared.runs["raw"]:
        x = hidden[layer.layer][0]  # (T, d_model)
        expected = torch.softmax(x @ x.T, dim=-1)
        for head in layer.heads:
            assert head.kv_head is None and head.symmetry.symmetric
            torch.testing.assert_close(matrix(head.weights).float(), expected, atol=1e-5, rtol=0)


def test_cosine_scores_lie_in_minus_one_one(compared):
    for head in all_heads(compared.runs["scoring=cosine"]):
        scores = matrix(head.scores)
        assert scores.min() >= -1 - 1e-5 and scores.max() <= 1 + 1e-5


def test_propagated_baseline_reproduces_the_model_exactly_and_shared_k_uses_k(minilm_backend):
    from attn_cli.analyses.variants import VARIANTS
    from attn_cli.backends.capture_hook import LayerRecorder, capturing
    from attn_cli.math.attention import expand_kv

    model, tokenizer = minilm_backend.model, minilm_backend.tokenizer
    inputs = tokenizer(TEXT, return_tensors="pt")
    implementation = model.config._attn_implementation

    def run(variant):
        recorder = LayerRecorder(set(range(6)), implementation, inject=VARIANTS[variant].transform)
        with torch.no_grad(), capturing(model, recorder):
            return model(**inputs).last_hidden_state, recorder.records

    with torch.no_grad():
        plain = model(**inputs).last_hidden_state
    same, _ = run("baseline")
    assert torch.equal(plain, same)
    shared, records = run("shared-k")
    assert not torch.allclose(plain, shared, atol=1e-3)
    for record in records.values():  # the query each layer really used is its key
        assert torch.equal(record.q, expand_kv(record.k, record.q.shape[-3]))  # (B, H, T, D)


def test_propagate_compounds_after_the_first_layer(minilm_backend):
    per_layer = Model(minilm_backend).compare(TEXT, layers="0,5")
    propagated = Model(minilm_backend).compare(TEXT, layers="0,5", propagate=True)
    first = lambda report, layer: matrix(report.runs["shared-k"][layer].heads[0].weights)  # noqa: E731
    torch.testing.assert_close(first(per_layer, 0), first(propagated, 0))  # same input to layer 0
    assert not torch.allclose(first(per_layer, 1), first(propagated, 1), atol=1e-3)  # layer 5 saw a different model
    assert all(head.symmetry.symmetric for head in all_heads(propagated.runs["shared-k"]))


def test_inspect_with_shared_k_flags_every_head_symmetric(minilm_backend):
    report = Model(minilm_backend).inspect(TEXT, variant="shared-k")
    assert report.variant == "shared-k"
    assert all(head.symmetry.symmetric for _, head in report.heads())


@pytest.fixture
def cli():
    from attn_cli.cli import app

    runner = CliRunner()
    return lambda *args: runner.invoke(app, list(args))


def test_compare_json_document(cli):
    result = cli(
        "compare",
        "Hello, how are you?",
        "--layer",
        "1",
        "--head",
        "0-1",
        "--variant",
        "shared-k",
        "--variant",
        "no-scale",
        "--json",
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["schema_version"] == 1 and document["command"] == "compare"
    assert document["mode"] == "per-layer"
    assert list(document["runs"]) == ["baseline", "shared-k", "no-scale"]
    for run in document["runs"].values():  # inspect's per-layer format
        assert [layer["layer"] for layer in run["layers"]] == [1]
        assert {"head", "kv_head", "scale", "scores", "weights", "symmetry", "top"} <= set(run["layers"][0]["heads"][0])
    diff = document["diff"]["shared-k"]
    assert diff["summary"]["heads"] == 2 and diff["summary"]["symmetric_heads"] == 2
    head = diff["layers"][0]["heads"][0]
    assert set(head) == {
        "head",
        "asymmetry",
        "self_weight",
        "entropy",
        "score_variance",
        "js_divergence",
        "top1_agreement",
    }
    assert set(head["self_weight"]) == {"baseline", "variant"}


def test_compare_terminal_summary_in_words(cli):
    result = cli("compare", "Hello, how are you?")
    assert result.exit_code == 0, result.output
    assert "all 72 heads symmetric" in result.stdout
    assert "mean self-weight" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--variant", "bilinear"], "learned parameters"),
        (["--variant", "additive"], "learned parameters"),
        (["--variant", "sideways"], "unknown variant"),
        (["--variant", "raw", "--propagate"], "raw has no projections"),
        (["--variant", "baseline"], "nothing to compare"),
    ],
)
def test_compare_bad_variants_exit_2(cli, args, message):
    result = cli("compare", "Hello", *args)
    assert result.exit_code == 2
    assert message in result.stderr and "Traceback" not in result.output


def test_inspect_rejects_two_variants_at_once(cli):
    result = cli("inspect", "Hello", "--variant", "shared-k", "--variant", "scoring=cosine")
    assert result.exit_code == 2 and "separate experiments" in result.stderr
