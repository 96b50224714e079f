"""Reading a corpus store (the tables of data/store_schema.py): `attn.open_store(DIR)` → a StoreReport.

A StoreReport IS the HeadsReport `attn heads --file` makes (same heads, `.head`, `.top`, `.to_json_dict()`),
read from DIR/heads.parquet with no model; it adds what the store keeps beyond means: per head and score
the distribution over texts (count, mean, std, min, max, quantiles, histogram) and, read on demand from
DIR/examples.parquet, the head's examples (top texts and decile samples per score, top edges).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from attn_cli.analyses.heads_report import DIGITS, HeadProfile, HeadsReport, SinkKey
from attn_cli.analyses.store_files import RUN_FILE, read_part_file, resume_command
from attn_cli.data import store_schema as schema
from attn_cli.data.capture import ModelInfo
from attn_cli.data.document import SCHEMA_VERSION, Document, num_json
from attn_cli.plumbing.errors import AttnError, BadInput

QUANTILES = ("q05", "q25", "q50", "q75", "q95")
KINDS = ("top", "decile", "edge")
WRITE_HINT = "a store is written by attn heads --file CORPUS --store DIR"


@dataclass(frozen=True)
class Distribution:
    """One score of one head over the texts that define it."""

    count: int  # texts where the score is defined
    mean: float | None  # None where count is 0 (and so for std … quantiles)
    std: float | None  # population standard deviation
    min: float | None
    max: float | None
    quantiles: dict[str, float | None]  # QUANTILES → value (read off the histogram by the writer)
    hist: tuple[int, ...]  # schema.BINS counts of texts over [0, 1], equal width

    def to_json_dict(self) -> dict:
        return {
            "count": self.count,
            "mean": num_json(self.mean, DIGITS),
            "std": num_json(self.std, DIGITS),
            "min": num_json(self.min, DIGITS),
            "max": num_json(self.max, DIGITS),
            **{name: num_json(value, DIGITS) for name, value in self.quantiles.items()},
            "hist": list(self.hist),
        }


@dataclass(frozen=True)
class Example:
    """A window of one text with a query token and its most attended keys (positions in the whole text)."""

    kind: str  # "top" | "decile" | "edge"
    score: str | None  # the score it is an example of; None for an edge
    decile: int | None  # 0 (lowest tenth) … 9 for a decile sample
    rank: int  # 0-based within its (kind, score, decile)
    text_id: int  # the text's 0-based index in the corpus
    value: float  # the text's score, or the edge's weight
    length: int  # tokens in the whole text
    window_start: int  # position of tokens[0] in the text
    tokens: tuple[str, ...]
    query: int
    keys: tuple[int, ...]  # strongest first; for an edge, its key first
    weights: tuple[float, ...]  # same order as keys

    def token(self, position: int) -> str:
        return self.tokens[position - self.window_start]

    def weight_on(self, position: int) -> float | None:
        """The query's weight on a key of the window, where the store kept it (its strongest keys only)."""
        return dict(zip(self.keys, self.weights)).get(position)

    def to_json_dict(self) -> dict:
        document = {
            "text_id": self.text_id,
            "value": num_json(self.value, DIGITS),
            "rank": self.rank,
            "length": self.length,
            "window_start": self.window_start,
            "tokens": list(self.tokens),
            "query": self.query,
            "keys": list(self.keys),
            "weights": [num_json(weight, DIGITS) for weight in self.weights],
        }
        if self.decile is not None:
            document["decile"] = self.decile
        return document


@dataclass
class HeadExamples:
    """One head's examples: per score its top texts and decile samples (lowest decile first), its top edges."""

    top: dict[str, list[Example]] = field(default_factory=dict)
    decile: dict[str, list[Example]] = field(default_factory=dict)
    edge: list[Example] = field(default_factory=list)


