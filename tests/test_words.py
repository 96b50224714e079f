"""--words: subword pieces merged into words (Clark et al. 2019), in the API, the JSON and every view.

Attention to a word is the sum over its pieces (key columns), attention from a word the mean over its
pieces (query rows), so rows still sum to 1; a word may attend a word when any of its pieces may attend
any of the other's. The merged numbers are checked against blocks written out by hand from the
token-level weights of the same run.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import isolate
from typer.testing import CliRunner

from attn_cli.cli import app
from attn_cli.data.capture import Token
from attn_cli.data.words import words_from_markers, words_from_tokenizer
from attn_cli.math.words import merge_mask, merge_weights

SPLIT = "unbelievably tokenization"  # MiniLM: [CLS] un ##bel ##ie ##va ##bly token ##ization [SEP]


@pytest.fixture(autouse=True)
def isolated_env(monkeypatch):
    isolate(monkeypatch, 120)


def attn(*args: str):
    return CliRunner().invoke(app, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def minilm(minilm_backend):
    from attn_cli.api import Model

    return Model(minilm_backend)


def tokens_of(*texts: str, special=()) -> list[Token]:
    return [Token(i, text, i, i in special) for i, text in enumerate(texts)]


# -- the pure merge --------------------------------------------------------------------------------


def test_merged_rows_sum_to_one_and_masked_cells_stay_zero():
    torch.manual_seed(0)
    count = 9
    causal = torch.ones(count, count).tril().bool()  # (T, T)
    scores = torch.randn(3, count, count).masked_fill(~causal, float("-inf"))
    weights = scores.softmax(-1)  # (3, T, T), 0 above the diagonal
    groups = [[0], [1, 2, 3], [4], [5, 6], [7, 8]]
    merged = merge_weights(weights, groups)  # (3, W, W)
    allowed = merge_mask(causal, groups)  # (W, W)
    assert merged.shape == (3, 5, 5)
    assert torch.allclose(merged.sum(-1), torch.ones(3, 5), atol=1e-6)
    # causal pieces make a causal word mask: a word sees itself and the words before it, never a later one
    assert torch.equal(allowed, torch.ones(5, 5).tril().bool())
    assert torch.equal(merged[:, ~allowed], torch.zeros_like(merged[:, ~allowed]))


def test_a_word_may_attend_another_when_any_piece_may():
    allowed = torch.zeros(4, 4, dtype=torch.bool)
    allowed[1, 2] = True  # one piece of word 0 may see one piece of word 1
    assert merge_mask(allowed, [[0, 1], [2, 3]]).tolist() == [[False, True], [False, False]]


# -- which tokens make which word ------------------------------------------------------------------


def test_words_from_the_tokenizer_split_on_whitespace_even_under_one_word_id():
    """A SentencePiece tokenizer that does not pre-split gives the whole text one word id: the offsets'
    whitespace still separates the words (pieces as a trained Metaspace BPE gave them)."""
    text = "Unbelievably, tokenization works"
    tokens = tokens_of("<s>", "▁Un", "bel", "iev", "ably", ",", "▁token", "ization", "▁works", special={0})
    offsets = [(0, 0), (0, 2), (2, 5), (5, 8), (8, 12), (12, 13), (13, 19), (19, 26), (26, 32)]
    words = words_from_tokenizer(tokens, [None, 0, 0, 0, 0, 0, 0, 0, 0], offsets, text)
    assert [(word.text, word.pieces) for word in words] == [
        ("<s>", (0,)),
        ("Unbelievably,", (1, 2, 3, 4, 5)),
        ("tokenization", (6, 7)),
        ("works", (8,)),
    ]
    assert words[0].special and not words[1].special


def test_cjk_ideographs_are_words_of_their_own_without_spaces():
    """As BERT's tokenizer makes them; a piece of two characters stays one word, and byte-level pieces of
    one character (the same offsets) are never split."""
    text = "我是一个男孩"
    tokens = tokens_of("▁我", "是", "一个", "<0xE7>", "<0x94>", "孩")
    offsets = [(0, 1), (1, 2), (2, 4), (4, 5), (4, 5), (5, 6)]
    words = words_from_tokenizer(tokens, [0] * 6, offsets, text)
    assert [(w.text, w.pieces) for w in words] == [
        ("我", (0,)),
        ("是", (1,)),
        ("一个", (2,)),
        ("男", (3, 4)),
        ("孩", (5,)),
    ]


def test_words_from_markers_when_the_tokenizer_gives_no_offsets():
    wordpiece = tokens_of("[CLS]", "un", "##bel", "##ievably", ",", "token", "##ization", "[SEP]", special={0, 7})
    assert [word.pieces for word in words_from_markers(wordpiece)] == [(0,), (1, 2, 3), (4,), (5, 6), (7,)]
    assert words_from_markers(wordpiece)[1].text == "unbelievably"
    byte_level = tokens_of("Un", "bel", "ievably", "Ġtoken", "ization")
    assert [(w.text, w.pieces) for w in words_from_markers(byte_level)] == [
        ("Unbelievably", (0, 1, 2)),
        ("tokenization", (3, 4)),
    ]


# -- MiniLM: WordPiece ----------------------------------------------------------------------------


def hand_merged(weights: np.ndarray, spans: list[slice]) -> np.ndarray:
    """expected[a, b] = mean over the pieces i of word a of the sum over the pieces j of word b of w[i, j]."""
    return np.array([[weights[rows, cols].sum(axis=1).mean() for cols in spans] for rows in spans])


def test_minilm_split_words_equal_the_hand_computation(minilm):
    tokens = minilm.inspect(SPLIT, layers=0, heads="0-3")
    words = minilm.inspect(SPLIT, layers=0, heads="0-3", words=True)
    assert [t.text for t in tokens.tokens] == [
        "[CLS]",
        "un",
        "##bel",
        "##ie",
        "##va",
        "##bly",
        "token",
        "##ization",
        "[SEP]",
    ]
    assert [(w.text, w.pieces) for w in words.words] == [
        ("[CLS]", (0,)),
        ("unbelievably", (1, 2, 3, 4, 5)),
        ("tokenization", (6, 7)),
        ("[SEP]", (8,)),
    ]
    assert words.tokens == tokens.tokens and words.axis == words.words
    spans = [slice(0, 1), slice(1, 6), slice(6, 8), slice(8, 9)]
    for (_, head), (_, merged) in zip(tokens.heads(), words.heads()):
        w = head.weights.astype(np.float64)
        # the 2×2 block of the two split words, written out: from a word = mean of rows, to a word = sum of columns
        block = np.array(
            [
                [w[1:6, 1:6].sum(1).mean(), w[1:6, 6:8].sum(1).mean()],
                [w[6:8, 1:6].sum(1).mean(), w[6:8, 6:8].sum(1).mean()],
            ]
        )
        np.testing.assert_allclose(merged.weights[1:3, 1:3], block, atol=1e-6)
        np.testing.assert_allclose(merged.weights, hand_merged(w, spans), atol=1e-6)
        np.testing.assert_allclose(merged.weights.sum(-1), 1.0, atol=1e-6)
        assert merged.scores is None and merged.allowed.all() and merged.merged
        # per-row statistics are of the word rows
        np.testing.assert_allclose(merged.self_weight, np.diag(merged.weights), atol=1e-7)
        assert [key.index for key in merged.top[1]] == list(np.argsort(-merged.weights[1], kind="stable")[:3])
        assert merged.top[1][0].token == words.words[merged.top[1][0].index].text
        assert merged.symmetry == head.symmetry  # a property of the token-level scores


def test_text_with_no_split_word_equals_the_token_view_exactly(minilm):
    tokens = minilm.inspect("the cat sat on the mat", layers="0,5")
    words = minilm.inspect("the cat sat on the mat", layers="0,5", words=True)
    assert [w.pieces for w in words.words] == [(i,) for i in range(len(tokens.tokens))]
    for (_, head), (_, merged) in zip(tokens.heads(), words.heads()):
        assert np.array_equal(merged.weights, head.weights)
        np.testing.assert_allclose(merged.entropy, head.entropy, atol=1e-6)
        assert np.array_equal(merged.self_weight, head.self_weight)
        assert [[k.index for k in row] for row in merged.top] == [[k.index for k in row] for row in head.top]


def test_json_reports_the_merge_and_leaves_scores_out():
    result = attn("inspect", SPLIT, "--words", "--layer", "0", "--head", "2", "--json")
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    assert len(document["tokens"]) == 9  # the model's tokens, unchanged
    assert document["words"][1] == {
        "index": 1,
        "text": "unbelievably",
        "special": False,
        "pieces": [1, 2, 3, 4, 5],
        "piece_texts": ["un", "##bel", "##ie", "##va", "##bly"],
    }
    assert "scores" in document["word_merge"] and document["word_merge"]["token_level"] == ["symmetry", "score_stats"]
    head = document["layers"][0]["heads"][0]
    assert "scores" not in head and len(head["weights"]) == 4 and len(head["weights"][0]) == 4
    assert head["allowed"] == [[True] * 4] * 4
    assert all(abs(sum(row) - 1) < 1e-5 for row in head["weights"])
    assert head["top"][2][0]["token"] in {"unbelievably", "tokenization", "[CLS]", "[SEP]"}
    assert "symmetry" in head and "score_stats" in head


# -- a causal byte-level BPE model -----------------------------------------------------------------


@pytest.fixture(scope="module")
def byte_level_gpt2(tmp_path_factory):
    """A tiny GPT-2 with a byte-level BPE tokenizer trained here on a few sentences ("Ġ" pieces)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import GPT2Config, GPT2Model, PreTrainedTokenizerFast

    corpus = [
        "the quick brown fox jumps over the lazy dog",
        "tokenization is unbelievably fun",
        "hello, how are you?",
    ] * 10
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.post_processor = processors.ByteLevel(trim_offsets=True)
    bpe.train_from_iterator(
        corpus,
        trainers.BpeTrainer(
            vocab_size=320, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|endoftext|>", bos_token="<|endoftext|>")
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_embd=32,
        n_layer=2,
        n_head=4,
        n_positions=64,
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    directory = tmp_path_factory.mktemp("tiny-gpt2-bpe")
    GPT2Model(config).eval().save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    from attn_cli.api import load

    return load(str(directory), device="cpu")


def test_a_tokenizer_without_a_pad_token_runs_one_text_and_a_batch(byte_level_gpt2):
    """GPT-2's tokenizer has no pad token: one text is not padded at all (asking the tokenizer to pad it
    failed), several are padded with its end-of-text token."""
    assert byte_level_gpt2.backend.tokenizer.pad_token is None
    assert len(byte_level_gpt2.inspect("hello there", layers=0).tokens) > 1
    assert len(byte_level_gpt2.inspect(["hello there", "how are you doing"], layers=0, words=True)) == 2


def test_byte_level_pieces_merge_under_a_causal_mask(byte_level_gpt2):
    text = "Unbelievably, tokenization works"
    tokens = byte_level_gpt2.inspect(text, layers="0-1")
    words = byte_level_gpt2.inspect(text, layers="0-1", words=True)
    pieces = [t.text for t in tokens.tokens]
    assert any(piece.startswith("Ġ") for piece in pieces) and len(pieces) > 4  # split into byte-level pieces
    assert [w.text for w in words.words] == ["Unbelievably", ",", "tokenization", "works"]
    for word in words.words:  # the "Ġ" piece opens each word after a space
        assert word.pieces == tuple(range(word.pieces[0], word.pieces[-1] + 1))
    assert "".join(pieces[p] for p in words.words[2].pieces).startswith("Ġ")
    spans = [slice(w.pieces[0], w.pieces[-1] + 1) for w in words.words]
    for (_, head), (_, merged) in zip(tokens.heads(), words.heads()):
        np.testing.assert_allclose(merged.weights, hand_merged(head.weights.astype(np.float64), spans), atol=1e-6)
        np.testing.assert_allclose(merged.weights.sum(-1), 1.0, atol=1e-6)
        causal = np.tril(np.ones((4, 4), dtype=bool))
        assert np.array_equal(merged.allowed, causal)  # a word sees itself and the words before it
        assert np.all(merged.weights[~causal] == 0)
        assert np.isnan(merged.masked(merged.weights)[0, 1])  # drawn blank in every view
        assert all(key.index <= row for row, keys in enumerate(merged.top) for key in keys)
        # a one-key row (the first, causal) has 0 nats, shown "0.00": never -0.0 nor a round-off below 0
        assert not np.signbit(merged.entropy).any() and not np.signbit(head.entropy).any()


# -- the command line ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--show", "scores"], "leaves scores out"),
        (["--rows", "0:2"], "--rows/--cols"),
        (["--measure", "norm"], "--measure norm"),
        (["--include", "qkv", "--json"], "q, k, v"),
    ],
)
def test_what_does_not_merge_is_refused_in_one_line(args, fragment):
    result = attn("inspect", SPLIT, "--words", "--layer", "0", "--head", "0", *args)
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], result.stderr


