"""How an analysis joins attn: one value per analysis, found by its report's type, and pluggy hooks to register it.

An analysis is one `AnalysisSpec`: its command's name, its engine, its report type and how that report is
drawn (in the terminal, as an SVG figure and HTML page, in a notebook). Render, the CLI and the notebook
display ask `analysis_for(report)`, which walks the report's type and its bases (a StoreReport is a
HeadsReport), never its class name. A head score is one `HeadScore`; a matrix `attn inspect --measure NAME`
shows instead of the weights is one `Measure`.

Built-in analyses register exactly as an outside one does: through the hooks below (pluggy), from a
module the package's door names (attn_cli/__init__.py fills `builtin_plugins`: this module is plain data
and may not import render), then from every installed package's entry points in the group "attn":

    [project.entry-points.attn]
    my_analysis = "my_package.attn_plugin"

where my_package/attn_plugin.py defines `@hookimpl def register_analyses(register): register(AnalysisSpec(…))`
and, for a command, `@hookimpl def register_commands(app)` (the Typer app; attn_cli/cli/__init__.py calls it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import pluggy

ENTRY_POINTS = "attn"  # the entry-point group plugins are found by
hookspec = pluggy.HookspecMarker("attn")
hookimpl = pluggy.HookimplMarker("attn")


class Hooks:
    """The hooks a plugin may implement (each a module-level function marked @hookimpl)."""

    @hookspec
    def register_analyses(self, register: Callable[[AnalysisSpec], None]) -> None:
        """register(AnalysisSpec(...)) once per analysis: its report type and how the report is drawn."""

    @hookspec
    def register_head_scores(self, register: Callable[[HeadScore], None]) -> None:
        """register(HeadScore(...)) once per head score `attn heads` adds to the built-in ones."""

    @hookspec
    def register_measures(self, register: Callable[[Measure], None]) -> None:
        """register(Measure(...)) once per measure `attn inspect --measure NAME` may show."""

    @hookspec
    def register_commands(self, app: Any) -> None:
        """Add commands to the Typer app `attn` (app.command("name")(function))."""


@dataclass(frozen=True)
class Figure:
    """How a report is drawn as an SVG figure (--save x.svg, .png, .pdf) and an HTML page (--save x.html, the
    notebook). The simple form is items + page: the figure's title line is `attn COMMAND · model …` and
    render/svg.flow lays the items out; svg and page_data take the whole drawing over instead.

    items(report, per_head) -> [Heat | (title, matrix, Scale, window)]   the SVG's pictures
    page(report, per_head) -> {"runs": [...], "start": [layer, head], ...}   what render/page.js draws
    svg(svg, x, y, report, panels, looked_by, per_head) -> y below it   (instead of the title and items)
    page_data(report, per_head) -> the page's data after tokens, model, text and scale   (instead of page)
    text(report) -> what the report was run on, in a line (default: report.text)
    tokens(report) -> the matrices' token labels (default: none)
    one(report) -> the report a page shows instead (a batch: its first text's)
    """

    items: Callable | None = None
    page: Callable | None = None
    svg: Callable | None = None
    page_data: Callable | None = None
    text: Callable[[Any], str] | None = None
    tokens: Callable[[Any], list[str]] | None = None
    one: Callable[[Any], Any] | None = None


@dataclass(frozen=True)
class AnalysisSpec:
    """One analysis: the command that runs it, its engine, its report type and how the report is drawn.

    name: the command (`attn NAME`) and the figure's title word.
    report: the report type its engine returns; reports of a subclass are found too.
    run(model: attn_cli.Model, ...) -> report: the engine, for the Python API and the command.
    terminal(report, **how) -> a Rich renderable: the terminal view.
    figure: the SVG and HTML drawing (None: no figure; --save refuses, the notebook shows tables).
    notebook(report) -> HTML: the notebook display, where it is not the page in a frame.
    """

    name: str
    report: type
    run: Callable | None = None
    terminal: Callable | None = None
    figure: Figure | None = None
    notebook: Callable[[Any], str] | None = None
    help: str = ""


@dataclass(frozen=True)
class HeadScore:
    """A head score `attn heads` computes after the built-in ones (math/score_names.SCORES): one number in
    [0, 1] per head and text, averaged over the texts like theirs (mean, std, texts that define it; in a store
    its histograms, deciles and top texts too).

    name: its JSON key in a head's "scores", its column in tables and --score NAME.
    compute(weights, allowed, tokens) -> (h,) values in [0, 1] (a torch tensor, numpy array or list): weights
        a float32 torch tensor (h, T, T), one text's heads' softmax weights as the model uses them, masked cells
        0; allowed a bool torch tensor (T, T), the cells a row may attend; tokens the text's T data.capture.Tokens
        (.text as the tokenizer spells it, .id, .index, .special). NaN where the score is undefined for a head on
        this text. A value outside [0, 1], a wrong shape or an exception stops the run with one line naming the
        score. It sees each text's whole (h, T, T) weights, which the built-in scores never hold at once (they
        read a block of rows at a time). It never sets a head's label (the built-in weight shares do).
    title: its heading in the top-heads table and the figure (default: the name).
    """

    name: str
    compute: Callable
    title: str = ""


@dataclass(frozen=True)
class Measure:
    """A matrix per head that `attn inspect --measure NAME` (measure="NAME" in the API) shows instead of the
    weights, in the terminal, the SVG figure and beside the weights on the page, and writes beside them.

    name: --measure NAME. title: its heading ("value-weighted norms ‖α·v·W_Oʰ‖"); its values are drawn from 0
    up to their largest, as magnitudes. field: each head's JSON key and HeadReport.measured's ("norms");
    column: the cell table's column and a cell's word ("norm").
    compute(layer, heads, kv_heads, weights, window) -> (h, rows, cols) torch tensor over the window's cells:
        layer the LayerCapture (q, k, v (H, T, D) as the model made them, w_o, scale …), heads the query heads
        and kv_heads each one's key/value head (None: raw's one), weights (h, rows, cols) their softmax weights
        over the window (masked cells 0), window the analysis' Window. Raise plumbing.errors' kinds to refuse.
    """

    name: str
    title: str
    field: str
    column: str
    compute: Callable


@dataclass
class Registry:
    """What the plugins registered, in the order they did."""

    analyses: list[AnalysisSpec] = field(default_factory=list)


# The door (attn_cli/__init__.py) names the built-in plugins: modules of later stages this one may not import.
builtin_plugins: Callable[[], Iterable[ModuleType]] = lambda: ()  # noqa: E731
_manager: pluggy.PluginManager | None = None
_registry: Registry | None = None
_measures: dict[str, Measure] | None = None
_head_scores: dict[str, HeadScore] | None = None


def plugin_manager() -> pluggy.PluginManager:
    """The plugins, found once: the built-in ones, then every installed entry point of the group "attn".
    Finding them imports each plugin's module only; nothing is registered until a hook is called."""
    global _manager
    if _manager is None:
        manager = pluggy.PluginManager("attn")
        manager.add_hookspecs(Hooks)
        for module in builtin_plugins():
            manager.register(module, name=module.__name__)
        manager.load_setuptools_entrypoints(ENTRY_POINTS)
        _manager = manager
    return _manager


