"""`attn heads --engine ray`: a Ray run equals a local run (the same store, byte for byte, when the workers run
torch with as many threads as the local run; summaries to 1e-6 and the same examples otherwise), a worker
killed mid-run is restarted and the result is still exact, Ctrl-C leaves a store `--resume` completes with
either engine, and without Ray `--engine ray` is one line saying how to install it. One local Ray cluster
(127.0.0.1, 2 CPUs: two workers of one torch thread each) for the file; a tiny BERT (tests/conftest.py)
keeps the runs short. A worker's start (a process, torch, transformers, the model) costs seconds of CPU, so the
runs whose subject is the result keep their workers (keep_workers=True, KEEP) for the next such run: a run takes
waiting workers only when they were asked for with the same arguments, and starts its own otherwise."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attn_cli.cli import app
from attn_cli.data import store_schema as schema
from attn_cli.plumbing.errors import BadInput

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from _corpus import sentences  # noqa: E402

pytestmark = pytest.mark.slow  # every test here starts a local Ray cluster (seconds each)

RUN = dict(batch_size=32, part_texts=256, top=5, samples=2)  # 600 lines: parts of 256, the last one short
SMALL = dict(batch_size=8, part_texts=64, top=3, samples=2)  # 300 lines: 5 parts, the last one short
KEEP = dict(keep_workers=True)  # the workers wait for the next run with the same arguments (see above)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """The local runs with one torch thread, as each of the two workers has: torch's float sums may be split
    by thread, and then a text's scores differ in the last bits (test_threads_change_only_the_last_bits)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def cluster():
    ray = pytest.importorskip("ray", reason="Ray is not installed: pip install 'attn-cli[ray]'")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a local test cluster: no token file in the home
    ray.init(address="local", num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def tiny(tiny_bert_dir):
    import attn_cli

    return attn_cli.load(str(tiny_bert_dir), device="cpu")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    lines = sentences(600)
    lines[7] = lines[3]  # a repeated text: equal values, the tie goes to the lower text_id
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def local_store(tiny, corpus, tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("stores") / "local"
    tiny.heads(file=corpus, store=directory, per_text=True, **RUN)
    return directory


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("small") / "small.txt"
    path.write_text("\n".join(sentences(300, seed=3)) + "\n")
    return path


@pytest.fixture(scope="module")
def small_store(tiny, small, tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("stores") / "small"
    tiny.heads(file=small, store=directory, per_text=True, **SMALL)
    return directory


def same_store(first: Path, second: Path) -> None:
    """Byte for byte: summaries, examples (ties by text_id, then positions) and per-text rows; the run row."""
    import pyarrow.parquet as pq

    from tests.test_store import same_tables

    same_tables(first, second)

    assert pq.read_table(first / schema.RUN).to_pylist() == pq.read_table(second / schema.RUN).to_pylist()


def test_a_ray_run_equals_a_local_run_on_600_lines(cluster, tiny, corpus, local_store, tmp_path):
    seen = []
    report = tiny.heads(
        file=corpus,
        store=tmp_path / "ray",
        per_text=True,
        engine="ray",
        workers=2,
        progress=lambda done, total: seen.append((done, total)),
        **KEEP,
        **RUN,
    )
    assert report.texts == 600 and not report.interrupted
    same_store(tmp_path / "ray", local_store)
    assert seen[-1] == (600, 600) and [done for done, _ in seen] == sorted(done for done, _ in seen)


def test_a_killed_worker_is_restarted_and_the_result_is_exact(cluster, tiny, small, small_store, tmp_path):
    from attn_cli.analyses import ray_engine

    killed = []

    def kill_one(done, total):
        if not killed:  # a chunk is back: the other worker is busy with its own, the killed one had one queued
            _, pid = ray_engine.RUNNING[0]
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    report = tiny.heads(
        file=small, store=tmp_path / "ray", per_text=True, engine="ray", workers=2, progress=kill_one, **KEEP, **SMALL
    )
    assert killed and report.texts == 300 and not report.interrupted
    same_store(tmp_path / "ray", small_store)


def test_keep_workers_goes_with_engine_ray(tiny):
    with pytest.raises(BadInput, match="keep_workers goes with engine='ray'"):
        tiny.heads("Hello there.", keep_workers=True)


def interrupt_after(texts: int):
    def progress(done, total):
        if done >= texts:
            raise KeyboardInterrupt

    return progress


@pytest.mark.parametrize("first, then", [("local", "ray"), ("ray", "local")])
def test_ctrl_c_then_resume_with_either_engine(cluster, tiny, small, small_store, tmp_path, first, then):
    """An interrupted run's workers are stopped even when asked to be kept (ray_engine.engine)."""
    directory = tmp_path / "store"
    workers = {"ray": {"engine": "ray", "workers": 2, **KEEP}, "local": {}}
    report = tiny.heads(
        file=small, store=directory, per_text=True, progress=interrupt_after(100), **workers[first], **SMALL
    )
    assert report.interrupted and 100 <= report.texts < 300
    import pyarrow.parquet as pq

    run = pq.read_table(directory / schema.RUN).to_pylist()[0]
    assert run["complete"] is False and run["parts"] >= 1
    resumed = tiny.heads(file=small, store=directory, per_text=True, resume=True, **workers[then], **SMALL)
    assert resumed.texts == 300 and not resumed.interrupted
    same_store(directory, small_store)


def test_threads_change_only_the_last_bits(cluster, tiny, small, small_store, tmp_path):
    """One worker of two torch threads against the local run's one: summaries to 1e-6, the same examples."""
    import numpy as np
    import pyarrow.parquet as pq

    tiny.heads(file=small, store=tmp_path / "ray", engine="ray", workers=1, per_text=True, **SMALL)
    ray_heads, local_heads = (
        pq.read_table(path / schema.HEADS).to_pandas() for path in (tmp_path / "ray", small_store)
    )
    for column in ("mean", "std", "min", "max"):
        assert np.allclose(ray_heads[column], local_heads[column], atol=1e-6, equal_nan=True), column
    assert (ray_heads["count"] == local_heads["count"]).all()
    examples = ["layer", "head", "kind", "score", "decile", "rank", "text_id", "query", "keys"]
    assert pq.read_table(tmp_path / "ray" / schema.EXAMPLES).select(examples) == pq.read_table(
        small_store / schema.EXAMPLES
    ).select(examples)


def test_kept_workers_serve_the_next_run_without_starting_again(cluster, tiny, small, small_store, tmp_path):
    """keep_workers=True: the workers stay alive, their model loaded, and the next run with the same arguments
    runs on the same processes (no Scorer made again); a run without it stops them after. Both stores exact."""
    from attn_cli.analyses import ray_engine

    def pids(seen):
        return lambda done, total: seen.append(sorted(pid for _, pid in ray_engine.RUNNING))

    first, then = [], []
    tiny.heads(
        file=small,
        store=tmp_path / "first",
        per_text=True,
        engine="ray",
        workers=2,
        keep_workers=True,
        progress=pids(first),
        **SMALL,
    )
    assert len(ray_engine.WAITING) == 1
    tiny.heads(
        file=small, store=tmp_path / "then", per_text=True, engine="ray", workers=2, progress=pids(then), **SMALL
    )
    assert first[0] == then[0] == then[-1] and len(set(first[0])) == 2 and not ray_engine.WAITING
    same_store(tmp_path / "first", small_store)
    same_store(tmp_path / "then", small_store)


def test_without_ray_engine_ray_is_one_line_before_the_model_loads(corpus, tmp_path, monkeypatch):
    import attn_cli.backends.registry as registry

    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError, as when it is absent

    def no_loading(*args, **kwargs):
        raise AssertionError("the model loaded")

    monkeypatch.setattr(registry, "load_backend", no_loading)
    result = CliRunner().invoke(
        app, ["heads", "--file", str(corpus), "--store", str(tmp_path / "s"), "--engine", "ray"]
    )
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines() == [
        "error: --engine ray needs Ray, which is not installed; pip install 'attn-cli[ray]'"
    ]
    assert not (tmp_path / "s").exists()


def test_an_address_with_nothing_listening_is_one_line_not_a_hang(corpus, tmp_path, monkeypatch):
    """A TCP connect to host:port before ray.init, which would otherwise retry for minutes printing the GCS
    client's warnings. No Ray is started: a port just closed on 127.0.0.1 refuses at once."""
    import socket

    ray = pytest.importorskip("ray", reason="Ray is not installed: pip install 'attn-cli[ray]'")
    import attn_cli.backends.registry as registry

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed on leaving: nothing listens there now

    def refuse(*args, **kwargs):
        raise AssertionError("reached ray.init or loaded the model")

    monkeypatch.setattr(ray, "init", refuse)
    monkeypatch.setattr(registry, "load_backend", refuse)
    # as in a fresh `attn` process: an earlier test in this worker may have left its cluster joined (connect
    # then uses that one and never looks at --address)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    address = f"127.0.0.1:{port}"
    store = tmp_path / "s"
    result = CliRunner().invoke(
        app, ["heads", "--file", str(corpus), "--store", str(store), "--engine", "ray", "--address", address]
    )
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: cannot reach a Ray cluster at {address}: "), lines
    assert "start one there" in lines[0] and not store.exists()


def test_without_ray_the_api_says_how_to_install_it(tiny, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(BadInput, match=r"pip install 'attn-cli\[ray\]'"):
        tiny.heads("Hello there.", engine="ray")
    assert tiny.heads("Hello there.").texts == 1  # the local engine needs no Ray


def test_ray_options_go_with_engine_ray(corpus):
    result = CliRunner().invoke(app, ["heads", "--file", str(corpus), "--workers", "2"])
    assert result.exit_code == 2 and "--workers go with --engine ray" in result.stderr


def test_a_worker_gathers_examples_only_for_a_store(tiny):
    """The actor's own code, in this process (no cluster): a run without a store sends examples=False, as the
    local fold does, and the worker then builds no example lists (they cost it ~20 % of its rate)."""
    from attn_cli.analyses import ray_engine
    from attn_cli.math.score_names import SCORES

    worker = ray_engine.Scorer(tiny.loaded_as, 1)
    config = tiny.backend.model.config
    layers, heads = list(range(config.num_hidden_layers)), list(range(config.num_attention_heads))
    batches = [list(enumerate(sentences(12, seed=9)))]
    job = ray_engine.Job(layers, heads, False, False, (len(layers), len(heads)), 3, 2, False, SCORES)
    full, _ = worker.run(job, batches)
    bare, _ = worker.run(job._replace(examples=False), batches)
    assert any(len(column) for column in full.top.values()) and all(len(c) == 0 for c in bare.top.values())
    assert bare.count.tolist() == full.count.tolist() and bare.total.tolist() == full.total.tolist()


def test_minilm_on_ray_equals_minilm_here(cluster, tmp_path):
    """No store: the parts are the local run's read-ahead windows (fold.part_size), the report the same."""
    import attn_cli

    model = attn_cli.load("minilm", device="cpu")
    texts = sentences(40, seed=5)
    here = model.heads(texts, batch_size=8, part_texts=16)
    there = model.heads(texts, batch_size=8, part_texts=16, engine="ray", workers=1)
    assert there.to_json_dict() == here.to_json_dict()


def test_ray_data_reads_a_corpus_at_a_url_as_attn_reads_the_file(cluster, tmp_path):
    """local:// is read by Ray Data as s3:// would be: the same texts in the same order (text_ids)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from attn_cli.analyses.ray_engine import url_texts
    from attn_cli.plumbing.corpus import open_corpus

    texts = sentences(50, seed=9)
    (tmp_path / "lines.txt").write_text("\n".join([*texts[:20], "   ", *texts[20:]]) + "\n")
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps({"text": text}) + "\n" for text in texts))
    pq.write_table(pa.table({"body": [*texts[:10], None, *texts[10:]]}), tmp_path / "rows.parquet")
    for name, column in (("lines.txt", "text"), ("rows.jsonl", "text"), ("rows.parquet", "body")):
        expected = list(open_corpus(tmp_path / name, column).texts())
        assert expected == texts
        assert list(url_texts(f"local://{tmp_path / name}", column)) == expected, name


def test_the_cli_starts_its_workers_before_it_loads_its_model(cluster, tiny_bert_dir, small, tmp_path, monkeypatch):
    """`attn heads --engine ray`: the workers are made (and load the model) first, while this process loads its
    own, and the run takes those workers (one set made, none left over); the report is the local run's."""
    import attn_cli.backends.registry as registry
    from attn_cli.analyses import ray_engine

    events = []
    made, loads = ray_engine.Workers.__init__, registry.load_backend
    monkeypatch.setattr(
        ray_engine.Workers, "__init__", lambda self, *args: (events.append("workers"), made(self, *args))[1]
    )
    monkeypatch.setattr(
        registry, "load_backend", lambda *args, **kwargs: (events.append("load"), loads(*args, **kwargs))[1]
    )
    common = [
        "heads",
        "--file",
        str(small),
        "--model",
        str(tiny_bert_dir),
        "--device",
        "cpu",
        "--batch-size",
        "8",
        "--json",
        "-o",
    ]
    here = CliRunner().invoke(app, [*common, str(tmp_path / "here.json")])
    events.clear()
    there = CliRunner().invoke(app, [*common, str(tmp_path / "there.json"), "--engine", "ray", "--workers", "2"])
    assert here.exit_code == 0 and there.exit_code == 0, there.output
    assert events == ["workers", "load"] and not ray_engine.WAITING
    assert (tmp_path / "here.json").read_text() == (tmp_path / "there.json").read_text()
