"""The `attn` command line, end to end: CliRunner in-process, plus a few real subprocesses.

What is checked is the user-visible contract: the JSON document
(schema_version 1), the terminal view, exit codes 0/1/2 with one `error:` line
on stderr and never a traceback, literal token text, stdin, pipes and NO_COLOR.

Typer 0.29 (its vendored Click) keeps the streams apart in CliRunner:
`result.stdout` is stdout only, `result.stderr` is stderr only and
`result.output` is both interleaved, as a user would see them. JSON is parsed
from `result.stdout`; "no traceback" is checked on `result.output`.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import isolate, patience
from typer.testing import CliRunner

from attn_cli.cli import app

runner = CliRunner()

SENTENCE = "Hello, how are you?"
SENTENCE_TOKENS = ["[CLS]", "hello", ",", "how", "are", "you", "?", "[SEP]"]
HEAD_KEYS = {"head", "kv_head", "scale", "scores", "weights", "symmetry", "entropy", "self_weight", "top"}


@pytest.fixture(autouse=True)
def isolated_env(monkeypatch):
    isolate(monkeypatch, 120)


def attn(*args: str, input: str | None = None, ok: bool = True):
    """Invoke `attn ARGS` in-process. ok=True lets an unexpected exception propagate with its traceback."""
    return runner.invoke(app, list(args), input=input, catch_exceptions=not ok)


def succeeded(result) -> None:
    assert result.exit_code == 0, f"exit {result.exit_code}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"


def parse_json(text: str) -> dict:
    """Strict JSON: NaN / Infinity / -Infinity are rejected, not turned into floats."""

    def reject(constant: str):
        raise AssertionError(f"non-standard JSON constant {constant} in the document")

    return json.loads(text, parse_constant=reject)


def assert_user_error(result, exit_code: int, *fragments: str) -> str:
    """Exit code, exactly one `error: ...` line on stderr, nothing on stdout, no traceback. Returns the line."""
    assert result.exit_code == exit_code, f"exit {result.exit_code}\nstderr:\n{result.stderr}"
    # A SystemExit is how the CLI ends; any other exception escaped the error handling.
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}:\n{result.stderr}"
    assert lines[0].startswith("error: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], f"{fragment!r} not in {lines[0]!r}"
    return lines[0]


def subprocess_env() -> dict[str, str]:
    """The (already isolated) test environment, for child processes."""
    return dict(os.environ)


def console_script() -> Path:
    """The installed `attn` entry point next to this interpreter."""
    script = Path(sys.executable).parent / ("attn.exe" if os.name == "nt" else "attn")
    if not script.exists():
        pytest.skip(f"no console script at {script} (package not installed into this environment)")
    return script


# --- JSON ------------------------------------------------------------------------------------------


def test_json_document_contract():
    result = attn("inspect", SENTENCE, "--json")
    succeeded(result)
    assert "NaN" not in result.stdout and "Infinity" not in result.stdout
    assert "\x1b[" not in result.stdout
    document = parse_json(result.stdout)  # one document: json.loads rejects trailing data

    assert document["schema_version"] == 1
    assert document["command"] == "inspect"
    assert document["text"] == SENTENCE
    assert {"tokens", "model", "device", "dtype", "layers"} <= document.keys()
    model = document["model"]
    assert {"name", "architecture", "layers", "heads", "kv_heads", "head_dim", "causal"} <= model.keys()
    assert (model["layers"], model["heads"], model["head_dim"], model["causal"]) == (6, 12, 32, False)
    assert document["device"] == "cpu" and document["dtype"] == "float32"

    tokens = document["tokens"]
    assert [token["text"] for token in tokens] == SENTENCE_TOKENS
    assert [token["index"] for token in tokens] == list(range(len(SENTENCE_TOKENS)))
    assert [token["special"] for token in tokens] == [True] + [False] * 6 + [True]

    size = len(tokens)
    assert [layer["layer"] for layer in document["layers"]] == list(range(6))
    for layer in document["layers"]:
        assert [head["head"] for head in layer["heads"]] == list(range(12))
        for head in layer["heads"]:
            assert HEAD_KEYS <= head.keys()
            assert not {"q", "k", "v", "output"} & head.keys()  # only with --include qkv
            assert head["kv_head"] == head["head"]  # no grouped-query attention in BERT
            assert head["scale"] == pytest.approx(32**-0.5, rel=1e-6)
            assert set(head["symmetry"]) == {"max_abs_diff", "relative", "symmetric"}
            assert isinstance(head["symmetry"]["symmetric"], bool)
            assert len(head["scores"]) == size and all(len(row) == size for row in head["scores"])
            assert len(head["weights"]) == size
            for row in head["weights"]:
                assert len(row) == size
                assert math.fsum(row) == pytest.approx(1.0, abs=1e-5)
            assert len(head["entropy"]) == size and len(head["self_weight"]) == size
            assert head["self_weight"] == [head["weights"][i][i] for i in range(size)]
            assert len(head["top"]) == size
            for row in head["top"]:
                assert len(row) == 3  # the configured default --top-k
                assert all(SENTENCE_TOKENS[key["index"]] == key["token"] for key in row)
                assert [key["weight"] for key in row] == sorted((key["weight"] for key in row), reverse=True)


def test_json_selection_qkv_and_top_k():
    result = attn("inspect", SENTENCE, "--layer", "2", "--head", "1-3", "--include", "qkv", "--top-k", "2", "--json")
    succeeded(result)
    document = parse_json(result.stdout)
    size = len(document["tokens"])
    assert [layer["layer"] for layer in document["layers"]] == [2]
    heads = document["layers"][0]["heads"]
    assert [head["head"] for head in heads] == [1, 2, 3]
    for head in heads:
        for name in ("q", "k", "v", "output"):
            matrix = head[name]
            assert len(matrix) == size and all(len(row) == 32 for row in matrix), name
        assert all(len(row) == 2 for row in head["top"])


def test_output_file_gets_the_json_and_stdout_stays_clean(tmp_path):
    target = tmp_path / "report.json"
    result = attn("inspect", "Hello", "--layer", "0", "--head", "0", "-o", str(target))
    succeeded(result)
    assert result.stdout == ""  # -o implies --json, and the document goes only to the file
    document = parse_json(target.read_text(encoding="utf-8"))
    assert document["schema_version"] == 1
    assert [token["text"] for token in document["tokens"]] == ["[CLS]", "hello", "[SEP]"]


def test_stdin_dash_reads_the_text():
    result = attn("inspect", "-", "--json", "--layer", "0", "--head", "0", input="Hello\n")
    succeeded(result)
    document = parse_json(result.stdout)
    assert document["text"] == "Hello"
    assert [token["text"] for token in document["tokens"]] == ["[CLS]", "hello", "[SEP]"]


# --- terminal view ---------------------------------------------------------------------------------


def test_terminal_default_view():
    result = attn("inspect", SENTENCE)
    succeeded(result)
    assert "hello" in result.stdout
    assert "Symmetry" in result.stdout
    assert "In detail: layer" in result.stdout  # the overview picks one head to show in detail


def test_terminal_every_panel_for_one_head():
    result = attn("inspect", "Hello", "--layer", "0", "--head", "2", "--show", "weights,scores,q,k,v,symmetry,top")
    succeeded(result)
    assert "layer 0 · head 2" in result.stdout
    for title in ("weights = softmax", "scores = q·kᵀ", "Symmetry", "most-attended keys"):
        assert title in result.stdout


def test_terminal_qkv_panels_show_vectors_when_asked_for():
    result = attn("inspect", "Hello", "--layer", "0", "--head", "2", "--show", "q,k,v")
    succeeded(result)
    assert "not captured" not in result.stdout
    for name in ("Q", "K", "V"):
        assert f"layer 0 · head 2 (kv head 2) · {name}" in result.stdout


def test_terminal_vector_table_numbers_are_not_clipped():
    result = attn("inspect", "Hello", "--layer", "0", "--head", "2", "--show", "q", "--include", "qkv")
    succeeded(result)
    rows = [
        line for line in result.stdout.splitlines() if re.match(r"^\s*\d \[CLS\]|^\s*\d hello|^\s*\d \[SEP\]", line)
    ]
    assert len(rows) == 3, result.stdout
    for row in rows:
        assert "…" not in row, row


@pytest.mark.parametrize("suffix, marker", [(".svg", "<svg"), (".html", "<html")])
def test_save_writes_a_figure_and_still_prints_the_view(tmp_path, suffix, marker):
    target = tmp_path / f"out{suffix}"
    result = attn("inspect", "Hello", "--layer", "0", "--head", "0", "--save", str(target))
    succeeded(result)
    assert "hello" in result.stdout  # the terminal view is still printed
    content = target.read_text(encoding="utf-8")
    assert marker in content.lower()
    assert "hello" in content


def test_rich_markup_in_the_text_is_shown_literally():
    result = attn("inspect", "[bold]hi[/bold] [red]x")
    succeeded(result)
    # BERT splits it into "[", "bold", "]", ...; the header lists them as index:token.
    assert re.search(r"\d+:\[\s+\d+:bold\s+\d+:\]", result.stdout), result.stdout
    assert re.search(r"\d+:\[\s+\d+:/\s+\d+:bold\s+\d+:\]", result.stdout), result.stdout
    assert "red" in result.stdout


def test_control_characters_in_the_text_never_reach_the_terminal():
    # BERT's normalizer already drops the ESC byte itself; this checks the whole path end to end.
    result = attn("inspect", "a\x1b[31mb", "--layer", "0", "--head", "0")
    succeeded(result)
    assert "\x1b[31m" not in result.output
    assert "\x1b" not in result.stdout  # CliRunner's stdout is not a terminal: no escapes at all


SGR = re.compile(r"\x1b\[([0-9;]*)m")


def colour_codes(text: str) -> set[str]:
    """SGR parameters that set a colour (30-49 incl. 38/48 extended, 90-107); bold/dim/italic are not colour."""
    found = set()
    for params in SGR.findall(text):
        for param in params.split(";"):
            if param and (30 <= int(param) <= 49 or 90 <= int(param) <= 107):
                found.add(params)
                break
    return found


def test_no_color_means_no_colour_on_a_terminal(monkeypatch):
    # CliRunner's stdout is not a TTY, so Rich would emit no escapes at all; TTY_COMPATIBLE=1 makes it
    # behave like a terminal. no-color.org (and Rich) forbid colour only: bold/dim/italic SGR codes remain,
    # so the assertion is "no colour codes", not "no ESC[ at all".
    monkeypatch.setenv("TTY_COMPATIBLE", "1")
    coloured = attn("inspect", "Hello", "--layer", "0", "--head", "0")
    succeeded(coloured)
    assert colour_codes(coloured.stdout), "the terminal-like run should be coloured, else this test proves nothing"

    monkeypatch.setenv("NO_COLOR", "1")
    plain = attn("inspect", "Hello", "--layer", "0", "--head", "0")
    succeeded(plain)
    assert "hello" in plain.stdout
    assert colour_codes(plain.stdout) == set()
    assert not re.search(r"\x1b(?!\[[0-9;]*m)", plain.stdout)  # nothing but plain SGR attributes


def test_output_file_name_with_markup_is_shown_literally(tmp_path):
    (tmp_path / "[").mkdir()
    target = tmp_path / "[" / "bold]x.json"  # the path text contains "[/bold]"
    result = attn("inspect", "Hello", "--layer", "0", "--head", "0", "-o", str(target))
    assert "Traceback" not in result.output
    assert result.exception is None, repr(result.exception)
    assert result.exit_code == 0
    assert target.exists()
    assert str(target) in result.stderr


# --- bad usage: exit 2 -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, stdin, fragments",
    [
        pytest.param(["", "--json"], None, ["empty"], id="empty-text"),
        pytest.param(["   ", "--json"], None, ["empty"], id="blank-text"),
        pytest.param(["-", "--json"], "", ["empty"], id="empty-stdin"),
        pytest.param(["Hello", "--layer", "6"], None, ["--layer 6", "0-5"], id="layer-out-of-range"),
        pytest.param(["Hello", "--head", "12"], None, ["--head 12", "0-11"], id="head-out-of-range"),
        pytest.param(["Hello", "--layer", "x"], None, ["--layer", "0-5"], id="layer-not-a-number"),
        pytest.param(["Hello", "--show", "bogus"], None, ["bogus", "weights"], id="unknown-panel"),
        pytest.param(["Hello", "--top-k", "0"], None, ["--top-k"], id="top-k-zero"),
        pytest.param(["Hello", "--device", "bogus"], None, ["bogus", "cpu"], id="unknown-device"),
        pytest.param(["Hello", "--save", "out.txt"], None, ["out.txt", ".svg"], id="save-unknown-format"),
    ],
)
def test_bad_usage_exits_2_with_one_line(args, stdin, fragments):
    result = attn("inspect", *args, input=stdin, ok=False)
    assert_user_error(result, 2, *fragments)


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["inspect", "Hello", "--nope"], "No such option: --nope"),
        (["diff"], "Missing argument 'TEXT"),
        (["inspect"], "no text given"),  # TEXT is optional since --image: attn's own one line
        (["compare", "Hello", "--dtype", "float8"], "float8"),
    ],
)
def test_typer_usage_errors_are_one_line_too(args, fragment):
    """Errors Typer finds itself go through the console script's edge (main), not CliRunner's app."""
    result = subprocess.run(
        [sys.executable, "-m", "attn_cli", *args], capture_output=True, text=True, timeout=patience(60)
    )
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], result.stderr


# --- runtime failures: exit 1 ------------------------------------------------------------------------


def test_cuda_unavailable_exits_1():
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    assert_user_error(attn("inspect", "Hello", "--device", "cuda", ok=False), 1, "cuda", "--device cpu")


def test_missing_model_directory_exits_1():
    assert_user_error(attn("inspect", "Hello", "--model", "/nonexistent/dir", ok=False), 1, "/nonexistent/dir")


def test_uncached_hub_id_offline_exits_1():
    line = assert_user_error(
        attn("inspect", "Hello", "--model", "org/not-cached-model", ok=False), 1, "org/not-cached-model"
    )
    assert "cache" in line.lower()


@pytest.fixture(scope="module")
def pickle_model_dir(tiny_bert_dir, tmp_path_factory):
    """conftest's tiny BERT, but with only a pickle checkpoint: transformers 5 save_pretrained ignores
    safe_serialization=False and always writes model.safetensors, so the state dict is torch.save'd here."""
    import torch
    from safetensors.torch import load_file

    directory = tmp_path_factory.mktemp("pickle-bert")
    for path in tiny_bert_dir.iterdir():
        if path.suffix != ".safetensors":
            shutil.copy(path, directory / path.name)
    torch.save(load_file(tiny_bert_dir / "model.safetensors"), directory / "pytorch_model.bin")
    assert not list(directory.glob("*.safetensors"))
    return directory


