"""A registered HeadScore (data/registry.py) through `attn heads`' engine, in process: the same numbers however
the texts are batched and padded, one-line refusals for a score that breaks its contract, and the partials that
carry it (math/partials.py). tests/test_plugins.py runs the example plugin's score from the command line."""

from __future__ import annotations

import numpy as np
import pytest

from attn_cli.data import registry
from attn_cli.data.registry import HeadScore
from attn_cli.data.selection import Selection
from attn_cli.math import partials
from attn_cli.math.score_names import SCORES
from attn_cli.plumbing.errors import AttnError, BadInput

TEXTS = ["The cat sat on the mat.", "A dog ran.", "Birds fly south in the winter, every year."]


def first_weight(weights, allowed, tokens):
    """Each head's mean weight on key 0 over its rows: (h, T, T) -> (h,). For a bidirectional encoder this is
    the built-in first_token share (every row may attend key 0, and its share counts every row)."""
    assert weights.shape[-1] == weights.shape[-2] == allowed.shape[0] == len(tokens)  # cut to the text
    return weights[:, :, 0].mean(-1)


@pytest.fixture
def registered(monkeypatch):
    """Register scores for one test: registry.head_scores() as a plugin's hook would have filled it."""

    def register(*scores: HeadScore) -> None:
        monkeypatch.setattr(registry, "_head_scores", {score.name: score for score in scores})

    return register


def test_a_registered_score_is_computed_for_every_text_however_batched(registered, minilm_backend):
    """Batched 2 at a time the texts are padded to the longest: the score must see each text's own tokens only.
    It equals first_token (1e-6) and is the same with batches of 1 and of 3 (1e-6: padding moves float32
    weights by ~1e-7, as it does the built-in scores)."""
    from attn_cli.analyses.heads import run_heads

    registered(HeadScore("first_weight", first_weight, title="mean weight on key 0"))
    reports = {size: run_heads(minilm_backend, TEXTS, Selection(layers="0,5"), batch_size=size) for size in (1, 2, 3)}
    for profile in reports[2].heads:
        assert list(profile.scores)[: len(SCORES)] == list(SCORES) and list(profile.scores)[-1] == "first_weight"
        assert profile.scored["first_weight"] == len(TEXTS)
        assert abs(profile.scores["first_weight"] - profile.scores["first_token"]) <= 1e-6
        for size in (1, 3):
            other = reports[size].head(profile.layer, profile.head)
            assert abs(other.scores["first_weight"] - profile.scores["first_weight"]) <= 1e-6
            assert abs(other.std["first_weight"] - profile.std["first_weight"]) <= 1e-6
    assert reports[2].top("first_weight", 1)  # --score NAME / report.top take its name
    assert "first_weight" in reports[2].to_json_dict()["heads"][0]["scores"]


@pytest.mark.parametrize(
    ("compute", "words"),
    [
        (lambda weights, allowed, tokens: weights[:, 0, 0] * 0 + 2, r"gave 2, outside \[0, 1\]"),
        (lambda weights, allowed, tokens: weights[:, 0, :], "gave shape"),
        (lambda weights, allowed, tokens: tokens[999], "failed: IndexError: list index out of range"),
    ],
)
def test_a_score_outside_its_contract_is_refused_in_a_line(registered, compute, words):
    import attn_cli
    from attn_cli.analyses.heads import run_heads

    registered(HeadScore("broken", compute))
    with pytest.raises(AttnError, match=words) as refused:
        run_heads(attn_cli.load("toy").backend, ["the cat sat"], Selection())
    assert "'broken'" in str(refused.value) and "\n" not in str(refused.value)


def test_a_plugin_may_not_take_a_built_in_scores_name(monkeypatch):
    class Hook:
        @staticmethod
        def register_head_scores(register):
            register(HeadScore("sink", first_weight))

    class Manager:
        hook = Hook()

    monkeypatch.setattr(registry, "_head_scores", None)
    monkeypatch.setattr(registry, "plugin_manager", lambda: Manager())
    with pytest.raises(BadInput, match="'sink', which is taken"):
        registry.head_scores()


def test_partials_carry_their_score_count_and_refuse_to_merge_another():
    shape = (1, 2)
    batch = partials.Batch(
        text_ids=np.arange(2),
        tokens=[["a", "b"], ["c", "d"]],
        values=np.full((2, *shape, len(SCORES) + 1), 0.25),
        sink=np.full((2, *shape), -1),
        query=np.full((2, *shape), -1),
        edge_key=np.full((2, *shape), -1),
        edge_weight=np.full((2, *shape), np.nan),
        keys=np.full((2, *shape, partials.KEYS), -1),
        weights=np.zeros((2, *shape, partials.KEYS), dtype=np.float32),
    )
    part = partials.reduce(batch, shape, 3, 2)
    assert part.scores == len(SCORES) + 1 and part.count.shape == (*shape, len(SCORES) + 1)
    back = partials.from_state(*partials.to_state(part))
    assert back.scores == part.scores and (back.total == part.total).all()
    with pytest.raises(ValueError, match="do not merge"):
        partials.merge_all([part, partials.Partial(shape, 3, 2)], shape, 3, 2)
    assert partials.merge(partials.Partial(shape, 3, 2, scores=part.scores), part) is part
