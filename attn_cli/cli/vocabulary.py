"""One vocabulary for every command: the spellings that were renamed, and one rule for several texts.

Every option name and short flag means one thing in every command (docs/vocabulary.md).
A spelling that was renamed still works for one release: it is rewritten to its new spelling before
the command parses its arguments, with a one-line note on stderr, and --help no longer shows it.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from attn_cli.plumbing.errors import BadInput


@dataclass(frozen=True)
class Alias:
    """An old spelling of an option, and what it is now.

    value: a flag's value under the new option (--shared-k → --variant shared-k); None when the old
    spelling takes a value itself, handed on with `prefix` before it (--scoring cosine →
    --variant scoring=cosine)."""

    old: str
    new: str
    value: str | None = None
    prefix: str = ""

    @property
    def now(self) -> str:
        """How to write it now, as the note says it."""
        return f"{self.new} {self.value}" if self.value is not None else self.new


# The renamed spellings, by command (its name as `attn NAME` runs it). CHANGELOG.md lists them.
DEPRECATED: dict[str, tuple[Alias, ...]] = {
    "generate": (Alias("-n", "--max-new-tokens"),),
    "heads show": (Alias("-n", "--top"), Alias("-s", "--score")),
    "rollout": (Alias("--layers", "--layer"),),
    "attribute": (Alias("--layers", "--layer"), Alias("--target", "--explain")),
    "inspect": (
        Alias("--shared-k", "--variant", value="shared-k"),
        Alias("--no-scale", "--variant", value="no-scale"),
        Alias("--scoring", "--variant", prefix="scoring="),
    ),
}


def deprecated_note(command: str, alias: Alias) -> str:
    return f"note: attn {command} {alias.old} is deprecated and goes in the next release; use {alias.now}"


def rewrite_deprecated(command: str, args: list[str], takes_value: set[str], note) -> list[str]:
    """args with every old spelling of `command`'s options (DEPRECATED) in its new one; note(line) says each.

    takes_value: the command's option strings that take a value (their values are skipped, never read
    as options); everything after `--` is an argument and stays."""
    aliases = {alias.old: alias for alias in DEPRECATED.get(command, ())}
    if not aliases:
        return args
    out: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            out += args[i - 1 :]
            break
        if not arg.startswith("-") or arg == "-":
            out.append(arg)
            continue
        name, attached = _split(arg, aliases)
        alias = aliases.get(name)
        if alias is None:
            out.append(arg)
            if name in takes_value and attached is None and i < len(args):
                out.append(args[i])  # the option's value, whatever it looks like
                i += 1
            continue
        note(deprecated_note(command, alias))
        if alias.value is not None:
            out += [alias.new, alias.value]
            continue
        if attached is None and i < len(args):
            attached = args[i]
            i += 1
        given = attached if attached is None or attached.startswith(alias.prefix) else alias.prefix + attached
        out += [alias.new] if given is None else [alias.new, given]
    return out


def _split(arg: str, aliases: dict[str, Alias]) -> tuple[str, str | None]:
    """'--layers=0-2' → ('--layers', '0-2'); '-n5' → ('-n', '5') for an old short spelling; else (arg, None)."""
    if arg.startswith("--"):
        name, equals, value = arg.partition("=")
        return name, value if equals else None
    if len(arg) > 2 and arg[:2] in aliases:
        return arg[:2], arg[2:]
    return arg, None


# -- several texts -----------------------------------------------------------------------------------------


def one_text_only(command: str, texts: list[str]) -> BadInput:
    """The refusal when a command that takes one TEXT was given several words: how to quote them."""
    return BadInput(
        f"attn {command} takes one TEXT, not {len(texts)}",
        f"quote a sentence to pass it as one text: attn {command} {quoted(texts)}",
    )


EXACT_TEXTS = ("diff",)  # commands that take an exact number of texts: a wrong count is refused, with the hint


def looks_unquoted(texts: list[str]) -> bool:
    """Several one-word texts that read as one sentence typed without quotes (The cat sat, the cat sat.):
    three or more, or two where the first is capitalised and the second not, or the last ends a sentence."""
    if len(texts) < 2 or any(text == "-" or len(text.split()) != 1 for text in texts):
        return False
    return len(texts) >= 3 or texts[-1][-1] in ".?!" or (texts[0][:1].isupper() and texts[1][:1].islower())


def unquoted_note(command: str, texts: list[str]) -> str:
    """The one line that says several one-word texts run as that many texts, and how to pass one sentence."""
    return (
        f"note: {len(texts)} one-word texts run as {len(texts)} separate texts; "
        f"for one sentence, quote it: attn {command} {quoted(texts)}"
    )


def quoted(texts: list[str]) -> str:
    sentence = " ".join(texts)
    return f'"{sentence}"' if '"' not in sentence and "$" not in sentence else shlex.quote(sentence)
