"""The standing architecture sweep: a tiny random model of every model type in the installed transformers'
auto mappings, run through attn and compared with transformers' own eager `output_attentions`.

tests/test_architectures_all.py holds every type to its row of tests/architectures.toml; docs/models.md is
written from the same table (`python tests/architectures_sweep.py --docs`). `python
tests/architectures_sweep.py --observe [TYPE …]` prints what attn does with each type now, as table rows.

Which types: every type of the auto mappings attn loads a checkpoint with (MODEL_MAPPING_NAMES for a base
model, and the causal-LM, masked-LM and sequence-to-sequence LM mappings), plus the vision transformers of
backends/vision.py. The other mappings (audio classification, CTC, object detection, image-text-to-text …)
add only types of other modalities, which attn refuses from config.json before loading anything; a type of
the text mappings whose config is audio, video or vision–language is refused the same way, and is listed
as `excluded` with the refusal's words.

Each type's tiny model: the config class's defaults, with the sizes in SMALL (those the class has) and the
type's row of OVERRIDES, 2 layers, hidden 64, 4 heads (2 key/value heads), windows and chunks of 4 tokens
(against a 17-token text, so they cut), 4 experts. float32, CPU, seed 0; weights drawn with
initializer_range 0.1 so scores spread over a few units (a wrong scale or mask is a large difference).

Outcomes, what the test asserts of each:
  exact         attn's weights equal eager's (max |Δ| ≤ 1e-5) and the model's output with attn's capture
                equals its output without (≤ 1e-5): capture changed nothing
  weights-only  the weights equal eager's (≤ 1e-5), Q, K and V are not captured (the layer's attention does
                not go through transformers' attention interface); the reason is the table's
  refused       attn stops with one line (an AttnError), containing the table's reason (where the model's own
                forward cannot run on a plain text, BROS's without boxes, attn's refusal of it before it runs)
  excluded      another modality: attn refuses the config before loading, in one line
  wrong / crash a known defect being fixed (issue 36): the test asserts it is still so, so that the fix
                fails it and the row is updated; never a state to add a type in
  unbuilt       the sweep has no tiny model of the type (it needs a library the tests do not install, its class
                is missing from transformers, its defaults are a full model or do not fit SMALL, or its own
                forward fails on them): a row of OVERRIDES adds one where it can; asserted still so
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "tests" / "architectures.toml"
PAGE = ROOT / "docs" / "models.md"
TOLERANCE = 1e-5
TEXT = "a b c d e f g h i j k l m n o"  # 17 tokens with [CLS] and [SEP]; every id < 2048 (single characters)
TARGET = "p q r s t u"  # an encoder–decoder model's decoder input
VOCAB = 2048
OUTCOMES = ("exact", "weights-only", "refused", "excluded", "wrong", "crash", "unbuilt")

# The mappings whose model classes attn loads a text checkpoint with (hf.py: AutoModel, AutoModelForCausalLM,
# AutoModelForSeq2SeqLM; a classifier head sits on a base model of MODEL_MAPPING_NAMES)
TEXT_MAPPINGS = (
    "MODEL_MAPPING_NAMES",
    "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
    "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
    "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
)

# Sizes set where the config class has them (its defaults are often a full model's: 32 layers × 4096).
SMALL = dict(
    num_hidden_layers=2,
    n_layer=2,
    n_layers=2,
    num_layers=2,
    encoder_layers=2,
    decoder_layers=2,
    num_decoder_layers=2,
    hidden_size=64,
    d_model=64,
    n_embd=64,
    embed_dim=64,
    dim=64,
    emb_dim=64,
    embedding_size=64,
    num_attention_heads=4,
    n_head=4,
    n_heads=4,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    num_heads=4,
    num_key_value_heads=2,
    intermediate_size=128,
    ffn_dim=128,
    d_ff=128,
    n_inner=128,
    encoder_ffn_dim=128,
    decoder_ffn_dim=128,
    hidden_dim=128,
    vocab_size=VOCAB,
    max_position_embeddings=128,
    n_positions=128,
    sliding_window=4,
    mamba_n_heads=8,  # state-space layers of hybrids: 8 heads of 16 over a 128-wide inner state (64 × 2), chunks of 8
    mamba_d_ssm=128,
    mamba_d_state=16,
    mamba_chunk_size=8,
    index_topk=4,  # sparse "indexer" attention (DeepSeek-V3.2, GLM-MoE-DSA …): each query keeps its top 4 keys
    index_n_heads=4,
    index_head_dim=16,
    rotary_dim=8,  # GPT-J, CodeGen: the rotated part of a 16-wide head
    attention_chunk_size=4,
    num_experts=4,
    num_local_experts=4,
    n_routed_experts=4,
    num_experts_per_tok=2,
    n_group=1,  # expert groups (DeepSeek's routing): one group of the 4 experts
    topk_group=1,
    moe_intermediate_size=32,
    kv_lora_rank=16,
    q_lora_rank=32,
    qk_rope_head_dim=8,
    qk_nope_head_dim=8,
    v_head_dim=16,
    initializer_range=0.1,
    pad_token_id=0,
    bos_token_id=101,
    eos_token_id=102,
    decoder_start_token_id=0,
)

# Per type: sizes SMALL does not name, or defaults that do not fit it. Keep each row short, and say why.
_VISION = dict(
    hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, image_size=32, patch_size=8
)
_BERT = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=128,
    max_position_embeddings=128,
    initializer_range=0.1,
)
_T5GEMMA = dict(_BERT, num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=16, sliding_window=4)
OVERRIDES: dict[str, dict] = {
    # vision transformers: a 32 × 32 image in 8 × 8 patches (16 patches and the special tokens)
    **dict.fromkeys(
        ("vit", "deit", "dinov2", "dinov2_with_registers", "clip_vision_model", "siglip_vision_model"), _VISION
    ),
    # a whole CLIP or SigLIP checkpoint is read through its vision tower
    "clip": {"vision_config": _VISION},
    "siglip": {"vision_config": _VISION},
    "gpt_neo": {"attention_types": [[["global", "local"], 1]], "window_size": 4},  # one global, one local layer
    "doge": {"keep_window_size": 4},  # its dynamic mask only acts on texts longer than this
    # hybrids whose attention layers come later than 2 layers by default: layer 1 is softmax attention
    **dict.fromkeys(
        ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text"),
        {"layer_types": ["linear_attention", "full_attention"], "num_key_value_heads": 4},
    ),
    "jamba": {"attn_layer_period": 2, "attn_layer_offset": 1},
    # multi-head latent attention, and configs that refuse grouped heads: every head has its own key
    **dict.fromkeys(
        (
            "axk1",
            "axk2",
            "deepseek_v2",
            "deepseek_v3",
            "deepseek_v32",
            "dots3_note_text",
            "esmc",
            "glm5_next_text",
            "glm4_moe_lite",
            "glm_moe_dsa",
            "minicpm3",
            "mistral4",
            "mistral_large4_text",
            "sarvam_mla",
            "youtu",
        ),
        {"num_key_value_heads": 4},
    ),
    # a head_dim of None is read as given (not hidden / heads): 4 heads of 16
    **dict.fromkeys(("ministral", "hunyuan_v1_dense", "hunyuan_v1_moe", "hunyuan_vl_text", "helium"), {"head_dim": 16}),
    "dots1": {"n_shared_experts": 1},
    "dbrx": {
        "attn_config": {"kv_n_heads": 2, "rope_theta": 10000.0, "clip_qkv": 8.0},
        "ffn_config": {"ffn_hidden_size": 128, "moe_num_experts": 4},
    },
    "lfm2_moe": {"layer_types": ["conv", "full_attention"], "num_dense_layers": 1},
    "mamba2": {"head_dim": 32, "n_groups": 1},  # 4 heads of 32 over its 128-wide inner state (64 × 2)
    # Zamba's hybrids: a state-space layer, then one with the shared attention block
    **dict.fromkeys(("zamba", "zamba2"), {"layers_block_type": ["hybrid", "hybrid"], "n_mamba_heads": 2}),
    # multimodal rotary sections (time, height, width) over a 16-wide head's 8 frequencies (4 where half rotates)
    **dict.fromkeys(
        ("qwen2_vl_text", "qwen2_5_vl_text", "glm4v_text", "glm_image_text", "glm_ocr_text"),
        {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]}},
    ),
    "glm4v_moe_text": {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [1, 1, 2]}},
    "hunyuan_vl_text": {
        "head_dim": 16,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 2, 2, 2]},
    },
    "gemma4_text": {
        "head_dim": 16,
        "global_head_dim": 16,
        "hidden_size_per_layer_input": 16,
        "vocab_size_per_layer_input": VOCAB,
    },
    "luke": {"entity_vocab_size": 16, "entity_emb_size": 16},  # entity embeddings: 500,000 × 256 by default
    "roc_bert": {
        "shape_vocab_size": 64,
        "pronunciation_vocab_size": 64,
        "shape_embed_dim": 16,
        "pronunciation_embed_dim": 16,
    },
    "fsmt": {"src_vocab_size": VOCAB, "tgt_vocab_size": VOCAB},
    "funnel": {"block_sizes": [1, 1], "d_head": 16, "d_inner": 128},
    "cpmant": {"dim_head": 16, "dim_ff": 128},
    "kimi_linear": {
        "linear_head_dim": 16,
        "linear_num_heads": 4,
        "layer_types": ["linear_attention", "full_attention"],
        "num_key_value_heads": 4,
    },
    "longcat_flash": {
        "ffn_hidden_size": 128,
        "expert_ffn_hidden_size": 32,
        "n_routed_experts": 4,
        "zero_expert_num": 2,
        "moe_topk": 2,
        "head_dim": 8,
        "num_key_value_heads": 4,
    },
    "nemotron_h": {
        "layers_block_type": ["mamba", "attention"],
        "head_dim": 16,
        "mamba_num_heads": 8,
        "mamba_head_dim": 16,
        "n_groups": 1,
        "ssm_state_size": 16,
        "chunk_size": 8,
    },
    # encoder–decoders of two configs: each side a 2-layer model of SMALL's sizes
    "t5gemma": {
        "encoder": _T5GEMMA,
        "decoder": _T5GEMMA,
        "vocab_size": VOCAB,
    },
    "encoder-decoder": {
        "encoder": {**_BERT, "model_type": "bert"},
        "decoder": {**_BERT, "model_type": "bert", "is_decoder": True, "add_cross_attention": True},
    },
    # Gemma 3n: layer 1 reuses layer 0's keys and values (its KV sharing), per-layer inputs of 16
    "gemma3n_text": {
        "layer_types": ["full_attention", "full_attention"],
        "num_kv_shared_layers": 1,
        "head_dim": 16,
        "hidden_size_per_layer_input": 16,
        "vocab_size_per_layer_input": VOCAB,
    },
    "cohere_compass_text": {
        "rope_parameters": {
            "full_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        }
    },
    # GLM-5 Next: NoPE sparse-indexer attention (its top 4 keys chosen in pools of 2) and linear attention
    "glm5_next_text": {
        "num_key_value_heads": 4,
        "index_kpool": 2,
        "qk_rope_head_dim": 0,
        "qk_nope_head_dim": 16,
        "linear_head_dim": 16,
        "linear_num_heads": 4,
        "layer_types": ["linear_attention", "indexed_attention"],
    },
    "hy_v4_vl_text": {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 1, 1]}},
    "xmod": {"default_language": "en_XX"},  # its adapters need to be told the text's language
    "zaya": {"num_experts_per_tok": 1},  # its router takes one expert per token
    "lilt": {"hidden_size": 48, "intermediate_size": 96},  # its layout stream splits the width in 6 (4 heads of 12)
    # DeepSeek-V4: one kv head; a sliding-window layer, then compressed sparse attention over pools of 4 keys
    "deepseek_v4": {
        "head_dim": 16,
        "num_key_value_heads": 1,
        "o_lora_rank": 32,
        "o_groups": 2,
        "layer_types": ["sliding_attention", "compressed_sparse_attention"],
    },
    # Inkling: layer 0 sliding (with its own heads), layer 1 global
    "inkling_text": {
        "head_dim": 16,
        "swa_num_attention_heads": 4,
        "swa_num_key_value_heads": 2,
        "swa_head_dim": 16,
        "sliding_window_size": 4,
        "local_layer_ids": [0],
        "n_shared_experts": 1,
    },
    "muse_spark_text": {"moe_hidden_size": 32, "head_dim": 16},
    # Qwen4-Exp: linear attention, then indexed attention; its hyper-connections low-rank
    "qwen4_exp_text": {
        "head_dim": 16,
        "linear_key_head_dim": 16,
        "linear_value_head_dim": 16,
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 4,
        "shared_expert_intermediate_size": 32,
        "hc_lowrank": 16,
        "layer_types": ["linear_attention", "indexed_attention"],
        # its indexer keeps 4 keys per query, chosen in blocks of 2
        "indexer_n_heads": 4,
        "indexer_kv_heads": 1,
        "indexer_head_dim": 16,
        "indexer_budget": 4,
        "indexer_compress_ratio": 2,
    },
    # Gemma 4's drafting assistants: a Gemma 4 text config without per-layer inputs
    **dict.fromkeys(
        ("gemma4_assistant", "gemma4_unified_assistant"),
        {
            "text_config": dict(
                _BERT,
                num_key_value_heads=2,
                head_dim=16,
                global_head_dim=16,
                hidden_size_per_layer_input=0,
                vocab_size_per_layer_input=0,
                sliding_window=4,
            ),
            "backbone_hidden_size": 64,
            "num_centroids": 16,
            "centroid_intermediate_top_k": 4,
        },
    ),
    # Byte Latent Transformer: tokens in patches of 4, each of its four models 1 layer of SMALL's width
    "blt": {
        **{
            f"{part}_config": dict(
                vocab_size=VOCAB,
                hidden_size=64,
                hidden_size_global=64,
                num_attention_heads=4,
                num_hidden_layers=1,
                intermediate_size=128,
                max_position_embeddings=128,
            )
            for part in ("patcher", "encoder", "decoder", "global")
        },
        "vocab_size": VOCAB,
        "patching_mode": None,
        "encoder_hash_byte_group_vocab": 64,
    },
    "reformer": {
        "axial_pos_shape": [4, 8],
        "axial_pos_embds_dim": [32, 32],
        "attn_layers": ["local", "lsh"],
        "local_attn_chunk_length": 4,
        "lsh_attn_chunk_length": 4,
        "num_buckets": 2,
    },
}


def candidate_types() -> list[str]:
    """Every model type the sweep covers, sorted."""
    from transformers.models.auto import modeling_auto

    from attn_cli.backends.vision import VISION_TYPES

    types = set(VISION_TYPES)
    for name in TEXT_MAPPINGS:
        types |= set(getattr(modeling_auto, name))
    return sorted(types)


def read_table() -> dict[str, dict]:
    """model type → {"outcome", "reason"} from tests/architectures.toml."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]

    return tomllib.loads(TABLE.read_text(encoding="utf-8"))


