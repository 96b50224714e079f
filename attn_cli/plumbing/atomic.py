"""Every output file attn writes (-o, --save, --save-tensors, --save-weights) is written here, atomically.

The content goes to a temporary file beside the target (`NAME.tmp-XXXXXXXX`, same directory so the
rename stays on one filesystem), is flushed and fsynced, and only then renamed over the target with
os.replace. A run that fails, is interrupted (SIGINT, SIGTERM) or dies leaves any existing file as it
was; the temporary file is removed on every exception. Concurrent runs each rename a complete file.
`check_writable` tells, before a model is loaded, whether a target can be written at all.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path
from typing import IO, Iterator

from attn_cli.plumbing import interrupts
from attn_cli.plumbing.errors import AttnError

TEMP_MARK = ".tmp-"


def check_writable(path: Path | None, option: str = "") -> None:
    """Fail in milliseconds (exit 1), before any model loads, when `path` cannot be written."""
    if path is None:
        return
    path = Path(path)
    label = f"{option} {path}".strip()
    if path.is_dir():
        raise AttnError(f"cannot write {label}: it is a directory", "name a file")
    target = _real(path)
    parent = target.parent
    if not parent.exists():
        raise AttnError(f"cannot write {label}: directory {parent} does not exist")
    if not parent.is_dir():
        raise AttnError(f"cannot write {label}: {parent} is not a directory")
    if target.exists() and not target.is_file():  # /dev/null, /dev/stdout, a FIFO: written in place
        if not os.access(target, os.W_OK):
            raise AttnError(f"cannot write {label}: permission denied")
        return
    if target.exists() and not os.access(target, os.W_OK):
        raise AttnError(f"cannot write {label}: the file is read-only", "remove it or choose another name")
    try:
        with _temporary(target):  # can a file be created beside it? (read-only place, no permission)
            pass
    except OSError as error:
        raise AttnError(f"cannot write {label}: {error.strerror or error}") from None


@contextlib.contextmanager
def atomic_path(path: Path, option: str = "") -> Iterator[Path]:
    """A temporary path to write (by a library that takes a file name); renamed onto `path` on success.

    OSError and safetensors' SafetensorError while writing become one AttnError (exit 1).
    """
    path = Path(path)
    target = _real(path)
    if target.exists() and not target.is_file():  # a device or FIFO cannot be replaced: write it directly
        with _write_errors(path, option):
            yield target
        return
    with _write_errors(path, option), _temporary(target) as temp:
        yield temp
        _sync(temp)
        with interrupts.deferred():
            _copy_mode(target, temp)
            os.replace(temp, target)
            _sync_directory(target.parent)


@contextlib.contextmanager
def atomic_open(path: Path, mode: str = "w", option: str = "", encoding: str | None = "utf-8") -> Iterator[IO]:
    """An open file whose content replaces `path` only when the block completes."""
    with atomic_path(path, option) as temp:
        with open(temp, mode, encoding=None if "b" in mode else encoding) as handle:
            yield handle
            handle.flush()


@contextlib.contextmanager
def _temporary(target: Path) -> Iterator[Path]:
    """Create NAME.tmp-XXXXXXXX beside target; remove it when the block raises, or leaves it behind."""
    with interrupts.deferred():  # created and registered for removal as one step
        handle, name = tempfile.mkstemp(prefix=target.name + TEMP_MARK, dir=target.parent)
        os.close(handle)
    temp = Path(name)
    try:
        yield temp
    finally:
        with interrupts.deferred():
            with contextlib.suppress(FileNotFoundError):
                temp.unlink()


@contextlib.contextmanager
def _write_errors(path: Path, option: str) -> Iterator[None]:
    label = f"{option} {path}".strip()
    try:
        yield
    except OSError as error:
        raise AttnError(f"cannot write {label}: {error.strerror or error}") from None
    except Exception as error:
        if type(error).__name__ != "SafetensorError":
            raise
        raise AttnError(f"cannot write {label}: {' '.join(str(error).split())}") from None


def _real(path: Path) -> Path:
    """Through symlinks: the file that will really be written (its link stays a link)."""
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def _sync(path: Path) -> None:
    with open(path, "rb+") as handle:
        os.fsync(handle.fileno())


def _sync_directory(directory: Path) -> None:
    """Make the rename itself durable (best effort: not every platform can open a directory)."""
    with contextlib.suppress(OSError):
        handle = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(handle)
        finally:
            os.close(handle)


def _copy_mode(target: Path, temp: Path) -> None:
    """The new file gets the old one's permissions, or the usual 0666 less the umask (mkstemp makes 0600)."""
    try:
        mode = stat.S_IMODE(target.stat().st_mode)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    os.chmod(temp, mode)


def check_all_writable(paths: dict[str, Path | None]) -> None:
    """check_writable for each option's path that was given: {"-o": Path(...), "--save-tensors": None}."""
    for option, path in paths.items():
        check_writable(path, option)
