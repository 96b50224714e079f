"""Encoder–decoder models: encoder, decoder and cross-attention kept apart, rectangular cross heads, parity with
transformers' eager output_attentions. Tiny random models built from configs (MiniLM's tokenizer copied)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from tests.conftest import save_tiny

SOURCE, TARGET = "the cat sat on the mat", "die katze sass"
SIZES = dict(
    vocab_size=30522,
    d_model=32,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=64,
    decoder_ffn_dim=64,
    max_position_embeddings=64,
    pad_token_id=0,
    bos_token_id=101,
    eos_token_id=102,
    decoder_start_token_id=0,
    forced_eos_token_id=102,
)


def tiny_seq2seq(kind: str, directory):
    """A 2 + 2-layer random BART, mBART or Marian with its LM head, saved as a user's checkpoint would be."""
    from transformers import (
        BartConfig,
        BartForConditionalGeneration,
        MarianConfig,
        MarianMTModel,
        MBartConfig,
        MBartForConditionalGeneration,
    )

    config_class, model_class = {
        "bart": (BartConfig, BartForConditionalGeneration),
        "mbart": (MBartConfig, MBartForConditionalGeneration),
        "marian": (MarianConfig, MarianMTModel),
    }[kind]
    torch.manual_seed(0)
    return save_tiny(model_class(config_class(**SIZES)), directory)


@pytest.fixture(scope="module", params=["marian", "bart", "mbart"])
def seq2seq_dir(request, tmp_path_factory):
    return tiny_seq2seq(request.param, tmp_path_factory.mktemp(request.param))


@pytest.fixture(scope="module")
def marian_dir(tmp_path_factory):
    return tiny_seq2seq("marian", tmp_path_factory.mktemp("marian"))


@pytest.fixture(scope="module")
def marian(marian_dir):
    """The tiny Marian loaded once through attn_cli.load, for the tests that only read reports of it."""
    import attn_cli as attn

    return attn.load(str(marian_dir), device="cpu")


def eager_attentions(directory, report):
    """transformers' own eager forward over the same source and decoder ids, output_attentions=True."""
    from transformers import AutoModelForSeq2SeqLM

    model = AutoModelForSeq2SeqLM.from_pretrained(directory, local_files_only=True, attn_implementation="eager").eval()
    source = torch.tensor([[token.id for token in report.tokens]])
    target = torch.tensor([[token.id for token in report.target_tokens]])
    with torch.no_grad():
        out = model(input_ids=source, decoder_input_ids=target, output_attentions=True)
    return {"encoder": out.encoder_attentions, "decoder": out.decoder_attentions, "cross": out.cross_attentions}


def test_every_stack_equals_eager_output_attentions(seq2seq_dir):
    import attn_cli as attn

    model = attn.load(str(seq2seq_dir), device="cpu")
    assert model.backend.model.config._attn_implementation == "sdpa"  # captured under sdpa, compared with eager
    report = model.inspect(SOURCE, target=TARGET)
    expected = eager_attentions(seq2seq_dir, report)
    seen = set()
    for stack in report.stacks:
        for layer in stack.layers:
            got = np.stack([head.weights for head in layer.heads])  # (H, T_q, T_k)
            want = expected[layer.stack][layer.layer][0].numpy()
            assert got.shape == want.shape, (layer.stack, layer.layer)
            assert np.abs(got - want).max() <= 1e-5, (layer.stack, layer.layer)
            seen.add((layer.stack, layer.layer))
    assert seen == {(stack, layer) for stack in ("encoder", "decoder", "cross") for layer in (0, 1)}


