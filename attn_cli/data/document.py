"""What every document attn writes has in common (no torch: `attn models` uses it too): its JSON text, its
table (to_arrow, and pandas and polars on top), and its inline display in a notebook."""

from __future__ import annotations

import importlib
import json
import math
from collections.abc import Callable, Iterable, Iterator

from attn_cli.plumbing.errors import BadInput, MissingPackage

SCHEMA_VERSION = 1  # bumped on any breaking change of a document's shape

# A report's notebook display (render/notebook.py: the --save html page in an <iframe>). Data cannot import
# render (the stages flow one way), so the package's door (attn_cli/__init__.py), which every import of attn_cli
# passes through, fills this slot; it stays None only if that door never ran.
html_display: Callable[[Document], str] | None = None


class Document:
    """A report the one JSON writer (render/files.write_json) can write: its text, in chunks.

    Small documents are one chunk of to_json_dict(); an inspect report streams layer by layer.
    """

    def to_json_dict(self) -> dict:
        raise NotImplementedError

    def json_chunks(self) -> Iterator[str]:
        yield dumps(self.to_json_dict())

    def to_arrow(self):
        """The report as one pyarrow Table in long format (docs/notebooks.md)."""
        raise BadInput(f"a {type(self).__name__} has no table form", "read report.to_json_dict() instead")

    def to_pandas(self):
        """to_arrow() as a pandas DataFrame (pandas is optional: pip install pandas)."""
        optional("pandas", "to_pandas()")
        return self.to_arrow().to_pandas()

    def to_polars(self):
        """to_arrow() as a polars DataFrame (polars is optional: pip install polars)."""
        return optional("polars", "to_polars()").from_arrow(self.to_arrow())

    def _repr_html_(self) -> str | None:
        """Jupyter's and VS Code's inline display: the same interactive page --save x.html writes."""
        return None if html_display is None else html_display(self)

    def summary(self) -> str:
        """One line: the report's kind, its model, what it was run on and its shape, e.g.
        `<attn InspectReport: minilm, 'The cat sat.', 6 tokens, 6 layers × 12 heads>`."""
        return f"<attn {type(self).__name__}: {', '.join(part for part in self.summary_parts() if part)}>"

    def summary_parts(self) -> list[str | None]:
        """The summary's parts: the model's name, the text, the shape (None or "": left out)."""
        text = getattr(self, "text", None)
        return [
            getattr(getattr(self, "model", None), "name", None),
            short(text) if isinstance(text, str) else None,
            self.summary_shape(),
        ]

    def summary_shape(self) -> str:
        """How much the report holds, in a few words (each report says what counts)."""
        return ""

    def __init_subclass__(cls, **kwargs):
        """Every report prints as its summary line: print(report), repr(report), a list of reports, and IPython's
        text/plain (what a notebook stores) — not as its dataclass repr, which writes out every matrix (hundreds of
        kB for one sentence). Set here, in the class's own __dict__, @dataclass leaves __repr__ alone (it only adds
        one a class does not define), and IPython reads _repr_pretty_ from a class's own __dict__ first."""
        super().__init_subclass__(**kwargs)
        cls.__repr__ = cls.__str__ = _summary
        cls._repr_pretty_ = _pretty


def _summary(report: Document) -> str:
    return report.summary()


SUMMARY_TEXT = 60  # characters of a report's text in its summary line


def short(text: str) -> str:
    """repr() of the text on one line: at most SUMMARY_TEXT characters of it, then an ellipsis."""
    return repr(text if len(text) <= SUMMARY_TEXT else text[: SUMMARY_TEXT - 1] + "…")


def counted(n: int, noun: str, *, grouped: bool = False) -> str:
    """'1 layer', '6 layers': a count and its noun, plural when it is not one; grouped: '1,000 texts'."""
    return (f"{n:,}" if grouped else f"{n}") + f" {noun}" + ("" if n == 1 else "s")


def _pretty(report: Document, printer, cycle: bool) -> None:
    printer.text(report.summary())


def optional(name: str, feature: str):
    """Import an optional package, or say in one line which one `feature` needs and how to install it."""
    try:
        return importlib.import_module(name)
    except ImportError:
        raise MissingPackage(
            f"{feature} needs {name}, which is not installed",
            f"pip install {name} (or pip install 'attn-cli[notebook]')",
        ) from None


def dumps(value) -> str:
    """Compact JSON, non-ASCII kept, NaN refused (masked values must already be null)."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False)


def object_chunks(header: dict, key: str, items: Iterable[Iterable[str]]) -> Iterator[str]:
    """A JSON object: the header's fields, then `key` as a list whose items arrive as text chunks."""
    yield dumps(header)[:-1] + f', "{key}": ['  # the header object, left open
    for index, chunks in enumerate(items):
        if index:
            yield ", "
        yield from chunks
    yield "]}"


# JSON numbers: every document rounds through num_json. FLOAT32 is the default (the weights' own precision);
# a document that prints fewer digits names its form beside its to_json_dict.
FLOAT32 = ".7g"  # 7 significant digits


def num_json(value: float | None, form: str = FLOAT32) -> float | None:
    """A number as a document holds it: formatted by `form` (".7g", ".6g", ".6f" …) and read back; None for a
    missing or non-finite value, so JSON never holds NaN. (".6f" is round(value, 6): both round the binary
    value correctly.)"""
    if value is None or not math.isfinite(value):
        return None
    return float(format(float(value), form))


def vector_json(values) -> list[float | None]:
    import numpy as np

    return [num_json(value) for value in np.asarray(values, dtype=np.float64).tolist()]


def matrix_json(rows) -> list[list[float | None]]:
    import numpy as np

    return [vector_json(row) for row in np.asarray(rows, dtype=np.float64)]


def matrix_text(rows) -> str:
    """A matrix as JSON text, as dumps(matrix_json(rows)) writes it but formatted straight to text (the slow
    part of big documents): 7 significant digits, null for masked or non-finite."""
    import numpy as np

    return (
        "["
        + ", ".join(
            "[" + ", ".join(f"{v:.7g}" if math.isfinite(v) else "null" for v in row) + "]"
            for row in np.asarray(rows, dtype=np.float64).tolist()
        )
        + "]"
    )