def test_pickle_checkpoint_is_refused_by_default(pickle_model_dir):
    line = assert_user_error(
        attn("inspect", "Hello", "--model", str(pickle_model_dir), ok=False), 1, "pytorch_model.bin", "--allow-pickle"
    )
    assert "pickle" in line


def test_pickle_checkpoint_loads_with_allow_pickle(pickle_model_dir):
    result = attn("inspect", "Hello", "--model", str(pickle_model_dir), "--allow-pickle", "--json")
    succeeded(result)
    document = parse_json(result.stdout)
    assert (document["model"]["layers"], document["model"]["heads"]) == (2, 4)
    assert [token["text"] for token in document["tokens"]] == ["[CLS]", "hello", "[SEP]"]


def test_tokenizer_vocab_larger_than_the_model_is_a_clean_error(tmp_path, tiny_bert_dir):
    from transformers import BertConfig, BertModel

    config = BertConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64
    )
    BertModel(config).save_pretrained(tmp_path)
    for path in tiny_bert_dir.iterdir():  # the real BERT tokenizer (ids up to 30521)
        if path.suffix != ".safetensors" and path.name != "config.json":
            shutil.copy(path, tmp_path / path.name)
    result = attn("inspect", "Hello", "--model", str(tmp_path), ok=False)
    assert_user_error(result, 1)


