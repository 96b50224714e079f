"""Long inputs: statistics in row blocks equal the whole-matrix ones, and no T × T is ever built.

Tolerances: float32 block sums against one-block sums, 1e-5 relative.
"""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from attn_cli.analyses import inspect as inspect_engine
from attn_cli.api import Model
from attn_cli.data.selection import Window
from attn_cli.math import measures, scoring
from attn_cli.math.masks import AttentionMask

T, D = 300, 16


@pytest.fixture
def qkv():
    generator = torch.Generator().manual_seed(1)
    return [torch.randn(T, D, generator=generator) for _ in range(3)]


def scaled(rows, keys):
    return scoring.scores(rows, keys, 0.25)


def run_rows(q, k, v, mask, window=None, score=scaled):
    """One head (T, D) through the product's row blocks; window None: statistics only. Fields of that head."""
    rows = inspect_engine.analyse_rows(
        q[None],
        k[None],
        v[None],
        mask,
        score,
        top_k=4,
        tolerance=1e-5,
        window=window or Window.nothing(T),
        want_output=True,
        dot_scale=0.25,
    )
    one = lambda value: None if value is None else value[0]  # noqa: E731
    return inspect_engine.HeadRows(*(one(getattr(rows, name)) for name in inspect_engine.HeadRows.__dataclass_fields__))


def test_top_keys_of_blocks_narrower_than_k_are_those_of_the_whole_matrix(monkeypatch, qkv):
    """Causal blocks of 2 rows see 2, 4, … keys, fewer than k = 4 in the first: that block is filled up to k
    with entries that are never a key, and the concatenated blocks list exactly the whole matrix's top keys."""
    q, k, v = qkv
    mask = AttentionMask(T, T, causal=True)
    monkeypatch.setattr(inspect_engine, "CHUNK_CELLS", 2 * T)
    rows = run_rows(q, k, v, mask, Window.whole(T))
    assert rows.top.indices.shape == (T, 4)
    assert rows.top.pairs() == measures.top_keys(rows.weights, mask.full(), 4)
    assert [len(row) for row in rows.top.pairs()[:4]] == [1, 2, 3, 4]


@pytest.mark.parametrize(
    "mask",
    [
        AttentionMask(T, T, causal=False),
        AttentionMask(T, T, causal=True),
        AttentionMask(T, T, dense=torch.ones(T, T, dtype=torch.bool).tril() & (torch.arange(T) < 250)[None, :]),
    ],
    ids=["open", "causal", "dense-with-padding"],
)
def test_row_blocks_give_the_whole_matrix_statistics(monkeypatch, qkv, mask):
    q, k, v = qkv
    whole = run_rows(q, k, v, mask, Window.whole(T))  # one block: T² < CHUNK_CELLS
    monkeypatch.setattr(inspect_engine, "CHUNK_CELLS", 7 * T)  # 7 rows a block, 43 blocks
    blocks = run_rows(q, k, v, mask, Window.whole(T))
    for name in ("entropy", "self_weight", "output", "weights"):
        torch.testing.assert_close(getattr(blocks, name), getattr(whole, name), rtol=1e-5, atol=1e-6)
    assert [[i for i, _ in row] for row in blocks.top.pairs()] == [[i for i, _ in row] for row in whole.top.pairs()]
    assert blocks.symmetry.relative == pytest.approx(whole.symmetry.relative, rel=1e-5)
    assert blocks.symmetry.max_abs_diff == pytest.approx(whole.symmetry.max_abs_diff, rel=1e-5)
    valid = mask.valid_keys()  # the definition, on the whole matrix over valid pairs
    pair = valid[:, None] & valid[None, :]
    scores = torch.where(pair, scoring.scores(q, k, 0.25), torch.zeros(T, T))
    difference = scores - scores.T
    relative = torch.linalg.matrix_norm(difference) / torch.linalg.matrix_norm(scores)
    assert blocks.symmetry.relative == pytest.approx(float(relative), rel=1e-5)
    assert blocks.symmetry.max_abs_diff == pytest.approx(float(difference.abs().max()), rel=1e-5)


