"""The textbook lab: the toy model, every scoring function, masks, `attn steps`.

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

import attn_cli as attn
from attn_cli.api import Model
from attn_cli.backends.toy import (
    Options,
    ToyBackend,
    initial_weights,
    load_weights,
    save_weights,
    token_vector,
    tokenize,
    toy_config,
)
from attn_cli.math import attention, scoring

ARTICLE = "I Love Nature Language Processing"
FAST = settings(max_examples=25, deadline=None)


def toy(**overrides) -> ToyBackend:
    return ToyBackend(toy_config(Options(**overrides)))


def weights_of(report) -> torch.Tensor:
    return torch.from_numpy(np.stack([[head.weights for head in layer.heads] for layer in report.layers]))


def test_tokenizer_words_punctuation_and_cjk():
    assert tokenize(ARTICLE) == ["I", "Love", "Nature", "Language", "Processing"]
    assert tokenize("早上好") == ["早", "上", "好"]
    assert tokenize("Hi, you!") == ["Hi", ",", "you", "!"]


def test_same_token_same_vector_in_every_sentence():
    backend = toy()
    first = Model(backend).capture("I Love you", layers=[0], inputs=True).layers[0].inputs
    second = Model(backend).capture("you Love me", layers=[0], inputs=True).layers[0].inputs
    assert torch.equal(first[1], second[1])  # "Love"
    assert torch.equal(first[1], token_vector("Love", 0, 32))
    assert not torch.equal(token_vector("Love", 0, 32), token_vector("Love", 1, 32))


def test_the_toy_is_deterministic_across_runs():
    a = attn.load("toy").inspect(ARTICLE)
    b = attn.load("toy").inspect(ARTICLE)
    assert a.to_json_dict() == b.to_json_dict()


def test_weights_round_trip_bit_exactly(tmp_path):
    config = toy_config(Options(seed=7))
    weights = initial_weights(config)
    save_weights(weights, config, tmp_path / "toy.safetensors")
    loaded = load_weights(tmp_path / "toy.safetensors", config)
    assert weights.keys() == loaded.keys()
    assert all(torch.equal(weights[name], loaded[name]) for name in weights)


def test_shared_projection_computes_what_the_article_computes():
    """The article: fc[0] for Q, K and V, score = Q·Kᵀ/√32, softmax — here one head of width 32."""
    backend = toy(heads=1, shared_projection=True)
    report = Model(backend).inspect(ARTICLE)
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
    report = Model(backend).inspect(text)
    assert all(head.symmetry.symmetric for _, head in report.heads())


@FAST
@given(st.integers(1, 6), st.integers(1, 9), st.integers(0, 2**16), st.data())
def test_masked_softmax_rows_are_distributions_and_never_nan(rows, columns, seed, data):
    generator = torch.Generator().manual_seed(seed)
    scores = torch.randn(rows, columns, generator=generator) * 10
    allowed = torch.tensor(
        data.draw(st.lists(st.lists(st.booleans(), min_size=columns, max_size=columns), min_size=rows, max_size=rows))
    )
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
    base = weights_of(Model(backend).inspect(" ".join(words)))
    moved = weights_of(Model(backend).inspect(" ".join(words[i] for i in order)))
    index = torch.tensor(order)
    torch.testing.assert_close(moved, base[:, :, index][:, :, :, index], atol=1e-5, rtol=1e-5)


def test_sinusoidal_positions_break_the_permutation_symmetry():
    backend = toy(positions="sinusoidal")
    base = weights_of(Model(backend).inspect("alpha beta gamma"))
    moved = weights_of(Model(backend).inspect("beta alpha gamma"))
    index = torch.tensor([1, 0, 2])
    assert not torch.allclose(moved, base[:, :, index][:, :, :, index], atol=1e-4)


@FAST
@given(st.integers(0, 2**16), st.integers(1, 9), st.sampled_from(["toy-cosine", "cosine-variant"]))
def test_cosine_scores_lie_in_minus_one_one(seed, words, route):
    """Both routes to cosine scores: the toy computing with it, and the variant on any model's Q, K."""
    text = " ".join(f"w{i}" for i in range(words))
    if route == "toy-cosine":
        report = Model(toy(seed=seed, scoring="cosine")).inspect(text)
    else:
        report = Model(toy(seed=seed)).inspect(text, variant="scoring=cosine")
    for _, head in report.heads():
        assert np.nanmin(head.scores) >= -1 - 1e-5 and np.nanmax(head.scores) <= 1 + 1e-5
        assert head.scale == 1.0


@FAST
@given(st.integers(1, 6), st.integers(1, 6), st.integers(1, 8), st.integers(1, 8), st.integers(0, 2**16))
def test_bilinear_and_additive_equal_numpy(rows, columns, width, hidden, seed):
    rng = np.random.default_rng(seed)
    q, k = rng.standard_normal((rows, width)), rng.standard_normal((columns, width))
    w, w_q, w_k, w_v = (
        rng.standard_normal(shape) for shape in ((width, width), (hidden, width), (hidden, width), (hidden,))
    )
    t = lambda array: torch.tensor(array, dtype=torch.float64)  # noqa: E731
    bilinear = np.einsum("id,de,je->ij", q, w, k)
    additive = np.array([[w_v @ np.tanh(w_q @ q[i] + w_k @ k[j]) for j in range(columns)] for i in range(rows)])
    np.testing.assert_allclose(scoring.bilinear(t(q), t(k), t(w)).numpy(), bilinear, rtol=1e-10)
    np.testing.assert_allclose(scoring.additive(t(q), t(k), t(w_q), t(w_k), t(w_v)).numpy(), additive, rtol=1e-10)


