"""Issue 12, regression tests per class: one reader of text (textio), one writer of files (atomic), one
validator of loaded models (backends/validate), one edge that turns every error into one line (cli/edge).

In-process with CliRunner where the command's own code is under test; real processes where the process
is (closed stdout, PYTHONIOENCODING, a closed pipe, the entry point)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import isolate, patience
from typer.testing import CliRunner

from attn_cli.cli import app

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


@pytest.fixture(autouse=True)
def isolated_env(monkeypatch):
    isolate(monkeypatch, 120)


def attn(*args: str, input=None):
    return runner.invoke(app, [str(arg) for arg in args], input=input)


def one_line_error(result, code: int, *fragments: str, stdout: bool = False) -> str:
    """Exit code, exactly one `error: ...` line on stderr, no traceback, nothing on stdout (unless the
    terminal view was printed before the error: stdout=True)."""
    assert result.exit_code == code, f"exit {result.exit_code}\nstderr:\n{result.stderr}\n{result.exception!r}"
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert stdout or result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], f"{fragment!r} not in {lines[0]!r}"
    return lines[0]


def process_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", COLUMNS="120")
    env.pop("ATTN_DEBUG", None)
    env.update(extra)
    return env


def run_attn(args: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    """`python -m attn_cli ARGS` through sh (for redirections), in tmp_path."""
    command = f'"{sys.executable}" -m attn_cli {args}'
    return subprocess.run(
        command, shell=True, capture_output=True, cwd=tmp_path, env=process_env(**env), timeout=patience(120)
    )


def process_error(completed, code: int, *fragments: str) -> str:
    stderr = completed.stderr.decode("utf-8", "replace")
    assert completed.returncode == code, stderr
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def temp_files(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.iterdir() if ".tmp-" in path.name)


def no_model_load(monkeypatch):
    """Fail the test if a model is loaded: the check had to come before."""

    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded before the output path was checked")

    monkeypatch.setattr("attn_cli.backends.registry.load_backend", refuse)


# --- text: one reader ---------------------------------------------------------------------------------


def test_invalid_utf8_on_stdin_is_one_line():
    result = attn("inspect", "-", "--model", "toy", input=b"caf\xe9 \xff")
    one_line_error(result, 2, "stdin is not valid UTF-8", "0xe9", "offset 3")


@pytest.mark.parametrize("text, what", [("caf\udce9", "byte 0xe9"), ("a\ud800b", "U+D800")])
def test_lone_surrogates_in_the_argument_are_one_line(text, what):
    one_line_error(attn("inspect", text, "--model", "toy"), 2, "not valid UTF-8", what)
    one_line_error(attn("compare", text), 2, "not valid UTF-8")
    one_line_error(attn("steps", text), 2, "not valid UTF-8")


def test_stdin_utf8_with_bom_and_crlf_is_read():
    result = attn("inspect", "-", "--model", "toy", "--json", input="\ufeffhello world\r\n".encode())
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["text"] == "hello world"


def test_closed_stdin_is_one_line(tmp_path):
    process_error(run_attn("inspect - --model toy <&-", tmp_path), 2, "stdin is closed")


def test_empty_show_is_an_error():
    one_line_error(attn("inspect", "hello", "--model", "toy", "--show", ""), 2, "--show needs a panel name")
    one_line_error(attn("inspect", "hello", "--model", "toy", "--show", " , "), 2, "--show")


# --- the toy's inputs ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content, fragment",
    [
        (b'[toy]\nd_model = "big"\n', "d_model='big': expected a whole number"),
        (b"[toy]\nheads = 2.5\n", "heads=2.5: expected a whole number"),
        (b"[toy]\ncausal = 1\n", "causal=1: expected true or false"),
        (b"[toy]\npositions = 3\n", "positions=3: expected text"),
        (b"[toy]\nd_model = 100000000\n", "out of range"),
        (b"[toy]\nseed = -1\n", "out of range"),
        (b"[toy]\nd_model = 8\xff\n", "is not UTF-8: byte 0xff"),
        (b"toy = 5\n", "[toy] must be a table"),
        (b"[toy\n", "config"),
    ],
)
def test_bad_toy_config_is_one_line(tmp_path, content, fragment):
    path = tmp_path / "toy.toml"
    path.write_bytes(content)
    one_line_error(attn("inspect", "hello", "--model", "toy", "-O", f"config={path}"), 2, fragment)


@pytest.mark.parametrize(
    "option, value", [("d_model", "100000000"), ("layers", "100000"), ("seed", str(2**64)), ("seed", "-3")]
)
def test_toy_options_out_of_range_are_one_line(option, value):
    one_line_error(attn("inspect", "hello", "--model", "toy", "-O", f"{option}={value}"), 2, "out of range")


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_toy_weights_that_are_not_finite_are_refused(tmp_path, value):
    from safetensors.torch import load_file, save_file

    saved = tmp_path / "w.safetensors"
    assert attn("inspect", "hello", "--model", "toy", "-O", f"save_weights={saved}", "--json").exit_code == 0
    weights = load_file(str(saved))
    weights["layers.0.w_q"][0, 0] = value
    save_file(weights, str(saved))
    one_line_error(
        attn("inspect", "hello", "--model", "toy", "-O", f"weights={saved}"), 1, "layers.0.w_q", "NaN or infinite"
    )


def test_toy_activations_that_overflow_are_refused(tmp_path):
    from safetensors.torch import load_file, save_file

    saved = tmp_path / "w.safetensors"
    assert attn("inspect", "hello", "--model", "toy", "-O", f"save_weights={saved}", "--json").exit_code == 0
    weights = load_file(str(saved))
    weights["layers.0.w_q"] *= 1e38  # finite weights, infinite q
    save_file(weights, str(saved))
    one_line_error(attn("inspect", "hello world", "--model", "toy", "-O", f"weights={saved}"), 1, "layer 0: q")


def test_scores_that_overflow_from_finite_q_and_k_are_refused_by_every_command(tmp_path):
    """Weights ×1e30: q and k stay finite (~1e30) but q·kᵀ overflows float32 to inf, so softmax gives NaN.
    Refused (exit 1, one line) by every command, the old -o file untouched, never null weights and exit 0."""
    from safetensors.torch import load_file, save_file

    saved = tmp_path / "w.safetensors"
    assert attn("inspect", "hello", "--model", "toy", "-O", f"save_weights={saved}", "--json").exit_code == 0
    save_file({name: tensor * 1e30 for name, tensor in load_file(str(saved)).items()}, str(saved))
    old = tmp_path / "old.json"
    old.write_text("precious")
    toy = ("--model", "toy", "-O", f"weights={saved}")
    for command in (
        ("inspect", "a b c", *toy, "-o", old),
        ("inspect", "a b c", *toy),
        ("inspect", "a b c", "a b", *toy, "--json"),
        ("compare", "a b c", *toy, "-o", old),
        ("heads", "a b c", "a b", *toy, "-o", old),
        ("rollout", "a b c", *toy, "-o", old),
        ("diff", "a b c", "a b", *toy, "-o", old),
        ("steps", "a b c", *toy),
    ):
        one_line_error(attn(*command), 1, "scores overflowed", "q·kᵀ")
        assert old.read_text() == "precious" and temp_files(tmp_path) == []


def test_scores_that_overflow_in_a_hugging_face_model_are_refused(tmp_path):
    """A GPT-2 whose layer 0 q and k projections are ×1e25: the captured q, k of layer 0 are finite (~1e24),
    their scores are not. Another whose layer 1 has a NaN in W_K: generate checks each step's q, k, v as
    inspect does. (One model with both once passed by chance: layer 0's overflow reaches layer 1's q too.)"""
    import torch
    from transformers import GPT2LMHeadModel

    from tests.conftest import save_tiny, tiny_gpt2_config

    def gpt2_with(change, name: str) -> tuple[str, str]:
        torch.manual_seed(0)
        model = GPT2LMHeadModel(tiny_gpt2_config())
        with torch.no_grad():
            change(model, model.config.n_embd)
        return "--model", save_tiny(model, tmp_path / name)

    def huge(model, width):  # (d, 3d): the q and k columns of layer 0
        model.transformer.h[0].attn.c_attn.weight[:, : 2 * width] *= 1e25

    def nan_k(model, width):  # k's first column of layer 1; layer 0 stays finite, so q of layer 1 is too
        model.transformer.h[1].attn.c_attn.weight[0, width] = float("nan")

    gpt2 = gpt2_with(huge, "huge")
    for command in (
        ("inspect", "hello world", *gpt2, "--layer", "0"),
        ("heads", "hello", "a longer text", *gpt2, "--layer", "0"),
        ("generate", "hello world", *gpt2, "--layer", "0", "--max-new-tokens", "2"),
        ("compare", "hello world", *gpt2, "--layer", "0"),
    ):
        one_line_error(attn(*command), 1, "scores overflowed")
    one_line_error(
        attn("generate", "hello world", *gpt2_with(nan_k, "nan-k"), "--layer", "1", "--max-new-tokens", "2"),
        1,
        "layer 1: k",
        "NaN",
    )


@pytest.mark.parametrize("content", [b"", b"\x00" * 64, os.urandom(4096), b"\xff" * 8 + b"{}"])
def test_toy_weights_of_random_bytes_are_one_line(tmp_path, content):
    path = tmp_path / "w.safetensors"
    path.write_bytes(content)
    one_line_error(attn("inspect", "hello", "--model", "toy", "-O", f"weights={path}"), 1, "cannot read toy weights")


def test_toy_text_longer_than_it_can_hold_is_one_line():
    one_line_error(attn("inspect", "w " * 5000, "--model", "toy"), 1, "at most 4096")


# --- output files: one writer -------------------------------------------------------------------------


@pytest.mark.parametrize("option, name", [("-o", "x.json"), ("--save", "x.svg"), ("--save-tensors", "x.safetensors")])
def test_output_into_a_missing_directory_fails_before_the_model_loads(tmp_path, monkeypatch, option, name):
    no_model_load(monkeypatch)
    target = tmp_path / "missing" / name
    one_line_error(attn("inspect", "hello", "--model", "toy", option, target), 1, option, "does not exist")


@pytest.mark.parametrize("option, name", [("-o", "x.json"), ("--save", "x.svg"), ("--save-tensors", "x.safetensors")])
def test_output_into_a_directory_or_under_a_file_fails_fast(tmp_path, monkeypatch, option, name):
    no_model_load(monkeypatch)
    (tmp_path / name).mkdir()
    one_line_error(attn("inspect", "hello", "--model", "toy", option, tmp_path / name), 2, "is a directory")
    (tmp_path / "file").write_text("x")
    one_line_error(
        attn("inspect", "hello", "--model", "toy", option, tmp_path / "file" / name), 1, "is not a directory"
    )
    assert (tmp_path / "file").read_text() == "x"


def test_compare_steps_and_models_check_o_before_running(tmp_path, monkeypatch):
    no_model_load(monkeypatch)
    target = tmp_path / "missing" / "x.json"
    one_line_error(attn("compare", "hello", "-o", target), 1, "does not exist")
    one_line_error(attn("steps", "hello", "-o", target), 1, "does not exist")
    one_line_error(attn("models", "-o", target), 1, "does not exist")


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes anywhere")
def test_read_only_directory_fails_fast(tmp_path, monkeypatch):
    no_model_load(monkeypatch)
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        one_line_error(attn("inspect", "hello", "--model", "toy", "-o", locked / "x.json"), 1, "cannot write")
    finally:
        locked.chmod(stat.S_IRWXU)


def test_o_replaces_the_file_whole_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "old.json"
    target.write_text("precious")
    target.chmod(0o640)
    assert attn("inspect", "hello", "--model", "toy", "-o", target).exit_code == 0
    assert json.loads(target.read_text())["text"] == "hello"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640  # the old file's permissions are kept
    assert temp_files(tmp_path) == []


def test_o_through_a_symlink_writes_the_file_it_points_to(tmp_path):
    real, link = tmp_path / "real.json", tmp_path / "link.json"
    real.write_text("old")
    link.symlink_to(real)
    assert attn("inspect", "hello", "--model", "toy", "-o", link).exit_code == 0
    assert link.is_symlink() and json.loads(real.read_text())["text"] == "hello"


def test_an_output_that_is_an_input_is_refused_before_the_model_loads(tmp_path, monkeypatch, tiny_bert_dir):
    """Same file by inode (also through a symlink): the report would replace the corpus, the toy's weights
    or a model's file. Exit 2 in every command that reads and writes files; the input is untouched."""
    no_model_load(monkeypatch)
    corpus, weights = tmp_path / "c.txt", tmp_path / "w.safetensors"
    corpus.write_text("one text\nanother text\n")
    weights.write_bytes(b"weights")
    (tmp_path / "link.txt").symlink_to(corpus)
    model = _copy(tiny_bert_dir, tmp_path / "model")
    toy = ("--model", "toy", "-O", f"weights={weights}")
    cases = [
        (("heads", "--file", corpus, "-o", corpus), "--file"),
        (("heads", "--file", corpus, "-o", tmp_path / "link.txt"), "--file"),
        (("heads", "--file", corpus, "--save", corpus), "--file"),
        (("inspect", "a b", *toy, "--save-tensors", weights), "-O weights="),
        (("inspect", "a b", *toy, "-O", f"save_weights={weights}"), "-O weights="),
        (("steps", "a b", *toy, "-o", weights), "-O weights="),
        (("compare", "a b", *toy, "-o", weights), "-O weights="),
        (("rollout", "a b", *toy, "-o", weights), "-O weights="),
        (("generate", "a b", *toy, "-o", weights), "-O weights="),
        (("inspect", "a b", "--model", model, "--save-tensors", model / "model.safetensors"), "--model"),
        (("diff", "a b", "--model", "toy", "--against-model", model, "-o", model / "config.json"), "--against-model"),
    ]
    for args, fragment in cases:
        one_line_error(attn(*args), 2, "which this command reads", fragment)
    assert corpus.read_text() == "one text\nanother text\n" and weights.read_bytes() == b"weights"
    assert json.loads((model / "config.json").read_text())["model_type"] == "bert"


