"""Issue 35's held-out sweep of a corpus store's faults: a damaged store, two writers at once, a run that
fails before its first part, an interrupted store shown, and --truncate in a toy corpus run. The contract of
each: exit 1 or 2 with one line saying what is wrong and what to do, nothing left behind or destroyed.
The toy keeps the runs short (tests/test_store.py holds the store's exactness on MiniLM)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import patience
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


# ---- 11: every file of parts/ is read by one validating reader


def tables_equal(first: Path, second: Path) -> None:
    for name in (schema.RUN, schema.HEADS, schema.EXAMPLES):
        assert (first / name).read_bytes() == (second / name).read_bytes(), name


@pytest.fixture
def written(tmp_path, corpus) -> Path:
    store = tmp_path / "whole"
    assert attn("heads", "--file", corpus, *TOY, "--store", store).exit_code == 0
    return store


def _npz_with_a_pickle(path: Path) -> None:
    import numpy as np

    np.savez(path, count=np.array([object()], dtype=object))


DAMAGE = {
    "run.json truncated": ("run.json", lambda p: p.write_text(p.read_text()[:50])),
    "run.json a list": ("run.json", lambda p: p.write_text("[1, 2]")),
    "partial.json truncated": ("000001/partial.json", lambda p: p.write_text(p.read_text()[:30])),
    "partial.json without its digest": ("000001/partial.json", lambda p: p.write_text('{"partial": {}}')),
    "partial.json of another shape": (
        "000001/partial.json",
        lambda p: p.write_text(p.read_text().replace('"shape": [1, 4]', '"shape": [2, 4]')),
    ),
    "partial.npz random": ("000001/partial.npz", lambda p: p.write_bytes(os.urandom(3000))),
    "partial.npz with a pickle": ("000001/partial.npz", _npz_with_a_pickle),
    "partial.npz missing": ("000001/partial.npz", lambda p: p.unlink()),
}


@pytest.mark.parametrize("case", DAMAGE)
def test_a_damaged_store_is_one_line_naming_the_file_and_what_recovers_it(tmp_path, corpus, written, case):
    import shutil

    name, damage = DAMAGE[case]
    store = tmp_path / "damaged"
    shutil.copytree(written, store)
    damage(store / schema.PARTS / name)
    before = sorted(p.relative_to(store) for p in store.rglob("*"))
    line = one_line(attn("heads", "--file", corpus, *TOY, "--store", store, "--resume"), 1, "the store is damaged")
    assert str(store / schema.PARTS / name.split("/")[0]) in line
    assert sorted(p.relative_to(store) for p in store.rglob("*")) == before  # nothing removed or added
    if name == "run.json":
        assert "--resume cannot recover it" in line
        return
    part = store / schema.PARTS / "000001"
    assert f"delete {part} and run again with --resume" in line
    shutil.rmtree(part)  # as the line says
    assert attn("heads", "--file", corpus, *TOY, "--store", store, "--resume").exit_code == 0
    tables_equal(store, written)


# ---- 13: a run refused on its first part leaves no store behind


def _bad_utf8(directory: Path) -> Path:
    path = directory / "bad.txt"
    path.write_bytes(b"one line.\ntwo lines.\nthree \xff lines.\n")
    return path


def _no_text_column(directory: Path) -> Path:
    path = directory / "c.jsonl"
    path.write_text('{"text": "one line."}\n{"body": "no text here."}\n')
    return path


@pytest.mark.parametrize("existing", [False, True], ids=["new directory", "empty directory"])
@pytest.mark.parametrize("make", [_bad_utf8, _no_text_column], ids=["invalid UTF-8", "JSONL without text"])
def test_a_corpus_refused_on_its_first_part_leaves_the_store_directory_as_it_found_it(tmp_path, make, existing):
    store = tmp_path / "st"
    if existing:
        store.mkdir()
    result = attn("heads", "--file", make(tmp_path), "-m", "toy", "--store", store)
    one_line(result, 2)
    assert store.exists() == existing and (not existing or not any(store.iterdir()))


# ---- 14: an interrupted store says it is incomplete and how to complete it


def test_an_interrupted_store_shown_gives_the_resume_line_that_completes_it(tmp_path, corpus, written, monkeypatch):
    import shlex

    import attn_cli.analyses.heads as engine

    real, calls = engine.score_batch, []

    def interrupted_in_the_second_part(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:  # parts of 4 texts in batches of 2: batches 1-2 are part 0
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(engine, "score_batch", interrupted_in_the_second_part)
    store = tmp_path / "stopped"
    assert attn("heads", "--file", corpus, *TOY, "--store", store).exit_code == 130
    monkeypatch.setattr(engine, "score_batch", real)
    assert not (store / schema.EXAMPLES).exists()  # written once a minute: the state a killed run leaves
    line = one_line(attn("heads", "show", store), 1, f"{store} is incomplete", "complete it with: attn heads")
    command = shlex.split(line.split("complete it with: ", 1)[1])
    assert command[:2] == ["attn", "heads"] and command[-1] == "--resume"
    assert ["--part-texts", "4"] == command[command.index("--part-texts") :][:2]
    resumed = attn(*command[1:])
    assert resumed.exit_code == 0, resumed.stderr
    tables_equal(store, written)
    assert attn("heads", "show", store).exit_code == 0


def test_a_store_stopped_before_its_first_part_says_so_too(tmp_path, corpus):
    store = tmp_path / "st"
    (store / schema.PARTS).mkdir(parents=True)
    (store / schema.PARTS / "run.json").write_text(
        json.dumps({"corpus": str(corpus), "corpus_format": "lines", "model": {"name": "toy"}, "options": {}})
    )
    one_line(attn("heads", "show", store), 1, "is incomplete: it stopped before its first part", "--resume")


# ---- 12: one writer at a time


def test_a_second_writer_is_told_which_run_writes_the_store(tmp_path):
    """Two real processes: the first, stopped (SIGSTOP) once its first part is written, still holds the lock;
    the second (a resume, which would remove the first's half-written part) is refused in one line naming the
    first's pid, before its model loads and without touching the store; the first, continued, completes."""
    import signal

    corpus = tmp_path / "c.txt"
    corpus.write_text("".join(f"the cat sat on the mat, time {i}.\n" for i in range(400)))  # 100 parts
    store = tmp_path / "st"
    command = [sys.executable, "-m", "attn_cli", "heads", "--file", str(corpus), *TOY, "--store", str(store)]
    variables = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", COLUMNS="200")
    variables.pop("ATTN_DEBUG", None)
    first = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=variables)
    try:
        while first.poll() is None and not (store / schema.PARTS / "000000").is_dir():
            time.sleep(0.01)
        first.send_signal(signal.SIGSTOP)
        assert first.poll() is None, "the first run ended before it could be stopped"
        before = sorted(p.relative_to(store) for p in store.rglob("*"))
        second = subprocess.run(
            [*command, "--resume"], capture_output=True, env=variables, timeout=patience(120), cwd=tmp_path, text=True
        )
        assert second.returncode == 1, second.stderr
        lines = second.stderr.strip().splitlines()
        assert lines == [
            f"error: --store {store}: another run (pid {first.pid}) is writing it; wait for it to end, or stop it "
            "and add --resume to continue its store"
        ], second.stderr
        assert sorted(p.relative_to(store) for p in store.rglob("*")) == before
    finally:
        first.send_signal(signal.SIGCONT)
        _, stderr = first.communicate(timeout=patience(300))
    assert first.returncode == 0, stderr
    assert not (store / schema.PARTS / "writer.lock").exists()  # a store at rest holds no lock file
    again = subprocess.run([*command, "--resume"], capture_output=True, env=variables, timeout=patience(120), text=True)
    assert again.returncode == 0, again.stderr  # the lock went with the first run
