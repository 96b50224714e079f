"""The `attn` command line. Thin: parse options → build a request → call the core → render.

Importing this module must not import torch or transformers, so `attn --help`
is instant; commands import the core inside their bodies.
"""

from __future__ import annotations

import functools

import typer
from typer.core import TyperCommand, TyperGroup

from attn_cli import __version__
from attn_cli.cli.ablate import EPILOG as ABLATE_EPILOG
from attn_cli.cli.ablate import ablate_command
from attn_cli.cli.attribute import EPILOG as ATTRIBUTE_EPILOG
from attn_cli.cli.attribute import attribute_command
from attn_cli.cli.circuits import EPILOG as CIRCUITS_EPILOG
from attn_cli.cli.circuits import circuits_command
from attn_cli.cli.compare import EPILOG as COMPARE_EPILOG
from attn_cli.cli.compare import compare_command
from attn_cli.cli.diagnose import EPILOG as DIAGNOSE_EPILOG
from attn_cli.cli.diagnose import diagnose_command
from attn_cli.cli.diff import EPILOG as DIFF_EPILOG
from attn_cli.cli.diff import diff_command
from attn_cli.cli.docs import EPILOG as DOCS_EPILOG
from attn_cli.cli.docs import docs_command
from attn_cli.cli.explore import EPILOG as EXPLORE_EPILOG
from attn_cli.cli.explore import explore_command
from attn_cli.cli.generate import EPILOG as GENERATE_EPILOG
from attn_cli.cli.generate import generate_command
from attn_cli.cli.heads import EPILOG as HEADS_EPILOG
from attn_cli.cli.heads import heads_command
from attn_cli.cli.heads_show import EPILOG as HEADS_SHOW_EPILOG
from attn_cli.cli.heads_show import heads_show_command
from attn_cli.cli.importance import EPILOG as IMPORTANCE_EPILOG
from attn_cli.cli.importance import importance_command
from attn_cli.cli.inspect import EPILOG as INSPECT_EPILOG
from attn_cli.cli.inspect import inspect_command
from attn_cli.cli.kv import EPILOG as KV_EPILOG
from attn_cli.cli.kv import kv_command
from attn_cli.cli.models import EPILOG as MODELS_EPILOG
from attn_cli.cli.models import models_command
from attn_cli.cli.patch import EPILOG as PATCH_EPILOG
from attn_cli.cli.patch import patch_command
from attn_cli.cli.rollout import EPILOG as ROLLOUT_EPILOG
from attn_cli.cli.rollout import rollout_command
from attn_cli.cli.routes import EPILOG as ROUTES_EPILOG
from attn_cli.cli.routes import routes_command
from attn_cli.cli.steps import EPILOG as STEPS_EPILOG
from attn_cli.cli.steps import steps_command


class _FlagsWithoutType:
    """-h/--help is a flag: no '<bool>' in its help row (Typer prints a type for every option)."""

    def get_help_option(self, ctx):
        option = super().get_help_option(ctx)
        if option is not None:
            option.metavar = ""
        return option


