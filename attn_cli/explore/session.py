"""The state of one `attn explore` session, without a screen: the loaded model, the looks (reports) cached
per (sentence, variant), the selection, and the one thread every model call runs on.

Nothing here imports Textual: the app (explore/app.py) turns keys into the calls below and the widgets
(explore/widgets.py) draw what they leave; the tests drive a Session with plain pytest.
"""

from __future__ import annotations

import gc
import os
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING

from attn_cli.explore.layout import head_window
from attn_cli.explore.view import GRID_METRICS, VARIANTS, variant_label
from attn_cli.plumbing.errors import AttnError

if TYPE_CHECKING:
    from attn_cli.api import Model

DEFAULT_TEXT = "The cat sat on the mat."
TOP_K = 5
KEEP_TEXTS = 3  # sentences whose reports and drawn lines stay cached: the one shown and any on their way


def model_threads(requested: int | None, torch_default: int, cores: int | None) -> int:
    """CPU threads for the model: as asked, else torch's choice less the core the screen needs.

    The screen (the app's main thread) draws while the model runs; with torch's threads on every core
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


def variant_message(variant: str, error: str) -> str:
    return f"{variant_label(variant)}: {error}" if error else ""


def error_line(failure: Exception) -> str:
    """A failed run as the app's message line says it: attn's message and hint, else the exception's."""
    if isinstance(failure, AttnError):
        return failure.message + (f"; {failure.hint}" if failure.hint else "")
    return f"{type(failure).__name__}: {failure}"


def stack_report(look, stack: str | None):
    """The InspectReport a look shows: the look itself, or an encoder–decoder pair's (PairReport) `stack`."""
    from attn_cli.analyses.seq2seq import PairReport

    if stack is None or not isinstance(look, PairReport):
        return look
    return next(report for report in look.stacks if (layers := report.layer_list()) and layers[0].stack == stack)


def reports_in(look) -> list:
    """The InspectReports of a look: itself, or a pair's stacks."""
    from attn_cli.analyses.seq2seq import PairReport

    return list(look.stacks) if isinstance(look, PairReport) else [look]


