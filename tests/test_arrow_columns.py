"""data/arrow_columns.py: the store's columns built from buffers equal pyarrow's own conversions, and a store
is written without importing pandas (pyarrow.array would import it to ask whether it is installed)."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
from conftest import patience

from attn_cli.data import arrow_columns as arrow
from attn_cli.data import store_schema as schema

ROOT = Path(__file__).resolve().parents[1]


def test_numbers_strings_and_lists_equal_pyarrow_arrays():
    values = np.array([3, -1, 7, 0])
    assert arrow.numbers(values, pa.int32(), values < 0).equals(pa.array(values, mask=values < 0, type=pa.int32()))
    floats = np.array([0.5, np.nan, 1.0])
    assert arrow.numbers(floats, pa.float64(), np.isnan(floats)).equals(pa.array(floats, from_pandas=True))
    kept = arrow.numbers(floats, pa.float64())  # without a null mask NaN stays a value (NaN != NaN in equals)
    assert kept.null_count == 0 and np.array_equal(kept.to_numpy(), floats, equal_nan=True)
    assert arrow.numbers([True, False, True], pa.bool_()).equals(pa.array([True, False, True]))
    words = ["a", None, "", "été", "水"]
    assert arrow.strings(words).equals(pa.array(words, type=pa.string()))
    index = np.array([4, 0, 3, 1, 3, 2, 4])  # repeats, None and multi-byte characters gathered
    assert arrow.picked(words, index).equals(pa.array(words, type=pa.string()).take(pa.array(index)))
    listed = arrow.lists(arrow.strings(["x", "y", "z"]), np.array([2, 0, 1]))
    assert listed.equals(pa.array([["x", "y"], [], ["z"]], type=pa.list_(pa.string())))


def test_from_rows_equals_from_pylist_on_the_stores_schemas():
    heads = [
        {field.name: None for field in schema.HEADS_SCHEMA}
        | {
            "layer": 0,
            "head": h,
            "kv_head": h,
            "score": "previous",
            "count": 3 - h,
            "hist": [h, 0, 2],
            "sink_texts": 0,
            "label": "mixed",
            "mean": None if h else 0.25,
            "q50": math.pi,
        }
        for h in range(3)
    ]
    run = [
        {field.name: None for field in schema.RUN_SCHEMA}
        | {"store_version": 1, "texts": 2**40, "complete": False, "scores": ["a", "bé"], "bins": 20, "model": "{}"}
    ]
    for rows, table_schema in (
        (heads, schema.HEADS_SCHEMA),
        (run, schema.RUN_SCHEMA),
        ([], schema.texts_schema(("a", "b"))),
    ):
        built = arrow.from_rows(rows, table_schema)
        assert built.equals(pa.Table.from_pylist(rows, schema=table_schema)) and built.schema == table_schema


def test_a_store_is_written_without_importing_pandas(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the cat sat on the mat\nthe dog ran after the cat\nI love you\n")
    script = (
        f"import sys, attn_cli; model = attn_cli.load('toy', heads=2, d_model=8); "
        f"model.heads(file={str(corpus)!r}, store={str(tmp_path / 'store')!r}, per_text=True, part_texts=2); "
        f"print(sorted(name for name in sys.modules if name.split('.')[0] == 'pandas'))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        timeout=patience(300),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"
    assert all((tmp_path / "store" / name).is_file() for name in (schema.EXAMPLES, schema.TEXTS))
