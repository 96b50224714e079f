"""`attn explore`: the Textual app, which wires keys and clicks to the session (explore/session.py) and
hands the widgets (explore/widgets.py) the lines drawn for it (explore/drawn.py).

The model is loaded on the session's model thread (the screen shows what is happening meanwhile); every
look after that is `model.inspect(...)` on the loaded model, cached per (text, variant), so moving
between heads only redraws. Everything drawn comes from render/ through explore/view.py.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from rich.text import Text
from textual import events
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Static

from attn_cli.explore.drawn import Drawn
from attn_cli.explore.keys import LookKeys
from attn_cli.explore.kinds import STACK_KEY, query_below
from attn_cli.explore.layout import MIN_HEIGHT, MIN_WIDTH, compact, detail_width, next_page, too_small
from attn_cli.explore.session import DEFAULT_TEXT, Session, variant_message
from attn_cli.explore.view import detail_place, status_line, variant_label
from attn_cli.explore.widgets import DetailView, GridView, HelpScreen, KeysLine, Pane, SentenceInput, StripView, strip
from attn_cli.plumbing.errors import AttnError


def _of(owner: str, name: str) -> property:
    """The session's (or the drawn lines') `name`, read through the app (the tests and the benchmark look)."""
    return property(lambda self: getattr(getattr(self, owner), name))


class ExploreApp(LookKeys, App[int]):
    """The explorer. load_model() → Model runs in a thread; the rest is on the loaded model (the keys that change
    what is looked at: explore/keys.py)."""

    TITLE = "attn explore"
    ENABLE_COMMAND_PALETTE = False
    CSS_PATH = "app.tcss"
    BINDINGS = [
        Binding("left,h", "head(-1)", "head", key_display="←→"),
        Binding("right,l", "head(1)", "head", show=False),
        Binding("k", "layer(-1)", "layer", show=False),
        Binding("j", "layer(1)", "layer", show=False),
        Binding("left_square_bracket", "query(-1)", "query", show=False),
        Binding("right_square_bracket", "query(1)", "query", show=False),
        Binding("e", "edit", "edit"),
        Binding(STACK_KEY, "stack", "stack"),  # an encoder–decoder model's (elsewhere off: keys.KINDS)
        Binding("t", "edit_target", "target"),  # likewise
        Binding("v", "variant", "variant"),
        Binding("s", "scores", "scores"),
        Binding("g", "grid_metric", "grid"),
        Binding("x", "export", "export"),
        Binding("a", "attribute", "attribute", show=False),  # in the help (?): the keys line is full at 80 columns
        Binding("z", "ablate", "ablate", show=False),  # likewise
        Binding("r", "routes", "routes", show=False),  # likewise
        Binding("question_mark", "help", "help", key_display="?"),
        Binding("q", "quit_app", "quit"),
        Binding("ctrl+c", "quit_app", "quit", show=False, priority=True),  # else Textual's "press ctrl+q"
        Binding("escape", "clear_message", "clear the message", show=False),
    ]

    # What the session holds, read through the app.
    model, text, report, reports, threads, load_seconds, frozen = (
        _of("session", name) for name in ("model", "text", "report", "reports", "threads", "load_seconds", "frozen")
    )
    layer, head, query, variant, scores, metric = (
        _of("session", name) for name in ("layer", "head", "query", "variant", "scores", "metric")
    )
    headers, grid_lines, maps_lines, panels = (
        _of("drawn", name) for name in ("headers", "grid_lines", "maps_lines", "panels")
    )

    def __init__(
        self,
        load_model,
        text: str = DEFAULT_TEXT,
        *,
        model_name: str = "",
        truncate: bool = False,
        export_dir: Path | None = None,
        threads: int | None = None,
        target: str | None = None,
        image: bool = False,
    ):
        super().__init__()
        self.session = Session(
            load_model, text, model_name=model_name, truncate=truncate, threads=threads, target=target, image=image
        )
        self.drawn = Drawn(self.console, lambda: self.console_options, strip, self.no_color)
        self.model_name = model_name
        self.export_dir = Path.cwd() if export_dir is None else export_dir
        self.error: BaseException | None = None  # a load failure, raised again by the command after the app
        # what the screen shows now: the grid's renderable (a click maps to a head), its columns, and which
        # detail lines are which query rows
        self.grid_renderable = None
        self.grid_columns = 0
        self.detail_rows: dict[int, int] = {}
        self.header_lines = 0
        self.status_shown = ""
        self.page = "grid"  # the view with the focus: the "grid", or the selected head's "heatmap" or "panel"
        self.message_lines = -1
        self.message_about: tuple[int, int] | None = None  # the head the message line speaks of (z's ablation)
        self.generation = 0  # a prefetch of an older one stops
        self.painted = asyncio.Event()
        self.paints = 0
        self.painted_at = 0.0
        self.looks: dict[tuple[str, str], float] = {}
        self.looked = asyncio.Event()
        self.exports = 0
        self.focus_before_small: Widget | None = None  # the view with the focus when the screen became too small

    # -- layout --------------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield Static(Text(f"loading {self.model_name or 'the model'} …"), id="loading")
        with Vertical(id="main"):
            yield Static(id="header")
            yield Static(id="status")
            with Horizontal(id="body"):
                with Pane(id="left"):
                    yield GridView(id="grid")
                with Pane(id="right"):
                    yield DetailView(id="detail")
            yield Static(id="message")
            yield SentenceInput(id="sentence")
        yield Static(id="too-small")
        yield KeysLine(id="keys")

    def on_mount(self) -> None:
        self.screen.add_class("loading")
        self.check_size(self.size.width, self.size.height)
        self.session.started = time.perf_counter()
        self.session.submit(self.load_in_thread)
        self.set_interval(0.25, self.tick_loading, name="loading")

    def on_unmount(self) -> None:
        self.session.close()

    def tick_loading(self) -> None:
        if self.model is None and self.error is None:
            elapsed = time.perf_counter() - self.session.started
            self.query_one("#loading", Static).update(
                Text.assemble(
                    ("attn explore\n\n", "bold"), f"{self.session.stage} … {elapsed:.1f} s\n\n", ("q quits", "dim")
                )
            )

    def on_resize(self, event: events.Resize) -> None:
        # Textual calls this before App's own handler: self.size is still the size before, until that has run.
        self.check_size(event.size.width, event.size.height)
        self.call_later(self.resized)

    def resized(self) -> None:
        """Draw again at the new size (self.size is the new one by now; the screen's layout follows)."""
        if self.model is None or self.screen.has_class("small"):
            return
        if self.focus_before_small is not None:  # hidden while too small, so the screen dropped the focus
            if self.focused is None:
                self.focus_before_small.focus()
            self.focus_before_small = None
        self.redraw(header=True)

    def check_size(self, width: int, height: int) -> None:
        small = too_small(width, height)
        if small and not self.screen.has_class("small") and isinstance(self.focused, StripView):
            self.focus_before_small = self.focused
        self.screen.set_class(small, "small")
        self.query_one("#too-small", Static).update(
            Text(
                f"attn explore needs a terminal of at least {MIN_WIDTH} × {MIN_HEIGHT}; this one is "
                f"{width} × {height}. Enlarge it (q quits).",
                style="yellow",
            )
        )

    # -- loading -------------------------------------------------------------------------------------
    def load_in_thread(self) -> None:
        try:
            model, report = self.session.load()
        except AttnError as error:
            self.call_from_thread(self.failed_to_load, error)
            return
        self.call_from_thread(self.loaded, model, report)

    def failed_to_load(self, error: AttnError) -> None:
        self.error = error
        self.exit(return_code=1)

    def loaded(self, model, report) -> None:
        self.session.loaded(model, report)
        self.screen.remove_class("loading")
        self.query_one("#grid").focus()
        where = " · tab: the selected head" if self.paged() else ""
        self.say(f"loaded in {self.load_seconds:.1f} s{where} · ? lists the keys", style="dim")
        self.redraw(header=True)

    # -- keys ----------------------------------------------------------------------------------------
    def shown_report(self):
        return self.session.shown_report()

    def say(self, message: str, style: str = "", about: tuple[int, int] | None = None) -> None:
        """The message line. A message as tall as the one before it only repaints (no new layout). about: the
        (layer, head) it speaks of, cleared when another head is selected (z's "head 1.3 removed: …")."""
        self.message_about = about
        widget = self.query_one("#message", Static)
        text = Text(message, style=style)
        width = max(1, widget.size.width - 2)
        lines = len(text.wrap(self.console, width)) if message else 0
        widget.update(text, layout=lines != self.message_lines)
        self.message_lines = lines

    def select(self, layer: int, head: int) -> None:
        self.session.layer, self.session.head = layer, head
        if self.message_about is not None and self.message_about != (layer, head):
            self.say("")  # it spoke of the head selected before
        self.redraw()

    def set_query(self, query: int) -> None:
        self.session.set_query(query)
        self.redraw(grid=self.metric == "pictures")  # every head's picture is from the query

    def action_head(self, step: int) -> None:
        if self.model is not None:
            self.select(*self.session.head_after(step))

    def action_layer(self, step: int) -> None:
        if self.model is not None:
            self.select(*self.session.layer_after(step))

    def action_query(self, step: int, line: bool = False) -> None:
        """[ ] the next query token; ↑ ↓ on the selected head (`line`) its next row (an image: a row of patches)."""
        if self.model is not None:
            self.set_query(query_below(self.query, step, self.report) if line else self.query + step)

    def action_scores(self) -> None:
        if self.model is not None:
            self.session.scores = not self.scores
            self.say(f"heatmap: {'scores' if self.scores else 'weights'}", style="dim")
            self.redraw(grid=False)

    def action_grid_metric(self) -> None:
        if self.model is not None:
            self.session.next_metric()
            self.say(f"grid: {self.metric}", style="dim")
            self.redraw()

    def action_switch(self, step: int) -> None:
        """tab (step 1) and shift+tab (-1) in the grid or the heatmap: beside each other, the focus goes to the
        other one; on a compact screen, the next page (grid → heatmap → query panel)."""
        if self.model is None:
            return
        self.page = next_page(self.page, step) if self.paged() else "heatmap" if self.page == "grid" else "grid"
        self.redraw(grid=False)
        self.query_one("#grid" if self.page == "grid" else "#detail").focus()

    def view_focused(self, view: StripView) -> None:
        """The grid or the detail view got the focus (a key, a click): the page follows."""
        if isinstance(view, GridView):
            self.page = "grid"
        elif self.page == "grid":
            self.page = "heatmap"
        self.redraw(grid=False, detail=False)

    def action_clear_message(self) -> None:
        """Esc: the message line goes (an error stays until then, however stale)."""
        self.say("")

    def paged(self) -> bool:
        return compact(self.size.width, self.size.height)

    def action_help(self) -> None:
        stacked = self.query_one("#body").has_class("stacked")
        self.push_screen(HelpScreen(detail_place(self.paged(), stacked)))

    def action_quit_app(self) -> None:
        self.exit(0)

    # -- running the model ---------------------------------------------------------------------------
    def run_look(self, text: str, variant: str) -> None:
        """Show `text` under `variant`: at once from the cache, else after a run on the model thread."""
        if not text.strip():
            self.say("the text is empty: press e and type a sentence", style="yellow")
            return
        if self.session.cached(text, variant):
            self.show_look(text, variant, "")
            return
        self.say(f"running {variant_label(variant)} on {len(text)} characters …", style="dim")
        self.session.submit(self.look_in_thread, text, variant)

    def look_in_thread(self, text: str, variant: str) -> None:
        shown, error = self.session.run_looks(text, variant)
        if not shown:  # the text itself failed: keep what is on screen
            self.call_from_thread(self.say, f"error: {error}", "red")
            return
        try:
            self.drawn.prerender(self.session, text, variant, variant_message(variant, error), self.size)
        except Exception:  # noqa: BLE001 - optional: the main thread renders it otherwise
            pass
        self.call_from_thread(self.show_look, text, variant, error)

    def show_look(self, text: str, variant: str, error: str) -> None:
        if self.session.show(text, variant, error):
            self.drawn.forget(*self.session.forget_old_texts())
            self.say(f"{len(self.report.tokens)} tokens", style="dim")
        elif variant != "baseline":
            self.say(f"variant {variant_label(variant)} beside the baseline (v: next)", style="dim")
        else:
            self.say("baseline", style="dim")
        if self.session.variant_error:
            self.say(f"error: {self.session.variant_error}", style="red")
        self.redraw(header=True)
        self.call_after_refresh(self.mark_look, text, variant)

    def mark_look(self, text: str, variant: str) -> None:
        """When a new sentence or variant reached the screen (the benchmark's stop watch)."""
        self.looks[(text, variant)] = time.perf_counter()
        self.looked.set()

    # -- drawing -------------------------------------------------------------------------------------
    def status_view(self) -> Text:
        page = self.page if isinstance(self.focused, StripView) else None
        hidden = self.query_one("#right", Pane).hidden_lines() if page not in (None, "grid") else 0
        return status_line(
            self.layer,
            self.head,
            self.query,
            self.report.tokens[self.query].text,
            page,
            self.paged(),
            hidden,
            self.session.stack,
            self.session.image,
        )

    def redraw(self, grid: bool = True, header: bool = False, detail: bool = True) -> None:
        """Render what changed (header: text, variant or size; grid: the selected head or more) and show it."""
        if self.model is None:
            return
        if header or not self.header_lines:
            header_view, self.header_lines = self.drawn.header_view(
                self.session.reports[(self.text, "baseline")], self.variant, self.size.width, self.session.stack
            )
            self.query_one("#header", Static).update(header_view)
        self.show_status()
        self.show_pages()
        if grid:
            shown = self.shown_report()
            mark = (self.layer, self.head)
            columns, stacked = self.drawn.grid_layout(shown, self.metric, mark, self.size, self.header_lines)
            self.query_one("#body").set_class(stacked, "stacked")
            self.grid_columns = columns
            self.grid_renderable, lines = self.drawn.grid(shown, self.metric, mark, columns, self.query)
            self.query_one("#grid", GridView).show(lines, columns)
        if detail:
            self.query_one("#detail", DetailView).show(self.detail_strips())
            self.scroll_to_selection()
        self.call_after_refresh(self.mark_painted)

    def show_pages(self) -> None:
        """Both panes, or on a compact screen only the page's (the other's display off)."""
        paged = self.paged()
        for pane, shown in (
            (self.query_one("#left", Pane), not paged or self.page == "grid"),
            (self.query_one("#right", Pane), not paged or self.page != "grid"),
        ):
            if pane.display != shown:
                pane.display = shown

    def detail_width(self, columns: int | None = None, stacked: bool | None = None) -> int:
        stacked = self.query_one("#body").has_class("stacked") if stacked is None else stacked
        return detail_width(self.size.width, self.grid_columns if columns is None else columns, stacked)

    def detail_strips(self, layer: int | None = None, head: int | None = None) -> list[Strip]:
        """The selected head's heatmap(s) behind the ▶ gutter, then the query panel and statistics (Drawn.detail).
        With (layer, head): a prefetch of that head's heatmap, nothing returned."""
        width = self.detail_width()
        part = ("panel" if self.page == "panel" else "heatmap") if self.paged() else "all"
        lines, rows = self.drawn.detail(self.session, width, layer, head, part)
        if layer is None:
            self.detail_rows = rows
        return lines

    def prefetch(self, generation: int, neighbours: list | None = None) -> None:
        """While idle, render the heatmaps of the heads one key away (Session.neighbours), one per turn of the
        event loop, so moving there only repaints. A redraw since (a new generation) stops it."""
        if generation != self.generation or self.model is None or self.report.matrices_left_out:
            return
        neighbours = self.session.neighbours() if neighbours is None else neighbours
        if not neighbours:
            return
        try:
            self.detail_strips(*neighbours[0])
        except Exception:  # noqa: BLE001 - a prefetch is optional (the app may also be closing)
            return
        self.call_later(self.prefetch, generation, neighbours[1:])

    def scroll_to_selection(self, pane: Pane | None = None) -> None:
        """Keep the selected layer's thumbnails and the selected query row in view (in `pane`, else in both)."""
        left, right = self.query_one("#left", Pane), self.query_one("#right", Pane)
        if pane in (None, left):
            left.show_layer(self.grid_renderable, self.layer)
        if pane in (None, right):
            right.show_lines([number for number, row in self.detail_rows.items() if row == self.query])

    def show_status(self) -> None:
        """The status line, where it changed (after a paint or a scroll: whether the selected head has lines out
        of view)."""
        if self.model is None:
            return
        status = self.status_view()
        if status.plain != self.status_shown:
            self.status_shown = status.plain
            self.query_one("#status", Static).update(status, layout=False)

    def mark_painted(self) -> None:
        """Runs after the screen refresh that follows a redraw: the new view has been rendered."""
        self.show_status()
        self.paints += 1
        self.painted_at = time.perf_counter()
        self.painted.set()
        self.generation += 1
        self.set_timer(0.05, lambda generation=self.generation: self.prefetch(generation))

    # -- export --------------------------------------------------------------------------------------
    def action_export(self) -> None:
        if self.model is None:
            return
        from attn_cli.explore.export import export

        self.exports += 1
        report = self.shown_report()
        try:
            head = self.session.detail_head(report, self.layer, self.head, self.detail_width())
            written = export(
                self.export_dir,
                report,
                self.variant,
                self.layer,
                head,
                self.scores,
                self.exports,
                lambda: self.export_screenshot(title=f"attn explore · {report.model.name}", simplify=True),
                self.session.reports[(self.text, "baseline")] if self.session.kind == "pair" else None,
            )
        except (AttnError, OSError) as error:
            self.say(f"error: {getattr(error, 'message', None) or error}", style="red")
            return
        stem = written[0].with_suffix("")
        self.say(f"wrote {stem.name}{{.svg, -head.svg, .html, .json}} in {stem.parent}", style="green")
