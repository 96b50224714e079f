"""Fonts for figures cairo draws (--save FILE.png / FILE.pdf): every character drawn by a font that has it.

cairosvg draws each <text> with ONE font: the first family of its font-family (cairo's simple text API
does no per-character fallback, unlike a browser). A token in Chinese under "DejaVu Sans" would come out
as empty boxes. So before drawing, each <text> whose characters the figure's font lacks is given a
family that has them all, found with fontconfig (the library cairo itself uses to find fonts) and
checked with cairo; the characters no installed font has are returned, for one warning line.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import html
import re

TEXT = re.compile(r"<text\b([^>]*)>([^<]*)</text>")
ROOT_FAMILY = re.compile(r'<svg\b[^>]*?\bfont-family="([^"]*)"')
# Families tried when fontconfig itself cannot be called (cairo built without it): common CJK fonts.
KNOWN_FALLBACKS = (
    "Noto Sans CJK SC",
    "Noto Sans CJK JP",
    "Source Han Sans SC",
    "WenQuanYi Zen Hei",
    "WenQuanYi Micro Hei",
    "Droid Sans Fallback",
    "PingFang SC",
    "Hiragino Sans",
    "Microsoft YaHei",
    "Arial Unicode MS",
)


def with_fallback_fonts(svg: str) -> tuple[str, list[str]]:
    """The SVG with a font-family on each <text> its own font cannot draw whole, and the characters
    (sorted, distinct) that no installed font draws."""
    match = ROOT_FAMILY.search(svg)
    primary = (match.group(1) if match else "sans-serif").split(",")[0].strip("\"' ")
    missing: set[str] = set()

    def fix(text: re.Match) -> str:
        attributes, content = text.groups()
        wanted = drawn_characters(html.unescape(content))
        if not wanted or "font-family=" in attributes or not lacks(primary, wanted):
            return text.group(0)
        family = covering_family(primary, wanted)
        if family is None:
            missing.update(ch for ch in wanted if lacks(primary, ch))
            return text.group(0)
        return f'<text{attributes} font-family="{html.escape(family)}">{content}</text>'

    return TEXT.sub(fix, svg), sorted(missing)


def drawn_characters(text: str) -> str:
    """The distinct characters of a text that need a glyph (not spaces or controls), in a stable order."""
    return "".join(sorted({ch for ch in text if ch.isprintable() and not ch.isspace()}))


@functools.lru_cache(maxsize=4096)
def lacks(family: str, characters: str) -> bool:
    """Whether cairo, asked for `family`, draws any of `characters` as the missing glyph (index 0)."""
    import cairocffi as cairo

    context = cairo.Context(cairo.ImageSurface(cairo.FORMAT_ARGB32, 1, 1))
    context.select_font_face(family)
    glyphs = context.get_scaled_font().text_to_glyphs(0, 0, characters, False)
    return any(index == 0 for index, _, _ in glyphs)


@functools.lru_cache(maxsize=1024)
def covering_family(primary: str, characters: str) -> str | None:
    """A family cairo draws all of `characters` with: fontconfig's best match for `primary` that has them
    (its matching ranks a font's coverage above its name), else a known CJK family; None: no font has them."""
    for family in (_fontconfig_match(primary, characters), *KNOWN_FALLBACKS):
        if family and not lacks(family, characters):
            return family
    return None


def _fontconfig_match(primary: str, characters: str) -> str | None:
    """fontconfig's FcFontMatch for `primary` with a charset of `characters`: the family it picks."""
    library = _fontconfig()
    if library is None:
        return None
    pattern = library.FcNameParse(primary.encode())
    charset = library.FcCharSetCreate()
    try:
        for ch in characters:
            library.FcCharSetAddChar(charset, ord(ch))
        library.FcPatternAddCharSet(pattern, b"charset", charset)
        library.FcConfigSubstitute(None, pattern, 0)  # 0: FcMatchPattern
        library.FcDefaultSubstitute(pattern)
        result = ctypes.c_int()
        match = library.FcFontMatch(None, pattern, ctypes.byref(result))
        if not match:
            return None
        try:
            name = ctypes.c_char_p()
            if library.FcPatternGetString(match, b"family", 0, ctypes.byref(name)) != 0 or not name.value:
                return None
            return name.value.decode("utf-8", "replace")
        finally:
            library.FcPatternDestroy(match)
    finally:
        library.FcCharSetDestroy(charset)
        library.FcPatternDestroy(pattern)


@functools.lru_cache(maxsize=1)
def _fontconfig():
    """libfontconfig through ctypes, its pointers typed; None where it is not installed (cairo without it)."""
    name = ctypes.util.find_library("fontconfig")
    if name is None:
        return None
    try:
        library = ctypes.CDLL(name)
    except OSError:
        return None
    pointer = ctypes.c_void_p
    for function, arguments, result in (
        ("FcNameParse", [ctypes.c_char_p], pointer),
        ("FcCharSetCreate", [], pointer),
        ("FcCharSetAddChar", [pointer, ctypes.c_uint32], ctypes.c_int),
        ("FcCharSetDestroy", [pointer], None),
        ("FcPatternAddCharSet", [pointer, ctypes.c_char_p, pointer], ctypes.c_int),
        ("FcConfigSubstitute", [pointer, pointer, ctypes.c_int], ctypes.c_int),
        ("FcDefaultSubstitute", [pointer], None),
        ("FcFontMatch", [pointer, pointer, ctypes.POINTER(ctypes.c_int)], pointer),
        ("FcPatternGetString", [pointer, ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)], ctypes.c_int),
        ("FcPatternDestroy", [pointer], None),
    ):
        getattr(library, function).argtypes = arguments
        getattr(library, function).restype = result
    return library
