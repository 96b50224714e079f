"""`attn heads` on encoder–decoder models (every stack, cross heads' undefined scores null with a reason) and on a
vision transformer's image: each defined score equals a numpy recomputation, from its definition in
math/head_scores.py, over transformers' eager output_attentions. Tiny random models, their queries sharpened so
the weights are far from uniform (a random 32-wide BART or Marian attends almost evenly, which every score would
pass; T5's initialisation needs less)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from tests.conftest import save_tiny
from tests.test_hardening import attn, one_line_error
from tests.test_seq2seq import SIZES

SOURCE, TARGET = "the cat sat on the mat, the cat slept.", "die katze sass, die katze schlief."
PUNCTUATION = {",", "."}  # the punctuation tokens these two texts hold
TOLERANCE = 1e-5  # float32 weights (attn's and eager's) against float64 numpy sums over a few dozen cells
SHARPEN = 20.0  # the query and key projections are scaled by this: peaked rows, sinks above ε = 0.3
SHARPEN_T5 = 4.0  # … T5's, whose scores are not scaled by 1/√d: more would cost float32 the 1e-5


def sharpened(model, factor: float = SHARPEN):
    """Scale every attention's query and key projections, so its weights are peaked (far from uniform)."""
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith(("q_proj.weight", ".q.weight", "k_proj.weight", ".k.weight")):
                parameter.mul_(factor)
    return model


def build(kind: str, directory):
    from transformers import (
        BartConfig,
        BartForConditionalGeneration,
        MarianConfig,
        MarianMTModel,
        T5Config,
        T5ForConditionalGeneration,
    )

    torch.manual_seed(0)
    if kind == "t5":
        config = T5Config(
            vocab_size=30522,
            d_model=32,
            d_kv=8,
            num_heads=4,
            num_layers=2,
            num_decoder_layers=2,
            d_ff=64,
            pad_token_id=0,
            eos_token_id=102,
            decoder_start_token_id=0,
            relative_attention_num_buckets=8,
            relative_attention_max_distance=16,
        )
        return save_tiny(sharpened(T5ForConditionalGeneration(config), SHARPEN_T5), directory)
    config_class, model_class = {
        "bart": (BartConfig, BartForConditionalGeneration),
        "marian": (MarianConfig, MarianMTModel),
    }[kind]
    return save_tiny(sharpened(model_class(config_class(**SIZES))), directory)


@pytest.fixture(scope="module", params=["marian", "bart", "t5"])
def pair_dir(request, tmp_path_factory):
    return build(request.param, tmp_path_factory.mktemp(request.param))


def eager(directory, source_ids, target_ids):
    from transformers import AutoModelForSeq2SeqLM

    model = AutoModelForSeq2SeqLM.from_pretrained(directory, local_files_only=True, attn_implementation="eager").eval()
    with torch.no_grad():
        out = model(
            input_ids=torch.tensor([source_ids]), decoder_input_ids=torch.tensor([target_ids]), output_attentions=True
        )
    return {"encoder": out.encoder_attentions, "decoder": out.decoder_attentions, "cross": out.cross_attentions}


def separators(tokens) -> np.ndarray:
    """Special tokens after position 0, or the last token when there are none."""
    marks = np.array([token.special and token.index > 0 for token in tokens])
    if not marks.any():
        marks[-1] = True
    return marks


def share(weights, allowed, targets, counted):
    """Σ A⊙P / Σ A over the counted rows that may attend a target: weights (T_q, T_k), targets (T_q, T_k) bool."""
    targets = targets & allowed
    rows = counted & targets.any(-1)
    return None if not rows.any() else float((weights * targets)[rows].sum() / weights[rows].sum())


def reference(weights, queries, keys, causal: bool, cross: bool) -> dict:
    """Every score of one head from its definition: weights (T_q, T_k) float64; queries, keys: capture.Tokens."""
    t_q, t_k = weights.shape
    i, j = np.arange(t_q)[:, None], np.arange(t_k)[None, :]
    allowed = (j <= i) if causal else np.ones((t_q, t_k), bool)
    counted = allowed.sum(-1) >= 2
    key_ids = np.array([token.id for token in keys])
    punctuation = np.array([token.text in PUNCTUATION and not token.special for token in keys])
    scores = {
        "first_token": share(weights, allowed, np.broadcast_to(j == 0, (t_q, t_k)), counted),
        "last_token": share(weights, allowed, separators(keys)[None, :] & (cross | (j != i)), counted),
        "punctuation": share(weights, allowed, np.broadcast_to(punctuation, (t_q, t_k)), counted),
    }
    if not cross:
        ids = key_ids[:, None]  # the queries are the keys
        before = np.concatenate([[-1], key_ids[:-1]])[None, :]  # id_{j-1}
        scores.update(
            previous_token=share(weights, allowed, j == i - 1, counted),
            duplicate_token=share(weights, allowed, (key_ids[None, :] == ids) & (j < i), counted),
            induction=share(weights, allowed, (before == ids) & (j >= 1) & (j - 1 < i), counted),
            self=share(weights, allowed, j == i, counted),
        )
    entropy = -(np.where(weights > 0, weights * np.log(np.where(weights > 0, weights, 1)), 0)).sum(-1)
    scores["broad"] = float((entropy / np.log(np.maximum(allowed.sum(-1), 2)))[counted].mean())
    heavy = (weights > 0.3) & counted[:, None]  # (T_q, T_k)
    scores["sink"] = float(heavy.sum(0).max() / counted.sum())
    scores["sink_key"] = int(heavy.sum(0).argmax()) if heavy.any() else None
    return scores


