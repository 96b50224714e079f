"""Decoders, RoPE and GQA: every supported architecture as a tiny random model loaded by path.

Each model is built from a config (no downloads), saved with save_pretrained
(safetensors) next to the MiniLM BERT tokenizer (vocab 30522, so every token id
has an embedding), and loaded the way `attn --model PATH` loads a user's model.

Tolerances:
  * captured weights vs transformers' eager `output_attentions`: max |Δ| ≤ 1e-5 (float32);
  * post-RoPE q·kᵀ·scale vs the reported scores: 1e-4 (the JSON keeps 7 significant digits);
  * bfloat16 / float16 weights vs the float32 reference of the same (upcast) weights: 2e-2.

The random weights use initializer_range 0.1 rather than the default 0.02, so the
scores spread over a few units and the weights are far from uniform: a wrong
scale, mask or rotation shows up as a large difference, not one lost in 1/T.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers
from conftest import assert_generated_rows_equal_one_forward_pass, copy_minilm_tokenizer
from typer.testing import CliRunner

import attn_cli
from attn_cli.api import Model
from attn_cli.backends.registry import load_backend
from attn_cli.cli import app

TOLERANCE = 1e-5
SENTENCE = "The quick brown fox jumps over the lazy dog near the quiet river bank."
LONG_TEXT = " ".join(["word"] * 100)  # 102 tokens with [CLS] and [SEP]
SLIDING_WINDOW = 4
HEADS, KV_HEADS = 8, 2  # grouped-query attention: 4 query heads per kv head
INIT = 0.1

TINY = dict(vocab_size=30522, initializer_range=INIT)
DECODER = dict(TINY, hidden_size=64, num_hidden_layers=2, intermediate_size=128, max_position_embeddings=128)
GQA = dict(DECODER, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS)


def _config(architecture: str, **overrides):
    """The tiny config of one architecture (hidden 64, 2 layers, intermediate 128)."""
    c = transformers
    factories = {
        "bert": lambda: c.BertConfig(
            **TINY,
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=128,
            max_position_embeddings=64,
        ),
        # RoBERTa's positions start after pad_token_id (1): a T-token text uses positions 2 … T+1.
        "roberta": lambda: c.RobertaConfig(
            **TINY,
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=128,
            max_position_embeddings=64,
        ),
        "distilbert": lambda: c.DistilBertConfig(
            **TINY, dim=64, n_layers=2, n_heads=4, hidden_dim=128, max_position_embeddings=64
        ),
        "gpt2": lambda: c.GPT2Config(
            **TINY, n_embd=64, n_layer=2, n_head=4, n_inner=128, n_positions=128, bos_token_id=None, eos_token_id=None
        ),
        "llama": lambda: c.LlamaConfig(**GQA),
        "qwen2": lambda: c.Qwen2Config(**GQA),
        "qwen3": lambda: c.Qwen3Config(**GQA, head_dim=8),
        "mistral": lambda: c.MistralConfig(**GQA, sliding_window=SLIDING_WINDOW),
    }
    config = factories[architecture]()
    for name, value in overrides.items():
        setattr(config, name, value)
    return config


DECODERS = {"gpt2", "llama", "qwen2", "qwen3", "mistral"}
GQA_ARCHITECTURES = {"llama", "qwen2", "qwen3", "mistral"}
NEEDS_QWEN3 = pytest.mark.skipif(
    not hasattr(transformers, "Qwen3Config"), reason="this transformers has no Qwen3Config"
)
ARCHITECTURES = [
    "bert",
    "roberta",
    "distilbert",
    "gpt2",
    "llama",
    "qwen2",
    pytest.param("qwen3", marks=NEEDS_QWEN3),
    "mistral",
]


def save_tiny(
    directory: Path, config, dtype: torch.dtype | None = None, seed: int = 0, auto=transformers.AutoModel
) -> Path:
    """A random model from `config` (auto: AutoModelForCausalLM for one with its language-model head),
    saved as safetensors with the MiniLM tokenizer beside it."""
    torch.manual_seed(seed)
    model = auto.from_config(config).eval()
    if dtype is not None:
        model = model.to(dtype)
    model.save_pretrained(directory)
    copy_minilm_tokenizer(directory)
    return directory


@dataclass(frozen=True)
class Tiny:
    architecture: str
    directory: Path

    @property
    def decoder(self) -> bool:
        return self.architecture in DECODERS


@pytest.fixture(scope="module", params=ARCHITECTURES)
def tiny(request, tmp_path_factory) -> Tiny:
    """One tiny model per architecture, built once for the module."""
    architecture = request.param
    directory = save_tiny(tmp_path_factory.mktemp(f"tiny-{architecture}"), _config(architecture))
    return Tiny(architecture, directory)


@pytest.fixture(scope="module")
def tiny_report(tiny):
    """The default (sdpa) run of the sentence, as its JSON document."""
    report = attn_cli.load(str(tiny.directory), device="cpu").inspect(SENTENCE)
    return report, report.to_json_dict()


# --- references ------------------------------------------------------------------------------------


def reference_model(directory: Path, dtype: torch.dtype | None = None):
    """transformers' own model, eager attention, as `AutoModel` loads the directory."""
    extra = {} if dtype is None else {"dtype": dtype}
    return transformers.AutoModel.from_pretrained(
        directory, local_files_only=True, attn_implementation="eager", **extra
    ).eval()