def test_the_toys_save_weights_is_checked_before_the_toy_is_built(tmp_path, monkeypatch):
    """-O save_weights is the toy's own option: its place is checked first thing when the toy loads."""
    monkeypatch.setattr("attn_cli.backends.toy.ToyBackend", None)  # building the toy would fail the test
    one_line_error(
        attn("inspect", "hello", "--model", "toy", "-O", f"save_weights={tmp_path / 'missing' / 'w.st'}"),
        1,
        "save_weights",
        "does not exist",
    )
    (tmp_path / "dir.safetensors").mkdir()
    one_line_error(
        attn("inspect", "hello", "--model", "toy", "-O", f"save_weights={tmp_path / 'dir.safetensors'}"),
        2,
        "is a directory",
    )


def test_a_run_that_fails_while_writing_keeps_the_old_file(tmp_path, monkeypatch):
    target = tmp_path / "old.json"
    target.write_text("precious")

    def half_then_fail(report, stream, before_last=None):
        stream.write('{"half": ')
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("attn_cli.render.files.write_json", half_then_fail)
    one_line_error(attn("inspect", "hello", "--model", "toy", "-o", target), 1, "No space left on device")
    assert target.read_text() == "precious" and temp_files(tmp_path) == []


@pytest.mark.parametrize(
    "interrupt, code, word", [(KeyboardInterrupt, 130, "interrupted"), ("Terminated", 143, "terminated")]
)
def test_an_interrupt_while_writing_keeps_the_old_file(tmp_path, monkeypatch, interrupt, code, word):
    from attn_cli.plumbing import interrupts

    interrupt = getattr(interrupts, interrupt) if isinstance(interrupt, str) else interrupt
    drawn = (("--save", "x.png"),) if importlib.util.find_spec("cairosvg") else ()  # the [figures] extra
    for option, name in (("-o", "x.json"), ("--save", "x.svg"), *drawn, ("--save-tensors", "x.safetensors")):
        target = tmp_path / name
        target.write_text("precious")

        def interrupted(*args, **kwargs):
            for path in tmp_path.iterdir():  # the temporary file exists, the target is untouched
                if ".tmp-" in path.name:
                    path.write_text("half")
            raise interrupt()

        monkeypatch.setattr("attn_cli.render.files.write_json", interrupted)
        monkeypatch.setattr("rich.console.Console.save_svg", interrupted)
        monkeypatch.setattr("attn_cli.render.files.write_figure", interrupted)  # --save writes a figure
        monkeypatch.setattr("safetensors.torch.save_file", interrupted)
        one_line_error(
            attn("inspect", "hello", "--model", "toy", option, target), code, word, stdout=option == "--save"
        )
        assert target.read_text() == "precious" and temp_files(tmp_path) == []