def test_every_defined_score_of_every_stack_equals_numpy_over_eager(pair_dir):
    import attn_cli as attn_api

    model = attn_api.load(str(pair_dir), device="cpu")
    report = model.heads(SOURCE, target=TARGET)
    tokens = model.inspect(SOURCE, target=TARGET, layers=0, heads=0)  # the same tokens, named
    source, target = tokens.tokens, tokens.target_tokens
    expected = eager(pair_dir, [t.id for t in source], [t.id for t in target])
    stacks = ("encoder", "decoder", "cross")
    assert {(p.stack, p.layer) for p in report.heads} == {(stack, layer) for stack in stacks for layer in (0, 1)}
    checked = 0
    for profile in report.heads:
        weights = expected[profile.stack][profile.layer][0, profile.head].double().numpy()
        cross = profile.stack == "cross"
        queries = source if profile.stack == "encoder" else target
        want = reference(weights, queries, source if cross else queries, profile.stack == "decoder", cross)
        for name, value in want.items():
            if name == "sink_key":
                got = None if profile.sink_key is None else profile.sink_key.position
                assert got == value, (profile.stack, profile.layer, profile.head)
            elif value is None:
                assert profile.scores[name] is None, (profile.stack, name)
            else:
                where = (profile.stack, profile.layer, profile.head, name)
                assert abs(profile.scores[name] - value) <= TOLERANCE, where
                checked += 1
        if cross:
            assert set(profile.not_defined) == {"previous_token", "duplicate_token", "induction", "self"}
            assert all(profile.scores[name] is None for name in profile.not_defined)
        else:
            assert profile.not_defined == {}
    # sharpened: not near-uniform rows (broad 1.0 everywhere), and half the heads or more have a sink key
    assert min(profile.scores["broad"] for profile in report.heads) < 0.6
    assert sum(profile.sink_key is not None for profile in report.heads) >= 12
    assert checked >= 24 * 6  # 24 heads, at least the six scores every stack defines


def test_the_json_says_each_heads_stack_and_why_a_cross_score_is_null(tmp_path):
    directory = build("marian", tmp_path / "marian")
    result = attn(
        "heads", SOURCE, "--target", TARGET, "--model", directory, "--json", "--stack", "decoder,cross", "--layer", "1"
    )
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["target"] == TARGET
    assert "start token" in document["teacher_forcing"]
    assert [(head["stack"], head["layer"]) for head in document["heads"]] == [("decoder", 1)] * 4 + [("cross", 1)] * 4
    decoder, cross = document["heads"][0], document["heads"][4]
    assert "not_defined" not in decoder and decoder["scores"]["previous_token"] is not None
    for name in ("previous_token", "duplicate_token", "induction", "self"):
        assert cross["scores"][name] is None and cross["scored"][name] == 0
        assert cross["not_defined"][name].startswith("cross-attention: ")
    assert cross["scores"]["first_token"] is not None and cross["scores"]["broad"] is not None
    assert cross["sink_key"] is None or cross["sink_key"]["token"] in SOURCE.split() + ["[CLS]", "[SEP]", ",", "."]


def test_the_terminal_titles_each_stack_and_marks_the_cross_scores_not_defined(tmp_path, monkeypatch):
    from tests.conftest import isolate

    directory = build("marian", tmp_path / "marian")
    for columns in (80, 160):
        isolate(monkeypatch, columns)
        result = attn("heads", SOURCE, "--target", TARGET, "--model", directory)
        assert result.exit_code == 0, result.stderr
        lines = result.stdout.splitlines()
        assert max(len(line) for line in lines) <= columns
        for title in (
            "encoder self-attention · source × source",
            "decoder self-attention · target × target",
            "cross-attention · target rows (queries) × source columns (keys)",
            "not defined: previous, duplicate, induction, self",
        ):
            assert any(line.startswith(title) for line in lines), title
        assert "2 encoder + 2 decoder layers × 4 heads" in " ".join(" ".join(lines[:3]).split())
        previous = next(line for line in lines if line.startswith(" P  previous   "))  # the top list's, not the legend
        assert "x: not defined" in previous and " x" not in previous.split("x: not")[0]  # no cross head ranked
        assert " d" in previous or " e" in previous


