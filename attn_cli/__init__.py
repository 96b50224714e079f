"""attn: see what attention does with your sentence — a command line and a Python API.

    import attn_cli as attn
    model = attn.load("minilm")
    report = model.inspect("Hello, how are you?")
    store = attn.open_store("heads-store")   # a corpus store (attn heads --file … --store DIR), no model

Importing this package is light (no torch, no transformers): `load` imports them
when it is first called.
"""

from attn_cli.data import document as _document
from attn_cli.data import registry as _registry

__version__ = "0.1.0"
__all__ = ["load", "Model", "open_store", "AttnError", "BadInput", "__version__"]


def _notebook_html(report) -> str:
    """A report's inline display in a notebook. The package's door wires it: the reports (data, analyses)
    come before render in the flow and cannot import it, and every import of attn_cli passes through here."""
    from attn_cli.render.notebook import notebook_html

    return notebook_html(report)


_document.html_display = _notebook_html


def _builtin_plugins():
    """attn's own analyses, registered through the plugin hooks as an outside package's are (data/registry.py):
    named here, by the door, because the registry comes before render in the flow and cannot import it."""
    from attn_cli.render import builtins

    return [builtins]


_registry.builtin_plugins = _builtin_plugins


def __getattr__(name: str):
    if name in ("load", "Model"):
        from attn_cli import api

        return getattr(api, name)
    if name == "open_store":
        from attn_cli.analyses.store_read import open_store

        return open_store
    if name in ("AttnError", "BadInput"):
        from attn_cli.plumbing import errors

        return getattr(errors, name)
    raise AttributeError(f"module 'attn_cli' has no attribute {name!r}")
