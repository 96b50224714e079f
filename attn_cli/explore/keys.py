"""The explorer's keys that change what is looked at, for ExploreApp (explore/app.py) to inherit: `e` a new
sentence (an encoder–decoder model's source), `t` a new target, `c` the next stack, `v` the next variant, `a`
the sentence's attribution, `r` the routes of the query token's prediction, `z` the selected head removed.
Which kind of look (Session.kind: a sentence, a source–target pair, an image) has which of them: KINDS."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.text import Text

from attn_cli.explore.kinds import STACK_KEY
from attn_cli.explore.widgets import AttributionScreen, RoutesScreen, SentenceInput

# The actions only some kinds of look have (Session.kind); every other action, every kind.
KINDS = {
    "stack": ("pair",),
    "edit_target": ("pair",),
    "variant": ("text", "image"),
    "edit": ("text", "pair"),
    "attribute": ("text",),
    "routes": ("text",),
    "ablate": ("text",),
}

if TYPE_CHECKING:  # the keys are an App's methods: the type checker sees LookKeys as one
    from textual.app import App

    from attn_cli.explore.drawn import Drawn
    from attn_cli.explore.session import Session

    KeysBase = App[int]
else:
    KeysBase = object


class LookKeys(KeysBase):
    """Mixed into ExploreApp: uses its session, say(), run_look(), redraw() and widgets."""

    if TYPE_CHECKING:  # what ExploreApp (explore/app.py) gives the keys
        session: Session
        drawn: Drawn
        model: Any  # the loaded attn_cli.api.Model; None while it loads
        text: str
        variant: str
        page: str
        layer: int
        head: int

        def say(self, message: str, style: str = "", about: tuple[int, int] | None = None) -> None: ...
        def run_look(self, text: str, variant: str) -> None: ...
        def redraw(self, grid: bool = True, header: bool = False, detail: bool = True) -> None: ...

        def set_query(self, query: int) -> None: ...

    editing = "sentence"  # what the edit box holds: the "sentence" (or "source"), or the "target"

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        """The keys a kind of look has (KINDS): the others are off, and not on the keys line."""
        kinds = KINDS.get(action)
        return kinds is None or self.session.kind in kinds

    def action_stack(self) -> None:
        from attn_cli.render.seq2seq_view import STACK_TITLES

        stack = self.session.next_stack() if self.model is not None else None
        if stack is not None:  # None: the look has one stack
            self.say(f"{stack}: {STACK_TITLES[stack]} ({STACK_KEY}: next stack)", style="dim")
            self.redraw(header=True)

    def action_variant(self) -> None:
        if self.model is not None:
            self.run_look(self.text, self.session.next_variant())

    # -- the edit box -------------------------------------------------------------------------------
    def action_edit(self) -> None:
        if self.model is not None:
            self.open_edit("source" if self.session.kind == "pair" else "sentence", self.text)

    def action_edit_target(self) -> None:
        if self.model is not None:
            self.open_edit("target", self.session.target or "")

    def open_edit(self, what: str, value: str) -> None:
        box = self.query_one("#sentence", SentenceInput)
        box.border_title = f"a new {what} · Enter runs it · Esc keeps the old one"
        self.editing = what
        box.value = value
        box.cursor_position = len(value)
        box.add_class("editing")
        box.focus()

    def on_input_submitted(self, event: SentenceInput.Submitted) -> None:
        if event.input.id == "sentence":
            self.end_edit(event.value)

    def end_edit(self, text: str | None) -> None:
        """Close the edit box; run `text` if it is a new sentence or target (None: keep the old one)."""
        box = self.query_one("#sentence", SentenceInput)
        if not box.has_class("editing"):
            return
        box.remove_class("editing")
        if self.focused is box:
            self.query_one("#grid" if self.page == "grid" else "#detail").focus()
        if text is None:
            return
        if self.editing != "target":
            if text != self.text:
                self.run_look(text, self.variant)
        elif not text.strip():
            self.say("the target is empty: press t and type the decoder's text", style="yellow")
        elif text != self.session.target:
            self.say(f"running the model on the new target ({len(text)} characters) …", style="dim")
            self.session.submit(self.target_in_thread, text)

    def target_in_thread(self, target: str) -> None:
        look, error = self.session.run_target(target)
        self.call_from_thread(self.show_target, target, look, error)

    def show_target(self, target: str, look, error: str) -> None:
        if look is None:
            self.say(f"error: {error}", style="red")
            return
        self.session.show_target(target, look)
        self.drawn.forget(*self.session.forget_old_texts())
        self.say(f"target: {len(look.target_tokens)} tokens", style="dim")
        self.redraw(header=True)

    # -- attribution --------------------------------------------------------------------------------
    def action_attribute(self) -> None:
        """a: the sentence's attribution (attn attribute --vs attention) in a screen of its own; m switches method."""
        from attn_cli.analyses.attribute import matrix_methods

        if self.model is None:
            self.say("the model is still loading", style="yellow")
        else:
            matrices = matrix_methods(self.model.info.causal)  # m cycles them
            self.push_screen(AttributionScreen(matrices, self.session.submit, self.attribution_of(self.text)))

    def attribution_of(self, text: str):
        def attribute(method: str):
            from attn_cli.plumbing.errors import AttnError
            from attn_cli.render.attribution_view import render_attribution

            try:
                return render_attribution(self.model.attribute(text, method=method, vs="attention"))
            except AttnError as error:
                return Text(f"error: {error}", style="red")

        return attribute

    # -- routes -------------------------------------------------------------------------------------
    def action_routes(self) -> None:
        """r: the information-flow routes (attn routes) of the prediction at the query token, in a screen of its own;
        [ ] move to the previous / next token."""
        if self.model is None:
            self.say("the model is still loading", style="yellow")
        else:
            count = len(self.session.report.tokens)
            routes = RoutesScreen(count, self.session.query, self.session.submit, self.routes_of(self.text))
            self.push_screen(routes, self.routes_closed)

    def routes_closed(self, position: int | None) -> None:
        """The routes screen closed at `position`: the main view's query token follows it."""
        if position is not None and position != self.session.query:
            self.set_query(position)

    def routes_of(self, text: str):
        def routes(position: int):
            from attn_cli.plumbing.errors import AttnError
            from attn_cli.render.routes_view import render_routes

            try:
                return render_routes(self.model.routes(text, position=position))
            except AttnError as error:
                return Text(f"error: {error}", style="red")

        return routes

    # -- ablation -----------------------------------------------------------------------------------
    def action_ablate(self) -> None:
        """z: the selected head zero-ablated (attn ablate), on the model thread; the message line says how much
        the model's output moved."""
        if self.model is None:
            self.say("the model is still loading", style="yellow")
            return
        layer, head, text = self.layer, self.head, self.text
        self.say(f"removing head {layer}.{head} and running the sentence again …", style="dim")
        self.session.submit(self.ablate_in_thread, text, layer, head)

    def ablate_in_thread(self, text: str, layer: int, head: int) -> None:
        from attn_cli.plumbing.errors import AttnError
        from attn_cli.render.interventions_view import ablation_line

        try:
            message, style = ablation_line(self.model.ablate(text, heads=[(layer, head)])), ""
        except AttnError as error:
            message, style = f"error: {error}", "red"
        self.call_from_thread(self.say, message, style, (layer, head))  # cleared when another head is selected