def test_one_pair_only_and_a_target_needed(tmp_path):
    directory = build("marian", tmp_path / "marian")
    corpus = tmp_path / "pairs.txt"
    corpus.write_text("hello\n")
    one_line_error(
        attn("heads", "--file", corpus, "--model", directory),
        2,
        "--file: an encoder–decoder pair is scored alone",
        "attn heads SOURCE --target TARGET",
    )
    one_line_error(attn("heads", "hello", "--model", directory), 2, "its decoder needs a target", "--target")
    one_line_error(attn("heads", "a", "b", "--target", "c", "--model", directory), 2, "one source TEXT")
    one_line_error(
        attn("heads", "hello", "--target", "hallo", "--store", tmp_path / "s", "--model", directory),
        2,
        "--store: an encoder–decoder pair is scored alone",
    )


def test_target_on_a_model_with_one_stack_is_refused(minilm_backend):
    from attn_cli.api import Model
    from attn_cli.plumbing.errors import BadInput

    with pytest.raises(BadInput, match="target is for encoder–decoder models"):
        Model(minilm_backend).heads(SOURCE, target=TARGET)


def test_a_vit_images_heads_equal_numpy_over_eager(tmp_path):
    """attn heads --image: square heads over [CLS] and the patches; patches have no ids (no duplicate or induction)
    and no separator or punctuation, so those four are null with the reason."""
    from transformers import AutoImageProcessor, ViTModel

    import attn_cli as attn_api
    from tests import vision_models

    directory = vision_models.build("vit", tmp_path / "vit")
    picture = vision_models.noise(tmp_path / "noise.png")
    report = attn_api.load(str(directory), device="cpu").heads(image=str(picture))
    model = ViTModel.from_pretrained(directory, attn_implementation="eager").eval()
    from PIL import Image

    pixels = AutoImageProcessor.from_pretrained(directory)(
        images=Image.open(picture).convert("RGB"), return_tensors="pt"
    )["pixel_values"]
    with torch.no_grad():
        attentions = model(pixel_values=pixels, output_attentions=True).attentions
    assert report.patch_grid["grid"] == {"rows": 4, "cols": 4} and len(report.heads) == 8
    for profile in report.heads:
        weights = attentions[profile.layer][0, profile.head].double().numpy()  # (17, 17)
        count = weights.shape[0]
        eye = np.eye(count, dtype=bool)
        assert abs(profile.scores["first_token"] - weights[:, 0].mean()) <= TOLERANCE
        assert abs(profile.scores["self"] - weights[eye].mean()) <= TOLERANCE
        assert abs(profile.scores["previous_token"] - weights[np.eye(count, k=-1, dtype=bool)].mean()) <= TOLERANCE
        assert (
            abs(profile.scores["broad"] - reference(weights, _named(count), _named(count), False, False)["broad"])
            <= TOLERANCE
        )
        for name in ("duplicate_token", "induction", "last_token", "punctuation"):
            assert profile.scores[name] is None and profile.not_defined[name].startswith("an image")
    document = report.to_json_dict()
    assert document["image"]["grid"] == {"rows": 4, "cols": 4}
    saved = attn("heads", "--image", picture, "--model", directory, "--save", tmp_path / "heads.svg")
    assert saved.exit_code == 0, saved.stderr  # the scores' layers × heads grids, not the image's picture
    assert "broad score" in (tmp_path / "heads.svg").read_text(encoding="utf-8")


def _named(count: int):
    from attn_cli.data.capture import Token

    return [Token(index, f"t{index}", index, index == 0) for index in range(count)]


def test_the_figure_has_a_row_per_stack_and_layer_blank_where_not_defined(tmp_path):
    import attn_cli as attn_api
    from attn_cli.render.command_figures import heads_grids

    report = attn_api.load(str(build("marian", tmp_path / "marian")), device="cpu").heads(SOURCE, target=TARGET)
    rows, cols, grids = heads_grids(report)
    assert rows == [f"{stack} L{layer}" for stack in ("encoder", "decoder", "cross") for layer in (0, 1)]
    assert cols == ["h0", "h1", "h2", "h3"]
    assert np.isnan(grids["previous_token"][4:]).all() and not np.isnan(grids["previous_token"][:4]).any()
    assert not np.isnan(grids["first_token"]).any()
    assert grids["first_token"][5, 3] == pytest.approx(report.head(1, 3, "cross").scores["first_token"])
