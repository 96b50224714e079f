"""`attn explore`: a full-screen Textual app on a model loaded once.

The model is loaded in a worker thread (the screen shows what is happening meanwhile); every look
after that is `model.inspect(...)` on the loaded model, cached per (text, variant), so moving
between heads only redraws. Everything drawn comes from render/ through explore/view.py.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
import gc
import os
import time
from pathlib import Path

from rich.console import Group
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Input, Static

from attn_cli.plumbing.errors import AttnError
from attn_cli.explore.view import (GRID_METRICS, VARIANTS, CachedGrid, grid_thumb, grid_view,
                                   grid_width, gutter, maps_view, mark_strips, panel_view, row_lines,
                                   thumbnails_grid, variant_label)

DEFAULT_TEXT = "The cat sat on the mat."
MIN_WIDTH, MIN_HEIGHT = 60, 16  # below this the screen says so instead of drawing
DETAIL_MIN = 40  # columns the selected head needs beside the grid; less: one above the other
TOP_K = 5
ROW_WINDOW, COL_WINDOW = 32, 64  # long texts: the part of the selected head's matrix drawn
KEEP_TEXTS = 3  # sentences whose reports and drawn lines stay cached: the one shown and any on their way

KEYS = [
    ("← → / h l", "previous / next head (past the last head of a layer: the next layer)"),
    ("↑ ↓ / k j", "previous / next layer (in the heatmap, after tab or a click: the query row)"),
    ("[ ]", "previous / next query token, wherever the focus is"),
    ("tab", "focus the grid or the heatmap"),
    ("click", "a thumbnail selects its head; a heatmap row selects its query token"),
    ("e", "edit the sentence and run the model again"),
    ("v", "next variant: baseline, shared-k, no-scale, raw, cosine (beside the baseline)"),
    ("s", "scores / weights in the heatmap"),
    ("g", "grid metric: weight thumbnails, mean entropy, asymmetry"),
    ("x", "export what is on screen: .svg (the screen), -head.svg (figure), .html, .json"),
    ("?", "this help"),
    ("q", "quit"),
]


def model_threads(requested: int | None, torch_default: int, cores: int | None) -> int:
    """CPU threads for the model: as asked, else torch's choice less the core the screen needs.

    The screen (this app's main thread) draws while the model runs; with torch's threads on every core
    the two take turns on busy cores, and torch's threads wait on each other (on 2 cores a short
    sentence then takes several times as long).
    """
    if requested:
        return requested
    return max(1, min(torch_default, (cores or 1) - 1))


def available_cores() -> int | None:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count()


NULL = Style.null()  # every segment gets a style: Textual's NO_COLOR filter reads each one


def strip(segments) -> Strip:
    """A Strip whose segments all have a style (Textual's NO_COLOR filter reads every segment's style)."""
    return Strip([segment if segment.style is not None else Segment(segment.text, NULL, segment.control)
                  for segment in segments])


class StripView(Widget, can_focus=True):
    """Lines rendered once by the app (Rich renderables from render/) and shown through Textual's line API.

    Rendering a renderable is the slow part of a repaint; the app renders each view once per change, at
    the width the widget will have, and this widget only hands the lines to the compositor.
    """

    DEFAULT_CSS = "StripView { height: auto; }"

    def __init__(self, *, id: str):
        super().__init__(id=id)
        self.strips: list[Strip] = []

    def show(self, strips: list[Strip], width: int | None = None) -> None:
        """New lines; a layout pass only when the widget's size changes (a repaint is cheaper)."""
        resized = len(strips) != len(self.strips) or (width is not None and self.styles.width != width)
        old, self.strips = self.strips, strips
        if resized:
            self.styles.height = max(1, len(strips))
            if width is not None:
                self.styles.width = width
            self.refresh(layout=True)
            return
        # Lines kept from a cache are the same objects: repaint only the others (the grid's ◂ moves).
        changed = [y for y, (before, after) in enumerate(zip(old, strips)) if before is not after]
        if len(changed) < len(strips):
            self.refresh(*(Region(0, y, self.size.width, 1) for y in changed))
        else:
            self.refresh()

    def text(self) -> str:
        """What the widget shows, as plain text (for tests)."""
        return "\n".join(strip.text.rstrip() for strip in self.strips)

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        if y < len(self.strips):
            return self.strips[y].adjust_cell_length(width, NULL)
        return Strip.blank(width, NULL)

    def on_focus(self) -> None:
        self.app.redraw(grid=False, detail=False)

    def on_blur(self) -> None:
        self.app.redraw(grid=False, detail=False)


class GridView(StripView):
    BINDINGS = [
        Binding("up,k", "app.layer(-1)", "layer", key_display="↑↓", show=True),
        Binding("down,j", "app.layer(1)", "layer", show=False),
    ]

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        grid = self.app.grid_renderable
        if offset is None or not isinstance(grid, CachedGrid):
            return
        picked = grid.head_at(offset.x, offset.y)
        if picked is not None:
            self.app.select(*picked)


