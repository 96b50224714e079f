"""`attn heads --engine ray`: the corpus fold of analyses/fold.py with its batches scored by Ray actors.

The driver reads the corpus and cuts it into the same parts as a local run (consecutive text_ids, the
same length sort, the same batches), so which texts share a batch never depends on scheduling. Each
part's batches go out in chunks of CHUNK_BATCHES to stateful actors (each loads the model once, with
device_map inside the actor when asked) that run fold.score_batches, the loop a local run runs, and send
back the chunk's Partial. A part's chunk Partials merge into the part's Partial exactly as a local run's
batches do (math/partials.py: integer sums, totally ordered lists), so the part written to the store and
the run's merge are the same in any order of completion: a Ray run is a local run, bit for bit.

Why actors fed by the driver rather than Ray Data's map_batches: a text's text_id (its index in read
order) and its part must not depend on how Ray Data splits and schedules blocks, and Ray Data has no
global row index short of materialising the corpus; mapping the driver's own chunks with map_batches
would be exact, but Ray Data takes a list, not a running iterator (the corpus's chunks up front, or an
actor pool and a model load per window). Here memory is a window of chunks in flight, a model load a
worker a run. The CLI starts the workers (prestart) before it loads its own model, so the two overlap; an
API caller may keep a run's workers, their model loaded, for its next run with the same arguments
(keep_workers: a worker's start, seconds of imports and a model load, is then paid once, not a run).
Restarts are Ray's own: an actor whose process dies is restarted (max_restarts) and its unfinished
chunks are re-run on it (max_task_retries); a chunk's result depends only on its texts, so the re-run
gives the same Partial. Corpora at object-store URLs (s3://, gs://, …)
are read by Ray Data (`url_texts`), in order.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import NamedTuple

from attn_cli.analyses import fold as folding
from attn_cli.data.arguments import number
from attn_cli.math import partials
from attn_cli.plumbing import interrupts
from attn_cli.plumbing.errors import AttnError, BadInput

INSTALL = "pip install 'attn-cli[ray]'"
CHUNK_BATCHES = 4  # batches a task: the unit a worker runs and progress moves by
IN_FLIGHT = 2  # chunks queued per worker: one running, one waiting, so a worker never idles on the driver
RUNNING: list = []  # (actor, pid) of the run in progress: what a test kills
WAITING: list = []  # at most one Workers waiting for a run: started by prestart(), or kept by the run before
REACH_TIMEOUT = 5.0  # seconds a cluster's host:port has to accept a TCP connection (check_reachable)
URL_SCHEMES = ("s3://", "gs://", "gcs://", "abfs://", "az://", "hdfs://", "http://", "https://", "local://")


def require_ray():
    """The ray module, or a BadInput (exit 2) saying how to install it: asked before a model loads."""
    try:
        import ray
    except ImportError:
        raise BadInput("--engine ray needs Ray, which is not installed", INSTALL) from None
    return ray


def check_engine(engine: str, address: str | None, workers: int | None, gpus_per_worker: float) -> bool:
    """Whether the run is on Ray; the engine's own options checked (before a model loads)."""
    gpus_per_worker = number(gpus_per_worker, "--gpus-per-worker")  # NaN would pass `< 0` and reach int()
    if engine not in ("local", "ray"):
        raise BadInput(f"engine: unknown engine {engine!r}", "engines: local, ray")
    if engine == "local":
        given = [
            name
            for name, value in (("--address", address), ("--workers", workers), ("--gpus-per-worker", gpus_per_worker))
            if value
        ]
        if given:
            raise BadInput(f"{', '.join(given)} go with --engine ray (engine='ray')")
        return False
    require_ray()
    if workers is not None and workers < 1:
        raise BadInput(f"--workers must be 1 or more, not {workers}")
    if gpus_per_worker < 0:
        raise BadInput(f"--gpus-per-worker must be 0 or more, not {gpus_per_worker:g}")
    return True


def engine_for(
    loaded_as: dict | None,
    name: str,
    address: str | None,
    workers: int | None,
    gpus_per_worker: float,
    keep_workers: bool = False,
) -> Callable | None:
    """model.heads' engine: None for name "local", else engine() for the model loaded_as (Ray checked first).
    keep_workers is the API's alone (no CLI flag), so it is checked here, not among check_engine's flags."""
    if not check_engine(name, address, workers, gpus_per_worker):
        if keep_workers:
            raise BadInput("keep_workers goes with engine='ray'")
        return None
    if loaded_as is None:
        raise BadInput("engine='ray' needs a model made by attn_cli.load (the workers load it the same way)")
    return engine(loaded_as, address=address, workers=workers, gpus_per_worker=gpus_per_worker, keep=keep_workers)


