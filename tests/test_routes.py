"""attn routes and the pre-norm decoder decomposition under it (math/routes.py, backends/decoder_blocks.py).

Tolerances: float32 sums over d_model ≤ 64 and ≤ 16 tokens, so 1e-5 absolute on the residual stream."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import attn_cli
from attn_cli.math.routes import attention_contributions, ffn_contributions, head_parts, node, route

LAB_TEXT = "the cat saw a dog . the cat saw a dog"  # "dog" is copied: its first occurrence is position 5


@pytest.fixture(scope="module")
def lab():
    return attn_cli.load("lab", device="cpu")


@pytest.fixture(scope="module")
def lab_blocks(lab):
    return lab.backend.decoder_blocks(LAB_TEXT)


@pytest.fixture(scope="module", params=["gpt2", "llama", "lab"])
def blocks(request, lab_blocks):
    """Each decoder family's blocks: GPT-2 (LayerNorm, biases, Conv1D), Llama (RMSNorm, RoPE, 8 heads on 2 kv
    heads), the lab decoder."""
    if request.param == "lab":
        return lab_blocks
    directory = request.getfixturevalue(f"tiny_{request.param}_dir")
    return attn_cli.load(str(directory), device="cpu").backend.decoder_blocks("the cat sat on the mat")


def test_the_parts_sum_to_the_attention_output_and_the_layers_chain(blocks):
    for block in blocks:
        parts = head_parts(block.weights, block.values, block.w_o)  # (T, T, H, d)
        torch.testing.assert_close(parts.sum((1, 2)) + block.b_o, block.attention_out, atol=1e-5, rtol=0)
        torch.testing.assert_close(block.resid_pre + parts.sum((1, 2)) + block.b_o, block.resid_mid, atol=1e-5, rtol=0)
    for below, above in zip(blocks, blocks[1:]):
        torch.testing.assert_close(above.resid_pre, below.resid_post, atol=0, rtol=0)


def test_a_token_masked_by_causality_contributes_nothing(blocks):
    block = blocks[-1]
    parts = head_parts(block.weights, block.values, block.w_o)
    future = torch.ones(parts.shape[:2], dtype=torch.bool).triu(1)  # key j > query i
    assert parts[future].abs().max() == 0
    rows = list(range(parts.shape[0]))
    c_attn, c_resid = attention_contributions(block, rows)
    assert c_attn[future].abs().max() == 0
    torch.testing.assert_close(c_attn.sum((1, 2)) + c_resid, torch.ones(len(rows)), atol=1e-5, rtol=0)
    c_ffn, c_resid_ffn = ffn_contributions(block)
    torch.testing.assert_close(c_ffn + c_resid_ffn, torch.ones(len(rows)), atol=1e-5, rtol=0)


def _reference_contributions(parts, whole):
    """llm-transparency-tool's get_contributions, written again from its formula: parts (P, N, d), whole (N, d)."""
    distance = torch.nn.functional.pairwise_distance(parts, whole.expand(parts.shape), p=1)
    score = (torch.norm(whole, p=1, dim=-1) - distance).clip(min=1e-5)
    return score / score.sum(0, keepdim=True)


def test_the_proximities_are_the_reference_rule_and_the_route_its_pruned_graph(lab_blocks):
    """The full graph built as the reference's build_full_graph does (every edge, merged self/residual edges,
    masked keys at its ε floor), pruned by its edge_dfs from the output node: the same edges, weights ≤ 1e-4."""
    nx = pytest.importorskip("networkx")
    count, threshold, position = lab_blocks[0].weights.shape[1], 0.04, 10
    graph = nx.DiGraph()

    def add(u, v, w):
        graph.add_edge(u, v, weight=graph[u][v]["weight"] + w if graph.has_edge(u, v) else w)

    for layer, block in enumerate(lab_blocks):
        parts = head_parts(block.weights, block.values, block.w_o).permute(1, 2, 0, 3)  # (T j, H, T i, d)
        flat = torch.cat([parts.flatten(0, 1), block.resid_pre.unsqueeze(0)])
        shares = _reference_contributions(flat, block.resid_mid)  # (T·H + 1, T i)
        c_attn, c_resid = shares[:-1].unflatten(0, parts.shape[:2]), shares[-1]
        below = (lambda j: f"X0_{j}") if layer == 0 else (lambda j, layer=layer: f"I{layer - 1}_{j}")
        for i in range(count):
            for j in range(count):
                add(below(j), f"A{layer}_{i}", float(c_attn[j, :, i].sum()))
            add(below(i), f"A{layer}_{i}", float(c_resid[i]))
        ffn = _reference_contributions(
            torch.stack([block.resid_post - block.resid_mid, block.resid_mid]), block.resid_post
        )
        for i in range(count):
            add(f"A{layer}_{i}", f"M{layer}_{i}", float(ffn[0, i]))
            add(f"M{layer}_{i}", f"I{layer}_{i}", float(ffn[0, i]))
            add(f"A{layer}_{i}", f"I{layer}_{i}", float(ffn[1, i]))
    reverse = graph.reverse()
    kept = nx.subgraph_view(reverse, filter_edge=lambda u, v: reverse[u][v]["weight"] > threshold)
    expected = {(v, u): kept[u][v]["weight"] for u, v in nx.edge_dfs(kept, source=f"I1_{position}")}

    edges = route(lab_blocks, position, threshold)
    assert {(edge.source, edge.target) for edge in edges} == set(expected)
    for edge in edges:
        assert edge.weight == pytest.approx(expected[edge.source, edge.target], abs=1e-4)


