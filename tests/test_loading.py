"""Loading models safely: no remote code unless asked, revisions for hub ids only, device maps."""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from attn_cli.api import Model


def recorded_from_pretrained(monkeypatch):
    """Record the keyword arguments every AutoModel/AutoTokenizer.from_pretrained call gets."""
    import transformers

    calls = []
    for cls in (transformers.AutoModel, transformers.AutoTokenizer):
        original = cls.from_pretrained.__func__

        def spy(klass, *args, _original=original, **kwargs):
            calls.append(kwargs)
            return _original(klass, *args, **kwargs)

        monkeypatch.setattr(cls, "from_pretrained", classmethod(spy))
    return calls


def test_remote_code_is_never_trusted_by_default(monkeypatch, tiny_bert_dir):
    from attn_cli.backends.registry import load_backend

    calls = recorded_from_pretrained(monkeypatch)
    load_backend(str(tiny_bert_dir), device="cpu")
    assert len(calls) == 2
    assert all(call.get("trust_remote_code", False) is False for call in calls)
    assert all(call["local_files_only"] is True for call in calls)
    assert calls[1]["use_safetensors"] is True  # the model: safetensors only


def test_trust_remote_code_only_when_asked(monkeypatch, tiny_bert_dir):
    from attn_cli.backends.registry import load_backend

    calls = recorded_from_pretrained(monkeypatch)
    load_backend(str(tiny_bert_dir), device="cpu", trust_remote_code=True)
    assert all(call["trust_remote_code"] is True for call in calls)


def test_revision_is_for_hub_ids_not_directories(tiny_bert_dir):
    from attn_cli.cli import app

    result = CliRunner().invoke(app, ["inspect", "Hello", "--model", str(tiny_bert_dir), "--revision", "v1"])
    assert result.exit_code == 2
    assert "--revision" in result.stderr


# A CPU-only device map that really dispatches: layer 1 lives on disk and is loaded by accelerate's hooks.
OFFLOADING_MAP = {"embed_tokens": "cpu", "layers.0": "cpu", "layers.1": "disk", "norm": "cpu", "rotary_emb": "cpu"}


def test_device_map_dispatch_gives_the_same_attention(tiny_llama_dir):
    pytest.importorskip("accelerate")
    from attn_cli.backends.registry import load_backend

    text = "placed by accelerate, analysed on the cpu"
    mapped = load_backend(str(tiny_llama_dir), device="cpu", device_map=OFFLOADING_MAP)
    assert mapped.model.hf_device_map["layers.1"] == "disk"  # accelerate placed it
    assert mapped.model.layers[1].self_attn.q_proj.weight.device.type == "meta"  # not in memory until used
    plain = load_backend(str(tiny_llama_dir), device="cpu")
    got = [head.weights for _, head in Model(mapped).inspect(text).heads()]
    expected = [head.weights for _, head in Model(plain).inspect(text).heads()]
    assert np.allclose(np.stack(got), np.stack(expected), atol=1e-6)


def test_cli_device_map_auto(tiny_llama_dir):
    pytest.importorskip("accelerate")
    from attn_cli.cli import app

    result = CliRunner().invoke(
        app,
        [
            "inspect",
            "Hello",
            "--model",
            str(tiny_llama_dir),
            "--device-map",
            "auto",
            "--layer",
            "1",
            "--head",
            "0",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(
    "architectures, is_encoder_decoder, head",
    [
        (["EncoderDecoderModel"], True, "seq2seq"),  # BERT-to-BERT: AutoModel has no class for its two configs
        (["BartForConditionalGeneration"], True, "seq2seq"),
        (["BartModel"], True, None),
        (["GPT2LMHeadModel"], False, "causal"),
    ],
)
def test_the_saved_head_says_which_class_loads_a_checkpoint(tmp_path, architectures, is_encoder_decoder, head):
    import json

    from attn_cli.backends.hf_files import saved_head

    config = {"architectures": architectures, "is_encoder_decoder": is_encoder_decoder}
    (tmp_path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    assert saved_head(tmp_path) == head