def is_url(path) -> bool:
    return str(path).startswith(URL_SCHEMES)


class Job(NamedTuple):
    """What a chunk is scored for: sent with every chunk (a few hundred bytes)."""

    layers: list[int]
    heads: list[int]
    truncate: bool
    needle: bool
    shape: tuple[int, int]
    top: int
    samples: int
    per_text: bool
    names: tuple[str, ...]  # the scores (data/registry.score_names): the built-in ones, then the plugins'
    examples: bool = True  # the example lists only a store reads: False when none is written, as locally


class Scorer:
    """A Ray actor: the model loaded once, then chunks of a part's batches scored into Partials. What to
    score (layers, heads, …: a Job) comes with each chunk, so an actor can start before the run's
    selection is known (prestart) and a restarted one needs nothing but its constructor."""

    def __init__(self, loaded_as: dict, threads: int):
        import torch

        from attn_cli.backends.registry import load_backend

        torch.set_num_threads(threads)  # Ray's share of CPUs for this actor: workers on one node do not fight
        self.backend = load_backend(
            loaded_as["model"], device=loaded_as["device"], dtype=loaded_as["dtype"], **loaded_as["options"]
        )

    def pid(self) -> int:
        return os.getpid()

    def run(self, job: Job, batches: list[list[tuple[int, str]]]) -> tuple[partials.Partial, list[dict]]:
        from attn_cli.analyses.heads import score_texts

        scores = len(job.names)
        pending = [partials.Partial(job.shape, job.top, job.samples, scores=scores)]
        rows: list[dict] = []  # fold.per_text_rows of each batch

        def score(texts):
            return score_texts(self.backend, texts, job.layers, job.heads, job.truncate, job.needle, job.names)

        folding.score_batches(
            score, batches, pending, rows, per_text=job.per_text, names=job.names, examples=job.examples
        )
        return partials.merge_all(pending, job.shape, job.top, job.samples, scores), rows


