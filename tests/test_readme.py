"""The documentation's examples, run: every block of README.md and of every page under docs/ that shows
output must show what the command prints now.

How a page is read (fenced blocks only; everything else is prose; the same rules for every page):

- A ``` block whose first line is `$ COMMAND` shows COMMAND's output: COMMAND runs and its stdout must
  equal the rest of the block. A line that is only `…` stands for any number of lines (the README's
  own way to leave lines out); trailing spaces and trailing blank lines do not count, nor do
  float32 round-off numbers (`3.2e-7`, any `d.de-N` with N ≥ 7: the asymmetry of an exactly
  symmetric head depends on the machine's arithmetic), nor the last digits of a number shown with 7 or
  more significant digits (`0.1411008`, `6.021477222442627`): it matches within 1e-6 relative, since
  float32 sums differ in their last places across CPUs and library versions.
- A ```bash block: every line is a command that must exit 0 (`# …` is a comment).
- A ```python block runs; when the next block is introduced by a line starting "Output", that block
  is what it must print.
- An HTML comment on the line above a block's fence declares more, and is read by this file only:
  `<!-- not checked: REASON -->` skips the block (the reason is the skip message; few, each a real
  reason), `<!-- varies: TEXT -->` says that TEXT in the shown output stands for whatever the run
  prints there (a path of the machine), and `<!-- setup -->` runs the block once, before all others,
  in the shared work directory (the tiny Llama recipe: the other blocks use ./tiny-llama). The setup
  blocks of every page run, page by page, before any block: a page may use a model another page's setup
  made (docs/commands/heads.md uses encoder-decoder.md's ./tiny-marian).

Every block is its own test (`README.md:LINE`, `docs/commands/routes.md:LINE`), so pytest-xdist spreads
the blocks over the cores; each process loads each model once. Moving a block from one page to another
does not run it twice. Commands run in a temporary work directory shared by all blocks and pages (the setup blocks' models, plus
corpus.txt: the 1,000 sentences of benchmarks/_corpus.py that `attn heads --file corpus.txt`
reads), with NO_COLOR=1, COLUMNS=80 (a `COLUMNS=120 attn …` prefix changes it), the CPU, and an
empty Hugging Face cache. `attn` runs in-process through Typer's CliRunner, and every model is
loaded once for this file in each test process (attn_cli.api.load is memoised while it runs) rather than once per command as ~30
subprocesses would. Other programs of a pipeline (`jq`, `python -c`) run as subprocesses.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import isolate, needs_program, patience
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md"))]  # every page whose blocks run
ANY_LINES = "…"
ROUND_OFF = r"\d\.\de-(?:[7-9]|\d\d)"  # below 1e-6: float32 round-off, not a result
NUMBER = re.compile(r"-?\d+\.\d+(?:e-?\d+)?")  # a decimal number as the commands print one


@dataclass(frozen=True)
class Block:
    line: int  # the opening fence's line in its page, 1-based
    language: str  # "", "bash", "python", …
    text: str
    marks: tuple[tuple[str, str], ...] = ()  # (key, value) of the HTML comments just above the fence
    output: Block | None = None  # a python block's "Output" block
    page: str = "README.md"  # the page's path from the repository's root

    def mark(self, key: str) -> str | None:
        return next((value for name, value in self.marks if name == key), None)

    @property
    def shows_output(self) -> bool:
        return self.language == "" and self.text.startswith("$ ")

    @property
    def name(self) -> str:
        return f"{self.page}:{self.line}"


MARK = re.compile(r"<!--\s*(not checked|varies|setup)\s*:?\s*(.*?)\s*-->")


def read_blocks(text: str, page: str = "README.md") -> list[Block]:
    """Every fenced block of a page, with the marks above it and a python block's output."""
    lines = text.split("\n")
    blocks: list[Block] = []
    index = 0
    while index < len(lines):
        fence = lines[index]
        if not fence.startswith("```"):
            index += 1
            continue
        end = next(number for number in range(index + 1, len(lines)) if lines[number].startswith("```"))
        marks, above = [], index - 1
        while above >= 0 and (found := MARK.fullmatch(lines[above].strip())):
            marks.insert(0, (found.group(1), found.group(2)))
            above -= 1
        prose = next((line for line in reversed(lines[: above + 1]) if line.strip()), "")  # the line above
        block = Block(index + 1, fence[3:].strip(), "\n".join(lines[index + 1 : end]), tuple(marks), page=page)
        if prose.startswith("Output") and blocks and blocks[-1].language == "python":
            blocks[-1] = dataclasses.replace(blocks[-1], output=block)
        else:
            blocks.append(block)
        index = end + 1
    return blocks


BLOCKS = [
    block
    for path in PAGES
    for block in read_blocks(path.read_text(encoding="utf-8"), path.relative_to(ROOT).as_posix())
]
CHECKED = [
    block
    for block in BLOCKS
    if block.mark("setup") is None and (block.shows_output or block.language == "bash" or block.language == "python")
]


