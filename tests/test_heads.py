"""`attn heads`: the score formulas on hand-made matrices, planted heads in a hand-built model,
MiniLM's previous-token head, batches against single texts, the corpus reader and the command."""

from __future__ import annotations

import json
import math

import pytest
import torch
from typer.testing import CliRunner

import attn_cli
from attn_cli.cli import app
from attn_cli.data.capture import Token
from attn_cli.math.head_scores import SCORES, TextSums, head_scores, is_punctuation, label, share_patterns, token_flags

runner = CliRunner()


def tokens(*texts: str, special=()) -> list[Token]:
    """Tokens with ids from a small table; `special` names the special ones."""
    table = {"[CLS]": 101, "[SEP]": 102, "cat": 5, "dog": 6, ",": 7, ".": 8, "sat": 9}
    return [Token(i, text, table[text], text in special) for i, text in enumerate(texts)]


def one_head(rows: list[list[float]]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float64)[None, None]  # (1, 1, T, T)


def scores_of(values: torch.Tensor) -> dict:
    return dict(zip(SCORES, values.tolist()))


def test_token_flags_pad_each_texts_tokens_on_the_right():
    """The batch's flags, built as one tensor per flag, equal each text's own flags laid out row by row:
    ids, real, separators (special tokens after position 0, else the text's last token) and punctuation."""
    texts = [
        tokens("[CLS]", "cat", ",", "sat", "[SEP]", special=("[CLS]", "[SEP]")),
        tokens("cat", "."),  # no special token: the last token is the separator
        tokens("[CLS]", "dog", "[SEP]", "cat", "[SEP]", ".", "sat", special=("[CLS]", "[SEP]")),
        tokens("dog"),
    ]
    flags = token_flags(texts)
    assert flags.ids.shape == (4, 7)
    for b, text in enumerate(texts):
        n = len(text)
        separators = [token.special and token.index > 0 for token in text]
        separators = separators if any(separators) else [False] * (n - 1) + [True]
        assert flags.ids[b, :n].tolist() == [token.id for token in text]
        assert flags.real[b].tolist() == [True] * n + [False] * (7 - n)
        assert flags.separator[b].tolist() == separators + [False] * (7 - n)
        assert flags.punctuation[b].tolist() == [token.text in ",." for token in text] + [False] * (7 - n)


# ---- the formulas, by hand

HAND = [  # one head's weights over 4 tokens: [CLS] cat , cat  (bidirectional)
    [0.1, 0.2, 0.3, 0.4],
    [0.5, 0.25, 0.25, 0.0],
    [0.0, 0.6, 0.1, 0.3],
    [0.1, 0.7, 0.1, 0.1],
]
HAND_TOKENS = tokens("[CLS]", "cat", ",", "cat", special=("[CLS]",))


def hand_expected() -> dict:
    entropy = [-sum(w * math.log(w) for w in row if w > 0) / math.log(4) for row in HAND]
    return {
        "previous_token": (0.5 + 0.6 + 0.1) / 3,  # rows 1-3 have a previous token; row 0 has no target
        "duplicate_token": 0.7,  # only row 3 ("cat") has an earlier copy: key 1
        "induction": 0.1,  # row 3: the token after the earlier "cat" is key 2
        "first_token": (0.1 + 0.5 + 0.0 + 0.1) / 4,
        "last_token": (0.4 + 0.0 + 0.3) / 3,  # no [SEP]: the last token is the separator; not its own row
        "punctuation": (0.3 + 0.25 + 0.1 + 0.1) / 4,  # key 2 is ","
        "self": (0.1 + 0.25 + 0.1 + 0.1) / 4,
        "broad": sum(entropy) / 4,
        "sink": 2 / 4,  # key 1 gets > 0.3 from rows 2 and 3 (0.3 itself is not more than ε)
    }