def test_the_lab_decoders_route_is_llm_transparency_tools_own(lab):
    """tests/fixtures/routes/lab_routes_reference.json: the reference's build_full_graph and
    build_paths_to_predictions, run once on the lab decoder by make_fixture.py (its adaptations are stated
    there). attn's route is the reference's pruned graph, edge for edge, and each weight is the reference's to
    1e-4 (attn gives a masked key 0 where the reference floors it at ε = 1e-5: math/routes.py)."""
    reference = json.loads((Path(__file__).parent / "fixtures" / "routes" / "lab_routes_reference.json").read_text())
    report = lab.routes(reference["text"], position=reference["position"], threshold=reference["threshold"])
    assert [token.text for token in report.tokens] == reference["tokens"]
    weights = {(source, target): weight for source, target, weight in reference["graph"]}
    assert {(edge.source, edge.target) for edge in report.edges} == {tuple(pair) for pair in reference["route"]}
    for edge in report.edges:
        assert edge.weight == pytest.approx(weights[edge.source, edge.target], abs=1e-4), (edge.source, edge.target)


def test_on_the_lab_decoder_the_copied_token_comes_through_induction_from_its_previous_occurrence(lab):
    """'dog' repeats: the prediction that produced its second occurrence (at 'a', position 10) reads the first
    'dog' (position 5) through layer 1's induction heads, which in turn took 'a' (position 4) into position 5
    through layer 0's previous-token head 2."""
    report = lab.routes(LAB_TEXT, target="dog")
    assert report.position == 10
    weights = {(edge.source, edge.target): edge for edge in report.edges}
    induction = weights[node("I", 0, 5), node("A", 1, 10)]
    assert induction.kind == "attention" and induction.weight > 0.5
    into = [edge for edge in report.edges if edge.target == node("A", 1, 10)]
    assert max(into, key=lambda edge: edge.weight) is induction  # the strongest source of the prediction's state
    previous = weights[node("X", 0, 4), node("A", 0, 5)]
    assert max(range(4), key=lambda head: previous.heads[head]) == 2
    assert report.paths[0][1] == ["X0_4", "A0_5", "I0_5", "A1_10", "I1_10"]
    assert (0, 2) == report.heads[0][:2]


def test_the_command_writes_the_graph_and_refuses_in_one_line():
    from conftest import cli_json
    from typer.testing import CliRunner

    from attn_cli.cli import app

    document = cli_json("routes", LAB_TEXT, "--model", "lab", "--position", "10", "--threshold", "0.1")
    assert document["command"] == "routes" and document["position"] == 10
    assert {"I0_5", "A1_10"} <= {node["id"] for node in document["nodes"]}
    assert all(edge["weight"] > 0.1 for edge in document["edges"])
    runner = CliRunner()
    refused = runner.invoke(app, ["routes", "the cat", "--model", "minilm"])
    assert refused.exit_code == 1 and "not a decoder" in refused.output and "Traceback" not in refused.output
    both = runner.invoke(app, ["routes", "the cat", "--model", "lab", "--target", "cat", "--position", "1"])
    assert both.exit_code == 2 and "pick one" in both.output
    missing = runner.invoke(app, ["routes", "the cat", "--model", "lab", "--target", "dog"])
    assert missing.exit_code == 2 and "not a token" in missing.output


def test_the_docs_worked_example_is_what_the_command_prints(monkeypatch):
    """docs/commands/routes.md's `$ attn routes …` block, run at 80 columns without colour."""
    import shlex
    from pathlib import Path

    from typer.testing import CliRunner

    from attn_cli.cli import app

    page = (Path(__file__).resolve().parents[1] / "docs" / "commands" / "routes.md").read_text()
    block = page.split("```\n$ attn routes ", 1)[1].split("\n```", 1)[0]
    command, _, shown = block.partition("\n")
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("NO_COLOR", "1")
    ran = CliRunner().invoke(app, ["routes", *shlex.split(command)])
    assert ran.exit_code == 0, ran.output
    assert "\n".join(line.rstrip() for line in ran.stdout.splitlines()).rstrip() == shown.rstrip()