def test_save_tensors_and_save_weights_replace_atomically(tmp_path):
    from safetensors.torch import load_file

    tensors, weights = tmp_path / "t.safetensors", tmp_path / "w.safetensors"
    tensors.write_text("old")
    weights.write_text("old")
    result = attn(
        "inspect", "hello", "--model", "toy", "--save-tensors", tensors, "-O", f"save_weights={weights}", "--json"
    )
    assert result.exit_code == 0, result.stderr
    assert load_file(str(tensors)) and load_file(str(weights))
    assert temp_files(tmp_path) == []


def test_signals_are_deferred_around_the_critical_steps():
    import signal

    from attn_cli.plumbing import interrupts

    previous = signal.getsignal(signal.SIGTERM)
    interrupts.install()
    try:
        reached_the_end = False
        with pytest.raises(interrupts.Terminated):
            with interrupts.deferred():
                os.kill(os.getpid(), signal.SIGTERM)
                for _ in range(1000):  # the handler runs here, between bytecodes, and waits
                    pass
                reached_the_end = True
        assert reached_the_end and interrupts.exit_code(interrupts.Terminated()) == 143
    finally:
        interrupts.reported()
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, signal.default_int_handler)


def test_a_bad_place_fails_before_the_model_loads(tmp_path, monkeypatch):
    """A read-only directory or filesystem (root cannot be refused a chmod'ed one): the probe file fails."""
    no_model_load(monkeypatch)

    def refused(*args, **kwargs):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr("tempfile.mkstemp", refused)
    for option, name in (("-o", "x.json"), ("--save", "x.svg"), ("--save-tensors", "x.safetensors")):
        one_line_error(attn("inspect", "hello", "--model", "toy", option, tmp_path / name), 1, "Read-only file system")


