"""`attn heads --store DIR`: the store's tables against `attn heads --json` and brute force, resume after
Ctrl-C, SIGTERM and SIGKILL equal to an uninterrupted run byte for byte, DuckDB reading every table, corpus
formats and the one-line errors."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from conftest import patience
from typer.testing import CliRunner

from attn_cli.cli import app
from attn_cli.data import store_schema as schema
from attn_cli.math import partials
from attn_cli.math.head_scores import SCORES, SHARES
from attn_cli.plumbing.errors import BadInput

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from _corpus import sentences  # noqa: E402

runner = CliRunner()
SMALL = dict(layers="0,5", batch_size=4, part_texts=7, top=3, samples=2)  # parts of 7: the last one short


@pytest.fixture(scope="module")
def minilm(minilm_backend):
    from attn_cli.api import Model

    return Model(minilm_backend)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    lines = sentences(24)
    lines[5] = lines[3]  # a repeated text: equal values, the tie goes to the lower text_id
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def store(minilm, corpus, tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("stores") / "full"
    minilm.heads(file=corpus, store=directory, per_text=True, **SMALL)
    return directory


def table(path: Path) -> list[dict]:
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


def test_the_store_means_equal_the_json_of_attn_heads(store, corpus):
    result = runner.invoke(app, ["heads", "--file", str(corpus), "--layer", "0,5", "--json"], catch_exceptions=False)
    document = json.loads(result.stdout)
    rows = {(row["layer"], row["head"], row["score"]): row for row in table(store / schema.HEADS)}
    assert len(rows) == len(document["heads"]) * len(SCORES)
    for head in document["heads"]:
        for name, value in head["scores"].items():
            row = rows[head["layer"], head["head"], name]
            assert row["count"] == head["scored"][name]
            if value is None:
                assert row["mean"] is None
            else:
                assert row["mean"] == pytest.approx(value, abs=1e-6)
                assert row["std"] == pytest.approx(head["std"][name], abs=1e-6)
            assert row["label"] == head["label"]
            sink = head["sink_key"]
            assert (row["sink_position"], row["sink_token"], row["sink_texts"]) == (
                (sink["position"], sink["token"], sink["texts"]) if sink else (None, None, 0)
            )
    run = table(store / schema.RUN)[0]
    assert run["complete"] and run["texts"] == 24 and run["parts"] == 4 and run["corpus_format"] == "lines"
    assert json.loads(run["options"])["part_texts"] == 7


def test_each_heads_summaries_and_examples_equal_brute_force_over_the_per_text_scores(store):
    texts = table(store / schema.TEXTS)
    assert len(texts) == 24 * 2 * 12 and [row["text_id"] for row in texts[::24]] == list(range(24))
    heads = {(row["layer"], row["head"], row["score"]): row for row in table(store / schema.HEADS)}
    examples = table(store / schema.EXAMPLES)
    for (layer, head, score), row in heads.items():
        values = [
            (r[score], r["text_id"]) for r in texts if (r["layer"], r["head"]) == (layer, head) if r[score] is not None
        ]
        assert row["count"] == len(values)
        if not values:  # a score no text defines (retrieval, off its probe): no summary, no examples
            assert row["mean"] is None and sum(row["hist"]) == 0
            assert not [e for e in examples if (e["layer"], e["head"], e["score"]) == (layer, head, score)]
            continue
        assert row["mean"] == pytest.approx(np.mean([v for v, _ in values]), abs=1e-9)
        assert row["min"] == min(v for v, _ in values) and row["max"] == max(v for v, _ in values)
        assert sum(row["hist"]) == len(values)
        top = [e for e in examples if (e["layer"], e["head"], e["kind"], e["score"]) == (layer, head, "top", score)]
        expected = sorted(values, key=lambda item: (-item[0], item[1]))[:3]  # value desc, then text_id
        assert [(e["value"], e["text_id"]) for e in top] == expected
        assert [e["rank"] for e in top] == list(range(len(top)))
        for decile, members in enumerate(brute_deciles(values, 2)):
            got = [
                (e["value"], e["text_id"])
                for e in examples
                if (e["layer"], e["head"], e["kind"], e["score"], e["decile"]) == (layer, head, "decile", score, decile)
            ]
            assert got == members, (layer, head, score, decile)


def brute_deciles(values: list[tuple[float, int]], samples: int) -> list[list[tuple[float, int]]]:
    """math/partials.py's rule over all the texts at once: each fine bin's `samples` smallest hashes, placed in
    value order at evenly spread ranks of the bin, each in the decile of its rank; per decile the smallest
    hashes."""

    def hashed(text_id: int) -> int:
        return int(partials.text_hash(np.array([text_id]))[0])

    bins = {}
    for value, text_id in values:
        bins.setdefault(int(partials.fine_bin(np.array([value]))[0]), []).append((value, text_id))
    deciles, before = [[] for _ in range(10)], 0
    for fine in sorted(bins):
        members = bins[fine]
        kept = sorted(sorted(members, key=lambda item: (hashed(item[1]), item[1]))[:samples])
        for index, item in enumerate(kept):
            rank = before + (index + 0.5) * len(members) / len(kept)
            deciles[min(int(rank * 10 // len(values)), 9)].append(item)
        before += len(members)
    return [sorted(chosen, key=lambda item: (hashed(item[1]), item[1]))[:samples] for chosen in deciles]


def test_examples_carry_their_tokens_and_edges_skip_the_texts_sink_key(store):
    examples = table(store / schema.EXAMPLES)
    edges = [e for e in examples if e["kind"] == "edge"]
    assert len(edges) == 2 * 12 * 3
    for example in examples:
        window = example["tokens"]
        assert 0 < len(window) <= example["length"] and example["window_start"] >= 0
        marked = [example["query"], *example["keys"]]
        assert all(example["window_start"] <= position < example["window_start"] + len(window) for position in marked)
        # strongest first, but an edge's key leads its row's, and so does the target a share score's example counts
        leads = example["kind"] == "edge" or example["score"] in SHARES
        assert example["weights"] == sorted(example["weights"], reverse=True) or leads
    for edge in edges:
        assert edge["score"] is None and edge["value"] == pytest.approx(edge["weights"][0], abs=1e-6)


def test_a_share_scores_examples_highlight_what_the_score_counts(store):
    """A duplicate_token example highlights a query row and, first, an earlier copy of its token; induction the
    token after an earlier copy; previous_token the token before; first_token position 0; self the query itself
    (not the text's strongest edge whatever the score, which drew `sold → sold` where sold occurs once)."""
    checked = Counter()
    for example in table(store / schema.EXAMPLES):
        if example["kind"] == "edge" or example["score"] not in SHARES[:4] + ("self",) or not example["value"]:
            continue
        start, window = example["window_start"], example["tokens"]

        def token(position, start=start, window=window):
            return window[position - start] if start <= position < start + len(window) else None

        query, key = example["query"], example["keys"][0]
        assert example["weights"][0] > 0
        expected = {
            "previous_token": key == query - 1,
            "duplicate_token": key < query and token(key) == token(query),
            "induction": key - 1 < query and token(key - 1) == token(query),
            "first_token": key == 0,
            "self": key == query,
        }[example["score"]]
        assert expected, example
        checked[example["score"]] += 1
    assert set(checked) == {"previous_token", "duplicate_token", "induction", "first_token", "self"}, checked


def test_duckdb_reads_every_table(store):
    import duckdb

    for name in (schema.RUN, schema.HEADS, schema.EXAMPLES, schema.TEXTS):
        count = duckdb.sql(f"select count(*) from '{store / name}'").fetchall()[0][0]
        assert count > 0, name
    best = duckdb.sql(
        f"select layer, head from '{store / schema.HEADS}' where score = 'previous_token' order by mean desc limit 1"
    ).fetchall()[0]
    assert best == (0, 2)


def test_a_run_without_a_store_is_the_same_fold(minilm, corpus, store):
    plain = minilm.heads(file=corpus, **SMALL)
    stored = {(row["layer"], row["head"], row["score"]): row["mean"] for row in table(store / schema.HEADS)}
    for profile in plain.heads:
        for name, value in profile.scores.items():
            assert stored[profile.layer, profile.head, name] == value  # identical, not close


def test_the_heads_table_is_written_once_a_part_and_not_again_at_the_end(minilm, corpus, store, tmp_path, monkeypatch):
    """progress() writes the heads table after each part; finish() after the last part's progress() would write
    the same table again, and does not. The store is the same as ever."""
    import attn_cli.analyses.store_writer as writer

    written = []
    original = writer.heads_rows
    monkeypatch.setattr(writer, "heads_rows", lambda *args: written.append(1) or original(*args))
    minilm.heads(file=corpus, store=tmp_path / "again", per_text=True, **SMALL)
    assert len(written) == 4  # 24 texts in parts of 7: one a part
    same_tables(store, tmp_path / "again")


def test_batches_merged_each_at_once_or_all_at_the_end_give_the_same_store(
    minilm, corpus, store, tmp_path, monkeypatch
):
    import attn_cli.analyses.fold as folding

    merges = []
    original = folding.partials.merge_all
    monkeypatch.setattr(
        folding.partials, "merge_all", lambda parts, *args: merges.append(len(parts)) or original(parts, *args)
    )
    monkeypatch.setattr(folding, "MERGE_BYTES", 1)  # a merge after every batch
    minilm.heads(file=corpus, store=tmp_path / "each", per_text=True, **SMALL)
    assert max(merges) == 2  # the batches so far and the next one (the store fixture merged each part at once)
    same_tables(store, tmp_path / "each")


# ---- resume


def same_tables(first: Path, second: Path) -> None:
    for name in (schema.HEADS, schema.EXAMPLES, schema.TEXTS):
        assert (first / name).read_bytes() == (second / name).read_bytes(), name


def test_ctrl_c_then_resume_equals_an_uninterrupted_run(minilm, corpus, store, tmp_path, monkeypatch):
    import attn_cli.analyses.heads as engine

    real, calls = engine.score_batch, []

    def interrupted_in_the_third_part(*args, **kwargs):
        calls.append(1)
        if len(calls) == 5:  # parts of 7 texts in batches of 4: batches 1-2 part 0, 3-4 part 1, 5 part 2
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(engine, "score_batch", interrupted_in_the_third_part)
    directory = tmp_path / "store"
    report = minilm.heads(file=corpus, store=directory, per_text=True, **SMALL)
    assert report.interrupted and report.texts == 14  # the partial third part is in the report, not the store
    run = table(directory / schema.RUN)[0]
    assert run["complete"] is False and run["parts"] == 2 and run["texts"] == 14
    assert sorted(p.name for p in (directory / schema.PARTS).iterdir()) == ["000000", "000001", "run.json"]
    monkeypatch.setattr(engine, "score_batch", real)
    with pytest.raises(BadInput, match="not empty"):
        minilm.heads(file=corpus, store=directory, per_text=True, **SMALL)
    calls.clear()
    resumed = minilm.heads(file=corpus, store=directory, per_text=True, resume=True, **SMALL)
    assert resumed.texts == 24 and not resumed.interrupted
    same_tables(directory, store)
    assert table(directory / schema.RUN) == table(store / schema.RUN)


def run_until_a_part_then(corpus: Path, directory: Path, signum: int) -> int:
    """`attn heads --store` as a process, stopped by `signum` once its first part is complete."""
    command = [
        sys.executable,
        "-m",
        "attn_cli",
        "heads",
        "--file",
        str(corpus),
        "--store",
        str(directory),
        "--per-text",
        "--layer",
        "0,5",
        "--batch-size",
        "4",
        "--part-texts",
        "7",
        "--top",
        "3",
        "--samples",
        "2",
        "--device",
        "cpu",
    ]
    variables = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=variables)
    deadline = time.monotonic() + patience(180)
    while process.poll() is None and time.monotonic() < deadline:
        if (directory / schema.PARTS / "000000").is_dir():
            process.send_signal(signum)
            break
        time.sleep(0.01)
    process.communicate(timeout=patience(180))
    return process.returncode


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
def test_a_stopped_process_then_resume_equals_an_uninterrupted_run(minilm, corpus, store, tmp_path, signum):
    directory = tmp_path / "store"
    code = run_until_a_part_then(corpus, directory, signum)
    assert code in (128 + signum, -signum), code
    assert (directory / schema.PARTS / "000000" / "partial.json").is_file()
    minilm.heads(file=corpus, store=directory, per_text=True, resume=True, **SMALL)
    same_tables(directory, store)
    leftovers = [p.name for p in (directory / schema.PARTS).iterdir() if ".tmp-" in p.name]
    assert leftovers == []


