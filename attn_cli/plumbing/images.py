"""Reading an image file (or stdin for "-") with Pillow, as RGB."""

from __future__ import annotations

import io
import re
import sys
import warnings
from pathlib import Path

from attn_cli.plumbing.errors import BadInput


def read_image(source: str | Path):
    """A PIL image in RGB from a PNG/JPEG (anything Pillow opens) file, or stdin's bytes for "-".

    Every failure (no file, not an image, a truncated file, a header claiming more than Pillow's
    MAX_IMAGE_PIXELS) is one BadInput naming the source.
    """
    from PIL import Image, UnidentifiedImageError

    name = str(source)
    try:
        with warnings.catch_warnings():
            # Pillow warns past MAX_IMAGE_PIXELS and raises past twice that, both from the header alone, before
            # the pixels are decoded: either way the image is refused, with the limit, before memory goes
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            if name == "-":
                data = sys.stdin.buffer.read()
                if not data:
                    raise BadInput("--image -: stdin is empty", "pipe a PNG or JPEG file into attn")
                opened = Image.open(io.BytesIO(data))
            else:
                opened = Image.open(Path(name))
        opened.load()  # decode now: a truncated file fails here, not inside the image processor
        return opened.convert("RGB")
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as error:
        claimed = re.search(r"\((\d+) pixels\)", str(error))
        size = f"{int(claimed[1]):,} pixels" if claimed else "too many pixels"
        raise BadInput(
            f"--image {name} is too large: its header claims {size}, over the limit of {Image.MAX_IMAGE_PIXELS:,}",
            "resize it (a vision transformer sees a few hundred pixels a side)",
        ) from None
    except UnidentifiedImageError:
        raise BadInput(f"--image {name}: not an image Pillow can read", "give a PNG or JPEG file") from None
    except IsADirectoryError:
        raise BadInput(f"--image {name} is a directory", "give a PNG or JPEG file") from None
    except OSError as error:
        raise BadInput(f"--image {name}: {error.strerror or error}", "give a readable PNG or JPEG file") from None