def test_atomic_open_unit(tmp_path):
    from attn_cli.plumbing.atomic import atomic_open
    from attn_cli.plumbing.errors import AttnError

    target = tmp_path / "f.txt"
    target.write_text("old")
    with pytest.raises(KeyboardInterrupt):
        with atomic_open(target) as handle:
            handle.write("new")
            raise KeyboardInterrupt
    assert target.read_text() == "old" and temp_files(tmp_path) == []
    with pytest.raises(AttnError, match="cannot write"):
        with atomic_open(target) as handle:
            raise OSError(28, "No space left on device")
    with atomic_open(target) as handle:
        handle.write("new")
    assert target.read_text() == "new" and temp_files(tmp_path) == []


# --- loaded models: one validator -----------------------------------------------------------------------


def _copy(source: Path, destination: Path) -> Path:
    shutil.copytree(source, destination)
    return destination


def _edit_config(directory: Path, **changes) -> None:
    config = json.loads((directory / "config.json").read_text())
    config.update(changes)
    (directory / "config.json").write_text(json.dumps(config))


def test_weights_missing_from_the_checkpoint_are_refused(tiny_bert_dir, tmp_path, monkeypatch):
    """A config declaring 4 layers over weights for 2: layers 2–3 would be random numbers."""
    directory = _copy(tiny_bert_dir, tmp_path / "short")
    _edit_config(directory, num_hidden_layers=4)
    line = one_line_error(
        attn("inspect", "hello", "--model", directory),
        1,
        "32 weight(s) are missing",
        "encoder.layer.2.",
        "ATTN_ALLOW_MISSING_WEIGHTS",
    )
    assert "(+27 more)" in line
    monkeypatch.setenv("ATTN_ALLOW_MISSING_WEIGHTS", "1")  # the opt-in
    assert attn("inspect", "hello", "--model", directory, "--json").exit_code == 0


