"""Reports as pyarrow Tables in long format, for to_arrow() (and pandas and polars on top).

Matrices become one row per cell (query, key) with both tokens; per-head records become one row per head.
Values keep the report's precision (float32 matrices stay float32); NaN (a masked score, an undefined score)
becomes null, as in the JSON.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np


def cells(
    tokens: Sequence[str], heads: Iterable[tuple[dict, tuple[int, int], tuple[int, int], dict]], row: str = "query"
):
    """One row per cell of each head's matrices.

    heads: per head (labels, rows, cols, matrices): labels {column: value} the same on all its cells (text,
    layer, head, run, …), rows and cols the (start, stop) of the window the matrices cover, matrices
    {column: (stop - start, stop - start) array} (weight, score, …; None left out). Columns, in order: the
    labels, {row}, {row}_token, key, key_token, then the matrices. tokens: the text's tokens (the labels).
    """
    import pyarrow as pa

    names = np.asarray(list(tokens), dtype=object)
    columns: dict[str, list[np.ndarray]] = {}
    for labels, (r0, r1), (c0, c1), matrices in heads:
        count = (r1 - r0) * (c1 - c0)
        queries = np.repeat(np.arange(r0, r1), c1 - c0)  # row-major: (r0, c0), (r0, c0 + 1), …
        keys = np.tile(np.arange(c0, c1), r1 - r0)
        parts = {
            **{name: np.full(count, value, dtype=object) for name, value in labels.items()},
            row: queries,
            f"{row}_token": names[queries],
            "key": keys,
            "key_token": names[keys],
        }
        parts.update((name, np.asarray(matrix).reshape(-1)) for name, matrix in matrices.items() if matrix is not None)
        for name, values in parts.items():
            columns.setdefault(name, []).append(values)
    return pa.table({name: _array(np.concatenate(parts)) for name, parts in columns.items()})


def records(rows: list[dict], strings: Sequence[str] = ()):
    """One row per record (a head, a model): columns in the first record's order; NaN and None are null.

    A column that is null in every row is typed float64 (an undefined score), or string if named in strings."""
    import pyarrow as pa

    names = list(rows[0]) if rows else []
    columns = {}
    for name in names:
        values = [_plain(row[name]) for row in rows]
        blank = all(value is None for value in values)
        columns[name] = pa.array(values, type=(pa.string() if name in strings else pa.float64()) if blank else None)
    return pa.table(columns)


def _array(values: np.ndarray):
    import pyarrow as pa

    if values.dtype == object:  # labels and tokens: Python values (str, int)
        return pa.array(values.tolist())
    return pa.array(values, from_pandas=True)  # from_pandas: NaN → null


def _plain(value):
    """A record's value as pyarrow takes it: NaN → None, numpy scalars → Python."""
    if isinstance(value, np.generic):
        value = value.item()
    return None if isinstance(value, float) and value != value else value
