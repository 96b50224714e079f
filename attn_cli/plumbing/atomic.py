"""Every output file attn writes (-o, --save, --save-tensors, -O save_weights=FILE) is written here, atomically.

A regular file (or a name not yet taken): the content goes to a temporary file beside the target
(`NAME.tmp-XXXXXXXX`, same directory so the rename stays on one filesystem), is flushed and fsynced, and
only then renamed over the target with os.replace. A run that fails, is interrupted (SIGINT, SIGTERM) or
dies leaves any existing file as it was; the temporary file is removed on every exception. Concurrent runs
each rename a complete file.

A character device or a FIFO (/dev/null, /dev/stdout into a pipe, `<(…)`'s sibling `>(…)`) cannot be
replaced: it is written in place, and a library that wants a file name (safetensors writes a temporary
file and renames it itself) gets a temporary file that is copied into it when complete. attn's own stdout
or stderr named as a path (`-o /dev/stdout > out.json`, also `>> log`) is written through its descriptor,
so the shell's redirection holds. Anything else that exists and is not a regular file (a directory, a
socket, a block device) is never written: a usage error (exit 2) naming the path.

`check_writable` tells, before a model is loaded, whether a target can be written at all.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from attn_cli.plumbing import interrupts
from attn_cli.plumbing.errors import AttnError, BadInput

TEMP_MARK = ".tmp-"


def check_writable(path: Path | None, option: str = "") -> None:
    """Fail in milliseconds, before any model loads, when `path` cannot be written: exit 2 for a path that
    is not a file at all (a directory, a socket), exit 1 for a place that cannot be written."""
    if path is None:
        return
    path = Path(path)
    label = f"{option} {path}".strip()
    if in_place(path, option):  # a device or FIFO: never opened here (a FIFO would wait for its reader)
        if not os.access(path, os.W_OK):
            raise AttnError(f"cannot write {label}: permission denied")
        return
    target = _real(path)
    parent = target.parent
    if not parent.exists():
        raise AttnError(f"cannot write {label}: directory {parent} does not exist")
    if not parent.is_dir():
        raise AttnError(f"cannot write {label}: {parent} is not a directory")
    if target.exists() and not os.access(target, os.W_OK):
        raise AttnError(f"cannot write {label}: the file is read-only", "remove it or choose another name")
    try:
        with _temporary(target):  # can a file be created beside it? (read-only place, no permission)
            pass
    except OSError as error:
        raise AttnError(f"cannot write {label}: {error.strerror or error}") from None


def in_place(path: Path, option: str = "") -> bool:
    """Whether `path` is written in place (a character device, a FIFO, attn's own stdout or stderr) rather
    than replaced by a renamed temporary file (a regular file, or nothing yet). BadInput (exit 2) for what
    is neither: a directory, a socket, a block device."""
    try:
        status = os.stat(path)  # through symlinks: what would be written
    except OSError:  # absent, or a dangling link: created; a path under a file: check_writable says so
        return False
    mode = status.st_mode
    if stat.S_ISREG(mode):
        return _std_stream(status) is not None
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        return True
    what = (
        "a directory"
        if stat.S_ISDIR(mode)
        else "a socket"
        if stat.S_ISSOCK(mode)
        else "a block device"
        if stat.S_ISBLK(mode)
        else "not a regular file"
    )
    raise BadInput(
        f"cannot write {f'{option} {path}'.strip()}: it is {what}",
        "name a regular file (or a FIFO or a character device such as /dev/stdout)",
    )


@contextlib.contextmanager
def atomic_path(path: Path, option: str = "") -> Iterator[Path]:
    """A temporary path to write (by a library that takes a file name); renamed onto `path` on success, or
    copied into it when `path` is written in place (a device, a FIFO, our stdout).

    OSError and safetensors' SafetensorError while writing become one AttnError (exit 1).
    """
    path = Path(path)
    if in_place(path, option):  # never handed to the library: it might rename over the device node
        with _write_errors(path, option), _temporary(Path(tempfile.gettempdir()) / "attn-output") as temp:
            yield temp
            with open(temp, "rb") as source, _open_in_place(path, "wb") as sink:
                shutil.copyfileobj(source, sink)
        return
    target = _real(path)
    with _write_errors(path, option), _temporary(target) as temp:
        yield temp
        _sync(temp)
        with interrupts.deferred():
            _copy_mode(target, temp)
            os.replace(temp, target)
            _sync_directory(target.parent)


@contextlib.contextmanager
def atomic_open(path: Path, mode: str = "w", option: str = "", encoding: str | None = "utf-8") -> Iterator[IO]:
    """An open file whose content replaces `path` only when the block completes (a device, a FIFO or our
    stdout: written as it comes, so a JSON document streams into a pipe)."""
    encoding = None if "b" in mode else encoding
    if in_place(Path(path), option):
        with _write_errors(Path(path), option), _open_in_place(Path(path), mode, encoding) as handle:
            yield handle
            handle.flush()
        return
    with atomic_path(path, option) as temp:
        with open(temp, mode, encoding=encoding) as handle:
            yield handle
            handle.flush()


def _open_in_place(path: Path, mode: str, encoding: str | None = None) -> IO:
    """Open a device or FIFO by its name; attn's own stdout or stderr through a copy of its descriptor, so
    reopening cannot truncate what the shell appends to (`>> log`) or lose a pipe."""
    stream = _std_stream(os.stat(path))
    if stream is None:
        return open(path, mode, encoding=encoding)
    stream.flush()  # what was printed before comes first
    return open(os.dup(stream.fileno()), mode, encoding=encoding)


def _std_stream(status: os.stat_result) -> IO | None:
    """sys.stdout or sys.stderr when its descriptor is the file `status` describes; else None."""
    for stream in (sys.stdout, sys.stderr):
        try:
            own = os.fstat(stream.fileno())
        except (AttributeError, OSError, ValueError):  # closed, or not a real file (a test's buffer)
            continue
        if (own.st_dev, own.st_ino) == (status.st_dev, status.st_ino):
            return stream
    return None


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


def check_not_inputs(outputs: dict[str, Path | None], inputs: list[tuple[str, Path]]) -> None:
    """An output that is a file the command reads (the same file by device and inode, whatever its name or
    the symlinks to it) would replace that input with the report: BadInput (exit 2), before anything runs.
    outputs: {"-o": Path, …}; inputs: ("--file c.txt", Path), … Only an existing regular file can be both."""
    read: dict[tuple[int, int], str] = {}
    for label, path in inputs:
        identity = _identity(path)
        if identity is not None:
            read.setdefault(identity, label)
    for option, output in outputs.items():
        identity = _identity(output) if output is not None else None
        reader = read.get(identity) if identity is not None else None
        if reader is not None:
            raise BadInput(
                f"{option} {output} is {reader}, which this command reads",
                "write to another file: the input would be replaced",
            )


def _identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of a regular file, through symlinks; None for anything else or nothing."""
    try:
        status = os.stat(path)
    except (OSError, ValueError):
        return None
    return (status.st_dev, status.st_ino) if stat.S_ISREG(status.st_mode) else None