class Workers:
    """The Scorer actors of one run, created (not waited for: each loads its model meanwhile) on the cluster
    this process joined; `started`: the cluster is a local one started for them, stopped with them."""

    def __init__(self, ray, loaded_as: dict, workers: int | None, gpus: float, started: bool):
        resources = ray.cluster_resources()
        if workers is None:
            workers = max(1, int(resources.get("GPU", 0) // gpus)) if gpus else 1
        if gpus and resources.get("GPU", 0) < gpus:
            raise BadInput(
                f"--gpus-per-worker {gpus:g}: the Ray cluster has {resources.get('GPU', 0):g} GPUs",
                "join a cluster with GPUs (--address) or leave --gpus-per-worker out",
            )
        cpus = max(1, int(resources.get("CPU", 1) // workers))  # torch threads as many: workers do not fight
        remote = ray.remote(Scorer).options(num_cpus=cpus, num_gpus=gpus or 0, max_restarts=-1, max_task_retries=-1)
        self.ray, self.started = ray, started
        self.asked: tuple | None = None  # _start's arguments
        self.job = ray.get_runtime_context().get_job_id()  # this process's stay on the cluster: live()
        self.actors = [remote.remote(loaded_as, cpus) for _ in range(workers)]

    def ready(self) -> list:
        """The actors once every model is loaded (a worker's load error is raised here, as itself)."""
        RUNNING[:] = [(actor, _get(self.ray, actor.pid.remote())) for actor in self.actors]
        return self.actors

    def live(self) -> bool:
        """Whether this process is still on the cluster these workers run on (not since shut down or left)."""
        return self.ray.is_initialized() and self.ray.get_runtime_context().get_job_id() == self.job

    def stop(self) -> None:
        for actor in self.actors:
            self.ray.kill(actor, no_restart=True)
        RUNNING.clear()
        if self.started:
            self.ray.shutdown()


def prestart(
    loaded_as: dict, *, address: str | None = None, workers: int | None = None, gpus_per_worker: float = 0.0
) -> None:
    """Join (or start) the cluster and start the workers now, before this process loads its own model:
    their start (a Python process, torch, the model) overlaps the driver's. The next engine() run with the
    same arguments takes them (`attn heads --engine ray`)."""
    WAITING.append(_start(loaded_as, address, workers, gpus_per_worker))


def drop_waiting() -> None:
    """Stop the waiting workers, freeing their CPUs and GPUs (those of a cluster since left are gone already)."""
    while WAITING:
        team = WAITING.pop()
        if team.live():
            team.stop()


def engine(
    loaded_as: dict,
    *,
    address: str | None = None,
    workers: int | None = None,
    gpus_per_worker: float = 0.0,
    keep: bool = False,
) -> Callable:
    """engine(layers, heads, truncate, needle) -> a fold with analyses/fold.fold's signature, run on Ray. keep: the
    workers stay alive after a run that was not interrupted, waiting for the next run with the same arguments
    (a run without keep takes them and stops them after; so do the process's end and ray.shutdown())."""
    require_ray()

    def make(layers: list[int], heads: list[int], truncate: bool, needle: bool) -> Callable:
        def fold_on_ray(
            score,
            texts: Iterable[str],
            shape,
            *,
            top: int,
            samples: int,
            names: tuple[str, ...],
            per_text: bool = False,
            **options,
        ) -> folding.Folded:
            team, folded = _workers(loaded_as, address, workers, gpus_per_worker), None
            try:
                job = Job(layers, heads, truncate, needle, shape, top, samples, per_text, names)
                folded = _fold(texts, job, team, **options)
                return folded
            finally:
                if keep and folded is not None and not folded.interrupted:
                    WAITING.append(team)
                else:
                    team.stop()

        return fold_on_ray

    return make


def _workers(loaded_as: dict, address: str | None, workers: int | None, gpus: float) -> Workers:
    """The waiting workers when they were asked for with these arguments, else new ones (a waiting set that
    does not match is stopped first: its actors hold the cluster's CPUs)."""
    if WAITING and WAITING[0].asked == (loaded_as, address, workers, gpus) and WAITING[0].live():
        return WAITING.pop()
    return _start(loaded_as, address, workers, gpus)


def _start(loaded_as: dict, address: str | None, workers: int | None, gpus: float) -> Workers:
    drop_waiting()
    started = connect(address)
    try:
        team = Workers(require_ray(), loaded_as, workers, gpus, started)
    except BaseException:
        if started:
            require_ray().shutdown()
        raise
    team.asked = (loaded_as, address, workers, gpus)
    return team


def connect(address: str | None) -> bool:
    """Join the cluster at `address`, or the one this process already joined, or start a local one (then
    True: ours to shut down). Ray's own log lines stay off attn's stderr."""
    import logging

    ray = require_ray()
    if ray.is_initialized():
        return False
    if address:
        check_reachable(address)
    local = {} if address else {"include_dashboard": False}  # Ray refuses node settings for a cluster it joins
    try:
        ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR, **local)
    except (ConnectionError, RuntimeError, ValueError) as error:
        where = f"at {address}" if address else "here"
        raise AttnError(f"cannot reach a Ray cluster {where}: {_first_line(error)}") from None
    return address is None


def check_reachable(address: str, timeout: float = REACH_TIMEOUT) -> None:
    """A plain TCP connect to the cluster's host:port before ray.init, which with nothing there retries for
    minutes, printing the GCS client's warnings. "auto", "local" and an address without a port go to Ray as
    they are; ray://host:port (Ray Client) is checked like host:port."""
    import socket

    where = address.removeprefix("ray://")
    host, colon, port = where.rpartition(":")
    if not colon or not port.isdigit() or address in ("auto", "local"):
        return
    host = host.strip("[]")  # [::1]:6379
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return
    except TimeoutError:
        why = f"no answer within {timeout:g} s"
    except OSError as error:  # refused, no route, an unknown host name
        why = (error.strerror or str(error)).lower()
    raise AttnError(
        f"cannot reach a Ray cluster at {address}: {why}",
        "start one there (ray start --head) or give the head's host:port with --address",
    )


def _fold(
    texts, job: Job, team: Workers, *, batch_size: int, part_texts: int, progress=None, total=None, keeper=None
) -> folding.Folded:
    ray = require_ray()
    job = job._replace(examples=keeper is not None)  # the local fold's rule: no store, no example lists
    shape, top, samples, scores = job.shape, job.top, job.samples, len(job.names)
    merged = partials.Partial(shape, top, samples, scores=scores)
    done = parts = 0
    open_parts: dict[int, dict] = {}  # index -> {"digest", "left", "partials", "rows"}
    in_flight: dict = {}  # ObjectRef -> (part index, actor index)
    load: list[int] = []  # chunks in flight per worker

    def collect() -> None:
        """Wait for one chunk; a part whose chunks are all back is merged, written and counted."""
        nonlocal merged, done, parts
        ready, _ = ray.wait(list(in_flight), num_returns=1)
        index, actor = in_flight.pop(ready[0])
        load[actor] -= 1
        chunk, rows = _get(ray, ready[0])
        state = open_parts[index]
        state["partials"].append(chunk)
        state["rows"] += rows
        state["left"] -= 1
        done += chunk.texts
        if state["left"] == 0:
            current = partials.merge_all(open_parts.pop(index)["partials"], shape, top, samples, scores)
            if keeper is not None:
                keeper.write(index, current, state["rows"], state["digest"])
            merged = partials.merge(merged, current)
            parts += 1
            if keeper is not None:
                keeper.progress(merged, parts)
        if progress is not None:
            progress(done, total)

    try:
        actors = team.ready()  # inside the try: Ctrl-C while the models load stops them (the caller's finally)
        load += [0] * len(actors)
        window = IN_FLIGHT * len(actors)
        size = folding.part_size(part_texts, batch_size, keeper is not None)
        for index, part in enumerate(folding.text_parts(texts, size)):
            digest = folding.part_digest(part)
            kept = keeper.load(index, digest) if keeper is not None else None
            if kept is not None:
                merged, parts, done = partials.merge(merged, kept), parts + 1, done + kept.texts
                keeper.progress(merged, parts)
                if progress is not None:
                    progress(done, total)
                continue
            batches = list(folding.part_batches(part, batch_size))
            chunks = [batches[at : at + CHUNK_BATCHES] for at in range(0, len(batches), CHUNK_BATCHES)]
            open_parts[index] = {"digest": digest, "left": len(chunks), "partials": [], "rows": []}
            for chunk in chunks:
                while len(in_flight) >= window:
                    collect()
                actor = load.index(min(load))  # the least busy worker
                in_flight[actors[actor].run.remote(job, chunk)] = (index, actor)
                load[actor] += 1
        while in_flight:
            collect()
    except KeyboardInterrupt as interrupt:
        for ref in in_flight:
            ray.cancel(ref, force=False)
        if isinstance(interrupt, interrupts.Terminated):
            raise
        # the report covers the texts done: complete parts and the chunks back from unfinished ones
        merged = partials.merge_all(
            [merged, *(p for state in open_parts.values() for p in state["partials"])], shape, top, samples, scores
        )
        if merged.texts == 0:
            raise
        return folding.Folded(merged, parts, True)
    return folding.Folded(merged, parts, False)


def _get(ray, ref):
    """ray.get, with an attn error raised in a worker (a model that does not load) raised here as itself."""
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as error:
        cause = getattr(error, "cause", None)
        if isinstance(cause, AttnError):
            raise cause from None
        raise AttnError(f"a Ray worker failed: {_first_line(cause or error)}") from None
    except ray.exceptions.RayActorError as error:
        raise AttnError(f"a Ray worker could not start: {_first_line(error)}") from None


def url_texts(url: str, column: str = "text") -> Iterable[str]:
    """The texts of a corpus at an object-store URL, read by Ray Data in order: Parquet (its `column`),
    JSONL (its `column` field) or text lines; null and blank values are not texts, as in plumbing/corpus.py."""
    ray = require_ray()
    connect(None)
    context = ray.data.DataContext.get_current()
    context.execution_options.preserve_order = True  # text_id = read order, whatever the scheduling
    kind = url_format(url)
    if kind == "parquet":
        dataset = ray.data.read_parquet(url).select_columns([column])
    elif kind == "jsonl":
        dataset = ray.data.read_json(url, lines=True)
    else:
        dataset, column = ray.data.read_text(url), "text"
    for batch in dataset.iter_batches(batch_size=1024, batch_format="pyarrow"):
        if column not in batch.column_names:
            raise BadInput(f"--file {url} has no column {column!r}", "name the text column with --column")
        for text in batch.column(column).to_pylist():
            if isinstance(text, str) and text.strip():
                yield text


def url_format(url: str) -> str:
    """ "parquet" (a .parquet file, or a folder: of Parquet files), "jsonl" or "lines", by the URL's suffix."""
    name = url.lower().rstrip("/").rsplit("/", 1)[-1]
    if name.endswith((".parquet", ".pq")) or "." not in name:
        return "parquet"
    return "jsonl" if name.endswith((".jsonl", ".ndjson", ".json")) else "lines"


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__
