"""attn attribute: ALTI, GlobEnc and value zeroing equal their reference implementations on MiniLM (≤ 1e-4,
tests/fixtures/attribution_reference.json, made by tests/fixtures/make_attribution_fixture.py from their own
code), and keep their invariants."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import until
from typer.testing import CliRunner

from attn_cli.api import Model
from attn_cli.plumbing.errors import BadInput, UnsupportedModel

REFERENCE = json.loads((Path(__file__).parent / "fixtures" / "attribution_reference.json").read_text())
TEXT = REFERENCE["sentence"]
METHODS = {"alti": "alti", "globenc": "globenc", "value-zeroing": "value_zeroing"}  # attn's name → the fixture's


@pytest.fixture(scope="module")
def minilm(minilm_backend) -> Model:
    return Model(minilm_backend)


@pytest.fixture(scope="module")
def reports(minilm) -> dict:
    return {method: minilm.attribute(TEXT, method=method) for method in METHODS}


def rows_normalised(matrix) -> np.ndarray:
    matrix = np.asarray(matrix, dtype=np.float64)
    return matrix / matrix.sum(-1, keepdims=True)


@pytest.mark.parametrize("method", METHODS)
def test_each_method_equals_its_reference_on_minilm(reports, method):
    report, reference = reports[method], REFERENCE[METHODS[method]]
    assert [token.text for token in report.tokens] == REFERENCE["tokens"]
    per_layer, rollout = np.asarray(reference["per_layer"]), np.asarray(reference["rollout"])
    if method == "globenc":  # the reference's norms and their product are unnormalised: attn shows each row's shares
        per_layer, rollout = rows_normalised(per_layer), rows_normalised(rollout)
    np.testing.assert_allclose(report.per_layer, per_layer, atol=1e-4, rtol=0)
    np.testing.assert_allclose(report.matrix, rollout, atol=1e-4, rtol=0)


@pytest.mark.parametrize("method", METHODS)
def test_rows_sum_to_one_and_no_share_is_negative(reports, method):
    report = reports[method]
    assert report.per_layer.shape == (6, len(report.tokens), len(report.tokens)) and report.layers == list(range(6))
    for matrix in (*report.per_layer, report.matrix):
        np.testing.assert_allclose(matrix.sum(-1), 1, atol=1e-5)
        assert (matrix >= 0).all()


def test_the_decomposition_adds_up_to_the_first_layernorm_output(minilm_backend):
    """Σ_j T_i(x_j) + L(b_O)/s_i + β equals LN1(x + Attn(x)) as the model computed it, in every layer."""
    from attn_cli.math.attribution import decomposed

    for block in minilm_backend.encoder_blocks(TEXT, range(6)):
        _, outputs = decomposed(block)
        expected = torch.nn.functional.layer_norm(
            block.pre_ln1, (block.pre_ln1.shape[-1],), block.ln1.weight, block.ln1.bias, block.ln1.eps
        )
        torch.testing.assert_close(outputs, expected, atol=2e-5, rtol=0)


def test_value_zeroing_of_a_token_whose_values_are_already_zero_is_zero(minilm_backend):
    """Token 3's value vectors zeroed in layer 2 for every run: zeroing them again changes nothing."""
    value = minilm_backend.model.encoder.layer[2].attention.self.value

    def zero_token_3(_module, _args, output):
        output = output.clone()
        output[:, 3] = 0
        return output

    handle = value.register_forward_hook(zero_token_3)
    try:
        report = Model(minilm_backend).attribute(TEXT, method="value-zeroing", layers="1-3")
    finally:
        handle.remove()
    assert report.layers == [1, 2, 3]
    np.testing.assert_array_equal(report.per_layer[1][:, 3], 0)
    assert (report.per_layer[0][:, 3] > 0).all() and (report.per_layer[2][:, 3] > 0).all()


def test_a_subset_of_layers_rolls_out_only_those(minilm, reports):
    report = minilm.attribute(TEXT, method="alti", layers="2-3")
    np.testing.assert_allclose(report.per_layer, reports["alti"].per_layer[2:4], atol=1e-6)
    np.testing.assert_allclose(report.matrix, report.per_layer[1] @ report.per_layer[0], atol=1e-6)