def test_formulas_match_hand_computed_values():
    flags = token_flags([HAND_TOKENS])
    values, sink_key = head_scores(one_head(HAND), torch.ones(1, 4, 4, dtype=torch.bool), flags)
    got = scores_of(values[0, 0])
    for name, expected in hand_expected().items():
        assert got[name] == pytest.approx(expected, abs=1e-12), name
    assert sink_key.tolist() == [[1]]


def test_padding_is_excluded_from_every_score():
    """The same text padded to 6 beside a longer one: its scores do not change."""
    other = tokens("[CLS]", "dog", "sat", "dog", ".", "[SEP]", special=("[CLS]", "[SEP]"))
    flags = token_flags([HAND_TOKENS, other])
    weights = torch.zeros(2, 1, 6, 6, dtype=torch.float64)
    weights[0, 0, :4, :4] = torch.tensor(HAND, dtype=torch.float64)
    weights[1, 0] = torch.full((6, 6), 1 / 6, dtype=torch.float64)
    allowed = torch.zeros(2, 6, 6, dtype=torch.bool)
    allowed[0, :4, :4] = True
    allowed[1] = True
    values, keys = head_scores(weights, allowed, flags)
    got = scores_of(values[0, 0])
    for name, expected in hand_expected().items():
        assert got[name] == pytest.approx(expected, abs=1e-12), name
    uniform = scores_of(values[1, 0])
    assert uniform["broad"] == pytest.approx(1.0)
    assert uniform["last_token"] == pytest.approx(1 / 6)  # the [SEP], not the padding (its own row left out)
    assert uniform["sink"] == 0.0 and keys[1, 0] == -1  # 1/6 is never more than ε


def test_causal_first_row_has_no_choice_and_rows_without_a_target_do_not_count():
    """Causal, 3 tokens: row 0 sees only itself and counts for nothing; no repeats: duplicate is undefined."""
    flags = token_flags([tokens("cat", "sat", "dog")])
    weights = one_head([[1.0, 0.0, 0.0], [0.8, 0.2, 0.0], [0.0, 0.9, 0.1]])
    allowed = torch.tril(torch.ones(3, 3, dtype=torch.bool))[None]
    got = scores_of(head_scores(weights, allowed, flags)[0][0, 0])
    assert got["self"] == pytest.approx((0.2 + 0.1) / 2)  # rows 1 and 2 only
    assert got["previous_token"] == pytest.approx((0.8 + 0.9) / 2)
    assert got["first_token"] == pytest.approx((0.8 + 0.0) / 2)
    # only row 2 may attend the last token, and it is that token: a separator's own row does not count
    assert math.isnan(got["last_token"])
    assert math.isnan(got["duplicate_token"]) and math.isnan(got["induction"]) and math.isnan(got["punctuation"])
    assert got["broad"] == pytest.approx(
        sum(-sum(w * math.log(w) for w in row if w) / math.log(n) for row, n in (([0.8, 0.2], 2), ([0.9, 0.1], 3))) / 2
    )


def test_ties_name_the_earliest_sink_key_and_the_earliest_label():
    flags = token_flags([tokens("cat", "sat")])
    values, key = head_scores(one_head([[0.5, 0.5], [0.5, 0.5]]), torch.ones(1, 2, 2, dtype=torch.bool), flags)
    assert key.tolist() == [[0]] and values[0, 0, SCORES.index("sink")] == 1.0
    tied = [0.6, 0.0, 0.0, 0.6, 0.0, 0.0, 0.0, 0.0, 0.0]
    assert label(tied) == "previous_token"
    assert label([0.5, 0, 0, 0.5, 0, 0, 0, 0.84, 0.5]) == "mixed"  # nothing passes its threshold
    assert label([0.2, None, float("nan"), 0.1, 0, 0, 0, 0.9, 0.9]) == "broad"
    assert label([0.2, None, None, 0.4, 0, 0, 0, 0.5, 0.8]) == "sink"


