"""Which tokens make which word (--words): the grouping the merge in math/words.py is handed.

From the tokenizer where it can say (a fast tokenizer's word ids and character offsets), else guessed
from the subword markers of the piece texts. Special tokens ([CLS], <s>, …) are always their own word.
"""

from __future__ import annotations

from collections.abc import Sequence

from attn_cli.data.capture import Token, Word

CONTINUES = "##"  # WordPiece: a piece that continues the word before it
STARTS = ("Ġ", "▁")  # byte-level BPE and SentencePiece: a piece that starts a word (after a space)


def words_from_tokenizer(
    tokens: Sequence[Token], word_ids: Sequence[int | None], offsets: Sequence[tuple[int, int]], text: str
) -> list[Word]:
    """The tokenizer's words. A token starts a new word when the tokenizer's word id changes, or when
    whitespace lies between it and the token before (a gap in the offsets, or a piece that begins with
    the space): a SentencePiece tokenizer that does not pre-split gives one word id to the whole text.
    Likewise at a CJK ideograph, which BERT's tokenizer makes a word of its own: text without spaces
    would otherwise be one word."""
    groups: list[list[int]] = []
    for position, token in enumerate(tokens):
        before = position - 1
        joins = (
            position > 0
            and not token.special
            and not tokens[before].special
            and word_ids[position] == word_ids[before]
            and not _boundary(text, offsets[before][1], offsets[position][0])
        )
        if joins:
            groups[-1].append(position)
        else:
            groups.append([position])
    return [
        Word(index, _surface(tokens, pieces, offsets, text), tokens[pieces[0]].special, tuple(pieces))
        for index, pieces in enumerate(groups)
    ]


def words_from_markers(tokens: Sequence[Token]) -> list[Word]:
    """Words guessed from the piece texts, for a tokenizer that gives no offsets: "##" continues the word
    before; where the pieces use "Ġ"/"▁", a piece without it continues the word before. Punctuation then
    stays with the word it follows ("hello," is one word)."""
    starts_marked = any(token.text.startswith(STARTS) for token in tokens)
    groups: list[list[int]] = []
    for position, token in enumerate(tokens):
        joins = (
            position > 0
            and not token.special
            and not tokens[position - 1].special
            and (token.text.startswith(CONTINUES) if not starts_marked else not token.text.startswith(STARTS))
        )
        if joins:
            groups[-1].append(position)
        else:
            groups.append([position])
    return [
        Word(index, _joined(tokens, pieces), tokens[pieces[0]].special, tuple(pieces))
        for index, pieces in enumerate(groups)
    ]


def _boundary(text: str, end: int, start: int) -> bool:
    """A word ends between a piece ending at `end` and the next starting at `start`: whitespace between
    them or at that start, or a CJK ideograph on either side. Never inside one character (byte-level
    pieces of one character share its offsets: start < end)."""
    if start < end:
        return False
    between = text[end : start + 1]
    return any(char.isspace() for char in between) or any(
        _ideograph(char) for char in text[max(end - 1, 0) : start + 1]
    )


def _ideograph(char: str) -> bool:
    """A CJK ideograph (the blocks BERT's tokenizer splits into characters): unified, extensions, compatibility."""
    code = ord(char)
    return (
        0x4E00 <= code <= 0x9FFF or 0x3400 <= code <= 0x4DBF or 0x20000 <= code <= 0x2FA1F or 0xF900 <= code <= 0xFAFF
    )


def _surface(tokens: Sequence[Token], pieces: list[int], offsets: Sequence[tuple[int, int]], text: str) -> str:
    """The word as written: the text its pieces' offsets cover; a special token's own text."""
    if tokens[pieces[0]].special:
        return tokens[pieces[0]].text
    written = text[offsets[pieces[0]][0] : offsets[pieces[-1]][1]].strip()
    return written or _joined(tokens, pieces)


def _joined(tokens: Sequence[Token], pieces: list[int]) -> str:
    if tokens[pieces[0]].special:
        return tokens[pieces[0]].text
    return (
        "".join(tokens[p].text.removeprefix(CONTINUES).lstrip("".join(STARTS)) for p in pieces)
        or tokens[pieces[0]].text
    )
