"""What every resumable store of a corpus run shares (`attn ablate --store`, `attn kv --store`): the directory
rule checked before a model loads, and DIR/run.json, the run's identity, written when the store starts and
compared when it is resumed, so a store is only ever continued by the run that made it."""

from __future__ import annotations

import json
from pathlib import Path

from attn_cli.plumbing.errors import AttnError, BadInput

RUN = "run.json"
VERSION = 1


def check_run_store(path: Path, resume: bool, command: str) -> None:
    """Before the model loads: DIR is absent, an empty directory, or (with --resume) a store of `command`."""
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
        raise BadInput(f"--store {path} is not an attn {command} store (no {RUN})", "name a new or empty directory")


def open_run(path: Path, identity: dict, resume: bool, command: str) -> bool:
    """The store at `path` for the run `identity` names: a new one (run.json written; False) or, resumed, one
    whose run.json names the same run (True); another run's store is refused in one line."""
    check_run_store(path, resume, command)
    path.mkdir(parents=True, exist_ok=True)
    run = path / RUN
    if not run.is_file():
        run.write_text(json.dumps({"version": VERSION, **identity}, indent=1) + "\n", encoding="utf-8")
        return False
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
    return True