def test_the_fast_path_equals_the_pattern_definition():
    """TextSums takes the targets without building P; share_patterns is P. Random weights, ids, causal masks,
    padding and row blocks."""
    generator = torch.Generator().manual_seed(0)
    count, heads, keys = 3, 2, 9
    lengths = [9, 6, 4]
    ids = torch.randint(0, 4, (count, keys), generator=generator)  # few ids: many repeats
    text_tokens = [
        [Token(i, "," if ids[b, i] == 3 else "w", int(ids[b, i]), i == 0) for i in range(n)]
        for b, n in enumerate(lengths)
    ]
    flags = token_flags(text_tokens)
    allowed = torch.zeros(count, keys, keys, dtype=torch.bool)
    for b, n in enumerate(lengths):
        allowed[b, :n, :n] = torch.tril(torch.ones(n, n, dtype=torch.bool))
    scores = torch.randn(count, heads, keys, keys, generator=generator, dtype=torch.float64) * 2
    from attn_cli.math.attention import masked_softmax

    weights = masked_softmax(scores, allowed[:, None])
    blocked = TextSums(count, heads, keys, dtype=torch.float64)
    for start in range(0, keys, 4):  # row blocks of 4
        blocked.add(weights[:, :, start : start + 4], allowed[:, start : start + 4], flags, start)
    got = blocked.result()[0]
    patterns = share_patterns(flags, 0, keys) & allowed  # (7, B, T, T)
    counted = allowed.sum(-1) >= 2
    for index in range(7):
        rows = (patterns[index].any(-1) & counted)[:, None]  # (B, 1, T)
        on = (weights * patterns[index][:, None]).sum(-1)
        expected = (on * rows).sum(-1) / (weights.sum(-1) * rows).sum(-1)
        assert torch.allclose(got[..., index], expected, atol=1e-12, equal_nan=True), SCORES[index]
    heavy = ((weights > 0.3) & counted[:, None, :, None]).sum(-2)  # (B, h, T): counted rows > ε per key
    assert torch.equal(blocked.result()[1], heavy.max(-1).indices)
    assert torch.allclose(got[..., SCORES.index("sink")], heavy.max(-1).values / counted.sum(-1, keepdim=True).double())


def test_punctuation_tokens():
    assert all(is_punctuation(t) for t in (",", "?", "Ġ.", "##!", "...", "「"))
    assert not any(is_punctuation(t) for t in ("a", "Ġ", "##s", "1", "$", ""))


# ---- real models


@pytest.fixture(scope="module")
def minilm(minilm_backend):
    from attn_cli.api import Model

    return Model(minilm_backend)


def test_minilm_layer0_head2_is_a_previous_token_head(minilm):
    report = minilm.heads("Hello, how are you?")
    head = report.head(0, 2)
    assert head.label == "previous_token" and head.scores["previous_token"] >= 0.9
    assert report.texts == 1 and report.tokens == 8 and head.std["previous_token"] == 0.0
    assert len(report.heads) == 72


def test_batch_scores_equal_the_mean_of_single_texts(minilm, tiny_llama_dir):
    texts = ["Hello, how are you?", "The cat sat on the mat, and the cat slept.", "A b c a b c!", "Short."]
    llama = attn_cli.load(str(tiny_llama_dir), device="cpu")  # causal, grouped-query
    for model in (minilm, llama):
        batch = model.heads(texts, batch_size=3)
        singles = [model.heads(text) for text in texts]
        for profile in batch.heads:
            for name in SCORES:
                values = [s.head(profile.layer, profile.head).scores[name] for s in singles]
                values = [v for v in values if v is not None]
                assert profile.scored[name] == len(values)
                if not values:
                    assert profile.scores[name] is None
                    continue
                mean = sum(values) / len(values)
                spread = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
                assert profile.scores[name] == pytest.approx(mean, abs=1e-5), (profile.layer, profile.head, name)
                assert profile.std[name] == pytest.approx(spread, abs=1e-5)