class DetailView(StripView):
    BINDINGS = [
        # j/k as ↓/↑ here: the app's j/k (the layer) only where neither view has the focus
        Binding("up,k", "app.query(-1)", "query row", key_display="↑↓", show=True),
        Binding("down,j", "app.query(1)", "query row", show=False),
    ]

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None:
            return
        row = self.app.detail_rows.get(offset.y)
        if row is not None:
            self.focus()
            self.app.set_query(row)


class Pane(VerticalScroll):
    """A scrolled column: the grid's (#left) or the heatmap's (#right). When its size changes (the terminal's
    size, the grid's width), its scroll is worked out again for the size it has now: from the top, then as far
    as the selection needs. One kept from the size before hides the top for nothing (and while the screen is
    too small the pane is 0 × 0, where any selection is out of view)."""

    def __init__(self, *children: Widget, id: str):
        super().__init__(*children, id=id, can_focus=False)
        self.laid_out = Size(0, 0)

    def on_resize(self, event: events.Resize) -> None:
        if event.size != self.laid_out:
            self.laid_out = event.size
            self.scroll_to(y=0, animate=False, immediate=True)
            self.app.scroll_to_selection(self)


class SentenceInput(Input):
    """The edit box for a new sentence: a line at the bottom of the screen while `e` is on (Enter runs the
    sentence, Esc keeps the old one). In the screen itself, not a screen of its own: closing a modal screen
    repaints and restyles everything behind it, and a new sentence is drawn right after."""

    BINDINGS = [Binding("escape", "cancel", "keep the old sentence", key_display="esc")]

    def action_cancel(self) -> None:
        self.app.end_edit(None)

    def on_blur(self) -> None:
        self.app.end_edit(None)


