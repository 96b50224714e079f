"""The widgets of `attn explore`: each draws lines the app hands it (drawn once, explore/drawn.py) and turns a
click into a call on the app; none holds any state of the session.

StripView (and its GridView and DetailView) show kept lines, Pane scrolls one of them, SentenceInput is the
edit box, KeysLine the bottom line of keys, HelpScreen the key help, AttributionScreen `attn attribute` of the
sentence.
"""

from __future__ import annotations

from typing import Any, Protocol, cast

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.geometry import Region, Size
from textual.screen import ModalScreen
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Input, Static

from attn_cli.explore.view import CachedGrid


class Host(Protocol):
    """What the widgets ask of the app they are in (ExploreApp, explore/app.py): the widgets know it only as this."""

    grid_renderable: Any  # what the grid view shows: a CachedGrid maps a click to a head
    detail_rows: dict[int, int]  # detail line → query row

    def view_focused(self, view: StripView) -> None: ...
    def redraw(self, grid: bool = True, header: bool = False, detail: bool = True) -> None: ...
    def select(self, layer: int, head: int) -> None: ...
    def set_query(self, query: int) -> None: ...
    def scroll_to_selection(self, pane: Pane | None = None) -> None: ...
    def show_status(self) -> None: ...
    def end_edit(self, text: str | None) -> None: ...


def host(widget: Widget) -> Host:
    """The app `widget` is in, as the widgets use it."""
    return cast(Host, widget.app)


KEYS = [
    ("← → / h l", "previous / next head (past the last head of a layer: the next layer)"),
    (
        "↑ ↓ / k j",
        "previous / next layer (in the heatmap, after tab or a click: the query row; over an image: "
        "the query patch a row up or down, [CLS] above the first row)",
    ),
    ("[ ]", "previous / next query token, wherever the focus is (over an image: the patch left / right)"),
    ("tab", "the grid or the selected head (small screens: grid → heatmap → query panel, shift+tab back)"),
    ("PgUp PgDn", "scroll the selected head's heatmaps or panel (the status line says where there is more)"),
    ("click", "a thumbnail selects its head; a heatmap row selects its query token"),
    ("e", "edit the sentence (an encoder–decoder model's source) and run the model again"),
    ("t", "encoder–decoder models: edit the target (the decoder's text) and run the model again"),
    ("c", "encoder–decoder models: the next stack, encoder → decoder → cross-attention (target rows × source columns)"),
    (
        "v",
        "next variant: baseline, shared-k, no-scale, raw, cosine (beside the baseline; no raw over an image, "
        "none for encoder–decoder models yet)",
    ),
    ("s", "scores / weights in the heatmap"),
    ("g", "grid metric: weight thumbnails, (over an image) every head's picture, mean entropy, asymmetry"),
    ("x", "export what is on screen: .svg (the screen), -head.svg (figure), .html, .json"),
    (
        "a",
        "attribution of the sentence (attn attribute) beside the attention rollout; m: next method (a sentence only)",
    ),
    (
        "r",
        "the information-flow routes (attn routes) of the prediction at the query token; [ ]: the previous / next "
        "token (a decoder's sentence only)",
    ),
    (
        "z",
        "remove (zero-ablate) the selected head and run the sentence again: how much the model's output moved "
        "(attn ablate; a sentence only)",
    ),
    ("?", "this help"),
    ("q", "quit"),
]


NULL = Style.null()  # every segment gets a style: Textual's NO_COLOR filter reads each one


def strip(segments) -> Strip:
    """A Strip whose segments all have a style (Textual's NO_COLOR filter reads every segment's style)."""
    return Strip(
        [segment if segment.style is not None else Segment(segment.text, NULL, segment.control) for segment in segments]
    )


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
        host(self).view_focused(self)

    def on_blur(self) -> None:
        host(self).redraw(grid=False, detail=False)


SWITCH = [
    Binding("tab", "app.switch(1)", "next view", show=False),
    Binding("shift+tab", "app.switch(-1)", "previous view", show=False),
]


