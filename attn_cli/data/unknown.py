"""The pieces of a text a model's vocabulary lacks: the tokens the tokenizer replaced by its unknown token, and
one line saying so when they are a noticeable share of the text (the CLI prints it on stderr).

MiniLM's vocabulary has no 是, 个 or 孩, so "我是一个男孩" reads as 我 [UNK] 一 [UNK] 男 [UNK]: half the text is
one stand-in, and nothing but the token list says so. The lab decoder's word-level vocabulary turns any word
outside its training sentences ("ran") into <unk>.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

from attn_cli.data.capture import Token

# The tokenizer's stand-in for a piece its vocabulary lacks (BERT's [UNK], SentencePiece's and word-level <unk>).
UNKNOWN_TOKENS = frozenset({"[UNK]", "<unk>"})
NOTICEABLE = 0.1  # the share of a text's tokens (specials left out) lost to the unknown token worth a warning
SHOWN = 5  # lost pieces named in the line at most
PIECE_MARKS = ("##", "Ġ", "▁")  # WordPiece's continuation, byte-level BPE's and SentencePiece's space marks


def unknown_count(tokens: Sequence[Token]) -> tuple[int, int]:
    """(tokens that are the unknown token, tokens of the text): special tokens ([CLS], <bos> …) count in neither."""
    words = [token for token in tokens if not token.special]
    return sum(token.text in UNKNOWN_TOKENS for token in words), len(words)


def unknown_note(text: str, tokens: Sequence[Token], model: str) -> str | None:
    """One line when at least NOTICEABLE of the text's tokens are the unknown token, else None: how many, the
    pieces lost where they can be found in the text, and a model that reads them."""
    unknown, total = unknown_count(tokens)
    if not unknown or unknown < NOTICEABLE * total:
        return None
    stand_in = next(token.text for token in tokens if token.text in UNKNOWN_TOKENS)
    lost = lost_pieces(text, tokens)
    named = ""
    if lost:
        shown = " ".join(lost[:SHOWN]) + (" …" if len(lost) > SHOWN else "")
        named = f" ({shown})"
    verb = "is" if unknown == 1 else "are"
    return (
        f"warning: {unknown} of {total} tokens of {short(text)} {verb} {stand_in}: {model}'s vocabulary lacks "
        f"{'it' if unknown == 1 else 'them'}{named}; {reader(text, lost, model)}"
    )


def reader(text: str, lost: list[str], model: str) -> str:
    """What reads the lost pieces: the toy for CJK (it splits CJK per character), else a subword vocabulary."""
    if any(is_cjk(character) for character in "".join(lost) or text):
        return "--model toy splits CJK text per character (a multilingual checkpoint reads it with trained weights)"
    if model == "lab":
        return "the lab decoder knows only the words of its training sentences; a subword model (GPT-2 …) reads any"
    return "a model whose vocabulary covers this script (a multilingual or byte-level one) reads it"


def is_cjk(character: str) -> bool:
    """A Han, kana or hangul character (the scripts BERT's English vocabularies cover least)."""
    name = unicodedata.name(character, "")
    return name.startswith(("CJK ", "HIRAGANA", "KATAKANA", "HANGUL"))


def lost_pieces(text: str, tokens: Sequence[Token]) -> list[str]:
    """The stretches of `text` that became the unknown token, found between the known tokens around them; [] when
    the tokens cannot be found in the text in order (a tokenizer that rewrites more than case and accents)."""
    folded, origin = fold(text)
    position, pending, lost = 0, False, []
    start_of_gap = 0
    for token in tokens:
        if token.special:
            continue
        if token.text in UNKNOWN_TOKENS:
            if not pending:
                pending, start_of_gap = True, position
            continue
        piece = fold(strip_marks(token.text))[0]
        if not piece:
            continue
        found = folded.find(piece, position)
        if found < 0:
            return []
        if pending:
            lost.append(text[origin[start_of_gap] : origin[found]].strip())
            pending = False
        position = found + len(piece)
    if pending:
        lost.append(text[origin[start_of_gap] :].strip() if start_of_gap < len(origin) else "")
    return [piece for piece in lost if piece]


def strip_marks(piece: str) -> str:
    for mark in PIECE_MARKS:
        if piece.startswith(mark):
            return piece[len(mark) :]
    return piece


def fold(text: str) -> tuple[str, list[int]]:
    """The text lower-cased with its accents taken off (as uncased tokenizers do), and for each of its characters
    the index of the original character it came from."""
    folded, origin = [], []
    for index, character in enumerate(text):
        for part in unicodedata.normalize("NFKD", character).lower():
            if not unicodedata.combining(part):
                folded.append(part)
                origin.append(index)
    return "".join(folded), origin


def short(text: str, limit: int = 40) -> str:
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")
