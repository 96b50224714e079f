"""`attn heads show DIR --save dashboard.html`: one offline page of a corpus store — a head finder (every
head with every score's mean; sort, filter, click) and a head page (histograms, top texts, decile samples
and top edges with the query and its keys highlighted; hover a token for its weight).

The page is figures.html_document's shell (data as JSON in <script id="attn-data">, every '<' escaped;
script and style inline, nothing fetched) drawing render/dashboard.js and dashboard.css.
"""

from __future__ import annotations

from attn_cli.analyses.store_read import Example, HeadExamples, StoreReport
from attn_cli.data.document import counted
from attn_cli.render.figures import html_document
from attn_cli.render.heads_view import KINDS, TOP_NAMES
from attn_cli.render.scale import SEQUENTIAL, hex_colour

PAGE_TOP = 5  # top texts per score and top edges per head on the page (--top changes it)


def dashboard_html(report: StoreReport, top: int = PAGE_TOP, start: tuple[int, int] | None = None) -> str:
    return html_document(dashboard_data(report, top, start), "dashboard.js", "dashboard.css")


def dashboard_data(report: StoreReport, top: int = PAGE_TOP, start: tuple[int, int] | None = None) -> dict:
    """What the page draws. Per head: label, each score's mean, std, count, quantiles and histogram (lists in
    the order of `scores`); per head its examples, one sample per decile. start: the head shown first."""
    info = report.model
    scores = list(report.scores_named)
    examples = report.all_examples(top)
    texts = TextPieces()
    title = (
        f"attn heads show · {info.name} ({info.architecture}, {counted(info.layers, 'layer')} × "
        f"{counted(info.heads, 'head')})"
    )
    text = f"{report.texts:,} texts from {report.source}, {report.tokens:,} tokens · store {report.path}"
    if not report.complete:
        text += " · incomplete: the run stopped early (--resume completes it)"
    return {
        "title": title,
        "text": text,
        "scores": scores,
        "names": {name: TOP_NAMES.get(name, KINDS[name][2] if name in KINDS else name) for name in scores},
        "codes": {name: code for name, (code, _, _) in KINDS.items()},
        "weights": [hex_colour(rgb) for rgb in SEQUENTIAL],
        "start": list(start) if start is not None else None,
        "heads": [_head(report, profile, scores) for profile in report.heads],
        "examples": {f"{layer}.{head}": _examples(found, texts) for (layer, head), found in examples.items()},
        "texts": texts.to_json(),
    }


def _head(report: StoreReport, profile, scores: list[str]) -> dict:
    distributions = report.distributions[profile.layer, profile.head]
    sink = profile.sink_key
    return {
        "layer": profile.layer,
        "head": profile.head,
        "label": profile.label,
        "score": report.default_score(profile.layer, profile.head),
        "mean": [_rounded(profile.scores[name]) for name in scores],
        "std": [_rounded(profile.std[name]) for name in scores],
        "count": [distributions[name].count for name in scores],
        "q05": [_rounded(distributions[name].quantiles["q05"]) for name in scores],
        "q95": [_rounded(distributions[name].quantiles["q95"]) for name in scores],
        "hist": [list(distributions[name].hist) for name in scores],
        "sink": None if sink is None else {"position": sink.position, "token": sink.token, "texts": sink.texts},
    }


def _examples(found: HeadExamples, texts: TextPieces) -> dict:
    return {
        "top": {score: [_example(e, texts) for e in rows] for score, rows in found.top.items()},
        "decile": {score: [_example(e, texts) for e in rows] for score, rows in found.decile.items()},
        "edge": [_example(e, texts) for e in found.edge],
    }


def _example(example: Example, texts: TextPieces) -> dict:
    """An example without its tokens: text t's tokens s … s + c - 1 are in the page's `texts` (shared)."""
    texts.add(example)
    record = {
        "t": example.text_id,
        "v": _rounded(example.value),
        "s": example.window_start,
        "c": len(example.tokens),
        "n": example.length,
        "q": example.query,
        "k": list(example.keys),
        "w": [_rounded(weight) for weight in example.weights],
    }
    if example.decile is not None:
        record["d"] = example.decile
    return record


class TextPieces:
    """The tokens of every example's window, each text's once: many heads' examples come from the same
    texts (a corpus's most induction-like text is so for several heads), so the page holds each text's known
    tokens as a few runs [start, [tokens]] rather than a copy per example (72 heads: ~50× smaller)."""

    def __init__(self) -> None:
        self.known: dict[int, dict[int, str]] = {}  # text id → position → token

    def add(self, example: Example) -> None:
        known = self.known.setdefault(example.text_id, {})
        for offset, token in enumerate(example.tokens):
            known[example.window_start + offset] = token

    def to_json(self) -> dict:
        """{text id: [[start, [tokens of start, start + 1, …]], …]}: runs of consecutive known positions."""
        runs: dict[str, list] = {}
        for text_id, known in self.known.items():
            mine = runs[str(text_id)] = []
            for position in sorted(known):
                if mine and mine[-1][0] + len(mine[-1][1]) == position:
                    mine[-1][1].append(known[position])
                else:
                    mine.append([position, [known[position]]])
        return runs


def _rounded(value: float | None) -> float | None:
    return None if value is None or value != value else round(float(value), 4)