class GridView(StripView):
    BINDINGS = [
        *SWITCH,
        Binding("up,k", "app.layer(-1)", "layer", key_display="↑↓", show=True),
        Binding("down,j", "app.layer(1)", "layer", show=False),
    ]

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        grid = host(self).grid_renderable
        if offset is None or not isinstance(grid, CachedGrid):
            return
        picked = grid.head_at(offset.x, offset.y)
        if picked is not None:
            host(self).select(*picked)


class DetailView(StripView):
    BINDINGS = [
        *SWITCH,
        # j/k as ↓/↑ here: the app's j/k (the layer) only where neither view has the focus
        Binding("up,k", "app.query(-1, True)", "query row", key_display="↑↓", show=True),
        Binding("down,j", "app.query(1, True)", "query row", show=False),
        Binding("pageup", "scroll_pane(-1)", "scroll", show=False),
        Binding("pagedown", "scroll_pane(1)", "scroll", show=False),
    ]

    def action_scroll_pane(self, step: int) -> None:
        """PgUp / PgDn: a page of the pane up or down (what ↑↓ do not reach: a variant's panel, the statistics)."""
        pane = self.parent
        assert isinstance(pane, Pane)  # a detail view lives in the #right pane
        (pane.scroll_page_down if step > 0 else pane.scroll_page_up)(animate=False)

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None:
            return
        row = host(self).detail_rows.get(offset.y)
        if row is not None:
            self.focus()
            host(self).set_query(row)


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
            host(self).scroll_to_selection(self)

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        if self.id == "right" and round(old_value) != round(new_value):
            host(self).show_status()  # PgDn more, or PgUp back

    # A pane not laid out yet (0 × 0: hidden, or the size just changed) is left to its own on_resize.
    def show_layer(self, grid, layer: int) -> None:
        """Scroll the selected layer's thumbnails into view (a thumbnails grid whose geometry is known)."""
        if self.size and isinstance(grid, CachedGrid) and grid.geometry is not None:
            _, lines = grid.geometry
            layers = [number for number, _ in grid.layers]
            if layer in layers:
                top = grid.top + layers.index(layer) * lines
                self.scroll_to_region(Region(0, top, 1, lines), animate=False, immediate=True)

    def show_lines(self, lines: list[int]) -> None:
        """Scroll the lines (the selected query row's, in each heatmap drawn) into view: all of them where the
        pane is tall enough, else the first."""
        if self.size and lines:
            first, last = min(lines), max(lines)
            span = last - first + 1 if last - first < self.size.height else 1
            self.scroll_to_region(Region(0, first, 1, span), animate=False, immediate=True)

    def hidden_lines(self) -> int:
        """1: lines below what the pane shows (PgDn reaches them); -1: only above (PgUp); 0: none hidden."""
        if not self.size.height or self.virtual_size.height <= self.size.height:
            return 0
        return 1 if self.scroll_y < self.max_scroll_y else -1 if self.scroll_y > 0 else 0