# ---- matching -------------------------------------------------------------------------------------


def normalise(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.rstrip().split("\n"))


def pattern(shown: str, varies: list[str]) -> tuple[re.Pattern, list[float]]:
    """The shown output as a regex: `…` lines match any lines, each varying TEXT any characters, and each
    number shown with 7 or more significant digits any number (a group, checked by `close`); the second
    value is those numbers, in order."""
    wild = re.compile("(" + "|".join([ROUND_OFF] + [re.escape(text) for text in varies]) + ")")
    parts, long_numbers = [], []
    for line in normalise(shown).split("\n"):
        if line == ANY_LINES:
            parts.append(r"(?:[^\n]*\n)*?")
            continue
        pieces = wild.split(line)  # literal, wildcard, literal, …
        parts.append(
            "".join(
                literal(piece, long_numbers)
                if index % 2 == 0
                else ROUND_OFF
                if re.fullmatch(ROUND_OFF, piece)
                else "[^\n]*?"
                for index, piece in enumerate(pieces)
            )
            + r"\n"
        )
    return re.compile("".join(parts)), long_numbers


def literal(text: str, long_numbers: list[float]) -> str:
    """Text as a regex, its numbers of 7+ significant digits as groups (their values appended)."""
    out, last = [], 0
    for found in NUMBER.finditer(text):
        digits = found.group().lstrip("-").split("e")[0].replace(".", "").lstrip("0")
        if len(digits) < 7:
            continue
        out += [re.escape(text[last : found.start()]), "(" + NUMBER.pattern + ")"]
        long_numbers.append(float(found.group()))
        last = found.end()
    return "".join(out + [re.escape(text[last:])])


def close(printed: float, shown: float) -> bool:
    """Within float32 round-off: 1e-6 relative (about 8 units in float32's last place)."""
    return abs(printed - shown) <= 1e-6 * max(abs(shown), abs(printed))


def assert_shows(block: Block, shown: str, printed: str) -> None:
    varies = [value for name, value in block.marks if name == "varies"]
    regex, long_numbers = pattern(shown, varies)
    found = regex.fullmatch(normalise(printed) + "\n")
    if found and all(close(float(value), number) for value, number in zip(found.groups(), long_numbers)):
        return
    diff = "\n".join(
        difflib.unified_diff(
            normalise(shown).split("\n"),
            normalise(printed).split("\n"),
            f"{block.page} (shown)",
            "printed now",
            lineterm="",
        )
    )
    pytest.fail(
        f"{block.name}: the page shows other output than the command prints now "
        f"(a line `…` stands for any lines):\n{diff}",
        pytrace=False,
    )


# ---- running --------------------------------------------------------------------------------------


@dataclass
class Ran:
    stdout: str
    stderr: str
    codes: list[int] = field(default_factory=list)  # each program of the pipeline, in order


def split_pipeline(command: str) -> tuple[dict[str, str], list[list[str]], str | None, str | None]:
    """`A=1 attn … < in | jq … > out  # note` → ({A: 1}, [[attn, …], [jq, …]], "in", "out")."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars="|<>")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    words = list(lexer)
    env = {}
    while words and re.fullmatch(r"[A-Z_]+=.*", words[0]):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    programs, stdin, stdout = [[]], None, None
    while words:
        word = words.pop(0)
        if word == "|":
            programs.append([])
        elif word == "<":
            stdin = words.pop(0)
        elif word == ">":
            stdout = words.pop(0)
        else:
            programs[-1].append(word)
    return env, programs, stdin, stdout


def run_command(command: str, workdir: Path) -> Ran:
    """One shell line, as bash would run it: attn in-process, anything else as a subprocess."""
    env, programs, stdin, stdout = split_pipeline(command)
    data = (workdir / stdin).read_bytes() if stdin else b""
    ran = Ran("", "")
    for program in programs:
        if program[0] == "attn":
            result = CliRunner().invoke(app(), program[1:], input=data, env=env, catch_exceptions=False)
            data, code, errors = result.stdout_bytes, result.exit_code, result.stderr
        else:
            if shutil.which(program[0]) is None and program[0] not in ("python", "python3"):
                needs_program(program[0])
            argv = [sys.executable, *program[1:]] if program[0] in ("python", "python3") else program
            process = subprocess.run(
                argv, input=data, capture_output=True, cwd=workdir, timeout=patience(300), env={**os.environ, **env}
            )
            data, code, errors = process.stdout, process.returncode, process.stderr.decode(errors="replace")
        ran.codes.append(code)
        ran.stderr += errors
    if stdout:
        (workdir / stdout).write_bytes(data)
        data = b""
    ran.stdout = data.decode("utf-8")
    return ran


def app():
    from attn_cli.cli import app

    return app


def run_python(code: str) -> str:
    """A python block, in-process (so it shares the loaded models); what it prints."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, "<docs python block>", "exec"), {"__name__": "__readme__"})
    return printed.getvalue()


def commands(block: Block) -> list[str]:
    """The commands of a bash block: one a line, comments and blank lines left out."""
    return [line for line in block.text.split("\n") if line.strip() and not line.lstrip().startswith("#")]


