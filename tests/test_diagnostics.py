"""Diagnostics: the sink rate (attn diagnose), massive activations of the residual stream (attn diagnose)
and the retrieval score (attn heads --probe retrieval), by hand on planted attention and planted hidden
states, the retrieval probe's construction, a corpus against its texts one by one, and the commands."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

import attn_cli
from attn_cli.cli import app
from attn_cli.data.capture import Token
from attn_cli.math.diagnostics import first_token_sums, layer_entries, sink_rates
from attn_cli.math.head_scores import SCORES, head_scores, needle_targets, token_flags

runner = CliRunner()
RETRIEVAL = SCORES.index("retrieval")


# ---- the sink rate, by hand


def test_first_token_weight_is_the_mean_over_every_real_row():
    """α = (1/T) Σ_i A[i, 0] over the real rows (the causal first row's weight 1 counts), padding rows out."""
    weights = torch.tensor(
        [
            [
                [[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.2, 0.3, 0.5]],  # text 0, head 0
                [[1.0, 0.0, 0.0], [0.1, 0.9, 0.0], [0.0, 0.5, 0.5]],
            ],  # text 0, head 1
            [
                [[1.0, 0.0, 0.0], [0.4, 0.6, 0.0], [0.0, 0.0, 0.0]],  # text 1: two tokens, row 2 padding
                [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0]],
            ],
        ],
        dtype=torch.float64,
    )
    real = torch.tensor([[True, True, True], [True, True, False]])
    alpha = first_token_sums(weights, real) / real.sum(-1, keepdim=True)
    expected = torch.tensor(
        [[(1 + 0.5 + 0.2) / 3, (1 + 0.1 + 0) / 3], [(1 + 0.4) / 2, (1 + 0) / 2]], dtype=torch.float64
    )
    assert torch.allclose(alpha, expected)
    # rates: layer = share of heads with α > ε; model = mean over layers. α: text 0 .567, .367; text 1 .7, .5
    per_layer, model = sink_rates(torch.stack([alpha, alpha.flip(-1)], 1), 0.4)  # (B, L=2, H=2)
    assert per_layer.tolist() == [[0.5, 0.5], [1.0, 1.0]] and model.tolist() == [0.5, 1.0]
    per_layer, _ = sink_rates(alpha[:, None], 0.5)
    assert per_layer.tolist() == [[0.5], [0.5]]  # text 1: 0.7 > 0.5, 0.5 is not more than 0.5


def test_sink_rate_of_planted_heads(planted_dir):
    """Causal, T tokens: the previous-token head's α is 2/T (row 0 on itself, row 1 on its previous, token 0),
    the first-token head's 1, the self head's 1/T (row 0 only): one head of three sinks at ε = 0.3."""
    model = attn_cli.load(str(planted_dir), device="cpu")
    text = "the cat sat on the mat and then slept"
    report = model.diagnose(text)
    count = report.tokens  # [CLS] 9 words [SEP]
    assert count == 11
    alpha = report.layers[0].first_token
    assert alpha == pytest.approx([2 / count, 1.0, 1 / count], abs=0.01)
    assert report.layers[0].sinking == [0.0, 1.0, 0.0]
    assert report.layers[0].sink_rate == pytest.approx(1 / 3) and report.sink_rate == pytest.approx(1 / 3)
    # ε is the user's: at 1 nothing sinks (α > ε), below the self head's α all do
    assert model.diagnose(text, epsilon=1.0).sink_rate == 0.0
    assert model.diagnose(text, epsilon=0.05).sink_rate == 1.0


