"""The steps every command shares: read the text, load the model, run with a spinner, print or write."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from rich.text import Text

from attn_cli.cli.edge import stderr_console
from attn_cli.cli.options import OUTPUT_SETTINGS, PANEL_NAMES
from attn_cli.plumbing import textio
from attn_cli.plumbing.atomic import atomic_open
from attn_cli.plumbing.errors import AttnError, BadInput

FILE_LINES = 1_000_000  # the "screen height" of a file or pipe: no limit


def read_text(text: str, name: str = "the text") -> str:
    """The argument itself, or stdin for '-'. Blank text, or text that is not valid UTF-8, is a usage error
    naming `name` (the option it came from, where it is not the TEXT argument)."""
    return textio.read_text(text, name)


def parse_panels(show: list[str] | None):
    """--show weights,top --show q → {Panel.weights, Panel.top, Panel.q}; None keeps the default view."""
    from attn_cli.render.terminal import Panel

    if not show:
        return None
    names = [name.strip().lower() for value in show for name in value.split(",") if name.strip()]
    if not names:
        raise BadInput("--show needs a panel name", f"choose from {', '.join(PANEL_NAMES)}")
    unknown = [name for name in names if name not in PANEL_NAMES]
    if unknown:
        raise BadInput(f"--show {unknown[0]!r} is not a panel", f"choose from {', '.join(PANEL_NAMES)}")
    return {Panel(name) for name in names}


def model_options(pairs: list[str] | None, **flags) -> dict:
    """-O KEY=VALUE pairs, plus the loading flags that were given (False and None: not given)."""
    options: dict = {}
    for pair in pairs or []:
        key, equals, value = pair.partition("=")
        if not equals or not key.strip():
            raise BadInput(f"-O {pair!r} is not KEY=VALUE", "for example -O d_model=64")
        options[key.strip()] = value
    options.update({name: value for name, value in flags.items() if value is not None and value is not False})
    return options


def load_model(model: str, *, device: str, dtype, options: dict):
    """attn_cli.load with the command line's choices."""
    from attn_cli.api import load

    return load(model, device=device, dtype=dtype.value, **options)


def run_and_emit(
    run: Callable,
    *,
    label: str,
    json_wanted: bool,
    output: Path | None,
    save: Sequence[Path] | Path | None,
    render: Callable,
    figure: Callable,
) -> None:
    """run(progress, lazy) → report, under a progress bar; then JSON (stdout or -o) or render(report) printed.

    lazy: the report may analyse its layers as its JSON is written.
    figure(report, path): writes --save FILE.svg/.html, once per --save given.
    """
    from attn_cli.plumbing.config import defaults

    with progress_on_stderr(label, doing="analysing layers") as progress:
        report = run(progress, json_wanted)
        warn_if_truncated(report)
        warn_if_unknown(report)
        if json_wanted:
            # A lazy report analyses layers (moving the bar) while its JSON is written, so the bar
            # is cleared just before the last chunk: not after, when a reader of stdout that answers
            # as soon as the document is complete (jq) has printed onto the bar's line.
            emit_json(report, output, before_last=None if progress is None else progress.clear)
    if not json_wanted:
        emit_terminal(
            lambda: render(report),
            save,
            defaults()["render"]["fallback_width"],
            figure=lambda path: figure(report, path),
        )


class Bar:
    """A transient progress bar on stderr: bar(done, total) moves it; clear() takes it off the screen
    (at once, for good: what is written after it lands on a clean line)."""

    def __init__(self, progress, label: str, doing: str):
        self.progress, self.doing = progress, doing
        self.task = progress.add_task(label, total=None)  # the total comes with the first count

    def __call__(self, done: int, total: int | None, doing: str | None = None) -> None:
        """doing: what the bar says now, when it changes as it goes (generate's text so far)."""
        self.progress.update(self.task, description=doing or self.doing, completed=done, total=total)

    def clear(self) -> None:
        self.progress.stop()  # transient: erases the bar; stopping again on exit does nothing


@contextlib.contextmanager
def progress_on_stderr(label: str, doing: str, *columns) -> Iterator[Bar | None]:
    """A progress bar on stderr: `label` and a spinner while the model loads, then `doing` with a bar,
    done/total and `columns` once the first bar(done, total) says how much there is. None (silence)
    when stderr is not a terminal."""
    console = stderr_console()
    if not console.is_terminal:
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, SpinnerColumn, TextColumn

    class Known(ProgressColumn):
        """A column drawn only once a count was given: no empty bar and no '0/?' while the model loads."""

        def __init__(self, column: ProgressColumn):
            self.column = column
            super().__init__()

        def render(self, task):
            return Text("") if task.total is None and not task.completed else self.column.render(task)

    # redirect_stdout=False: stdout carries the JSON document and must never pass through Rich.
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        Known(BarColumn()),
        Known(MofNCompleteColumn()),
        *map(Known, columns),
        console=console,
        transient=True,
        redirect_stdout=False,
        redirect_stderr=False,
    ) as progress:
        yield Bar(progress, label, doing)