# ---- fixtures -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def loaded_once():
    """attn_cli.api.load memoised: each model the README uses is loaded once for the whole file (module
    scope: the test files after this one get the real load back)."""
    from attn_cli import api

    original, models = api.load, {}

    def load(model: str = "minilm", *, device: str = "auto", dtype: str = "auto", **options):
        key = (
            str(Path(model).resolve()) if model.startswith(".") else model,
            device,
            dtype,
            tuple(sorted((name, str(value)) for name, value in options.items())),
        )
        if key not in models:
            models[key] = original(model, device=device, dtype=dtype, **options)
        return models[key]

    api.load = load
    yield
    api.load = original


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, loaded_once):
    """The shared work directory: every page's setup blocks run in it once, and corpus.txt is written."""
    directory = tmp_path_factory.mktemp("readme")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from _corpus import write_corpus
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    write_corpus(directory / "corpus.txt", 1000)
    with contextlib.chdir(directory):
        for block in BLOCKS:
            if block.mark("setup") is not None:
                run_block(block, directory)
    return directory


@pytest.fixture
def environment(monkeypatch, tmp_path):
    isolate(monkeypatch, 80)
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("ATTN_DEVICE", "cpu")
    with tempfile.TemporaryDirectory(prefix="hf") as base:
        monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(empty_cache(Path(base), tmp_path)))
        yield


def empty_cache(base: Path, tmp_path: Path) -> Path:
    """An empty Hugging Face cache under base, its path as long as the README's (`attn models` then lists
    the built-ins only, and its cache line wraps where the README's does); tmp_path when base is too long."""
    length = len("/root/.cache/huggingface/hub") - len(str(base)) - 1
    return base / ("h" * length) if length > 0 else tmp_path


def run_block(block: Block, workdir: Path) -> None:
    if block.language == "python":
        printed = run_python(block.text)
        if block.output is not None:
            assert_shows(block, block.output.text, printed)
        return
    if block.shows_output:
        command, _, shown = block.text.partition("\n")
        ran = run_command(command[2:], workdir)
        assert all(code == 0 for code in ran.codes), f"{block.name}: `{command[2:]}` exited {ran.codes}\n{ran.stderr}"
        assert_shows(block, shown, ran.stdout)
        return
    for command in commands(block):
        ran = run_command(command, workdir)
        assert all(code == 0 for code in ran.codes), f"{block.name}: `{command}` exited {ran.codes}\n{ran.stderr}"


@pytest.mark.parametrize("block", CHECKED, ids=[block.name for block in CHECKED])
def test_readme_block(block, workdir, environment, monkeypatch):
    reason = block.mark("not checked")
    if reason is not None:
        pytest.skip(f"{block.name}: not checked: {reason}")
    monkeypatch.chdir(workdir)
    run_block(block, workdir)


def test_the_marks_are_few_and_give_reasons():
    """`not checked` is the exception: each says why, and most blocks with commands are run."""
    skipped = [block for block in CHECKED if block.mark("not checked") is not None]
    assert all(block.mark("not checked") for block in skipped), "a `not checked` mark without a reason"
    assert len(skipped) <= len(CHECKED) // 3, [block.name for block in skipped]


def test_ci_runs_the_readme_test_command():
    """.ci/run's last command is the quickstart's test command, word for word."""
    quickstart = README.read_text(encoding="utf-8").split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    test_command = [block for block in read_blocks(quickstart) if block.language == "bash"][1].text.strip()
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").rstrip().split("\n")
    assert ci[-1] == test_command


def test_long_numbers_match_within_round_off_and_no_further():
    """A 7-digit number may differ in its last place (1e-6 relative), not in an earlier one."""
    block = Block(line=0, language="", text="")
    assert_shows(block, "w 0.1411008 x 6.021477222442627", "w 0.1411009 x 6.021477699279785")
    for printed in ("w 0.1412008 x 6.021477222442627", "w 0.1411008 x 6.021487222442627", "w 0.14 x 6.0"):
        with pytest.raises(pytest.fail.Exception):
            assert_shows(block, "w 0.1411008 x 6.021477222442627", printed)
    with pytest.raises(pytest.fail.Exception):  # fewer digits are shown as they are printed
        assert_shows(block, "w 0.141101", "w 0.141102")


def test_every_page_under_docs_is_read():
    """A page under docs/ runs like the README: its blocks are tests named by the page and line."""
    pages = {block.page for block in BLOCKS}
    with_blocks = {
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "docs").rglob("*.md")
        if "\n```" in "\n" + path.read_text(encoding="utf-8")
    }
    assert with_blocks <= pages and "README.md" in pages
    page = "Intro.\n\n<!-- varies: /x -->\n```\n$ attn --version\n```\n"
    (block,) = read_blocks(page, "docs/commands/x.md")
    assert (block.name, block.shows_output, block.mark("varies")) == ("docs/commands/x.md:4", True, "/x")
