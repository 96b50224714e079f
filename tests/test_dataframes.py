"""Reports as tables: to_arrow() in long format, to_pandas() and to_polars() on top.

Every table is checked against the document `--json` prints for the same run: the same numbers to 1e-6
(relative for matrices, whose JSON keeps 7 significant digits; absolute for heads' scores, rounded there to
6 decimals), the same tokens, one row per cell or per head.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
from conftest import cli_json

from attn_cli.api import Model
from attn_cli.plumbing.errors import BadInput, MissingPackage

TEXT = "Hello, how are you?"
OTHER = "Hello, who are you?"


@pytest.fixture(scope="module")
def minilm(minilm_backend) -> Model:
    return Model(minilm_backend)


def json_matrix(rows) -> np.ndarray:
    return np.array([[np.nan if value is None else value for value in row] for row in rows], dtype=np.float64)


def frame_matrix(frame, column: str, rows: int, cols: int) -> np.ndarray:
    """A (rows, cols) matrix out of one head's long rows (they come row-major)."""
    return frame[column].to_numpy(dtype=np.float64, na_value=np.nan).reshape(rows, cols)


def assert_cells_equal_json(frame, document: dict, names: dict[str, str]) -> None:
    """Every head of the JSON document's layers against its rows of the frame; names: JSON field → column."""
    tokens = [token["text"] for token in document["tokens"]]
    count = len(tokens)
    heads = [(layer["layer"], head) for layer in document["layers"] for head in layer["heads"]]
    assert len(frame) == len(heads) * count * count
    assert frame["query_token"].tolist() == [tokens[i] for i in frame["query"]]
    assert frame["key_token"].tolist() == [tokens[j] for j in frame["key"]]
    for layer, head in heads:
        rows = frame[(frame["layer"] == layer) & (frame["head"] == head["head"])]
        assert rows["query"].tolist() == np.repeat(np.arange(count), count).tolist()
        for field, column in names.items():
            np.testing.assert_allclose(
                frame_matrix(rows, column, count, count), json_matrix(head[field]), rtol=1e-6, atol=0
            )


def test_inspect_to_pandas_round_trips_the_json(minilm):
    frame = minilm.inspect(TEXT).to_pandas()
    assert list(frame.columns) == [
        "text",
        "layer",
        "head",
        "query",
        "query_token",
        "key",
        "key_token",
        "weight",
        "score",
    ]
    assert set(frame["text"]) == {TEXT}
    assert_cells_equal_json(frame, cli_json("inspect", TEXT), {"weights": "weight", "scores": "score"})
    sums = frame.groupby(["layer", "head", "query"])["weight"].sum()
    np.testing.assert_allclose(sums, 1.0, atol=1e-5)


def test_the_measure_is_a_column(minilm):
    frame = minilm.inspect(TEXT, layers=0, measure="norm").to_pandas()
    assert list(frame.columns)[-3:] == ["weight", "score", "norm"]
    assert_cells_equal_json(
        frame,
        cli_json("inspect", TEXT, "--layer", "0", "--measure", "norm"),
        {"weights": "weight", "scores": "score", "norms": "norm"},
    )


def test_masked_scores_are_null_and_a_window_keeps_absolute_positions(tiny_gpt2_lm_dir):
    """A causal model: scores above the diagonal are masked (null, weight 0); --rows/--cols number the
    cells as in the whole matrix."""
    import attn_cli

    model = attn_cli.load(str(tiny_gpt2_lm_dir), device="cpu")
    frame = model.inspect("the cat sat on the mat", layers=0, heads=1).to_pandas()
    above = frame["key"] > frame["query"]
    assert frame.loc[above, "score"].isna().all() and (frame.loc[above, "weight"] == 0).all()
    assert frame.loc[~above, "score"].notna().all()
    window = model.inspect("the cat sat on the mat", layers=0, heads=1, rows="2:4", cols="1:3").to_pandas()
    assert sorted(set(window["query"])) == [2, 3] and sorted(set(window["key"])) == [1, 2]
    whole = frame.set_index(["query", "key"])["weight"]
    np.testing.assert_array_equal(window["weight"], whole.loc[list(zip(window["query"], window["key"]))])


def test_heads_to_pandas_is_one_row_per_head_with_every_score(minilm):
    from attn_cli.math.head_scores import SCORES

    texts = ["The cat sat on the mat.", "Hello, how are you?", "A dog, a cat, and a bird."]
    frame = minilm.heads(texts).to_pandas()
    document = cli_json("heads", *texts)
    assert len(frame) == len(document["heads"]) == 72
    for row, head in zip(frame.to_dict("records"), document["heads"]):
        assert (row["layer"], row["head"], row["kv_head"], row["label"]) == (
            head["layer"],
            head["head"],
            head["kv_head"],
            head["label"],
        )
        for name in SCORES:
            for column, field in ((name, "scores"), (f"{name}_std", "std")):
                expected = head[field][name]
                assert (row[column] != row[column]) if expected is None else abs(row[column] - expected) <= 1e-6
            assert row[f"{name}_scored"] == head["scored"][name]
        sink = head["sink_key"] or {"position": None, "token": None, "texts": None}
        assert (row["sink_token"], row["sink_texts"] if sink["texts"] is None else int(row["sink_texts"])) == (
            sink["token"],
            sink["texts"],
        )