@dataclass
class StoreReport(HeadsReport):
    """A HeadsReport read from a store, plus each head's distributions and examples."""

    path: str = ""
    complete: bool = True  # False: the run stopped early (`--resume` completes it)
    parts: int = 0
    run: dict = field(default_factory=dict)  # the run table's row as written (options and thresholds parsed)
    distributions: dict = field(default_factory=dict)  # (layer, head) → {score: Distribution}
    _examples: dict = field(default_factory=dict, repr=False)  # (layer, head) → HeadExamples, read on demand

    @property
    def scores_named(self) -> tuple[str, ...]:
        return tuple(self.run["scores"])

    def distribution(self, layer: int, head: int, score: str) -> Distribution:
        self.head(layer, head)  # a head not in the store: BadInput naming it
        return self.distributions[layer, head][self.check_score(score)]

    def check_score(self, score: str) -> str:
        """The store's name of `score`, also given as the views print it (duplicate for duplicate_token)."""
        from attn_cli.math.score_names import SHORT_NAMES, canonical_score

        named = canonical_score(score)
        if named not in self.scores_named:
            names = [f"{name} ({SHORT_NAMES[name]})" if name in SHORT_NAMES else name for name in self.scores_named]
            raise BadInput(f"no score named {score!r}", f"scores: {', '.join(names)}")
        return named

    def examples(self, layer: int, head: int) -> HeadExamples:
        """The head's examples, read from examples.parquet the first time they are asked for."""
        self.head(layer, head)
        if (layer, head) not in self._examples:
            table = _read(
                Path(self.path),
                schema.EXAMPLES,
                schema.EXAMPLES_SCHEMA,
                filters=[("layer", "==", layer), ("head", "==", head)],
            )
            self._examples[layer, head] = group_examples(table.to_pylist())[layer, head]
        return self._examples[layer, head]

    def all_examples(self, top: int, per_decile: int = 1) -> dict[tuple[int, int], HeadExamples]:
        """Every head's examples at once (the dashboard page): `top` top texts per score and top edges,
        `per_decile` samples of each decile. One read of the table, cut before rows become Python objects."""
        import pyarrow.compute as pc

        table = _read(Path(self.path), schema.EXAMPLES, schema.EXAMPLES_SCHEMA)
        kept = pc.if_else(
            pc.equal(table["kind"], "decile"), pc.less(table["rank"], per_decile), pc.less(table["rank"], top)
        )
        grouped = group_examples(table.filter(kept).to_pylist())
        return {(p.layer, p.head): grouped.get((p.layer, p.head), HeadExamples()) for p in self.heads}

    def per_text(self, columns: list[str] | None = None):
        """texts.parquet as a pyarrow Table: one row per (text, layer, head) with every score (`--per-text`
        stores only). columns: the ones to read (all by default). .to_pandas() or polars.from_arrow() it."""
        wanted = schema.texts_schema(self.scores_named)
        if not (Path(self.path) / schema.TEXTS).exists():
            raise BadInput(
                f"{self.path} has no per-text scores ({schema.TEXTS})",
                "write the store with attn heads --file CORPUS --store DIR --per-text",
            )
        if columns is not None:
            unknown = [name for name in columns if name not in wanted.names]
            if unknown:
                raise BadInput(f"no column {unknown[0]!r} in {schema.TEXTS}", f"columns: {', '.join(wanted.names)}")
            wanted = _subset(wanted, columns)
        return _read(Path(self.path), schema.TEXTS, wanted)

    def default_score(self, layer: int, head: int) -> str:
        """The score a head's examples are shown for: its label, or for a mixed head its highest mean."""
        profile = self.head(layer, head)
        if profile.label in self.scores_named:
            return profile.label
        defined = [(value, name) for name, value in profile.scores.items() if value is not None]
        return max(defined)[1] if defined else self.scores_named[0]

    def incomplete_note(self) -> str | None:
        if self.complete:
            return None
        return (
            f"note: {self.path} is incomplete: it covers {self.texts:,} texts ({self.parts} parts); "
            f"{stored_resume(Path(self.path)) or f'attn heads --file {self.source} --store {self.path} --resume'} "
            "completes it"
        )

    def dashboard(self, layer: int, head: int, score: str | None = None, top: int = 5) -> HeadDashboard:
        score = self.check_score(score) if score is not None else self.default_score(layer, head)
        return HeadDashboard(self, self.head(layer, head), score, top)


