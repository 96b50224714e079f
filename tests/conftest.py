"""Shared fixtures. Nothing here downloads: models are the bundled MiniLM or built from configs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# Before huggingface_hub is imported anywhere: the tests never touch the network.
os.environ["HF_HUB_OFFLINE"] = "1"
# pytest-xdist starts its workers with COLUMNS=80 and LINES=24 set, which a serial run does not have: a
# view that fits its grid to LINES would draw for a 24-line screen in a worker and for a pipe otherwise.
if "PYTEST_XDIST_WORKER" in os.environ:
    for name in ("COLUMNS", "LINES"):
        os.environ.pop(name, None)


def pytest_configure(config):
    """Each pytest-xdist worker runs torch on its share of the cores (one each with -n 2 on 2): torch's default
    (a thread per core in every worker) puts twice as many threads as cores to work, and their waits for each
    other (OpenMP spins) were CPU time taken from the other worker. A test that asks for threads sets them itself
    (test_ray's workers and its one_thread fixture)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        import torch

        threads = max(1, (os.cpu_count() or 1) // workers)
        torch.set_num_threads(threads)
        os.environ.setdefault("OMP_NUM_THREADS", str(threads))  # the same for the processes a test starts


TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


async def until(pilot, condition, timeout: float = 60.0) -> None:
    """Let a Textual app under its pilot run until condition() holds (model loaded, a run finished, ...)."""
    import time

    deadline = time.monotonic() + patience(timeout)
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for the app")
        await pilot.pause(0.02)
    await pilot.pause()


def patience(seconds: float) -> float:
    """How long a test waits for a state it polls (a page drawn, a process ended, an app quit): `seconds` on an
    idle machine, times the load per CPU where that is above 1 (the suite ran at load 10 on 2 cores: a fixed
    20 s to quit failed there), times ATTN_TEST_PATIENCE (default 1) for a machine slower still. Never a budget
    the load decides: the wait ends as soon as the state is reached."""
    try:
        busy = os.getloadavg()[0] / (os.cpu_count() or 1)
    except OSError:  # no load average on this platform
        busy = 1.0
    return seconds * max(1.0, busy) * float(os.environ.get("ATTN_TEST_PATIENCE", "1"))


@pytest.fixture(scope="session")
def minilm_backend():
    """The bundled all-MiniLM-L6-v2, loaded once on CPU through the same path `attn` uses."""
    from attn_cli.backends.registry import load_backend

    return load_backend("minilm", device="cpu")


def copy_minilm_tokenizer(directory) -> None:
    """Give a tiny test model the real BERT tokenizer (vocab 30522)."""
    from attn_cli.backends.minilm import minilm_dir

    for name in TOKENIZER_FILES:
        shutil.copy(minilm_dir() / name, directory / name)


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory):
    """A 2-layer, 4-head random BERT saved with save_pretrained (safetensors), as a user's model would be."""
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=30522,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    directory = tmp_path_factory.mktemp("tiny-bert")
    BertModel(config).eval().save_pretrained(directory)
    copy_minilm_tokenizer(directory)
    return directory


# attn's own settings and the colour switches: a test never sees the developer's
USER_VARIABLES = (
    "ATTN_MODEL",
    "ATTN_DEVICE",
    "ATTN_DEBUG",
    "ATTN_ALLOW_MISSING_WEIGHTS",
    "NO_COLOR",
    "FORCE_COLOR",
    "TTY_COMPATIBLE",
)


IN_CI = os.environ.get("CI", "").lower() in ("1", "true")


def missing_tool(reason: str):
    """Skip a test whose tool (a browser, tmux, cairo) is not here, naming it; in CI, fail instead.

    .ci/run installs every tool the tests use, so in CI a missing one is a broken install, never a skip.
    """
    if IN_CI:
        pytest.fail(f"{reason}: .ci/run installs it, so in CI its absence is a failure", pytrace=False)
    pytest.skip(reason)


def needs_program(name: str, why: str = "") -> None:
    """missing_tool() unless the program `name` is on PATH."""
    if shutil.which(name) is None:
        missing_tool(f"{name} is not installed" + (f": {why}" if why else ""))


def isolate(monkeypatch, columns: int) -> None:
    """No network, none of the user's settings, a fixed width: every run sees the same environment."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for name in USER_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("COLUMNS", str(columns))


def save_tiny(model, directory):
    """save_pretrained (safetensors) plus the real BERT tokenizer: a user's model directory in miniature."""
    model.eval().save_pretrained(directory)
    copy_minilm_tokenizer(directory)
    return directory


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory):
    """A 2-layer Llama with RoPE and grouped-query attention: 8 query heads reading 2 kv heads."""
    import torch
    from transformers import LlamaModel

    torch.manual_seed(0)
    return save_tiny(LlamaModel(tiny_llama_config()), tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="session")
