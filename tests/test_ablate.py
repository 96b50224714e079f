"""attn ablate: a head's output removed where it exists alone (backends/interventions.py), measured by the
model's own output (math/effects.py).

The proof is a recomputation that knows nothing of attn's hook: a forward pre-hook on the module that mixes
the heads (GPT-2's c_proj, Llama's o_proj, BERT's attention.output.dense) edits its input's slice
[h·D, (h+1)·D), and the metric is computed again by hand. Tolerance: 1e-5 absolute on losses and logits of
float32 models with hidden size 64 (the two runs differ only in where the same zero is written), 1e-7 on a
cosine distance."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import attn_cli
from attn_cli.analyses import ablate as ablate_module

LAB_WORDS = "only party company among there world keeps on may business"
# the text ends at the first repeated word: the target's nine tokens are predictable only by copying
LAB_TEXT, LAB_TARGET = LAB_WORDS + " only", " ".join(LAB_WORDS.split()[1:])
TEXT = "the cat sat on the mat and the cat ran"


@pytest.fixture(scope="module")
def lab():
    return attn_cli.load("lab", device="cpu")


@pytest.fixture(scope="module")
def tiny_llama_lm_dir(tmp_path_factory):
    """The tiny grouped-query Llama (8 query heads on 2 kv heads) with its language-model head."""
    from conftest import save_tiny, tiny_llama_config
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    return save_tiny(LlamaForCausalLM(tiny_llama_config()), tmp_path_factory.mktemp("tiny-llama-lm"))


def _mixer(model, layer: int):
    """The module whose input holds every head's output side by side (B, T, H·D)."""
    if hasattr(model, "transformer"):  # GPT-2
        return model.transformer.h[layer].attn.c_proj
    if hasattr(model, "encoder"):  # BERT
        return model.encoder.layer[layer].attention.output.dense
    if hasattr(model, "layers"):  # ViT (transformers 5)
        return model.layers[layer].attention.o_proj
    return model.model.layers[layer].self_attn.o_proj  # Llama


def _by_hand(backend, fed, heads: list[tuple[int, int]], replacement=None):
    """The model's output with `heads`' slices of the mixer's input set to zero (or to replacement[layer][h])."""
    model = backend.lm if getattr(backend, "lm", None) is not None else backend.model
    size = backend.info.head_dim
    hooks = []
    for layer in sorted({layer for layer, _ in heads}):

        def edit(module, args, layer=layer):
            mixed = args[0].clone()
            for chosen, head in heads:
                if chosen == layer:
                    value = 0.0 if replacement is None else replacement[layer][head]
                    mixed[..., head * size : (head + 1) * size] = value
            return (mixed, *args[1:])

        hooks.append(_mixer(model, layer).register_forward_pre_hook(edit))
    try:
        with torch.inference_mode():
            outputs = model(**fed.inputs)
    finally:
        for hook in hooks:
            hook.remove()
    return outputs.logits[0] if getattr(backend, "lm", None) is not None else outputs.last_hidden_state[0]


def _loss(logits, ids, predicted):
    logprobs = logits.double().log_softmax(-1)
    return float(-torch.stack([logprobs[p - 1, ids[p]] for p in predicted]).mean())


@pytest.mark.parametrize("kind", ["gpt2_lm", "llama_lm", "bert"])
def test_zero_ablation_equals_editing_the_output_projections_input_by_hand(kind, request):
    """Every head alone, and two heads of different layers together, on GPT-2 (Conv1D c_proj), a grouped-query
    Llama (a query head removed, its shared K and V untouched) and a BERT (cosine of the pooled embedding)."""
    model = attn_cli.load(str(request.getfixturevalue(f"tiny_{kind}_dir")), device="cpu")
    backend = model.backend
    report = model.ablate(TEXT)
    fed = backend.intervention_input(TEXT)
    clean = _by_hand(backend, fed, [])
    assert len(report.ablations) == backend.info.layers * backend.info.heads
    pairs = [ablation.heads for ablation in report.ablations] + [[(0, 1), (1, 3)]]
    together = model.ablate(TEXT, heads=[(0, 1), (1, 3)], together=True).ablations[0]
    for heads, value in [(a.heads, a.value) for a in report.ablations] + [(pairs[-1], together.value)]:
        output = _by_hand(backend, fed, heads)
        if kind == "bert":
            expected = 1 - float(torch.cosine_similarity(output.double().mean(0), clean.double().mean(0), dim=0))
            assert value == pytest.approx(expected, abs=1e-7), heads
        else:
            assert value == pytest.approx(_loss(output, fed.ids, report.predicted), abs=1e-5), heads
    if kind != "bert":
        assert report.clean == pytest.approx(_loss(clean, fed.ids, report.predicted), abs=1e-5)
        assert report.predicted == [token.index for token in fed.tokens[1:] if not token.special]


