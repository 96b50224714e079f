"""Paths that are not regular files, as outputs and as inputs: FIFOs, character devices (twins of /dev/null
and /dev/full made here with mknod, never the real /dev), sockets, directories, attn's own stdout.

An output that is a character device or a FIFO is written in place and never replaced (not even by a
library that renames its own temporary file); anything else that is not a regular file is a usage error."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import stat
from pathlib import Path

import pytest
from conftest import isolate, patience
from test_hardening import attn, one_line_error, run_attn, temp_files

ROOT_ONLY = pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0, reason="mknod of a character device needs root"
)


@pytest.fixture(autouse=True)
def isolated_env(monkeypatch):
    isolate(monkeypatch, 120)


def char_device(path: Path, minor: int) -> Path:
    """A private twin of /dev/null (minor 3) or /dev/full (minor 7) inside the test's directory."""
    os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, minor))
    return path


@ROOT_ONLY
def test_a_full_disk_is_one_line(tmp_path):
    """A /dev/full twin as -o: the write fails with ENOSPC, one line, exit 1 (never the real /dev/full)."""
    one_line_error(
        attn("inspect", "hello", "--model", "toy", "-o", char_device(tmp_path / "full", 7)),
        1,
        "No space left on device",
    )


@ROOT_ONLY
def test_a_device_output_is_written_in_place(tmp_path):
    """A /dev/null twin as -o is written through and is still the device afterwards."""
    device = char_device(tmp_path / "null", 3)
    result = attn("inspect", "hello", "--model", "toy", "-o", device)
    assert result.exit_code == 0, result.stderr
    assert stat.S_ISCHR(os.stat(device).st_mode)


@contextlib.contextmanager
def fifo_reader(path: Path):
    """A FIFO at path with its reading end already open (so a writer never waits); yields read() -> bytes,
    everything written so far. The pipe is widened so a small report fits without a reader thread."""
    import fcntl

    os.mkfifo(path)
    handle = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with contextlib.suppress(OSError):
        fcntl.fcntl(handle, getattr(fcntl, "F_SETPIPE_SZ", 1031), 1 << 20)

    def read() -> bytes:
        chunks = []
        with contextlib.suppress(BlockingIOError):
            while chunk := os.read(handle, 1 << 16):
                chunks.append(chunk)
        return b"".join(chunks)

    try:
        yield read
    finally:
        os.close(handle)


# --- outputs ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "option, name", [("-o", "out.json"), ("--save-tensors", "out.safetensors"), ("--save", "out.svg")]
)
def test_a_fifo_output_is_written_in_place(tmp_path, option, name):
    """safetensors renames its own temporary file over the name it is given: it must never see the FIFO."""
    target = tmp_path / name
    with fifo_reader(target) as read:
        extra = ("--json",) if option == "--save-tensors" else ()
        result = attn("inspect", "hello", "--model", "toy", option, target, *extra)
        assert result.exit_code == 0, result.stderr
        data = read()
    assert stat.S_ISFIFO(os.lstat(target).st_mode), "the FIFO was replaced by a file"
    if option == "-o":
        assert json.loads(data)["text"] == "hello"
    elif option == "--save-tensors":
        from safetensors.torch import load

        assert "layers.0.heads.0.weights" in load(data)
    else:
        assert data.startswith(b"<svg")
    assert temp_files(tmp_path) == []


@ROOT_ONLY
@pytest.mark.parametrize(
    "option, name",
    [("--save-tensors", "full.safetensors"), ("-o", "full.json"), ("--save", "full.svg"), ("-O", "w.safetensors")],
)
def test_a_symlink_to_a_character_device_keeps_the_device(tmp_path, option, name):
    """A link to a /dev/null twin is written through; a link to a /dev/full twin fails (exit 1, disk full).
    Either way the device node is still a device node afterwards."""
    for minor, code in ((3, 0), (7, 1)):
        device = char_device(tmp_path / f"device{minor}", minor)
        link = tmp_path / name
        link.symlink_to(device)
        given = ("-O", f"save_weights={link}") if option == "-O" else (option, link)
        result = attn("inspect", "hello", "--model", "toy", *given, *(("--json",) if option != "--save" else ()))
        if code:
            one_line_error(result, 1, "No space left on device", stdout=True)
        else:
            assert result.exit_code == 0, result.stderr
        assert stat.S_ISCHR(os.stat(device).st_mode), "the device node was replaced by a file"
        assert link.is_symlink() and temp_files(tmp_path) == []
        link.unlink()


@pytest.mark.parametrize("option, name", [("-o", "x.json"), ("--save-tensors", "x.safetensors"), ("--save", "x.svg")])
def test_a_socket_or_a_directory_as_output_is_a_usage_error(tmp_path, monkeypatch, option, name):
    from test_hardening import no_model_load

    no_model_load(monkeypatch)
    target = tmp_path / name
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(target))
        one_line_error(attn("inspect", "hello", "--model", "toy", option, target), 2, str(target), "is a socket")
    target.unlink()
    target.mkdir()
    one_line_error(attn("inspect", "hello", "--model", "toy", option, target), 2, str(target), "is a directory")


