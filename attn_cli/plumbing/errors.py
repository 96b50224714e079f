"""The errors attn raises. The CLI turns each into one line on stderr and an exit code.

Exit codes: 1 a runtime failure the user can act on, 2 bad usage.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterable

# Who is asking: "cli" while a command of attn's command line runs (its errors name options: --layer 9),
# "python" otherwise (the API's name keyword arguments: layers=9; attn_cli/api.py's door rewrites them).
SPELLING: contextvars.ContextVar[str] = contextvars.ContextVar("attn_spelling", default="python")


class AttnError(Exception):
    """Base class: a message for the user and the exit code it maps to."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message}; {self.hint}" if self.hint else self.message


class BadInput(AttnError):
    """The request itself is wrong: empty text, layer or head out of range, unknown panel."""

    exit_code = 2


class ModelNotFound(AttnError):
    """No model at that path, not in the Hugging Face cache, or the hub cannot be reached."""


class UnsafeCheckpoint(AttnError):
    """The model's weights are only available as a pickle checkpoint and --allow-pickle was not given."""


class ModelIntegrityError(AttnError):
    """A bundled model file does not match its known SHA-256."""


class DeviceUnavailable(AttnError):
    """The requested device (cuda, cuda:N, mps) is not available in this torch build or machine."""


class InputTooLong(AttnError):
    """The text has more tokens than the model has positions."""


class UnsupportedModel(AttnError):
    """The model does not route attention through transformers' attention interface."""


class MissingPackage(AttnError):
    """An optional package a feature needs (pandas for to_pandas(), …) is not installed."""


def did_you_mean(word: str, names: Iterable[str]) -> str | None:
    """The hint for a mistyped name: the nearest of `names` ("did you mean 'heads'?", difflib's close matches, as
    Typer suggests a mistyped command), or None when none is near."""
    from difflib import get_close_matches

    near = get_close_matches(word, list(names))
    return f"did you mean {', '.join(repr(name) for name in near)}?" if near else None