class Command(_FlagsWithoutType, TyperCommand):
    """A command whose help speaks one language: upper-case words for every value (N, FILE, LAYER),
    never Typer's types (<int>, <list[str]>), and plain `TEXT...` in the usage line."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for param in self.params:
            if isinstance(param, typer.core.TyperArgument):
                param.display_type_rich = lambda ctx: None  # the name column already says TEXT
            elif param.metavar is None and not param.is_flag:
                param.metavar = value_word(param)
            if param.type_descriptor.annotation is float:
                param.callback = _finite(param.callback)
        # One rule for several words: a command that takes one TEXT collects the extra ones, to say how to
        # quote them (parse_args), not Click's "unexpected extra argument"; one that takes several notes them.
        self.allow_extra_args = self.one_text() is not None
        if self.name in _documented():  # every command with a page says where it is, in one place
            self.epilog = f"{self.epilog or ''}\n\nDocs: attn docs {self.name}".lstrip("\n")

    def one_text(self) -> typer.core.TyperArgument | None:
        """The command's one TEXT argument (text, prompt), when it takes one and not several."""
        texts = (p for p in self.params if isinstance(p, typer.core.TyperArgument) and p.name in ("text", "prompt"))
        return next((p for p in texts if p.nargs == 1), None)

    def parse_args(self, ctx, args):
        """Old spellings of renamed options rewritten to the new ones (one note each), then Click's parsing;
        then the rule for several texts (cli/vocabulary.py)."""
        from attn_cli.cli.common import note
        from attn_cli.cli.vocabulary import (
            EXACT_TEXTS,
            looks_unquoted,
            one_text_only,
            rewrite_deprecated,
            unquoted_note,
        )

        takes_value = {
            name
            for param in self.params
            if isinstance(param, typer.core.TyperOption) and not param.is_flag and not param.count
            for name in param.opts + param.secondary_opts
        }
        if not ctx.resilient_parsing:
            args = rewrite_deprecated(self.name, list(args), takes_value, note)
        rest = super().parse_args(ctx, args)
        if ctx.resilient_parsing:
            return rest
        one = self.one_text()
        if one is not None and rest:
            refusal = one_text_only(self.name, [ctx.params[one.name], *rest])
            ctx.fail(f"{refusal.message}; {refusal.hint}")
        texts = ctx.params.get("texts")
        if texts and looks_unquoted(texts) and self.name not in EXACT_TEXTS:
            note(unquoted_note(self.name, texts))
        return rest

    def invoke(self, ctx):
        """The command, its errors spelled as the command line's options (plumbing.errors.SPELLING)."""
        from attn_cli.plumbing.errors import SPELLING

        token = SPELLING.set("cli")
        try:
            return super().invoke(ctx)
        finally:
            SPELLING.reset(token)

    def collect_usage_pieces(self, ctx):
        """[OPTIONS] TEXT... (required), [TEXT]... (optional): not Typer's {TEXT}... and [[TEXT]...]...."""
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if isinstance(param, typer.core.TyperArgument):
                word = param.metavar or param.name.upper()
                word = word if param.required else f"[{word}]"
                pieces.append(word + ("..." if param.nargs != 1 and " " not in word else ""))
        return pieces


@functools.cache
def _documented() -> frozenset[str]:
    """The commands that have a page (what `attn docs NAME` shows), read once however many commands ask."""
    from attn_cli.cli.docs import command_pages

    return frozenset(command_pages())


def _finite(callback):
    """Every float option's check, wrapped around its own callback: a count, a rate or a threshold, so a
    finite number of 0 or more (the parser itself takes nan, inf and -1)."""
    import math

    def check(ctx, param, value):
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise typer.BadParameter(f"{value:g} is not a finite number of 0 or more", ctx=ctx, param=param)
        return value if callback is None else callback(ctx, param, value)

    return check


def value_word(option) -> str:
    """The upper-case word for an option's value: N for a number of things, FILE or DIR for a path,
    else the option's own name (--layer LAYER, --head-fusion HEAD_FUSION)."""
    kind = option.type_descriptor
    if kind.is_path:
        return "DIR" if option.name.endswith("_dir") else "FILE"
    if option.bare_type() == "int" or (kind.is_ranged and kind.ranged_type_name == "int"):
        return "N"
    return max(option.opts, key=len).lstrip("-").replace("-", "_").upper()


class Group(_FlagsWithoutType, TyperGroup):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for name, subcommands in SUBCOMMANDS.items():  # `attn heads show`: heads takes texts and has sub-commands
            if name in self.commands:
                self.commands[name] = TextsOrSubcommands(self.commands[name], subcommands())