def test_decoders_and_the_toy_are_refused_naming_what_is_supported(tiny_gpt2_dir):
    """globenc and value zeroing stay encoder-only (alti has a decoder form: tests/test_routes.py)."""
    import attn_cli

    with pytest.raises(UnsupportedModel, match="post-LayerNorm BERT-family"):
        attn_cli.load(str(tiny_gpt2_dir)).attribute("Hello there", method="globenc")
    with pytest.raises(UnsupportedModel, match="Hugging Face model"):
        attn_cli.load("toy").attribute("Hello there")


def test_unknown_methods_versus_and_gaps_are_bad_input(minilm):
    with pytest.raises(BadInput, match="method='flow2'"):
        minilm.attribute(TEXT, method="flow2")
    with pytest.raises(BadInput, match="^vs"):
        minilm.attribute(TEXT, vs="weights")
    with pytest.raises(BadInput, match="consecutive"):
        minilm.attribute(TEXT, layers="0,2")


def test_an_explain_the_method_does_not_read_is_refused(minilm):
    """--explain is the gradient and alti-logit methods': alti (the default), globenc, value-zeroing and flow would
    drop it without a word (exit 0); it is refused in one line, exit 2, as --dpi without a PNG is, naming the methods
    that read it."""
    from attn_cli.cli import app

    for method in ("alti", "globenc", "value-zeroing", "flow"):
        with pytest.raises(BadInput, match=f"explain is for method gradient or alti-logit; {method} does not read it"):
            minilm.attribute(TEXT, method=method, explain=3)
    result = CliRunner().invoke(app, ["attribute", TEXT, "--explain", "3"])
    assert result.exit_code == 2 and result.stdout == ""
    assert (
        result.stderr
        == "error: --explain is for --method gradient or alti-logit; alti does not read it; drop --explain, or add "
        "--method gradient\n"
    )