def test_the_batch_as_run_equals_the_texts_cut_apart(minilm_backend):
    """HF backends are scored on the padded batch as the model ran it (capture_padded); a backend with only
    capture_batch (one Capture per text, re-padded here) gives the same scores."""
    from types import SimpleNamespace

    from attn_cli.analyses.heads import run_heads
    from attn_cli.data.selection import Selection

    texts = ["Hello, how are you?", "The cat sat on the mat, and the cat slept.", "Short."]
    cut_apart = SimpleNamespace(
        info=minilm_backend.info, device="cpu", dtype="float32", capture_batch=minilm_backend.capture_batch
    )
    as_run = run_heads(minilm_backend, texts, Selection(layers="0,5"), batch_size=3)
    per_text = run_heads(cut_apart, texts, Selection(layers="0,5"), batch_size=3)
    for one, other in zip(as_run.heads, per_text.heads):
        assert one.label == other.label and one.sink_key == other.sink_key
        for name in SCORES:
            assert one.scores[name] == pytest.approx(other.scores[name], abs=1e-5, nan_ok=True)


def test_the_forward_stops_after_the_last_selected_layer(minilm_backend):
    """Scoring layers 0 and 2 runs layers 0-2 (layer 2 only up to its attention): the later layers cannot change
    their q and k. The scores equal those of a forward run to the end (asking for the hidden states runs it
    all), and the model is left as it was: its own attention again, a plain forward as before."""
    from attn_cli.analyses.heads import score_batch

    model = minilm_backend.model
    texts = ["Hello, how are you?", "The cat sat on the mat, and the cat slept."]
    fed = minilm_backend.tokenizer(texts, padding=True, return_tensors="pt")
    with torch.inference_mode():
        before = model(**fed).last_hidden_state
    entered = []
    hooks = [
        layer.register_forward_pre_hook(lambda module, args, index=index: entered.append(index))
        for index, layer in enumerate(model.encoder.layer)
    ]
    try:
        stopped, _, _ = score_batch(minilm_backend, texts, [0, 2], list(range(12)), False)
        assert entered == [0, 1, 2]
        entered.clear()
        whole, _, _ = score_batch(
            minilm_backend, texts, [0, 2], list(range(12)), False, hidden=lambda run, states: None
        )
        assert entered == list(range(6))
    finally:
        for hook in hooks:
            hook.remove()
    assert [chunk.layer for chunk in stopped] == [chunk.layer for chunk in whole]
    for one, other in zip(stopped, whole):
        assert torch.equal(one.values.nan_to_num(-1), other.values.nan_to_num(-1)) and torch.equal(one.sink, other.sink)
    assert model.config._attn_implementation == "sdpa"
    with torch.inference_mode():
        assert torch.equal(model(**fed).last_hidden_state, before)


@pytest.mark.parametrize("stack", [1, 2])
def test_each_layer_is_scored_as_the_forward_makes_it_and_let_go(minilm_backend, monkeypatch, stack):
    """Memory stays bounded by a stack of layers: when layer L reaches the scorer, nothing keeps an earlier
    layer's v, and its q and k only while that layer waits in the stack (here of `stack` layers, at most)."""
    import gc
    import weakref

    import attn_cli.analyses.heads as engine
    from attn_cli.data.selection import Selection

    seen, alive_at_arrival = [], []  # per earlier layer: weak references to its (q, k, v); whether each lives
    original = engine.LayerScores.add_padded

    def watching(self, run, record):
        gc.collect()
        alive_at_arrival.append([[ref() is not None for ref in refs] for refs in seen])
        seen.append([weakref.ref(tensor) for tensor in (record.q, record.k, record.v)])
        original(self, run, record)

    monkeypatch.setattr(engine.LayerScores, "add_padded", watching)
    monkeypatch.setattr(engine, "_stack_size", lambda q, k, heads: stack)
    report = engine.run_heads(minilm_backend, ["Hello, how are you?", "Fine."], Selection(), batch_size=2)
    assert report.texts == 2 and len(alive_at_arrival) == minilm_backend.info.layers
    for layer, alive in enumerate(alive_at_arrival):
        assert not any(v for _, _, v in alive), (layer, alive)
        waiting = layer % stack  # the layers in its stack before it keep their q and k, no other layer does
        assert alive == [[False] * 3] * (layer - waiting) + [[True, True, False]] * waiting, (layer, alive)