def test_zero_ablation_of_a_vision_transformers_head_is_the_hand_edit_too(tmp_path):
    """A ViT (tests/vision_models.py) on an image: each head removed by attn equals its slice of
    attention.output.dense's input zeroed by hand, by the cosine distance of the mean-pooled embedding (1e-7)."""
    import vision_models
    from PIL import Image

    model = attn_cli.load(str(vision_models.build("vit", tmp_path / "vit")), device="cpu")
    picture = vision_models.noise(tmp_path / "noise.png")
    report = model.ablate(image=str(picture))
    assert report.measured == "cosine distance of the mean-pooled image embedding" and len(report.ablations) == 8
    fed = model.backend.intervention_image(Image.open(picture).convert("RGB"))
    assert [token.text for token in report.tokens] == [token.text for token in fed.tokens]
    clean = _by_hand(model.backend, fed, [])
    for ablation in report.ablations:
        output = _by_hand(model.backend, fed, ablation.heads)
        expected = 1 - float(torch.cosine_similarity(output.double().mean(0), clean.double().mean(0), dim=0))
        assert ablation.value == pytest.approx(expected, abs=1e-7), ablation.heads


def test_the_unchanged_run_is_the_model_itself_and_batching_changes_no_number(tiny_gpt2_lm_dir, monkeypatch):
    """Capture must never change the model: the run with nothing removed is the plain forward, bit for bit.
    And R heads removed in one batched forward give the numbers of one forward per head (1e-6)."""
    from attn_cli.backends.interventions import HeadChanges

    model = attn_cli.load(str(tiny_gpt2_lm_dir), device="cpu")
    fed = model.backend.intervention_input(TEXT)
    with torch.inference_mode():
        plain = model.backend.lm(**fed.inputs).logits
    assert torch.equal(model.backend.edited_forward(fed, HeadChanges({})), plain)
    batched = model.ablate(TEXT, metric="kl")
    monkeypatch.setattr(ablate_module, "MAX_ROWS", 1)
    one_by_one = model.ablate(TEXT, metric="kl")
    for a, b in zip(batched.ablations, one_by_one.ablations):
        assert a.heads == b.heads and a.value == pytest.approx(b.value, abs=1e-6)
    assert all(ablation.value > 0 for ablation in batched.ablations)  # every head moves the predictions a little


def test_mean_and_resample_put_the_reference_output_in_the_heads_place(tiny_gpt2_lm_dir):
    """mean: the head's mean output over the reference's tokens, written by hand into the mixer's input;
    resample: each position gets the output at the reference token the seeded draw picked."""
    from attn_cli.backends.interventions import HeadOutputs

    model = attn_cli.load(str(tiny_gpt2_lm_dir), device="cpu")
    backend = model.backend
    reference = ["a dog barked twice", "the sun is warm today"]
    kept = []
    for text in reference:
        outputs = HeadOutputs()
        backend.edited_forward(backend.intervention_input(text), outputs)
        kept.append(outputs.outputs)
    means = {layer: torch.cat([k[layer][0] for k in kept]).mean(0) for layer in (0, 1)}  # (H, D)
    report = model.ablate(TEXT, heads="0.2,1.0", method="mean", reference=reference)
    fed = backend.intervention_input(TEXT)
    for ablation in report.ablations:
        expected = _loss(_by_hand(backend, fed, ablation.heads, means), fed.ids, report.predicted)
        assert ablation.value == pytest.approx(expected, abs=1e-5)
    # resample: at each position the output at a reference token drawn by the seeded generator, as the draw
    # of the first (and only) ablation: randint over the pooled reference tokens, (rows, T)
    pool = torch.cat([k[0][0] for k in kept])  # (N, H, D) layer 0's outputs at every reference token
    drawn = torch.randint(len(pool), (1, len(fed.ids)), generator=torch.Generator().manual_seed(3))[0]
    resampled = model.ablate(TEXT, heads="0.2", method="resample", reference=reference, seed=3).ablations[0]
    expected = _loss(_by_hand(backend, fed, [(0, 2)], {0: pool[drawn].transpose(0, 1)}), fed.ids, report.predicted)
    assert resampled.value == pytest.approx(expected, abs=1e-5)