def test_a_corpus_is_the_mean_of_its_texts(minilm_backend):
    """Sink rates and first-token weights over texts equal the mean of each text run alone; massive counts
    add up; the toy path (one Capture per text) gives the same sink rates as the batch as the model ran it."""
    from types import SimpleNamespace

    from attn_cli.analyses.diagnose import run_diagnose

    texts = ["Hello, how are you?", "The cat sat on the mat, and the cat slept.", "Short."]
    together = run_diagnose(minilm_backend, texts, batch_size=2, ratio=20, floor=5)
    alone = [run_diagnose(minilm_backend, [text], ratio=20, floor=5) for text in texts]
    assert together.texts == 3 and together.tokens == sum(one.tokens for one in alone)
    assert together.sink_rate == pytest.approx(sum(one.sink_rate for one in alone) / 3, abs=1e-6)
    for index, layer in enumerate(together.layers):
        singles = [one.layers[index] for one in alone]
        assert layer.sink_rate == pytest.approx(sum(s.sink_rate for s in singles) / 3, abs=1e-6)
        for head, value in enumerate(layer.first_token):
            assert value == pytest.approx(sum(s.first_token[head] for s in singles) / 3, abs=1e-5)
        assert layer.median == pytest.approx(sum(s.median for s in singles) / 3, abs=1e-5)
        assert layer.massive == sum(s.massive for s in singles) and layer.massive > 0  # 20× and > 5: [CLS] d99
        assert layer.massive_texts == sum(s.massive_texts for s in singles)
    assert together.recurring[0].massive_texts == 3  # the same (layer, dim) in every text
    cut_apart = SimpleNamespace(
        info=minilm_backend.info, device="cpu", dtype="float32", capture_batch=minilm_backend.capture_batch
    )
    per_text = run_diagnose(cut_apart, texts, batch_size=3)
    assert per_text.sink_rate == pytest.approx(together.sink_rate, abs=1e-6)
    assert per_text.largest is None and per_text.layers[0].massive is None  # no residual stream without it


# ---- massive activations


def test_layer_entries_by_hand():
    state = torch.ones(4, 5)  # median 1
    state[2, 3] = -250.0  # 250× the median and over 100: massive
    state[1, 0] = 150.0  # 150×, over 100
    state[0, 4] = 99.0  # 99×: neither
    median, entries, massive, dims = layer_entries(state, 7, ratio=100, floor=100, top=3)
    assert median == 1.0 and massive == 2 and dims == [0, 3]
    assert [(e.layer, e.position, e.dim, e.value, e.massive) for e in entries] == [
        (7, 2, 3, -250.0, True),
        (7, 1, 0, 150.0, True),
        (7, 0, 4, 99.0, False),
    ]
    assert layer_entries(state, 7, ratio=100, floor=200, top=1)[2] == 1  # the floor holds 150 back
    assert layer_entries(state, 7, ratio=200, floor=100, top=1)[2] == 1  # and the ratio


@pytest.fixture(scope="module")
def massive_dir(tmp_path_factory):
    """A 2-layer GPT-2 with two planted massive activations: position 3's embedding holds 5000 in dim 7
    (the residual stream carries it through both layers), and layer 1's MLP writes 3000 into dim 11 at
    every position (from layer 1 on). The last layer's output is what GPT-2's final norm flattens."""
    from conftest import save_tiny, tiny_gpt2_config

    torch.manual_seed(0)
    from transformers import GPT2Model

    model = GPT2Model(tiny_gpt2_config())
    with torch.no_grad():
        model.wpe.weight[3, 7] = 5000.0
        model.h[1].mlp.c_proj.bias[11] = 3000.0
    return save_tiny(model, tmp_path_factory.mktemp("massive-gpt2"))


def test_planted_massive_activations_are_found_where_they_were_planted(massive_dir):
    model = attn_cli.load(str(massive_dir), device="cpu")
    text = "the cat sat on the mat"
    report = model.diagnose(text)
    tokens = [token.text for token in model.capture(text, layers=[0]).tokens]
    count = len(tokens)
    assert report.layers[0].massive == 1 and report.layers[1].massive == 1 + count
    peak0, peak1 = report.layers[0].peak, report.layers[1].peak
    assert (peak0.layer, peak0.position, peak0.dim, peak0.token) == (0, 3, 7, tokens[3]) and peak0.massive
    assert peak0.value == pytest.approx(5000, rel=0.01) and peak0.ratio > 1000
    assert (peak1.position, peak1.dim) == (3, 7)  # 5000 and more beats 3000
    found = {(entry.layer, entry.position, entry.dim) for entry in report.largest if entry.massive}
    assert (0, 3, 7) in found and (1, 3, 7) in found and any(key[0] == 1 and key[2] == 11 for key in found)
    assert not any(key[0] == 0 and key[2] == 11 for key in found)  # dim 11 only from layer 1 on
    pairs = {(pair.layer, pair.dim): pair for pair in report.recurring}
    assert pairs[(1, 11)].massive_texts == 1 and (0, 11) not in pairs


