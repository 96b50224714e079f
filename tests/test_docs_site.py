"""The documentation site (mkdocs.yml, docs/): it builds with --strict, and every command has its page.

--strict turns mkdocs's warnings into a failed build: a link to a page or picture that is not there, a page
under docs/ left out of the nav, a docstring of the API reference that mkdocstrings cannot read. The pages'
examples are run by tests/test_readme.py.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

from conftest import missing_tool, patience

ROOT = Path(__file__).resolve().parents[1]


def test_the_site_builds_strictly(tmp_path):
    for module in ("mkdocs", "material", "mkdocstrings"):
        if importlib.util.find_spec(module) is None:
            missing_tool(f"{module} is not installed (pip install -e '.[docs]')")
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"), "-d", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=patience(300),
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert built.returncode == 0, built.stderr[-4000:]
    assert (tmp_path / "commands" / "inspect" / "index.html").is_file()
    reference = (tmp_path / "reference" / "index.html").read_text(encoding="utf-8")
    assert 'id="attn_cli.api.Model.inspect"' in reference  # the API reference was read from the docstrings


def test_every_command_page_is_in_the_nav_and_the_readme_table():
    """A page under docs/commands/ is reachable: from the site's nav and from the README's command table."""
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    table = (ROOT / "README.md").read_text(encoding="utf-8").split("## Commands", 1)[1].split("\n## ", 1)[0]
    pages = sorted(path.stem for path in (ROOT / "docs" / "commands").glob("*.md"))
    assert "inspect" in pages
    for page in pages:
        assert re.search(rf":\s*commands/{page}\.md\s*$", nav, re.MULTILINE), (
            f"docs/commands/{page}.md is not in the nav"
        )
        assert f"(docs/commands/{page}.md)" in table, f"docs/commands/{page}.md is not in README's command table"


def test_attn_docs_shows_a_commands_page_in_the_terminal_and_each_help_points_to_it(tmp_path):
    """attn docs: the list of pages with their first sentence, a page drawn without the suite's HTML marks, its
    path, and one line for a command with no page; every command with a page says `Docs: attn docs NAME` in
    its --help. In a wheel the pages are attn_cli/_docs/commands (pyproject's force-include)."""
    from typer.testing import CliRunner

    from attn_cli.cli import app
    from attn_cli.plumbing.config import docs_dir

    runner = CliRunner()
    listed = runner.invoke(app, ["docs"], env={"COLUMNS": "120", "NO_COLOR": "1"})
    assert listed.exit_code == 0
    assert "kv          How much KV cache does each head need" in listed.stdout
    pages = sorted(path.stem for path in (ROOT / "docs" / "commands").glob("*.md"))
    assert all(f"\n {page} " in listed.stdout for page in pages)
    shown = runner.invoke(app, ["docs", "kv"], env={"COLUMNS": "100", "NO_COLOR": "1"})
    assert shown.exit_code == 0 and "attn kv" in shown.stdout and "What it measures" in shown.stdout
    assert "<!--" not in shown.stdout
    path = runner.invoke(app, ["docs", "kv", "--path"])
    assert path.stdout.strip() == str(ROOT / "docs" / "commands" / "kv.md")
    missing = runner.invoke(app, ["docs", "nope"])
    assert missing.exit_code == 2 and "no page for 'nope'; pages: ablate," in missing.output
    for page in pages:
        helped = runner.invoke(app, [page, "--help"], env={"COLUMNS": "200", "NO_COLOR": "1"})
        assert f"Docs: attn docs {page}" in helped.stdout, page
    (tmp_path / "_docs" / "commands").mkdir(parents=True)
    assert docs_dir(tmp_path) == tmp_path / "_docs" and docs_dir(ROOT / "attn_cli") == ROOT / "docs"
    assert '"docs/commands" = "attn_cli/_docs/commands"' in (ROOT / "pyproject.toml").read_text()


def test_the_gallerys_pictures_are_what_its_script_makes_now(tmp_path):
    """docs/gallery/make.py remade into a temporary folder equals the committed pictures byte for byte, and
    docs/gallery.md shows every one of them: a change that alters a picture fails here until the script is
    run again and its pictures committed."""
    spec = importlib.util.spec_from_file_location("gallery_make", ROOT / "docs" / "gallery" / "make.py")
    assert spec is not None and spec.loader is not None
    make = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make)
    page = (ROOT / "docs" / "gallery.md").read_text()
    stale = []
    for path in make.make(tmp_path):
        committed = ROOT / "docs" / "gallery" / path.name
        assert f"(gallery/{path.name})" in page, f"docs/gallery.md does not show {path.name}"
        if not committed.is_file() or committed.read_bytes() != path.read_bytes():
            stale.append(path.name)
    assert not stale, f"stale: {', '.join(stale)}; run `python docs/gallery/make.py` and commit what it writes"


def test_attn_docs_list_fits_the_terminal_and_a_mistyped_page_gets_the_nearest_names():
    """Each page is one row as wide as the terminal allows: its first sentence whole, or cut where the terminal
    ends with a visible `…` (at 120 columns more shows than at 80), as plain text (a link's words, no `**`, and
    "Gu et al. 2024" does not end a sentence). A mistyped name is bad usage (exit 2) naming the nearest pages."""
    from typer.testing import CliRunner

    from attn_cli.cli import app
    from attn_cli.cli.docs import _summary, command_pages

    runner = CliRunner()
    pages = command_pages()
    shown: dict[int, dict[str, str]] = {}
    for columns in (80, 120):
        listed = runner.invoke(app, ["docs"], env={"COLUMNS": str(columns), "NO_COLOR": "1"})
        assert listed.exit_code == 0
        lines = listed.stdout.splitlines()
        assert len(lines) == 2 + len(pages)  # the title, the header, one line a page
        assert all(len(line.rstrip()) <= columns for line in lines)
        rows = {line.split()[0]: line.split(None, 1)[1].rstrip() for line in lines[2:]}
        assert list(rows) == list(pages)
        for name, described in rows.items():
            whole = _summary(pages[name])
            assert described == whole or (described.endswith("…") and whole.startswith(described[:-1])), name
        shown[columns] = rows
    assert len(shown[120]["kv"]) > len(shown[80]["kv"]) + 30  # the wider terminal shows more of the sentence
    assert _summary(pages["explore"]).startswith("Every head of a model") and "(built with Textual):" in _summary(
        pages["explore"]
    )
    diagnose = _summary(pages["diagnose"])
    assert "the attention sink rate (Gu et al. 2024," in diagnose and "**" not in diagnose
    mistyped = runner.invoke(app, ["docs", "heds"])
    assert mistyped.exit_code == 2
    assert mistyped.output.strip() == "error: no page for 'heds'; did you mean 'heads'?"