def test_layers_scored_as_a_stack_equal_layers_scored_one_by_one(minilm_backend, monkeypatch):
    """Stacking layers into one batch (LayerScores.flush) changes no number: every per-text score, sink key
    and highlighted row of a padded batch are the same as with one layer at a time, for stacks of 2, 4 and 6."""
    import numpy as np

    import attn_cli.analyses.heads as engine

    texts = ["Hello, how are you?", "The cat sat on the mat, and the cat slept.", "A b c a b c!", "Short."]
    layers, heads = list(range(6)), [0, 2, 5, 7, 11]

    def scored(stack: int | None):
        monkeypatch.setattr(engine.LayerScores, "stacks", stack is not None)
        monkeypatch.setattr(engine, "_stack_size", lambda q, k, h: stack or 1)
        return engine.score_texts(minilm_backend, texts, layers, heads, truncate=False)

    alone = scored(None)
    for stack in (2, 4, 6):
        stacked = scored(stack)
        for name in ("values", "sink", "query", "edge_key", "edge_weight", "keys", "weights"):
            assert np.array_equal(getattr(stacked, name), getattr(alone, name), equal_nan=True), (stack, name)


def test_a_highlighted_row_gathered_from_its_block_equals_the_row_scored_again(minilm_backend, monkeypatch):
    """Where one block holds every row, an example's row of weights is gathered from it; where rows come in
    several blocks it is scored again (edges.row_weights). The same rows and keys; scores and weights equal to
    1e-6 (float32 sums and products in another order)."""
    import numpy as np

    import attn_cli.analyses.heads as engine

    texts = ["Hello, how are you?", "The cat sat on the mat, and the cat slept.", "Short."]
    whole = engine.score_texts(minilm_backend, texts, [0, 3], list(range(12)), truncate=False)
    monkeypatch.setattr(engine, "CHUNK_CELLS", 3 * 12 * 4 * 16)  # 4 rows a block
    rows = engine.score_texts(minilm_backend, texts, [0, 3], list(range(12)), truncate=False)
    for name in ("sink", "query", "edge_key", "keys"):
        assert np.array_equal(getattr(rows, name), getattr(whole, name)), name
    for name in ("values", "edge_weight", "weights"):  # sums over other blocks: float32 in another order
        assert np.allclose(getattr(rows, name), getattr(whole, name), rtol=0, atol=1e-6, equal_nan=True), name
    edge = whole.query >= 0  # the edge's own weight is the row's weight on the edge key, gathered or not
    on_key = np.take_along_axis(whole.weights, (whole.keys == whole.edge_key[..., None]).argmax(-1)[..., None], -1)
    assert np.array_equal(on_key[..., 0][edge], whole.edge_weight[edge].astype(np.float32))


def test_a_stack_never_outgrows_a_block():
    import attn_cli.analyses.heads as engine

    q = torch.zeros(32, 12, 30, 32)
    size = engine._stack_size(q, q, 12)
    assert size * 32 * 12 * 30 * 30 <= engine.CHUNK_CELLS and size * 2 * q.numel() <= 4 * engine.CHUNK_CELLS
    assert engine._stack_size(torch.zeros(64, 12, 512, 32), torch.zeros(64, 12, 512, 32), 12) == 1  # long texts