def test_a_model_without_tokenizer_files_is_refused(tiny_bert_dir, tmp_path):
    directory = tmp_path / "no-tokenizer"
    directory.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(tiny_bert_dir / name, directory / name)
    one_line_error(attn("inspect", "hello", "--model", directory), 1, "no tokenizer files")


def test_an_encoder_decoder_model_without_its_head_loads_and_a_lying_config_is_refused(tmp_path):
    """BartModel (no LM head: loaded with AutoModel) is inspected with --target (tests/test_seq2seq.py has the
    parity); a config saying is_encoder_decoder=false over an encoder and a decoder is refused in one line."""
    from transformers import BartConfig, BartModel

    from tests.conftest import save_tiny

    config = BartConfig(
        vocab_size=30522,
        d_model=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=64,
    )
    directory = save_tiny(BartModel(config), tmp_path / "bart")
    one_line_error(attn("inspect", "hello", "--model", directory), 2, "is an encoder–decoder model", "--target")
    assert attn("inspect", "hello", "--target", "hallo", "--model", directory, "--json").exit_code == 0
    _edit_config(directory, is_encoder_decoder=False)  # lying config: caught after loading, by the model itself
    one_line_error(attn("inspect", "hello", "--model", directory), 1, "is_encoder_decoder=false")