# ---- the retrieval score


def tokens_of(ids: list[int]) -> list[Token]:
    return [Token(i, f"t{token}", token, False) for i, token in enumerate(ids)]


def test_needle_targets_mark_the_needle_and_the_rows_before_its_copy():
    #            0  1  2   3   4  5   6   7
    ids = torch.tensor([[1, 2, 50, 51, 3, 50, 51, 4]])
    target, needle = needle_targets(ids, torch.ones_like(ids, dtype=torch.bool))
    assert needle.tolist() == [[False, False, True, True, False, False, False, False]]
    assert target.tolist() == [[-1, -1, -1, -1, 50, 51, -1, -1]]  # row 4 is to produce 50, row 5 51


def test_retrieval_score_by_hand():
    """Rows 4 and 5 are to copy needle tokens 50 (at 2) and 51 (at 3). A head copies a token when its row's
    largest weight lands on it in the needle: |copied| / |needle|."""
    flags = token_flags([tokens_of([1, 2, 50, 51, 3, 50, 51, 4])], needle=True)
    weights = torch.full((1, 4, 8, 8), 1 / 8, dtype=torch.float64)
    rows = {
        0: ([2, 3], 1.0),  # both rows on the needle token they copy
        1: ([2, 0], 0.5),  # row 5's argmax is key 0: one of two
        2: ([3, 2], 0.0),  # each row on the other needle token: the wrong one
        3: ([5, 6], 0.0),
    }  # on the copy itself (token 50 at 5 is not the needle)
    for head, (keys, _) in rows.items():
        for row, key in zip((4, 5), keys):
            weights[0, head, row] = 0.0
            weights[0, head, row, key] = 0.6
            weights[0, head, row, (key + 1) % 8] = 0.4
    values, _ = head_scores(weights, torch.ones(1, 8, 8, dtype=torch.bool), flags)
    assert values[0, :, RETRIEVAL].tolist() == [expected for _, expected in rows.values()]
    tied = weights[:, :1].clone()
    tied[0, 0, 4] = 0.0
    tied[0, 0, 4, [0, 2]] = 0.5  # a tie: the earliest key (0) is the argmax, so no copy
    assert head_scores(tied, torch.ones(1, 8, 8, dtype=torch.bool), flags)[0][0, 0, RETRIEVAL] == 0.5
    unmarked, _ = head_scores(weights, torch.ones(1, 8, 8, dtype=torch.bool), token_flags([tokens_of([1] * 8)]))
    assert torch.isnan(unmarked[..., RETRIEVAL]).all()  # no needle: undefined


@pytest.mark.parametrize("name", ["minilm", "toy"])
def test_the_retrieval_probe_holds_a_needle_and_its_copy(name):
    from attn_cli.analyses.heads import probe

    model = attn_cli.load(name, device="cpu")
    described = probe(model.backend, "retrieval", seed=5, length=30)
    assert described["needle"] == 6 and described["length"] == 30 and 0 <= described["depth"] <= 30
    words = described["text"].split()
    depth, needle = described["depth"], words[described["depth"] : described["depth"] + 6]
    assert len(words) == 42 and words[-6:] == needle and len(set(words)) == 36  # only the needle repeats
    capture = model.capture(described["text"], layers=[0])
    ids = [token.id for token in capture.tokens]
    first = 1 if capture.tokens[0].special else 0  # [CLS]
    target, marked = needle_targets(torch.tensor([ids]), torch.ones(1, len(ids), dtype=torch.bool))
    assert marked[0].nonzero().flatten().tolist() == list(range(first + depth, first + depth + 6))
    copy = first + 36  # where the copy starts: the row before each of its tokens is to produce it
    assert [(row, ids[row + 1]) for row in range(len(ids)) if target[0, row] >= 0] == [
        (copy - 1 + k, ids[first + depth + k]) for k in range(6)
    ]
    assert probe(model.backend, "retrieval", seed=5, length=30) == described  # seeded


