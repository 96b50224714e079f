"""A corpus for `attn heads --file`: text lines or JSONL (textio.read_corpus), Parquet or Arrow (Feather, IPC)
files or a directory of them, or a directory a `datasets` Dataset was saved to (save_to_disk).

`open_corpus` looks at the path once (format, column, type) so that a wrong corpus fails before a model
loads; its texts are read as they go (record batches of a columnar file, lines of a text file). A text's
text_id is its index in read order: files of a directory in name order, rows in file order; null and
blank values are not texts (as blank lines are not), so they take no index.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from attn_cli.plumbing.errors import BadInput
from attn_cli.plumbing.textio import check_corpus, count_texts, read_corpus

PARQUET = (".parquet", ".pq")
ARROW = (".arrow", ".feather", ".ipc")
DATASETS_MARKS = (
    "dataset_info.json",
    "state.json",
    "dataset_dict.json",
)  # what save_to_disk writes: a Dataset, a DatasetDict
ROWS_A_BATCH = 1024


@dataclass
class Corpus:
    format: str  # "lines", "jsonl", "parquet", "arrow", "datasets"
    read: Callable[[], Iterator[str]]
    counter: Callable[[], int | None]  # reads the input once more, so asked only when wanted

    def texts(self) -> Iterator[str]:
        return self.read()

    def count(self) -> int | None:
        """Texts in the corpus, when known without consuming it (None: stdin, a FIFO)."""
        return self.counter()


def open_corpus(path: Path | str, column: str = "text") -> Corpus:
    if str(path) == "-":
        return Corpus("lines", lambda: read_corpus(path), lambda: None)
    path = Path(path)
    try:
        directory = path.is_dir()
    except OSError as error:  # a name too long for the file system
        raise BadInput(f"--file {path}: {error.strerror}") from None
    if directory:
        if any((path / mark).is_file() for mark in DATASETS_MARKS):
            return _datasets(path, column)
        files = sorted(entry for entry in path.iterdir() if entry.suffix.lower() in PARQUET + ARROW)
        if not files:
            raise BadInput(
                f"--file {path} is a directory with no .parquet or .arrow files",
                "name a text, JSONL, Parquet or Arrow file, or a directory of Parquet or Arrow files",
            )
        return _columnar(files, column, "parquet" if all(f.suffix.lower() in PARQUET for f in files) else "arrow")
    suffix = path.suffix.lower()
    if suffix in PARQUET + ARROW:
        check_corpus(path)
        return _columnar([path], column, "parquet" if suffix in PARQUET else "arrow")
    check_corpus(path)
    kind = "jsonl" if suffix in (".jsonl", ".ndjson") else "lines"
    return Corpus(kind, lambda: read_corpus(path), lambda: count_texts(path))


def _columnar(files: list[Path], column: str, kind: str) -> Corpus:
    """Parquet and Arrow files: each opened now to check its column; counted from the column (nulls and
    blank strings are not texts)."""
    for file in files:
        _check_column(_schema(file), column, file)
    return Corpus(
        kind,
        lambda: (
            text
            for file in files
            for batch in _batches(file, column)
            for text in batch.to_pylist()
            if text is not None and text.strip()
        ),
        lambda: sum(_count(batch) for file in files for batch in _batches(file, column)),
    )


def _schema(file: Path):
    return _reader(file)[0]


def _reader(file: Path):
    """(schema, a function giving record batches of some columns) of a Parquet or Arrow file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if file.suffix.lower() in PARQUET:
        try:
            handle = pq.ParquetFile(file)
        except (pa.ArrowException, OSError) as error:
            raise BadInput(f"--file {file} is not a Parquet file ({_first_line(error)})") from None
        return handle.schema_arrow, lambda columns: handle.iter_batches(batch_size=ROWS_A_BATCH, columns=columns)
    for opener in (pa.ipc.open_file, pa.ipc.open_stream):  # Feather v2 and Arrow IPC files; IPC streams
        try:
            handle = opener(pa.memory_map(str(file)))
        except (pa.ArrowException, OSError):
            continue
        batches = (lambda h: lambda columns: (b.select(columns) for b in _record_batches(h)))(handle)
        return handle.schema, batches
    raise BadInput(f"--file {file} is not an Arrow file (Feather or IPC)")


def _record_batches(handle):
    if hasattr(handle, "num_record_batches"):
        return (handle.get_batch(index) for index in range(handle.num_record_batches))
    return iter(handle)


def _batches(file: Path, column: str):
    """The column's values, a record batch at a time (pyarrow arrays)."""
    _, batches = _reader(file)
    for batch in batches([column]):
        yield batch.column(0)


def _check_column(schema, column: str, file: Path) -> None:
    import pyarrow as pa

    if column not in schema.names:
        raise BadInput(
            f"--file {file} has no column {column!r} (its columns: {', '.join(schema.names)})",
            "name the text column with --column",
        )
    kind = schema.field(column).type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind)):
        raise BadInput(
            f"--file {file}: column {column!r} holds {kind}, not strings", "name a column of texts with --column"
        )


def _count(values) -> int:
    import pyarrow.compute as pc

    return int(pc.sum(pc.greater(pc.utf8_length(pc.utf8_trim_whitespace(values)), 0)).as_py() or 0)


def _datasets(path: Path, column: str) -> Corpus:
    try:
        import datasets
    except ImportError:
        raise BadInput(
            f"--file {path} is a datasets directory, and reading one needs the datasets package", "pip install datasets"
        ) from None
    try:
        loaded = datasets.load_from_disk(str(path))
    except Exception as error:  # its own errors: a corrupt or foreign folder
        raise BadInput(f"--file {path}: datasets cannot load it ({_first_line(error)})") from None
    if not hasattr(loaded, "features"):
        raise BadInput(
            f"--file {path} holds several splits ({', '.join(loaded)})",
            f"name one split's directory, e.g. {path / next(iter(loaded))}",
        )
    table = loaded.with_format("arrow")
    _check_column(
        table.features.arrow_schema if hasattr(table.features, "arrow_schema") else loaded.data.schema, column, path
    )

    def values():
        for start in range(0, len(table), ROWS_A_BATCH):
            yield table[start : start + ROWS_A_BATCH][column]

    return Corpus(
        "datasets",
        lambda: (text for chunk in values() for text in chunk.to_pylist() if text is not None and text.strip()),
        lambda: sum(_count(chunk) for chunk in values()),
    )


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__