class KeysLine(Static):
    """The keys that work where the focus is, on the bottom line (what Textual's Footer shows, as one line
    of text: the Footer composes a widget per key again whenever the focus moves, and lays them out and
    paints them again, which the screen then waits for). A click on a key presses it."""

    COMPONENT_CLASSES = {"keys-line--key", "keys-line--description"}
    DEFAULT_CSS = """
    KeysLine { dock: bottom; height: 1; background: $footer-background; color: $footer-foreground;
               text-wrap: nowrap; text-overflow: clip; }
    KeysLine > .keys-line--key { color: $footer-key-foreground; background: $footer-key-background;
                                 text-style: bold; }
    KeysLine > .keys-line--description { color: $footer-description-foreground; }
    """

    def __init__(self, *, id: str):
        super().__init__(id=id)
        self.keys: list[tuple[int, int, str]] = []  # (first column, end column, key) of each shown key
        self.shown: tuple = ()
        self.drawn: tuple = ((), 0)  # (shown, width) of the line on screen

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, self.bindings_changed)
        self.bindings_changed(self.screen)

    def on_unmount(self) -> None:
        self.screen.bindings_updated_signal.unsubscribe(self)

    def on_resize(self) -> None:
        self.draw()

    def bindings_changed(self, screen) -> None:
        """The screen's active bindings as 'key description' pairs, one per action (as Footer groups them)."""
        actions: dict[str, tuple] = {}
        for _, binding, enabled, _ in screen.active_bindings.values():
            if binding.show and binding.action not in actions:
                actions[binding.action] = (binding.key, self.app.get_key_display(binding), binding.description,
                                           enabled)
        self.shown = tuple(actions.values())
        self.draw()

    def draw(self) -> None:
        """The line: ' key description ' per key, or, where that does not fit the width, 'key description '
        (80 columns hold every key of the explorer that way)."""
        width = self.size.width
        if (self.shown, width) == self.drawn:
            return
        self.drawn = (self.shown, width)
        key_style = self.get_component_rich_style("keys-line--key")
        description_style = self.get_component_rich_style("keys-line--description")
        for padding in (" ", ""):
            line, self.keys = Text(), []
            for key, display, description, enabled in self.shown:
                start = line.cell_len
                line.append(f"{padding}{display}{padding}", style=key_style)
                line.append(f"{' ' if not padding else ''}{description} ", style=description_style)
                if not enabled:
                    line.stylize("dim", start)
                self.keys.append((start, line.cell_len, key))
            if not width or line.cell_len - 1 <= width:  # the last description's trailing space may go
                break
        self.update(line, layout=False)

    def on_click(self, event: events.Click) -> None:
        for start, end, key in self.keys:
            if start <= event.x < end:
                self.app.simulate_key(key)
                return


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark,enter", "close", "close")]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { width: 90%; max-width: 100; height: auto; max-height: 90%;
                                  border: round $accent; padding: 0 1; background: $surface; }
    """

    def compose(self) -> ComposeResult:
        text = Text("attn explore: keys\n\n", style="bold")
        width = max(len(key) for key, _ in KEYS)
        for key, what in KEYS:
            text.append(key.ljust(width + 2), style="bold cyan")
            text.append(what + "\n")
        text.append("\nThe grid shows every head; the heatmap and the panel the selected one. "
                    "Esc, q or ? closes this.", style="dim")
        with VerticalScroll():
            yield Static(text)

    def action_close(self) -> None:
        self.dismiss(None)


class ExploreApp(App[int]):
    """The explorer. load_model() → Model runs in a thread; the rest is on the loaded model."""

    TITLE = "attn explore"
    ENABLE_COMMAND_PALETTE = False
    CSS = """
    Screen { layout: vertical; }
    #loading { height: 1fr; content-align: center middle; }
    #main { height: 1fr; layers: default sentence; }
    #header { height: auto; max-height: 6; padding: 0 1; }
    #status { height: 1; padding: 0 1; }
    #body { height: 1fr; }
    #left { width: auto; height: 1fr; }
    #right { width: 1fr; height: 1fr; padding-left: 1; }
    #body.stacked { layout: vertical; }
    #body.stacked #left { width: 1fr; }
    #body.stacked #right { padding-left: 0; }
    #left, #right { scrollbar-size-vertical: 1; }
    #message { height: auto; max-height: 3; padding: 0 1; }
    #sentence { display: none; layer: sentence; dock: bottom; margin: 0 1; border: round $accent;
                border-title-color: $text-muted; }
    #sentence.editing { display: block; }
    #too-small { display: none; height: 1fr; content-align: center middle; }
    #loading { display: none; }
    Screen.loading #loading { display: block; }
    Screen.loading #main, Screen.small #main, Screen.small #loading { display: none; }
    Screen.small #too-small { display: block; }
    """
    BINDINGS = [
        Binding("left,h", "head(-1)", "head", key_display="←→"),
        Binding("right,l", "head(1)", "head", show=False),
        Binding("k", "layer(-1)", "layer", show=False),
        Binding("j", "layer(1)", "layer", show=False),
        Binding("left_square_bracket", "query(-1)", "query", show=False),
        Binding("right_square_bracket", "query(1)", "query", show=False),
        Binding("e", "edit", "edit"),
        Binding("v", "variant", "variant"),
        Binding("s", "scores", "scores"),
        Binding("g", "grid_metric", "grid"),
        Binding("x", "export", "export"),
        Binding("question_mark", "help", "help", key_display="?"),
        Binding("q", "quit_app", "quit"),
    ]

    def __init__(self, load_model, text: str = DEFAULT_TEXT, *, model_name: str = "", truncate: bool = False,
                 export_dir: Path | None = None, threads: int | None = None):
        super().__init__()
        self.load_model = load_model
        self.threads = threads  # torch's CPU threads (None: model_threads' choice); the number used once loaded
        self.model_name = model_name
        self.text = text
        self.truncate = truncate
        self.export_dir = Path.cwd() if export_dir is None else export_dir
        self.model = None
        self.error: BaseException | None = None  # a load failure, raised again by the command after the app
        self.reports: dict[tuple[str, str], object] = {}
        self.windows: dict[tuple, object] = {}
        self.layer = self.head = 0
        self.query = 1
        self.variant = "baseline"
        self.variant_error = ""
        self.scores = False
        self.metric = "weights"
        self.grid_renderable = None
        self.headers: dict = {}
        self.message_lines = -1
        self.frozen = False  # gc.freeze() after the load
        self.panels: dict = {}
        self.grid_lines: dict = {}
        self.grid_columns = 0
        self.maps_lines: dict = {}
        self.detail_rows: dict[int, int] = {}
        self.generation = 0
        self.header_lines = 0
        self.painted = asyncio.Event()
        self.paints = 0
        self.painted_at = 0.0
        self.looks: dict[tuple[str, str], float] = {}
        self.looked = asyncio.Event()
        self.exports = 0
        self.load_seconds: float | None = None
        self.focus_before_small: Widget | None = None  # the view with the focus when the screen became too small
        # Every model call runs on this one thread: a new thread per run would start a new pool of
        # torch's CPU threads each time, and the idle ones of the runs before keep spinning.
        self.model_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="attn-model")
        self.stage = f"loading {model_name or 'the model'}"
        self.started = time.perf_counter()

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
        self.started = time.perf_counter()
        self.model_thread.submit(self.load_in_thread)
        self.set_interval(0.25, self.tick_loading, name="loading")

    def on_unmount(self) -> None:
        self.model_thread.shutdown(wait=False, cancel_futures=True)
        if self.frozen:
            gc.unfreeze()
            self.frozen = False

    def tick_loading(self) -> None:
        if self.model is None and self.error is None:
            elapsed = time.perf_counter() - self.started
            self.query_one("#loading", Static).update(Text.assemble(
                ("attn explore\n\n", "bold"), f"{self.stage} … {elapsed:.1f} s\n\n",
                ("q quits", "dim")))

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
        small = width < MIN_WIDTH or height < MIN_HEIGHT
        if small and not self.screen.has_class("small") and isinstance(self.focused, StripView):
            self.focus_before_small = self.focused
        self.screen.set_class(small, "small")
        self.query_one("#too-small", Static).update(Text(
            f"attn explore needs a terminal of at least {MIN_WIDTH} × {MIN_HEIGHT}; this one is "
            f"{width} × {height}. Enlarge it (q quits).", style="yellow"))

    # -- loading -------------------------------------------------------------------------------------
    def load_in_thread(self) -> None:
        try:
            self.stage = f"loading {self.model_name or 'the model'} (importing torch and transformers)"
            import torch

            self.threads = model_threads(self.threads, torch.get_num_threads(), available_cores())
            torch.set_num_threads(self.threads)  # this thread's runs (the model thread runs them all)
            model = self.load_model()
            self.stage = "running the model on the sentence"
            report = model.inspect(self.text, top_k=TOP_K, truncate=self.truncate)
            # The model, torch, transformers and Textual are hundreds of thousands of objects that live as
            # long as the app: out of the collector's way, a full collection in the middle of a look scans
            # only what the session made since (a 300 ms pause became < 90 ms). Undone when the app ends.
            gc.collect()
            gc.freeze()
            self.frozen = True
        except AttnError as error:
            self.call_from_thread(self.failed_to_load, error)
            return
        except Exception as error:  # noqa: BLE001 - shown as one line by the command, never a traceback
            self.call_from_thread(self.failed_to_load, AttnError(f"{type(error).__name__}: {error}"))
            return
        self.call_from_thread(self.loaded, model, report)

    def failed_to_load(self, error: AttnError) -> None:
        self.error = error
        self.exit(return_code=1)

    def loaded(self, model, report) -> None:
        self.load_seconds = time.perf_counter() - self.started
        self.model = model
        self.reports[(self.text, "baseline")] = report
        self.query = min(1, len(report.tokens) - 1)
        self.screen.remove_class("loading")
        self.query_one("#grid").focus()
        self.say(f"loaded in {self.load_seconds:.1f} s · ? lists the keys", style="dim")
        self.redraw(header=True)

    # -- state ---------------------------------------------------------------------------------------
    @property
    def report(self):
        return self.reports[(self.text, "baseline")]

    def shown_report(self):
        """The report the screen shows: the variant's when one is on (and ran), else the baseline."""
        return self.reports.get((self.text, self.variant), self.report) if self.variant != "baseline" else self.report

    def say(self, message: str, style: str = "") -> None:
        """The message line. A message as tall as the one before it only repaints (no new layout)."""
        widget = self.query_one("#message", Static)
        text = Text(message, style=style)
        width = max(1, widget.size.width - 2)
        lines = len(text.wrap(self.console, width)) if message else 0
        widget.update(text, layout=lines != self.message_lines)
        self.message_lines = lines

    def select(self, layer: int, head: int) -> None:
        self.layer, self.head = layer, head
        self.redraw()

    def set_query(self, query: int) -> None:
        self.query = max(0, min(query, len(self.report.tokens) - 1))
        self.redraw(grid=False)

    def action_head(self, step: int) -> None:
        if self.model is None:
            return
        heads = [(layer.layer, head.head) for layer in self.report.layers for head in layer.heads]
        index = heads.index((self.layer, self.head)) if (self.layer, self.head) in heads else 0
        self.select(*heads[(index + step) % len(heads)])

    def action_layer(self, step: int) -> None:
        if self.model is None:
            return
        layers = [layer.layer for layer in self.report.layers]
        index = max(0, min(len(layers) - 1, layers.index(self.layer) + step))
        heads = [head.head for head in self.report.layers[index].heads]
        self.select(layers[index], self.head if self.head in heads else heads[-1])

    def action_query(self, step: int) -> None:
        if self.model is not None:
            self.set_query(self.query + step)

    def action_scores(self) -> None:
        if self.model is not None:
            self.scores = not self.scores
            self.say(f"heatmap: {'scores' if self.scores else 'weights'}", style="dim")
            self.redraw(grid=False)

    def action_grid_metric(self) -> None:
        if self.model is not None:
            self.metric = GRID_METRICS[(GRID_METRICS.index(self.metric) + 1) % len(GRID_METRICS)]
            self.say(f"grid: {self.metric}", style="dim")
            self.redraw()

    def action_variant(self) -> None:
        if self.model is None:
            return
        variant = VARIANTS[(VARIANTS.index(self.variant) + 1) % len(VARIANTS)]
        self.run_look(self.text, variant)

    def action_edit(self) -> None:
        if self.model is None:
            return
        box = self.query_one("#sentence", SentenceInput)
        box.border_title = "a new sentence · Enter runs it · Esc keeps the old one"
        box.value = self.text
        box.cursor_position = len(self.text)
        box.add_class("editing")
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "sentence":
            self.end_edit(event.value)

    def end_edit(self, text: str | None) -> None:
        """Close the edit box; run `text` if it is a new sentence (None: keep the old one)."""
        box = self.query_one("#sentence", SentenceInput)
        if not box.has_class("editing"):
            return
        box.remove_class("editing")
        if self.focused is box:
            self.query_one("#grid").focus()
        if text is not None and text != self.text:
            self.run_look(text, self.variant)

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def action_quit_app(self) -> None:
        self.exit(0)

    # -- running the model ---------------------------------------------------------------------------
    def run_look(self, text: str, variant: str) -> None:
        """Show `text` under `variant`: at once from the cache, else after a run in a worker thread."""
        if not text.strip():
            self.say("the text is empty: press e and type a sentence", style="yellow")
            return
        wanted = [(text, "baseline")] + ([(text, variant)] if variant != "baseline" else [])
        if all(key in self.reports for key in wanted):
            self.show_look(text, variant, "")
            return
        self.say(f"running {variant_label(variant)} on {len(text)} characters …", style="dim")
        self.model_thread.submit(self.look_in_thread, text, variant, wanted)

    def look_in_thread(self, text: str, variant: str, wanted: list) -> None:
        error = ""
        for key in wanted:
            if key in self.reports:
                continue
            try:
                report = self.model.inspect(key[0], top_k=TOP_K, variant=key[1], truncate=self.truncate)
            except AttnError as failure:
                error = failure.message + (f"; {failure.hint}" if failure.hint else "")
            except Exception as failure:  # noqa: BLE001 - a message in the app, never a traceback
                error = f"{type(failure).__name__}: {failure}"
            else:
                self.reports[key] = report
                continue
            if key[1] == "baseline":  # the text itself failed: keep what is on screen
                self.call_from_thread(self.say, f"error: {error}", "red")
                return
        try:
            self.prerender(text, variant, self.variant_message(variant, error))
        except Exception:  # noqa: BLE001 - optional: the main thread renders it otherwise
            pass
        self.call_from_thread(self.show_look, text, variant, error)

    @staticmethod
    def variant_message(variant: str, error: str) -> str:
        return f"{variant_label(variant)}: {error}" if error else ""

    def show_look(self, text: str, variant: str, error: str) -> None:
        new_text = text != self.text
        self.text, self.variant = text, variant
        self.variant_error = self.variant_message(variant, error)
        if new_text:
            self.forget_old_texts()
            tokens = len(self.report.tokens)
            self.query = min(self.query, tokens - 1)
            self.say(f"{tokens} tokens", style="dim")
        elif variant != "baseline":
            self.say(f"variant {variant_label(variant)} beside the baseline (v: next)", style="dim")
        else:
            self.say("baseline", style="dim")
        if self.variant_error:
            self.say(f"error: {self.variant_error}", style="red")
        self.redraw(header=True)
        self.call_after_refresh(self.mark_look, text, variant)

    def forget_old_texts(self) -> None:
        """Drop the reports, windows and rendered lines of all but the last KEEP_TEXTS sentences (and the one
        shown), so a long session does not hold every sentence it saw. In place, with the keys listed first:
        the model thread may be adding the next sentence's entries meanwhile (those are the newest: kept)."""
        texts = list(dict.fromkeys(key[0] for key in list(self.reports)))  # first seen first
        keep = set(texts[-KEEP_TEXTS:]) | {self.text}
        for key in [key for key in list(self.reports) if key[0] not in keep]:
            self.reports.pop(key, None)
        for key in [key for key in list(self.windows) if key[0] not in keep]:
            self.windows.pop(key, None)
        reports = {id(report) for report in list(self.reports.values())}
        heads = {id(head) for report in list(self.reports.values()) for _, head in report.heads()}
        heads |= {id(head) for head in list(self.windows.values())}
        # Each entry holds the object its key names by id(), so an id is never reused while its entry lives.
        for cache, alive in ((self.headers, reports), (self.grid_lines, reports), (self.maps_lines, heads),
                             (self.panels, heads)):
            for key, entry in list(cache.items()):
                if id(entry[0]) not in alive:
                    cache.pop(key, None)

    def mark_look(self, text: str, variant: str) -> None:
        """When a new sentence or variant reached the screen (the benchmark's stop watch)."""
        self.looks[(text, variant)] = time.perf_counter()
        self.looked.set()

    # -- drawing -------------------------------------------------------------------------------------
    def header_view(self, report=None, variant: str | None = None):
        """The model line and the tokens of `attn inspect`'s header, then the variant, and its height in lines
        (at most 6) at the screen's width: made once per report, variant and width."""
        from attn_cli.render.terminal import header

        report = self.report if report is None else report
        variant = self.variant if variant is None else variant
        width = self.size.width
        key = (id(report), variant, width)
        if key not in self.headers:
            line = Text.assemble(("variant ", "dim"), (variant_label(variant), "bold magenta"))
            if variant != "baseline":
                line.append(" beside the baseline", style="dim")
            view = Group(header(report, "attn explore"), line)
            self.headers[key] = (report, view, min(6, len(self.render_lines(view, width - 2))))
        return self.headers[key][1:]

    def status_view(self) -> Text:
        """One line that changes with every move: where the selection is and what ↑↓ do."""
        from attn_cli.render.heatmap import literal

        line = Text(f"layer {self.layer} head {self.head} · query {self.query}:", style="bold")
        line.append_text(literal(self.report.tokens[self.query].text, "bold cyan"))
        focused = self.focused
        if isinstance(focused, (GridView, DetailView)):
            line.append(" · ↑↓ " + ("layers" if isinstance(focused, GridView) else "query rows") + ", tab switches",
                        style="dim")
        return line

    def selected_heads(self, layer: int | None = None, head: int | None = None):
        """The selected head in the baseline (for the detail view) and in the variant, or an error."""
        if layer is not None:
            saved = self.layer, self.head
            self.layer, self.head = layer, head
            try:
                return self.selected_heads()
            finally:
                self.layer, self.head = saved
        return self.heads_to_show(self.text, self.variant, self.variant_error, self.layer, self.head)

    def heads_to_show(self, text: str, variant: str, variant_error: str, layer: int, head: int):
        """(baseline head, variant head or None, error) of `text` for the detail view."""
        base = self.detail_head(self.reports[(text, "baseline")], layer, head)
        if variant == "baseline":
            return base, None, ""
        other_report = self.reports.get((text, variant))
        if other_report is None:
            return base, None, variant_error
        try:
            return base, self.detail_head(other_report, layer, head), ""
        except AttnError as error:
            return base, None, f"{variant_label(variant)}: {error.message}"

    def detail_head(self, report, layer: int | None = None, head: int | None = None):
        """The head with matrices to draw: from the report, or, for a long text, a window around the query."""
        layer = self.layer if layer is None else layer
        head = self.head if head is None else head
        if not report.matrices_left_out:
            return report.head(layer, head)
        tokens = len(report.tokens)
        label = len(f"{tokens} ") + 12  # a row label: index and token (render/heatmap LABEL_TOKEN)
        across = max(8, min(COL_WINDOW, self.detail_width() - label - 4))  # key columns one character wide
        r0 = max(0, min(self.query - ROW_WINDOW // 2, tokens - ROW_WINDOW))
        c0 = max(0, min(self.query - across + 8, tokens - across))
        rows, cols = (r0, min(tokens, r0 + ROW_WINDOW)), (c0, min(tokens, c0 + across))
        key = (report.text, report.variant, layer, head, rows, cols)
        if key not in self.windows:
            windowed = self.model.inspect(report.text, layers=[layer], heads=[head], top_k=TOP_K,
                                          variant=report.variant, truncate=self.truncate, rows=rows, cols=cols)
            self.windows[key] = windowed.head(layer, head)
        return self.windows[key]

    def table_width(self, report) -> int:
        """Columns the entropy/asymmetry table of `attn inspect` takes (its Fit part), measured by Rich."""
        from rich.measure import Measurement

        from attn_cli.render.layout import Fit

        view = grid_view(report, self.metric, (self.layer, self.head))
        parts = [part for group in view.renderables for part in getattr(group, "renderables", [group])]
        options = self.console_options.update_width(10_000)
        return max((Measurement.get(self.console, options, part).maximum for part in parts if isinstance(part, Fit)),
                   default=66) + 1

    def render_lines(self, renderable, width: int) -> list[list[Segment]]:
        options = self.console_options.update(highlight=False, width=max(1, width), height=None)
        return self.console.render_lines(renderable, options, pad=False)

    def render_strips(self, renderable, width: int) -> list[Strip]:
        return [strip(line) for line in self.render_lines(renderable, width)]

    def grid_strips(self, shown, width: int) -> list[Strip]:
        """The grid's lines: weight thumbnails rendered once per report and width (◂ placed here), or a table."""
        mark = (self.layer, self.head)
        if self.metric != "weights" or shown.matrices_left_out:
            self.grid_renderable = grid_view(shown, self.metric, mark)
            return self.render_strips(self.grid_renderable, width)
        _, grid, strips = self.thumbnail_lines(shown, width)
        self.grid_renderable = grid
        return mark_strips(strips, grid, mark)

    def thumbnail_lines(self, shown, width: int) -> tuple:
        """(report, grid, strips): the report's thumbnails grid at this width, rendered once (HeadsGrid.lines,
        the lines Rich would render, without Rich's pass over every one-character segment)."""
        key = (id(shown), width)
        if key not in self.grid_lines:
            grid = thumbnails_grid(shown)
            options = self.console_options.update(highlight=False, width=max(1, width), height=None)
            self.grid_lines[key] = (shown, grid, [strip(line) for line in grid.lines(self.console, options)])
        return self.grid_lines[key]

    def redraw(self, grid: bool = True, header: bool = False, detail: bool = True) -> None:
        """Render what changed (header: text, variant or size; grid: the selected head or more) and show it."""
        if self.model is None:
            return
        width, height = self.size
        if header or not self.header_lines:
            header_view, self.header_lines = self.header_view()
            self.query_one("#header", Static).update(header_view)
        self.query_one("#status", Static).update(self.status_view(), layout=False)
        body = self.query_one("#body")
        if grid:
            shown = self.shown_report()
            columns, stacked = self.grid_layout(shown)
            body.set_class(stacked, "stacked")
            self.grid_columns = columns
            self.query_one("#grid", GridView).show(self.grid_strips(shown, self.grid_columns), self.grid_columns)
        if detail:
            self.query_one("#detail", DetailView).show(self.detail_strips())
            self.scroll_to_selection()
        self.call_after_refresh(self.mark_painted)

    def grid_layout(self, shown, header_lines: int | None = None) -> tuple[int, bool]:
        """Columns of the grid pane, and whether the heatmap goes below it (too narrow side by side)."""
        width, height = self.size
        available = max(6, height - (self.header_lines if header_lines is None else header_lines) - 4)
        if self.metric == "weights" and not shown.matrices_left_out:
            columns = grid_width(shown, grid_thumb(shown, available, max(DETAIL_MIN, width - DETAIL_MIN)))
        else:
            columns = min(width - 1, self.table_width(shown))
        stacked = columns + DETAIL_MIN > width
        return (width - 1 if stacked else columns), stacked

    def prerender(self, text: str, variant: str, variant_error: str) -> None:
        """In the worker thread, after a run: what showing the new look will draw (the header, the grid's
        thumbnails, the selected head's heatmap and panel), into the caches the screen then reads."""
        report = self.reports[(text, "baseline")]
        shown = self.reports.get((text, variant), report) if variant != "baseline" else report
        _, header_lines = self.header_view(report, variant)
        columns, stacked = self.grid_layout(shown, header_lines)
        if self.metric == "weights" and not shown.matrices_left_out:
            self.thumbnail_lines(shown, columns)
        if report.matrices_left_out:  # the heatmap is a window around the query row, run when shown
            return
        layer, head, query = self.layer, self.head, min(self.query, len(report.tokens) - 1)
        heads = self.heads_to_show(text, variant, variant_error, layer, head)
        self.detail_lines(report, variant, heads, layer, query, self.scores, self.detail_width(columns, stacked))

    def detail_width(self, columns: int | None = None, stacked: bool | None = None) -> int:
        width = self.size.width
        stacked = self.query_one("#body").has_class("stacked") if stacked is None else stacked
        return width - 1 if stacked else width - (self.grid_columns if columns is None else columns) - 2

    def detail_strips(self, layer: int | None = None, head: int | None = None) -> list[Strip]:
        """The selected head's heatmap(s) (rendered once per head, scores/weights and width; ▶ marks the
        query row), then the query panel and statistics."""
        width = self.detail_width()
        try:
            heads = self.selected_heads(layer, head)
        except AttnError as failure:
            self.detail_rows = {}
            return self.render_strips(Text(f"error: {failure.message}", style="red"), width - 1)
        lines, rows, panel = self.detail_lines(self.report, self.variant, heads, self.layer if layer is None else layer,
                                               self.query, self.scores, width, panel=layer is None)
        if layer is not None:  # a prefetch: the heatmap lines are what takes time
            return []
        self.detail_rows = rows
        return [strip(line) for line in gutter(lines, rows, self.query)] + panel

    def detail_lines(self, report, variant: str, heads: tuple, layer: int, query: int, scores: bool, width: int,
                     panel: bool = True) -> tuple:
        """(heatmap lines, {line: query row}, panel strips) of heads = (base, other, error), each rendered once
        per head, query, scores/weights and width."""
        width -= 1  # the gutter
        base, other, error = heads
        tokens = [token.text for token in report.tokens]
        key = (id(base), id(other), error, scores, width)
        if key not in self.maps_lines:
            lines = self.render_lines(maps_view(layer, tokens, scores, base, other, variant, error), width)
            self.maps_lines[key] = (base, other, lines, row_lines(lines, tokens))
        _, _, lines, rows = self.maps_lines[key]
        if not panel:
            return lines, rows, []
        key = (id(base), id(other), variant, query, width)
        if key not in self.panels:
            self.panels[key] = (base, other, [strip([Segment(" "), *line]) for line in
                                              self.render_lines(panel_view(tokens, query, base, other, variant), width)])
        return lines, rows, self.panels[key][2]

    def prefetch(self, generation: int) -> None:
        """While idle, render the heatmaps of the heads one key away, so moving there only repaints."""
        if generation != self.generation or self.model is None or self.report.matrices_left_out:
            return
        neighbours = []
        heads = [(layer.layer, head.head) for layer in self.report.layers for head in layer.heads]
        here = heads.index((self.layer, self.head)) if (self.layer, self.head) in heads else 0
        neighbours += [heads[(here + 1) % len(heads)], heads[here - 1]]
        layers = [layer.layer for layer in self.report.layers]
        index = layers.index(self.layer) if self.layer in layers else 0
        neighbours += [(layers[i], self.head) for i in (index + 1, index - 1) if 0 <= i < len(layers)]
        self.prefetch_rest(generation, neighbours)

    def prefetch_rest(self, generation: int, neighbours: list) -> None:
        if generation != self.generation or not neighbours:
            return
        layer, head = neighbours[0]
        try:
            self.detail_strips(layer, head)
        except Exception:  # noqa: BLE001 - a prefetch is optional (the app may also be closing)
            return
        self.call_later(self.prefetch_rest, generation, neighbours[1:])

    def scroll_to_selection(self, pane: Pane | None = None) -> None:
        """Keep the selected layer's thumbnails and the selected query row in view (in `pane`, else in both).
        A pane not laid out yet (0 × 0: hidden, or the size just changed) is left to its own on_resize."""
        left, right = self.query_one("#left", Pane), self.query_one("#right", Pane)
        grid = self.grid_renderable
        if pane in (None, left) and left.size and isinstance(grid, CachedGrid) and grid.geometry is not None:
            _, lines = grid.geometry
            layers = [layer for layer, _ in grid.layers]
            if self.layer in layers:
                top = grid.top + layers.index(self.layer) * lines
                left.scroll_to_region(Region(0, top, 1, lines), animate=False, immediate=True)
        line = next((number for number, row in self.detail_rows.items() if row == self.query), None)
        if pane in (None, right) and right.size and line is not None:
            right.scroll_to_region(Region(0, line, 1, 1), animate=False, immediate=True)

    def mark_painted(self) -> None:
        """Runs after the screen refresh that follows a redraw: the new view has been rendered."""
        self.paints += 1
        self.painted_at = time.perf_counter()
        self.painted.set()
        self.generation += 1
        self.set_timer(0.05, lambda generation=self.generation: self.prefetch(generation))

    # -- export --------------------------------------------------------------------------------------
    def action_export(self) -> None:
        if self.model is None:
            return
        try:
            written = self.export()
        except (AttnError, OSError) as error:
            self.say(f"error: {getattr(error, 'message', None) or error}", style="red")
            return
        stem = written[0].with_suffix("")
        self.say(f"wrote {stem.name}{{.svg, -head.svg, .html, .json}} in {stem.parent}", style="green")

    def export(self) -> list[Path]:
        """What is on screen: the screen as SVG, the selected head as a figure, the report as HTML and JSON."""
        from dataclasses import replace

        from attn_cli.render.figures import html_page, svg_figure
        from attn_cli.render.files import write_json
        from attn_cli.render.terminal import Panel
        from attn_cli.analyses.inspect_report import LayerReport

        self.exports += 1
        report = self.shown_report()
        stem = self.export_dir / (f"attn-explore-L{self.layer}H{self.head}-{variant_label(self.variant)}"
                                  f"-{time.strftime('%H%M%S')}-{self.exports}")
        paths = [stem.with_suffix(".svg"), stem.with_name(stem.name + "-head.svg"), stem.with_suffix(".html"),
                 stem.with_suffix(".json")]
        paths[0].write_text(self.export_screenshot(title=f"attn explore · {report.model.name}", simplify=True),
                            encoding="utf-8")
        one = replace(report, layers=[LayerReport(self.layer, [self.detail_head(report)])])
        paths[1].write_text(svg_figure(one, {Panel.scores if self.scores else Panel.weights}), encoding="utf-8")
        paths[2].write_text(html_page(report), encoding="utf-8")
        with open(paths[3], "w", encoding="utf-8") as handle:
            write_json(report, handle)
        return paths

