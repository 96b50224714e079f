"""Invariants of the attention math and analysis: distributions, masks, output = weights·V, symmetry."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from attn_cli.data.selection import parse_selection
from attn_cli.math import attention, measures, scoring
from attn_cli.plumbing.errors import AttnError, BadInput


@pytest.fixture
def qkv():
    generator = torch.Generator().manual_seed(0)
    return [torch.randn(4, 6, 8, generator=generator) for _ in range(3)]  # (H, T, D) each


def causal(t: int) -> torch.Tensor:
    return torch.ones(t, t, dtype=torch.bool).tril()


def test_rows_are_distributions(qkv):
    q, k, _ = qkv
    weights = attention.masked_softmax(scoring.scores(q, k, 8**-0.5), torch.ones(6, 6, dtype=torch.bool))
    assert (weights >= 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(4, 6), atol=1e-6, rtol=0)


def test_softmax_matches_torch_when_nothing_is_masked(qkv):
    q, k, _ = qkv
    scores = scoring.scores(q, k, 8**-0.5)
    expected = torch.softmax(scores, dim=-1)
    torch.testing.assert_close(attention.masked_softmax(scores, torch.ones(6, 6, dtype=torch.bool)), expected)


def test_masked_weights_are_exactly_zero_and_rows_still_sum_to_one(qkv):
    q, k, _ = qkv
    weights = attention.masked_softmax(scoring.scores(q, k, 1.0), causal(6))
    assert (weights.triu(1) == 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(4, 6), atol=1e-6, rtol=0)


def test_fully_masked_row_is_zeros_not_nan():
    allowed = torch.ones(3, 3, dtype=torch.bool)
    allowed[1] = False
    weights = attention.masked_softmax(torch.randn(3, 3), allowed)
    assert not weights.isnan().any()
    assert (weights[1] == 0).all()


def _filled(scores, allowed):
    """The definition: masked cells -inf, softmax, rows with no key 0."""
    weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    return weights.masked_fill(~allowed.any(-1, keepdim=True), 0.0)


@pytest.mark.parametrize("mask_shape", [(6, 6), (3, 1, 6, 6), (3, 4, 6, 6), (1, 6, 6)])
def test_masked_softmax_is_bit_identical_to_filling_masked_cells(mask_shape):
    """The mask goes in as a 0/-inf bias (broadcast over heads), rows with no key zeroed by index: the same bits
    as masked_fill(-inf) + softmax, for every broadcast shape a caller passes, padding rows included."""
    generator = torch.Generator().manual_seed(1)
    scores = torch.randn(3, 4, 6, 6, generator=generator) * 4
    allowed = torch.rand(mask_shape, generator=generator) > 0.4
    allowed[..., 2, :] = False  # a row with no key (padding)
    weights = attention.masked_softmax(scores, allowed)
    assert torch.equal(weights, _filled(scores, allowed))
    # a view that is not contiguous takes the broadcast fill: the same bits
    transposed = scores.transpose(-1, -2).contiguous().transpose(-1, -2)
    assert torch.equal(attention.masked_softmax(transposed, allowed), _filled(scores, allowed))


@pytest.mark.parametrize("bad", [float("inf"), float("nan"), float("-inf")])
def test_a_score_that_is_not_finite_is_ignored_where_masked_and_refused_where_allowed(bad):
    allowed = causal(4)
    scores = torch.randn(2, 4, 4)
    scores[1, 1, 3] = bad  # masked (a key after the query): its row is as if it were finite
    weights = attention.masked_softmax(scores, allowed)
    assert not weights.isnan().any()
    assert torch.equal(weights, _filled(scores, allowed))
    if bad == float("-inf"):  # an allowed -inf is weight 0, as a very low finite score would be
        scores[1, 3, 0] = bad
        assert attention.masked_softmax(scores, allowed)[1, 3, 0] == 0
        return
    scores[1, 3, 0] = bad  # allowed: the row would be NaN
    with pytest.raises(AttnError, match="overflowed"):
        attention.masked_softmax(scores, allowed)


def test_output_is_weights_times_values(qkv):
    q, k, v = qkv
    weights = attention.masked_softmax(scoring.scores(q, k, 0.5), causal(6))
    out = attention.attend(weights, v)
    manual = torch.stack([sum(weights[h, i, j] * v[h, j] for j in range(6)) for h in range(4) for i in range(6)])
    torch.testing.assert_close(out.reshape(24, 8), manual, atol=1e-5, rtol=0)


def test_expand_kv_groups_query_heads_in_order():
    kv = torch.arange(2.0).reshape(2, 1, 1).expand(2, 3, 4)  # kv head h filled with h
    expanded = attention.expand_kv(kv, heads=8)
    assert expanded.shape == (8, 3, 4)
    assert [int(expanded[h, 0, 0]) for h in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]


def symmetry(q, k, valid, scale=8**-0.5):
    """The product path: the dot-form accumulator over one block of all rows, for one head (T, D)."""
    accumulator = measures.SymmetryAccumulator(q[None], k[None], scale, valid)
    accumulator.add(0, q.shape[0])
    [result] = accumulator.result(1e-5)
    return result


def test_symmetry_is_zero_for_symmetric_scores_and_positive_otherwise(qkv):
    q, k, _ = qkv
    valid = torch.ones(6, dtype=torch.bool)
    report = symmetry(k[0], k[0], valid)  # Q := K, the shared-K case
    assert report.symmetric and report.relative <= 1e-6 and report.max_abs_diff <= 1e-5
    report = symmetry(q[0], k[0], valid)
    assert not report.symmetric and report.relative > 0.1
    general = scoring.scores(q[0], k[0], 8**-0.5)  # the definition, on the whole matrix
    expected = torch.linalg.matrix_norm(general - general.T) / torch.linalg.matrix_norm(general)
    assert report.relative == pytest.approx(float(expected), rel=1e-5)
    assert report.max_abs_diff == pytest.approx(float((general - general.T).abs().max()), rel=1e-5)


def test_symmetry_ignores_padding_tokens(qkv):
    q, k, _ = qkv
    q = q[0].clone()
    q[:4] = k[0][:4]  # symmetric among tokens 0-3, not with tokens 4-5
    valid = torch.tensor([True, True, True, True, False, False])
    assert symmetry(q, k[0], valid).symmetric
    assert not symmetry(q, k[0], torch.ones(6, dtype=torch.bool)).symmetric


def test_entropy_and_self_weight():
    uniform = torch.full((5, 5), 0.2)
    torch.testing.assert_close(measures.row_entropy(uniform), torch.full((5,), math.log(5)))
    one_hot = torch.eye(4)
    assert (measures.row_entropy(one_hot) == 0).all()
    assert measures.self_weight(one_hot).tolist() == [1.0] * 4


def test_top_keys_never_include_masked_positions():
    weights = attention.masked_softmax(torch.randn(4, 4), causal(4))
    rows = measures.top_keys(weights, causal(4), k=3)
    assert [len(row) for row in rows] == [1, 2, 3, 3]
    for i, row in enumerate(rows):
        assert all(index <= i for index, _ in row)
        assert [w for _, w in row] == sorted((w for _, w in row), reverse=True)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [("all", [0, 1, 2, 3, 4, 5]), ("3", [3]), ("0,2", [0, 2]), ("1-3", [1, 2, 3]), ("4, 0-1,1", [0, 1, 4])],
)
def test_parse_selection(spec, expected):
    assert parse_selection(spec, 6, "layer") == expected


@pytest.mark.parametrize("spec", ["6", "-1", "x", "3-1", "2-9", "1,,x"])
def test_parse_selection_rejects_with_valid_range(spec):
    with pytest.raises(BadInput) as error:
        parse_selection(spec, 6, "layer")
    assert "0-5" in str(error.value)


def test_json_never_holds_nan_and_masked_scores_are_null():
    from attn_cli.analyses.inspect_report import HeadReport, InspectReport, LayerReport
    from attn_cli.data.capture import ModelInfo, Token
    from attn_cli.data.selection import Window
    from attn_cli.math.measures import Symmetry

    array = lambda rows: np.array(rows, dtype=np.float32)  # noqa: E731
    head = HeadReport(
        0,
        0,
        0.5,
        Window.whole(2),
        array([[1.0, np.nan], [0.25, 0.123456789]]),
        array([[1.0, 0.0], [0.4, 0.6]]),
        Symmetry(0.1, 0.2, False),
        array([0.0, np.nan]),
        array([1.0, 0.6]),
        [[], []],
    )
    report = InspectReport(
        "a b",
        ModelInfo("m", "bert", 1, 1, 1, 2, True, 8),
        "cpu",
        "float32",
        [Token(0, "a", 1, False), Token(1, "b", 2, False)],
        [LayerReport(0, [head])],
        Window.whole(2),
    )
    text = json.dumps(report.to_json_dict(), allow_nan=False)  # raises on NaN
    record = json.loads(text)["layers"][0]["heads"][0]
    assert record["scores"][0][1] is None
    assert record["scores"][1][1] == 0.1234568  # 7 significant digits: float32 precision
    assert record["entropy"][1] is None


def test_top_keys_with_a_k_far_above_the_key_count_keep_every_key_and_no_more():
    """top_k = 10**21 (the API takes any positive int): every allowed key, heaviest first, and no padding to k."""
    import torch

    from attn_cli.math.measures import top_key_tensors

    weights = torch.tensor([[[0.2, 0.5, 0.3], [1.0, 0.0, 0.0]]])  # (1, 2, 3)
    allowed = torch.tensor([[True, True, True], [True, False, False]])
    top = top_key_tensors(weights, allowed, 10**21)
    assert top.indices.shape == (1, 2, 3)
    assert top.pairs() == [[[(1, 0.5), (2, 0.30000001192092896), (0, 0.20000000298023224)], [(0, 1.0)]]]
    block = top_key_tensors(weights[..., :2], allowed[:, :2], 10**21, keys=3)  # a block of 2 of the 3 keys
    assert block.indices.shape == (1, 2, 3)


def test_dense_symmetry_over_valid_pairs_is_the_definition():
    """S − Sᵀ and ‖S‖ from a whole S (float32 sums of squares) against the float64 definition: 1e-6 relative
    (float32 round-off of the differences and the sums); padding pairs count for nothing."""
    generator = torch.Generator().manual_seed(3)
    scores = torch.randn(3, 7, 7, generator=generator) * 4
    valid = torch.tensor([True, True, False, True, True, True, False])
    pair = valid[:, None] & valid[None, :]
    whole = torch.where(pair, scores.double(), 0.0)
    difference = whole - whole.transpose(-2, -1)
    expected = torch.linalg.matrix_norm(difference) / torch.linalg.matrix_norm(whole)
    padded = scores.clone()
    padded[:, ~valid] = 1e4  # a padding row and column hold anything: never read
    for got, relative, peak in zip(
        measures.dense_symmetry(padded, valid, 1e-5), expected, difference.abs().amax((-2, -1))
    ):
        assert got.relative == pytest.approx(float(relative), rel=1e-6)
        assert got.max_abs_diff == pytest.approx(float(peak), rel=1e-6)
        assert got.symmetric is False
    [same] = measures.dense_symmetry(scores[:1] + scores[:1].transpose(-2, -1), torch.ones(7, dtype=torch.bool), 1e-5)
    assert same.relative == 0.0 and same.max_abs_diff == 0.0 and same.symmetric  # S + Sᵀ is exactly symmetric


def test_entropy_of_rows_with_zeros_tiny_weights_and_nan_is_xlogys():
    """The guarded log against −Σ xlogy(w, w) in float64: 1e-6 absolute (float32 log and sum round-off);
    a weight of 0 adds exactly 0, one below float32's smallest normal number next to nothing."""
    generator = torch.Generator().manual_seed(4)
    weights = torch.softmax(torch.randn(5, 9, generator=generator) * 3, dim=-1)
    weights[1, :4] = 0.0
    weights[1] /= weights[1].sum()
    weights[2] = torch.tensor([1.0 - 2e-39] + [0.0] * 7 + [2e-39])  # a subnormal weight
    weights[3] = float("nan")
    expected = -torch.special.xlogy(weights.double(), weights.double()).sum(-1)
    got = measures.row_entropy(weights)
    torch.testing.assert_close(got[[0, 1, 2, 4]].double(), expected[[0, 1, 2, 4]], atol=1e-6, rtol=0)
    assert torch.isnan(got[3]) and 0.0 <= float(got[2]) < 1e-36
    assert measures.row_entropy(torch.eye(3, dtype=torch.float64)).tolist() == [0.0, 0.0, 0.0]


def test_head_variance_is_the_float64_variance_rounded_to_float32():
    """Each head's population variance over (T, D), exactly the float64 value rounded once, for a strided view
    (a captured q is (H, T, D) out of (T, H, D))."""
    generator = torch.Generator().manual_seed(5)
    x = (torch.randn(7, 3, 16, generator=generator) * 0.4 + 0.2).transpose(0, 1)  # (3, 7, 16), not contiguous
    got = measures.head_variance(x)
    assert got.dtype == torch.float32 and got.shape == (3,)
    assert torch.equal(got, x.double().var(dim=(-2, -1), unbiased=False).float())