def test_symmetric_scores_stay_symmetric_in_blocks(monkeypatch, qkv):
    _, k, v = qkv
    monkeypatch.setattr(inspect_engine, "CHUNK_CELLS", 5 * T)
    rows = run_rows(k, k, v, AttentionMask(T, T, causal=True))  # Q := K
    assert rows.symmetry.symmetric and rows.symmetry.relative <= 1e-6


def test_no_block_is_larger_than_the_budget(monkeypatch, qkv):
    """The T × T never exists: every score block stays within CHUNK_CELLS."""
    q, k, v = qkv
    monkeypatch.setattr(inspect_engine, "CHUNK_CELLS", 10 * T)
    sizes = []

    def spy(rows, keys):
        result = scaled(rows, keys)
        sizes.append(result.numel())
        return result

    run_rows(q, k, v, AttentionMask(T, T, causal=True), score=spy)
    assert sizes and max(sizes) <= 10 * T


def test_window_is_the_slice_of_the_whole(qkv):
    q, k, v = qkv
    mask = AttentionMask(T, T, causal=True)
    whole = run_rows(q, k, v, mask, Window.whole(T))
    part = run_rows(q, k, v, mask, Window((100, 140), (90, 200), T))
    torch.testing.assert_close(part.weights, whole.weights[100:140, 90:200])
    assert torch.equal(part.scores.isnan(), whole.scores[100:140, 90:200].isnan())


def test_causal_rule_rows_match_the_dense_mask():
    rule = AttentionMask(6, 6, causal=True)
    assert torch.equal(rule.full(), torch.ones(6, 6, dtype=torch.bool).tril())
    assert torch.equal(rule.rows(2, 4), torch.ones(6, 6, dtype=torch.bool).tril()[2:4])
    assert rule.dense is None and rule.valid_keys().all()


@pytest.fixture(scope="module")
def llama(tiny_llama_dir):
    from attn_cli.backends.registry import load_backend

    return load_backend(str(tiny_llama_dir), device="cpu")


def test_past_the_limit_matrices_are_left_out_and_statistics_stay(llama):
    report = Model(llama).inspect(" ".join(["word"] * 200), layers="1", heads="0", cell_limit=10_000)
    assert report.matrices_left_out
    head = report.layers[0].heads[0]
    assert head.scores is None and head.weights is None
    assert len(head.entropy) == len(head.top) == 202
    document = report.to_json_dict()
    assert document["matrices_left_out"] is True and "weights" not in document["layers"][0]["heads"][0]
    full = Model(llama).inspect(" ".join(["word"] * 200), layers="1", heads="0", cell_limit=10_000, full=True)
    assert not full.matrices_left_out and len(full.layers[0].heads[0].weights) == 202
    assert full.layers[0].heads[0].entropy == pytest.approx(head.entropy, rel=1e-5)


def test_streamed_json_equals_the_whole_document(llama):
    import io

    from attn_cli.analyses.inspect_report import InspectBatch
    from attn_cli.render.files import write_json

    texts = ["a few words here", "and some more words"]
    whole = InspectBatch(Model(llama).inspect(texts, layers="0-1"), "right")
    lazy = InspectBatch(Model(llama).inspect(texts, layers="0-1", lazy=True), "right")
    assert not isinstance(lazy.reports[0].layers, list)  # analysed while written
    out = io.StringIO()
    write_json(lazy, out)
    assert json.loads(out.getvalue()) == json.loads(json.dumps(whole.to_json_dict()))


def cli(*args):
    from attn_cli.cli import app

    return CliRunner().invoke(app, list(args))