def tiny_gpt2_dir(tmp_path_factory):
    """A 2-layer GPT-2: causal, with absolute position embeddings."""
    import torch
    from transformers import GPT2Model

    torch.manual_seed(0)
    return save_tiny(GPT2Model(tiny_gpt2_config()), tmp_path_factory.mktemp("tiny-gpt2"))


@pytest.fixture(scope="session")
def tiny_gpt2_lm_dir(tmp_path_factory):
    """save_tiny_gpt2_lm() once for the session: the tests that only read it share one directory."""
    return save_tiny_gpt2_lm(tmp_path_factory.mktemp("tiny-gpt2-lm"))


def tiny_llama_config():
    """2 layers, hidden 64, RoPE, 8 query heads reading 2 kv heads; MiniLM's vocabulary (its tokenizer is copied)."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=30522,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=8,
        num_key_value_heads=2,
        max_position_embeddings=256,
    )


def save_tiny_gpt2_lm(directory, **sizes):
    """A tiny GPT-2 with its language-model head (it generates), seeded: tiny_gpt2_config() with `sizes` set."""
    import torch
    from transformers import GPT2LMHeadModel

    torch.manual_seed(0)
    config = tiny_gpt2_config()
    for name, value in sizes.items():
        setattr(config, name, value)
    return save_tiny(GPT2LMHeadModel(config), directory)


def modules_loaded_by(statement: str, names: tuple[str, ...]) -> list[str]:
    """Which of `names` a fresh interpreter has imported after running `statement` (this checkout's attn_cli)."""
    code = f"import sys; {statement}; print(','.join(m for m in {names!r} if m in sys.modules))"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return [name for name in out.stdout.strip().split(",") if name]


def tiny_gpt2_config():
    """2 layers, 4 heads, 128 absolute positions; [CLS]/[SEP] ids as BOS/EOS (MiniLM's tokenizer is copied)."""
    from transformers import GPT2Config

    return GPT2Config(
        vocab_size=30522, n_embd=64, n_layer=2, n_head=4, n_positions=128, bos_token_id=101, eos_token_id=102
    )


def assert_generated_rows_equal_one_forward_pass(directory, report, tolerance: float = 1e-5) -> None:
    """Every recorded row of a GenerateReport equals the row of the position that produced that token in one
    eager forward pass over prompt + generated ids (output_attentions=True), to `tolerance`; and a step saw
    exactly the keys that forward gives a weight: NaN where it could not look (tokens after it, keys out of a
    sliding window), 0 there in the forward pass.

    The forward is fed what the tokenizer gives for the prompt, as model(**tokenizer(text)), continued over
    the generated ids as generate() continues it: a BERT tokenizer's token_type_ids, the last one repeated."""
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(directory, local_files_only=True, attn_implementation="eager").eval()
    prompt = AutoTokenizer.from_pretrained(directory, local_files_only=True)(report.prompt, return_tensors="pt")
    ids = torch.tensor([[token.id for token in report.tokens]])  # (1, T)
    assert torch.equal(ids[:, : report.prompt_tokens], prompt["input_ids"])
    inputs = {"input_ids": ids}
    if "token_type_ids" in prompt:
        types = prompt["token_type_ids"]  # (1, P)
        inputs["token_type_ids"] = torch.cat([types, types[:, -1:].expand(1, ids.shape[1] - types.shape[1])], 1)
    with torch.no_grad():
        attentions = model(**inputs, output_attentions=True).attentions
    first, count = report.prompt_tokens - 1, len(report.tokens) - report.prompt_tokens
    for layer in report.layers:
        expected = attentions[layer.layer][0, [head.head for head in layer.heads], first : first + count]  # (h, N, T)
        got = torch.from_numpy(np.stack([head.weights for head in layer.heads]))  # (h, N, T)
        visible = ~got.isnan()
        assert (got[visible] - expected[visible]).abs().max().item() <= tolerance, layer.layer
        assert torch.equal(visible, expected != 0), layer.layer


# ---- the system Chromium, driven by playwright (tests of HTML pages: skip with the reason when absent)

CHROMIUM = next(
    (
        path
        for path in (
            os.environ.get("ATTN_CHROMIUM"),
            shutil.which("chromium"),
            shutil.which("chromium-browser"),
            shutil.which("google-chrome"),
        )
        if path
    ),
    None,
)


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        missing_tool("no Chromium here (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing_tool("the playwright package is not installed (pip install -e '.[test]')")
    with sync_playwright() as playwright:
        try:
            launched = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        except Exception as error:  # a browser that cannot start here is a skip, with its reason
            pytest.skip(f"Chromium at {CHROMIUM} did not start: {str(error).splitlines()[0]}")
        yield launched
        launched.close()


@pytest.fixture
def offline_page(browser):
    """A page whose every request beyond the file itself is blocked and recorded."""
    context = browser.new_context(offline=True)
    page = context.new_page()
    requests: list[str] = []
    errors: list[str] = []

    def block(route):
        if route.request.url.startswith("file://"):
            route.continue_()
        else:
            requests.append(route.request.url)
            route.abort()

    page.route("**/*", block)
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    yield page, requests, errors
    context.close()


def open_page(page, path):
    """Open one of attn's pages and wait until its script has drawn it."""
    page.goto(path.as_uri())
    page.wait_for_selector("body[data-ready='1']", timeout=patience(10) * 1000)


@pytest.fixture(scope="module")
def planted_dir(tmp_path_factory):
    """A 1-layer GPT-2 whose weights are set by hand: head 0 attends the previous token, head 1 the first,
    head 2 itself.

    Token embeddings are 0 and position p is the unit vector e_p, so after ln_1 token p is
    h_p = a·e_p − b·1 (a, b the same for every p). With q and k read from the first 32
    dimensions, q_i·k_j = β·a²·[target] + a constant per row, which softmax ignores.
    """
    import torch
    from transformers import GPT2Config, GPT2Model

    d, head_dim, beta = 96, 32, 4.0
    model = GPT2Model(GPT2Config(vocab_size=30522, n_embd=d, n_layer=1, n_head=3, n_positions=64))
    with torch.no_grad():
        model.wte.weight.zero_()
        model.wpe.weight.copy_(torch.eye(64, d))
        attention = model.h[0].attn.c_attn  # Conv1D: x @ W + b, W (d, 3d): q | k | v
        attention.weight.zero_()
        attention.bias.zero_()
        for m in range(head_dim):
            if m + 1 < d:
                attention.weight[m + 1, m] = beta  # head 0: q_i = β·h_i shifted, so q_i ≈ β·a·e_{i−1}
            attention.weight[m, d + m] = 1.0  # head 0: k_j = h_j
            attention.weight[m, d + head_dim + m] = 1.0  # head 1: k_j = h_j
            attention.weight[m, 2 * head_dim + m] = beta  # head 2: q_i = β·h_i
            attention.weight[m, d + 2 * head_dim + m] = 1.0  # head 2: k_j = h_j
        attention.bias[head_dim] = 20.0  # head 1: q = 20·e_0 whatever the token
    return save_tiny(model, tmp_path_factory.mktemp("planted-gpt2"))


def cli_json(*args: str) -> dict:
    """`attn ARGS --json` in this process: its JSON document (the command must succeed)."""
    import json

    from typer.testing import CliRunner

    from attn_cli.cli import app

    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def half_blocks(matrix, scale) -> list:
    """One matrix drawn alone as lines of '▀' (render/glyphs.half_block_codes as (glyph, Style) pairs): the
    reference the pictures drawn together for many heads are held to."""
    import numpy as np

    from attn_cli.render.glyphs import cells, half_block_codes

    codes = half_block_codes(np.asarray(matrix, dtype=np.float64)[None], scale)[0]
    return [cells(scale, line) for line in codes.tolist()]
