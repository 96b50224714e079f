"""The store of `attn kv --file CORPUS --store DIR`: the profile's running sums, written after every chunk of
texts, so a run that stops continues with `--resume` from the chunk after the last one written.

DIR/run.json     the run's identity: the model, its dtype, the corpus and the settings that decide the numbers
DIR/totals.npz   analyses/kv.Totals as arrays (every sum, count and keys-needed histogram), the texts it covers
                 and a SHA-256 of them in order, replaced whole (written beside it, then renamed) after each chunk

A resumed run must be the same run (its identity) over the same corpus: the first texts it reads again must
hash to what the store covers, and are then skipped.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np

from attn_cli.plumbing.errors import AttnError, BadInput

RUN = "run.json"
TOTALS = "totals.npz"
VERSION = 1


def check_kv_store(path: Path, resume: bool) -> None:
    """Before the model loads: DIR is absent, an empty directory, or (with --resume) a kv store."""
    path = Path(path)
    if not path.exists():
        if resume:
            raise BadInput(f"--resume: {path} does not exist", "drop --resume to start the store")
        return
    if not path.is_dir():
        raise BadInput(f"--store {path} is not a directory", "name a new or empty directory")
    if not any(path.iterdir()):
        return
    if not resume:
        raise BadInput(f"--store {path} is not empty", "add --resume to continue it, or name a new or empty directory")
    if not (path / RUN).is_file():
        raise BadInput(f"--store {path} is not an attn kv store (no {RUN})", "name a new or empty directory")


def text_digest(texts: list[str], digest=None):
    """A running SHA-256 of texts in order (each with its length, so no two lists of texts collide)."""
    digest = digest or hashlib.sha256()
    for text in texts:
        encoded = text.encode("utf-8")
        digest.update(len(encoded).to_bytes(8, "little") + encoded)
    return digest


class KVStore:
    """An open store: what it covers (state: the saved arrays, or None), and save() after each chunk."""

    def __init__(self, path: Path, identity: dict, resume: bool):
        check_kv_store(path, resume)
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.state: dict[str, np.ndarray] | None = None
        run = self.path / RUN
        if run.is_file():
            try:
                written = json.loads(run.read_text(encoding="utf-8"))
            except ValueError as error:
                raise AttnError(f"{run} is damaged: {error}", "start the store again in a new directory") from None
            if written != {"version": VERSION, **identity}:
                changed = sorted(key for key in {**written, **identity} if written.get(key) != identity.get(key))
                raise BadInput(
                    f"--resume: {path} was written by another run (its {', '.join(changed) or 'version'} differ)",
                    "resume with the options it was made with (see its run.json), or name a new directory",
                )
            if (self.path / TOTALS).is_file():
                try:
                    with np.load(self.path / TOTALS, allow_pickle=False) as arrays:
                        self.state = {name: arrays[name] for name in arrays.files}
                except (OSError, ValueError) as error:
                    raise AttnError(f"{self.path / TOTALS} is damaged: {error}", "start the store again") from None
        else:
            run.write_text(json.dumps({"version": VERSION, **identity}, indent=1) + "\n", encoding="utf-8")

    @property
    def texts(self) -> int:
        return 0 if self.state is None else int(self.state["texts"])

    def check_texts(self, digest: str) -> None:
        """The corpus' first texts hash to what the store covers."""
        if self.state is not None and str(self.state["digest"]) != digest:
            raise BadInput(
                f"--resume: the corpus' first {self.texts} texts are not the ones {self.path} covers",
                "resume over the corpus the store was started with",
            )

    def save(self, arrays: dict[str, np.ndarray]) -> None:
        """The arrays, replacing the last ones whole: written beside them, fsynced, then renamed."""
        target = self.path / TOTALS
        partial = self.path / (TOTALS + ".writing")
        with open(partial, "wb") as stream:
            np.savez(stream, **arrays)  # type: ignore[arg-type]  # numpy's stub reads a key as allow_pickle
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(partial, target)
        self.state = arrays