LONG_TEXT = " ".join(["word"] * 600)  # 602 tokens with [CLS] and [SEP]; MiniLM has 512 positions


def test_too_long_text_exits_1_and_suggests_truncate():
    line = assert_user_error(
        attn("inspect", LONG_TEXT, "--layer", "0", "--head", "0", ok=False), 1, "positions", "--truncate"
    )
    assert "602" in line and "512" in line
    among = assert_user_error(attn("heads", "A short one.", LONG_TEXT, "--layer", "0", ok=False), 1, "positions")
    assert f"the text {' '.join(LONG_TEXT.split()[:6])!r}"[:-1] in among  # which text of several: its first words


def test_truncate_keeps_the_first_512_tokens():
    result = attn("inspect", LONG_TEXT, "--layer", "0", "--head", "0", "--truncate", "--json")
    succeeded(result)
    document = parse_json(result.stdout)
    assert len(document["tokens"]) == 512
    assert document["truncated_from"] == 602
    assert document["tokens"][-1]["text"] == "[SEP]"
    assert "truncated" in result.stderr  # the warning goes to stderr, the document stays clean


# --- real processes ----------------------------------------------------------------------------------


def test_importing_the_cli_does_not_import_torch():
    code = (
        "import sys, attn_cli.cli; "
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules, "
        "sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers'))[:5]"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=subprocess_env(), timeout=patience(60)
    )
    assert completed.returncode == 0, completed.stderr