def test_cli_json_equals_the_api_with_the_attention_rollout_beside(minilm):
    from attn_cli.cli import app

    result = CliRunner().invoke(app, ["attribute", TEXT, "--method", "globenc", "--vs", "attention", "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document == minilm.attribute(TEXT, method="globenc", vs="attention").to_json_dict()
    assert document["command"] == "attribute" and document["method"] == "globenc"
    assert len(document["per_layer"]) == 6 and len(document["attribution"]) == len(document["tokens"])
    np.testing.assert_allclose(document["attention_rollout"], minilm.rollout(TEXT).matrix, atol=1e-6)
    table = minilm.attribute(TEXT, vs="attention").to_arrow()
    assert table.num_rows == len(document["tokens"]) ** 2
    assert {"attribution", "attention_rollout"} <= set(table.column_names)


def test_the_terminal_shows_both_matrices_side_by_side_at_80_columns(monkeypatch):
    from attn_cli.cli import app

    monkeypatch.setenv("COLUMNS", "80")
    result = CliRunner().invoke(app, ["attribute", TEXT, "--vs", "attention"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    titles = [line for line in lines if "raw attention rollout over layers 0-5" in line]
    assert titles and "ALTI over layers 0-5" in titles[0]  # on one line: side by side
    assert max(len(line) for line in lines) <= 80
    assert "where each output token comes from (ALTI)" in result.stdout


def test_the_page_has_a_run_per_matrix(tmp_path, minilm):
    from attn_cli.render.figures import page_data, svg_figure

    report = minilm.attribute(TEXT, method="value-zeroing", vs="attention")
    data = page_data(report)
    assert [run["name"] for run in data["runs"]] == [
        "raw attention rollout over layers 0-5",
        "value zeroing over layers 0-5 (rows sum to 1)",
    ]
    svg = svg_figure(report)
    assert "value zeroing over layers 0-5" in svg and "raw attention rollout" in svg


def test_explore_shows_the_sentences_attribution_and_switches_method(minilm):
    """a opens `attn attribute --vs attention` of the sentence on screen; m runs the next method; Esc closes."""
    import asyncio

    from attn_cli.explore.app import ExploreApp
    from attn_cli.explore.widgets import AttributionScreen

    def shown(app) -> str:
        from rich.console import Console

        console = Console(width=118, color_system=None)
        with console.capture() as captured:
            console.print(app.screen.query_one("#attribution").content)
        return captured.get()

    async def scenario():
        app = ExploreApp(lambda: minilm, TEXT, model_name="minilm")
        async with app.run_test(size=(120, 50)) as pilot:
            await until(pilot, lambda: app.model is not None)
            await pilot.press("a")
            assert isinstance(app.screen, AttributionScreen)
            assert app.screen.methods == ["alti", "globenc", "value-zeroing", "gradient", "flow"]  # not alti-logit
            await until(pilot, lambda: "where each output token comes from (ALTI)" in shown(app))
            assert "raw attention rollout over layers 0-5" in shown(app) and "cat 0.68" in shown(app)
            await pilot.press("m")
            await until(pilot, lambda: "where each output token comes from (GlobEnc)" in shown(app))
            await pilot.press("escape")
            assert not isinstance(app.screen, AttributionScreen)

    asyncio.run(scenario())


def test_chromium_draws_the_attention_rollout_beside_the_method(offline_page, minilm, tmp_path):
    """The saved page, opened offline in Chromium: two runs, the attention rollout's [CLS] column heavy and the
    method's light, each cell the report's number."""
    from conftest import open_page

    from attn_cli.render.files import save_figure
    from attn_cli.render.scale import CellFormat

    page, requests, errors = offline_page
    report = minilm.attribute(TEXT, vs="attention")
    save_figure(report, tmp_path / "attribute.html")
    open_page(page, tmp_path / "attribute.html")
    cell = lambda run, row, col: page.locator(  # noqa: E731
        f".run[data-run='{run}'] table.matrix td[data-q='{row}'][data-k='{col}']"
    ).text_content()
    number = CellFormat(2, True).text
    assert [page.locator(".run h2").nth(run).text_content() for run in (0, 1)] == [
        "raw attention rollout over layers 0-5",
        "ALTI over layers 0-5 (rows sum to 1)",
    ]
    assert cell(0, 2, 0) == number(report.attention[2][0]) and report.attention[2][0] > 0.5
    assert cell(1, 2, 0) == number(report.matrix[2][0]) and report.matrix[2][0] < 0.05
    assert not requests and not errors


def test_the_attribution_page_has_no_empty_band_and_its_legend_speaks_of_matrices(offline_page, minilm, tmp_path):
    """No heads grid (one matrix per run, over layers); the info line under the caption says what hovering
    shows until something is hovered (it was an empty grey band); the legends name no head."""
    from conftest import open_page

    from attn_cli.render.files import save_figure

    page, requests, errors = offline_page
    for vs, shared in ((None, ""), ("attention", ", the same for every matrix")):
        path = tmp_path / f"attribute-{vs}.html"
        save_figure(minilm.attribute(TEXT, vs=vs), path)
        open_page(page, path)
        assert page.locator("#grid").count() == 0 and page.locator("canvas.thumb").count() == 0
        assert page.locator("#current").text_content().startswith("where each output token comes from (ALTI)")
        info = page.locator("#info")
        assert info.text_content().startswith("Hover a token to see what it comes from (left) or goes into (right)")
        assert "idle" in info.get_attribute("class")
        # a token of a matrix over layers "comes from" its sources; no head "attends" here
        page.locator(".run[data-run='0'] svg.headview .tok-left[data-i='2']").hover()
        assert "“cat” (2) comes from " in info.text_content() and "attends" not in info.text_content()
        page.locator(".run[data-run='0'] svg.headview .tok-right[data-i='2']").hover()
        assert "“cat” (2) goes into " in info.text_content()
        legends = page.locator(".legend").all_text_contents()
        assert legends == [" share 0 → 1.00: fixed scale" + shared] * (2 if vs else 1), legends
        page.locator(".run[data-run='0'] table.matrix td[data-q='2'][data-k='2']").hover()
        assert "“cat” (query 2) → “cat” (key 2): share" in info.text_content()
        assert "idle" not in info.get_attribute("class")
    assert not requests and not errors


def test_a_decoders_explore_cycles_only_the_methods_it_can_run():
    """explore's m on a decoder skips GlobEnc and value zeroing (post-LayerNorm encoders only) as it skips
    alti-logit everywhere; each method it keeps runs on the lab decoder."""
    import attn_cli
    from attn_cli.analyses.attribute import matrix_methods

    assert matrix_methods(causal=False) == ["alti", "globenc", "value-zeroing", "gradient", "flow"]
    assert matrix_methods(causal=True) == ["alti", "gradient", "flow"]
    lab = attn_cli.load("lab")
    for method in matrix_methods(lab.info.causal):
        assert lab.attribute("the cat saw a dog", method=method).matrix.shape[0] > 0
