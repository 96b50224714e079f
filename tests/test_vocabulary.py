"""One vocabulary (docs/vocabulary.md): every command and sub-command walked, each option name and short
flag with one meaning; the old spellings still work for one release with a note; several words follow one
rule; every --save is written."""

from __future__ import annotations

import json
import re
import warnings
from collections import defaultdict
from pathlib import Path

import pytest
import typer
from conftest import isolate
from typer.testing import CliRunner

from attn_cli.cli import app

VOCABULARY = Path(__file__).resolve().parents[1] / "docs" / "vocabulary.md"
LOADING = "every command that loads a model"
# Two names a plural apart that are two concepts: generate's --sample (draw instead of the likeliest token) and
# heads' --samples N (texts stored per decile).
PLURAL_BUT_NOT_THE_SAME = ("--samples",)


@pytest.fixture(autouse=True)
def isolated_env(monkeypatch):
    isolate(monkeypatch, 100)
    monkeypatch.setenv("NO_COLOR", "1")


def attn(*args):
    return CliRunner().invoke(app, [str(arg) for arg in args], catch_exceptions=False)


def at_the_edge(monkeypatch, *args) -> tuple[int, str]:
    """`attn ARGS` through the console script's edge (one line per error): (exit code, stderr)."""
    from attn_cli.cli.edge import run_at_the_edge

    monkeypatch.setattr("sys.argv", ["attn", *args])
    with CliRunner().isolation() as (_, err, _):
        with pytest.raises(SystemExit) as exit_:
            run_at_the_edge(app)
        return exit_.value.code, err.getvalue().decode()


def commands():
    """(name, command) for every command and sub-command of the app (`heads show` included)."""

    def walk(command, path):
        inner = getattr(command, "command", command)  # heads: a command on texts with sub-commands
        if path:
            yield path, inner
        for name, sub in getattr(command, "commands", {}).items():
            yield from walk(sub, f"{path} {name}".strip())

    return list(walk(typer.main.get_command(app), ""))


def visible_options(command):
    return [
        param
        for param in command.params
        if isinstance(param, typer.core.TyperOption) and not param.hidden and "--help" not in param.opts
    ]


def readme_table() -> dict[str, tuple[str, set[str]]]:
    """docs/vocabulary.md's table: option → (short flag or '', the commands that have it)."""
    section = VOCABULARY.read_text(encoding="utf-8")
    table = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]]
        if len(cells) == 4 and cells[0].startswith("`--"):
            table[cells[0].strip("`")] = (cells[1].strip("`"), {name.strip() for name in cells[3].split(",")})
    return table


def test_the_walk_finds_every_command():
    names = {name for name, _ in commands()}
    assert {"inspect", "heads", "heads show", "rollout", "attribute", "steps", "models"} <= names


def test_a_short_flag_means_one_option_everywhere():
    meanings = defaultdict(set)
    for _name, command in commands():
        for option in visible_options(command):
            longest = max(option.opts, key=len)
            for flag in option.opts + option.secondary_opts:
                if not flag.startswith("--"):
                    meanings[flag].add(longest)
    twice = {flag: names for flag, names in meanings.items() if len(names) > 1}
    assert not twice, f"short flags with several meanings: {twice}"


def test_an_option_has_one_long_spelling():
    """No command shows two spellings of one option (--layer and --layers), and no concept is spelled two ways
    across commands: every long name is in docs/vocabulary.md's table, whose names differ by more than a plural."""
    for name, command in commands():
        for option in visible_options(command):
            longs = [flag for flag in option.opts if flag.startswith("--")]
            assert len(longs) == 1, (name, option.opts)
    names = set(readme_table()) - set(PLURAL_BUT_NOT_THE_SAME)
    spellings = {flag.removesuffix("s") for flag in names}
    assert len(spellings) == len(names), "two options differ only by a plural"


def test_every_help_follows_the_readme_table():
    table = readme_table()
    loaders = {name for name, command in commands() if any(o.name == "model" for o in command.params)}
    seen = defaultdict(set)
    for name, command in commands():
        help_text = attn(*name.split(), "--help").stdout
        for option in visible_options(command):
            long = next(flag for flag in option.opts if flag.startswith("--"))
            short = next((flag for flag in option.opts if not flag.startswith("--")), "")
            assert long in table, f"attn {name} {long} is not in docs/vocabulary.md's table"
            assert table[long][0] == short, (
                f"attn {name} {long}: short flag {short!r}, docs/vocabulary.md {table[long][0]!r}"
            )
            assert long in help_text, f"attn {name} --help does not show {long}"
            seen[long].add(name)
    for long, (_, listed) in table.items():
        expected = loaders if listed == {LOADING} else listed
        assert seen[long] == expected, (
            f"{long}: docs/vocabulary.md lists {sorted(expected)}, the commands have {sorted(seen[long])}"
        )


# -- the old spellings, one release more ------------------------------------------------------------------


@pytest.mark.parametrize(
    "old, new, note",
    [
        (["rollout", "a b c", "--layers", "0"], ["rollout", "a b c", "--layer", "0"], "--layers"),
        (["rollout", "a b c", "--layers=0"], ["rollout", "a b c", "--layer", "0"], "--layers"),
        (["inspect", "a b c", "--shared-k"], ["inspect", "a b c", "--variant", "shared-k"], "--shared-k"),
        (["inspect", "a b c", "--no-scale"], ["inspect", "a b c", "--variant", "no-scale"], "--no-scale"),
        (["inspect", "a b c", "--scoring", "cosine"], ["inspect", "a b c", "--variant", "scoring=cosine"], "--scoring"),
    ],
)
def test_an_old_spelling_still_works_with_a_note(old, new, note):
    before = attn(*old, "--model", "toy", "--json")
    after = attn(*new, "--model", "toy", "--json")
    assert before.exit_code == after.exit_code == 0, before.stderr
    assert json.loads(before.stdout) == json.loads(after.stdout)
    lines = before.stderr.strip().splitlines()
    assert len(lines) == 1 and note in lines[0] and "deprecated" in lines[0], before.stderr
    assert "deprecated" not in after.stderr