@ROOT_ONLY
def test_a_block_device_as_output_is_a_usage_error(tmp_path, monkeypatch):
    """A block-device node made here (never opened: refused by its type alone)."""
    from test_hardening import no_model_load

    no_model_load(monkeypatch)
    node = tmp_path / "disk.json"
    os.mknod(node, stat.S_IFBLK | 0o600, os.makedev(7, 0))
    one_line_error(attn("inspect", "hello", "--model", "toy", "-o", node), 2, str(node), "is a block device")
    assert stat.S_ISBLK(os.lstat(node).st_mode)


def test_o_dev_stdout_into_a_pipe(tmp_path):
    """`attn inspect … -o /dev/stdout | jq`: /dev/stdout resolves to pipe:[…], which no rename can reach."""
    completed = run_attn("inspect hello --model toy -o /dev/stdout", tmp_path)  # stdout is a pipe
    assert completed.returncode == 0, completed.stderr
    assert json.loads(completed.stdout)["text"] == "hello"
    assert temp_files(tmp_path) == []


def test_o_dev_stdout_keeps_the_shells_redirection(tmp_path):
    """`>> log`: written through attn's own descriptor, appended; never a new file renamed over the log."""
    (tmp_path / "log").write_text("earlier line\n")
    completed = run_attn("inspect hello --model toy -o /dev/stdout >> log", tmp_path)
    assert completed.returncode == 0, completed.stderr
    first, document = (tmp_path / "log").read_text().split("\n", 1)
    assert first == "earlier line" and json.loads(document)["text"] == "hello"


# --- inputs -----------------------------------------------------------------------------------------------


def test_a_fifo_corpus_is_read_once_as_a_stream(tmp_path):
    """`attn heads --file <(…)`: a FIFO is read, once (nothing may count its lines ahead: they would be gone)."""
    import threading

    corpus = tmp_path / "corpus"
    os.mkfifo(corpus)

    def write() -> None:
        with open(corpus, "w") as handle:  # waits for attn to open the reading end
            handle.write("the first text\nthe second text\n\nthe third text\n")

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    result = attn("heads", "--file", corpus, "--model", "toy", "--json")
    writer.join(timeout=patience(5))
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["texts"] == 3


def test_a_directory_or_a_missing_corpus_says_which_before_the_model_loads(tmp_path, monkeypatch):
    from test_hardening import no_model_load

    no_model_load(monkeypatch)
    one_line_error(attn("heads", "--file", tmp_path, "--model", "toy"), 2, f"--file {tmp_path} is a directory")
    one_line_error(attn("heads", "--file", tmp_path / "missing.txt", "--model", "toy"), 2, "no such file")


@ROOT_ONLY
def test_an_empty_character_device_is_an_empty_corpus(tmp_path):
    """A /dev/null twin: read as a stream like any corpus, and empty (not "no such file")."""
    device = char_device(tmp_path / "null", 3)
    one_line_error(attn("heads", "--file", device, "--model", "toy"), 2, "no text to score")


HUGE = str(10**30)


@pytest.mark.parametrize(
    "args",
    [
        ("heads", "a", "--limit", HUGE),
        ("heads", "a", "--batch-size", HUGE),
        ("heads", "a", "--limit", "-" + HUGE),
        ("heads", "--probe", "induction", "--seed", HUGE),
        ("heads", "--probe", "induction", "--probe-length", HUGE),
        ("inspect", "a", "--top-k", HUGE),
        ("compare", "a", "--top-k", HUGE),
        ("rollout", "a", "--top-k", HUGE),
        ("generate", "a", "--max-new-tokens", HUGE),
        ("generate", "a", "--sample", "--seed", HUGE),
    ],
)
def test_an_integer_option_too_large_for_the_machine_is_a_usage_error(args, monkeypatch):
    from test_hardening import no_model_load

    no_model_load(monkeypatch)
    flag = [arg for arg in args if arg.startswith("--") and arg != "--sample" and arg != "--probe"][-1]
    one_line_error(attn(*args, "--model", "toy"), 2, f"{flag} {args[-1]} is out of range")


@pytest.mark.parametrize("args", [("heads", "--batch-size", str(2**63 - 1)), ("heads", "--limit", str(2**63 - 1))])
def test_the_largest_machine_integer_still_runs(args):
    result = attn(args[0], "a b c", *args[1:], "--model", "toy", "--json")
    assert result.exit_code == 0, result.stderr


def test_the_largest_probe_length_is_cut_on_a_model_without_positions():
    """The largest machine integer is no internal error: the probe is cut, and the note says to what."""
    result = attn("heads", "--probe", "induction", "--probe-length", str(2**63 - 1), "--model", "toy", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["texts"] == 1
    assert "1024 tokens twice" in result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("inspect", "a b", "--layer", ""),
        ("inspect", "a b", "--head", " "),
        ("heads", "a b", "--layer", ""),
        ("compare", "a b", "--head", ""),
        ("diff", "a b", "b a", "--layer", ""),
        ("rollout", "a b", "--layer", ""),
        ("steps", "a b", "--layer", ""),
    ],
)
def test_an_empty_layer_or_head_selection_is_an_error_not_all(args):
    one_line_error(attn(*args, "--model", "toy"), 2, "is empty")
