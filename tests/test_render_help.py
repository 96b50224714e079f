"""What a newcomer reads first: the help text, as Rich renders it, and the toy's heatmap titles."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from attn_cli.cli import app

runner = CliRunner()


@pytest.fixture(autouse=True)
def wide(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def help_of(*command: str) -> str:
    result = runner.invoke(app, [*command, "--help"])
    assert result.exit_code == 0, result.output
    return re.sub(r"\s+", " ", result.stdout.replace("│", " "))


@pytest.mark.parametrize("command", ["inspect", "compare", "steps"])
def test_bracketed_words_survive_rich_markup_and_flags_have_no_bool_type(command):
    text = help_of(command)
    assert "<bool>" not in text
    if command != "steps":
        assert "needs the [big] extra" in text


COMMANDS = ["inspect", "explore", "heads", "diagnose", "compare", "steps", "rollout", "diff", "generate", "models"]


@pytest.mark.parametrize(
    "command, usage",
    [
        ("inspect", "[TEXT]..."),
        ("heads", "[TEXT]..."),
        ("explore", "[TEXT]"),
        ("diff", "TEXT [TEXT_B]"),
        ("generate", "PROMPT"),
    ],
)
def test_the_usage_line_reads_text_then_more_texts(command, usage):
    text = help_of(command)
    assert f"Usage: attn {command} [OPTIONS] {usage} " in text
    assert "{" not in text.split("Usage:")[1].split("[OPTIONS]")[1][:20] and "[[" not in text


@pytest.mark.parametrize("command", COMMANDS)
def test_every_value_is_an_upper_case_word_never_a_type(command):
    """--layer LAYER, --limit N, --output FILE, KEY=VALUE, DTYPE: one style, not <str>, <list[str]>, <int>."""
    import typer

    raw = runner.invoke(app, [command, "--help"]).stdout
    assert not re.search(r"<[a-z ]+[\[|>]", raw), re.findall(r"<[a-z ]+[\[|>][^>]*>?", raw)  # <str>, <list[str]>, <a|b>
    click_command = typer.main.get_command(app).commands[command]
    for option in click_command.params:
        if isinstance(option, typer.core.TyperOption) and not option.is_flag:
            assert re.fullmatch(r"[A-Z][A-Z_]*(=[A-Z]+)?", option.metavar or ""), (option.opts, option.metavar)


def test_the_toy_bilinear_heatmap_is_not_titled_with_a_scale():
    result = runner.invoke(
        app,
        [
            "inspect",
            "I love you",
            "--model",
            "toy",
            "-O",
            "scoring=bilinear",
            "--head",
            "0",
            "--show",
            "weights,scores",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "weights = softmax(score(q, k))" in result.stdout
    assert "scores = score(q, k)" in result.stdout
    assert "q·kᵀ·1)" not in result.stdout


def test_save_names_the_formats_it_writes(tmp_path):
    result = runner.invoke(app, ["inspect", "Hello", "--save", str(tmp_path / "figure.jpg")])
    assert result.exit_code == 2
    assert "use FILE.png" in result.stderr