@pytest.mark.parametrize(
    "write, fragment",
    [
        (lambda path: path.write_text("[1, 2]"), "must hold a JSON object, not a list"),
        (lambda path: path.write_text("{"), "is not valid JSON"),
        (lambda path: path.write_bytes(b'{"a": "\xff"}'), "is not valid JSON"),
        (lambda path: _edit_config(path.parent, num_attention_heads=0), "num_attention_heads is 0"),
        (lambda path: _edit_config(path.parent, num_hidden_layers="2"), "num_hidden_layers is '2'"),
        (
            lambda path: _edit_config(path.parent, hidden_size=64, intermediate_size=128),
            "do not fit the config's shapes",
        ),
    ],
)
def test_broken_configs_are_one_line(tiny_bert_dir, tmp_path, write, fragment):
    directory = _copy(tiny_bert_dir, tmp_path / "model")
    write(directory / "config.json")
    one_line_error(attn("inspect", "hello", "--model", directory), 1, fragment)


@pytest.mark.parametrize(
    "name, value",
    [
        ("n_head", 0),
        ("num_key_value_heads", -2),
        ("head_dim", 2.5),
        ("vocab_size", True),
        ("max_position_embeddings", 0),
    ],
)
def test_config_sizes_must_be_positive_integers(tmp_path, name, value):
    from attn_cli.backends.validate import check_config_file
    from attn_cli.plumbing.errors import ModelNotFound

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2", name: value}))
    with pytest.raises(ModelNotFound, match=f"{name} is"):
        check_config_file(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2", name: None, "n_head": 4}))
    check_config_file(tmp_path)  # absent or null: transformers' default applies


@pytest.mark.parametrize("corrupt", ["truncated", "random", "empty"])
def test_broken_safetensors_are_one_line(tiny_bert_dir, tmp_path, corrupt):
    directory = _copy(tiny_bert_dir, tmp_path / "model")
    weights = directory / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes({"truncated": data[: len(data) // 2], "random": os.urandom(5000), "empty": b""}[corrupt])
    one_line_error(attn("inspect", "hello", "--model", directory), 1)


def test_non_finite_model_weights_are_refused(tmp_path):
    import torch
    from transformers import BertConfig, BertModel

    from tests.conftest import save_tiny

    model = BertModel(
        BertConfig(
            vocab_size=30522,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=64,
            max_position_embeddings=64,
        )
    )
    with torch.no_grad():
        model.encoder.layer[1].attention.self.key.weight[0, 0] = float("nan")
    directory = save_tiny(model, tmp_path / "nan")
    one_line_error(attn("inspect", "hello", "--model", directory, "--layer", "1"), 1, "layer 1: k", "NaN")
    # attn heads scores padded batches layer by layer: refused the same way, never NaN read as "no score"
    one_line_error(attn("heads", "hello", "a longer text", "--model", directory), 1, "layer 1: k", "NaN")


def test_a_vision_model_without_its_image_processor_is_one_line(tmp_path):
    """Text on a whole vision checkpoint is refused in tests/test_vision.py; this one lacks its processor."""
    from transformers import ViTConfig, ViTModel

    from tests.conftest import save_tiny

    config = ViTConfig(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64, image_size=32, patch_size=16
    )
    directory = save_tiny(ViTModel(config), tmp_path / "vit")
    one_line_error(
        attn("inspect", "hello", "--model", directory),
        1,
        "could not load the vision model",
        "needs config.json, its weights and preprocessor_config.json",
    )


def test_an_unreadable_pickle_under_allow_pickle_is_one_line(tiny_bert_dir, tmp_path):
    directory = _copy(tiny_bert_dir, tmp_path / "pickle")
    (directory / "model.safetensors").unlink()
    (directory / "pytorch_model.bin").write_bytes(b"not a pickle" * 10)
    one_line_error(attn("inspect", "hello", "--model", directory, "--allow-pickle"), 1)


def test_a_library_warning_while_loading_a_pickle_is_one_line(tiny_bert_dir, tmp_path):
    """torch.load warns about a pickle protocol other than 2 in two lines (the message, then torch's own
    source line); attn prints it as one `warning: …` line and runs."""
    import torch
    from safetensors.torch import load_file

    directory = _copy(tiny_bert_dir, tmp_path / "pickle")
    torch.save(load_file(directory / "model.safetensors"), directory / "pytorch_model.bin", pickle_protocol=3)
    (directory / "model.safetensors").unlink()
    result = attn("inspect", "hello", "--model", directory, "--allow-pickle", "--json")
    assert result.exit_code == 0, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("warning: Detected pickle protocol 3"), result.stderr


def test_remote_code_refused_is_one_line(tiny_bert_dir, tmp_path):
    directory = _copy(tiny_bert_dir, tmp_path / "custom")
    _edit_config(directory, model_type="my-custom", auto_map={"AutoModel": "modeling_custom.CustomModel"})
    one_line_error(attn("inspect", "hello", "--model", directory), 1)


@pytest.mark.parametrize("spec", ["a/..", "org/na--me", "a/" + "b" * 200, "-x/y"])
def test_hub_ids_the_hub_rejects_are_one_line(spec):
    one_line_error(attn("inspect", "hello", "--model", spec), 1)


@pytest.mark.parametrize("spec", ["", "  "])
def test_an_empty_model_name_is_an_error_not_the_default(spec):
    one_line_error(attn("inspect", "hello", "--model", spec), 2, "no model named")
    import attn_cli
    from attn_cli.plumbing.errors import BadInput

    with pytest.raises(BadInput, match="no model named"):
        attn_cli.load(spec)


def test_the_bundled_model_still_loads(minilm_backend):
    assert minilm_backend.info.layers == 6  # validation passes on the real checkpoint


# --- the edge ---------------------------------------------------------------------------------------------


def test_attn_debug_keeps_the_exit_code(monkeypatch):
    monkeypatch.setenv("ATTN_DEBUG", "1")
    result = attn("inspect", "hello", "--model", "toy", "--layer", "9")
    assert result.exit_code == 2
    assert "Traceback" in result.stderr and result.stderr.splitlines()[-1].startswith("error: ")


def test_an_interrupt_in_a_command_is_one_line_and_130(monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("attn_cli.backends.registry.load_backend", interrupted)
    one_line_error(attn("inspect", "hello", "--model", "toy"), 130, "interrupted")


def test_an_unexpected_exception_is_one_line_and_1(monkeypatch):
    def broken(*args, **kwargs):
        raise ZeroDivisionError("first line\nsecond line")

    monkeypatch.setattr("attn_cli.backends.registry.load_backend", broken)
    one_line_error(
        attn("inspect", "hello", "--model", "toy"), 1, "unexpected ZeroDivisionError: first line second line"
    )


def test_multi_line_messages_become_one_line():
    from attn_cli.cli.edge import describe
    from attn_cli.plumbing.errors import ModelNotFound

    message, hint, code = describe(ModelNotFound("could not load:\n  line two\n\nline three", "a\nb"))
    assert (message, hint, code) == ("could not load: line two line three", "a b", 1)


def test_help_into_a_closed_pipe_exits_0(tmp_path):
    """`attn --help | head -n 1`: the reader is gone before attn writes (`true` reads nothing)."""
    command = f'{{ "{sys.executable}" -m attn_cli --help 2>err; echo $? >rc; }} | true'
    subprocess.run(command, shell=True, cwd=tmp_path, env=process_env(), timeout=patience(60))
    assert (tmp_path / "rc").read_text().strip() == "0" and (tmp_path / "err").read_text() == ""


def test_a_closed_stdout_is_one_line(tmp_path):
    process_error(run_attn("inspect hello --model toy >&-", tmp_path), 1, "stdout", "closed")
    completed = run_attn("inspect hello --model toy -o out.json >&-", tmp_path)
    assert completed.returncode == 0 and json.loads((tmp_path / "out.json").read_text())["text"] == "hello"


def test_an_ascii_stdout_is_one_line(tmp_path):
    process_error(run_attn("inspect 我是 --model toy --json", tmp_path, PYTHONIOENCODING="ascii"), 1, "encoding ascii")
    completed = run_attn("inspect 我是 --model toy -o out.json", tmp_path, PYTHONIOENCODING="ascii")
    assert completed.returncode == 0, completed.stderr


# --- issue 35: number options -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("heads", "hello", "--engine", "ray", "--gpus-per-worker", "nan"),
        ("heads", "hello", "--engine", "ray", "--gpus-per-worker", "inf"),
        ("diagnose", "hello", "--epsilon", "nan"),
        ("diagnose", "hello", "--ratio", "-1"),
        ("diagnose", "hello", "--floor", "-inf"),
        ("generate", "hello", "--temperature", "nan"),
    ],
)
def test_every_float_option_refuses_nan_inf_and_negatives(args, monkeypatch, capsys):
    """The check sits on every float option (cli Command), so it runs while parsing, before any model;
    through the real edge, which gives a usage error its one line."""
    from attn_cli.cli.edge import run_at_the_edge

    no_model_load(monkeypatch)
    monkeypatch.setattr("sys.argv", ["attn", *args, "--model", "toy"])
    monkeypatch.setattr("attn_cli.launch.prepare_process", lambda: None)
    with pytest.raises(SystemExit) as exit_:
        run_at_the_edge(app)
    assert exit_.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    assert f"'{args[-2]}'" in lines[0] and "not a finite number of 0 or more" in lines[0], lines[0]


def test_the_api_refuses_a_nan_gpus_per_worker():
    from attn_cli.analyses.ray_engine import check_engine
    from attn_cli.plumbing.errors import BadInput

    with pytest.raises(BadInput, match="finite"):
        check_engine("ray", None, None, float("nan"))