def note(message: str, style: str = "yellow") -> None:
    """One line on stderr, however wide the terminal."""
    stderr_console().print(Text(message, style=style), soft_wrap=True)


def check_outputs(
    save: Sequence[Path] | Path | None,
    as_json: bool,
    output: Path | None = None,
    dpi: int | None = None,
    **more: Path | None,
) -> bool:
    """Whether the command writes JSON (--json, or -o FILE); first, failing in milliseconds before the
    model loads, when an output file cannot be written (or drawn: --save FILE.png without cairosvg).

    save: every --save (the terminal view's figures); output: -o (the JSON); dpi: --dpi (a PNG's);
    more: other options' files by flag name.
    """
    from attn_cli.plumbing.atomic import check_all_writable
    from attn_cli.render.files import check_dpi, check_snapshot_path

    saves = saves_of(save)
    json_wanted = as_json or output is not None
    check_all_writable({"-o": output, **{"--" + name.replace("_", "-"): path for name, path in more.items()}})
    if not saves:
        check_dpi(dpi, None)
        return json_wanted
    if json_wanted:
        raise BadInput(
            "--save writes a figure beside the terminal view, not with --json", "use -o FILE to write the JSON document"
        )
    for path in saves:
        check_snapshot_path(path)
    # --dpi sets the pixels of the PNG among the figures (the others are vector)
    check_dpi(dpi, next((path for path in saves if path.suffix.lower() == ".png"), saves[0]))
    return json_wanted


def saves_of(save: Sequence[Path] | Path | None) -> tuple[Path, ...]:
    """Every --save given, each once, in order: None, one path or several."""
    if save is None:
        return ()
    return tuple(dict.fromkeys([save] if isinstance(save, Path) else save))


def save_figure(report, path: Path, panels=None, dpi: int | None = None, scale=None) -> None:
    """--save FILE.svg/.png/.pdf/.html: the report's figure (render/figures.py) at --dpi and --scale; a
    warning line for characters no installed font could draw."""
    from attn_cli.render.files import save_figure as write

    for warning in write(report, path, panels, dpi, per_head=per_head_of(scale)):
        note(warning)


def registered_view(panels=None, per_head: bool = False) -> Callable:
    """render(report) for run_and_emit: the terminal view the report's analysis registered (data/registry.py),
    found by the report's type."""

    def render(report):
        from attn_cli.data.registry import registered_analysis

        return registered_analysis(report).terminal(report, panels, per_head)

    return render


def per_head_of(scale) -> bool:
    """--scale head: weights coloured on each head's own scale; None (a command without --scale): fixed."""
    return scale is not None and scale.value == "head"


def check_options(params: dict) -> None:
    """What every model-loading command's options must satisfy before anything runs (params: the
    command's parameters by name, as Typer hands them over): whole numbers a machine can hold, and no
    output that is one of the inputs."""
    check_integers(params)
    check_files(params)


def check_integers(params: dict) -> None:
    """Every integer option (--limit, --batch-size, --seed, --top-k, …) within ±sys.maxsize: Python parses
    `--limit 1000000000000000000000000000000`, but slicing, seeding and sizing need a machine integer.
    The option's flag is its parameter's name in dashes (limit → --limit, top_k → --top-k)."""
    for name, value in params.items():
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > sys.maxsize:
            raise BadInput(
                f"--{name.replace('_', '-')} {value} is out of range", f"it must lie within ±{sys.maxsize:,}"
            )


# A command's file options by parameter name: what it writes, and (below) what it reads.
OUTPUT_OPTIONS = {"output": "-o", "save": "--save", "save_tensors": "--save-tensors"}
MODEL_OPTIONS = {"model": "--model", "against_model": "--against-model"}


def check_files(params: dict) -> None:
    """Refuse (exit 2, before any model loads) an output that is one of the command's inputs: its
    report would replace the corpus, the toy's weights or a model's file. params: the command's
    parameters by name (Typer's). Read: --file; every file of a --model or --against-model
    directory; an -O KEY=VALUE naming an existing file (the toy's config and weights). Written:
    -o, --save, --save-tensors, and the -O settings of OUTPUT_SETTINGS (save_weights)."""
    from attn_cli.plumbing.atomic import check_not_inputs

    outputs: dict[str, Path | None] = {}
    for name, flag in OUTPUT_OPTIONS.items():
        for path in saves_of(params.get(name)):  # --save is repeatable; the others are one file
            outputs[flag if flag not in outputs else f"{flag} {path}"] = path
    inputs: list[tuple[str, Path]] = []
    if params.get("file") is not None and str(params["file"]) != "-":
        inputs.append((f"--file {params['file']}", Path(params["file"])))
    for name, flag in MODEL_OPTIONS.items():
        directory = Path(params[name]) if params.get(name) else None
        if directory is not None and directory.is_dir():
            inputs += [(f"{entry.name} of {flag} {directory}", Path(entry.path)) for entry in os.scandir(directory)]
    for pair in params.get("option") or []:
        key, _, value = (part.strip() for part in pair.partition("="))
        if key in OUTPUT_SETTINGS and value:
            outputs[f"-O {key}"] = Path(value)
        elif value and os.path.isfile(value):
            inputs.append((f"-O {key}={value}", Path(value)))
    check_not_inputs(outputs, inputs)