def test_terminal_view_draws_words_and_says_how(monkeypatch):
    result = attn("inspect", SPLIT, "--words", "--layer", "0", "--head", "2", "--show", "weights,top")
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert "4 words: 0:[CLS]  1:unbelievably  2:tokenization  3:[SEP]" in out
    assert "9 tokens merged into 4 words" in out and "weights = softmax(q·kᵀ·0.1768) · over words" in out
    assert "1 unbelievably" in out and "2 tokenization" in out  # the heatmap's and the table's rows
    assert "##bel" not in out.split("4 words:")[1]  # past the token list, only words


def test_default_view_grid_and_figures_are_over_words(tmp_path):
    svg, page = tmp_path / "w.svg", tmp_path / "w.html"
    result = attn("inspect", SPLIT, "--words", "--layer", "0", "--save", str(svg))
    assert result.exit_code == 0, result.stderr
    assert "Every head's weights" in result.stdout and "unbelievably" in result.stdout
    assert "unbelievably" in svg.read_text() and "##bel" not in svg.read_text()
    assert attn("inspect", SPLIT, "--words", "--layer", "0", "--save", str(page)).exit_code == 0
    html = page.read_text()
    assert '"tokens":["[CLS]","unbelievably","tokenization","[SEP]"]' in html


def test_toy_words_are_its_tokens():
    """The toy tokenizes into words already: --words changes nothing."""
    from attn_cli.api import load

    toy = load("toy")
    plain, words = toy.inspect("I love you"), toy.inspect("I love you", words=True)
    assert [w.text for w in words.words] == [t.text for t in plain.tokens]
    assert np.array_equal(words.head(0, 0).weights, plain.head(0, 0).weights)