def test_score_variance_is_d_unscaled_and_one_scaled():
    """The √d argument through the product's own statistics: unit-variance q, k of dimension d give
    score variance ≈ d before the scale and ≈ 1 after it (±10%: 400² scores of one draw)."""
    from attn_cli.analyses.inspect import analyse_heads
    from attn_cli.data.capture import LayerCapture
    from attn_cli.data.selection import Analysis, Window
    from attn_cli.math.masks import AttentionMask

    generator = torch.Generator().manual_seed(0)
    tokens = 400
    for d in (4, 16, 64, 256):
        q, k, v = (torch.randn(1, tokens, d, generator=generator) for _ in range(3))  # (H=1, T, D)
        layer = LayerCapture(0, q, k, v, AttentionMask(tokens, tokens), scale=d**-0.5)
        [head] = analyse_heads(layer, [0], [0], ["t"] * tokens, Analysis(), Window.nothing(tokens))
        stats = head.score_stats
        assert stats.unscaled_variance == pytest.approx(d, rel=0.1)
        assert stats.variance == pytest.approx(1.0, rel=0.1)
        assert stats.predicted_unscaled_variance == pytest.approx(d, rel=0.1)


def test_score_stats_report_the_scale_effect():
    report = attn.load("toy").inspect(ARTICLE + " and you tell I Looking in my eyes")
    for _, head in report.heads():
        stats = head.score_stats
        assert stats.unscaled_variance == pytest.approx(stats.variance * stats.head_dim, rel=1e-5)
        assert stats.head_dim == 8 and stats.predicted_unscaled_variance > 0
    assert "score_stats" in report.to_json_dict()["layers"][0]["heads"][0]


def test_parametrised_scorings_run_in_the_toy():
    for name in ("bilinear", "additive", "cosine", "dot"):
        report = Model(toy(scoring=name)).inspect(ARTICLE)
        rows = weights_of(report).sum(-1)
        torch.testing.assert_close(rows, torch.ones_like(rows), atol=1e-5, rtol=0)


def cli(*args, input=None):
    from attn_cli.cli import app

    return CliRunner().invoke(app, list(args), input=input)


def head_json(result, layer=0, head=0):
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["layers"][layer]["heads"][head]


def test_cli_causal_mask_and_valid_len():
    causal = head_json(cli("inspect", ARTICLE, "--model", "toy", "-O", "causal=true", "--json"))
    assert all(
        causal["scores"][i][j] is None and causal["weights"][i][j] == 0 for i in range(5) for j in range(i + 1, 5)
    )
    short = head_json(cli("inspect", ARTICLE, "--model", "toy", "-O", "valid_len=2", "--json"))
    assert all(row[2:] == [None] * 3 for row in short["scores"])
    assert all(sum(row) == pytest.approx(1, abs=1e-5) for row in short["weights"])
    nothing = head_json(cli("inspect", ARTICLE, "--model", "toy", "-O", "valid-len=0", "--json"))
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
    shape = ["-O", "d_model=16", "-O", "heads=2"]
    saved = cli("inspect", ARTICLE, "--model", "toy", "-O", "seed=3", *shape, "-O", f"save_weights={path}", "--json")
    assert saved.exit_code == 0, saved.output
    assert path.exists()
    loaded = cli("inspect", ARTICLE, "--model", "toy", "-O", "seed=9", *shape, "-O", f"weights={path}", "--json")
    first, second = json.loads(saved.stdout), json.loads(loaded.stdout)
    # the embeddings follow the seed (3 vs 9) but W_Q, W_K come from the file: check the file was used
    assert first["model"]["heads"] == second["model"]["heads"] == 2
    reloaded = cli("inspect", ARTICLE, "--model", "toy", "-O", "seed=3", *shape, "-O", f"weights={path}", "--json")
    assert json.loads(reloaded.stdout)["layers"] == first["layers"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "toy", "-O", "d_model=30", "-O", "heads=4"], "split evenly"),
        (["--model", "toy", "-O", "positions=learned"], "positions"),
        (["--model", "toy", "-O", "valid_len=-1"], "valid_len"),
        (["--model", "toy", "-O", "scoring=manhattan"], "unknown scoring"),
        (["--model", "toy", "-O", "d_model=big"], "expected a whole number"),
        (["--model", "toy", "-O", "causal=maybe"], "expected true or false"),
        (["--model", "toy", "-O", "heads"], "KEY=VALUE"),
        (["--model", "toy", "--dtype", "float16"], "float32"),
        (["-O", "d_model=16"], "does not take the option 'd_model'"),  # a toy setting on the pretrained default
        (["--variant", "scoring=bilinear"], "learned parameters"),  # a pretrained model does not have them
        (
            ["--model", "toy", "--variant", "scoring=bilinear"],
            "-O scoring=bilinear",
        ),  # the toy's own scoring is an option
    ],
)
def test_cli_bad_toy_settings_exit_2(args, message):
    result = cli("inspect", ARTICLE, *args)
    assert result.exit_code == 2, result.output
    assert message in result.stderr and "Traceback" not in result.output