@dataclass
class HeadDashboard(Document):
    """One head from a store: its distributions and its examples for one score (`attn heads show --head`)."""

    store: StoreReport
    profile: HeadProfile
    score: str  # the score whose top texts and decile samples are shown
    top: int  # top texts and edges shown

    def summary_parts(self) -> list[str | None]:
        return [self.store.model.name, self.store.path, f"head {self.profile.layer}.{self.profile.head}, {self.score}"]

    @property
    def examples(self) -> HeadExamples:
        return self.store.examples(self.profile.layer, self.profile.head)

    def to_json_dict(self) -> dict:
        store, profile, examples = self.store, self.profile, self.examples
        return {
            "schema_version": SCHEMA_VERSION,
            "command": "heads show",
            "store": store.path,
            "model": store.model.name,
            "texts": store.texts,
            "complete": store.complete,
            "layer": profile.layer,
            "head": profile.head,
            "kv_head": profile.kv_head,
            "label": profile.label,
            "sink_key": None if profile.sink_key is None else vars(profile.sink_key),
            "scores": {
                name: store.distributions[profile.layer, profile.head][name].to_json_dict()
                for name in store.scores_named
            },
            "examples": {
                "score": self.score,
                "top": [e.to_json_dict() for e in examples.top.get(self.score, [])[: self.top]],
                "decile": [e.to_json_dict() for e in examples.decile.get(self.score, [])],
                "edge": [e.to_json_dict() for e in examples.edge[: self.top]],
            },
        }


def group_examples(rows: list[dict]) -> dict[tuple[int, int], HeadExamples]:
    """examples.parquet rows → per (layer, head) its HeadExamples, each list in rank order."""
    rows = sorted(rows, key=lambda r: (r["layer"], r["head"], r["kind"], r["score"] or "", r["decile"] or 0, r["rank"]))
    grouped: dict[tuple[int, int], HeadExamples] = {}
    for row in rows:
        found = grouped.setdefault((row["layer"], row["head"]), HeadExamples())
        example = Example(
            kind=row["kind"],
            score=row["score"],
            decile=row["decile"],
            rank=row["rank"],
            text_id=row["text_id"],
            value=row["value"],
            length=row["length"],
            window_start=row["window_start"],
            tokens=tuple(row["tokens"]),
            query=row["query"],
            keys=tuple(row["keys"]),
            weights=tuple(row["weights"]),
        )
        if row["kind"] == "edge":
            found.edge.append(example)
        elif row["kind"] in ("top", "decile"):
            getattr(found, row["kind"]).setdefault(row["score"], []).append(example)
    return grouped


# -- opening a store ----------------------------------------------------------------------------------


def open_store(directory) -> StoreReport:
    """The store in `directory` as a StoreReport; one clear error if it is not a store attn can read.

    Not a directory, or no run.parquet: BadInput. A store newer than this attn (store_version), or a
    missing or unreadable table: AttnError. An incomplete store (the run stopped early) opens:
    report.complete is False and report.incomplete_note() says how to complete it.
    """
    path = Path(directory)
    if not path.exists():
        raise BadInput(f"{path}: no such store directory", WRITE_HINT)
    if not path.is_dir():
        raise BadInput(f"{path} is not a store: a store is a directory", WRITE_HINT)
    if not (path / schema.RUN).exists():
        if (path / schema.PARTS / RUN_FILE).is_file():  # stopped before its first part was complete
            raise _incomplete(path, "it stopped before its first part was written")
        raise BadInput(f"{path} is not an attn store: it has no {schema.RUN}", WRITE_HINT)
    run = _read(path, schema.RUN, schema.RUN_SCHEMA).to_pylist()
    if len(run) != 1:
        raise AttnError(f"{path / schema.RUN} has {len(run)} rows, not one", _damaged(path))
    run = run[0]
    version = run["store_version"]
    if version is None or version > schema.STORE_VERSION:
        from attn_cli import __version__

        raise AttnError(
            f"{path} is a version {version} store, newer than attn {__version__} reads "
            f"(version {schema.STORE_VERSION})",
            "upgrade attn to read it",
        )
    if not (path / schema.HEADS).exists():
        raise AttnError(f"{path} has no {schema.HEADS}", _damaged(path))
    if not (path / schema.EXAMPLES).exists():
        if not run["complete"]:  # examples are written at most once a minute: a run stopped before the first
            raise _incomplete(path, f"it stopped before its examples ({schema.EXAMPLES}) were written")
        raise AttnError(f"{path} has no {schema.EXAMPLES}", _damaged(path))
    _columns(path, schema.EXAMPLES, schema.EXAMPLES_SCHEMA)  # fail now, not when a head is first asked for
    rows = _read(path, schema.HEADS, schema.HEADS_SCHEMA).to_pylist()
    try:
        run["options"] = json.loads(run["options"] or "{}")
        thresholds = json.loads(run["thresholds"])
        model = ModelInfo(**json.loads(run["model"]))
    except (TypeError, ValueError) as error:
        raise AttnError(f"{path / schema.RUN} holds a value attn cannot read ({error})", _damaged(path)) from None
    profiles, distributions = _profiles(rows, tuple(run["scores"]), model, path)
    probe = run["options"].get("probe")  # the --probe description, as `attn heads --probe --json` gives it
    return StoreReport(
        model=model,
        device=run["device"],
        dtype=run["dtype"],
        texts=run["texts"],
        tokens=run["tokens"],
        heads=profiles,
        source=run["corpus"],
        truncated=run["truncated"] or 0,
        thresholds=thresholds,
        probe=probe if isinstance(probe, dict) else None,
        path=str(path),
        complete=bool(run["complete"]),
        parts=run["parts"],
        run=run,
        distributions=distributions,
    )


