"""Issue 35's held-out sweep of a corpus store's faults: a damaged store, two writers at once, a run that
fails before its first part, an interrupted store shown, and --truncate in a toy corpus run. The contract of
each: exit 1 or 2 with one line saying what is wrong and what to do, nothing left behind or destroyed.
The toy keeps the runs short (tests/test_store.py holds the store's exactness on MiniLM)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attn_cli.cli import app
from attn_cli.data import store_schema as schema

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()
TOY = ["-m", "toy", "--part-texts", "4", "--batch-size", "2"]


def attn(*args):
    return runner.invoke(app, [str(arg) for arg in args])


def one_line(result, code: int, *fragments: str) -> str:
    assert result.exit_code == code, f"exit {result.exit_code}\n{result.stderr}\n{result.exception!r}"
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "unexpected" not in lines[0], lines[0]
    for fragment in fragments:
        assert fragment in lines[0], f"{fragment!r} not in {lines[0]!r}"
    return lines[0]


@pytest.fixture
def corpus(tmp_path) -> Path:
    path = tmp_path / "c.txt"
    path.write_text("".join(f"the cat sat on the mat, time {i}.\n" for i in range(10)))
    return path


# ---- 19: --truncate cuts the toy's texts in a corpus run, and the run counts them


def test_truncate_cuts_the_toys_long_text_in_a_corpus_run_and_counts_it(tmp_path, corpus, monkeypatch):
    monkeypatch.setattr("attn_cli.backends.toy.MAX_TOKENS", 40)  # the toy's 4096, made small for the test
    monkeypatch.setattr("attn_cli.backends.toy_checks.MAX_TOKENS", 40)
    long = tmp_path / "long.txt"
    long.write_text(corpus.read_text() + "w " * 100 + "\n")
    refused = attn("heads", "--file", long, *TOY, "--store", tmp_path / "refused")
    one_line(refused, 1, "the text is 100 tokens but the toy takes at most 40")
    store = tmp_path / "st"
    result = attn("heads", "--file", long, *TOY, "--store", store, "--truncate", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["truncated"] == 1 and json.loads(result.stdout)["texts"] == 11
    assert "1 text cut to the model's positions (--truncate)" in result.stderr
    import pyarrow.parquet as pq

    assert pq.read_table(store / schema.RUN).to_pylist()[0]["truncated"] == 1


def test_a_long_toy_text_is_not_padded_into_its_batch_mates():
    """The toy runs one padded batch per group of texts whose (B, H, T, T) scores fit BATCH_CELLS."""
    from attn_cli.backends.toy import batch_groups

    assert batch_groups([3, 4, 5], heads=4) == [[0, 1, 2]]
    assert batch_groups([3, 4, 4096, 5], heads=4, cells=1 << 20) == [[0, 1], [2], [3]]