def test_a_cross_head_is_target_rows_by_source_columns(marian):
    report = marian.inspect(SOURCE, target=TARGET, stacks="cross", layers=1)
    (cross,) = report.stacks
    head = cross.layers[0].heads[0]
    assert cross.layers[0].stack == "cross"
    assert head.weights.shape == (len(report.target_tokens), len(report.tokens)) == (7, 8)
    assert [t.text for t in report.target_tokens][:3] == ["[PAD]", "[CLS]", "die"]  # start token, then the target
    np.testing.assert_allclose(head.weights.sum(-1), 1.0, atol=1e-6)
    # symmetry and self-weight pair query i with key i: not defined when they are different tokens
    assert np.isnan(head.self_weight).all() and head.symmetry.symmetric is None
    assert "target tokens" in head.symmetry.reason
    assert all(
        key.token == report.tokens[key.index].text for row in head.top for key in row
    )  # keys named from the source


def test_the_json_says_each_layers_stack_and_its_token_lists(marian):
    report = marian.inspect(SOURCE, target=TARGET, layers=0, heads=0)
    document = report.to_json_dict()
    assert json.loads("".join(report.json_chunks())) == document  # the streamed text is the same document
    assert [layer["stack"] for layer in document["layers"]] == ["encoder", "decoder", "cross"]
    encoder, decoder, cross = document["layers"]
    assert "queries" not in encoder and "keys" not in encoder  # the document's tokens, the source
    assert decoder["queries"] == decoder["keys"] == document["target_tokens"]
    assert cross["queries"] == document["target_tokens"] and cross["keys"] == document["tokens"]
    head = cross["heads"][0]
    assert np.array(head["weights"]).shape == (7, 8)
    assert head["symmetry"]["symmetric"] is None and head["symmetry"]["not_applicable"]
    assert encoder["heads"][0]["symmetry"]["symmetric"] is not None  # square heads keep theirs


def test_an_encoder_decoder_model_needs_a_target_and_other_commands_refuse_it(marian):
    from attn_cli.plumbing.errors import BadInput, UnsupportedModel

    model = marian
    with pytest.raises(BadInput, match="target"):
        model.inspect(SOURCE)
    with pytest.raises(UnsupportedModel, match="encoder–decoder"):
        model.compare(SOURCE)
    with pytest.raises(BadInput, match="stacks 'middle'"):
        model.inspect(SOURCE, target=TARGET, stacks="middle")


def test_an_empty_target_is_named_as_the_target(marian_dir):
    """attn inspect SRC --target "" said "the text is empty" (the TEXT argument's words): it names --target."""
    from typer.testing import CliRunner

    from attn_cli.cli import app

    for command in ("inspect", "heads"):
        for empty in ("", "   "):
            result = CliRunner().invoke(app, [command, SOURCE, "--target", empty, "--model", str(marian_dir)])
            assert result.exit_code == 2, (command, result.output)
            assert result.stderr.startswith("error: --target is empty"), result.stderr
            assert len(result.stderr.strip().splitlines()) == 1


@pytest.fixture(scope="module")
def cross_report(marian):
    return marian.inspect(SOURCE, target=TARGET, stacks="cross", layers=1, heads=0)


def test_the_terminal_draws_a_cross_head_as_target_rows_by_source_columns(cross_report):
    from rich.console import Console

    from attn_cli.render.seq2seq_view import render_pair

    for width in (80, 160):
        console = Console(width=width, record=True, color_system=None)
        console.print(render_pair(cross_report))
        text = console.export_text()
        assert "cross-attention · target rows (queries) × source columns (keys)" in text
        # every row labelled by its target token, the columns listed by their source tokens
        assert "keys 0:[CLS]  1:the  2:cat  3:sat  4:on  5:the  6:mat  7:[SEP]" in text
        for index, token in enumerate(cross_report.target_tokens):
            assert f"{index} {token.text}" in text
        assert "Symmetry not defined: cross-attention" in text


def test_the_svg_and_html_label_a_cross_head_with_both_token_lists(cross_report):
    from attn_cli.render.figures import page_data, svg_figure

    svg = svg_figure(cross_report)
    assert "rows: target tokens (queries) · columns: source tokens (keys)" in svg
    assert "die → cat" in svg  # a cell's tooltip: its target row and its source column
    (run,) = page_data(cross_report)["runs"]
    assert run["rowTokens"] == [token.text for token in cross_report.target_tokens]
    assert run["colTokens"] == [token.text for token in cross_report.tokens]
    assert np.array(run["layers"][0]["heads"][0]["m"]).shape == (7, 8)