def test_retrieval_probe_scores_every_head_and_only_there(tiny_llama_dir):
    model = attn_cli.load(str(tiny_llama_dir), device="cpu")
    report = model.heads(probe="retrieval", seed=1, probe_length=40)
    assert report.probe["kind"] == "retrieval" and report.probe["needle"] == 8
    for profile in report.heads:
        assert profile.scored["retrieval"] == 1 and 0 <= profile.scores["retrieval"] <= 1
        assert profile.scores["retrieval"] * 8 == pytest.approx(round(profile.scores["retrieval"] * 8))
    plain = model.heads("the cat sat on the mat")
    assert all(profile.scores["retrieval"] is None and profile.scored["retrieval"] == 0 for profile in plain.heads)


def test_a_retrieval_probe_too_long_for_the_model_is_cut_to_fit(tiny_gpt2_dir):
    model = attn_cli.load(str(tiny_gpt2_dir), device="cpu")  # 128 positions
    report = model.heads(probe="retrieval", probe_length=500)
    described = report.probe
    assert described["requested"] == 500 and described["length"] + 2 * described["needle"] <= 124
    assert report.tokens <= 128
    toy = attn_cli.load("toy")  # no position limit: cut at twice the induction probe's half, not drawn for ever
    assert toy.heads(probe="retrieval", probe_length=10**12, layers=0).probe["length"] <= 2048


# ---- the commands


def invoke(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


def test_cli_diagnose_json(tmp_path):
    result = invoke("diagnose", "Hello, how are you?", "The cat sat.", "--json", "--epsilon", "0.5")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["command"] == "diagnose" and document["texts"] == 2
    assert document["thresholds"] == {"sink_epsilon": 0.5, "massive_ratio": 100.0, "massive_floor": 100.0}
    assert len(document["layers"]) == 6 and len(document["layers"][0]["first_token"]) == 12
    assert document["massive"] == 0 and document["largest"][0]["token"] == "[CLS]"
    assert 0 <= document["sink_rate"] <= 1


def test_cli_diagnose_terminal_fits_80_columns_and_saves_a_figure(tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    figure = tmp_path / "sinks.svg"
    result = invoke("diagnose", "Hello, how are you?", "--save", str(figure))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert any(line.startswith("Sink rate ") for line in lines) and any(line.startswith("L5 ") for line in lines)
    assert "first-token weight" in figure.read_text()


def test_cli_diagnose_on_the_toy_says_it_has_no_residual_stream():
    result = invoke("diagnose", "a b c d", "--model", "toy")
    assert result.exit_code == 0, result.output
    assert "no residual stream" in result.stdout and "Sink rate" in result.stdout


@pytest.mark.parametrize(
    "args, fragment",
    [
        (("diagnose",), "no text given"),
        (("diagnose", "hello", "--file", "x.txt"), "separate sources"),
        (("diagnose", "hello", "--ratio", "-1"), "ratio"),
        (("heads", "--probe", "needle"), "needle"),
        (("diagnose", "--file", "EMPTY"), "no text to score"),
    ],
)
def test_cli_diagnose_bad_usage_exits_2(args, fragment, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n")
    result = invoke(*[str(empty) if arg == "EMPTY" else arg for arg in args])
    assert result.exit_code == 2 and fragment in result.stderr, result.output
    assert "--probe" not in result.stderr or args[0] == "heads"  # diagnose has no probe to offer


def test_cli_heads_retrieval_probe(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    result = invoke("heads", "--probe", "retrieval", "--probe-length", "20")
    assert result.exit_code == 0, result.output
    assert "retrieval probe (seed 0, " in result.stdout and "a 4-token needle after token" in result.stdout
    assert any(line.startswith(" R  retrieval") for line in result.stdout.splitlines())
