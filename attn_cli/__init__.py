"""attn: a command-line attention inspector."""

__version__ = "0.1.0"