def test_a_score_no_text_defines_is_a_float_column_of_nulls(minilm):
    """ "Hello there" has no punctuation: the punctuation score is undefined for every head, still a number column."""
    frame = minilm.heads(["Hello there"], layers=0).to_pandas()
    assert frame["punctuation"].isna().all() and frame["punctuation"].dtype == np.float64


def test_rollout_compare_and_diff_round_trip_the_json(minilm):
    from attn_cli.math.head_scores import SCORES

    rollout = minilm.rollout(TEXT).to_pandas()
    document = cli_json("rollout", TEXT)
    count = len(document["tokens"])
    np.testing.assert_allclose(
        frame_matrix(rollout, "rollout", count, count), json_matrix(document["rollout"]), rtol=1e-6, atol=0
    )

    compare = minilm.compare(TEXT, layers=0, heads="1-2").to_pandas()
    document = cli_json("compare", TEXT, "--layer", "0", "--head", "1-2")
    assert list(compare["run"].unique()) == list(document["runs"]) == ["baseline", "shared-k"]
    for name, run in document["runs"].items():
        assert_cells_equal_json(
            compare[compare["run"] == name],
            {**document, "layers": run["layers"]},
            {"weights": "weight", "scores": "score"},
        )

    diff = minilm.diff(TEXT, OTHER, layers=0).to_pandas()
    document = cli_json("diff", TEXT, OTHER, "--layer", "0")
    assert [(row["layer"], row["head"]) for row in diff.to_dict("records")] == [
        (head["layer"], head["head"]) for head in document["heads"]
    ]  # most changed first, as in the JSON
    assert len(diff.columns) == 2 + 2 * 3 + 2 + 2 + 2 * len(SCORES)  # no name taken twice (first_token is both)
    for row, head in zip(diff.to_dict("records"), document["heads"]):
        for column, values in [
            ("entropy", head["entropy"]),
            ("self_weight", head["self_weight"]),
            ("first_token", head["first_token"]),
            *[(f"score_{name}", head["scores"][name]) for name in SCORES],
        ]:
            for side in "ab":
                if values[side] is None:
                    assert row[f"{column}_{side}"] != row[f"{column}_{side}"]  # NaN: undefined for that text
                else:
                    assert abs(row[f"{column}_{side}"] - values[side]) <= 1e-6 * max(1, abs(values[side]))
        assert abs(row["js_divergence"] - head["js_divergence"]) <= 1e-6
        assert (row["label_a"], row["label_b"]) == (head["label"]["a"], head["label"]["b"])


def test_generate_is_one_row_per_generated_token_and_key(tiny_gpt2_lm_dir):
    import attn_cli

    report = attn_cli.load(str(tiny_gpt2_lm_dir), device="cpu").generate(
        "the cat", max_new_tokens=3, layers=1, heads="0-1"
    )
    frame = report.to_pandas()
    count, generated = len(report.tokens), len(report.tokens) - report.prompt_tokens
    assert list(frame.columns) == ["layer", "head", "generated", "generated_token", "key", "key_token", "weight"]
    assert len(frame) == 2 * generated * count
    first = frame[frame["head"] == 0]
    np.testing.assert_array_equal(frame_matrix(first, "weight", generated, count), report.head(1, 0).weights)
    assert first["generated"].min() == report.prompt_tokens  # rows are the generated tokens' positions
    assert first["generated_token"].iloc[-1] == report.tokens[-1].text


def test_polars_and_arrow_hold_the_same_rows(minilm):
    report = minilm.inspect(TEXT, layers=1, heads=3)
    table = report.to_arrow()
    polars = report.to_polars()
    assert polars.columns == table.column_names and polars.height == table.num_rows == 64
    assert str(polars.schema["weight"]) == "Float32"  # the report's float32, not widened
    np.testing.assert_array_equal(polars["weight"].to_numpy(), report.head(1, 3).weights.reshape(-1))


@pytest.mark.parametrize("method, package", [("to_pandas", "pandas"), ("to_polars", "polars")])
def test_a_missing_package_is_one_error_naming_it(minilm, monkeypatch, method, package):
    report = minilm.inspect(TEXT, layers=0, heads=0)
    monkeypatch.setitem(sys.modules, package, None)  # as if not installed: importing it fails
    with pytest.raises(MissingPackage) as caught:
        getattr(report, method)()
    assert str(caught.value) == (
        f"{method}() needs {package}, which is not installed; pip install {package} "
        "(or pip install 'attn-cli[notebook]')"
    )
    assert "\n" not in str(caught.value)


def test_reports_without_a_table_say_so(minilm):
    import attn_cli

    with pytest.raises(BadInput, match="StepsReport has no table form"):
        attn_cli.load("toy", heads=2, d_model=8).steps("I love you").to_arrow()
    with pytest.raises(BadInput, match="were not kept"):
        minilm.inspect(TEXT, cell_limit=10).to_arrow()