@pytest.fixture(scope="module")
def t5_dir(tmp_path_factory):
    """A 2 + 2-layer random T5: relative position bias inside the scores, no 1/√d scale."""
    from transformers import T5Config, T5ForConditionalGeneration

    torch.manual_seed(0)
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
    return save_tiny(T5ForConditionalGeneration(config), tmp_path_factory.mktemp("t5"))


def test_t5_scores_include_its_position_bias_and_equal_eager(t5_dir, monkeypatch):
    """Eager's softmax inputs (q·kᵀ + position bias + mask), recorded in call order: encoder layers, then each
    decoder layer's self- and cross-attention; attn's scores and weights equal them to 1e-5."""
    from transformers import AutoModelForSeq2SeqLM

    import attn_cli as attn

    report = attn.load(str(t5_dir), device="cpu").inspect(SOURCE, target=TARGET)
    model = AutoModelForSeq2SeqLM.from_pretrained(t5_dir, local_files_only=True, attn_implementation="eager").eval()
    inputs, softmax = [], torch.nn.functional.softmax
    monkeypatch.setattr(torch.nn.functional, "softmax", lambda x, *a, **k: inputs.append(x) or softmax(x, *a, **k))
    source = torch.tensor([[token.id for token in report.tokens]])
    target = torch.tensor([[token.id for token in report.target_tokens]])
    with torch.no_grad():
        out = model(input_ids=source, decoder_input_ids=target, output_attentions=True)
    monkeypatch.setattr(torch.nn.functional, "softmax", softmax)
    order = [("encoder", 0), ("encoder", 1), ("decoder", 0), ("cross", 0), ("decoder", 1), ("cross", 1)]
    expected = dict(zip(order, inputs))
    weights = {"encoder": out.encoder_attentions, "decoder": out.decoder_attentions, "cross": out.cross_attentions}
    for stack in report.stacks:
        for layer in stack.layers:
            scores = np.stack([head.scores for head in layer.heads])  # (H, T_q, T_k), NaN where masked
            want = expected[(layer.stack, layer.layer)][0].numpy()
            allowed = ~np.isnan(scores)
            assert np.array_equal(allowed, want > -1e30), (layer.stack, layer.layer)
            assert np.abs(scores[allowed] - want[allowed]).max() <= 1e-5, (layer.stack, layer.layer)
            got = np.stack([head.weights for head in layer.heads])
            assert np.abs(got - weights[layer.stack][layer.layer][0].numpy()).max() <= 1e-5
            assert layer.heads[0].formula == "q·kᵀ·1 + position bias"
    encoder_head = report.stacks[0].layers[0].heads[0]
    assert encoder_head.score_stats.unscaled_variance is None  # no "unscaled" form: the bias is not scaled


def test_generate_on_an_encoder_decoder_model_checks_its_settings_as_a_decoder_does(marian):
    """--temperature 0 with --sample is one line naming the option (was transformers' ValueError, 'unexpected'),
    as on a decoder-only model: both paths run generate.check_options."""
    from attn_cli.plumbing.errors import BadInput

    with pytest.raises(BadInput, match="temperature must be above 0"):
        marian.generate(SOURCE, max_new_tokens=2, sample=True, temperature=0.0)
    with pytest.raises(BadInput, match="max_new_tokens"):
        marian.generate(SOURCE, max_new_tokens=0)


