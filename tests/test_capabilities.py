"""A backend's capabilities are types (backends/capabilities.py): each analysis asks once, through `require`,
and a backend without the capability is refused in one line naming the command and the model."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from attn_cli.backends import capabilities as cap
from attn_cli.plumbing.errors import UnsupportedModel

PACKAGE = Path(__file__).resolve().parents[1] / "attn_cli"


@pytest.fixture(scope="module")
def toy():
    from attn_cli.backends.registry import load_backend

    return load_backend("toy", device="cpu")


def test_the_toy_has_only_the_one_method_every_backend_has(toy):
    for capability in (cap.CapturesPadded, cap.CapturesGeneration, cap.EncoderBlocks, cap.AttentionGradients):
        assert not cap.supports(toy, capability), capability
    assert not cap.supports(toy, cap.CircuitWeights) and not cap.supports(toy, cap.Seq2Seq)


def test_a_hugging_face_encoder_has_the_text_capabilities_but_not_a_pair(minilm_backend):
    for capability in (
        cap.CapturesPadded,
        cap.Tokenizes,
        cap.EncoderBlocks,
        cap.AttentionGradients,
        cap.CircuitWeights,
        cap.HasTokenizer,
        cap.Provenance,
    ):
        assert cap.supports(minilm_backend, capability), capability
    assert not cap.supports(minilm_backend, cap.Seq2Seq)  # one stack: HFPairBackend is the encoder–decoder kind
    assert not cap.supports(minilm_backend, cap.CapturesImage)
    assert cap.require(minilm_backend, cap.CircuitWeights, "attn circuits") is minilm_backend


def test_require_refuses_in_one_line_naming_the_command_and_the_model(toy):
    with pytest.raises(UnsupportedModel) as refused:
        cap.require(toy, cap.CircuitWeights, "attn circuits")
    message = str(refused.value)
    assert message.startswith("attn circuits: toy ") and "\n" not in message
    assert "Hugging Face" in message  # the capability's own hint
    with pytest.raises(UnsupportedModel, match="attn steps: toy .*; use this instead"):
        cap.require(toy, cap.AttentionGradients, "attn steps", hint="use this instead")


def test_the_cli_edge_turns_a_refusal_into_one_line():
    from typer.testing import CliRunner

    from attn_cli.cli import app

    result = CliRunner().invoke(app, ["circuits", "--model", "toy"])
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert "attn circuits" in result.stderr and "toy" in result.stderr and "Traceback" not in result.output


def test_no_capability_is_probed_by_name():
    """The capabilities are asked through their types: no hasattr/getattr on a backend, no model config read
    above backends/."""
    probing = re.compile(
        r"(hasattr|getattr)\((self\.)?(loaded\.)?backend\b|backend\.model\.config|getattr\(report\b|__name__ in"
    )
    found = [
        f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}"
        for path in PACKAGE.rglob("*.py")
        if path.parent.name != "backends"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if probing.search(line)
    ]
    assert found == []
