"""--save FILE.png and FILE.pdf: the SVG figure (render/figures.py) drawn by cairo through cairosvg.

cairosvg is the optional [figures] extra (it needs the system's libcairo). The PNG is the SVG's size in px
× dpi/96 (an SVG px is 1/96 inch); the PDF is vector, its page the SVG's size at 96 px an inch (1 px =
0.75 pt), its fonts embedded by cairo as subsets.
"""

from __future__ import annotations

import re

from attn_cli.plumbing.errors import AttnError, BadInput
from attn_cli.render.fonts import with_fallback_fonts

DRAWN_FORMATS = (".png", ".pdf")
CSS_DPI = 96  # SVG px per inch
EXTRA = "pip install 'attn-cli[figures]'"
MAX_PIXELS = 32767  # cairo's largest image side
SIZE = re.compile(r'<svg\b[^>]*?\bwidth="([\d.]+)"[^>]*?\bheight="([\d.]+)"')


def check_drawable(option: str) -> None:
    """Fail (exit 2, before any model loads) where cairosvg or the cairo library it needs is missing."""
    try:
        import cairosvg  # noqa: F401
    except ImportError:
        raise BadInput(f"{option} needs cairosvg to draw PNG and PDF figures", f"{EXTRA}, or save .svg") from None
    except OSError as error:  # cairocffi imports, but finds no libcairo on the system
        raise BadInput(
            f"{option} needs the cairo library to draw PNG and PDF figures ({error})",
            "install cairo (Debian: apt install libcairo2), or save .svg",
        ) from None


def draw(svg: str, suffix: str, dpi: float) -> tuple[bytes, list[str]]:
    """The SVG as PNG (at dpi) or PDF bytes, and the characters no installed font could draw."""
    import cairosvg

    svg, missing = with_fallback_fonts(svg)
    data = svg.encode("utf-8")
    if suffix == ".png":
        size = SIZE.search(svg)
        side = max(float(size.group(1)), float(size.group(2))) * dpi / CSS_DPI if size else 0
        if side > MAX_PIXELS:
            raise AttnError(
                f"the figure would be {side:,.0f} pixels across at {dpi:g} dpi, past cairo's {MAX_PIXELS:,}",
                "lower --dpi, pick fewer heads, or save .pdf or .svg (vector)",
            )
        return cairosvg.svg2png(bytestring=data, scale=dpi / CSS_DPI), missing
    return cairosvg.svg2pdf(bytestring=data), missing


def missing_glyphs_note(path, missing: list[str]) -> str:
    """The one warning line for characters no font has: they are drawn as empty boxes."""
    shown = " ".join(missing[:12]) + (f" and {len(missing) - 12} more" if len(missing) > 12 else "")
    return (
        f"warning: no installed font has {shown}: {path} draws them as empty boxes; install a font that does "
        "(for Chinese, Japanese and Korean, e.g. Debian's fonts-noto-cjk or fonts-wqy-zenhei)"
    )
