"""How a command loads its model: the options every model-running command takes, declared once.

Typer reads a command's options from its signature, so a command that loads a model
would otherwise repeat the same eight parameters. `@loads_model` puts them into the
command's signature where its `loading: Loading` parameter stands, and hands the
command one Loading built from them.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass

from attn_cli.cli import options as opt


@dataclass(frozen=True)
class Loading:
    """The model-loading options of the command line, as Typer declares them."""

    model: opt.Model = None
    option: opt.ModelOptions = None
    device: opt.Device = "auto"
    dtype: opt.DTypeOpt = opt.DType.auto
    allow_pickle: opt.AllowPickle = False
    revision: opt.Revision = None
    trust_remote_code: opt.TrustRemoteCode = False
    device_map: opt.DeviceMap = None

    def options(self) -> dict:
        """The backend's options: -O KEY=VALUE pairs and the loading flags that were given."""
        from attn_cli.cli.common import model_options

        return model_options(
            self.option,
            revision=self.revision,
            allow_pickle=self.allow_pickle,
            trust_remote_code=self.trust_remote_code,
            device_map=self.device_map,
        )

    def loaded_as(self) -> dict:
        """What attn_cli.load records of this load (Model.loaded_as): what Ray workers load, given before the
        model loads here (`attn heads --engine ray` starts its workers first)."""
        return {"model": self.name, "device": self.device, "dtype": self.dtype.value, "options": self.options()}

    def load(self, model: str | None = None):
        """attn_cli.load with these choices, of `model` (another checkpoint: diff's B) or else this one."""
        from attn_cli.cli.common import load_model

        return load_model(
            self.name if model is None else model, device=self.device, dtype=self.dtype, options=self.options()
        )

    @property
    def name(self) -> str:
        """The model to load: --model, or the default that configs/defaults.toml names."""
        from attn_cli.plumbing.config import defaults

        return defaults()["inspect"]["model"] if self.model is None else self.model

    @property
    def label(self) -> str:
        """The spinner's words while the model loads and runs."""
        return f"running {self.name} …"


def loads_model(command: Callable) -> Callable:
    """Give `command` the loading options in place of its `loading: Loading` parameter."""
    signature = inspect.signature(command, eval_str=True)
    hints = typing.get_type_hints(Loading, include_extras=True)
    shared = [
        inspect.Parameter(
            field.name, inspect.Parameter.KEYWORD_ONLY, default=field.default, annotation=hints[field.name]
        )
        for field in dataclasses.fields(Loading)
    ]
    parameters = []
    for parameter in signature.parameters.values():
        # Typer calls commands with keywords only, so every parameter can be keyword-only.
        keyword = parameter.replace(kind=inspect.Parameter.KEYWORD_ONLY)
        parameters += shared if parameter.name == "loading" else [keyword]
    if len(parameters) == len(signature.parameters):
        raise TypeError(f"{command.__name__} has no `loading: Loading` parameter")

    @functools.wraps(command)
    def with_loading(**given):
        from attn_cli.cli.common import check_options
        from attn_cli.cli.edge import user_errors

        with user_errors():
            check_options(given)  # every command that loads a model: integers in range, no output an input
        loading = Loading(**{field.name: given.pop(field.name) for field in dataclasses.fields(Loading)})
        return command(loading=loading, **given)

    with_loading.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]  # Typer reads it
    return with_loading