def test_resume_refuses_another_run_or_a_changed_corpus(minilm, corpus, store, tmp_path):
    with pytest.raises(BadInput, match="holds another run: its top differ"):
        minilm.heads(file=corpus, store=store, per_text=True, resume=True, **{**SMALL, "top": 4})
    changed = tmp_path / "corpus.txt"
    changed.write_text(corpus.read_text().replace("the", "a", 1))
    copy = tmp_path / "copy"
    minilm.heads(file=corpus, store=copy, **{**SMALL, "part_texts": 30})
    run = json.loads((copy / schema.PARTS / "run.json").read_text())
    run["corpus"] = str(changed)  # the same name, other texts: the part's digest tells
    (copy / schema.PARTS / "run.json").write_text(json.dumps(run))
    with pytest.raises(BadInput, match="not the one part 0 was scored on"):
        minilm.heads(file=changed, store=copy, resume=True, **{**SMALL, "part_texts": 30})


def test_a_directory_that_is_not_a_store_is_never_touched(minilm, corpus, tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("precious")
    for resume in (False, True):
        result = runner.invoke(
            app, ["heads", "--file", str(corpus), "--store", str(mine), *(["--resume"] if resume else [])]
        )
        assert result.exit_code == 2 and "--store" in result.stderr and "Traceback" not in result.output
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]