def plugins() -> Registry:
    """What every plugin registered, asked once (the analyses' modules are imported then, torch with them)."""
    global _registry
    if _registry is None:
        registry = Registry()
        hook = plugin_manager().hook
        # pluggy calls the last registered plugin first: the entry points before the built-ins, so an outside
        # plugin that registers a built-in report type again takes its drawing over (the first found wins)
        hook.register_analyses(register=registry.analyses.append)
        _registry = registry
    return _registry


def measures() -> dict[str, Measure]:
    """Every registered Measure by name, asked once and apart from the analyses (a measure's module only)."""
    global _measures
    if _measures is None:
        found: dict[str, Measure] = {}
        plugin_manager().hook.register_measures(register=lambda measure: found.setdefault(measure.name, measure))
        _measures = found
    return _measures


def head_scores() -> dict[str, HeadScore]:
    """Every registered HeadScore by name, in the order they were registered, asked once and apart from the
    analyses. A plugin that names one after a built-in score, or two plugins that use one name, is refused
    in one line: the name is a JSON key and a column, so it may mean one thing."""
    global _head_scores
    if _head_scores is None:
        from attn_cli.math.score_names import SCORES
        from attn_cli.plumbing.errors import BadInput

        found: dict[str, HeadScore] = {}

        def register(score: HeadScore) -> None:
            if score.name in SCORES or score.name in found:
                raise BadInput(
                    f"a plugin registers a head score named {score.name!r}, which is taken",
                    "a built-in score has that name: rename the plugin's"
                    if score.name in SCORES
                    else "two plugins register it: rename one of them",
                )
            found[score.name] = score

        plugin_manager().hook.register_head_scores(register=register)
        _head_scores = found
    return _head_scores


def score_names() -> tuple[str, ...]:
    """The scores `attn heads` computes, in their order: the built-in ones (score_names.SCORES), then the
    registered HeadScores'. A run's partials, store and report are sized by this tuple."""
    from attn_cli.math.score_names import SCORES

    return (*SCORES, *head_scores())


def measure_named(name: str) -> Measure:
    """The registered Measure called `name`; a name none registered is refused in one line naming them."""
    from attn_cli.plumbing.errors import BadInput

    found = measures()
    if name not in found:
        raise BadInput(f"{name!r} is not a measure", f"choose from weights, {', '.join(sorted(found))}")
    return found[name]


def analysis_for(report) -> AnalysisSpec | None:
    """The analysis that draws the report: the one registered for its type, else for its nearest base."""
    analyses = plugins().analyses
    for kind in type(report).__mro__:
        for spec in analyses:
            if spec.report is kind:
                return spec
    return None


def registered_analysis(report) -> AnalysisSpec:
    """analysis_for a report an analysis made: one is registered for it, and none is a bug of that analysis."""
    spec = analysis_for(report)
    if spec is None:
        raise LookupError(f"no analysis is registered for a {type(report).__name__}: register an AnalysisSpec")
    return spec
