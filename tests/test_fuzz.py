"""Property-based tests (issue 12): the CLI, driven in-process through its real edge (run_at_the_edge,
as the console script runs it), with random texts (any Unicode, lone surrogates, control characters,
huge), random option values and random bytes as model files. Whatever comes in:

- the exit code is 0, 1 or 2;
- a non-zero exit prints exactly one line on stderr, `error: …`, and no traceback;
- `--json` that exits 0 prints one strict JSON document (no NaN / Infinity).

Mostly the toy model (no download, milliseconds a run); example counts are kept small for CI.
"""

from __future__ import annotations

import json
import os
import shutil
import sys

import pytest
from conftest import isolate
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from attn_cli.cli import app
from attn_cli.cli.edge import run_at_the_edge

runner = CliRunner()
EXAMPLES = int(os.environ.get("ATTN_FUZZ_EXAMPLES", "25"))  # more for a long local hunt
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
FUZZ_HF = settings(FUZZ, max_examples=max(EXAMPLES * 2 // 5, 1))  # a Hugging Face model: slower examples


@pytest.fixture(autouse=True)
def isolated_env(monkeypatch):
    isolate(monkeypatch, 100)


def run_cli(args: list[str], stdin: bytes = b"") -> tuple[int, str, str]:
    """`attn ARGS < stdin` in this process, through the same edge as the console script."""
    saved = sys.argv
    sys.argv = ["attn", *args]
    try:
        with runner.isolation(input=stdin) as (out, err, _):
            try:
                run_at_the_edge(app)
                code = 0
            except SystemExit as exit_:
                code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
            stdout, stderr = out.getvalue(), err.getvalue()
    finally:
        sys.argv = saved
    return code, stdout.decode("utf-8", "replace"), stderr.decode("utf-8", "replace")


def reject_constant(name: str):
    raise AssertionError(f"non-standard JSON constant {name}")


def check_outcome(args: list[str], stdin: bytes = b"") -> int:
    code, stdout, stderr = run_cli(args, stdin)
    context = f"attn {args!r}\nexit {code}\nstderr:\n{stderr[-2000:]}"
    assert code in (0, 1, 2), context
    assert "Traceback" not in stderr, context
    if code != 0:
        lines = stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), context
    elif "--json" in args:
        json.loads(stdout, parse_constant=reject_constant)  # one strict document, no NaN
    assert "NaN" not in stdout, context
    return code


# Any code point, lone surrogates and control characters included.
any_text = st.text(st.characters(codec=None, exclude_categories=()), max_size=60)
huge_text = st.sampled_from([40, 2100, 40_000]).map(lambda words: "w, " * words)  # fits, just over, far over
texts = st.one_of(
    any_text, any_text, huge_text, st.sampled_from(["-", "", " ", "\x00", "\udcff", "早上好", "a\u200bb"])
)
commands = st.sampled_from([["inspect", "--model", "toy"], ["steps"], ["compare", "--model", "toy"]])


@FUZZ
@given(command=commands, text=texts, stdin=st.binary(max_size=64))
def test_random_texts(command, text, stdin):
    check_outcome([*command, "--json", "--", text], stdin)


selection = st.one_of(
    st.sampled_from(["all", "0", "1", "0-3", "1,3", "all", "0"]),
    st.sampled_from(["3-1", "-1", "0,0", "", "x", "1:2", "99"]),
    st.text(st.characters(codec=None), max_size=6),
)


def valid_or_not(valid, invalid):
    """Mostly valid values (three draws in four), sometimes invalid ones."""
    return st.one_of(st.sampled_from(valid), st.sampled_from(valid), st.sampled_from(valid), st.sampled_from(invalid))


toy_options = st.fixed_dictionaries(
    {},
    optional={
        "--layer": selection,
        "--head": selection,
        "--top-k": st.one_of(
            st.integers(-3, 50).map(str),
            st.integers(1, 5).map(str),
            st.text(max_size=4),
            st.integers(-(2**80), 2**80).map(str),
        ),
        "d_model": st.sampled_from(["8", "16", "32", "64"]) | st.integers(-4, 200).map(str),
        "heads": st.sampled_from(["1", "2", "4"]) | st.integers(-2, 40).map(str),
        "layers": st.integers(-1, 4).map(str),
        "seed": st.integers(-(2**65), 2**65).map(str),
        "positions": valid_or_not(["none", "sinusoidal"], ["rope", ""]),
        "scoring": valid_or_not(["dot", "scaled-dot", "cosine", "bilinear", "additive"], ["nope", ""]),
        "--variant": valid_or_not(
            ["scoring=dot", "scoring=scaled-dot", "scoring=cosine", "shared-k", "no-scale", "raw"],
            ["scoring=bilinear", "nope", ""],
        ),
        "causal": valid_or_not(["true", "false"], ["future", ""]),
        "valid_len": st.integers(-3, 12).map(str),
        "--rows": valid_or_not(["0:2", "0:999", "1:4"], ["2:1", "x", ":", "-1:3"]),
        "--cols": valid_or_not(["0:2", "1:3", "5:9"], [""]),
        "--show": valid_or_not(["weights", "top,q", "stats,overview", "scores,k,v,symmetry"], ["", ",", "nope"]),
    },
)


@FUZZ
@given(
    options=toy_options,
    json_out=st.booleans(),
    flags=st.lists(
        st.sampled_from(
            ["-Oshared_projection=true", "--full", "--variant=no-scale", "--variant=shared-k", "--include=qkv"]
        ),
        max_size=2,
        unique=True,
    ),
)
def test_random_option_values(options, json_out, flags):
    """Command-line options (--name value) and the toy's own settings (-O name=value)."""
    args = ["inspect", "the cat sat on the mat", "--model", "toy", *flags]
    for name, value in options.items():
        args += [name, value] if name.startswith("--") else ["-O", f"{name}={value}"]
    check_outcome(args + (["--json"] if json_out else []))


machine_or_not = st.one_of(
    st.integers(-3, 40),
    st.integers(-(2**64), 2**64),
    st.sampled_from([sys.maxsize, -sys.maxsize]),
    st.integers(sys.maxsize + 1, 2**100),
    st.integers(-(2**100), -sys.maxsize - 1),
)


@FUZZ
@given(
    options=st.fixed_dictionaries(
        {},
        optional={
            "--limit": machine_or_not,
            "--batch-size": machine_or_not,
            "--seed": machine_or_not,
            "--probe-length": machine_or_not,
        },
    ),
    probe=st.booleans(),
)
def test_random_integer_options_of_heads(options, probe):
    """Any whole number: the run ends 0, 1 or 2, and one past what a machine integer holds is usage (2)."""
    args = ["heads", *(["--probe", "induction"] if probe else ["a b c", "c b a"]), "--model", "toy", "--json"]
    for name, value in options.items():
        args += [name, str(value)]
    code = check_outcome(args)
    if any(abs(value) > sys.maxsize for value in options.values()):
        assert code == 2, args


@FUZZ
@given(
    config=st.binary(max_size=200) | st.text(max_size=80).map(lambda body: f"[toy]\n{body}".encode()),
    weights=st.binary(max_size=300),
)
def test_random_bytes_as_toy_files(tmp_path_factory, config, weights):
    directory = tmp_path_factory.mktemp("toy-files")
    (directory / "c.toml").write_bytes(config)
    (directory / "w.safetensors").write_bytes(weights)
    check_outcome(["inspect", "hello world", "--model", "toy", "--json", "-O", f"config={directory / 'c.toml'}"])
    check_outcome(
        ["inspect", "hello world", "--model", "toy", "--json", "-O", f"weights={directory / 'w.safetensors'}"]
    )


@FUZZ_HF
@given(
    name=st.sampled_from(["config.json", "model.safetensors", "tokenizer.json", "vocab.txt", "tokenizer_config.json"]),
    content=st.one_of(st.binary(max_size=300), st.sampled_from([b"", b"[]", b"{}", b"null", b'{"a": 1}'])),
)
def test_random_bytes_as_model_files(tiny_bert_dir, tmp_path_factory, name, content):
    directory = tmp_path_factory.mktemp("model") / "m"
    shutil.copytree(tiny_bert_dir, directory)
    (directory / name).write_bytes(content)
    check_outcome(["inspect", "hello world", "--model", str(directory), "--json"])


@FUZZ_HF
@given(text=texts, truncate=st.booleans(), stdin=st.binary(max_size=64))
def test_random_texts_through_a_real_tokenizer(tiny_bert_dir, text, truncate, stdin):
    """The same texts into a Hugging Face model (BERT's tokenizer, 64 positions)."""
    check_outcome(
        [
            "inspect",
            "--model",
            str(tiny_bert_dir),
            "--json",
            "--layer",
            "1",
            "--head",
            "0-1",
            *(["--truncate"] if truncate else []),
            "--",
            text,
        ],
        stdin,
    )