# ---- corpus formats


def test_parquet_arrow_and_directories_read_the_same_texts(tmp_path):
    import pyarrow as pa
    import pyarrow.feather as feather
    import pyarrow.parquet as pq

    from attn_cli.plumbing.corpus import open_corpus

    texts = sentences(9)
    rows = pa.table({"id": list(range(9)), "body": [*texts[:4], None, " ", *texts[4:]][:9]})
    expected = [text for text in rows.column("body").to_pylist() if text and text.strip()]
    pq.write_table(rows, tmp_path / "a.parquet")
    feather.write_feather(rows, tmp_path / "b.arrow")
    folder = tmp_path / "folder"
    folder.mkdir()
    pq.write_table(rows.slice(0, 5), folder / "0.parquet")
    pq.write_table(rows.slice(5), folder / "1.parquet")
    for path, kind in ((tmp_path / "a.parquet", "parquet"), (tmp_path / "b.arrow", "arrow"), (folder, "parquet")):
        corpus = open_corpus(path, "body")
        assert corpus.format == kind and list(corpus.texts()) == expected and corpus.count() == len(expected)


def test_a_parquet_corpus_scores_like_its_lines(minilm, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    texts = sentences(5)
    (tmp_path / "c.txt").write_text("\n".join(texts) + "\n")
    pq.write_table(pa.table({"text": texts}), tmp_path / "c.parquet")
    lines = minilm.heads(file=tmp_path / "c.txt", layers=0)
    parquet = minilm.heads(file=tmp_path / "c.parquet", layers=0)
    assert [h.scores for h in lines.heads] == [h.scores for h in parquet.heads]


@pytest.mark.parametrize(
    "make, fragment",
    [
        (lambda d: _parquet(d, {"body": ["a"]}), "has no column 'text' (its columns: body)"),
        (lambda d: _parquet(d, {"text": [1, 2]}), "column 'text' holds int64, not strings"),
        (lambda d: written(d / "x.parquet", "not parquet"), "is not a Parquet file"),
        (lambda d: written(d / "x.arrow", "not arrow"), "is not an Arrow file"),
        (lambda d: written(d / "empty" / "notes.txt", "").parent, "no .parquet or .arrow files"),
        (lambda d: written(d / "ds" / "state.json", "{}").parent, "needs the datasets package"),
        (lambda d: written(d / "blank.txt", "\n  \n"), "blank.txt holds none"),
    ],
)
def test_bad_corpora_are_one_line_errors(make, fragment, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # as when the package is not installed
    result = runner.invoke(app, ["heads", "--file", str(make(tmp_path)), "--layer", "0"])
    assert result.exit_code == 2 and fragment in result.stderr, result.stderr
    assert "Traceback" not in result.output and len(result.stderr.strip().splitlines()) == 1


def written(path: Path, text: str) -> Path:
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    return path


def _parquet(directory: Path, columns: dict) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table(columns), directory / "c.parquet")
    return directory / "c.parquet"


@pytest.mark.parametrize("existing", [False, True], ids=["new directory", "empty directory"])
def test_a_corpus_with_no_text_leaves_the_store_directory_as_it_found_it(minilm, tmp_path, existing):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n")
    directory = tmp_path / "store"
    if existing:
        directory.mkdir()
    with pytest.raises(BadInput, match="no text to score"):
        minilm.heads(file=empty, store=directory, **SMALL)
    assert directory.exists() == existing and (not existing or not any(directory.iterdir()))


def test_a_resumed_store_keeps_its_parts_when_nothing_is_left_to_score(minilm, store, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(store, copy)
    before = sorted(p.relative_to(copy) for p in copy.rglob("*"))
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(BadInput):  # another corpus: refused before anything is touched
        minilm.heads(file=empty, store=copy, per_text=True, resume=True, **SMALL)
    assert sorted(p.relative_to(copy) for p in copy.rglob("*")) == before


def test_a_saved_datasets_directory_scores_like_its_lines(minilm, tmp_path):
    datasets = pytest.importorskip("datasets", reason="the datasets package is not installed")
    texts = sentences(5)
    (tmp_path / "c.txt").write_text("\n".join(texts) + "\n")
    datasets.Dataset.from_dict({"body": texts, "n": list(range(5))}).save_to_disk(str(tmp_path / "ds"))
    lines = minilm.heads(file=tmp_path / "c.txt", layers=0)
    saved = minilm.heads(file=tmp_path / "ds", column="body", layers=0)
    assert [h.scores for h in lines.heads] == [h.scores for h in saved.heads] and saved.texts == 5
    datasets.DatasetDict({"train": datasets.Dataset.from_dict({"text": texts})}).save_to_disk(str(tmp_path / "dd"))
    for path, column, fragment in [
        (tmp_path / "dd", "text", "holds several splits (train)"),
        (tmp_path / "ds", "n", "column 'n' holds int64, not strings"),
    ]:
        result = runner.invoke(app, ["heads", "--file", str(path), "--column", column, "--layer", "0"])
        assert result.exit_code == 2 and fragment in result.stderr, result.stderr


def test_the_examples_table_equals_its_rows_built_one_by_one():
    """example_rows builds its columns at once: each row must equal the row-by-row rule: an edge's key first and
    then its row's other kept keys, the weights of the kept keys, and a window of `context` tokens either side of
    the query and its keys (position 0 alone when the text has no query)."""
    from attn_cli.analyses.store_writer import example_rows

    rng = np.random.default_rng(7)
    count, heads, context = 9, 2, 2
    tokens = [[f"w{text}.{i}" for i in range(int(rng.integers(3, 25)))] for text in range(count)]
    length = np.array([len(text) for text in tokens])[:, None, None]
    shape = (count, 1, heads)
    query = np.where(rng.random(shape) < 0.3, -1, rng.integers(0, 1 << 20, shape) % length)
    edge_key = np.where(query >= 0, rng.integers(0, 1 << 20, shape) % length, -1)
    keys = rng.integers(0, 1 << 20, (*shape, partials.KEYS)) % length[..., None]
    keys[..., 1] = np.where(
        (rng.random(shape) < 0.5) & (edge_key >= 0), edge_key, keys[..., 1]
    )  # the edge's key among its row's
    keys[..., 3:] = np.where((rng.random(shape) < 0.5)[..., None], -1, keys[..., 3:])  # rows with fewer allowed keys
    weights = np.where(keys >= 0, np.sort(rng.random(keys.shape), -1)[..., ::-1], 0).astype(np.float32)
    batch = partials.Batch(
        text_ids=np.arange(count),
        tokens=tokens,
        values=rng.random((*shape, len(SCORES))),
        sink=np.full(shape, -1),
        query=query,
        edge_key=edge_key,
        edge_weight=np.where(query >= 0, rng.random(shape), np.nan),
        keys=keys,
        weights=weights,
    )
    rows = example_rows(partials.reduce(batch, (1, heads), 3, 2), [0], [0, 1], context).to_pylist()
    assert {row["kind"] for row in rows} == {"top", "decile", "edge"}
    assert any(row["query"] is None for row in rows)
    for row in rows:
        at = (row["text_id"], 0, row["head"])
        pairs = list(zip(keys[at].tolist(), weights[at].tolist()))
        if row["kind"] == "edge":
            pairs = [(int(edge_key[at]), float(np.float32(batch.edge_weight[at])))] + [
                pair for pair in pairs if pair[0] != edge_key[at]
            ]
        kept = [key for key, _ in pairs[: partials.KEYS] if key >= 0]
        assert row["keys"] == kept
        assert row["weights"] == [weight for _, weight in pairs[: len(kept)]]
        marked = [int(query[at]), *kept] if query[at] >= 0 else [0]
        first = max(0, min(marked) - context)
        assert (row["window_start"], row["tokens"]) == (
            first,
            tokens[row["text_id"]][first : max(marked) + context + 1],
        )
        assert row["length"] == len(tokens[row["text_id"]])
        assert row["query"] == (None if query[at] < 0 else int(query[at]))
