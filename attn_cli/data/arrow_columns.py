"""Arrow columns built from their buffers, for the store's writer.

pyarrow.array() and Table.from_pylist ask, on their first call in a process, whether pandas is installed,
and import it to find out (about 0.4 s of CPU, a twentieth of a 1,000-text `attn heads --store` run).
Arrays made from buffers (numpy memory, UTF-8 bytes and offsets) never ask; the tables are the same
(Table.equals), and so are the Parquet files.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

_NUMPY = {pa.int32(): np.int32, pa.int64(): np.int64, pa.float32(): np.float32, pa.float64(): np.float64}


def numbers(values, type: pa.DataType, null: np.ndarray | None = None) -> pa.Array:
    """A fixed-width column (int32, int64, float32, float64 or bool) from values (n,); null (n,) bool marks
    the rows that are null (their values are kept but unread)."""
    if type == pa.bool_():
        values = np.asarray(values, dtype=bool)
        data = np.packbits(values, bitorder="little")
    else:
        values = np.ascontiguousarray(values, dtype=_NUMPY[type])
        data = values
    return pa.Array.from_buffers(
        type,
        len(values),
        [_validity(null), pa.py_buffer(data)],
        null_count=0 if null is None else int(np.count_nonzero(null)),
    )


def strings(items: Sequence[str | None]) -> pa.Array:
    """A string column; None is null."""
    pool, length, null = _encoded(items)
    offsets = np.zeros(len(length) + 1, dtype=np.int32)
    np.cumsum(length, out=offsets[1:])
    return _string_array(offsets, pool, null)


def picked(items: Sequence[str | None], index: np.ndarray) -> pa.Array:
    """strings(items).take(index): the strings at index (n,) into items, gathered in numpy. Array.take would
    import pyarrow.compute on its first call (about 0.15 s of CPU, for nothing else the writer needs)."""
    pool, length, null = _encoded(items)
    index = np.asarray(index, dtype=np.int64)
    sizes = length[index]  # (n,)
    offsets = np.zeros(len(index) + 1, dtype=np.int32)
    np.cumsum(sizes, out=offsets[1:])
    # each row's bytes: its item's first byte in the pool, then on; laid end to end (int32 where the pool and
    # the result both fit: half the memory traffic of the per-byte arrays)
    wide = np.int64 if max(len(pool), int(offsets[-1])) >= 1 << 31 else np.int32
    shift = ((np.cumsum(length) - length)[index] - offsets[:-1]).astype(wide)
    return _string_array(offsets, pool[np.repeat(shift, sizes) + np.arange(offsets[-1], dtype=wide)], null[index])


def _encoded(items: Sequence[str | None]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """items as UTF-8 laid end to end (uint8), each one's length in bytes (int64) and whether it is None."""
    # one string joined and encoded (UTF-8 of a concatenation is the concatenation of the encodings), each
    # item's length from its own encoding made and dropped in turn: never a bytes object per item held at once
    # (hundreds of thousands of tokens in a long run's examples table)
    texts = ["" if item is None else item for item in items]
    length = np.fromiter((len(text.encode("utf-8")) for text in texts), dtype=np.int64, count=len(texts))
    null = np.fromiter((item is None for item in items), dtype=bool, count=len(texts))
    return np.frombuffer("".join(texts).encode("utf-8"), dtype=np.uint8), length, null


def _string_array(offsets: np.ndarray, data: np.ndarray, null: np.ndarray) -> pa.Array:
    return pa.Array.from_buffers(
        pa.string(),
        len(offsets) - 1,
        [_validity(null if null.any() else None), pa.py_buffer(offsets), pa.py_buffer(data)],
        null_count=int(null.sum()),
    )


def lists(values: pa.Array, sizes: np.ndarray) -> pa.Array:
    """A list column from its rows' values laid end to end and each row's size (n,)."""
    offsets = np.zeros(len(sizes) + 1, dtype=np.int32)
    np.cumsum(sizes, out=offsets[1:])
    return pa.ListArray.from_arrays(numbers(offsets, pa.int32()), values)


def column(values: list, type: pa.DataType) -> pa.Array:
    """A column from Python values (None is null), of a type the store's tables use: a number, a bool, a
    string, or a list of one of these."""
    if pa.types.is_list(type):
        flat = [item for row in values for item in row]
        return lists(column(flat, type.value_type), np.array([len(row) for row in values], dtype=np.int64))
    if type == pa.string():
        return strings(values)
    null = np.array([value is None for value in values], dtype=bool)
    filled = [0 if value is None else value for value in values]
    return numbers(
        np.array(filled, dtype=bool if type == pa.bool_() else _NUMPY[type]), type, null if null.any() else None
    )


def from_rows(rows: list[dict], schema: pa.Schema) -> pa.Table:
    """Table.from_pylist(rows, schema=schema) without the pandas check."""
    return pa.Table.from_arrays(
        [column([row[field.name] for row in rows], field.type) for field in schema], schema=schema
    )


def _validity(null: np.ndarray | None) -> pa.Buffer | None:
    return None if null is None else pa.py_buffer(np.packbits(~np.asarray(null, dtype=bool), bitorder="little"))