def encode(directory: Path, text: str) -> dict:
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory, local_files_only=True)
    return tokenizer(text, return_tensors="pt")


def eager_attentions(directory: Path, text: str, dtype: torch.dtype | None = None) -> torch.Tensor:
    """(layers, H, T, T) from `output_attentions=True` under eager."""
    model = reference_model(directory, dtype)
    with torch.no_grad():
        attentions = model(**encode(directory, text), output_attentions=True).attentions
    assert attentions is not None and len(attentions) == model.config.num_hidden_layers
    return torch.cat(attentions).float()


def report_weights(report) -> torch.Tensor:
    """(layers, heads, T, T) from a report's per-head weight lists."""
    return torch.from_numpy(np.stack([[head.weights for head in layer.heads] for layer in report.layers]))


def masked_by_model(architecture: str, size: int) -> torch.Tensor:
    """(T, T) bool, True where the model may not attend: above the diagonal, and beyond mistral's window."""
    if architecture not in DECODERS:
        return torch.zeros(size, size, dtype=torch.bool)
    query, key = torch.arange(size)[:, None], torch.arange(size)[None, :]
    masked = key > query
    if architecture == "mistral":
        masked |= key <= query - SLIDING_WINDOW
    return masked


@pytest.fixture
def cli_env(monkeypatch):
    """No network and no user settings for the in-process `attn` runs (ATTN_DEBUG would show tracebacks)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for name in ("ATTN_MODEL", "ATTN_DEVICE", "ATTN_DEBUG"):
        monkeypatch.delenv(name, raising=False)


def attn(*args: str):
    return CliRunner().invoke(app, list(args))


def assert_one_error_line(result) -> str:
    """Exit 1, one `error: ...` line on stderr, nothing on stdout, no traceback. Returns the line."""
    assert result.exit_code == 1, f"exit {result.exit_code}\n{result.output}"
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.stdout == "" and "Traceback" not in result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


# --- parity with transformers -------------------------------------------------------------------


@pytest.mark.parametrize("implementation", ["sdpa", "eager"])
def test_weights_match_transformers_eager(tiny, implementation):
    backend = load_backend(str(tiny.directory), device="cpu")
    backend.model.set_attn_implementation(implementation)
    report = Model(backend).inspect(SENTENCE)
    expected = eager_attentions(tiny.directory, SENTENCE)
    got = report_weights(report)
    assert len(report.tokens) >= 10
    assert got.shape == expected.shape
    assert (got - expected).abs().max().item() <= TOLERANCE
    assert backend.model.config._attn_implementation == implementation  # restored after the capture


def test_architecture_and_dimensions(tiny, tiny_report):
    report, _ = tiny_report
    info = report.model
    assert info.architecture == tiny.architecture
    assert info.layers == 2 and info.head_dim * info.heads == 64
    assert report.dtype == "float32" and report.device == "cpu"


# --- masks ------------------------------------------------------------------------------------------


def test_causal_flag_and_masked_cells_in_json(tiny, tiny_report):
    report, document = tiny_report
    assert report.model.causal is tiny.decoder
    assert document["model"]["causal"] is tiny.decoder
    size = len(document["tokens"])
    masked = masked_by_model(tiny.architecture, size)
    if tiny.architecture == "mistral":  # the window really cuts: row T-1 sees only its last 4 keys
        assert int((~masked[-1]).sum()) == SLIDING_WINDOW
    for layer in document["layers"]:
        for head in layer["heads"]:
            for i in range(size):
                for j in range(size):
                    score, weight = head["scores"][i][j], head["weights"][i][j]
                    if masked[i, j]:
                        assert score is None, (layer["layer"], head["head"], i, j)
                        assert weight == 0.0
                    else:
                        assert score is not None, (layer["layer"], head["head"], i, j)
                assert math.fsum(head["weights"][i]) == pytest.approx(1.0, abs=1e-5)


@pytest.fixture(scope="module")
def mistral_dir(tmp_path_factory) -> Path:
    return save_tiny(tmp_path_factory.mktemp("tiny-mistral-cli"), _config("mistral"))


def test_mistral_sliding_window_in_cli_json(mistral_dir, cli_env):
    result = attn("inspect", SENTENCE, "--model", str(mistral_dir), "--device", "cpu", "--json")
    assert result.exit_code == 0, f"exit {result.exit_code}\n{result.output}\n{result.exception!r}"
    document = json.loads(result.stdout)
    assert document["model"]["causal"] is True and document["model"]["kv_heads"] == KV_HEADS
    size = len(document["tokens"])
    masked = masked_by_model("mistral", size)
    for layer in document["layers"]:
        for head in layer["heads"]:
            scores = torch.tensor([[math.nan if s is None else s for s in row] for row in head["scores"]])
            weights = torch.tensor(head["weights"])
            assert torch.equal(scores.isnan(), masked)
            assert torch.equal(weights[masked], torch.zeros(int(masked.sum())))


@pytest.fixture(scope="module")
def qwen2_mixed_dir(tmp_path_factory) -> Path:
    """Qwen2 with layer_types [full_attention, sliding_attention]: the mask differs from layer to layer."""
    return save_tiny(tmp_path_factory.mktemp("tiny-qwen2-mixed"), qwen2_mixed_config())


def qwen2_mixed_config():
    config = transformers.Qwen2Config(
        **GQA, use_sliding_window=True, sliding_window=SLIDING_WINDOW, max_window_layers=1
    )
    assert config.layer_types == ["full_attention", "sliding_attention"]
    return config


def test_per_layer_masks_of_mixed_full_and_sliding_layers(qwen2_mixed_dir):
    report = attn_cli.load(str(qwen2_mixed_dir), device="cpu").inspect(SENTENCE)
    assert (report_weights(report) - eager_attentions(qwen2_mixed_dir, SENTENCE)).abs().max().item() <= TOLERANCE
    size = len(report.tokens)
    full, sliding = masked_by_model("llama", size), masked_by_model("mistral", size)
    for layer, expected in zip(report.to_json_dict()["layers"], (full, sliding)):
        for head in layer["heads"]:
            assert torch.equal(torch.tensor([[s is None for s in row] for row in head["scores"]]), expected)


# --- generate ---------------------------------------------------------------------------------------

PROMPT = "the cat"
GENERATORS = {  # every decoder above, saved with its language-model head
    "gpt2": lambda: _config("gpt2"),
    "llama": lambda: _config("llama"),
    "qwen2": lambda: _config("qwen2"),
    "qwen3": lambda: _config("qwen3"),
    "mistral": lambda: _config("mistral"),  # window 4: the prompt is already as long
    "mistral-window-9": lambda: _config("mistral", sliding_window=9),  # the prompt fits; generation crosses it
    "qwen2-mixed": qwen2_mixed_config,  # a full layer, then a sliding one
}


@pytest.mark.parametrize(
    "name", [pytest.param(name, marks=NEEDS_QWEN3) if name == "qwen3" else name for name in GENERATORS]
)
def test_generated_rows_equal_one_forward_pass(name, tmp_path):
    """Each row recorded during generate() (a KV cache; a sliding layer's cache keeps only the window) is the
    row of one eager forward pass over prompt + generated ids, its keys at their own positions."""
    config = GENERATORS[name]()
    directory = save_tiny(tmp_path, config, auto=transformers.AutoModelForCausalLM)
    report = attn_cli.load(str(directory), device="cpu").generate(PROMPT, max_new_tokens=8)
    size = len(report.tokens)
    assert size == report.prompt_tokens + 8
    assert_generated_rows_equal_one_forward_pass(directory, report)
    window = getattr(config, "sliding_window", None)
    if name == "mistral-window-9":
        assert report.prompt_tokens <= window  # the prompt's step saw every key; later steps lost some
    if window is not None:  # the text outgrew the window: the last step (query T-2) saw only the window's keys
        assert window < size - 1
        last_layer = report.layers[-1].heads[0].weights  # (N, T)
        assert (~np.isnan(last_layer[-1])).nonzero()[0].tolist() == list(range(size - 1 - window, size - 1))


def test_gpt2_layer_dependent_scale_is_the_models(tmp_path):
    """scale_attn_by_inverse_layer_idx: layer l multiplies by 1/(√D·(l+1)); attn reports and uses that."""
    directory = save_tiny(tmp_path, _config("gpt2", scale_attn_by_inverse_layer_idx=True))
    report = attn_cli.load(str(directory), device="cpu").inspect(SENTENCE)
    for layer in report.layers:
        for head in layer.heads:
            assert head.scale == pytest.approx(16**-0.5 / (layer.layer + 1), rel=1e-6)
    assert (report_weights(report) - eager_attentions(directory, SENTENCE)).abs().max().item() <= TOLERANCE


# --- grouped-query attention ---------------------------------------------------------------------


def test_kv_heads_and_shared_k_symmetry(tiny):
    """GQA: 8 query heads read 2 kv heads (head // 4); MHA: one each. shared-k is symmetric either way."""
    backend = load_backend(str(tiny.directory), device="cpu")
    report = Model(backend).inspect(SENTENCE, variant="shared-k")
    info = report.model
    if tiny.architecture in GQA_ARCHITECTURES:
        assert (info.heads, info.kv_heads) == (HEADS, KV_HEADS)
    else:
        assert info.kv_heads == info.heads == 4
    group = info.heads // info.kv_heads
    assert len(report.heads()) == info.layers * info.heads
    for _, head in report.heads():
        assert head.kv_head == head.head // group
        assert head.symmetry.relative <= 1e-6 and head.symmetry.symmetric


def test_heads_of_a_group_read_the_same_key(tiny):
    """With include_qkv, query heads of one kv group carry the same k; different groups' keys differ."""
    backend = load_backend(str(tiny.directory), device="cpu")
    document = Model(backend).inspect(SENTENCE, include=("qkv",)).to_json_dict()
    group = document["model"]["heads"] // document["model"]["kv_heads"]
    for layer in document["layers"]:
        heads = layer["heads"]
        assert [head["kv_head"] for head in heads] == [index // group for index in range(len(heads))]
        for head in heads:
            assert head["k"] == heads[head["kv_head"] * group]["k"]
        first_keys = [heads[kv * group]["k"] for kv in range(document["model"]["kv_heads"])]
        assert all(a != b for n, a in enumerate(first_keys) for b in first_keys[n + 1 :])
        queries = [head["q"] for head in heads]
        assert all(a != b for n, a in enumerate(queries) for b in queries[n + 1 :])  # every head its own q


# --- RoPE ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory) -> Path:
    return save_tiny(tmp_path_factory.mktemp("tiny-llama-rope"), _config("llama"))


def test_rope_scores_are_post_rotation_and_position_zero_is_unrotated(llama_dir):
    report = attn_cli.load(str(llama_dir), device="cpu").inspect(SENTENCE, include=("qkv",))
    document = report.to_json_dict()
    size = len(document["tokens"])
    masked = masked_by_model("llama", size)
    off_diagonal = ~masked & ~torch.eye(size, dtype=torch.bool)

    model = reference_model(llama_dir)
    with torch.no_grad():
        hidden = model(**encode(llama_dir, SENTENCE), output_hidden_states=True).hidden_states
        for layer in document["layers"]:
            block = model.layers[layer["layer"]]
            x = block.input_layernorm(hidden[layer["layer"]][0])  # (T, d_model)
            q_before = block.self_attn.q_proj(x).view(size, HEADS, -1).transpose(0, 1)  # (H, T, D)
            k_before = block.self_attn.k_proj(x).view(size, KV_HEADS, -1).transpose(0, 1)  # (H_kv, T, D)
            for head in layer["heads"]:
                q, k = torch.tensor(head["q"]), torch.tensor(head["k"])  # post-RoPE, (T, D)
                scale = head["scale"]
                reported = torch.tensor([[math.nan if s is None else s for s in row] for row in head["scores"]])
                post = q @ k.T * scale
                assert (post - reported)[~masked].abs().max().item() <= 1e-4

                pre_q, pre_k = q_before[head["head"]], k_before[head["kv_head"]]
                pre = pre_q @ pre_k.T * scale
                # Rotation: the positions > 0 move, position 0 does not, lengths are kept.
                assert (pre - post)[off_diagonal].abs().max().item() > 1e-2
                assert (q[0] - pre_q[0]).abs().max().item() <= 1e-5
                assert (k[0] - pre_k[0]).abs().max().item() <= 1e-5
                assert (q[1:] - pre_q[1:]).abs().max().item() > 1e-3
                assert torch.allclose(q.norm(dim=-1), pre_q.norm(dim=-1), atol=1e-4)
                # Relative positions: a token with itself (distance 0) scores as if unrotated.
                assert torch.allclose(pre.diagonal(), post.diagonal(), atol=1e-4)


# --- dtypes ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bfloat16", "float16"])
def test_half_precision_llama_loads_as_saved(tmp_path, dtype):
    directory = save_tiny(tmp_path, _config("llama"), dtype=dtype)
    report = attn_cli.load(str(directory), device="cpu", dtype="auto").inspect(SENTENCE)
    assert report.dtype == str(dtype).removeprefix("torch.")
    expected = eager_attentions(directory, SENTENCE, dtype=torch.float32)
    got = report_weights(report)
    assert got.dtype == torch.float32
    assert (got - expected).abs().max().item() <= 2e-2
    assert (got.sum(dim=-1) - 1).abs().max().item() <= 1e-5


# --- position limits ---------------------------------------------------------------------------------


def test_tokenizer_limit_does_not_cap_a_model_with_more_positions(tmp_path):
    directory = save_tiny(tmp_path, _config("llama", max_position_embeddings=4096))
    config_path = directory / "tokenizer_config.json"
    tokenizer_config = json.loads(config_path.read_text())
    tokenizer_config["model_max_length"] = 16
    config_path.write_text(json.dumps(tokenizer_config))
    assert transformers.AutoTokenizer.from_pretrained(directory, local_files_only=True).model_max_length == 16
    report = attn_cli.load(str(directory), device="cpu").inspect(LONG_TEXT, layers="0", heads="0")
    assert report.model.max_positions == 4096
    assert len(report.tokens) == 102 and report.truncated_from is None


def test_bert_with_32_positions_refuses_100_words(tmp_path, cli_env):
    directory = save_tiny(tmp_path, _config("bert", max_position_embeddings=32))
    result = attn("inspect", LONG_TEXT, "--model", str(directory), "--device", "cpu", "--json")
    message = assert_one_error_line(result)
    assert "positions" in message and "--truncate" in message
    numbers = re.findall(r"\b\d+\b", message.replace(str(directory), "MODEL"))
    assert "102" in numbers and "32" in numbers  # the text's length and the model's limit


ROBERTA_POSITIONS = 20  # RoBERTa numbers positions from pad_token_id + 1 = 2: only 18 tokens fit
ROBERTA_TOO_LONG = " ".join(["word"] * 17)  # 19 tokens with [CLS] and [SEP]: fewer than 20, more than 18


@pytest.fixture(scope="module")
def roberta_20_dir(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("tiny-roberta-20")
    return save_tiny(directory, _config("roberta", max_position_embeddings=ROBERTA_POSITIONS))


def test_roberta_fits_its_usable_positions(roberta_20_dir):
    """18 tokens use positions 2 … 19, the last of its 20 embeddings: that runs, and matches eager."""
    text = " ".join(["word"] * 16)
    report = attn_cli.load(str(roberta_20_dir), device="cpu").inspect(text)
    assert len(report.tokens) == ROBERTA_POSITIONS - 2
    assert (report_weights(report) - eager_attentions(roberta_20_dir, text)).abs().max().item() <= TOLERANCE


def test_roberta_refuses_more_tokens_than_its_usable_positions(roberta_20_dir, cli_env):
    """RoBERTa numbers positions from pad_token_id + 1 = 2: only 18 of its 20 embeddings are usable."""
    result = attn("inspect", ROBERTA_TOO_LONG, "--model", str(roberta_20_dir), "--device", "cpu", "--json")
    message = assert_one_error_line(result)
    assert "positions" in message and "--truncate" in message


def test_roberta_truncates_to_its_usable_positions(roberta_20_dir):
    report = attn_cli.load(str(roberta_20_dir), device="cpu").inspect(ROBERTA_TOO_LONG, truncate=True)
    assert len(report.tokens) == ROBERTA_POSITIONS - 2 and report.truncated_from == 19


def test_a_layer_whose_keys_are_not_the_tokens_is_refused_by_every_capture_and_the_others_can_be_chosen():
    """DeepSeek-V4's compressed sparse attention (its layer 1) attends over pooled blocks of keys beside the tokens
    (21 keys for 17 tokens): inspect's capture and heads' (a padded batch handed layer by layer) refuse it in one
    line naming the layer; --layer 0 (sliding-window attention over the tokens) is read."""
    from architectures_sweep import TEXT, _tiny_model, _tokenizer

    from attn_cli.backends.hf import HFBackend
    from attn_cli.plumbing.errors import UnsupportedModel

    backend = HFBackend("deepseek_v4", _tiny_model("deepseek_v4"), _tokenizer(), "cpu")
    for run in (lambda: Model(backend).inspect(TEXT), lambda: Model(backend).heads([TEXT])):
        with pytest.raises(UnsupportedModel, match=r"\(layer 1\) attends over 21 keys for 17 tokens"):
            run()
    assert {profile.layer for profile in Model(backend).heads([TEXT], layers="0").heads} == {0}