def test_the_page_over_words_works_in_chromium(tmp_path, offline_page):
    """The HTML page of --words in headless Chromium, offline: the head view and the matrix are over words."""
    from test_browser import open_page

    page, requests, errors = offline_page  # skipped where Chromium is missing
    target = tmp_path / "words.html"
    assert (
        attn(
            "inspect",
            "The unbelievably long tokenization of transformers",
            "--words",
            "--layer",
            "0",
            "--save",
            str(target),
        ).exit_code
        == 0
    )
    open_page(page, target)
    assert requests == [] and errors == []
    assert page.locator("#current").text_content() == "layer 0 · head 2"
    assert page.locator("table.matrix td").count() == 64  # 8 × 8 words (13 tokens)
    page.locator("svg.headview .tok-left[data-i='2']").hover()  # 'unbelievably'
    info = page.locator("#info").text_content()
    assert "“unbelievably” (2) attends to unbelievably 0.80, The 0.20" in info, info
    assert errors == []


def test_the_table_over_words_names_words_not_tokens(minilm):
    """to_arrow() under --words: its query and key labels are the words its cells are over."""
    report = minilm.inspect(SPLIT, layers=0, heads=0, words=True)
    table = report.to_arrow().to_pylist()
    assert len(table) == len(report.words) ** 2
    names = [word.text for word in report.words]
    assert [row["key_token"] for row in table[: len(names)]] == names
    assert {row["query_token"] for row in table} == set(names)
    head = next(head for _, head in report.heads())
    assert [row["weight"] for row in table[: len(names)]] == pytest.approx(head.weights[0].tolist(), abs=1e-7)