def test_logit_difference_and_a_target_continuation_read_the_right_positions(tiny_gpt2_lm_dir):
    model = attn_cli.load(str(tiny_gpt2_lm_dir), device="cpu")
    backend = model.backend
    report = model.ablate("the cat sat on the", heads="1.1", target="mat", foil="dog")
    assert report.metric == "logit-diff"
    fed = backend.intervention_input("the cat sat on the")
    vocab = backend.tokenizer.get_vocab()
    for heads, value in [([], report.clean), ([(1, 1)], report.ablations[0].value)]:
        logits = _by_hand(backend, fed, heads)[-2]  # the prediction after "the" (the last token is [SEP])
        assert value == pytest.approx(float(logits[vocab["mat"]] - logits[vocab["dog"]]), abs=1e-5)
    continued = model.ablate("the cat sat", heads="0.0", target="on the mat")
    assert continued.measured == "mean loss of the 3 tokens of --target"
    assert [continued.tokens[p].text for p in continued.predicted] == ["on", "the", "mat"]


def test_on_the_lab_decoder_copying_needs_the_previous_token_head_and_the_induction_heads_together(lab):
    """Ten words, then the first of them again: the nine that follow are predictable only by copying (clean
    loss ~0.002 nats). Removing the previous-token head 0.2 alone destroys copying (~15.5 nats); each layer-1
    induction head alone barely matters (≤ 0.1: they are redundant), while the four together destroy it too
    (~8.5 nats). The figures for these ten words; the bounds leave room for other BLAS kernels."""
    report = lab.ablate(LAB_TEXT, target=LAB_TARGET)
    assert report.clean < 0.01
    effects = {ablation.heads[0]: ablation.effect for ablation in report.ablations}
    assert effects[(0, 2)] > 10
    assert report.top(1)[0].heads == [(0, 2)]
    assert all(abs(effects[(1, head)]) < 0.1 for head in range(4))
    together = lab.ablate(LAB_TEXT, layers="1", heads="0-3", together=True, target=LAB_TARGET)
    assert together.ablations[0].heads == [(1, 0), (1, 1), (1, 2), (1, 3)] and together.ablations[0].effect > 5


def test_the_command_prints_json_and_a_figure_and_refuses_in_one_line(tmp_path):
    from conftest import cli_json
    from typer.testing import CliRunner

    from attn_cli.cli import app

    document = cli_json("ablate", LAB_TEXT, "--model", "lab", "--target", LAB_TARGET, "--layer", "0")
    assert document["command"] == "ablate" and document["metric"] == "loss" and document["units"] == "nats"
    assert document["grid"]["layers"] == [0] and len(document["grid"]["effect"][0]) == 4
    assert [row["heads"] for row in document["ablations"]] == [[[0, head]] for head in range(4)]
    assert document["grid"]["effect"][0][2] == document["ablations"][2]["effect"] > 10
    reference = tmp_path / "reference.txt"
    reference.write_text("the cat saw a dog\nonly party company\n")
    runner = CliRunner()
    figure = tmp_path / "grid.svg"
    page = tmp_path / "grid.html"
    args = ["ablate", "Hello, how are you?", "--layer", "0", "--method", "mean", "--reference", str(reference)]
    ran = runner.invoke(app, [*args, "--save", str(figure), "--save", str(page)])
    assert ran.exit_code == 0, ran.output
    assert "mean-ablation · cosine distance of the mean-pooled sentence embedding" in ran.stdout
    assert "reference.txt (2 texts)" in ran.stdout
    assert "embedding: ablated − clean (mean-ablation)" in figure.read_text() and "<html" in page.read_text()
    for wrong, code, said in [
        (["--model", "lab", "--metric", "cosine"], 2, "reads an encoder's embedding"),
        (["--metric", "loss"], 2, "has no language-model head"),
        (["--model", "lab", "--foil", "cat"], 2, "--foil is for --metric logit-diff"),
        (["--model", "lab", "--metric", "logit-diff"], 2, "needs --target and --foil"),
        (["--head", "1.12"], 2, "is not a head of this model"),
        (["--layer", "1", "--head", "1.0"], 2, "names each head's layer"),
        (["--method", "mean-ish"], 2, "is not an ablation"),
        (["--reference", str(reference)], 2, "add --method mean or resample"),
        (
            ["--method", "mean", "--reference", str(tmp_path / "gone.txt")],
            2,
            f"--reference {tmp_path / 'gone.txt'}: no",
        ),
        (["--model", "toy"], 1, "cannot run with a head's output changed"),
    ]:
        refused = runner.invoke(app, ["ablate", "the cat saw a dog", *wrong])
        assert refused.exit_code == code, (wrong, refused.output)
        assert said in refused.output and "Traceback" not in refused.output
        assert len(refused.output.strip().splitlines()) <= 2, refused.output