@pytest.mark.parametrize("how", ["console-script", "python-m"])
def test_help(how, tmp_path):
    command = [str(console_script())] if how == "console-script" else [sys.executable, "-m", "attn_cli"]
    completed = subprocess.run(
        [*command, "--help"], capture_output=True, text=True, env=subprocess_env(), cwd=tmp_path, timeout=patience(60)
    )
    assert completed.returncode == 0, completed.stderr
    assert "inspect" in completed.stdout
    assert completed.stderr == ""


def test_pipe_closed_early_exits_0_quietly(tmp_path):
    """`attn inspect SENTENCE --json | head -c 100`: a ~220 kB document into a reader that quits early."""
    attn_script = console_script()
    # Plain sh, no pipefail: attn's own exit status is saved to a file, its stderr to another.
    command = f'{{ "{attn_script}" inspect "{SENTENCE}" --json 2>attn.err; echo $? >attn.rc; }} | head -c 100'
    completed = subprocess.run(
        command, shell=True, capture_output=True, cwd=tmp_path, env=subprocess_env(), timeout=patience(120)
    )
    stderr = (tmp_path / "attn.err").read_text(errors="replace")
    assert completed.returncode == 0
    assert completed.stdout.startswith(b'{"schema_version": 1')
    assert len(completed.stdout) == 100
    assert "Traceback" not in stderr
    assert "BrokenPipeError" not in stderr
    assert "Exception ignored" not in stderr
    assert stderr == ""
    assert (tmp_path / "attn.rc").read_text().strip() == "0"  # README: a closed pipe is success


