"""Every model type of the installed transformers' auto mappings, as a tiny random model, against its row of
tests/architectures.toml: exact to eager `output_attentions` (≤ 1e-5, float32) with the model's output
unchanged by the capture (≤ 1e-5), weights-only, or a one-line refusal whose reason the row gives.

A transformers release that adds a model type fails test_every_type_is_classified until the type has a row;
one that changes an architecture fails that type's test. tests/architectures_sweep.py says which types, how
each tiny model is built, and what each outcome asserts; `python tests/architectures_sweep.py --observe TYPE`
prints a type's row as attn runs it now.
"""

from __future__ import annotations

import pytest
from architectures_sweep import OUTCOMES, PAGE, TABLE, candidate_types, models_page, observe, read_table

ROWS = read_table()
TYPES = candidate_types()
HOW = (
    f"run `python tests/architectures_sweep.py --observe TYPE` and add or correct its row in {TABLE.name} "
    "(see the outcomes in tests/architectures_sweep.py), then `python tests/architectures_sweep.py --docs`"
)


def test_every_type_is_classified():
    """A model type the table does not know (a new transformers release) must be looked at, not guessed."""
    unknown = [kind for kind in TYPES if kind not in ROWS]
    assert not unknown, f"model types with no row in {TABLE.name}: {', '.join(unknown)}; {HOW}"
    gone = [kind for kind in ROWS if kind not in TYPES]
    assert not gone, f"rows of {TABLE.name} for types transformers no longer maps: {', '.join(gone)}; delete them"


def test_every_row_says_an_outcome_and_why():
    for kind, row in ROWS.items():
        assert row.get("outcome") in OUTCOMES, (kind, row)
        if row["outcome"] != "exact":
            assert row.get("reason", "").strip(), f"{kind}: a {row['outcome']} row says why"


@pytest.mark.parametrize("kind", TYPES)
def test_architecture(kind):
    row = ROWS.get(kind)
    if row is None:
        pytest.fail(f"{kind} has no row in {TABLE.name}; {HOW}")
    seen = observe(kind)
    expected = row["outcome"]
    assert seen.outcome == expected, (
        f"{kind}: {TABLE.name} says {expected!r} but attn is now {seen.outcome!r} ({seen.reason or 'no reason'}; "
        f"weights off by {seen.weights}, output changed by {seen.output}); {HOW}"
    )
    if expected in ("exact", "weights-only"):
        assert seen.weights is not None and seen.weights <= 1e-5
    if expected == "exact":
        assert seen.output is not None and seen.output <= 1e-5  # the capture changed nothing
    if expected in ("refused", "excluded", "crash", "unbuilt"):  # a wrong row's numbers say how wrong
        assert row["reason"] in seen.reason, f"{kind}: the refusal is now {seen.reason!r}; {HOW}"


def test_the_models_page_is_written_from_the_table():
    assert PAGE.read_text(encoding="utf-8") == models_page(ROWS), (
        f"{PAGE.relative_to(PAGE.parents[1])} is stale: run `python tests/architectures_sweep.py --docs`"
    )
