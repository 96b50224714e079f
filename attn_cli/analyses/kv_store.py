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
import os
from pathlib import Path

import numpy as np

from attn_cli.analyses.run_store import open_run
from attn_cli.plumbing.errors import AttnError, BadInput

TOTALS = "totals.npz"


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
        self.path = Path(path)
        self.state: dict[str, np.ndarray] | None = None
        if open_run(self.path, identity, resume, "kv") and (self.path / TOTALS).is_file():
            try:
                with np.load(self.path / TOTALS, allow_pickle=False) as arrays:
                    self.state = {name: arrays[name] for name in arrays.files}
            except (OSError, ValueError) as error:
                raise AttnError(f"{self.path / TOTALS} is damaged: {error}", "start the store again") from None

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