class TextsOrSubcommands(Group):
    """A command on texts whose first word may name a sub-command instead: `attn heads TEXT...` runs the
    command, `attn heads show DIR` its sub-command, and `attn heads -- show` the command on the word "show".

    Click's groups parse their own options before the sub-command's name, and a command's TEXT... would
    take that name as a text: so the first word decides which of the two parses the rest."""

    def __init__(self, command: Command, subcommands: dict):
        super().__init__(
            name=command.name,
            commands=subcommands,
            params=command.params,
            help=command.help,
            short_help=command.short_help,
            epilog=command.epilog,
            context_settings=command.context_settings,
            rich_markup_mode=getattr(command, "rich_markup_mode", None),
            subcommand_metavar="",
        )
        self.command = command
        command.format_help = self.format_help  # type: ignore[method-assign]  # `attn heads --help` lists the sub-commands too

    def collect_usage_pieces(self, ctx):
        return Command.collect_usage_pieces(self, ctx)

    def get_params(self, ctx):
        """The command's parameters, for its help; none on the way to a sub-command (whose usage line would
        otherwise read `attn heads [TEXT]... show`)."""
        return super().get_params(ctx) if ctx.command is self.command else []

    def make_context(self, info_name, args, parent=None, **extra):
        if args[:1] and args[0] in self.commands:
            for key, value in self.context_settings.items():
                extra.setdefault(key, value)
            ctx = self.context_class(self, info_name=info_name, parent=parent, **extra)
            ctx._protected_args, ctx.args = args[:1], list(args[1:])  # the sub-command parses the rest
            return ctx
        return self.command.make_context(info_name, args, parent, **extra)

    def invoke(self, ctx):
        args = [*ctx._protected_args, *ctx.args]
        ctx._protected_args, ctx.args = [], []
        with ctx:
            name, command, rest = self.resolve_command(ctx, args)
            ctx.invoked_subcommand = name
            with command.make_context(name, rest, parent=ctx) as sub:
                return sub.command.invoke(sub)


app = typer.Typer(
    cls=Group,
    name="attn",
    help="See what attention does with your sentence: Q, K, V, scores, weights and symmetry of every head. "
    "Each command's page: attn docs COMMAND.",
    no_args_is_help=True,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.command("inspect", cls=Command, epilog=INSPECT_EPILOG)(inspect_command)
app.command("explore", cls=Command, epilog=EXPLORE_EPILOG)(explore_command)
app.command("heads", cls=Command, epilog=HEADS_EPILOG)(heads_command)
app.command("diagnose", cls=Command, epilog=DIAGNOSE_EPILOG)(diagnose_command)
app.command("compare", cls=Command, epilog=COMPARE_EPILOG)(compare_command)
app.command("steps", cls=Command, epilog=STEPS_EPILOG)(steps_command)
app.command("rollout", cls=Command, epilog=ROLLOUT_EPILOG)(rollout_command)
app.command("attribute", cls=Command, epilog=ATTRIBUTE_EPILOG)(attribute_command)
app.command("routes", cls=Command, epilog=ROUTES_EPILOG)(routes_command)
app.command("ablate", cls=Command, epilog=ABLATE_EPILOG)(ablate_command)
app.command("patch", cls=Command, epilog=PATCH_EPILOG)(patch_command)
app.command("importance", cls=Command, epilog=IMPORTANCE_EPILOG)(importance_command)
app.command("kv", cls=Command, epilog=KV_EPILOG)(kv_command)
app.command("diff", cls=Command, epilog=DIFF_EPILOG)(diff_command)
app.command("generate", cls=Command, epilog=GENERATE_EPILOG)(generate_command)
app.command("circuits", cls=Command, epilog=CIRCUITS_EPILOG)(circuits_command)
app.command("models", cls=Command, epilog=MODELS_EPILOG)(models_command)
app.command("docs", cls=Command, epilog=DOCS_EPILOG)(docs_command)


def _plugin_commands() -> None:
    """Commands an installed plugin adds (data/registry.py's register_commands hook), after attn's own."""
    from attn_cli.data.registry import plugin_manager

    plugin_manager().hook.register_commands(app=app)


_plugin_commands()


HEADS_SHOW = typer.main.get_command_from_info(
    typer.models.CommandInfo(name="heads show", cls=Command, epilog=HEADS_SHOW_EPILOG, callback=heads_show_command),
    pretty_exceptions_short=True,
    rich_markup_mode=app.rich_markup_mode,
)
SUBCOMMANDS = {"heads": lambda: {"show": HEADS_SHOW}}  # a command's sub-commands, by the command's name


def _version(value: bool) -> None:
    if value:
        typer.echo(f"attn {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", metavar="", callback=_version, is_eager=True, help="Show the version."
    ),
) -> None:
    """See what attention does with your sentence."""