@pytest.mark.parametrize("which", ["marian", "t5"])
def test_generated_rows_equal_a_teacher_forced_eager_forward(which, marian_dir, t5_dir):
    """Decoder self-attention and cross-attention rows of every generated token equal one eager forward over the
    start token and the generated ids (the last generated token is never a query)."""
    from transformers import AutoModelForSeq2SeqLM

    import attn_cli as attn

    directory = {"marian": marian_dir, "t5": t5_dir}[which]
    report = attn.load(str(directory), device="cpu").generate(SOURCE, max_new_tokens=5)
    ids = [token.id for token in report.decoder.tokens]
    assert len(ids) == 6 and report.decoder.prompt_tokens == 1
    model = AutoModelForSeq2SeqLM.from_pretrained(directory, local_files_only=True, attn_implementation="eager").eval()
    with torch.no_grad():
        out = model(
            input_ids=torch.tensor([[token.id for token in report.tokens]]),
            decoder_input_ids=torch.tensor([ids[:-1]]),
            output_attentions=True,
        )
    for stack, layers, expected in (
        ("decoder", report.decoder.layers, out.decoder_attentions),
        ("cross", report.cross, out.cross_attentions),
    ):
        for layer in layers:
            got = np.stack([head.weights for head in layer.heads])  # (H, N, K)
            want = expected[layer.layer][0].numpy()  # (H, N, K) with the decoder's K one short: the last
            assert np.isnan(got[..., want.shape[-1] :]).all()  # generated token, which no step could look at
            got = got[..., : want.shape[-1]]
            seen = ~np.isnan(got)
            assert np.abs(got[seen] - want[seen]).max() <= 1e-5, (stack, layer.layer)
            assert np.array_equal(seen, want != 0) if stack == "decoder" else seen.all()
    document = report.to_json_dict()
    assert [layer["stack"] for layer in document["layers"]] == ["decoder", "decoder", "cross", "cross"]


def test_an_audio_encoder_decoder_is_one_line_naming_what_is_supported(tmp_path):
    """Whisper is encoder–decoder too, but reads audio features: refused (exit 1), saying what attn reads."""
    from transformers import WhisperConfig, WhisperModel

    from tests.test_hardening import attn, one_line_error

    config = WhisperConfig(
        vocab_size=30522,
        d_model=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        num_mel_bins=8,
        max_source_positions=16,
        max_target_positions=16,
        pad_token_id=0,
        bos_token_id=101,
        eos_token_id=102,
        decoder_start_token_id=101,
    )
    directory = save_tiny(WhisperModel(config), tmp_path / "whisper")
    one_line_error(
        attn("inspect", "hello", "--target", "hallo", "--model", directory),
        1,
        "whisper is an audio model",
        "encoder–decoder (BART, mBART, Marian, T5)",
        "not audio, video or vision–language models",
    )


def test_rollout_of_an_encoder_decoder_is_its_encoders_and_equals_numpy(marian, marian_dir):
    """Abnar & Zuidema over the encoder's self-attention (the decoder and cross layers do not chain over one
    token set), recomputed in numpy from eager's encoder_attentions."""
    report = marian.rollout(SOURCE)
    from transformers import AutoModelForSeq2SeqLM

    model = AutoModelForSeq2SeqLM.from_pretrained(marian_dir, local_files_only=True, attn_implementation="eager").eval()
    with torch.no_grad():
        out = model.get_encoder()(
            input_ids=torch.tensor([[token.id for token in report.tokens]]), output_attentions=True
        )
    rolled = np.eye(len(report.tokens))
    for layer in out.attentions:
        mixed = 0.5 * layer[0].numpy().astype(np.float64).mean(0) + 0.5 * np.eye(len(report.tokens))
        rolled = (mixed / mixed.sum(-1, keepdims=True)) @ rolled
    assert report.layers == [0, 1]
    np.testing.assert_allclose(report.matrix, rolled, atol=1e-5)


def test_target_on_a_model_with_one_stack_is_refused(minilm_backend):
    from attn_cli.api import Model
    from attn_cli.plumbing.errors import BadInput

    with pytest.raises(BadInput, match="target is for encoder–decoder models"):
        Model(minilm_backend).inspect(SOURCE, target=TARGET)