@dataclasses.dataclass
class Observed:
    outcome: str
    reason: str = ""
    weights: float | None = None  # max |attn − eager| over every layer and head
    output: float | None = None  # max |output with capture − output without|


def tiny_config(kind: str):
    """The config of `kind` with SMALL's sizes (those its class has) and its OVERRIDES row."""
    import inspect

    from transformers import AutoConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    config_class = CONFIG_MAPPING[kind]  # not built with its defaults: some validators reject their own
    known = set(inspect.signature(config_class.__init__).parameters) | {
        field.name for field in dataclasses.fields(config_class) if dataclasses.is_dataclass(config_class)
    }
    sizes = {name: value for name, value in SMALL.items() if name in known}
    sizes.update(OVERRIDES.get(kind, {}))
    config = AutoConfig.for_model(kind, **sizes)
    config.use_cache = False  # as attn loads a model (hf.py): one forward over the whole text
    return config


def _tokenizer():
    """MiniLM's BERT tokenizer, loaded once: TEXT's ids are single characters, all below VOCAB."""
    if "tokenizer" not in _CACHE:
        from transformers import AutoTokenizer

        from attn_cli.backends.minilm import minilm_dir

        _CACHE["tokenizer"] = AutoTokenizer.from_pretrained(minilm_dir(), local_files_only=True)
    return _CACHE["tokenizer"]


