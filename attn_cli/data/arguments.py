"""The kinds of argument attn takes, each checked in one place.

The Python API's door (api.py) checks every argument by its kind before anything runs, and the engines
check their numbers with the same functions, so a wrong value is one BadInput that names the argument
and says what it takes, never a TypeError or AttributeError from deep inside. A check here looks at the
type and at what the kind itself requires (a finite number, a whole number in range); what a string
means (a layer selection "1-4", a span "2:5", a variant or device name) is parsed where the command
line parses it too (selection.py, variants.py, devices.py), so the two cannot drift apart.
"""

from __future__ import annotations

import math
import numbers
import operator
import os
from collections.abc import Iterable, Mapping

from attn_cli.plumbing.errors import BadInput
from attn_cli.plumbing.textio import check_text

_WHOLE = "a whole number"


def shown(value) -> str:
    """The value as a message quotes it: its repr, cut short, and its type when the repr hides it."""
    if isinstance(value, int) and value.bit_length() > 128:  # str() of a huge int is slow, past 4300 digits an error
        return f"a {value.bit_length()}-bit number"
    try:
        text = repr(value)
    except Exception:  # a user's object whose repr fails still gets its message
        text = "?"
    text = text if len(text) <= 40 else text[:37] + "…"
    kind = type(value).__name__
    return text if kind in ("str", "int", "float") else f"{text} ({kind})"


def refuse(name: str, takes: str, value) -> BadInput:
    """`name must be takes, not value`: the one shape of every message here."""
    return BadInput(f"{name} must be {takes}, not {shown(value)}")


def text(value, name: str) -> str:
    """One text: a string of valid Unicode that is not blank."""
    return check_text(value, name)


def texts(value, name: str) -> str | list[str]:
    """One text, or a non-empty list or tuple of texts (kept a str or made a list: the caller answers in kind)."""
    if isinstance(value, str):
        return text(value, name)
    if not isinstance(value, (list, tuple)):
        raise refuse(name, "a string or a list of strings", value)
    if not value:
        raise BadInput(f"{name} is an empty list", "pass at least one text")
    return [text(item, f"{name}[{position}]") for position, item in enumerate(value)]


def corpus(value, name: str) -> str | Iterable:
    """One text, or any iterable of texts: read as it goes, each text checked as its batch is (check_text)."""
    if isinstance(value, str):
        return text(value, name)
    if isinstance(value, (bytes, bytearray, Mapping)) or not isinstance(value, Iterable):
        raise refuse(name, "a string or an iterable of strings", value)
    return value


def selection(value, name: str) -> str | int | list[int]:
    """Layers or heads: "all", "0,2", "1-4" (parsed by selection.parse_selection), an index, or indices."""
    takes = "'all', an index, a list of indices, or a string like '0,2' or '1-4'"
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray, Mapping)) or not isinstance(value, (numbers.Integral, Iterable)):
        raise refuse(name, takes, value)
    if isinstance(value, numbers.Integral):
        return index(value, name, takes)
    return [index(item, name, takes) for item in value]  # an empty list: parse_selection says it selects nothing


def span(value, name: str) -> str | tuple[int, int]:
    """A window of rows or columns: "100:140" (parsed by selection.parse_span) or a pair (100, 140)."""
    takes = "'START:STOP' or a pair (START, STOP)"
    if isinstance(value, str):
        return value
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise refuse(name, takes, value)
    return index(value[0], name, takes), index(value[1], name, takes)


def index(value, name: str, takes: str = _WHOLE) -> int:
    """A whole number as Python or numpy hands it (not a bool, which is an int to Python)."""
    if isinstance(value, bool):
        raise refuse(name, takes, value)
    try:
        return operator.index(value)
    except TypeError:
        raise refuse(name, takes, value) from None


def whole(value, name: str, minimum: int | None = None, maximum: int | None = None) -> int:
    """A whole number, at least `minimum` and at most `maximum` where given."""
    number_ = index(value, name)
    if minimum is not None and maximum is not None and not minimum <= number_ <= maximum:
        raise BadInput(f"{name} must be between {minimum} and {maximum}, not {shown(number_)}")
    if minimum is not None and number_ < minimum:
        raise BadInput(f"{name} must be at least {minimum}, not {shown(number_)}")
    if maximum is not None and number_ > maximum:
        raise BadInput(f"{name} must be at most {maximum}, not {shown(number_)}")
    return number_


def number(value, name: str) -> float:
    """A finite real number (an int is one too; a bool is not)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise refuse(name, "a number", value)
    try:
        result = float(value)
    except OverflowError:  # an int past float's range
        result = math.inf
    if not math.isfinite(result):
        raise refuse(name, "a finite number", value)
    return result


def flag(value, name: str) -> bool:
    """True or False: a truthy string like "no" would silently mean yes."""
    if not isinstance(value, bool):
        raise refuse(name, "True or False", value)
    return value


def word(value, name: str) -> str:
    """A name from a fixed list (a variant, device, dtype, fusion, probe, padding side); the list is checked
    where the command line checks it."""
    if not isinstance(value, str):
        raise refuse(name, "a name (a string)", value)
    return value


def words(value, name: str) -> list[str]:
    """One name or a list or tuple of names."""
    if isinstance(value, str):
        return [value]
    if not isinstance(value, (list, tuple)):
        raise refuse(name, "a name or a list of names", value)
    return [word(item, f"{name}[{position}]") for position, item in enumerate(value)]


def path(value, name: str, takes: str = "a file path") -> str:
    """A file path (or a model's name or directory): a string or a path-like object."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):  # bytes from a path-like too
        raise refuse(name, takes, value)
    return value


def callback(value, name: str):
    """A function attn calls as it goes (progress, on_token)."""
    if not callable(value):
        raise refuse(name, "a function", value)
    return value
