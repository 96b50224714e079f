"""The files of a corpus store's parts/ folder, read and written by the one writer at a time.

read_part_file is the one reader of parts/run.json, a part's partial.json, partial.npz and texts.parquet: it
checks the file is what the writer wrote (JSON object, arrays without pickles, a Parquet table) and turns
any failure into one AttnError naming the file, saying the store is damaged and whether `--resume` can
recover it (a part: delete its folder and resume, which scores it again; run.json: no, the run it names is
unknown). StoreLock is the writer's lock (fcntl.flock on parts/writer.lock, the holder's pid inside): a
second writer is told which process writes the store, and the OS releases the lock when the process ends,
however it ends. resume_command rebuilds the `attn heads … --resume` line that completes a store.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

from attn_cli.plumbing.errors import AttnError

RUN_FILE = "run.json"  # in parts/: the run's identity
LOCK_FILE = "writer.lock"  # in parts/: held (flock) while a run writes the store
RUN_KEYS = ("store_version", "model", "dtype", "corpus", "corpus_format", "options")
PART_KEYS = ("digest", "partial")


def run_file_hint(store: Path) -> str:
    return (
        f"the store is damaged and --resume cannot recover it (the run it holds is unknown): write it again into a "
        f"new or empty directory (attn heads --file CORPUS --store NEWDIR), {store} is left as it is"
    )


def part_hint(folder: Path) -> str:
    return f"the store is damaged: delete {folder} and run again with --resume, which scores that part again"


def read_part_file(path: Path, hint: str, keys: tuple[str, ...] = ()):
    """A parts/ file by its suffix: .json → a dict holding `keys`; .npz → {name: array} (no pickles);
    .parquet → a pyarrow Table. Anything else than what the writer wrote: AttnError naming the file, with hint."""
    path = Path(path)
    try:
        if path.suffix == ".json":
            value = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(value, dict):
                raise ValueError(f"it holds a JSON {type(value).__name__}, not an object")
            missing = [key for key in keys if key not in value]
            if missing:
                raise ValueError(f"it has no {missing[0]!r}")
            return value
        if path.suffix == ".npz":
            import zipfile

            import numpy as np

            if path.is_file() and not zipfile.is_zipfile(path):  # np.load would take it for a pickle
                raise ValueError("not a NumPy .npz archive")
            try:
                with np.load(path, allow_pickle=False) as arrays:
                    return {name: arrays[name] for name in arrays.files}
            except (zipfile.BadZipFile, EOFError, KeyError) as error:
                raise ValueError(f"not a NumPy archive: {error}") from None
        import pyarrow.parquet as pq

        return pq.ParquetFile(path).read()  # ParquetFile.read, not read_table: read_table imports pandas
    except FileNotFoundError:
        raise AttnError(f"{path} is missing", hint) from None
    except (OSError, ValueError) as error:  # UnicodeDecodeError and pyarrow's ArrowInvalid are ValueErrors
        why = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise AttnError(f"{path} is not what attn wrote ({why})", hint) from None


def damaged(path: Path, why: str, hint: str) -> AttnError:
    return AttnError(f"{path} is not what attn wrote ({why})", hint)


class StoreLock:
    """parts/writer.lock, held with fcntl.flock (LOCK_EX, not waiting) from before a run touches the store until
    close(); the OS drops it when the process dies. The file is removed on close, so a store at rest has none."""

    def __init__(self, parts: Path, store: Path):
        self.path, self.fd = Path(parts) / LOCK_FILE, None
        try:
            import fcntl
        except ImportError:  # no flock (Windows): one writer at a time is then the user's to keep
            return
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                raise busy(store, holder(self.path)) from None
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:  # not a file its last holder removed as this run opened it
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self.fd = fd

    def close(self) -> None:
        if self.fd is not None:
            self.path.unlink(missing_ok=True)  # before the lock goes: a later writer opens a new file
            os.close(self.fd)
            self.fd = None


def holder(path: Path) -> str:
    try:
        return path.read_text().strip() or "?"
    except OSError:
        return "?"


def busy(store: Path, pid: str) -> AttnError:
    return AttnError(
        f"--store {store}: another run (pid {pid}) is writing it",
        "wait for it to end, or stop it and add --resume to continue its store",
    )


def check_unlocked(parts: Path, store: Path) -> None:
    """Before the model loads: a store another run holds is refused now, not after the load."""
    path = Path(parts) / LOCK_FILE
    try:
        import fcntl

        fd = os.open(path, os.O_RDONLY)
    except (ImportError, OSError):  # no lock file: nobody writes it
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        raise busy(store, holder(path)) from None
    finally:
        os.close(fd)  # the probe's lock, if it got one, goes with it


def resume_command(identity: dict, store: Path) -> str | None:
    """The `attn heads` line that continues the run of parts/run.json in store (None: texts given as arguments,
    which the store does not keep). Options at their defaults are left out."""
    options, model = identity.get("options") or {}, identity.get("model") or {}
    words: list[object] = ["attn", "heads"]  # str() each when joined: run.json keeps numbers as numbers
    if identity.get("corpus_format") == "probe" and isinstance(options.get("probe"), dict):
        probe = options["probe"]
        words += ["--probe", probe.get("kind"), "--seed", probe.get("seed"), "--probe-length", probe.get("requested")]
    elif identity.get("corpus_format") == "arguments" or not identity.get("corpus"):
        return None
    else:
        words += ["--file", "-" if identity["corpus"] == "stdin" else identity["corpus"]]
    words += ["--model", model.get("name")]
    if identity.get("dtype") not in (None, "float32"):
        words += ["--dtype", identity["dtype"]]
    for name, option, default in (
        ("layers", "--layer", model.get("layers")),
        ("heads", "--head", model.get("heads")),
    ):
        chosen = options.get(name)
        if isinstance(chosen, list) and chosen != list(range(default or 0)):
            words += [option, ",".join(str(index) for index in chosen)]
    for name, option, default in (
        ("batch_size", "--batch-size", 32),
        ("limit", "--limit", None),
        ("top", "--top", 10),
        ("samples", "--samples", 5),
        ("column", "--column", "text"),
        ("part_texts", "--part-texts", 2048),
    ):
        if options.get(name, default) != default:
            words += [option, options[name]]
    words += [flag for name, flag in (("truncate", "--truncate"), ("per_text", "--per-text")) if options.get(name)]
    words += ["--store", str(store), "--resume"]
    return " ".join(shlex.quote(str(word)) for word in words)