def test_the_figure_draws_every_kept_edge_with_its_hover_also_in_a_page(tmp_path):
    from typer.testing import CliRunner

    from attn_cli.cli import app

    runner = CliRunner()
    path = tmp_path / "route.svg"
    ran = runner.invoke(app, ["routes", LAB_TEXT, "--model", "lab", "--target", "dog", "--save", str(path)])
    assert ran.exit_code == 0, ran.output
    drawn = path.read_text()
    assert drawn.count("</title></line>") == 5  # the five kept edges of the worked example
    assert "L0 out 5 dog → L1 attn 10 a: attention 0.986; heads H0 0.30" in drawn
    page = tmp_path / "route.html"
    saved = runner.invoke(app, ["routes", LAB_TEXT, "--model", "lab", "--target", "dog", "--save", str(page)])
    assert saved.exit_code == 0, saved.output
    html = page.read_text()
    assert html.startswith("<!DOCTYPE html>") and "<script" not in html  # the SVG itself, nothing to run
    assert html.count("</title></line>") == 5 and "L0 out 5 dog → L1 attn 10 a: attention 0.986" in html


def test_alti_on_a_decoder_is_the_reference_formula_rolled_out(tiny_gpt2_dir):
    """attn attribute --method alti on GPT-2: each layer's c_ij from the logit-explanations formula written
    again (importance = −‖T_i(x_j) − mid_i‖₁, then ‖mid_i‖₁ added, clipped at 0, rows normalised), 1e-5;
    future tokens exactly 0; the layers multiplied first to last."""
    import numpy as np

    model = attn_cli.load(str(tiny_gpt2_dir), device="cpu")
    text = "the cat sat on the mat"
    report = model.attribute(text, method="alti")
    blocks = model.backend.decoder_blocks(text)
    for layer, block in enumerate(blocks):
        transformed = torch.einsum("hts,hsd->tsd", block.weights, torch.einsum("hsz,hzd->hsd", block.values, block.w_o))
        transformed = transformed + torch.eye(len(block.resid_pre)).unsqueeze(-1) * block.resid_pre.unsqueeze(0)
        importance = -torch.nn.functional.pairwise_distance(transformed, block.resid_mid.unsqueeze(1), p=1, eps=0)
        scores = (importance + block.resid_mid.abs().sum(-1, keepdim=True)).clamp_min(0)
        np.testing.assert_allclose(report.per_layer[layer], (scores / scores.sum(-1, keepdim=True)).numpy(), atol=1e-5)
        assert np.all(np.triu(report.per_layer[layer], 1) == 0)
    np.testing.assert_allclose(report.matrix, report.per_layer[1] @ report.per_layer[0], atol=1e-6)


def test_explore_shows_the_routes_of_the_query_tokens_prediction(lab):
    """r opens `attn routes --position QUERY` of the sentence on screen; ] moves to the next token (stopping at
    the last); Esc closes, and the main view's query token is then the one the routes were of."""
    import asyncio

    from conftest import until
    from rich.console import Console

    from attn_cli.explore.app import ExploreApp
    from attn_cli.explore.widgets import RoutesScreen

    def shown(app) -> str:
        console = Console(width=118, color_system=None)
        with console.capture() as captured:
            console.print(app.screen.query_one("#routes").content)
        return captured.get()

    async def scenario():
        app = ExploreApp(lambda: lab, LAB_TEXT, model_name="lab")
        async with app.run_test(size=(120, 50)) as pilot:
            await until(pilot, lambda: app.model is not None)
            for _ in range(9):  # the query token from 1 to 10, the 'a' before the second 'dog'
                await pilot.press("right_square_bracket")
            await pilot.press("r")
            assert isinstance(app.screen, RoutesScreen)
            await until(pilot, lambda: "routes of the prediction at position 10 ('a')" in shown(app))
            assert "L0 out 5 dog → L1 attn 10 a" in shown(app)
            await pilot.press("right_square_bracket")
            await until(pilot, lambda: "routes of the prediction at position 11 ('dog')" in shown(app))
            assert "position 11 of 0-11 · [ ]: another token · Esc closes" in shown(app)  # its keys, once shown
            await pilot.press("right_square_bracket")  # the last token: ] stays (no wrap to 0)
            await pilot.pause(0.2)
            assert app.screen.position == 11 and "position 11 of 0-11" in shown(app)
            await pilot.press("escape")
            assert not isinstance(app.screen, RoutesScreen)
            assert app.session.query == 11  # the main view follows the token the routes were of

    asyncio.run(scenario())