def test_the_figure_is_as_wide_as_its_title(minilm):
    """A long title (here with "· over words") widens the SVG: it was cut at a fixed 600 px."""
    import re

    from attn_cli.render.figures import svg_figure
    from attn_cli.render.svg import text_width

    report = minilm.inspect("Unbelievably, tokenization works", layers=0, heads=2, words=True)
    svg = svg_figure(report)
    title = re.search(r'font-weight="bold"[^>]*>([^<]*over words)<', svg).group(1)
    width = float(re.search(r'<svg[^>]* width="([\d.]+)"', svg).group(1))
    assert width >= 10 + text_width(title.replace("&amp;", "&"), 16)


def test_the_tokenizer_words_are_grouped_only_when_words_are_asked_for(minilm, monkeypatch):
    """Grouping a 16k-token text into words costs ~0.2 s that only --words reads: a capture groups them when
    `words` is first read, once, and a run without --words never does."""
    import attn_cli.data.words as words_module

    calls = []
    grouping = words_module.words_from_tokenizer

    def counted(*args):
        calls.append(1)
        return grouping(*args)

    monkeypatch.setattr(words_module, "words_from_tokenizer", counted)
    minilm.inspect(SPLIT, layers="0", heads="0")
    assert calls == []
    capture = minilm.backend.capture_batch([SPLIT], [0])[0]
    assert calls == []
    assert [w.text for w in capture.words] == ["[CLS]", "unbelievably", "tokenization", "[SEP]"]
    assert [w.text for w in capture.words] == ["[CLS]", "unbelievably", "tokenization", "[SEP]"]
    assert calls == [1]
    assert minilm.inspect(SPLIT, layers="0", heads="0", words=True).words is not None
    assert len(calls) == 2
