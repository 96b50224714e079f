"""An image as a vision transformer saw it: its pixels, and how its tokens lie on the patch grid.

A ViT-family model cuts the image (after its image processor has resized and cropped it) into a grid
of rows × cols square patches, flattened row by row, and puts its own tokens first: [CLS], DeiT's
distillation token [DIST], DINOv2's registers [REG0] … So token len(specials) + r·cols + c is the
patch in row r, column c, named "r{r}c{c}".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attn_cli.plumbing.errors import BadInput


@dataclass(frozen=True)
class PatchGrid:
    source: str  # the file the image came from ("-" for stdin)
    rows: int
    cols: int
    patch_size: int  # pixels per patch side, in the processed image
    specials: tuple[str, ...]  # the model's own tokens before the patches ("[CLS]", "[DIST]", "[REG0]" …)
    pixels: np.ndarray  # (H, W, 3) uint8: the processed image (resized, cropped), un-normalised

    @property
    def patches(self) -> int:
        return self.rows * self.cols

    def token_names(self) -> list[str]:
        """Every token's name, in the model's order: the specials, then r0c0, r0c1, … row by row."""
        return list(self.specials) + [f"r{row}c{col}" for row in range(self.rows) for col in range(self.cols)]

    def token_of(self, row: int, col: int) -> int:
        """The token index of the patch in row `row`, column `col`."""
        if not (0 <= row < self.rows and 0 <= col < self.cols):
            raise BadInput(
                f"--query {row},{col} is outside the {self.rows} × {self.cols} patch grid",
                f"rows 0-{self.rows - 1}, columns 0-{self.cols - 1}",
            )
        return len(self.specials) + row * self.cols + col

    def on_grid(self, row: np.ndarray) -> np.ndarray:
        """A query's weights over every token (T,) → its weights on the patches as (rows, cols)."""
        return np.asarray(row)[len(self.specials) :].reshape(self.rows, self.cols)

    def to_json(self) -> dict:
        """What the JSON document says about the image (docs/vision.md)."""
        height, width = self.pixels.shape[:2]
        return {
            "source": self.source,
            "grid": {"rows": self.rows, "cols": self.cols},
            "patch_size": self.patch_size,
            "size": {"height": height, "width": width},
            "special_tokens": list(self.specials),
            "patch_token": "r{row}c{col}",
            "first_patch": len(self.specials),
        }


def parse_query(text: str | None) -> tuple[int, int] | None:
    """--query "r,c" → (r, c); None keeps the default query ([CLS], or the patches' mean without one)."""
    if text is None:
        return None
    parts = text.replace(" ", "").split(",")
    if len(parts) != 2 or not all(part.isdigit() for part in parts):
        raise BadInput(f"--query {text!r}", "give a patch as ROW,COL, e.g. --query 3,7")
    return int(parts[0]), int(parts[1])


def query_row(grid: PatchGrid, weights: np.ndarray, query: tuple[int, int] | None) -> tuple[np.ndarray, str]:
    """The query's weights on the patch grid (rows, cols) from a head's (T, T) weights, and its name.

    Default: [CLS]'s row; a model without one (SigLIP) has no summary token, so the mean of the patches' rows.
    """
    if query is not None:
        index = grid.token_of(*query)
        return grid.on_grid(weights[index]), f"r{query[0]}c{query[1]}"
    if grid.specials and grid.specials[0] == "[CLS]":
        return grid.on_grid(weights[0]), "[CLS]"
    return grid.on_grid(weights[len(grid.specials) :].mean(axis=0)), "mean of the patches"