class Session:
    """A model loaded once and the looks taken with it. load_model() → Model runs on the model thread."""

    def __init__(
        self,
        load_model,
        text: str = DEFAULT_TEXT,
        *,
        model_name: str = "",
        truncate: bool = False,
        threads: int | None = None,
        target: str | None = None,
        image: bool = False,
    ):
        self.load_model = load_model
        self.model_name = model_name
        self.text = text  # the sentence; an encoder–decoder model's source; with `image`, the image's file
        self.target = target  # an encoder–decoder model's decoder text (teacher-forced); None: one stack
        self.image = image  # a vision transformer looking at the image file `text`
        self.stack: str | None = None  # the stack shown of a pair: "encoder", "decoder" or "cross"
        self.truncate = truncate
        self.threads = threads  # torch's CPU threads (None: model_threads' choice); the number used once loaded
        self.model: Model | None = None
        self.reports: dict[tuple[str, str], object] = {}  # (text, variant) → InspectReport
        self.windows: dict[tuple, object] = {}  # long texts: (text, variant, layer, head, rows, cols) → HeadReport
        # the selection
        self.layer = self.head = 0
        self.query = 1
        self.variant = "baseline"
        self.variant_error = ""
        self.scores = False
        self.metric = "weights"
        self.frozen = False  # gc.freeze() after the load
        self.load_seconds: float | None = None
        self.stage = f"loading {model_name or 'the model'}"
        self.started = time.perf_counter()
        # Every model call runs on this one thread: a new thread per run would start a new pool of
        # torch's CPU threads each time, and the idle ones of the runs before keep spinning.
        self.model_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="attn-model")

    def submit(self, work, *args) -> Future:
        """Run work(*args) on the model thread, after what is already queued there."""
        return self.model_thread.submit(work, *args)

    def close(self) -> None:
        """The session is over: queued runs are dropped, and the collector's freeze after the load undone."""
        self.model_thread.shutdown(wait=False, cancel_futures=True)
        if self.frozen:
            gc.unfreeze()
            self.frozen = False

    # -- loading (on the model thread) ----------------------------------------------------------------
    def load(self):
        """Load the model and run it on the first sentence: (model, report). AttnError for any failure."""
        try:
            self.stage = f"loading {self.model_name or 'the model'} (importing torch and transformers)"
            import torch

            self.threads = model_threads(self.threads, torch.get_num_threads(), available_cores())
            torch.set_num_threads(self.threads)  # this thread's runs (the model thread runs them all)
            model = self.load_model()
            self.stage = f"running the model on the {'image' if self.image else 'sentence'}"
            report = self.inspect(model, self.text, "baseline", self.target)
            # The model, torch, transformers and Textual are hundreds of thousands of objects that live as
            # long as the app: out of the collector's way, a full collection in the middle of a look scans
            # only what the session made since (a 300 ms pause became < 90 ms). Undone by close().
            gc.collect()
            gc.freeze()
            self.frozen = True
        except AttnError:
            raise
        except Exception as error:  # noqa: BLE001 - shown as one line by the command, never a traceback
            raise AttnError(f"{type(error).__name__}: {error}") from error
        return model, report

    def loaded(self, model, report) -> None:
        """The first look: on the most focused head, as `attn inspect` starts (render/terminal.most_focused)."""
        from attn_cli.render.terminal import most_focused

        self.load_seconds = time.perf_counter() - self.started
        self.model = model
        self.reports[(self.text, "baseline")] = report
        stacks = self.stacks()
        self.stack = ("cross" if "cross" in stacks else stacks[0]) if stacks else None
        self.query = 0 if self.image else min(1, len(self.report.tokens) - 1)  # an image: from [CLS]
        layer, head = most_focused(self.report.heads())
        self.layer, self.head = layer, head.head

    # -- the looks ----------------------------------------------------------------------------------
    def inspect(self, model, text: str, variant: str, target: str | None):
        """One look on `model`: inspect of the sentence, of the source and `target` (a PairReport), or of the
        image file `text` (whole matrices: the pictures need every query's row)."""
        if self.image:
            return model.inspect_image(text, top_k=TOP_K, variant=variant, full=True)
        if target is not None:
            return model.inspect(text, target=target, top_k=TOP_K, variant=variant)
        return model.inspect(text, top_k=TOP_K, variant=variant, truncate=self.truncate)

    def look(self, text: str, variant: str):
        """The InspectReport of (text, variant) the screen draws: a pair's selected stack."""
        return stack_report(self.reports[(text, variant)], self.stack)

    @property
    def report(self):
        return self.look(self.text, "baseline")

    def shown_report(self):
        """The report the screen shows: the variant's when one is on (and ran), else the baseline."""
        if self.variant != "baseline" and (self.text, self.variant) in self.reports:
            return self.look(self.text, self.variant)
        return self.report

    @property
    def kind(self) -> str:
        """What the session looks at: "text", an encoder–decoder "pair", or an "image"."""
        return "image" if self.image else "pair" if self.target is not None else "text"

    def variants(self) -> tuple[str, ...]:
        """What `v` cycles through: the variants inspect runs on this kind of look (a pair: the baseline only; an
        image: not raw, which needs each layer's input, kept for text models only)."""
        if self.kind == "pair":
            return ("baseline",)
        return tuple(variant for variant in VARIANTS if variant != "raw") if self.image else VARIANTS

    def stacks(self) -> list[str]:
        look = self.reports[(self.text, "baseline")]
        return [report.layers[0].stack for report in reports_in(look) if report.layers and report.layers[0].stack]

    def next_stack(self) -> str | None:
        """The next stack of a pair (encoder → decoder → cross), the same layer and head where it has them, the
        query row kept where the stack's rows reach it."""
        stacks = self.stacks()
        if not stacks or self.stack is None:
            return None
        self.stack = stacks[(stacks.index(self.stack) + 1) % len(stacks)]
        heads = self.all_heads()
        if (self.layer, self.head) not in heads:
            self.layer, self.head = self.layer_after(0) if self.layer in {layer for layer, _ in heads} else heads[0]
        self.set_query(self.query)
        return self.stack

    def run_target(self, target: str):
        """On the model thread: the shown source with a new target, (look, "") or (None, the error)."""
        try:
            return self.inspect(self.model, self.text, "baseline", target), ""
        except Exception as failure:  # noqa: BLE001 - a message in the app, never a traceback
            return None, error_line(failure)

    def show_target(self, target: str, look) -> None:
        """The new target's look (run_target) is the one shown: every look before was of the old target."""
        self.target, self.variant, self.variant_error = target, "baseline", ""
        self.reports = {(self.text, "baseline"): look}
        self.windows = {}
        self.set_query(self.query)

    def wanted(self, text: str, variant: str) -> list[tuple[str, str]]:
        """The reports showing `text` under `variant` needs: the baseline's, and the variant's beside it."""
        return [(text, "baseline")] + ([(text, variant)] if variant != "baseline" else [])

    def cached(self, text: str, variant: str) -> bool:
        return all(key in self.reports for key in self.wanted(text, variant))

    def run_looks(self, text: str, variant: str) -> tuple[bool, str]:
        """On the model thread: the reports `text` under `variant` needs that are not cached yet.
        (False, error) when the text itself failed (keep what is on screen); else (True, the variant's
        error or "")."""
        error = ""
        for key in self.wanted(text, variant):
            if key in self.reports:
                continue
            try:
                report = self.inspect(self.model, key[0], key[1], self.target)
            except Exception as failure:  # noqa: BLE001 - a message in the app, never a traceback
                error = error_line(failure)
            else:
                self.reports[key] = report
                continue
            if key[1] == "baseline":
                return False, error
        return True, error

    def show(self, text: str, variant: str, error: str) -> bool:
        """`text` under `variant` (its reports cached) is now the one shown; True if the text is new."""
        new_text = text != self.text
        self.text, self.variant = text, variant
        self.variant_error = variant_message(variant, error)
        if new_text:
            self.query = min(self.query, len(self.report.tokens) - 1)
        return new_text

    def forget_old_texts(self) -> tuple[set[int], set[int]]:
        """Drop the reports and windows of all but the last KEEP_TEXTS sentences (and the one shown), so a long
        session does not hold every sentence it saw; the ids of the reports and heads still held, for the caches
        of drawn lines to keep theirs. In place, with the keys listed first: the model thread may be adding the
        next sentence's entries meanwhile (those are the newest: kept)."""
        texts = list(dict.fromkeys(key[0] for key in list(self.reports)))  # first seen first
        keep = set(texts[-KEEP_TEXTS:]) | {self.text}
        for key in [key for key in list(self.reports) if key[0] not in keep]:
            self.reports.pop(key, None)
        for key in [key for key in list(self.windows) if key[0] not in keep]:
            self.windows.pop(key, None)
        looks = list(self.reports.values())
        reports = {id(look) for look in looks} | {id(report) for look in looks for report in reports_in(look)}
        heads = {id(head) for look in looks for report in reports_in(look) for _, head in report.heads()}
        heads |= {id(head) for head in list(self.windows.values())}
        return reports, heads

    # -- the selection ------------------------------------------------------------------------------
    def all_heads(self) -> list[tuple[int, int]]:
        return [(layer.layer, head.head) for layer in self.report.layers for head in layer.heads]

    def head_after(self, step: int) -> tuple[int, int]:
        """The head `step` away in reading order; past a layer's last head, the next layer's first (round)."""
        heads = self.all_heads()
        index = heads.index((self.layer, self.head)) if (self.layer, self.head) in heads else 0
        return heads[(index + step) % len(heads)]

    def layer_after(self, step: int) -> tuple[int, int]:
        """The same head `step` layers away (stopping at the first and last; the last head if it has fewer)."""
        layers = [layer.layer for layer in self.report.layers]
        index = max(0, min(len(layers) - 1, layers.index(self.layer) + step))
        heads = [head.head for head in self.report.layers[index].heads]
        return layers[index], self.head if self.head in heads else heads[-1]

    def set_query(self, query: int) -> None:
        self.query = max(0, min(query, len(self.report.tokens) - 1))

    def next_variant(self) -> str:
        variants = self.variants()
        return variants[(variants.index(self.variant) + 1) % len(variants)]

    def next_metric(self) -> None:
        """`g`: the next grid metric (an image also has every head's picture, after the thumbnails)."""
        metrics = GRID_METRICS[:1] + ("pictures",) + GRID_METRICS[1:] if self.image else GRID_METRICS
        self.metric = metrics[(metrics.index(self.metric) + 1) % len(metrics)]

    def neighbours(self) -> list[tuple[int, int]]:
        """The heads one key away (next, previous, the layers above and below): what to render while idle."""
        heads = self.all_heads()
        here = heads.index((self.layer, self.head)) if (self.layer, self.head) in heads else 0
        near = [heads[(here + 1) % len(heads)], heads[here - 1]]
        layers = [layer.layer for layer in self.report.layers]
        index = layers.index(self.layer) if self.layer in layers else 0
        return near + [(layers[i], self.head) for i in (index + 1, index - 1) if 0 <= i < len(layers)]

    # -- the selected head --------------------------------------------------------------------------
    def heads_to_show(self, text: str, variant: str, variant_error: str, layer: int, head: int, width: int):
        """(baseline head, variant head or None, error) of `text` for the detail view `width` columns wide."""
        base = self.detail_head(self.look(text, "baseline"), layer, head, width)
        if variant == "baseline":
            return base, None, ""
        if (text, variant) not in self.reports:
            return base, None, variant_error
        other_report = self.look(text, variant)
        try:
            return base, self.detail_head(other_report, layer, head, width), ""
        except AttnError as error:
            return base, None, f"{variant_label(variant)}: {error.message}"

    def selected_heads(self, width: int, layer: int | None = None, head: int | None = None):
        """heads_to_show for the sentence and variant shown, at the selected head (or layer, head)."""
        return self.heads_to_show(
            self.text,
            self.variant,
            self.variant_error,
            self.layer if layer is None else layer,
            self.head if head is None else head,
            width,
        )

    def detail_head(self, report, layer: int, head: int, width: int):
        """The head with matrices to draw: from the report, or, for a long text, a window around the query
        (run on the loaded model, once per window)."""
        if not report.matrices_left_out:
            return report.head(layer, head)
        rows, cols = head_window(self.query, len(report.tokens), width, len(report.key_axis))
        text = self.text if self.kind == "pair" else report.text  # a pair's stack report holds the target's
        key = (text, report.variant, self.stack, layer, head, rows, cols)
        assert self.model is not None  # a report to draw came from the loaded model
        if key not in self.windows:
            if self.kind == "pair":
                windowed = self.model.inspect(
                    text,
                    target=self.target,
                    stacks=self.stack,
                    layers=[layer],
                    heads=[head],
                    top_k=TOP_K,
                    rows=rows,
                    cols=cols,
                )
            else:
                windowed = self.model.inspect(
                    text,
                    layers=[layer],
                    heads=[head],
                    top_k=TOP_K,
                    variant=report.variant,
                    truncate=self.truncate,
                    rows=rows,
                    cols=cols,
                )
            self.windows[key] = stack_report(windowed, self.stack).head(layer, head)
        return self.windows[key]
