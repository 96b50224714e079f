"""The textbook lab: the toy model, every scoring function, masks, `attn steps` (concepts.md §1–§7).

Property tests (hypothesis) run over random shapes and seeds; tolerances are float32 (1e-5) unless said.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from attn_cli import attention, scoring
from attn_cli.backends.toy import (ToyBackend, initial_weights, load_weights, save_weights, token_vector,
                                   tokenize, toy_config)
from attn_cli.core import InspectRequest, run_inspect

ARTICLE = "I Love Nature Language Processing"
FAST = settings(max_examples=25, deadline=None)


def toy(**overrides) -> ToyBackend:
    return ToyBackend(toy_config(overrides))


def weights_of(report) -> torch.Tensor:
    return torch.tensor([[head.weights for head in layer.heads] for layer in report.layers])


def test_tokenizer_words_punctuation_and_cjk():
    assert tokenize(ARTICLE) == ["I", "Love", "Nature", "Language", "Processing"]
    assert tokenize("早上好") == ["早", "上", "好"]
    assert tokenize("Hi, you!") == ["Hi", ",", "you", "!"]


def test_same_token_same_vector_in_every_sentence():
    backend = toy()
    first = backend.capture("I Love you", [0], keep_inputs=True).layers[0].inputs
    second = backend.capture("you Love me", [0], keep_inputs=True).layers[0].inputs
    assert torch.equal(first[1], second[1])  # "Love"
    assert torch.equal(first[1], token_vector("Love", 0, 32))
    assert not torch.equal(token_vector("Love", 0, 32), token_vector("Love", 1, 32))


def test_the_toy_is_deterministic_across_runs():
    a = run_inspect(InspectRequest(text=ARTICLE, model="toy"))
    b = run_inspect(InspectRequest(text=ARTICLE, model="toy"))
    assert a.to_json_dict() == b.to_json_dict()


def test_weights_round_trip_bit_exactly(tmp_path):
    config = toy_config({"seed": 7})
    weights = initial_weights(config)
    save_weights(weights, config, tmp_path / "toy.safetensors")
    loaded = load_weights(tmp_path / "toy.safetensors", config)
    assert weights.keys() == loaded.keys()
    assert all(torch.equal(weights[name], loaded[name]) for name in weights)


def test_shared_projection_computes_what_the_article_computes():
    """The article: fc[0] for Q, K and V, score = Q·Kᵀ/√32, softmax — here one head of width 32."""
    backend = toy(heads=1, shared_projection=True)
    report = run_inspect(InspectRequest(text=ARTICLE, model="toy"), backend=backend)
    x = torch.stack([token_vector(token, 0, 32) for token in tokenize(ARTICLE)])  # the embeddings
    fc0_w, fc0_b = backend.weights["layers.0.w_q"], backend.weights["layers.0.b_q"]
    q = k = x @ fc0_w.T + fc0_b  # Q = fc[0](x), K = fc[0](x)
    expected = torch.softmax(q @ k.T / math.sqrt(32), dim=-1)
    torch.testing.assert_close(weights_of(report)[0, 0], expected, atol=1e-6, rtol=1e-6)
    assert report.layers[0].heads[0].symmetry.symmetric


@FAST
@given(st.integers(1, 4), st.integers(1, 4), st.integers(0, 2**16), st.integers(2, 7))
def test_shared_projection_makes_every_head_symmetric(heads, per_head, seed, words):
    backend = toy(d_model=heads * per_head * 2, heads=heads, seed=seed, shared_projection=True)
    text = " ".join(f"w{i}" for i in range(words))
    report = run_inspect(InspectRequest(text=text, model="toy"), backend=backend)
    assert all(head.symmetry.symmetric for _, head in report.heads())


@FAST
@given(st.integers(1, 6), st.integers(1, 9), st.integers(0, 2**16), st.data())
def test_masked_softmax_rows_are_distributions_and_never_nan(rows, columns, seed, data):
    generator = torch.Generator().manual_seed(seed)
    scores = torch.randn(rows, columns, generator=generator) * 10
    allowed = torch.tensor(data.draw(st.lists(st.lists(st.booleans(), min_size=columns, max_size=columns),
                                              min_size=rows, max_size=rows)))
    weights = attention.masked_softmax(scores, allowed)
    assert not weights.isnan().any()
    assert (weights[~allowed] == 0).all()  # masked entries exactly 0
    sums = weights.sum(-1)
    for row in range(rows):
        expected = 1.0 if allowed[row].any() else 0.0  # a fully masked row is zeros
        assert sums[row].item() == pytest.approx(expected, abs=1e-5)


@FAST
@given(st.integers(0, 2**16), st.permutations(list(range(5))))
def test_without_positions_permuting_tokens_permutes_the_weights(seed, order):
    backend = toy(seed=seed, positions="none")
    words = ["alpha", "beta", "gamma", "delta", "eps"]
    base = weights_of(run_inspect(InspectRequest(text=" ".join(words), model="toy"), backend=backend))
    moved = weights_of(run_inspect(InspectRequest(text=" ".join(words[i] for i in order), model="toy"),
                                   backend=backend))
    index = torch.tensor(order)
    torch.testing.assert_close(moved, base[:, :, index][:, :, :, index], atol=1e-5, rtol=1e-5)


def test_sinusoidal_positions_break_the_permutation_symmetry():
    backend = toy(positions="sinusoidal")
    base = weights_of(run_inspect(InspectRequest(text="alpha beta gamma", model="toy"), backend=backend))
    moved = weights_of(run_inspect(InspectRequest(text="beta alpha gamma", model="toy"), backend=backend))
    index = torch.tensor([1, 0, 2])
    assert not torch.allclose(moved, base[:, :, index][:, :, :, index], atol=1e-4)


@FAST
@given(st.integers(1, 8), st.integers(1, 8), st.integers(1, 16), st.integers(0, 2**16))
def test_cosine_scores_lie_in_minus_one_one(rows, columns, width, seed):
    generator = torch.Generator().manual_seed(seed)
    q, k = torch.randn(rows, width, generator=generator) * 5, torch.randn(columns, width, generator=generator)
    scores = scoring.cosine(q, k)
    assert scores.min() >= -1 - 1e-5 and scores.max() <= 1 + 1e-5


@FAST
@given(st.integers(1, 6), st.integers(1, 6), st.integers(1, 8), st.integers(1, 8), st.integers(0, 2**16))
def test_bilinear_and_additive_equal_numpy(rows, columns, width, hidden, seed):
    rng = np.random.default_rng(seed)
    q, k = rng.standard_normal((rows, width)), rng.standard_normal((columns, width))
    w, w_q, w_k, w_v = (rng.standard_normal(shape) for shape in
                        ((width, width), (hidden, width), (hidden, width), (hidden,)))
    t = lambda array: torch.tensor(array, dtype=torch.float64)  # noqa: E731
    bilinear = np.einsum("id,de,je->ij", q, w, k)
    additive = np.array([[w_v @ np.tanh(w_q @ q[i] + w_k @ k[j]) for j in range(columns)] for i in range(rows)])
    np.testing.assert_allclose(scoring.bilinear(t(q), t(k), t(w)).numpy(), bilinear, rtol=1e-10)
    np.testing.assert_allclose(scoring.additive(t(q), t(k), t(w_q), t(w_k), t(w_v)).numpy(), additive, rtol=1e-10)


def test_score_variance_is_d_unscaled_and_one_scaled():
    """concepts.md §3: unit-variance q, k of dimension d: var(q·k) ≈ d; ÷√d brings it to ≈ 1 (±5%)."""
    generator = torch.Generator().manual_seed(0)
    for d in (4, 16, 64, 256):
        q, k = torch.randn(20000, d, generator=generator), torch.randn(20000, d, generator=generator)
        unscaled = (q * k).sum(-1)  # 20000 independent q·k
        assert unscaled.var().item() == pytest.approx(d, rel=0.05)
        assert (unscaled / math.sqrt(d)).var().item() == pytest.approx(1.0, rel=0.05)


def test_score_stats_report_the_scale_effect():
    report = run_inspect(InspectRequest(text=ARTICLE + " and you tell I Looking in my eyes", model="toy"))
    for _, head in report.heads():
        stats = head.score_stats
        assert stats.unscaled_variance == pytest.approx(stats.variance * stats.head_dim, rel=1e-5)
        assert stats.head_dim == 8 and stats.predicted_unscaled_variance > 0
    assert "score_stats" in report.to_json_dict()["layers"][0]["heads"][0]


def test_parametrised_scorings_run_in_the_toy():
    for name in ("bilinear", "additive", "cosine", "dot"):
        report = run_inspect(InspectRequest(text=ARTICLE, model="toy"), backend=toy(scoring=name))
        rows = weights_of(report).sum(-1)
        torch.testing.assert_close(rows, torch.ones_like(rows), atol=1e-5, rtol=0)


def cli(*args, input=None):
    from attn_cli.cli import app

    return CliRunner().invoke(app, list(args), input=input)


def head_json(result, layer=0, head=0):
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["layers"][layer]["heads"][head]


def test_cli_causal_mask_and_valid_len():
    causal = head_json(cli("inspect", ARTICLE, "--model", "toy", "--mask", "causal", "--json"))
    assert all(causal["scores"][i][j] is None and causal["weights"][i][j] == 0
               for i in range(5) for j in range(i + 1, 5))
    short = head_json(cli("inspect", ARTICLE, "--model", "toy", "--valid-len", "2", "--json"))
    assert all(row[2:] == [None] * 3 for row in short["scores"])
    assert all(sum(row) == pytest.approx(1, abs=1e-5) for row in short["weights"])
    nothing = head_json(cli("inspect", ARTICLE, "--model", "toy", "--valid-len", "0", "--json"))
    assert all(value == 0 for row in nothing["weights"] for value in row)  # zeros, never NaN


def test_cli_batch_of_sentences_padded_into_one_run():
    result = cli("inspect", ARTICLE, "早上好", "--model", "toy", "--padding", "left", "--json")
    assert result.exit_code == 0, result.output
    sequences = json.loads(result.stdout)["sequences"]
    assert [len(seq["tokens"]) for seq in sequences] == [5, 3]
    alone = head_json(cli("inspect", "早上好", "--model", "toy", "--json"))
    np.testing.assert_allclose(sequences[1]["layers"][0]["heads"][0]["weights"], alone["weights"], atol=1e-6)


def test_cli_toy_settings_and_weights_file(tmp_path):
    path = tmp_path / "mine.safetensors"
    saved = cli("inspect", ARTICLE, "--model", "toy", "--seed", "3", "--d-model", "16", "--toy-heads", "2",
                "--save-weights", str(path), "--json")
    assert saved.exit_code == 0, saved.output and path.exists()
    loaded = cli("inspect", ARTICLE, "--model", "toy", "--seed", "9", "--d-model", "16", "--toy-heads", "2",
                 "--weights", str(path), "--json")
    first, second = json.loads(saved.stdout), json.loads(loaded.stdout)
    # the embeddings follow the seed (3 vs 9) but W_Q, W_K come from the file: check the file was used
    assert first["model"]["heads"] == second["model"]["heads"] == 2
    reloaded = cli("inspect", ARTICLE, "--model", "toy", "--seed", "3", "--d-model", "16", "--toy-heads", "2",
                   "--weights", str(path), "--json")
    assert json.loads(reloaded.stdout)["layers"] == first["layers"]


@pytest.mark.parametrize("args", [
    ["--model", "toy", "--d-model", "30", "--toy-heads", "4"],
    ["--model", "toy", "--positions", "learned"],
    ["--model", "toy", "--valid-len", "-1"],
    ["--model", "toy", "--scoring", "manhattan"],
    ["--d-model", "16"],  # a toy setting on the pretrained default
    ["--scoring", "bilinear"],  # learned parameters a pretrained model does not have
])
def test_cli_bad_toy_settings_exit_2(args):
    result = cli("inspect", ARTICLE, *args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(("args", "flag"), [(["--mask", "causal"], "--mask"), (["--toy-heads", "2"], "--toy-heads")])
def test_toy_flags_on_another_model_name_the_flag(args, flag):
    result = cli("inspect", "Hello", *args)
    assert result.exit_code == 2 and f"{flag} is a setting of the toy model" in result.stderr


def test_steps_walks_every_stage_on_the_toy():
    result = cli("steps", ARTICLE, "--head", "1", "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    names = [stage["name"] for stage in document["stages"]]
    assert names == ["X", "Q = X·W_Q", "K = X·W_K", "V = X·W_V", "Q·Kᵀ", "× 0.3536", "mask", "softmax", "·V",
                     "concat heads", "·W_O"]
    shapes = {stage["name"]: stage["shape"] for stage in document["stages"]}
    assert shapes["X"] == [5, 32] and shapes["Q = X·W_Q"] == [5, 8] and shapes["softmax"] == [5, 5]
    assert shapes["concat heads"] == [5, 32] and shapes["·W_O"] == [5, 32]
    inspected = head_json(cli("inspect", ARTICLE, "--model", "toy", "--head", "1", "--json"))
    softmax = next(stage for stage in document["stages"] if stage["name"] == "softmax")["values"]
    np.testing.assert_allclose(softmax, inspected["weights"], atol=1e-6)
    terminal = cli("steps", ARTICLE)
    assert terminal.exit_code == 0 and "softmax" in terminal.stdout and "W_O" in terminal.stdout


def test_steps_on_a_pretrained_model_shows_the_stages_it_has():
    result = cli("steps", "Hello, how are you?", "--model", "minilm", "--layer", "0", "--head", "2", "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert [stage["name"] for stage in document["stages"]][:4] == ["X", "Q", "K", "V"]
    assert "·W_O" in " ".join(document["missing"])