# -- attn patch ----------------------------------------------------------------------------------------------

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "patching" / "transformer_lens_gpt2.json"


def _weights_sha256(model) -> str:
    import hashlib

    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().float().contiguous().numpy().tobytes())
    return digest.hexdigest()


@pytest.fixture(scope="module")
def gpt2_tokens_only_dir(tiny_gpt2_lm_dir, tmp_path_factory):
    """The tiny GPT-2 whose tokenizer hands the model input_ids and attention_mask only: TransformerLens feeds
    token ids alone, while BERT's tokenizer also gives token_type_ids, which GPT-2 adds as embeddings."""
    import json
    import shutil

    directory = tmp_path_factory.mktemp("gpt2-tokens-only")
    shutil.copytree(tiny_gpt2_lm_dir, directory, dirs_exist_ok=True)
    config = json.loads((directory / "tokenizer_config.json").read_text())
    config["model_input_names"] = ["input_ids", "attention_mask"]
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    return directory


def test_patching_is_transformer_lens_patching_on_the_same_gpt2(gpt2_tokens_only_dir):
    """tests/fixtures/patching/make_fixture.py ran TransformerLens 4.3.0's get_act_patch_attn_head_out_all_pos
    and _by_pos on this tiny GPT-2 (the same weights: their SHA-256 is checked) with the logit difference as
    the metric. attn's patched logit differences equal its numbers within 1e-5 (TransformerLens runs eager
    attention, attn the model's sdpa: float32 reorderings), and attn's recovery is their normalised form."""
    import json

    expected = json.loads(FIXTURE.read_text())
    model = attn_cli.load(str(gpt2_tokens_only_dir), device="cpu")
    assert _weights_sha256(model.backend.lm) == expected["weights_sha256"], "rebuild the fixture: the weights moved"
    assert model.backend.intervention_input(expected["clean"]).ids.tolist() == expected["clean_ids"]
    assert model.backend.intervention_input(expected["corrupt"]).ids.tolist() == expected["corrupt_ids"]
    asked = dict(target=expected["target"], foil=expected["foil"])
    report = model.patch(expected["clean"], expected["corrupt"], **asked)
    assert report.clean_value == pytest.approx(expected["clean_logit_diff"], abs=1e-5)
    assert report.corrupt_value == pytest.approx(expected["corrupt_logit_diff"], abs=1e-5)
    theirs = torch.tensor(expected["all_pos"])  # [layer, head]
    for patch in report.patches:
        assert patch.value == pytest.approx(float(theirs[patch.layer, patch.head]), abs=1e-5)
        span = expected["clean_logit_diff"] - expected["corrupt_logit_diff"]
        normalised = (float(theirs[patch.layer, patch.head]) - expected["corrupt_logit_diff"]) / span
        assert patch.recovery == pytest.approx(normalised, abs=1e-5 / abs(span) * 2)
    by_position = model.patch(expected["clean"], expected["corrupt"], by_position=True, **asked)
    theirs = torch.tensor(expected["by_pos"])  # [layer, pos, head]
    assert len(by_position.patches) == theirs.numel()
    for patch in by_position.patches:
        assert patch.value == pytest.approx(float(theirs[patch.layer, patch.position, patch.head]), abs=1e-5)