def test_causal_heatmap_leaves_the_future_blank(tiny_llama_dir):
    result = attn(
        "inspect",
        "the cat sat on the mat",
        "--model",
        str(tiny_llama_dir),
        "--layer",
        "1",
        "--head",
        "5",
        "--show",
        "weights",
    )
    succeeded(result)
    rows = [line.rstrip() for line in result.stdout.splitlines() if re.match(r"^ *\d+ (?!tokens:)\S", line)]
    assert len(rows) == 8  # [CLS] the cat sat on the mat [SEP]
    for index, row in enumerate(rows):  # row i shows i + 1 cells: keys 0..i, nothing after
        cells = row.split()[2:]
        assert len(cells) == index + 1, row


LOADING_FLAGS = {
    "--model",
    "--option",
    "--device",
    "--dtype",
    "--allow-pickle",
    "--revision",
    "--trust-remote-code",
    "--device-map",
}


@pytest.mark.parametrize(
    "command", ["inspect", "explore", "heads", "diagnose", "compare", "rollout", "diff", "generate", "attribute"]
)
def test_every_command_that_loads_a_model_takes_the_same_loading_options(command):
    import typer.main

    click_command = typer.main.get_command(app).commands[command]
    flags = {name for param in click_command.params for name in param.opts}
    assert LOADING_FLAGS <= flags, LOADING_FLAGS - flags
    panel = {param.opts[0]: getattr(param, "rich_help_panel", None) for param in click_command.params}
    assert all(panel[flag] == "Model" for flag in LOADING_FLAGS)  # grouped in --help


def test_no_command_gives_one_flag_to_two_options():
    """attribute once gave -m to both --method and --model: click silently takes the later one."""
    import typer.main

    def commands(group, path=()):
        for name, command in group.commands.items():
            yield (*path, name), command
            if hasattr(command, "commands"):
                yield from commands(command, (*path, name))

    for path, command in commands(typer.main.get_command(app)):
        flags = [name for param in command.params for name in param.opts + param.secondary_opts]
        assert len(flags) == len(set(flags)), (path, sorted({f for f in flags if flags.count(f) > 1}))


