"""Attention forms beyond q·kᵀ·scale + a boolean mask, each exact against transformers' eager attention.

Each model is a tiny random one built from its config (2 layers, hidden 64, its distinctive feature on), saved
with the MiniLM tokenizer and loaded the way `attn --model PATH` loads it; its weights are compared head by head
with eager `output_attentions=True` on one 17-token text. Tolerance: max |Δ| ≤ 1e-5 (float32).

- sparse-indexer attention (DeepSeek-V3.2's lightning indexer): the capture must take the branch the model takes
  under its own implementation, and the model's output with capture must equal its output without;
- hybrids whose layer 0 is not softmax attention: the attention layers by their true index, the others listed.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers
from conftest import copy_minilm_tokenizer
from test_architectures import assert_one_error_line, attn

import attn_cli
from attn_cli.backends import capture_hook
from attn_cli.backends.capture_hook import branches_on_name, capture_difference

TOLERANCE = 1e-5
TEXT = "The quick brown fox jumps over the lazy dog near the quiet river bank."  # 17 tokens with [CLS], [SEP]
TOP_K = 4  # the indexer's selection: 4 keys of up to 17

# What every tiny config gets, where the config has the setting.
SMALL = dict(
    vocab_size=30522,
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    intermediate_size=128,
    max_position_embeddings=128,
    initializer_range=0.1,  # scores spread over a few units: a wrong mask or scale shows
    head_dim=16,
    moe_intermediate_size=32,
    n_routed_experts=4,
    num_experts=4,
    num_local_experts=4,
    num_experts_per_tok=2,
    n_shared_experts=1,
    kv_lora_rank=16,
    q_lora_rank=16,
    qk_rope_head_dim=8,
    qk_nope_head_dim=8,
    v_head_dim=16,
    index_topk=TOP_K,
    index_n_heads=2,
    index_head_dim=16,
    n_group=1,
    topk_group=1,
    first_k_dense_replace=0,
)

# model type -> what switches its feature on
SPARSE = {"deepseek_v32": dict(num_key_value_heads=4), "glm_moe_dsa": dict(num_key_value_heads=4)}
HYBRIDS = {
    "qwen3_next": dict(layer_types=["linear_attention", "full_attention"]),
    "qwen3_5_text": dict(layer_types=["linear_attention", "full_attention"]),
    "jamba": dict(attn_layer_period=2, attn_layer_offset=1, expert_layer_period=2, expert_layer_offset=1),
    "minimax": dict(layer_types=["linear_attention", "full_attention"]),
    "lfm2": dict(layer_types=["conv", "full_attention"]),
    "granitemoehybrid": dict(layer_types=["mamba", "attention"]),
    "recurrent_gemma": dict(block_types=["recurrent", "attention"]),
    "zamba2": dict(layers_block_type=["mamba", "hybrid"]),  # its shared attention block says layer_idx = -1
}


def tiny_config(kind: str, **overrides):
    config_class = transformers.CONFIG_MAPPING[kind]
    default = config_class()
    settings = {name: value for name, value in SMALL.items() if hasattr(default, name)}
    return config_class(**{**settings, **overrides})


def save_model(directory, kind: str, **overrides):
    torch.manual_seed(0)
    transformers.AutoModel.from_config(tiny_config(kind, **overrides)).eval().save_pretrained(directory)
    copy_minilm_tokenizer(directory)
    return directory


def eager_attentions(directory, layers: list[int] | None = None, text: str = TEXT) -> list[torch.Tensor]:
    """The attention layers' (H, T, T) weights from eager `output_attentions`, in layer order; layers: which of
    them, where the model gives one entry per layer (MiniMax's linear layers hand back their own kind)."""
    model = transformers.AutoModel.from_pretrained(directory, attn_implementation="eager").eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    with torch.no_grad():
        out = model(**tokenizer(text, return_tensors="pt"), output_attentions=True, use_cache=False)
    if layers is not None and len(out.attentions) == model.config.num_hidden_layers:
        return [out.attentions[layer][0] for layer in layers]
    return [weights[0] for weights in out.attentions if weights is not None]


def report_weights(report) -> list[torch.Tensor]:
    return [torch.from_numpy(np.stack([head.weights for head in layer.heads])) for layer in report.layers]


def max_difference(got: list[torch.Tensor], expected: list[torch.Tensor]) -> float:
    assert len(got) == len(expected) and all(a.shape == b.shape for a, b in zip(got, expected))
    return max(float((a - b).abs().max()) for a, b in zip(got, expected))


# --- sparse-indexer attention: the capture takes the model's own branch --------------------------------------


@pytest.fixture(scope="module", params=sorted(SPARSE))
def sparse_dir(request, tmp_path_factory):
    return save_model(tmp_path_factory.mktemp(request.param), request.param, **SPARSE[request.param])


def test_sparse_indexer_weights_are_the_models_top_k(sparse_dir):
    """Each query attends its indexer's 4 keys only (fewer where fewer came before it), exactly as eager."""
    backend = attn_cli.load(str(sparse_dir), device="cpu")
    report = backend.inspect(TEXT)
    assert len(report.tokens) == 17
    assert max_difference(report_weights(report), eager_attentions(sparse_dir)) <= TOLERANCE
    for layer in report.layers:
        for head in layer.heads:
            attended = (~np.isnan(head.scores)).sum(axis=1)  # the allowed keys of each row
            assert attended.max() == TOP_K and (attended <= np.minimum(np.arange(17) + 1, TOP_K)).all()


def test_capture_leaves_the_sparse_model_unchanged(sparse_dir):
    """The guard's measure: the model's last hidden state with attn's capture equals it without."""
    model = transformers.AutoModel.from_pretrained(sparse_dir).eval()  # sdpa, as attn loads it
    tokenizer = transformers.AutoTokenizer.from_pretrained(sparse_dir)
    assert branches_on_name(model)
    assert capture_difference(model, dict(tokenizer(TEXT, return_tensors="pt"))) <= TOLERANCE


def test_a_capture_that_changes_the_model_is_refused_in_one_line(sparse_dir, monkeypatch, cli_env):
    """Without the sparse branch taken (as before the fix) the model runs dense under capture: refused, no numbers."""
    monkeypatch.setattr(capture_hook, "sparse_selection", lambda name, key, mask, kwargs: (mask, kwargs, mask))
    line = assert_one_error_line(attn("inspect", TEXT, "--model", str(sparse_dir), "--device", "cpu", "--json"))
    assert "changes the model's output" in line and "max |Δ|" in line


def test_models_that_do_not_branch_on_the_name_are_not_checked(tmp_path):
    """The guard costs nothing where it is not needed: Llama's and BERT's code never compares the name."""
    for config in (
        transformers.LlamaConfig(**{**SMALL, "vocab_size": 128}),
        transformers.BertConfig(hidden_size=64, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64),
    ):
        assert not branches_on_name(transformers.AutoModel.from_config(config))


@pytest.fixture
def cli_env(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for name in ("ATTN_MODEL", "ATTN_DEVICE", "ATTN_DEBUG"):
        monkeypatch.delenv(name, raising=False)


# --- hybrids: attention layers by their true index ---------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(HYBRIDS))
def test_hybrid_attention_layers_by_true_index(kind, tmp_path):
    """Layer 0 is linear attention / a state-space or convolution mixer: attn shows layer 1, exactly as eager,
    and names layer 0 as having no attention matrix."""
    directory = save_model(tmp_path, kind, **HYBRIDS[kind])
    backend = attn_cli.load(str(directory), device="cpu")
    assert backend.info.no_attention_layers == [0] and backend.info.attention_layers == [1]
    report = backend.inspect(TEXT)
    assert [layer.layer for layer in report.layers] == [1]
    assert max_difference(report_weights(report), eager_attentions(directory, [1])) <= TOLERANCE
    assert report.to_json_dict()["model"]["no_attention_layers"] == [0]


@pytest.fixture(scope="module")
def hybrid_dir(tmp_path_factory):
    return save_model(tmp_path_factory.mktemp("zamba2"), "zamba2", **HYBRIDS["zamba2"])


@pytest.mark.parametrize("command", ["inspect", "heads", "rollout"])
def test_hybrid_commands_list_the_layers_without_attention(hybrid_dir, command, cli_env):
    result = attn(command, TEXT, "--model", str(hybrid_dir), "--device", "cpu")
    assert result.exit_code == 0, result.output
    assert "layer 0: no attention matrix (linear attention / state space); attention layers 1" in result.stdout
    if command == "rollout":
        assert "attention layers only" in result.stdout


def test_hybrid_diagnose_has_no_sink_rate_for_layers_without_attention(hybrid_dir, cli_env):
    """The model's sink rate is over its attention layers; layer 0's is null (not a 0 that says 'no sink')."""
    import json

    result = attn("diagnose", TEXT, "--model", str(hybrid_dir), "--device", "cpu", "--json")
    assert result.exit_code == 0, result.output
    layers = json.loads(result.stdout)["layers"]
    assert layers[0]["sink_rate"] is None and layers[0]["first_token"] == []
    assert layers[1]["sink_rate"] is not None and len(layers[1]["first_token"]) == 4
    terminal = attn("diagnose", TEXT, "--model", str(hybrid_dir), "--device", "cpu")
    assert terminal.exit_code == 0 and "L0 no attention matrix" in terminal.stdout


def test_hybrid_layer_without_attention_is_refused_in_one_line(hybrid_dir, cli_env):
    """A usage mistake (exit 2), one line naming the layers that have attention."""
    result = attn("inspect", TEXT, "--model", str(hybrid_dir), "--device", "cpu", "--layer", "0")
    assert result.exit_code == 2 and result.stdout == "" and "Traceback" not in result.output
    [line] = result.stderr.splitlines()
    assert "layer 0 of zamba2 has no attention matrix" in line and "attention layers are 1" in line


# --- attention-logit softcapping: cap·tanh(q·kᵀ·scale / cap) before the mask ---------------------------------

CAP = 0.1  # small enough that tanh bends the tiny models' scores (the checkpoints' 50 would not touch them)


@pytest.mark.parametrize("kind", ["gemma2", "vaultgemma"])
def test_softcapped_scores_are_the_models(kind, tmp_path):
    directory = save_model(tmp_path, kind, attn_logit_softcapping=CAP)
    report = attn_cli.load(str(directory), device="cpu").inspect(TEXT, include=("qkv",))
    assert max_difference(report_weights(report), eager_attentions(directory)) <= TOLERANCE
    head = report.layers[0].heads[0]
    assert head.formula == f"{CAP:g}·tanh(q·kᵀ·{head.scale:.4g}/{CAP:g})"
    raw = torch.from_numpy(head.tensors["q"] @ head.tensors["k"].T) * head.scale  # beside them: q·kᵀ·scale
    allowed = ~np.isnan(head.scores)
    capped = torch.tanh(raw / CAP) * CAP
    assert float((capped - torch.from_numpy(np.nan_to_num(head.scores)))[allowed].abs().max()) <= 1e-5
    assert float((raw - capped)[allowed].abs().max()) > 0.01  # the cap changes the scores here


def test_softcapped_model_through_heads_and_the_terminal(tmp_path, cli_env):
    directory = save_model(tmp_path, "gemma2", attn_logit_softcapping=CAP)
    result = attn("inspect", TEXT, "--model", str(directory), "--device", "cpu", "--layer", "0", "--head", "0")
    assert result.exit_code == 0, result.output
    assert f"Symmetry of S = {CAP:g}·tanh(q·kᵀ·" in result.stdout
    assert attn("heads", TEXT, "--model", str(directory), "--device", "cpu").exit_code == 0


# --- learned sinks (s_aux): one more logit in every row's softmax ------------------------------------------


def save_with_sinks(directory, kind: str, **overrides):
    """The model with sink logits large enough to take a visible share (they start at zero or near it)."""
    torch.manual_seed(0)
    model = transformers.AutoModel.from_config(tiny_config(kind, **overrides)).eval()
    with torch.no_grad():
        for module in model.modules():
            if isinstance(getattr(module, "sinks", None), torch.nn.Parameter):
                module.sinks.copy_(torch.linspace(-1.0, 3.0, module.sinks.numel()))
    model.save_pretrained(directory)
    copy_minilm_tokenizer(directory)
    return directory


@pytest.mark.parametrize("kind", ["gpt_oss", "mimo_v2_flash"])
def test_sink_share_is_the_softmax_column_eager_drops(kind, tmp_path):
    """Weights as eager returns them (rows sum to 1 − p_sink); p_sink per row in the report and the JSON.
    MiMo-V2-Flash's sliding layer (1) has sinks and twice the kv heads of its full layer (0)."""
    directory = save_with_sinks(tmp_path, kind)
    report = attn_cli.load(str(directory), device="cpu").inspect(TEXT)
    assert max_difference(report_weights(report), eager_attentions(directory)) <= TOLERANCE
    document = report.to_json_dict()
    layer = report.layers[-1]
    for head, record in zip(layer.heads, document["layers"][-1]["heads"]):
        assert head.sink is not None and float(head.sink.max()) > 0.05
        assert np.abs(head.weights.sum(axis=1) + head.sink - 1).max() <= TOLERANCE
        assert record["sink_mass"] == pytest.approx(float(head.sink.mean()), abs=1e-6)
    if kind == "mimo_v2_flash":
        assert report.layers[0].heads[0].sink is None  # its full-attention layer has none


@pytest.mark.parametrize("kind", ["gpt_oss", "mimo_v2_flash"])
def test_head_scores_of_a_sink_model_are_those_of_its_eager_weights(kind, tmp_path):
    """attn heads puts the sink logit in each row's softmax, as the model does: every head score equals the same
    score computed from eager's weights (rows summing to 1 − the sink's share), over a padded batch of two."""
    from attn_cli.math.head_scores import head_scores, token_flags
    from attn_cli.math.score_names import SCORES

    directory = save_with_sinks(tmp_path, kind)
    config = transformers.AutoConfig.from_pretrained(directory)
    model = attn_cli.load(str(directory), device="cpu")
    short = "The fox jumps, the fox runs."
    report = model.heads([TEXT, short])
    for layer, weights in enumerate(eager_attentions(directory)):
        sliding = config.layer_types[layer] == "sliding_attention"  # key j seen from i when i − window < j <= i
        per_text = []
        for text, eager in ((TEXT, weights), (short, eager_attentions(directory, text=short)[layer])):
            tokens = model.inspect(text, layers=str(layer), heads="0").tokens
            count = len(tokens)
            allowed = torch.ones(count, count, dtype=torch.bool).tril()
            if sliding:
                allowed &= torch.ones(count, count, dtype=torch.bool).triu(1 - config.sliding_window)
            allowed = allowed[None]  # (1, T, T)
            values, _ = head_scores(eager[None], allowed, token_flags([tokens]))  # (1, H, len(SCORES))
            per_text.append(values[0])
        expected = torch.stack(per_text).nanmean(0)  # the mean over the texts that define each score
        for head in range(expected.shape[0]):
            got = report.head(layer, head).scores
            for index, name in enumerate(SCORES):
                if got[name] is not None:
                    assert got[name] == pytest.approx(float(expected[head, index]), abs=1e-5), (layer, head, name)
    assert any(float(weights.sum(-1).min()) < 0.95 for weights in eager_attentions(directory))  # sinks take a share
    # each head's kv head by its layer's own count (MiMo's sliding layer 1 has twice the kv heads of layer 0), as
    # inspect labels it from the same layer's q and k
    inspected = model.inspect(TEXT)
    stored = model.heads([TEXT], store=tmp_path / "store")  # … and so does a store's heads table
    import pyarrow.parquet as pq

    table = pq.read_table(tmp_path / "store" / "heads.parquet", columns=["layer", "head", "kv_head"]).to_pylist()
    in_store = {(row["layer"], row["head"]): row["kv_head"] for row in table}
    for seen in inspected.layers:
        labels = [head.kv_head for head in seen.heads]
        assert [report.head(seen.layer, head.head).kv_head for head in seen.heads] == labels, seen.layer
        assert [stored.head(seen.layer, head.head).kv_head for head in seen.heads] == labels, seen.layer
        assert [in_store[seen.layer, head.head] for head in seen.heads] == labels, seen.layer


@pytest.mark.parametrize("kind", ["gpt_oss", "mimo_v2_flash"])
def test_generated_rows_of_a_sink_model_equal_one_forward_pass(kind, tmp_path):
    """attn generate puts the sink logit in each step's softmax: every row is eager's (the keys' share, 1e-5)."""
    from conftest import assert_generated_rows_equal_one_forward_pass

    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(tiny_config(kind)).eval()
    with torch.no_grad():
        for module in model.modules():
            if isinstance(getattr(module, "sinks", None), torch.nn.Parameter):
                module.sinks.copy_(torch.linspace(-1.0, 3.0, module.sinks.numel()))
    model.save_pretrained(tmp_path)
    copy_minilm_tokenizer(tmp_path)
    report = attn_cli.load(str(tmp_path), device="cpu").generate("the fox jumps over", max_new_tokens=4)
    assert len(report.tokens) - report.prompt_tokens == 4
    assert_generated_rows_equal_one_forward_pass(tmp_path, report)
    weights = report.layers[-1].heads[-1].weights  # the sink takes a share of the last layer's rows
    assert float(np.nansum(weights, axis=-1).max()) < 0.95
    # each head's kv head by its layer's own count (MiMo's sliding layer 1 has twice the kv heads of layer 0),
    # as inspect labels it from the same layer's q and k
    inspected = attn_cli.load(str(tmp_path), device="cpu").inspect("the fox jumps over")
    for layer, seen in zip(report.layers, inspected.layers):
        assert [head.kv_head for head in layer.heads] == [head.kv_head for head in seen.heads], layer.layer


def test_steps_of_a_sink_model_end_in_eager_weights_and_say_the_sink(tmp_path):
    """attn steps' softmax stage puts the sink logit in each row: the head's weights are eager's (1e-5)."""
    directory = save_with_sinks(tmp_path, "gpt_oss")
    eager = eager_attentions(directory)
    for layer, head in ((0, 3), (1, 1)):
        report = attn_cli.load(str(directory), device="cpu").steps(TEXT, layer=layer, head=head)
        softmax = next(stage for stage in report.stages if stage.name == "softmax")
        assert "the learned sink" in softmax.note
        assert float((torch.from_numpy(softmax.values) - eager[layer][head]).abs().max()) <= TOLERANCE


def test_diagnose_of_a_sink_model_reads_the_first_token_weight_of_eager(tmp_path, cli_env):
    """diagnose's α (each head's mean weight on token 0) is eager's, the sink's share on no token (1e-5)."""
    directory = save_with_sinks(tmp_path, "gpt_oss")
    report = attn_cli.load(str(directory), device="cpu").diagnose(TEXT)
    for layer, weights in zip(report.layers, eager_attentions(directory)):
        assert layer.first_token == pytest.approx(weights[:, :, 0].mean(-1).tolist(), abs=TOLERANCE)
    for command in ("inspect", "heads", "diagnose", "steps"):
        result = attn(command, TEXT, "--model", str(directory), "--device", "cpu")
        assert result.exit_code == 0, (command, result.output)


def test_a_sink_that_only_gates_the_output_leaves_plain_weights(tmp_path):
    """granite_swa scales each head's output by sigmoid(logsumexp − sink): its weights are a plain softmax."""
    directory = save_with_sinks(tmp_path, "granite_swa")
    report = attn_cli.load(str(directory), device="cpu").inspect(TEXT)
    assert max_difference(report_weights(report), eager_attentions(directory)) <= TOLERANCE
    assert all(head.sink is None for _, head in report.heads())


# --- differential attention: what the weights shown are not -------------------------------------------------


def test_differential_attention_says_its_weights_are_each_softmax_alone(tmp_path, cli_env):
    directory = save_model(tmp_path, "diffllama")
    report = attn_cli.load(str(directory), device="cpu").inspect(TEXT)
    assert max_difference(report_weights(report), eager_attentions(directory)) <= TOLERANCE
    assert "softmax(S₁) − λ·softmax(S₂)" in report.to_json_dict()["model"]["attention_note"]
    result = attn("inspect", TEXT, "--model", str(directory), "--device", "cpu", "--layer", "0", "--head", "0")
    assert result.exit_code == 0
    said = " ".join(result.stdout.split())  # the note wraps at the terminal's width
    assert "note: differential attention: each head's output is softmax(S₁) − λ·softmax(S₂)" in said
    assert "not their difference" in said


# --- a per-head float mask: Doge's learned per-key bias and per-head top-k ---------------------------------


def save_doge(directory):
    """Doge with its dynamic mask switched on: A (zero at init) random, so each head's per-key bias differs, and a
    top-4 per head and query (keep_window_size 4 of 17 keys)."""
    torch.manual_seed(0)
    model = transformers.AutoModel.from_config(tiny_config("doge", keep_window_size=TOP_K)).eval()
    with torch.no_grad():
        for module in model.modules():
            if isinstance(getattr(module, "A", None), torch.nn.Parameter):
                module.A.copy_(torch.linspace(-2.0, 1.5, module.A.numel()))
    model.save_pretrained(directory)
    copy_minilm_tokenizer(directory)
    return directory


def test_per_head_float_mask_is_read_per_head_with_its_bias(tmp_path, cli_env):
    directory = save_doge(tmp_path)
    report = attn_cli.load(str(directory), device="cpu").inspect(TEXT)
    assert max_difference(report_weights(report), eager_attentions(directory)) <= TOLERANCE
    heads = report.layers[0].heads
    kept = [~np.isnan(head.scores) for head in heads]  # each head's own top-4 of its allowed keys
    assert all(int(allowed.sum(axis=1).max()) == TOP_K for allowed in kept)
    assert any((kept[0] != other).any() for other in kept[1:])  # the heads pick different keys
    assert heads[0].formula.endswith("+ the model's per-head mask bias")
    eager = eager_attentions(directory)
    for head in (0, 3):  # attn steps: the head's bias, its own keys, then eager's weights
        walked = attn_cli.load(str(directory), device="cpu").steps(TEXT, layer=1, head=head)
        names = [stage.name for stage in walked.stages]
        assert names.index("+ bias") < names.index("mask") < names.index("softmax")
        softmax = walked.stages[names.index("softmax")].values
        assert float((torch.from_numpy(softmax) - eager[1][head]).abs().max()) <= TOLERANCE


def test_doge_generates_and_its_rows_equal_one_forward_pass(tmp_path):
    """Doge's attention modules declare no is_causal (its own mask function builds the causal mask), so it was
    taken for an encoder and refused by generate; a checkpoint with its causal-LM head is a decoder. Every
    generated row, with each head's bias and its own top-k keys, is eager's (1e-5)."""
    from conftest import assert_generated_rows_equal_one_forward_pass

    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(tiny_config("doge", keep_window_size=TOP_K)).eval()
    with torch.no_grad():
        for module in model.modules():
            if isinstance(getattr(module, "A", None), torch.nn.Parameter):
                module.A.copy_(torch.linspace(-2.0, 1.5, module.A.numel()))
    model.save_pretrained(tmp_path)
    copy_minilm_tokenizer(tmp_path)
    loaded = attn_cli.load(str(tmp_path), device="cpu")
    assert loaded.backend.info.causal
    report = loaded.generate("the fox jumps over the lazy dog and", max_new_tokens=4)
    assert len(report.tokens) - report.prompt_tokens == 4
    assert_generated_rows_equal_one_forward_pass(tmp_path, report)


def test_head_scores_of_a_per_head_mask_are_those_of_its_eager_weights(tmp_path):
    """attn heads adds Doge's bias to each head's scores and gives each head's softmax its own keys: every score
    equals the same score of eager's weights, rows and targets over the keys any head may attend (1e-5)."""
    from attn_cli.math.head_scores import head_scores, token_flags
    from attn_cli.math.score_names import SCORES

    directory = save_doge(tmp_path)
    model = attn_cli.load(str(directory), device="cpu")
    report = model.heads(TEXT)
    tokens = model.inspect(TEXT, layers="0", heads="0").tokens
    for layer, weights in enumerate(eager_attentions(directory)):
        any_head = (weights > 0).any(0)[None]  # (1, T, T): the keys some head may attend
        values, _ = head_scores(weights[None], any_head, token_flags([tokens]))  # (1, H, len(SCORES))
        for head in range(weights.shape[0]):
            got = report.head(layer, head).scores
            for index, name in enumerate(SCORES):
                if got[name] is not None:
                    assert got[name] == pytest.approx(float(values[0, head, index]), abs=1e-5), (layer, head, name)
    diagnosis = model.diagnose(TEXT)
    for layer, weights in zip(diagnosis.layers, eager_attentions(directory)):
        assert layer.first_token == pytest.approx(weights[:, :, 0].mean(-1).tolist(), abs=TOLERANCE)


def test_shared_blocks_are_not_taken_for_layers_without_attention(tmp_path):
    """ALBERT runs one shared block as every layer: each layer has attention (its one module sits at index 0 of a
    one-block list, not at layer 0 of a list of layers), and each is reported, exactly as eager."""
    directory = tmp_path / "albert"
    torch.manual_seed(0)
    config = transformers.AlbertConfig(
        vocab_size=30522, embedding_size=32, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128, max_position_embeddings=128, initializer_range=0.1,
    )  # fmt: skip
    transformers.AutoModel.from_config(config).eval().save_pretrained(directory)
    copy_minilm_tokenizer(directory)
    report = attn_cli.load(str(directory), device="cpu").inspect(TEXT)
    assert report.model.no_attention_layers == [] and [layer.layer for layer in report.layers] == [0, 1]
    assert max_difference(report_weights(report), eager_attentions(directory)) <= TOLERANCE
