"""Reading an image file (or stdin for "-") with Pillow, as RGB."""

from __future__ import annotations

import io
import sys
from pathlib import Path

from attn_cli.plumbing.errors import BadInput


def read_image(source: str | Path):
    """A PIL image in RGB from a PNG/JPEG (anything Pillow opens) file, or stdin's bytes for "-".

    Every failure (no file, not an image, a truncated file) is one BadInput naming the source.
    """
    from PIL import Image, UnidentifiedImageError

    name = str(source)
    try:
        if name == "-":
            data = sys.stdin.buffer.read()
            if not data:
                raise BadInput("--image -: stdin is empty", "pipe a PNG or JPEG file into attn")
            opened = Image.open(io.BytesIO(data))
        else:
            opened = Image.open(Path(name))
        opened.load()  # decode now: a truncated file fails here, not inside the image processor
        return opened.convert("RGB")
    except UnidentifiedImageError:
        raise BadInput(f"--image {name}: not an image Pillow can read", "give a PNG or JPEG file") from None
    except IsADirectoryError:
        raise BadInput(f"--image {name} is a directory", "give a PNG or JPEG file") from None
    except OSError as error:
        raise BadInput(f"--image {name}: {error.strerror or error}", "give a readable PNG or JPEG file") from None