@pytest.mark.parametrize("command", [["rollout", "hi"], ["generate", "hi"], ["diff", "a", "b"], ["attribute", "hi"]])
def test_the_loading_flags_reach_the_backend(monkeypatch, command):
    """The flags commands once lacked (rollout and generate: --device-map; diff: --revision) are handed over."""
    seen = {}

    def refuse(spec, **options):
        seen.update(spec=spec, **options)
        raise KeyboardInterrupt  # stop before any model loads

    monkeypatch.setattr("attn_cli.backends.registry.load_backend", refuse)
    result = runner.invoke(
        app,
        [
            *command,
            "--model",
            "./somewhere",
            "--device-map",
            "auto",
            "--revision",
            "v1",
            "-O",
            "allow_pickle=true",
            "--dtype",
            "float32",
        ],
    )
    assert result.exit_code == 130, result.output
    assert seen == {
        "spec": "./somewhere",
        "device": "auto",
        "dtype": "float32",
        "device_map": "auto",
        "revision": "v1",
        "allow_pickle": "true",
    }


def test_loads_model_needs_a_loading_parameter():
    from attn_cli.cli.loading import loads_model

    def command(text: str) -> None:
        pass

    with pytest.raises(TypeError, match="loading"):
        loads_model(command)


def test_a_text_that_loses_tokens_to_the_unknown_token_says_so_on_stderr():
    """MiniLM reads "我是一个男孩" as 我 [UNK] 一 [UNK] 男 [UNK], and the lab decoder "ran" as <unk>: one line on
    stderr says how many, which pieces and what reads them; the JSON on stdout is the document it always was."""
    runner = CliRunner()
    chinese = runner.invoke(app, ["inspect", "我是一个男孩", "--layer", "0", "--json"])
    assert chinese.exit_code == 0
    assert chinese.stderr.splitlines() == [
        "warning: 3 of 6 tokens of '我是一个男孩' are [UNK]: minilm's vocabulary lacks them (是 个 孩); "
        "--model toy splits CJK text per character (a multilingual checkpoint reads it with trained weights)"
    ]
    import attn_cli

    assert json.loads(chinese.stdout) == attn_cli.load("minilm").inspect("我是一个男孩", layers=0).to_json_dict()
    lab = runner.invoke(app, ["generate", "the cat ran", "--model", "lab", "--max-new-tokens", "2"])
    assert lab.exit_code == 0
    assert lab.stderr.startswith("warning: 1 of 3 tokens of 'the cat ran' is <unk>: lab's vocabulary lacks it (ran); ")
    assert len(lab.stderr.splitlines()) == 1
    for words in (["inspect", "The cat sat on the mat."], ["inspect", "我是一个男孩", "--model", "toy"]):
        quiet = runner.invoke(app, [*words, "--layer", "0", "--json"])
        assert quiet.exit_code == 0 and quiet.stderr == "", quiet.stderr  # read whole: nothing to say
    one_in_many = runner.invoke(app, ["inspect", "a 是 " + "word " * 20, "--layer", "0", "--json"])
    assert one_in_many.stderr == ""  # 1 of 23: below a noticeable share (NOTICEABLE, a tenth)


def test_the_pieces_lost_to_the_unknown_token_are_found_between_the_known_ones():
    from attn_cli.data.capture import Token
    from attn_cli.data.unknown import lost_pieces, unknown_note

    def tokens(*texts):
        return [Token(i, text, i, text in ("[CLS]", "[SEP]")) for i, text in enumerate(texts)]

    assert lost_pieces("Café 是 naïve", tokens("[CLS]", "cafe", "[UNK]", "naive", "[SEP]")) == ["是"]
    assert lost_pieces("我是一个男孩", tokens("我", "[UNK]", "一", "[UNK]", "男", "[UNK]")) == ["是", "个", "孩"]
    assert lost_pieces("hello 😀 🙂 world", tokens("hello", "[UNK]", "[UNK]", "world")) == ["😀 🙂"]
    assert lost_pieces("xyz", tokens("abc", "[UNK]")) == []  # not found in order: nothing named, still counted
    assert unknown_note("xyz", tokens("abc", "[UNK]"), "m").startswith("warning: 1 of 2 tokens of 'xyz' is [UNK]: ")
