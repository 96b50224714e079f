"""attn generate: every recorded row equals the matching row of one eager forward pass over
prompt + generated ids (output_attentions=True), 1e-5, for a GQA/RoPE Llama and GPT-2, greedy and sampled
(every other decoder, sliding windows included: test_architectures.py)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch
from conftest import assert_generated_rows_equal_one_forward_pass, isolate, save_tiny, tiny_llama_config
from typer.testing import CliRunner

import attn_cli
from attn_cli.plumbing.errors import AttnError, UnsupportedModel

PROMPT = "the cat sat on the"


@pytest.fixture(scope="module")
def llama_lm_dir(tmp_path_factory):
    """A tiny Llama saved with its language-model head: RoPE, 8 query heads reading 2 kv heads."""
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    return save_tiny(LlamaForCausalLM(tiny_llama_config()), tmp_path_factory.mktemp("tiny-llama-lm"))


@pytest.fixture(scope="module")
def gpt2_lm_dir(tiny_gpt2_lm_dir):
    return tiny_gpt2_lm_dir


@pytest.mark.parametrize("fixture", ["llama_lm_dir", "gpt2_lm_dir"])
@pytest.mark.parametrize("sample", [False, True])
def test_generated_rows_equal_one_forward_pass(request, fixture, sample):
    directory = request.getfixturevalue(fixture)
    report = attn_cli.load(str(directory), device="cpu").generate(PROMPT, max_new_tokens=6, sample=sample, seed=3)
    assert len(report.tokens) - report.prompt_tokens == 6 and report.stop == "max_new_tokens"
    assert_generated_rows_equal_one_forward_pass(directory, report)
    visible = ~np.isnan(report.layers[0].heads[0].weights)  # (N, T): step i saw the prompt and i tokens
    assert visible.sum(-1).tolist() == list(range(report.prompt_tokens, len(report.tokens)))


def test_sampling_follows_the_seed_and_greedy_is_deterministic(llama_lm_dir):
    model = attn_cli.load(str(llama_lm_dir), device="cpu")
    ids = lambda report: [t.id for t in report.tokens]  # noqa: E731
    assert ids(model.generate(PROMPT, max_new_tokens=5)) == ids(model.generate(PROMPT, max_new_tokens=5))
    one = model.generate(PROMPT, max_new_tokens=8, sample=True, seed=1, temperature=2.0)
    assert ids(one) == ids(model.generate(PROMPT, max_new_tokens=8, sample=True, seed=1, temperature=2.0))


def test_grouped_heads_read_their_kv_head(llama_lm_dir):
    report = attn_cli.load(str(llama_lm_dir), device="cpu").generate(PROMPT, max_new_tokens=2, layers=1, heads="3-4")
    assert [(h.head, h.kv_head) for h in report.layers[0].heads] == [(3, 0), (4, 1)]


def test_models_that_cannot_generate_say_why(minilm_backend, tiny_llama_dir):
    from attn_cli.api import Model

    with pytest.raises(UnsupportedModel, match="not a causal language model"):
        Model(minilm_backend).generate(PROMPT)
    with pytest.raises(UnsupportedModel, match="not a causal language model"):
        attn_cli.load("toy").generate(PROMPT)
    with pytest.raises(AttnError, match="no language-model head"):
        attn_cli.load(str(tiny_llama_dir), device="cpu").generate(PROMPT)  # saved without its LM head


def test_cli_generate_json_and_view(gpt2_lm_dir):
    from attn_cli.cli import app

    runner = CliRunner()
    result = runner.invoke(
        app, ["generate", PROMPT, "--model", str(gpt2_lm_dir), "--max-new-tokens", "4", "--layer", "1", "--json"]
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["command"] == "generate" and document["stop"] == "max_new_tokens"
    flags = [token["generated"] for token in document["tokens"]]
    assert flags == [False] * (len(flags) - 4) + [True] * 4
    head = document["layers"][0]["heads"][0]
    assert len(head["weights"]) == 4 and len(head["weights"][0]) == len(flags) and len(head["top"]) == 4
    assert head["weights"][0][-1] is None  # the first step could not see the tokens generated after it
    view = runner.invoke(app, ["generate", PROMPT, "--model", str(gpt2_lm_dir), "--max-new-tokens", "3"])
    assert view.exit_code == 0 and "what each generated token was produced from" in view.stdout
    refused = runner.invoke(app, ["generate", PROMPT, "--max-new-tokens", "3"])  # the default model is an encoder
    assert refused.exit_code == 1 and "not a causal language model" in refused.stderr
    assert "--model lab" in refused.stderr and len(refused.stderr.strip().splitlines()) == 1  # the way on
    assert (
        runner.invoke(app, ["generate", PROMPT, "--model", "lab", "--max-new-tokens", "2"]).exit_code == 0
    )  # … leads on


def test_inspect_on_a_checkpoint_with_its_lm_head_runs_the_base_model(llama_lm_dir):
    """Loaded with its head for generate, inspect still equals transformers' eager attention (1e-5)."""
    from transformers import AutoModel, AutoTokenizer

    model = attn_cli.load(str(llama_lm_dir), device="cpu")
    assert model.backend.lm is not None and model.backend.model is model.backend.lm.base_model
    report = model.inspect(PROMPT)
    reference = AutoModel.from_pretrained(llama_lm_dir, local_files_only=True, attn_implementation="eager").eval()
    tokenizer = AutoTokenizer.from_pretrained(llama_lm_dir, local_files_only=True)
    with torch.no_grad():
        attentions = reference(**tokenizer(PROMPT, return_tensors="pt"), output_attentions=True).attentions
    for layer, expected in zip(report.layers, attentions):
        got = torch.from_numpy(np.stack([head.weights for head in layer.heads]))
        assert (got - expected[0]).abs().max().item() <= 1e-5