def texts_or_corpus(texts: list[str] | None, file: Path | None) -> list[str] | None:
    """TEXT... or --file, one of them: the texts read (- from stdin), or None once the corpus is checked (a missing
    path or a directory fails here, before the model loads)."""
    if bool(texts) == (file is not None):
        raise BadInput(
            "TEXT and --file are separate sources" if texts else "no text given", "pass TEXT... or --file FILE"
        )
    if file is not None:
        from attn_cli.plumbing.textio import check_corpus

        check_corpus(file)
        return None
    return [read_text(text) for text in texts or []]


def warn_if_truncated(report) -> None:
    """A warning on stderr per text that --truncate cut. report: one report or an InspectBatch."""
    from attn_cli.analyses.inspect_report import InspectBatch

    for single in report.reports if isinstance(report, InspectBatch) else [report]:
        if getattr(single, "truncated_from", None) is not None:
            note(f"warning: text truncated from {single.truncated_from} tokens to the model's {len(single.tokens)}")


def warn_if_unknown(report) -> None:
    """A warning on stderr per text that lost a noticeable share of its tokens to the unknown token."""
    from attn_cli.data.unknown import unknown_note

    for text, tokens in texts_read(report):
        message = unknown_note(text, tokens, report.model.name)
        if message is not None:
            note(message)


def texts_read(report):
    """(text, its tokens) of each text the model read for `report`: a batch's texts, diff's two, a pair's source
    and target, a prompt (not what was generated); an image has no text."""
    from attn_cli.analyses.ablate import AblationReport, joined
    from attn_cli.analyses.diff import DiffReport
    from attn_cli.analyses.generate import GenerateReport
    from attn_cli.analyses.inspect_report import InspectBatch
    from attn_cli.analyses.patch import PatchReport
    from attn_cli.analyses.seq2seq import PairReport
    from attn_cli.analyses.seq2seq_generate import PairGenerateReport
    from attn_cli.render.files import shows_image

    if shows_image(report):
        return
    if isinstance(report, InspectBatch):
        for single in report.reports:
            yield from texts_read(single)
    elif isinstance(report, DiffReport):
        yield from texts_read(report.a)
        yield from texts_read(report.b)
    elif isinstance(report, GenerateReport):
        yield report.prompt, report.tokens[: report.prompt_tokens]
    elif isinstance(report, PairGenerateReport):  # the source
        yield report.prompt, report.tokens
    elif isinstance(report, PairReport):
        yield report.text, report.tokens
        yield report.target, report.target_tokens
    elif isinstance(report, AblationReport) and report.target is not None and report.metric in ("loss", "kl"):
        yield joined(report.text, report.target), report.tokens  # the text and its continuation, as one run
    elif isinstance(report, PatchReport):
        yield report.clean, report.tokens
        yield report.corrupt, report.corrupt_tokens
    elif isinstance(vars(report).get("text"), str) and "tokens" in vars(report):  # its dataclass fields
        yield report.text, report.tokens


def emit_json(report, output: Path | None, before_last: Callable[[], None] | None = None) -> None:
    """The report's JSON document to stdout or -o FILE, through the one writer; before_last() runs
    before the document's last chunk is written."""
    from attn_cli.render.files import write_json

    if output is None:
        write_json(report, sys.stdout, before_last)
        sys.stdout.flush()  # surface a closed pipe here, inside the edge, not at interpreter exit
        return
    try:
        with atomic_open(output, option="-o") as handle:
            write_json(report, handle, before_last)
    except OSError as error:
        raise AttnError(f"cannot write {output}: {error.strerror}") from None
    note(f"wrote {output}", style="dim")


def emit_terminal(
    render: Callable[[], object],
    save: Sequence[Path] | Path | None,
    fallback_width: int,
    figure: Callable[[Path], None] | None = None,
) -> None:
    """Print render() (renderables size themselves to the console) to stdout; with --save also write
    figure(path), the command's SVG or HTML figure, for every --save given."""
    from rich.console import Console

    # A terminal (or COLUMNS) says how wide to be; a file or pipe gets the configured width. A terminal (or
    # LINES) also says how tall a screen is (the default view fits its grid to it); a file has no screens.
    terminal = sys.stdout.isatty()
    width = None if terminal or "COLUMNS" in os.environ else fallback_width
    height = None if terminal or "LINES" in os.environ else FILE_LINES
    Console(width=width, height=height).print(render())
    for path in saves_of(save):
        assert figure is not None  # a command that takes --save draws a figure
        figure(path)
        note(f"saved {path}", style="dim")