def _profiles(rows: list[dict], scores: tuple[str, ...], model: ModelInfo, path: Path):
    """heads.parquet rows (one per head and score) → HeadProfiles in (layer, head) order, and distributions."""
    by_head: dict[tuple[int, int], dict[str, dict]] = {}
    for row in rows:
        by_head.setdefault((row["layer"], row["head"]), {})[row["score"]] = row
    profiles, distributions = [], {}
    for (layer, head), named in sorted(by_head.items()):
        missing = [name for name in scores if name not in named]
        if missing:
            raise AttnError(f"{path / schema.HEADS} has no {missing[0]} row for head {layer}.{head}", _damaged(path))
        first = named[scores[0]]
        sink = (
            None
            if first["sink_position"] is None
            else SinkKey(first["sink_position"], first["sink_token"], first["sink_texts"])
        )
        profiles.append(
            HeadProfile(
                layer=layer,
                head=head,
                kv_head=first["kv_head"],
                scores={name: named[name]["mean"] for name in scores},
                std={name: named[name]["std"] for name in scores},
                scored={name: named[name]["count"] for name in scores},
                label=first["label"],
                sink_key=sink,
            )
        )
        distributions[layer, head] = {name: _distribution(named[name]) for name in scores}
    if not profiles:
        raise AttnError(f"{path / schema.HEADS} has no heads", _damaged(path))
    return profiles, distributions


def _subset(wanted, columns: list[str]):
    import pyarrow as pa

    return pa.schema([wanted.field(name) for name in columns])


def _distribution(row: dict) -> Distribution:
    return Distribution(
        count=row["count"],
        mean=row["mean"],
        std=row["std"],
        min=row["min"],
        max=row["max"],
        quantiles={name: row[name] for name in QUANTILES},
        hist=tuple(row["hist"] or ()),
    )


def stored_resume(path: Path) -> str | None:
    """The `attn heads … --resume` line of the store's parts/run.json (None where it cannot be read)."""
    try:
        return resume_command(read_part_file(path / schema.PARTS / RUN_FILE, ""), path)
    except AttnError:
        return None


def _incomplete(path: Path, why: str) -> AttnError:
    command = stored_resume(path)
    hint = (
        f"complete it with: {command}"
        if command
        else f"run the command that wrote it again with --store {path} --resume"
    )
    return AttnError(f"{path} is incomplete: {why}", hint)


def _damaged(path: Path) -> str:
    return (
        f"the store is damaged or was not written to the end: write it again (attn heads --file CORPUS --store {path})"
    )


def _columns(path: Path, name: str, wanted) -> None:
    """Fail when a table is unreadable or lacks a column the contract names."""
    import pyarrow.parquet as pq

    try:
        found = pq.read_schema(path / name)
    except (OSError, ValueError) as error:  # pyarrow's ArrowInvalid is a ValueError; ArrowIOError an OSError
        raise AttnError(
            f"{path / name} is not a readable Parquet table ({_first_line(error)})", _damaged(path)
        ) from None
    missing = [column for column in wanted.names if column not in found.names]
    if missing:
        raise AttnError(f"{path / name} has no column {missing[0]!r}", _damaged(path))


def _read(path: Path, name: str, wanted, filters=None):
    """A table with the contract's columns (and no others), as pyarrow read it."""
    import pyarrow.parquet as pq

    _columns(path, name, wanted)
    try:
        return pq.read_table(path / name, columns=wanted.names, filters=filters)
    except (OSError, ValueError) as error:
        raise AttnError(
            f"{path / name} is not a readable Parquet table ({_first_line(error)})", _damaged(path)
        ) from None


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]
