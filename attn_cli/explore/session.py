"""The state of one `attn explore` session, without a screen: the loaded model, the looks (reports) cached
per (sentence, variant), the selection, and the one thread every model call runs on.

Nothing here imports Textual: the app (explore/app.py) turns keys into the calls below and the widgets
(explore/widgets.py) draw what they leave; the tests drive a Session with plain pytest.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
import gc
import os
import time

from attn_cli.plumbing.errors import AttnError
from attn_cli.explore.layout import head_window
from attn_cli.explore.view import GRID_METRICS, VARIANTS, variant_label

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


class Session:
    """A model loaded once and the looks taken with it. load_model() → Model runs on the model thread."""

    def __init__(self, load_model, text: str = DEFAULT_TEXT, *, model_name: str = "", truncate: bool = False,
                 threads: int | None = None):
        self.load_model = load_model
        self.model_name = model_name
        self.text = text
        self.truncate = truncate
        self.threads = threads  # torch's CPU threads (None: model_threads' choice); the number used once loaded
        self.model = None
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
            self.stage = "running the model on the sentence"
            report = model.inspect(self.text, top_k=TOP_K, truncate=self.truncate)
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
        self.query = min(1, len(report.tokens) - 1)
        layer, head = most_focused(report.heads())
        self.layer, self.head = layer, head.head

    # -- the looks ----------------------------------------------------------------------------------
    @property
    def report(self):
        return self.reports[(self.text, "baseline")]

    def shown_report(self):
        """The report the screen shows: the variant's when one is on (and ran), else the baseline."""
        return self.reports.get((self.text, self.variant), self.report) if self.variant != "baseline" else self.report

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
                report = self.model.inspect(key[0], top_k=TOP_K, variant=key[1], truncate=self.truncate)
            except AttnError as failure:
                error = failure.message + (f"; {failure.hint}" if failure.hint else "")
            except Exception as failure:  # noqa: BLE001 - a message in the app, never a traceback
                error = f"{type(failure).__name__}: {failure}"
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
        reports = {id(report) for report in list(self.reports.values())}
        heads = {id(head) for report in list(self.reports.values()) for _, head in report.heads()}
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
        return VARIANTS[(VARIANTS.index(self.variant) + 1) % len(VARIANTS)]

    def next_metric(self) -> None:
        self.metric = GRID_METRICS[(GRID_METRICS.index(self.metric) + 1) % len(GRID_METRICS)]

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
        base = self.detail_head(self.reports[(text, "baseline")], layer, head, width)
        if variant == "baseline":
            return base, None, ""
        other_report = self.reports.get((text, variant))
        if other_report is None:
            return base, None, variant_error
        try:
            return base, self.detail_head(other_report, layer, head, width), ""
        except AttnError as error:
            return base, None, f"{variant_label(variant)}: {error.message}"

    def selected_heads(self, width: int, layer: int | None = None, head: int | None = None):
        """heads_to_show for the sentence and variant shown, at the selected head (or layer, head)."""
        return self.heads_to_show(self.text, self.variant, self.variant_error,
                                  self.layer if layer is None else layer, self.head if head is None else head, width)

    def detail_head(self, report, layer: int, head: int, width: int):
        """The head with matrices to draw: from the report, or, for a long text, a window around the query
        (run on the loaded model, once per window)."""
        if not report.matrices_left_out:
            return report.head(layer, head)
        rows, cols = head_window(self.query, len(report.tokens), width)
        key = (report.text, report.variant, layer, head, rows, cols)
        if key not in self.windows:
            windowed = self.model.inspect(report.text, layers=[layer], heads=[head], top_k=TOP_K,
                                          variant=report.variant, truncate=self.truncate, rows=rows, cols=cols)
            self.windows[key] = windowed.head(layer, head)
        return self.windows[key]