def test_old_spellings_are_hidden_from_help():
    assert "--layers" not in attn("rollout", "--help").stdout
    assert "--shared-k" not in attn("inspect", "--help").stdout
    assert "--max-new-tokens" in attn("generate", "--help").stdout
    assert not re.search(r"-n\s+N\s+Stop", attn("generate", "--help").stdout)


def test_an_option_value_is_never_read_as_an_old_spelling():
    """`--target --layers` passes '--layers' as the target's text, not as rollout's old option."""
    from attn_cli.cli.vocabulary import rewrite_deprecated

    notes = []
    args = ["x", "--stack", "--layers", "--", "--layers"]
    assert rewrite_deprecated("rollout", args, {"--stack"}, notes.append) == args
    assert notes == []
    assert rewrite_deprecated("generate", ["p", "-n5"], set(), notes.append) == ["p", "--max-new-tokens", "5"]


def test_the_api_takes_the_command_line_words(recwarn):
    import attn_cli

    model = attn_cli.load("toy")
    new = model.inspect("a b c", include=["qkv"], measure="norm")
    with pytest.warns(DeprecationWarning, match='measure="norm"'):
        old = model.inspect("a b c", norms=True, vectors=True)
    assert json.dumps(new.to_json_dict()) == json.dumps(old.to_json_dict())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.inspect("a b c", measure="norm")  # the new words warn about nothing
    from attn_cli.plumbing.errors import BadInput

    with pytest.raises(BadInput, match="not a measure"):
        model.inspect("a b c", measure="norms")


# -- several words, one rule ------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["rollout", "attribute", "compare", "steps", "generate"])
def test_a_one_text_command_says_how_to_quote_several_words(command, monkeypatch):
    code, stderr = at_the_edge(monkeypatch, command, "The", "cat", "sat", "--model", "toy")
    assert code == 2
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert f"attn {command} takes one TEXT, not 3" in lines[0] and f'attn {command} "The cat sat"' in lines[0]


def test_a_batch_command_notes_an_unquoted_sentence():
    result = attn("inspect", "The", "cat", "sat", "--model", "toy", "--json")
    assert result.exit_code == 0
    assert len(json.loads(result.stdout)["sequences"]) == 3  # still three texts, as the command documents
    assert 'note: 3 one-word texts run as 3 separate texts; for one sentence, quote it: attn inspect "The cat sat"' in (
        result.stderr
    )
    quiet = attn("inspect", "The cat sat", "a dog", "--model", "toy", "--json")
    assert quiet.exit_code == 0 and "one-word" not in quiet.stderr


def test_diff_says_how_to_quote_instead_of_a_note(monkeypatch):
    code, stderr = at_the_edge(monkeypatch, "diff", "The", "cat", "sat", "--model", "toy")
    assert code == 2 and stderr.count("\n") == 1, stderr
    assert "diff takes two texts, not 3; quote each text" in stderr


def test_an_optional_text_reads_as_one_in_the_usage_line():
    usage = attn("rollout", "--help").stdout
    assert "attn rollout [OPTIONS] [TEXT] " in usage and "[[TEXT]]" not in usage


# -- every --save ----------------------------------------------------------------------------------------


def test_every_save_is_written_from_one_run(tmp_path, monkeypatch):
    import attn_cli.api

    loads = []
    real = attn_cli.api.load
    monkeypatch.setattr(attn_cli.api, "load", lambda *a, **k: loads.append(a) or real(*a, **k))
    svg, page = tmp_path / "r1.svg", tmp_path / "r2.html"
    result = attn("inspect", "a b", "--model", "toy", "--save", svg, "--save", page)
    assert result.exit_code == 0, result.stderr
    assert svg.read_bytes().startswith(b"<svg") or b"<svg" in svg.read_bytes()[:400]
    assert b"<html" in page.read_bytes()[:400].lower()
    assert f"saved {svg}" in result.stderr and f"saved {page}" in result.stderr
    assert len(loads) == 1


@pytest.mark.parametrize("command", ["rollout", "steps", "compare"])
def test_every_save_in_other_commands(tmp_path, command):
    files = [tmp_path / f"{command}.svg", tmp_path / f"{command}.html"]
    result = attn(command, "a b c", "--model", "toy", *(arg for path in files for arg in ("--save", path)))
    assert result.exit_code == 0, result.stderr
    assert all(path.stat().st_size > 0 for path in files)


def test_dpi_sets_the_png_among_several_figures(tmp_path):
    from attn_cli.cli.common import check_outputs
    from attn_cli.plumbing.errors import BadInput

    png, svg = tmp_path / "a.png", tmp_path / "a.svg"
    try:
        check_outputs([svg, png], False, None, 300)  # the PNG takes --dpi; the SVG is vector
    except BadInput as error:
        assert "figures" in error.message, error.message  # no cairosvg here: the PNG cannot be drawn
    with pytest.raises(BadInput, match="is vector"):
        check_outputs([svg], False, None, 300)


def test_a_bad_save_among_several_fails_before_the_run(tmp_path):
    result = attn("inspect", "a b", "--model", "toy", "--save", tmp_path / "ok.svg", "--save", tmp_path / "x.jpg")
    assert result.exit_code == 2 and "x.jpg" in result.stderr
    assert not (tmp_path / "ok.svg").exists()
