"""The lab decoder (`--model lab`): shipped inside the package, checked by its SHA-256, and in it the heads
Olsson et al. (2022) describe — a previous-token head in layer 0 and an induction head in layer 1 — measured
by the real `attn heads --probe induction`; `attn generate` continues a repeated prompt by copying.

lab/train.py made the shipped weights; a full run takes minutes, so CI trains a few steps twice and checks
that they agree bit for bit (and the shipped file by its hash). ATTN_TRAIN_LAB=1 runs the whole training and
compares its weights with the shipped ones.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from conftest import isolate
from typer.testing import CliRunner

from attn_cli.backends import lab
from attn_cli.cli import app
from attn_cli.plumbing.errors import ModelIntegrityError

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


@pytest.fixture(autouse=True)
def _isolated(monkeypatch):
    isolate(monkeypatch, 80)


@pytest.fixture(scope="module")
def train_module():
    sys.path.insert(0, str(ROOT / "lab"))
    try:
        import train

        yield train
    finally:
        sys.path.remove(str(ROOT / "lab"))


def attn(*args: str) -> dict:
    result = runner.invoke(app, [*args, "--model", "lab", "--device", "cpu", "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_shipped_weights_are_the_ones_lab_py_names():
    assert sha256(lab.lab_dir() / "model.safetensors") == lab.WEIGHTS_SHA256


def test_tampered_lab_weights_are_refused(tmp_path, monkeypatch):
    copy = tmp_path / "lab_model"
    shutil.copytree(lab.lab_dir(), copy)
    weights = bytearray((copy / "model.safetensors").read_bytes())
    weights[-1] ^= 1  # one bit of the last float
    (copy / "model.safetensors").write_bytes(bytes(weights))
    monkeypatch.setattr(lab, "lab_dir", lambda: copy)
    with pytest.raises(ModelIntegrityError, match="does not match its known SHA-256"):
        lab.load("lab", device="cpu", dtype="auto", options=lab.Options())


def test_attn_models_lists_the_lab_decoder_with_its_shape():
    result = runner.invoke(app, ["models", "--json"], catch_exceptions=False)
    entry = next(model for model in json.loads(result.stdout)["models"] if model["name"] == "lab")
    assert (entry["source"], entry["architecture"], entry["layers"], entry["heads"], entry["head_dim"]) == (
        "builtin",
        "llama",
        2,
        4,
        16,
    )
    assert entry["path"] == str(lab.lab_dir())


COPY_PROMPT = "every winter night my friend tells a story about the mountain"
COPY_REPEAT = "every winter night my friend"


def probe_scores() -> dict[tuple[int, int], dict]:
    document = attn("heads", "--probe", "induction")
    return {(head["layer"], head["head"]): head["scores"] for head in document["heads"]}


def generated_words(prompt: str, count: int) -> list[str]:
    document = attn("generate", prompt, "--max-new-tokens", str(count))
    return [token["text"] for token in document["tokens"] if token["generated"]]


def test_the_induction_probe_finds_an_induction_head_on_a_previous_token_head():
    """The goal (issue 24): an induction head of score >= 0.8 in layer 1, a previous-token head in layer 0."""
    scores = probe_scores()
    induction = max(scores, key=lambda key: scores[key]["induction"])
    previous = max(scores, key=lambda key: scores[key]["previous_token"])
    assert induction[0] == 1 and scores[induction]["induction"] >= 0.8
    assert previous[0] == 0 and scores[previous]["previous_token"] >= 0.8


def test_generate_continues_a_repeated_prompt_by_copying():
    """The prompt's start written again: the model goes on with what followed it the first time."""
    words = COPY_PROMPT.split()
    start = len(COPY_REPEAT.split())
    assert generated_words(f"{COPY_PROMPT} {COPY_REPEAT}", 6) == (words + words)[start : start + 6]


def test_a_short_training_run_is_the_same_bit_for_bit(train_module):
    """Two runs of 6 steps from the same seed give the same weights, byte for byte; another seed does not.
    (Reporting during training, which runs the model, changes nothing.)"""

    def weights(seed: int, report=None) -> bytes:
        model, losses = train_module.train(6, seed, report=report, every=3)
        return b"".join(tensor.numpy().tobytes() for tensor in model.state_dict().values()), losses

    first, first_losses = weights(0)
    second, second_losses = weights(0, report=lambda step, losses, model: train_module.probe_scores(model))
    assert first == second and first_losses == second_losses
    assert weights(1)[0] != first


@pytest.mark.skipif(
    os.environ.get("ATTN_TRAIN_LAB") != "1",
    reason="the full training takes minutes: ATTN_TRAIN_LAB=1 runs it; CI checks the shipped weights by hash instead",
)
def test_the_full_training_regenerates_the_shipped_weights(train_module, tmp_path):
    model, _ = train_module.train()
    train_module.save(model, tmp_path)
    assert sha256(tmp_path / "model.safetensors") == lab.WEIGHTS_SHA256
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        assert (tmp_path / name).read_bytes() == (lab.lab_dir() / name).read_bytes(), name


def test_training_without_probe_reports_still_draws_its_loss_figure(train_module, tmp_path):
    """--every 0 (no probe reports, as the bit-for-bit check ran it) saves the model and a figure of the loss alone."""
    figure = tmp_path / "loss.svg"
    assert (
        train_module.main(["--steps", "2", "--every", "0", "--out", str(tmp_path / "model"), "--figure", str(figure)])
        == 0
    )
    assert (tmp_path / "model" / "model.safetensors").exists()
    assert "<svg" in figure.read_text(encoding="utf-8")[:200] and "probe score" not in figure.read_text(
        encoding="utf-8"
    )