def test_cli_window_and_note(tiny_llama_dir):
    text = " ".join(["word"] * 200)
    result = cli(
        "inspect",
        text,
        "--model",
        str(tiny_llama_dir),
        "--layer",
        "1",
        "--head",
        "0",
        "--rows",
        "10:20",
        "--cols",
        ":30",
        "--json",
    )
    assert result.exit_code == 0, result.output
    head = json.loads(result.stdout)["layers"][0]["heads"][0]
    assert head["window"] == {"rows": [10, 20], "cols": [0, 30]}
    assert len(head["weights"]) == 10 and len(head["weights"][0]) == 30
    assert len(head["entropy"]) == 202  # statistics cover every row
    terminal = cli(
        "inspect",
        text,
        "--model",
        str(tiny_llama_dir),
        "--layer",
        "1",
        "--head",
        "0",
        "--rows",
        "10:20",
        "--cols",
        "5:25",
        "--show",
        "weights",
    )
    assert terminal.exit_code == 0 and "rows 10-19, keys 5-24" in terminal.stdout
    bad = cli("inspect", text, "--model", str(tiny_llama_dir), "--rows", "20:10")
    assert bad.exit_code == 2


def test_cli_save_tensors(tiny_llama_dir, tmp_path):
    from safetensors import safe_open

    target = tmp_path / "heads.safetensors"
    result = cli(
        "inspect",
        "the cat sat on the mat",
        "--model",
        str(tiny_llama_dir),
        "--layer",
        "1",
        "--head",
        "0,5",
        "--save-tensors",
        str(target),
        "--json",
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    with safe_open(str(target), framework="pt") as handle:
        names = set(handle.keys())
        assert {f"layers.1.heads.5.{name}" for name in ("q", "k", "v", "output", "scores", "weights")} <= names
        weights = handle.get_tensor("layers.1.heads.5.weights")
        metadata = handle.metadata()
    assert weights.shape == (8, 8)
    expected = torch.tensor(document["layers"][0]["heads"][1]["weights"])
    torch.testing.assert_close(weights, expected, atol=1e-6, rtol=1e-6)
    assert json.loads(metadata["tokens"])[1] == "the"
    assert json.loads(metadata["heads"])["layers.1.heads.5"]["kv_head"] == 1
    assert cli("inspect", "x", "--save-tensors", str(tmp_path / "x.npz")).exit_code == 2


def test_compare_refuses_past_the_limit_without_full(llama):
    from attn_cli.plumbing.errors import BadInput

    text = " ".join(["word"] * 100)
    with pytest.raises(BadInput, match="--full"):
        Model(llama).compare(text, layers="0", heads="0", cell_limit=1000)
    report = Model(llama).compare(text, layers="0", heads="0", cell_limit=1000, full=True)
    assert report.summaries["shared-k"].symmetric_heads == 1


def test_one_block_takes_symmetry_from_its_own_scores(monkeypatch, qkv):
    """When one block holds every row and key, S − Sᵀ comes from the scores already computed: no accumulator
    (and no second product) is made; over several blocks the accumulator is, with the same result (1e-5 rel)."""
    q, k, v = qkv
    mask = AttentionMask(T, T, causal=True)
    made = []
    accumulator = measures.SymmetryAccumulator
    monkeypatch.setattr(measures, "SymmetryAccumulator", lambda *args: made.append(1) or accumulator(*args))
    whole = run_rows(q, k, v, mask)
    assert made == []
    monkeypatch.setattr(inspect_engine, "CHUNK_CELLS", 7 * T)
    blocks = run_rows(q, k, v, mask)
    assert made == [1]
    assert whole.symmetry.relative == pytest.approx(blocks.symmetry.relative, rel=1e-5)
    assert whole.symmetry.max_abs_diff == pytest.approx(blocks.symmetry.max_abs_diff, rel=1e-5)


def test_a_token_is_written_as_dataclasses_asdict_writes_it():
    """Token.to_json replaced asdict's deep copy in every document's "tokens" (the same keys in the same order)."""
    import dataclasses

    from attn_cli.data.capture import Token

    for token in (Token(0, "[CLS]", 101, True), Token(3, "Ġthe\u2028", 262, False)):
        assert json.dumps(token.to_json()) == json.dumps(dataclasses.asdict(token))
