"""The `attn models` table: one row per model, its shape, and where it lives."""

from __future__ import annotations

from pathlib import Path

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.measure import Measurement
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from attn_cli.data.catalog import Catalog, CatalogEntry, Source


def render_models(catalog: Catalog) -> RenderableType:
    """The table, then where the Hugging Face cache is (and how to fill it when it is empty)."""
    return Group(
        Text("Models attn can run without a download", style="bold"), ModelsTable(catalog), cache_line(catalog)
    )


DESCRIPTION_MIN = 24  # narrower than this, each model's description goes on its own line


class ModelsTable:
    """A table when the width leaves room for the descriptions; else one line per model, its description below."""

    def __init__(self, catalog: Catalog):
        self.catalog = catalog

    def table(self) -> Table:
        table = Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
        table.add_column("name", style="bold", no_wrap=True)
        table.add_column("source", no_wrap=True)
        table.add_column("type", no_wrap=True)  # the config's model_type
        for column in ("layers", "heads", "kv", "head dim"):
            table.add_column(column, justify="right", no_wrap=True)
        table.add_column("path or description", min_width=DESCRIPTION_MIN)
        for entry in self.catalog.models:
            table.add_row(*model_cells(entry, self.catalog.cache_dir))
        return table

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        table = self.table()
        if Measurement.get(console, options.update_width(10_000), table).minimum <= options.max_width:
            yield table
            return
        for entry in self.catalog.models:
            name, source, architecture, layers, heads, kv, dim, where_ = model_cells(entry, self.catalog.cache_dir)
            name.stylize("bold")
            yield Text.assemble(
                name,
                " · ",
                source,
                " · ",
                architecture,
                " · ",
                layers,
                " layers × ",
                heads,
                " heads (kv ",
                kv,
                "), head dim ",
                dim,
            )
            yield Padding(where_, (0, 0, 0, 2))


def model_cells(entry: CatalogEntry, cache_dir: Path) -> list[Text]:
    """Cells as Text: names and paths are the user's data, never markup."""
    numbers = (entry.layers, entry.heads, entry.kv_heads, entry.head_dim)
    return [
        Text(entry.name),
        Text(entry.source.value, style="cyan" if entry.source is Source.builtin else "magenta"),
        Text(entry.architecture) if entry.architecture else missing(),
        *(Text(str(number)) if number is not None else missing() for number in numbers),
        where(entry, cache_dir),
    ]


def where(entry: CatalogEntry, cache_dir: Path) -> Text:
    """A built-in's description; for a cached model its revision (the full snapshot path is in --json),
    and what is wrong with it if anything is."""
    if entry.source is Source.builtin:
        return Text(entry.description or "")
    text = Text(short_location(Path(entry.path), cache_dir) if entry.path else "", style="dim")
    if entry.description:
        text.append(f"\n{entry.description}" if entry.path else entry.description, style="yellow")
    return text


def short_location(path: Path, cache_dir: Path) -> str:
    """'revision 0123456789ab' for a snapshot of this cache; the path relative to the cache, or whole, otherwise."""
    cache = cache_dir.expanduser().resolve()
    if path.parent.name == "snapshots" and path.parent.parent.parent == cache:
        return f"revision {path.name[:12]}"
    return str(path.relative_to(cache)) if path.is_relative_to(cache) else str(path)


def missing() -> Text:
    """A value config.json did not give."""
    return Text("—", style="dim")


def cache_line(catalog: Catalog) -> Text:
    cached = sum(entry.source is Source.hf_cache for entry in catalog.models)
    line = Text.assemble(("Hugging Face cache: ", "dim"), str(catalog.cache_dir))
    if cached == 0:
        line.append(" — no models cached yet; `hf download org/name` adds one", style="dim")
    else:
        line.append(" — each snapshot's full path is in --json", style="dim")
    return line