def test_patching_a_grouped_query_head_is_the_hand_edit_with_the_other_runs_slice(tiny_llama_lm_dir):
    """Noising on the grouped-query Llama: the clean run with query head h's slice of o_proj's input taken from
    the corrupted run (its K and V, shared with three other query heads, untouched), by hand."""
    from attn_cli.backends.interventions import HeadOutputs

    model = attn_cli.load(str(tiny_llama_lm_dir), device="cpu")
    backend = model.backend
    clean, corrupt = "the cat sat on the", "the dog sat on the"
    report = model.patch(clean, corrupt, target="cat", foil="dog", heads="0.5,1.2", direction="noising")
    other = HeadOutputs()
    backend.edited_forward(backend.intervention_input(corrupt), other)
    fed = backend.intervention_input(clean)
    vocab = backend.tokenizer.get_vocab()
    for patch in report.patches:
        source = {patch.layer: {patch.head: other.outputs[patch.layer][0, :, patch.head]}}  # (T, D)
        logits = _by_hand(backend, fed, [(patch.layer, patch.head)], source)[-2]
        assert patch.value == pytest.approx(float(logits[vocab["cat"]] - logits[vocab["dog"]]), abs=1e-5)


def test_on_the_lab_decoder_the_induction_heads_carry_the_copied_answer(lab):
    """Clean: ten words and the first again, so 'party' (copied) comes next; corrupted: the last word changed
    to 'world', so 'keeps' comes next. Patching any layer-1 induction head from the clean run moves the
    corrupted run a quarter to a third of the way back (they share the work); layer 0's heads, whose inputs
    are the same in both runs up to the changed last token, move it by at most 0.02."""
    clean = LAB_WORDS + " only party"
    corrupt = LAB_WORDS + " only world"
    report = lab.patch(clean, corrupt, target="company", foil="keeps")
    assert report.clean_value > 10 > -5 > report.corrupt_value
    recovery = {(patch.layer, patch.head): patch.recovery for patch in report.patches}
    assert all(0.2 < recovery[1, head] < 0.5 for head in range(4))
    assert all(abs(recovery[0, head]) < 0.02 for head in range(4))
    noised = lab.patch(clean, corrupt, target="company", foil="keeps", direction="noising")
    assert all(patch.recovery < 0.95 for patch in noised.patches if patch.layer == 1)


def test_patch_by_position_draws_its_heads_in_the_order_of_the_figure_and_the_page(lab):
    """The terminal's positions × heads table keeps the heads that recover most, but draws them in layer and head
    order, as the SVG and the page do (it drew them strongest first, so a head moved between the two views)."""
    from rich.console import Console

    from attn_cli.render.interventions_view import render_patch

    clean, corrupt = LAB_WORDS + " only party", LAB_WORDS + " only world"
    report = lab.patch(clean, corrupt, target="company", foil="keeps", by_position=True)
    for width, fits in ((80, lambda n: n == 8), (40, lambda n: 1 < n < 8)):  # every head; the strongest that fit
        console = Console(width=width, record=True, color_system=None)
        console.print(render_patch(report, width))
        lines = console.export_text().splitlines()
        header = next(line for line in lines if line.split() and line.split()[0] in ("0.0", "0.1", "0.2", "1.0", "1.1"))
        heads = [tuple(map(int, name.split("."))) for name in header.split()]
        assert fits(len(heads)) and heads == sorted(heads), header


