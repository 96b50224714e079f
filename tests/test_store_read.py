"""Reading a corpus store: attn.open_store(DIR) on stores tests/store_builder.py writes from store_schema.py
(the writer, `attn heads --store`, is tested on its own), and the one-line errors of a directory that is
not a store attn can read."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)
import pyarrow.parquet as pq
import pytest
from store_builder import INDUCTION, MODEL, PREVIOUS, build_store

import attn_cli
from attn_cli.analyses.heads import HeadProfile, HeadsReport
from attn_cli.analyses.store_read import StoreReport, open_store
from attn_cli.data import store_schema as schema
from attn_cli.math.head_scores import SCORES
from attn_cli.plumbing.errors import AttnError, BadInput


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return build_store(tmp_path_factory.mktemp("store") / "heads-store")


@pytest.fixture(scope="module")
def report(built):
    return open_store(built.path)


def test_open_store_is_exported_beside_load():
    assert attn_cli.open_store is open_store
    assert "open_store" in attn_cli.__all__


def test_a_store_reads_as_the_heads_report_attn_heads_makes(built, report):
    assert isinstance(report, StoreReport) and isinstance(report, HeadsReport)
    assert report.texts == len(built.texts) and report.tokens == sum(map(len, built.texts))
    assert [(p.layer, p.head) for p in report.heads] == [(l, h) for l in range(6) for h in range(12)]
    assert report.head(*INDUCTION).label == "induction" and report.head(*PREVIOUS).label == "previous_token"
    assert [(p.layer, p.head) for p in report.top("induction", 1)] == [INDUCTION]
    for (layer, head), means in built.means.items():
        profile = report.head(layer, head)
        for name in SCORES:
            defined = [v for v in built.values[layer, head, name] if v is not None]
            assert profile.scored[name] == len(defined)
            if defined:
                assert profile.scores[name] == pytest.approx(means[name], abs=1e-9)
            else:
                assert profile.scores[name] is None


def test_its_json_is_the_attn_heads_document(report):
    """The same document as `attn heads --json` (same keys, same shape): the store and the command agree."""
    document = report.to_json_dict()
    plain = HeadsReport(
        model=report.model,
        device=report.device,
        dtype=report.dtype,
        texts=report.texts,
        tokens=report.tokens,
        heads=report.heads,
        source=report.source,
        thresholds=report.thresholds,
    ).to_json_dict()
    assert document == plain
    assert document["command"] == "heads" and document["model"] == MODEL and document["source"] == "corpus.txt"
    assert json.loads(json.dumps(document)) == document  # no NaN, nothing JSON cannot hold


def test_each_head_has_its_distributions(built, report):
    for name in SCORES:
        distribution = report.distribution(*INDUCTION, name)
        defined = sorted(v for v in built.values[(*INDUCTION, name)] if v is not None)
        assert distribution.count == len(defined) == sum(distribution.hist)
        assert len(distribution.hist) == schema.BINS
        if not defined:  # retrieval: defined only on its probe, never in a corpus store
            continue
        assert distribution.min == min(defined) and distribution.max == max(defined)
        assert distribution.quantiles["q05"] <= distribution.quantiles["q50"] <= distribution.quantiles["q95"]
    with pytest.raises(BadInput, match="no score named 'nope'"):
        report.distribution(0, 0, "nope")
    with pytest.raises(BadInput, match="head 7.0 is not in this report"):
        report.distribution(7, 0, "self")


def test_top_examples_are_the_texts_where_the_score_is_highest(built, report):
    """Against a brute-force search over the per-text scores the store was built from."""
    examples = report.examples(*INDUCTION)
    values = built.values[(*INDUCTION, "induction")]
    brute = sorted(((v, t) for t, v in enumerate(values) if v is not None), key=lambda p: (-p[0], p[1]))[:5]
    assert [(e.value, e.text_id) for e in examples.top["induction"]] == brute
    assert [e.rank for e in examples.top["induction"]] == list(range(5))
    first = examples.top["induction"][0]
    assert first.tokens == tuple(
        built.texts[first.text_id][first.window_start : first.window_start + len(first.tokens)]
    )
    assert first.weight_on(first.keys[0]) == pytest.approx(first.weights[0])
    assert first.weight_on(-1) is None
    # an induction head's query attends the token after the earlier copy of itself
    assert first.token(first.keys[0] - 1) == first.token(first.query)


def test_decile_samples_and_edges(report):
    examples = report.examples(*INDUCTION)
    samples = examples.decile["induction"]
    assert sorted({e.decile for e in samples}) == list(range(10))
    assert [e.value for e in samples if e.rank == 0] == sorted(e.value for e in samples if e.rank == 0)
    assert len(examples.edge) == 5 and all(e.score is None for e in examples.edge)
    assert [e.value for e in examples.edge] == sorted((e.value for e in examples.edge), reverse=True)


def test_the_dashboard_document_defaults_to_the_heads_label(report):
    document = report.dashboard(*INDUCTION, top=3).to_json_dict()
    assert document["command"] == "heads show" and document["examples"]["score"] == "induction"
    assert len(document["examples"]["top"]) == 3 and len(document["examples"]["edge"]) == 3
    assert set(document["scores"]) == set(SCORES) and len(document["scores"]["self"]["hist"]) == schema.BINS
    assert report.dashboard(*INDUCTION, score="self").to_json_dict()["examples"]["score"] == "self"
    mixed = next(p for p in report.heads if p.label == "mixed")
    best = max((v, n) for n, v in mixed.scores.items() if v is not None)[1]
    assert report.default_score(mixed.layer, mixed.head) == best
    with pytest.raises(BadInput, match="no score named"):
        report.dashboard(*INDUCTION, score="inductoin")


def test_an_incomplete_store_opens_and_says_how_to_complete_it(tmp_path):
    built = build_store(tmp_path / "partial", texts=12, complete=False, per_text=False)
    report = open_store(built.path)
    assert report.complete is False and report.texts == 12
    note = report.incomplete_note()
    assert "covers 12 texts" in note and "--resume" in note and str(built.path) in note
    assert open_store(build_store(tmp_path / "whole", texts=12).path).incomplete_note() is None


# -- not a store attn can read: one clear error each ----------------------------------------------------


@pytest.fixture
def small(tmp_path):
    return build_store(tmp_path / "small", texts=9, per_text=False).path


def test_a_missing_path_a_file_and_a_plain_directory_are_not_stores(tmp_path):
    for path, fragment in (
        (tmp_path / "nowhere", "no such store directory"),
        (tmp_path / "file.txt", "is not a store: a store is a directory"),
        (tmp_path, "is not an attn store: it has no run.parquet"),
    ):
        if path.suffix:
            path.write_text("hello\n")
        with pytest.raises(BadInput, match=fragment) as raised:
            open_store(path)
        assert "attn heads --file CORPUS --store DIR" in raised.value.hint


def test_a_store_newer_than_this_attn_is_refused(tmp_path):
    path = build_store(tmp_path / "future", texts=6, per_text=False, store_version=schema.STORE_VERSION + 1).path
    with pytest.raises(AttnError, match=f"version {schema.STORE_VERSION + 1} store, newer than attn"):
        open_store(path)


@pytest.mark.parametrize("table", [schema.HEADS, schema.EXAMPLES])
def test_a_missing_table(small, table):
    (small / table).unlink()
    with pytest.raises(AttnError, match=f"has no {table}") as raised:
        open_store(small)
    assert "write it again" in raised.value.hint


@pytest.mark.parametrize("table", [schema.RUN, schema.HEADS, schema.EXAMPLES])
def test_a_corrupt_table(small, table):
    (small / table).write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(AttnError, match=f"{table} is not a readable Parquet table") as raised:
        open_store(small)
    assert "\n" not in str(raised.value)


def test_a_table_without_a_column_of_the_contract(small):
    table = pq.read_table(small / schema.HEADS).drop_columns(["hist"])
    pq.write_table(table, small / schema.HEADS)
    with pytest.raises(AttnError, match="heads.parquet has no column 'hist'"):
        open_store(small)


def test_a_head_missing_a_score_row(small):
    table = pq.read_table(small / schema.HEADS)
    keep = [not (row["layer"] == 2 and row["head"] == 3 and row["score"] == "sink") for row in table.to_pylist()]
    pq.write_table(table.filter(pa.array(keep)), small / schema.HEADS)
    with pytest.raises(AttnError, match="no sink row for head 2.3"):
        open_store(small)


def test_profiles_are_head_profiles(report):
    assert all(isinstance(profile, HeadProfile) for profile in report.heads)
    assert report.head(1, 0).sink_key.token == "[CLS]"


def test_per_text_scores_when_the_store_has_them(built, report, tmp_path):
    table = report.per_text()
    assert table.num_rows == len(built.texts) * 72
    rows = table.filter(
        pa.compute.and_(pa.compute.equal(table["layer"], 1), pa.compute.equal(table["head"], 4))
    ).to_pylist()
    by_text = sorted(rows, key=lambda row: row["text_id"])
    assert [row["induction"] for row in by_text] == built.values[(*INDUCTION, "induction")]
    assert report.per_text(["text_id", "self"]).column_names == ["text_id", "self"]
    with pytest.raises(BadInput, match="no column 'nope'"):
        report.per_text(["nope"])
    without = open_store(build_store(tmp_path / "lean", texts=6, per_text=False).path)
    with pytest.raises(BadInput, match="has no per-text scores") as raised:
        without.per_text()
    assert "--per-text" in raised.value.hint


def test_a_probe_store_carries_the_probe_as_attn_heads_probe_does(tmp_path, report):
    probe = {"kind": "induction", "seed": 0, "length": 3, "requested": 3, "text": " a b c a b c"}
    found = open_store(build_store(tmp_path / "probe", texts=1, per_text=False, probe=probe).path)
    assert found.probe == probe and found.source == "probe"
    assert found.to_json_dict()["probe"] == probe
    assert report.probe is None and "probe" not in report.to_json_dict()


def test_a_store_shows_its_dashboard_inline_in_a_notebook(report):
    """In a notebook a StoreReport is its dashboard page (head finder and head pages), not the plain heads grid."""
    import html

    shown = report._repr_html_()
    assert shown.startswith('<iframe class="attn-page" srcdoc="')
    page = html.unescape(shown.split('srcdoc="', 1)[1].split('" onload=', 1)[0])
    assert "attn's corpus dashboard" in page and "Head finder" in page
