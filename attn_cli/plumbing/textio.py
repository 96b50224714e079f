"""Where text enters attn: an argument, stdin for '-', or a corpus file. The one place that makes it valid Unicode.

Undecodable bytes never reach a tokenizer: stdin is read as bytes and decoded as strict UTF-8, and an
argument whose bytes were not UTF-8 (Python hands those over as lone surrogates U+DC80–U+DCFF) is
refused the same way, with the offending byte named, as one BadInput (exit 2).
"""

from __future__ import annotations

import json
import stat
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

from attn_cli.plumbing.errors import BadInput

_HINT = "pass UTF-8 text (iconv -t UTF-8 converts other encodings)"


def read_text(text: str, name: str = "the text") -> str:
    """The argument itself, or stdin for '-'. Text that is not valid Unicode, or blank, is a usage error that
    names the text (`--target is empty`, not `the text is empty`, for an encoder–decoder model's target)."""
    return check_text(read_stdin() if text == "-" else text, name)


def check_text(text, source: str) -> str:
    """A text attn can tokenize: a string of valid Unicode (check_unicode) that is not blank.

    The one check of a text, wherever it comes from: an argument, stdin, the Python API, a corpus."""
    if not isinstance(text, str):
        raise BadInput(f"{source} must be a string, not {type(text).__name__}")
    check_unicode(text, source)
    if not text.strip():
        raise BadInput(f"{source} is empty", "pass a sentence, or - to read it from stdin")
    return text


def read_stdin() -> str:
    """All of stdin as strict UTF-8 (a BOM dropped), final newlines removed."""
    stream = sys.stdin
    if stream is None or getattr(stream, "closed", False):
        raise BadInput("stdin is closed", "pass the text as an argument, or pipe it in")
    buffer = getattr(stream, "buffer", None)
    data = buffer.read() if buffer is not None else stream.read()
    text = decode(data, "stdin") if isinstance(data, bytes) else data
    check_unicode(text, "stdin")
    return text.rstrip("\r\n")


def read_lines(stream: BinaryIO, source: str) -> Iterator[str]:
    """A byte stream's lines as strict UTF-8, one at a time (a corpus is never read whole); a BOM on the
    first line dropped. A bad byte is a BadInput naming the line: "corpus.txt:12 is not valid UTF-8 …"."""
    for number, data in enumerate(stream, 1):
        yield decode(data, f"{source}:{number}") if number == 1 else _decode_line(data, f"{source}:{number}")


def _decode_line(data: bytes, source: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return decode(data, source)  # raises, with the byte and its offset


def decode(data: bytes, source: str) -> str:
    """Strict UTF-8; the first bad byte and its offset in the message."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise BadInput(
            f"{source} is not valid UTF-8: byte 0x{data[error.start]:02x} at offset {error.start}", _HINT
        ) from None


def check_unicode(text: str, source: str) -> None:
    """Refuse lone surrogates: undecodable argument bytes (U+DC80–U+DCFF) or broken UTF-16 halves."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        code = ord(text[error.start])
        what = f"byte 0x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"lone surrogate U+{code:04X}"
        raise BadInput(f"{source} is not valid UTF-8: {what} at character {error.start}", _HINT) from None


# ---- a corpus: a text per line, or JSONL, from a file or stdin


def read_corpus(path: Path | str) -> Iterator[str]:
    """The texts of a file ("-": stdin), read as it goes: JSONL ({"text": …} a line) when the file ends in
    .jsonl/.ndjson or its first non-blank line is such an object; otherwise a text per non-blank line."""
    if str(path) == "-":
        if sys.stdin is None or sys.stdin.closed:
            raise BadInput("stdin is closed", "pipe the corpus in, or pass --file FILE")
        yield from _texts(read_lines(sys.stdin.buffer, "stdin"), "stdin", None)
        return
    path = Path(path)
    with _open(path) as handle:
        yield from _texts(
            read_lines(handle, str(path)), str(path), True if path.suffix.lower() in (".jsonl", ".ndjson") else None
        )


def _texts(lines: Iterable[str], name: str, jsonl: bool | None) -> Iterator[str]:
    """jsonl None: decided by the first non-blank line."""
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if jsonl is None:
            jsonl = _is_text_record(line)
        if not jsonl:
            yield line.rstrip("\r\n")
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise BadInput(
                f"{name}:{number}: not JSON ({error.msg})", 'a JSONL corpus has one {"text": …} a line'
            ) from None
        text = record.get("text") if isinstance(record, dict) else None
        if not isinstance(text, str):
            raise BadInput(f'{name}:{number}: no "text" string', 'a JSONL corpus has one {"text": …} a line')
        if text.strip():
            yield text


def count_texts(path: Path | str) -> int | None:
    """How many texts read_corpus will yield (non-blank lines), for the progress bar; None for stdin, a
    FIFO or a device: what is read from those is gone, so they are read once, by read_corpus."""
    if str(path) == "-":
        return None
    check_corpus(path)  # first: is_file() raises on a name too long for the file system
    if not Path(path).is_file():
        return None
    with _open(Path(path)) as handle:
        return sum(1 for line in handle if line.strip())


def _is_text_record(line: str) -> bool:
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        return False
    return isinstance(record, dict) and isinstance(record.get("text"), str)


def check_corpus(path: Path | str, option: str = "--file") -> None:
    """A regular file, a FIFO (`--file <(zcat corpus.gz)`) or a character device can be read as a corpus;
    a directory or a missing path is a BadInput that says which (option: how the user named it). Looks without
    opening (opening and closing a FIFO would end its writer), so a command can ask before its model loads."""
    if str(path) == "-":
        return
    try:
        mode = Path(path).stat().st_mode  # through symlinks
    except FileNotFoundError:
        raise BadInput(f"{option} {path}: no such file") from None
    except OSError as error:
        raise BadInput(f"{option} {path}: {error.strerror}") from None
    if stat.S_ISDIR(mode):
        raise BadInput(f"{option} {path} is a directory", "name a file with a text per line")
    if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode) or stat.S_ISCHR(mode)):
        raise BadInput(f"{option} {path} is not a file, a FIFO or a character device")


def _open(path: Path):
    """Opened to read as a stream (decoded line by line, strictly: read_lines)."""
    check_corpus(path)
    try:
        return open(path, "rb")
    except OSError as error:
        raise BadInput(f"--file {path}: {error.strerror}") from None