def test_the_patch_command_refuses_in_one_line():
    from typer.testing import CliRunner

    from attn_cli.cli import app

    runner = CliRunner()
    base = ["patch", "the cat saw a", "--target", "dog", "--foil", "cat"]
    for wrong, code, said in [
        (["--corrupt", "the cat saw a big", "--model", "lab"], 2, "as many tokens long"),
        (["--corrupt", "the dog saw a"], 1, "has no language-model head"),
        (["--corrupt", "the cat saw a big"], 1, "has no language-model head"),  # the model before the lengths
        (["--corrupt", "the dog saw a", "--model", "lab", "--direction", "sideways"], 2, "is not a direction"),
        (["--corrupt", "the dog saw a", "--model", "toy"], 1, "cannot run with a head's output changed"),
        (["--corrupt", "the cat saw a", "--model", "lab"], 2, "there is nothing to recover"),
        (["--corrupt", "the dog saw a", "--model", "lab", "--foil", "zzzq"], 2, "not in the model's vocabulary"),
    ]:
        refused = runner.invoke(app, [*base, *wrong])
        assert refused.exit_code == code, (wrong, refused.output)
        assert said in refused.output and "Traceback" not in refused.output


# -- attn importance -----------------------------------------------------------------------------------------


def test_importance_is_the_gates_gradient_by_finite_differences(tiny_llama_lm_dir):
    """|∂L/∂ξ| of each head's gate equals the central difference (L(1 + ε) − L(1 − ε)) / 2ε of the text's mean
    loss with the head's slice of o_proj's input scaled by hand (ε = 1e-2, float32 losses of ~10 nats: 1e-3
    relative, or 1e-5 absolute for a gradient near 0). Two texts in one padded batch: each its own gradient."""
    model = attn_cli.load(str(tiny_llama_lm_dir), device="cpu")
    backend = model.backend
    texts = ["the cat sat on the mat", "a dog ran"]
    report = model.importance(texts, prune=False)
    per_text = []
    for text in texts:
        one = model.importance(text, prune=False)
        per_text.append(one.importance)
    assert np.allclose(report.importance, np.mean(per_text, axis=0), atol=1e-6)  # padding changes nothing
    fed = backend.intervention_input(texts[0])
    predicted = [token.index for token in fed.tokens[1:] if not token.special]
    epsilon, size = 1e-2, backend.info.head_dim
    for layer, head in [(0, 0), (0, 5), (1, 3), (1, 7)]:

        def loss(scale: float) -> float:
            def edit(module, args):
                mixed = args[0].clone()
                mixed[..., head * size : (head + 1) * size] *= scale
                return (mixed, *args[1:])

            hook = backend.lm.model.layers[layer].self_attn.o_proj.register_forward_pre_hook(edit)
            try:
                with torch.inference_mode():
                    logits = backend.lm(**fed.inputs).logits[0]
            finally:
                hook.remove()
            return _loss(logits, fed.ids, predicted)

        difference = abs(loss(1 + epsilon) - loss(1 - epsilon)) / (2 * epsilon)
        assert per_text[0][layer, head] == pytest.approx(difference, rel=1e-3, abs=1e-5), (layer, head)


def test_on_the_lab_decoder_the_previous_token_head_matters_most_and_the_curve_ends_with_every_head_gone(lab):
    texts = [LAB_WORDS + " " + LAB_WORDS, "the cat saw a dog . the cat saw a dog"]
    report = lab.importance(texts)
    assert report.top(1)[0][:2] == (0, 2)
    assert report.order()[-1] == (0, 2)
    assert [removed for removed, _ in report.pruning] == list(range(9))
    assert report.pruning[0][1] == pytest.approx(report.loss)
    assert report.pruning[-1][1] > 2 * report.loss  # every head removed: the copying is gone


def test_the_importance_command_reads_a_corpus_and_refuses_an_encoder(tmp_path):
    from conftest import cli_json
    from typer.testing import CliRunner

    from attn_cli.cli import app

    corpus = tmp_path / "corpus.txt"
    corpus.write_text(f"{LAB_WORDS} {LAB_WORDS}\nthe cat saw a dog . the cat saw a dog\nonly party\n")
    document = cli_json("importance", "--file", str(corpus), "--model", "lab", "--limit", "2", "--batch-size", "1")
    assert document["command"] == "importance" and document["texts"] == 2
    assert document["order"][-1] == [0, 2] and len(document["pruning"]) == 9
    runner = CliRunner()
    shown = runner.invoke(app, ["importance", "--file", str(corpus), "--model", "lab", "--limit", "2"])
    steps = shown.stdout[shown.stdout.index("the step removes") :].splitlines()[3:11]  # the rows removing a head
    assert [row.split()[-1] for row in steps] == [f"{layer}.{head}" for layer, head in document["order"]]
    refused = runner.invoke(app, ["importance", "Hello there"])
    assert refused.exit_code == 1 and "has no language-model head" in refused.output
    both = runner.invoke(app, ["importance", "Hello", "--file", str(corpus), "--model", "lab"])
    assert both.exit_code == 2 and "separate sources" in both.output