def test_generation_that_ends_on_the_models_eos_says_eos(gpt2_lm_dir, tmp_path):
    """generate() stops on the ids in the model's generation_config, which the tokenizer need not share."""
    from transformers import AutoModelForCausalLM

    from attn_cli.cli import app

    first = attn_cli.load(str(gpt2_lm_dir), device="cpu").generate(PROMPT, max_new_tokens=1)
    model = AutoModelForCausalLM.from_pretrained(gpt2_lm_dir, local_files_only=True)
    model.generation_config.eos_token_id = [7, first.tokens[-1].id]  # the first token greedy picks ends it
    directory = save_tiny(model, tmp_path / "gpt2-eos")
    assert attn_cli.load(str(directory), device="cpu").backend.tokenizer.eos_token_id is None  # BERT's has none
    runner = CliRunner()
    result = runner.invoke(
        app, ["generate", PROMPT, "--model", str(directory), "--max-new-tokens", "6", "--layer", "0", "--json"]
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["stop"] == "eos" and [t["generated"] for t in document["tokens"]].count(True) == 1
    view = runner.invoke(app, ["generate", PROMPT, "--model", str(directory), "--max-new-tokens", "6", "--layer", "0"])
    assert view.exit_code == 0 and "1 token generated (greedy, stopped at eos); token 7 is new" in view.stdout


@pytest.mark.parametrize("fixture", ["llama_lm_dir", "gpt2_lm_dir"])
def test_the_first_generated_row_is_inspects_last_row(request, fixture):
    """generate and inspect feed the model alike: GPT-2 takes the BERT tokenizer's token_type_ids (and adds
    them as embeddings), so dropping them in one command and not the other changed every weight."""
    model = attn_cli.load(str(request.getfixturevalue(fixture)), device="cpu")
    generated, inspected = model.generate(PROMPT, max_new_tokens=1), model.inspect(PROMPT)
    count = len(inspected.tokens)
    assert generated.prompt_tokens == count
    for generated_layer, inspected_layer in zip(generated.layers, inspected.layers):
        for first, last in zip(generated_layer.heads, inspected_layer.heads):
            assert np.abs(first.weights[0, :count] - last.weights[-1]).max() <= 1e-5


def test_on_token_pieces_make_the_text(llama_lm_dir):
    pieces: list[str] = []
    report = attn_cli.load(str(llama_lm_dir), device="cpu").generate(PROMPT, max_new_tokens=6, on_token=pieces.append)
    assert len(pieces) == 6 and "".join(pieces) == report.text  # the spaces between words included


def screen(*writes: str) -> list[str]:
    """The lines a terminal shows after these writes, interpreting what Rich's live display sends: carriage
    return, newline, erase line (ESC[2K), cursor up (ESC[nA); colours and cursor visibility change nothing."""
    lines, row, col = [""], 0, 0
    for write in writes:
        for part in re.findall(r"\x1b\[[0-9;?]*[A-Za-z]|\r|\n|[^\x1b\r\n]+", write):
            if part == "\n":
                row, col = row + 1, 0
                lines += [""] * (row + 1 - len(lines))
            elif part == "\r":
                col = 0
            elif part.endswith("K"):
                lines[row] = ""
            elif part.startswith("\x1b[") and part.endswith("A"):
                row = max(0, row - int(part[2:-1] or 1))
            elif not part.startswith("\x1b"):
                lines[row] = lines[row][:col].ljust(col) + part + lines[row][col + len(part) :]
                col += len(part)
    return lines


def test_terminal_view_starts_with_its_header_and_aligns_the_indices(llama_lm_dir, monkeypatch, request):
    """On a terminal the text is shown as it is produced, in the transient progress line, which leaves
    nothing behind: the screen starts with the header. Row indices 7…18 are right-aligned."""
    from attn_cli.cli import app
    from attn_cli.cli.edge import stderr_console

    isolate(monkeypatch, 80)
    monkeypatch.setenv("TTY_COMPATIBLE", "1")  # stderr and stdout are terminals
    stderr_console.cache_clear()  # made once per process, as a real run's: after the setting, not in an earlier test
    request.addfinalizer(stderr_console.cache_clear)
    result = CliRunner().invoke(
        app, ["generate", PROMPT, "--model", str(llama_lm_dir), "--max-new-tokens", "12", "--layer", "1"]
    )
    assert result.exit_code == 0, result.output
    shown = screen(result.stderr, re.sub(r"\x1b\[[0-9;]*m", "", result.stdout))
    assert shown[0].startswith("attn generate · ")
    assert "generating" in result.stderr  # the text was shown while it was produced
    table = shown[shown.index(next(line for line in shown if "attended (weight)" in line)) + 2 :]
    labels = [re.match(r"\s*(\d+) ", line) for line in table[:12]]
    assert [int(label.group(1)) for label in labels] == list(range(7, 19))
    assert len({label.end() for label in labels}) == 1  # every token starts in the same column
