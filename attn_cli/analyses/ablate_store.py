"""The store of `attn ablate --file CORPUS --store DIR`: every text's ablations, kept as they are made, so a run
that stops (Ctrl-C, a crash, the machine going away) continues with `--resume` from the text after the last
one written.

DIR/run.json      the run's identity: the model, its dtype, the corpus and the options that decide the numbers
DIR/texts.jsonl   a line per finished text, in corpus order: {"index", "text", "clean", "values"} (values: the
                  metric with each ablation's heads removed, in the order the options give them)

A line is written whole, flushed and fsynced before the next text starts; a last line cut short by a crash is
dropped when the store is read. A resumed run must be the same run (its identity) over the same corpus (the
texts written must be the corpus' first ones).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from attn_cli.analyses.run_store import open_run
from attn_cli.plumbing.errors import AttnError, BadInput

TEXTS = "texts.jsonl"


class AblationStore:
    """An open store: the records already written, and append() for the next text's."""

    def __init__(self, path: Path, identity: dict, resume: bool):
        self.path = Path(path)
        resumed = open_run(self.path, identity, resume, "ablate")
        self.records: list[dict] = _read_records(self.path / TEXTS) if resumed else []

    def check_corpus(self, index: int, text: str) -> None:
        """The corpus' text `index` is the one the store holds for it."""
        if index < len(self.records) and self.records[index]["text"] != text:
            raise BadInput(
                f"--resume: text {index + 1} of the corpus is not the one {self.path} holds",
                "resume over the corpus the store was started with",
            )

    def append(self, record: dict) -> None:
        with open(self.path / TEXTS, "a", encoding="utf-8") as stream:
            stream.write(json.dumps(record) + "\n")
            stream.flush()
            os.fsync(stream.fileno())
        self.records.append(record)


def _read_records(path: Path) -> list[dict]:
    """The whole lines of texts.jsonl, in order; a last line cut short (no newline, or not JSON) is dropped and
    the file trimmed to the lines kept, so the next append starts on a line of its own."""
    if not path.is_file():
        return []
    content = path.read_bytes()
    lines = content.split(b"\n")  # the last item is what follows the last newline: b"" unless cut short
    records: list[dict] = []
    kept = 0
    for number, line in enumerate(lines[:-1]):  # the whole lines
        kept += len(line) + 1
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            raise AttnError(
                f"{path} is damaged at line {number + 1}", "start the store again in a new directory"
            ) from None
        if not isinstance(record, dict) or record.get("index") != len(records):
            raise AttnError(f"{path} is damaged at line {number + 1}: not the next text", "start the store again")
        records.append(record)
    if kept != len(content):  # a line cut short by a crash: dropped, so the next append starts a line of its own
        with open(path, "r+b") as stream:
            stream.truncate(kept)
    return records