def test_a_figure_drawn_only_as_svg_is_that_svg_in_a_page(lab):
    """An analysis whose figure has no page of its own (routes) saves .html as its SVG inside a page (it was a
    TypeError before the page existed)."""
    from attn_cli.render.figures import html_page, svg_figure

    report = lab.routes("the cat saw a dog")
    page, drawn = html_page(report), svg_figure(report)
    assert drawn[drawn.index("<svg") :] in page and page.startswith("<!DOCTYPE html>")


def test_over_a_corpus_each_ablation_is_the_mean_of_the_texts_with_its_spread_and_examples(lab, tmp_path):
    texts = [LAB_WORDS + " " + LAB_WORDS, "the cat saw a dog . the cat saw a dog", "party company among there"]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(texts) + "\n")
    report = lab.ablate(file=str(corpus), layers="0")
    singles = [lab.ablate(text, layers="0") for text in texts]
    assert report.texts == 3 and report.clean == pytest.approx(np.mean([one.clean for one in singles]))
    for column, ablation in enumerate(report.ablations):
        each = [one.ablations[column].effect for one in singles]
        assert ablation.effect == pytest.approx(np.mean(each)) and ablation.std == pytest.approx(np.std(each))
        assert [effect for effect, _ in ablation.examples] == sorted(each, reverse=True)
        assert ablation.examples[0][1] == texts[int(np.argmax(each))]
    from conftest import cli_json

    document = cli_json("ablate", "--file", str(corpus), "--model", "lab", "--layer", "0", "--limit", "2")
    assert document["texts"] == 2 and len(document["ablations"][2]["examples"]) == 2
    assert document["measured"].endswith("averaged over the texts")


def test_the_reports_are_dataframes_too(lab):
    pytest.importorskip("pandas")
    ablated = lab.ablate(LAB_TEXT, target=LAB_TARGET).to_pandas()
    assert list(ablated.columns) == ["heads", "layer", "head", "value", "effect"] and len(ablated) == 8
    assert ablated.loc[ablated["effect"].idxmax(), "heads"] == "0.2"
    patched = lab.patch(LAB_WORDS + " only party", LAB_WORDS + " only world", target="company", foil="keeps")
    frame = patched.to_pandas()
    assert len(frame) == 8 and frame["position"].isna().all() and frame["recovery"].max() < 1
    ranked = lab.importance([LAB_WORDS + " " + LAB_WORDS], prune=False).to_pandas()
    assert ranked.iloc[-1][["layer", "head"]].tolist() == [0, 2] and ranked["rank"].tolist() == list(range(8))


def test_a_corpus_store_keeps_each_text_and_resumes_after_the_last(lab, tmp_path, monkeypatch):
    """--store writes a line per finished text; --resume runs only the texts after them (the others are not run
    again), a line cut short by a crash is dropped, and the report is the one an uninterrupted run makes."""
    texts = [LAB_WORDS + " " + LAB_WORDS, "the cat saw a dog . the cat saw a dog", "party company among there"]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(texts) + "\n")
    store = tmp_path / "store"
    whole = lab.ablate(file=str(corpus), layers="0")
    first = lab.ablate(file=str(corpus), layers="0", limit=2, store=str(store))
    assert first.texts == 2 and (store / "run.json").is_file()
    with open(store / "texts.jsonl", "a", encoding="utf-8") as stream:
        stream.write('{"index": 2, "text": "party comp')  # a crash in the middle of the third text's line
    ran = []
    original = ablate_module.ablate
    monkeypatch.setattr(
        ablate_module, "ablate", lambda backend, text, *a, **k: ran.append(text) or original(backend, text, *a, **k)
    )
    resumed = lab.ablate(file=str(corpus), layers="0", store=str(store), resume=True)
    assert ran == [texts[2]]
    assert [a.effect for a in resumed.ablations] == pytest.approx([a.effect for a in whole.ablations])
    assert [a.examples for a in resumed.ablations] == [a.examples for a in whole.ablations]
    lines = (store / "texts.jsonl").read_text().splitlines()
    assert [json.loads(line)["index"] for line in lines] == [0, 1, 2]
    from attn_cli.plumbing.errors import BadInput

    with pytest.raises(BadInput, match="is not empty"):
        lab.ablate(file=str(corpus), layers="0", store=str(store))
    with pytest.raises(BadInput, match="written by another run"):
        lab.ablate(file=str(corpus), layers="1", store=str(store), resume=True)
    corpus.write_text("another text\n" + "\n".join(texts) + "\n")
    with pytest.raises(BadInput, match="is not the one"):
        lab.ablate(file=str(corpus), layers="0", store=str(store), resume=True)