_CACHE: dict = {}


def observe(kind: str) -> Observed:
    """What attn does with a tiny `kind` now: one torch thread (a 17-token text gains nothing from more, and
    several threads spinning on a busy machine cost seconds of CPU per model)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _observe(kind)
    finally:
        torch.set_num_threads(threads)


def _observe(kind: str) -> Observed:
    import transformers

    from attn_cli.backends.validate import check_config
    from attn_cli.backends.vision import VISION_TYPES
    from attn_cli.plumbing.errors import AttnError

    transformers.logging.set_verbosity_error()
    try:  # the tiny model: a failure before attn runs is the sweep's, not attn's
        model = _tiny_model(kind)
    except Excluded as excluded:
        return Observed("excluded", str(excluded))
    except Refused as refused:
        return Observed("refused", str(refused))
    except Exception as error:
        return Observed("unbuilt", f"{type(error).__name__}: {_line(error)[:200]}")
    if kind in VISION_TYPES:
        return _observe_vision(kind, model)
    if type(model).__name__ not in _BASE_NAMES() and not model.config.is_encoder_decoder:
        model = model.base_model  # as hf.py holds a checkpoint with a language-model head
    try:
        check_config(model)
    except AttnError as error:
        return Observed("refused", _line(error))
    try:
        if getattr(model.config, "is_encoder_decoder", False):
            return _observe_pair(kind, model)
        return _observe_text(kind, model)
    except AttnError as error:
        return Observed("refused", _line(error))
    except Exception as error:  # what a user would see as "unexpected …"
        return Observed("crash", f"{type(error).__name__}: {_line(error)[:160]}")


MAX_PARAMETERS = 3_000_000


class Excluded(Exception):
    """Another modality: attn refuses the config (or the model class) before it runs anything; the message."""


def _tiny_model(kind: str):
    """The tiny model of `kind`, seeded, after its own forward ran on the text's ids; Excluded for a type
    attn refuses before loading (its words), Unbuilt (or the config's own error) where none is built."""
    import torch
    import transformers
    from transformers import AutoConfig

    from attn_cli.backends.validate import check_modality
    from attn_cli.backends.vision import VISION_TYPES
    from attn_cli.plumbing.errors import AttnError

    try:
        described = AutoConfig.for_model(kind).to_dict()
    except Exception:  # defaults the config's own validator rejects (Gemma 4's assistant): the tiny config's
        described = tiny_config(kind).to_dict()
    try:  # what attn reads of config.json before it loads anything
        check_modality(described, Path("config.json"))
    except AttnError as error:
        raise Excluded(_line(error)) from None
    if kind in VISION_TYPES:
        model_class = getattr(transformers, VISION_TYPES[kind])
    else:
        model_class = _model_class(kind)
        reads = _reads(model_class)
        if reads:  # as validate.check_config refuses it once loaded: not a text model
            raise Excluded(reads)
    config = tiny_config(kind)
    if kind in VISION_TYPES:
        config = getattr(config, "vision_config", None) or config
    with torch.device("meta"):  # the size first: a default that is a full model is not built
        size = sum(parameter.numel() for parameter in model_class(config).parameters())
    if size > MAX_PARAMETERS:
        raise Unbuilt(f"{kind}: {size:,} parameters with SMALL's sizes; give it a row of OVERRIDES")
    torch.manual_seed(0)
    model = model_class(config).eval()
    _runs(kind, model)
    return model


class Unbuilt(Exception):
    """No tiny model of the type runs: its tiny config is not tiny (the sweep would spend seconds, or the
    machine's memory, on it), or the config's defaults do not fit SMALL, or the model's own forward fails."""


def _runs(kind: str, model) -> None:
    """The model's own forward (no attn) on the text's ids, or Unbuilt: a failure here is the sweep's."""
    import torch

    fed = {"input_ids": torch.arange(1000, 1017)[None]}
    if getattr(model.config, "is_encoder_decoder", False):
        fed["decoder_input_ids"] = fed["input_ids"][:, :6]
    if "pixel_values" in _parameters(type(model)):
        size = model.config.image_size
        fed = {"pixel_values": torch.zeros(1, 3, size, size)}
    try:
        with torch.inference_mode():
            model(**fed)
    except Exception as error:
        refusal = _refusal(model)
        if refusal:  # attn refuses it before running it (a document model that needs boxes): that is the row
            raise Refused(refusal) from None
        raise Unbuilt(f"{kind}: the model's own forward fails: {type(error).__name__}: {_line(error)[:160]}") from None


class Refused(Exception):
    """attn refuses the model before it runs it (validate.check_config), where the model's own forward fails."""


def _refusal(model) -> str:
    """What validate.check_config says of the model ("" if it takes it): the class attn loads, as load_model
    checks it (a checkpoint saved with its LM head is checked with the head)."""
    from attn_cli.backends.validate import check_config
    from attn_cli.plumbing.errors import AttnError

    try:
        check_config(model)
    except AttnError as error:
        return _line(error)
    return ""


def _parameters(model_class) -> set[str]:
    import inspect

    return set(inspect.signature(model_class.forward).parameters)


def _BASE_NAMES() -> set[str]:
    from transformers.models.auto import modeling_auto

    return {name for name in modeling_auto.MODEL_MAPPING_NAMES.values() if isinstance(name, str)}


def _model_class(kind: str):
    """The class attn would load a checkpoint of `kind` with: its base model's, else its LM class's."""
    import transformers
    from transformers.models.auto import modeling_auto

    for mapping in TEXT_MAPPINGS:
        name = getattr(modeling_auto, mapping).get(kind)
        if name is not None:
            return getattr(transformers, name if isinstance(name, str) else name[0])
    raise LookupError(kind)


def _reads(model_class) -> str:
    """What validate.check_config says of a model class that is not a text model ("" for one that is)."""
    import inspect

    from attn_cli.backends.validate import _OTHER_INPUTS

    parameters = inspect.signature(model_class.forward).parameters
    if "input_ids" not in parameters:
        return "not a text model: it takes no token ids"
    other = [name for name in _OTHER_INPUTS if name in parameters]
    return f"also reads {', '.join(other)}" if other else ""


def _first_tensor(output):
    import torch

    if isinstance(output, torch.Tensor):
        return output
    values = output.values() if hasattr(output, "values") else output
    return next(_first_tensor(value) for value in values if value is not None)


def _guard(model, fed: dict) -> float:
    """max |output with attn's capture − output without|: the capture must change nothing. The recorder keeps
    whatever the layers hand it that its analyses read (T5's position bias, a learned sink) rather than refuse."""
    import inspect

    import torch

    from attn_cli.backends.capture_hook import LayerRecorder, capturing

    keeps = {name: True for name in ("keep_bias", "keep_sink") if name in inspect.signature(LayerRecorder).parameters}
    wanted: set = set(range(64))
    if getattr(model.config, "is_encoder_decoder", False):  # as attn captures one: each attention by its stack
        from attn_cli.backends.hf_seq2seq import stack_roles

        roles = stack_roles(model)
        keeps["key_of"] = lambda module: roles.get(id(module))
        wanted = set(roles.values())
    with torch.inference_mode():
        plain = _first_tensor(model(**fed))
        recorder = LayerRecorder(wanted, model.config._attn_implementation, **keeps)
        with capturing(model, recorder):
            captured = _first_tensor(model(**fed))
    return (plain.float() - captured.float()).abs().max().item()


def _eager(model, fed: dict):
    import torch

    before = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        with torch.inference_mode():
            return model(**fed, output_attentions=True)
    finally:
        model.set_attn_implementation(before)


def _softmax_rows(weights) -> bool:
    """(H, T_q, T_k) weights whose every row is a share of a softmax: ≥ 0, summing to at most 1 (a learned sink
    takes the rest of a row, gpt-oss's; a row masked whole is 0)."""
    return bool((weights >= 0).all()) and bool((weights.float().sum(-1) <= 1 + 1e-3).all())


def _judge(report_layers, expected: dict, guard: float) -> Observed:
    """report_layers: (key, (H, T_q, T_k) array) of every layer attn reported; expected: key → eager's."""
    import numpy as np

    missing = set(expected) - {key for key, _ in report_layers}
    if not report_layers or missing:  # every layer eager returns must be reported
        return Observed("wrong", f"attn reports no layer {sorted(missing, key=str) or 'at all'}")
    worst = 0.0
    for key, got in report_layers:
        want = expected.get(key)
        if want is None or tuple(want.shape) != got.shape:
            return Observed(
                "wrong", f"layer {key}: eager gives {None if want is None else tuple(want.shape)}, attn {got.shape}"
            )
        worst = max(worst, float(np.abs(got - want.float().numpy()).max()))
    if worst > TOLERANCE or not guard <= TOLERANCE:
        return Observed("wrong", f"weights off by {worst:.2g}, output changed by {guard:.2g}", worst, guard)
    return Observed("exact", "", worst, guard)


def _observe_text(kind: str, model) -> Observed:
    import numpy as np

    from attn_cli.api import Model
    from attn_cli.backends.hf import HFBackend

    backend = HFBackend(kind, model, _tokenizer(), "cpu")
    report = Model(backend).inspect(TEXT)
    fed = {name: value.to("cpu") for name, value in backend._pad([backend._encode(TEXT, False)[0]], None).items()}
    guard = _guard(model, fed)
    eager = _eager(model, fed).attentions or ()
    reported = [layer.layer for layer in report.layers]
    if len(eager) < model.config.num_hidden_layers and len(eager) == len(reported):
        # a hybrid's eager output holds its attention layers only (not one entry per layer), in order
        expected = {layer: weights[0] for layer, weights in zip(reported, eager)}
    else:
        expected = {index: layer[0] for index, layer in enumerate(eager) if layer is not None}
    # A linear-attention layer's eager "attentions" entry is not softmax weights (MiniMax's lightning attention
    # returns its decay-weighted q·kᵀ: negative cells, rows summing to ~6, a block of the text): attn must say
    # it has no softmax attention there (model.no_attention_layers), and then it is not expected of it.
    not_softmax = {index for index, weights in expected.items() if not _softmax_rows(weights)}
    if not_softmax - set(report.model.no_attention_layers):
        return Observed("wrong", f"eager's layer {sorted(not_softmax)} is not softmax attention and attn shows it")
    expected = {index: weights for index, weights in expected.items() if index not in not_softmax}
    seen = _judge(
        [(layer.layer, np.stack([head.weights for head in layer.heads])) for layer in report.layers], expected, guard
    )
    without = next((getattr(head, "without_qkv", None) for layer in report.layers for head in layer.heads), None)
    if seen.outcome == "exact" and without is not None:  # the model's own weights, equal to eager's
        return Observed("weights-only", without, seen.weights, seen.output)
    return seen


def _observe_pair(kind: str, model) -> Observed:
    import numpy as np
    import torch

    from attn_cli.api import Model
    from attn_cli.backends import hf

    backend = getattr(hf, "HFPairBackend", hf.HFBackend)(kind, model, _tokenizer(), "cpu")  # as hf.py loads one
    report = Model(backend).inspect(TEXT, target=TARGET)
    fed = {
        "input_ids": torch.tensor([[token.id for token in report.tokens]]),
        "decoder_input_ids": torch.tensor([[token.id for token in report.target_tokens]]),
    }
    guard = _guard(model, fed)
    out = _eager(model, fed)
    expected = {}
    for stack, layers in (
        ("encoder", out.encoder_attentions),
        ("decoder", out.decoder_attentions),
        ("cross", out.cross_attentions),
    ):
        expected.update({(stack, index): layer[0] for index, layer in enumerate(layers or ()) if layer is not None})
    got = [
        ((layer.stack, layer.layer), np.stack([head.weights for head in layer.heads]))
        for stack in report.stacks
        for layer in stack.layers
    ]
    seen = _judge(got, expected, guard)
    without = next(
        (
            getattr(head, "without_qkv", None)
            for stack in report.stacks
            for layer in stack.layers
            for head in layer.heads
        ),
        None,
    )
    if seen.outcome == "exact" and without is not None:  # the model's own weights, equal to eager's
        return Observed("weights-only", without, seen.weights, seen.output)
    return seen


def _observe_vision(kind: str, model) -> Observed:
    """A ViT-family model on a 32 × 32 noise image: 16 patches of 8 × 8 and its special tokens."""
    import numpy as np
    from PIL import Image
    from transformers import ViTImageProcessor

    from attn_cli.api import Model
    from attn_cli.backends.vision import VisionBackend

    size = model.config.image_size
    noise = np.random.default_rng(0).integers(0, 256, (size, size, 3), dtype=np.uint8)
    processor = ViTImageProcessor(size={"height": size, "width": size})
    backend = VisionBackend(kind, model, processor, "cpu")
    report = Model(backend).inspect_image(Image.fromarray(noise))
    fed = {"pixel_values": backend.pixel_values(Image.fromarray(noise))}
    guard = _guard(model, fed)
    expected = {index: layer[0] for index, layer in enumerate(_eager(model, fed).attentions or ())}
    return _judge(
        [(layer.layer, np.stack([head.weights for head in layer.heads])) for layer in report.layers], expected, guard
    )


def _line(error) -> str:
    return " ".join(str(error).split())


_TITLES = {
    "exact": "Exact",
    "weights-only": "Weights only",
    "refused": "Refused",
    "wrong": "Known defects, being fixed",
    "crash": "Known defects, being fixed",
    "excluded": "Other modalities",
    "unbuilt": "Not swept yet",
}
_INTROS = {
    "exact": (
        "attn's weights equal transformers' eager `output_attentions` (max |Δ| ≤ 1e-5, float32) on every "
        "layer and head, and the model's output with attn's capture equals its output without (≤ 1e-5). "
        "Q, K, V, scores, symmetry and every command work."
    ),
    "weights-only": (
        "The attention code does not go through transformers' attention interface, so attn reads the weights "
        "the model returns (`output_attentions`, equal to eager's to 1e-5): inspect's heatmaps, top keys and "
        "entropy, rollout, and `attn heads` (its scores of those weights, its store), `diagnose` and `kv` work; "
        "scores, Q, K, V and symmetry are null in the JSON with the reason (`without_qkv`), and what needs them "
        "(compare and the variants, `--include qkv`, `--measure norm`) is refused in one line."
    ),
    "refused": "attn stops with one line (exit 1) rather than show numbers it cannot reproduce.",
    "wrong": "These give wrong numbers or an unexpected error today (issue 36); they are being fixed.",
    "excluded": (
        "Audio, video, vision–language and image models other than the ViT family: attn refuses them from "
        "config.json, in one line naming what it reads."
    ),
    "unbuilt": (
        "The sweep cannot build a tiny model of these (the model needs a library the tests do not install, "
        "transformers maps the type to a class it does not have, or the config does not fit the sweep's small "
        "sizes): what attn does with them is not known."
    ),
}


def models_page(rows: dict[str, dict]) -> str:
    """docs/models.md: every model type of the table by outcome, with its reason."""
    import transformers

    groups: dict[str, list[str]] = {}
    for kind in sorted(rows):
        outcome = rows[kind]["outcome"]
        groups.setdefault("wrong" if outcome == "crash" else outcome, []).append(kind)
    counts = ", ".join(f"{len(groups.get(name, []))} {_TITLES[name].lower()}" for name in _INTROS)
    lines = [
        "# Models attn reads",
        "",
        "<!-- written by `python tests/architectures_sweep.py --docs` from tests/architectures.toml; "
        "tests/test_architectures_all.py fails when it is stale -->",
        "",
        f"Every model type of transformers {transformers.__version__}'s auto mappings for text, "
        "encoder–decoder and ViT-family vision models, each built as a tiny random model (2 layers) and run "
        "through attn by `tests/test_architectures_all.py`, which holds each to the outcome below. "
        f"{len(rows)} types: {counts}.",
    ]
    for name, intro in _INTROS.items():
        kinds = groups.get(name, [])
        if not kinds:
            continue
        lines += ["", f"## {_TITLES[name]} ({len(kinds)})", "", intro, ""]
        if name == "exact":
            lines.append(", ".join(f"`{kind}`" for kind in kinds))
            continue
        lines += ["| model type | why |", "|---|---|"]
        lines += [f"| `{kind}` | {rows[kind]['reason'].replace('|', '/')} |" for kind in kinds]
    return "\n".join(lines) + "\n"


def table_row(kind: str, seen: Observed) -> str:
    """One line of tests/architectures.toml for what attn does with `kind` now."""
    import json

    fields = [f"outcome = {json.dumps(seen.outcome)}"]
    if seen.reason:
        fields.append(f"reason = {json.dumps(seen.reason)}")
    return f"{json.dumps(kind)} = {{ {', '.join(fields)} }}"


def main(argv: list[str]) -> int:
    if argv[:1] == ["--observe"]:
        kinds = argv[1:] or candidate_types()
        for kind in kinds:
            start = time.process_time()
            try:
                seen = observe(kind)
            except Exception as error:  # no tiny model (Unbuilt, or a config its defaults do not fit)
                seen = Observed("unbuilt", f"{type(error).__name__}: {_line(error)[:200]}")
            spent = time.process_time() - start
            print(f"{table_row(kind, seen)}  # {spent:.2f} s CPU; weights {seen.weights}, output {seen.output}")
        return 0
    if argv == ["--docs"]:
        PAGE.write_text(models_page(read_table()), encoding="utf-8")
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main(sys.argv[1:]))