@pytest.mark.parametrize(
    ("model", "args", "backend"),
    [
        ("minilm", ["-O", "causal=true"], "the minilm model"),
        ("toy", ["--revision", "v1"], "the toy model"),
        ("toy", ["--allow-pickle"], "the toy model"),
    ],
)
def test_an_option_a_backend_does_not_take_names_the_backend(model, args, backend):
    result = cli("inspect", "Hello", "--model", model, *args)
    assert result.exit_code == 2, result.output
    assert f"{backend} does not take the option" in result.stderr and "its options:" in result.stderr


def test_a_toy_config_file_is_checked_like_the_options(tmp_path):
    config = tmp_path / "toy.toml"
    config.write_text('[toy]\nd_model = "big"\n')
    result = cli("inspect", ARTICLE, "--model", "toy", "-O", f"config={config}")
    assert result.exit_code == 2 and "expected a whole number" in result.stderr
    config.write_text("[toy]\nheads = 2\nd_model = 8\ncausal = true\n")
    document = json.loads(cli("inspect", ARTICLE, "--model", "toy", "-O", f"config={config}", "--json").stdout)
    assert document["model"]["heads"] == 2 and document["model"]["causal"] is True


def test_toy_settings_from_the_python_api_equal_the_cli():
    model = attn.load("toy", d_model=16, heads=2, causal=True)
    assert (model.info.heads, model.info.head_dim, model.info.causal) == (2, 8, True)
    api = model.inspect(ARTICLE).to_json_dict()
    cli_document = json.loads(
        cli(
            "inspect", ARTICLE, "--model", "toy", "-O", "d_model=16", "-O", "heads=2", "-O", "causal=true", "--json"
        ).stdout
    )
    assert api == cli_document


def test_steps_walks_every_stage_on_the_toy():
    result = cli("steps", ARTICLE, "--head", "1", "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    names = [stage["name"] for stage in document["stages"]]
    assert names == [
        "X",
        "Q = X·W_Q",
        "K = X·W_K",
        "V = X·W_V",
        "Q·Kᵀ",
        "× 0.3536",
        "mask",
        "softmax",
        "·V",
        "concat heads",
        "·W_O",
    ]
    shapes = {stage["name"]: stage["shape"] for stage in document["stages"]}
    assert shapes["X"] == [5, 32] and shapes["Q = X·W_Q"] == [5, 8] and shapes["softmax"] == [5, 5]
    assert shapes["concat heads"] == [5, 32] and shapes["·W_O"] == [5, 32]
    inspected = head_json(cli("inspect", ARTICLE, "--model", "toy", "--head", "1", "--json"))
    softmax = next(stage for stage in document["stages"] if stage["name"] == "softmax")["values"]
    np.testing.assert_allclose(softmax, inspected["weights"], atol=1e-6)
    terminal = cli("steps", ARTICLE)
    assert terminal.exit_code == 0 and "softmax" in terminal.stdout and "W_O" in terminal.stdout


def test_steps_concat_and_w_o_are_the_toy_layers_own_output():
    """The last two stages come from the toy's forward pass; recomputed here in numpy from its weights."""
    model = attn.load("toy")
    steps = {stage.name: stage.values for stage in model.steps(ARTICLE, head=1).stages}
    weights = {name: tensor.numpy().astype(np.float64) for name, tensor in model.backend.weights.items()}
    x = steps["X"].astype(np.float64)  # (T, 32)

    def project(name):
        return x @ weights[f"layers.0.w_{name}"].T + weights[f"layers.0.b_{name}"]  # (T, 32)

    q, k, v = project("q"), project("k"), project("v")
    heads = []
    for h in range(4):
        part = slice(8 * h, 8 * (h + 1))
        scores = q[:, part] @ k[:, part].T / math.sqrt(8)
        softmax = np.exp(scores - scores.max(-1, keepdims=True))
        heads.append(softmax / softmax.sum(-1, keepdims=True) @ v[:, part])
    concat = np.concatenate(heads, axis=-1)  # (T, 32)
    np.testing.assert_allclose(steps["concat heads"], concat, atol=1e-5)
    np.testing.assert_allclose(steps["·W_O"], concat @ weights["layers.0.w_o"].T + weights["layers.0.b_o"], atol=1e-5)
    np.testing.assert_allclose(steps["·V"], heads[1], atol=1e-5)


def test_steps_on_a_pretrained_model_shows_the_stages_it_has():
    result = cli("steps", "Hello, how are you?", "--model", "minilm", "--layer", "0", "--head", "2", "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert [stage["name"] for stage in document["stages"]][:4] == ["X", "Q", "K", "V"]
    assert "·W_O" in " ".join(document["missing"])