def test_a_masked_language_models_heads_by_the_loss_at_its_masks_and_by_its_embedding(tmp_path):
    """A BERT saved with its masked-LM head: masked-loss is the loss of --target's tokens at the [MASK]s, each head
    removed by attn equal to the hand edit of attention.output.dense's input (1e-5); cosine still reads the
    encoder's hidden states; a next-token metric is refused in one line."""
    from conftest import save_tiny
    from transformers import BertConfig, BertForMaskedLM

    from attn_cli.plumbing.errors import BadInput

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37
    )
    model = attn_cli.load(str(save_tiny(BertForMaskedLM(config), tmp_path / "mlm")), device="cpu")
    text = "the [MASK] sat on the [MASK]"
    report = model.ablate(text, target="cat mat")
    assert report.metric == "masked-loss" and report.measured == "mean loss of 'cat mat' at the text's 2 [MASK]s"
    fed = model.backend.intervention_input(text)
    vocab = model.backend.tokenizer.get_vocab()
    masks = [token.index for token in fed.tokens if token.text == "[MASK]"]

    def loss(heads):
        hooks = []
        for layer, head in heads:

            def zero(module, args, head=head):
                mixed = args[0].clone()
                mixed[..., head * 8 : (head + 1) * 8] = 0
                return (mixed,)

            mixer = model.backend.masked_lm.bert.encoder.layer[layer].attention.output.dense
            hooks.append(mixer.register_forward_pre_hook(zero))
        with torch.inference_mode():
            logits = model.backend.masked_lm(**fed.inputs).logits[0].double().log_softmax(-1)
        for hook in hooks:
            hook.remove()
        return -float((logits[masks[0], vocab["cat"]] + logits[masks[1], vocab["mat"]]) / 2)

    assert report.clean == pytest.approx(loss([]), abs=1e-5)
    for ablation in report.ablations:
        assert ablation.value == pytest.approx(loss(ablation.heads), abs=1e-5)
    assert model.ablate(text).metric == "cosine"
    with pytest.raises(BadInput, match="next-token predictions"):
        model.ablate(text, metric="loss")
    with pytest.raises(BadInput, match="is 1 token, and the text has 2"):
        model.ablate(text, target="cat")


def test_the_unknown_word_warning_reads_the_text_with_its_target_and_patch_says_when_it_runs_backwards():
    """A --target continuation the vocabulary lacks is warned about as part of the text the model read (with
    its own token count); a patch whose corrupted text favours --target more says its scale runs backwards."""
    from typer.testing import CliRunner

    from attn_cli.cli import app

    ran = CliRunner().invoke(app, ["ablate", "the cat saw a", "--model", "lab", "--target", "dog zzzqqq", "-l", "0"])
    assert ran.exit_code == 0, ran.output
    assert "1 of 6 tokens of 'the cat saw a dog zzzqqq' is <unk>" in " ".join(ran.output.split())
    clean, corrupt = LAB_WORDS + " only world", LAB_WORDS + " only party"  # the corrupted one copies 'company'
    backwards = CliRunner().invoke(
        app, ["patch", clean, "--corrupt", corrupt, "--target", "company", "--foil", "keeps", "--model", "lab"]
    )
    assert backwards.exit_code == 0, backwards.output
    assert "the recovery scale runs backwards" in " ".join(backwards.output.split())