def test_a_batch_is_tokenized_as_its_texts_one_by_one(minilm_backend):
    """_encode_batch (one tokenizer call for a batch) gives each text's ids and special-token marks as _encode does,
    and the same errors: a text past the model's positions, or one cut with truncate."""
    from attn_cli.plumbing.errors import InputTooLong

    texts = ["Hello, how are you?", "naïve café — 你好!", " ", "The cat sat."]
    for (batch, cut), text in zip(minilm_backend._encode_batch(texts, False), texts):
        one, one_cut = minilm_backend._encode(text, False)
        assert cut == one_cut is None
        assert {k: batch[k] for k in ("input_ids", "special_tokens_mask")} == {
            k: one[k] for k in ("input_ids", "special_tokens_mask")
        }
    long = "word " * 600
    with pytest.raises(InputTooLong):
        minilm_backend._encode_batch(["fine", long], False)
    (_, none), (cut_encoding, cut) = minilm_backend._encode_batch(["fine", long], True)
    assert none is None and cut == 602 and len(cut_encoding["input_ids"]) == minilm_backend.info.max_positions
    # capture_batch still tokenizes text by text: its Captures carry words, which need the word ids
    assert all(capture.words is not None for capture in minilm_backend.capture_batch(texts[:2], [0]))


def test_planted_heads_are_labelled_right(planted_dir):
    model = attn_cli.load(str(planted_dir), device="cpu")
    report = model.heads(["the cat sat on the mat", "a dog , then another dog ran off quickly"], batch_size=2)
    expected = {0: "previous_token", 1: "first_token", 2: "self"}
    for head, kind in expected.items():
        profile = report.head(0, head)
        assert profile.label == kind and profile.scores[kind] >= 0.95, (head, profile.scores)
    assert report.head(0, 1).sink_key.position == 0 and report.head(0, 1).sink_key.token == "[CLS]"


def test_induction_probe_needs_no_text_on_a_causal_model(tiny_llama_dir, tiny_gpt2_dir):
    for directory in (tiny_llama_dir, tiny_gpt2_dir):
        model = attn_cli.load(str(directory), device="cpu")
        report = model.heads(probe="induction", seed=3, probe_length=20)
        assert report.probe["kind"] == "induction" and report.probe["seed"] == 3 and report.source == "probe"
        capture = model.capture(report.probe["text"], layers=[0])
        words = [t.id for t in capture.tokens if not t.special]
        assert len(words) == 40 and words[:20] == words[20:]  # the same 20 tokens twice
        assert all(profile.scored["induction"] == 1 for profile in report.heads)
    again = model.heads(probe="induction", seed=3, probe_length=20)
    assert again.probe["text"] == report.probe["text"]  # seeded


def test_a_probe_too_long_for_the_model_is_cut_and_says_so(tiny_gpt2_dir):
    """The tiny GPT-2 holds 128 positions: a 300-token probe is cut to fit, with a note on stderr."""
    result = invoke("--probe", "induction", "--probe-length", "300", "--model", str(tiny_gpt2_dir), "--json")
    assert result.exit_code == 0, result.output
    probe = json.loads(result.stdout)["probe"]
    assert probe["requested"] == 300 and probe["length"] < 300
    assert f"the probe is {probe['length']} tokens twice, not 300" in result.stderr
    shown = invoke("--probe", "induction", "--model", "toy")
    assert "toy (toy, 1 layer × 4 heads)" in shown.stdout  # one layer, not "1 layers"