class SentenceInput(Input):
    """The edit box for a new sentence: a line at the bottom of the screen while `e` is on (Enter runs the
    sentence, Esc keeps the old one). In the screen itself, not a screen of its own: closing a modal screen
    repaints and restyles everything behind it, and a new sentence is drawn right after."""

    BINDINGS = [Binding("escape", "cancel", "keep the old sentence", key_display="esc")]

    def action_cancel(self) -> None:
        host(self).end_edit(None)

    def on_blur(self) -> None:
        host(self).end_edit(None)


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
                actions[binding.action] = (binding.key, self.app.get_key_display(binding), binding.description, enabled)
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
    HelpScreen > VerticalScroll { width: 96%; max-width: 100; height: auto; max-height: 90%;
                                  border: round $accent; padding: 0 1; background: $surface; }
    """

    def __init__(self, place: str):
        super().__init__()
        self.place = place  # where the selected head is drawn (explore/view.detail_place)

    def compose(self) -> ComposeResult:
        from rich.console import Group
        from rich.table import Table

        keys = Table.grid(padding=(0, 2))  # a description that wraps stays in its column
        for key, what in KEYS:
            keys.add_row(Text(key, style="bold cyan"), what)
        text = Group(
            Text("attn explore: keys", style="bold"),
            Text(
                f"The grid shows every head; the selected one's heatmap, query panel and statistics are "
                f"{self.place}. Esc, q or ? closes this.\n",
                style="dim",
            ),
            keys,
        )
        with VerticalScroll():
            yield Static(text)

    def action_close(self) -> None:
        self.dismiss(None)


class AttributionScreen(ModalScreen[None]):
    """`attn attribute TEXT --vs attention` of the sentence on screen, its method switched with m. The model runs
    on the session's model thread (`submit`); `attribute(method)` returns the renderable (or says the error)."""

    BINDINGS = [Binding("escape,q,a", "close", "close"), Binding("m", "method", "next method")]
    DEFAULT_CSS = """
    AttributionScreen { align: center middle; }
    AttributionScreen > VerticalScroll { width: 98%; height: auto; max-height: 95%;
                                         border: round $accent; padding: 0 1; background: $surface; }
    """

    def __init__(self, methods: list[str], submit, attribute):
        super().__init__()
        self.methods, self.submit, self.attribute = methods, submit, attribute
        self.method = methods[0]

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(id="attribution")

    def on_mount(self) -> None:
        self.run(self.method)

    def run(self, method: str) -> None:
        self.method = method
        self.query_one("#attribution", Static).update(
            Text(f"running {method} (m: next method, Esc closes) …", style="dim")
        )
        self.submit(self._in_thread, method)

    def _in_thread(self, method: str) -> None:
        shown = self.attribute(method)
        self.app.call_from_thread(self._show, method, shown)

    def _show(self, method: str, shown) -> None:
        if method == self.method and self.is_attached:
            self.query_one("#attribution", Static).update(shown)

    def action_method(self) -> None:
        self.run(self.methods[(self.methods.index(self.method) + 1) % len(self.methods)])

    def action_close(self) -> None:
        self.dismiss(None)


class RoutesScreen(ModalScreen[int]):
    """`attn routes TEXT --position P` of the sentence on screen, P first the selected query token and moved with
    [ ] (stopping at the first and last token). The model runs on the session's model thread (`submit`);
    `routes(position)` returns the renderable (or says the error: an encoder has no routes). Closing hands the
    position back, and the main view selects that query token."""

    BINDINGS = [
        Binding("escape,q,r", "close", "close"),
        Binding("left_square_bracket", "position(-1)", "previous token"),
        Binding("right_square_bracket", "position(1)", "next token"),
    ]
    DEFAULT_CSS = """
    RoutesScreen { align: center middle; }
    RoutesScreen > VerticalScroll { width: 98%; height: auto; max-height: 95%;
                                    border: round $accent; padding: 0 1; background: $surface; }
    """

    def __init__(self, count: int, position: int, submit, routes):
        super().__init__()
        self.count, self.submit, self.routes = count, submit, routes
        self.position = position

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(id="routes")

    def on_mount(self) -> None:
        self.run(self.position)

    def run(self, position: int) -> None:
        self.position = position
        self.query_one("#routes", Static).update(
            Text(f"tracing the prediction at position {position} ([ ]: another token, Esc closes) …", style="dim")
        )
        self.submit(self._in_thread, position)

    def _in_thread(self, position: int) -> None:
        shown = self.routes(position)
        self.app.call_from_thread(self._show, position, shown)

    def _show(self, position: int, shown) -> None:
        from rich.console import Group

        if position == self.position and self.is_attached:
            keys = Text(f"\nposition {position} of 0-{self.count - 1} · [ ]: another token · Esc closes", style="dim")
            self.query_one("#routes", Static).update(Group(shown, keys))

    def action_position(self, step: int) -> None:
        position = max(0, min(self.count - 1, self.position + step))
        if position != self.position:
            self.run(position)

    def action_close(self) -> None:
        self.dismiss(self.position)