def test_a_probe_on_a_model_without_positions_is_cut_and_says_why(monkeypatch):
    """The toy has no position limit: the probe stops at UNBOUNDED_PROBE_LENGTH (not drawn for ever), and the
    note says so rather than "toy has None positions"."""
    from attn_cli.analyses import heads

    monkeypatch.setattr(heads, "UNBOUNDED_PROBE_LENGTH", 12)
    result = invoke("--probe", "induction", "--probe-length", "40", "--model", "toy", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["probe"]["length"] == 12
    assert "the probe is 12 tokens twice, not 40: toy has no position limit, and 12 is the most then" in result.stderr


def test_interrupt_keeps_what_was_done(minilm):
    def stop_after_first_batch(done, total):
        if done >= 2:
            raise KeyboardInterrupt

    report = minilm.heads(
        ["one text.", "two texts.", "three texts.", "four."], batch_size=2, layers=0, progress=stop_after_first_batch
    )
    assert report.interrupted and report.texts == 2

    def interrupted_at_once():
        raise KeyboardInterrupt
        yield "never"

    with pytest.raises(KeyboardInterrupt):  # nothing done: nothing to report
        minilm.heads(interrupted_at_once())


def test_corpus_files_plain_and_jsonl(minilm, tmp_path):
    plain = tmp_path / "corpus.txt"
    plain.write_text("Hello there.\n\n  \nThe cat sat.\nA third line\n", encoding="utf-8")
    jsonl = tmp_path / "corpus.jsonl"
    jsonl.write_text('{"text": "Hello there."}\n{"text": "The cat sat.", "id": 2}\n\n', encoding="utf-8")
    assert minilm.heads(file=plain, layers=0).texts == 3
    assert minilm.heads(file=plain, layers=0, limit=2).texts == 2
    from_jsonl = minilm.heads(file=jsonl, layers=0, heads="2")
    from_list = minilm.heads(["Hello there.", "The cat sat."], layers=0, heads="2")
    assert from_jsonl.texts == 2 and from_jsonl.head(0, 2).scores == from_list.head(0, 2).scores
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n{"txt": "no"}\n', encoding="utf-8")
    from attn_cli.plumbing.errors import BadInput

    with pytest.raises(BadInput, match="bad.jsonl:2"):
        minilm.heads(file=bad)


def test_cli_reads_a_jsonl_corpus_from_stdin():
    result = runner.invoke(
        app,
        ["heads", "--file", "-", "--layer", "0", "--json"],
        input='{"text": "Hello there."}\n\n{"text": "The cat sat."}\n',
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert (document["texts"], document["source"]) == (2, "stdin")


def test_corpus_bytes_that_are_not_utf8_name_their_line(tmp_path):
    """A file or stdin with a bad byte: one usage error naming the line (never an internal error); a BOM and
    CRLF line ends are read."""
    corpus = tmp_path / "messy.txt"
    corpus.write_bytes(b"\xef\xbb\xbfHello there.\r\nThe cat sat.\r\nbad \xff\xfe here\n")
    result = invoke("--file", str(corpus), "--layer", "0", "--json")
    assert result.exit_code == 2 and "messy.txt:3 is not valid UTF-8: byte 0xff at offset 4" in result.stderr
    piped = runner.invoke(app, ["heads", "--file", "-", "--layer", "0"], input=b"ok line\n\xff bad\n")
    assert piped.exit_code == 2 and "stdin:2 is not valid UTF-8" in piped.stderr, piped.output
    corpus.write_bytes(b"\xef\xbb\xbfHello there.\r\nThe cat sat.\r\n")
    from attn_cli.plumbing.textio import read_corpus

    assert list(read_corpus(corpus)) == ["Hello there.", "The cat sat."]


# ---- the command


def invoke(*args: str):
    return runner.invoke(app, ["heads", *args], catch_exceptions=False)


def test_cli_json_document(tmp_path):
    result = invoke("Hello, how are you?", "The cat sat.", "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["schema_version"] == 1 and document["command"] == "heads"
    assert document["texts"] == 2 and len(document["heads"]) == 72
    head = document["heads"][2]
    assert set(head) >= {"layer", "head", "kv_head", "scores", "std", "label", "texts"}
    assert set(head["scores"]) == set(SCORES) == set(head["std"])
    assert (head["layer"], head["head"], head["label"]) == (0, 2, "previous_token")
    assert document["thresholds"] == {"label": 0.5, "broad": 0.85, "sink_epsilon": 0.3}


def test_cli_terminal_view_fits_80_columns(tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    corpus = tmp_path / "c.txt"
    corpus.write_text("Hello, how are you?\nThe cat sat on the mat.\nIt rains.\n", encoding="utf-8")
    svg = tmp_path / "heads.svg"
    result = invoke("--file", str(corpus), "--batch-size", "2", "--save", str(svg))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert lines[0].startswith("attn heads") and "3 texts" in lines[1]
    assert any(line.startswith("L5 ") for line in lines) and any("previous token" in line for line in lines)
    assert "P1.0" in next(line for line in lines if line.startswith("L0 ")) or "P.9" in result.stdout
    assert svg.exists() and "<svg" in svg.read_text(encoding="utf-8")[:200]


@pytest.mark.parametrize(
    "args, fragment",
    [
        ((), "no text given"),
        (("hello", "--probe", "induction"), "separate sources"),
        (("hello", "--batch-size", "0"), "--batch-size"),
        (("--file", "/no/such/file.txt"), "no such file"),
    ],
)
def test_cli_bad_usage_exits_2(args, fragment):
    result = invoke(*args)
    assert result.exit_code == 2 and fragment in result.stderr and "Traceback" not in result.output


def test_cli_ctrl_c_reports_the_texts_done(monkeypatch):
    import attn_cli.analyses.heads as engine

    real, calls = engine.score_batch, []

    def interrupted_on_the_second_batch(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(engine, "score_batch", interrupted_on_the_second_batch)
    result = invoke("one.", "two.", "three.", "--batch-size", "2", "--layer", "0", "--json")
    assert result.exit_code == 130
    document = json.loads(result.stdout)
    assert document["interrupted"] is True and document["texts"] == 2
    assert "interrupted" in result.stderr


def test_ctrl_c_at_the_edge_is_said_once(monkeypatch, capsys):
    """A real Ctrl-C (the signal handler's interrupt) in a corpus run: the partial report, one note, exit 130,
    and no "error: interrupted" after it from the edge."""
    import signal

    import attn_cli.analyses.heads as engine
    from attn_cli.cli.edge import run_at_the_edge
    from attn_cli.plumbing import interrupts

    real, calls = engine.score_batch, []

    def interrupted_on_the_second_batch(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise interrupts._interrupt(signal.SIGINT)  # what the handler raises on SIGINT
        return real(*args, **kwargs)

    monkeypatch.setattr(engine, "score_batch", interrupted_on_the_second_batch)
    monkeypatch.setattr(
        "sys.argv", ["attn", "heads", "one.", "two.", "three.", "--batch-size", "2", "--layer", "0", "--json"]
    )
    monkeypatch.setattr("attn_cli.launch.prepare_process", lambda: None)
    with pytest.raises(SystemExit) as exit_:
        run_at_the_edge(app)
    assert exit_.value.code == 130
    captured = capsys.readouterr()
    assert json.loads(captured.out)["texts"] == 2
    assert captured.err.count("interrupted") == 1 and "error:" not in captured.err, captured.err


def test_a_forward_that_never_reaches_a_selected_layer_is_a_clear_error(minilm_backend):
    from types import SimpleNamespace

    from attn_cli.analyses.heads import run_heads
    from attn_cli.data.selection import Selection
    from attn_cli.plumbing.errors import UnsupportedModel

    silent = SimpleNamespace(
        info=minilm_backend.info,
        device="cpu",
        dtype="float32",
        capture_padded=lambda texts, layers, sink, truncate=False, sinks=False: SimpleNamespace(
            tokens=[[]], truncated=0
        ),
    )  # runs, but hands no layer over
    with pytest.raises(UnsupportedModel, match="no attention call reached attn"):
        run_heads(silent, ["Hello."], Selection(layers="0"))


def test_the_forward_signature_is_read_once_per_backend_not_once_a_text(minilm_backend, monkeypatch):
    """inspect.signature(model.forward) was asked for every text of every batch (4 % of `attn heads`)."""
    import inspect

    from attn_cli.backends import hf

    calls, real = [], inspect.signature
    monkeypatch.setattr(hf.inspect, "signature", lambda function: calls.append(function) or real(function))
    for texts in (["One text.", "Two texts here."], ["A third one.", "And a fourth, longer text."]):
        minilm_backend.capture_batch(texts, [0])
    assert sum(function == minilm_backend.model.forward for function in calls) <= 1  # (transformers asks too)
