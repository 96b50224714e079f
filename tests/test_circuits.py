"""attn circuits: QK/OV circuits, copying scores, the positional split and composition scores.

Checked three ways: the factored math against dense matrices and brute-force sums on small random
weights; planted weights whose answer is known by hand (an identity OV copies, a planted K-composition
stands out); and TransformerLens' own numbers on a seeded GPT-2 (tests/fixtures/, ≤ 1e-5).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import save_tiny, tiny_gpt2_config
from typer.testing import CliRunner

import attn_cli as attn
from attn_cli.cli import app
from attn_cli.math import circuits

FIXTURES = Path(__file__).resolve().parent / "fixtures"
sys.path.insert(0, str(FIXTURES))
from circuits_model import build_model, checksum  # noqa: E402

runner = CliRunner()


# ---- the factored math, against dense matrices


def random_heads(count: int = 6, d: int = 10, r: int = 3, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    draw = lambda *shape: torch.randn(*shape, generator=generator, dtype=torch.float64)  # noqa: E731
    return draw(count, d, r), draw(count, d, r), draw(count, d, r), draw(count, r, d)


def test_factored_singular_values_norm_and_eigenvalues_equal_the_dense_matrix():
    w_q, w_k, _, _ = random_heads()
    qk = circuits.qk_circuit(w_q, w_k)
    dense = w_q @ w_k.mT  # (6, 10, 10)
    assert torch.allclose(qk.singular_values(), torch.linalg.svdvals(dense)[:, :3], atol=1e-12)
    assert torch.allclose(qk.norm(), torch.linalg.matrix_norm(dense), atol=1e-12)
    eigenvalues = torch.linalg.eigvals(dense)  # 10 per head: 3 nonzero, 7 zero
    ours = qk.eigenvalues()
    for head in range(6):
        nonzero = eigenvalues[head][eigenvalues[head].abs() > 1e-9]
        assert torch.allclose(torch.sort(nonzero.real).values, torch.sort(ours[head].real).values, atol=1e-10)


def test_composition_scores_equal_the_dense_formula():
    w_q, w_k, w_v, w_o = random_heads()
    layer_of = torch.tensor([0, 0, 1, 1, 2, 2])
    qk, ov = circuits.qk_circuit(w_q, w_k), circuits.ov_circuit(w_v, w_o)
    dense_qk, dense_ov = w_q @ w_k.mT, w_v @ w_o
    frobenius = torch.linalg.matrix_norm
    for mode, right in (("q", dense_qk), ("k", dense_qk.mT), ("v", dense_ov)):
        scores = circuits.composition_scores(qk, ov, layer_of, mode)
        for writer in range(6):
            for reader in range(6):
                if layer_of[writer] >= layer_of[reader]:
                    assert torch.isnan(scores[writer, reader])
                    continue
                expected = frobenius(dense_ov[writer] @ right[reader]) / (
                    frobenius(dense_ov[writer]) * frobenius(right[reader])
                )
                assert scores[writer, reader].item() == pytest.approx(expected.item(), abs=1e-12)


def test_position_split_equals_the_mean_squares_over_every_token_and_position():
    """The shares by brute force: every (t, t', i, j) of a 5-word vocabulary and 4 positions."""
    w_q, w_k, _, _ = random_heads(count=1, d=6, r=2, seed=1)
    generator = torch.Generator().manual_seed(2)
    w_e, w_pos = (
        torch.randn(5, 6, generator=generator, dtype=torch.float64),
        torch.randn(4, 6, generator=generator, dtype=torch.float64),
    )
    qk = w_q[0] @ w_k[0].T
    terms = {"ee": w_e @ qk @ w_e.T, "ep": w_e @ qk @ w_pos.T, "pe": w_pos @ qk @ w_e.T, "pp": w_pos @ qk @ w_pos.T}
    mean_square = {name: (term**2).mean().item() for name, term in terms.items()}
    total = sum(mean_square.values())
    split = circuits.position_split(circuits.qk_circuit(w_q, w_k), w_e, w_pos)
    assert split.content.item() == pytest.approx(mean_square["ee"] / total, abs=1e-12)
    assert split.position.item() == pytest.approx(mean_square["pp"] / total, abs=1e-12)
    assert split.mixed.item() == pytest.approx((mean_square["ep"] + mean_square["pe"]) / total, abs=1e-12)


def test_copying_score_of_the_full_ov_circuit_by_its_dense_eigenvalues():
    _, _, w_v, w_o = random_heads(count=2, d=6, r=2, seed=3)
    generator = torch.Generator().manual_seed(4)
    w_e, w_u = (
        torch.randn(9, 6, generator=generator, dtype=torch.float64),
        torch.randn(6, 9, generator=generator, dtype=torch.float64),
    )
    ours = circuits.copying_scores(circuits.ov_circuit(w_v, w_o), w_e, w_u)
    for head in range(2):
        eigenvalues = torch.linalg.eigvals(w_e @ w_v[head] @ w_o[head] @ w_u)  # (9,) the vocab × vocab matrix
        assert ours[head].item() == pytest.approx((eigenvalues.sum().real / eigenvalues.abs().sum()).item(), abs=1e-9)


# ---- TransformerLens' numbers


@pytest.fixture(scope="module")
def tl_gpt2(tmp_path_factory):
    model = build_model()
    return checksum(model), save_tiny(model, tmp_path_factory.mktemp("tl-gpt2"))


@pytest.fixture(scope="module")
def tl_report(tl_gpt2):
    return attn.load(str(tl_gpt2[1]), device="cpu").circuits()


def test_composition_and_copying_scores_equal_transformer_lens(tl_gpt2, tl_report):
    """tests/fixtures/make_circuits_fixture.py ran TransformerLens 4 (TransformerBridge, compatibility mode:
    fold_ln, center_writing_weights, center_unembed) on the same seeded GPT-2."""
    expected = json.loads((FIXTURES / "circuits_transformer_lens.json").read_text(encoding="utf-8"))
    assert tl_gpt2[0] == pytest.approx(expected["checksum"], rel=1e-12)  # the two venvs built the same model
    layer_of = np.repeat(np.arange(3), 4)
    earlier = layer_of[:, None] < layer_of[None, :]
    for mode in "qkv":
        theirs = np.array(expected["composition"][mode.upper()]).reshape(12, 12)
        ours = tl_report.composition[mode]
        assert np.isnan(ours[~earlier]).all() and (theirs[~earlier] == 0).all()
        assert np.abs(ours[earlier] - theirs[earlier]).max() <= 1e-5
    copying = np.array([head.copying for head in tl_report.heads])
    assert np.abs(copying - np.array(expected["copying"]).reshape(-1)).max() <= 1e-5


def test_the_report_says_how_the_weights_were_processed(tl_report):
    assert tl_report.processing["norms_folded"] == ["layernorm"] and tl_report.processing["centred"]
    assert tl_report.processing["positions"] == "learned" and tl_report.copying_note is None
    split = tl_report.head(0, 0).split
    assert split is not None and sum(split.values()) == pytest.approx(1.0)


# ---- planted weights


def planted_gpt2(directory, plant, **sizes):
    """A GPT-2 with its language-model head (tied), `sizes` over tiny_gpt2_config, then plant(model)."""
    from transformers import GPT2LMHeadModel

    torch.manual_seed(0)
    config = tiny_gpt2_config()
    for name, value in sizes.items():
        setattr(config, name, value)
    model = GPT2LMHeadModel(config)
    with torch.no_grad():
        plant(model)
    return save_tiny(model, directory)


@pytest.mark.parametrize("sign, expected", [(1.0, 1.0), (-1.0, -1.0)])
def test_a_head_whose_ov_is_plus_or_minus_the_identity_has_copying_score_plus_or_minus_one(tmp_path, sign, expected):
    """One head of d_head = d_model with W_V = I and W_O = ±I: W_E·OV·W_U is ±W_E·W_Eᵀ (tied, centred), whose
    eigenvalues all have one sign."""
    d = 16

    def plant(model):
        for block in model.transformer.h:
            block.attn.c_attn.weight[:, 2 * d :] = torch.eye(d)  # x·W_V: the value columns of Conv1D (d, 3d)
            block.attn.c_proj.weight.copy_(sign * torch.eye(d))

    report = attn.load(str(planted_gpt2(tmp_path, plant, n_embd=d, n_head=1, n_layer=1)), device="cpu").circuits()
    assert report.head(0, 0).copying == pytest.approx(expected, abs=1e-9)


def test_a_planted_k_composition_stands_out(tmp_path):
    """Head 0.1 writes along one residual direction u only (W_O = a·uᵀ) and head 1.2's keys read u only
    (W_K = u·cᵀ): OV_0.1·QK_1.2ᵀ = (W_V a)(uᵀu)(W_Q c)ᵀ, whose norm is the product of the two norms, so the
    K-composition 0.1 → 1.2 is 1 (centring over d_model moves it a little) while random pairs sit near
    1/√d_head; its Q-composition stays ordinary."""
    d, r = 64, 16

    def plant(model):
        writer, reader = model.transformer.h[0].attn, model.transformer.h[1].attn
        u = torch.randn(d)
        writer.c_proj.weight[1 * r : 2 * r] = torch.outer(torch.randn(r), u)  # head 1's W_O: rows r:2r of (H·r, d)
        reader.c_attn.weight[:, d + 2 * r : d + 3 * r] = torch.outer(u, torch.randn(r))  # head 2's W_K (d, r)

    report = attn.load(str(planted_gpt2(tmp_path, plant)), device="cpu").circuits()
    strongest = report.top("k", 2)
    assert (strongest[0].writer, strongest[0].reader) == ((0, 1), (1, 2))
    assert strongest[0].score > 0.9 and strongest[0].over_median > 3 and strongest[1].score < 0.5
    assert report.score("q", (0, 1), (1, 2)) < 0.5


@pytest.mark.parametrize(
    "where, fragment",
    [("key", "layer 1: W_K holds NaN or infinite values"), ("embedding", "the token embedding holds NaN")],
)
def test_non_finite_weights_are_refused_in_one_line_not_an_svd_error(tmp_path, where, fragment):
    """The captures' finite check (backends/validate) guards the circuits' weights too: a NaN in W_K (or the
    embedding) is one line naming it, exit 1, not torch's LinAlgError from linalg.svd."""
    d = 64

    def plant(model):
        if where == "key":
            model.transformer.h[1].attn.c_attn.weight[0, d + 3] = float("nan")  # x·W: columns d:2d are W_K
        else:
            model.transformer.wte.weight[5, 0] = float("inf")

    result = runner.invoke(app, ["circuits", "--model", str(planted_gpt2(tmp_path, plant))])
    assert result.exit_code == 1, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: " + fragment), result.stderr
    assert "unexpected" not in lines[0]


# ---- other architectures


def test_llama_rotary_and_grouped_query_heads(tiny_llama_dir):
    """RoPE: no additive position split (it says why); GQA: a query head's W_K is its kv head's."""
    from transformers import LlamaModel

    report = attn.load(str(tiny_llama_dir), device="cpu").circuits()
    assert all(head.split is None for head in report.heads) and "rotary" in report.position_note
    assert report.copying_note.startswith("not defined")  # a base LlamaModel, no head, untied
    assert any("grouped-query" in note for note in report.notes)
    model = LlamaModel.from_pretrained(tiny_llama_dir).eval()
    attention, r = model.layers[1].self_attn, 8
    for head in (0, 5):
        kv = report.head(1, head).kv_head
        assert kv == head // 4
        w_q = attention.q_proj.weight[head * r : (head + 1) * r].T.double()  # (d, r); RMSNorm weights are 1 here
        w_k = attention.k_proj.weight[kv * r : (kv + 1) * r].T.double()
        dense = torch.linalg.svdvals(w_q @ w_k.T)[:r].detach().numpy()
        assert np.allclose(report.head(1, head).qk_singular, dense, atol=1e-9)


def test_minilm_bert_is_post_norm_with_no_unembedding(minilm_backend):
    report = attn.Model(minilm_backend).circuits()
    assert report.processing["norm_placement"] == "post" and len(report.heads) == 72
    assert report.copying_note.startswith("not defined") and all(head.copying is None for head in report.heads)
    assert all(head.split is not None for head in report.heads)  # learned positions, added to the tokens


def _lab_k_composition():
    """On the lab decoder: the K-composition of every earlier head into the top induction head, the
    previous-token head among them, and the report (for its median)."""
    from attn_cli.backends.registry import builtin_models

    if "lab" not in builtin_models():
        pytest.skip("--model lab (the lab decoder) is not available in this checkout yet")
    model = attn.load("lab", device="cpu")
    heads = model.heads(probe="induction")
    induction = heads.top("induction", 1)[0]
    assert induction.scores["induction"] >= 0.8
    earlier = [profile for profile in heads.heads if profile.layer < induction.layer]
    previous = max(earlier, key=lambda profile: profile.scores["previous_token"] or 0)
    report = model.circuits()
    reader = (induction.layer, induction.head)
    into = {(p.layer, p.head): report.score("k", (p.layer, p.head), reader) for p in earlier}
    return into, (previous.layer, previous.head), report


def test_lab_induction_head_k_composes_with_its_previous_token_head():
    """On the lab decoder the induction head reads its keys from the previous-token head's output: their
    K-composition is the induction head's strongest."""
    into, previous, _ = _lab_k_composition()
    assert max(into, key=into.get) == previous


def test_lab_the_strongest_k_pairs_are_the_previous_token_head_into_the_induction_heads():
    """It stands out among all pairs, not only into one reader: every layer-1 head of the lab decoder is an
    induction head, and the strongest K pairs of the whole grid are the previous-token head writing into each."""
    into, previous, report = _lab_k_composition()
    readers = {
        (profile.layer, profile.head)
        for profile in attn.load("lab", device="cpu").heads(probe="induction").heads
        if (profile.scores["induction"] or 0) >= 0.8
    }
    top = report.top("k", len(readers))
    assert {pair.writer for pair in top} == {previous} and {pair.reader for pair in top} == readers


# ---- the command


def test_cli_json_terminal_and_figures(tl_gpt2, tmp_path, monkeypatch):
    directory = str(tl_gpt2[1])
    result = runner.invoke(app, ["circuits", "--model", directory, "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["command"] == "circuits" and document["schema_version"] == 1
    assert len(document["heads"]) == 12 and set(document["composition"]) == {"q", "k", "v"}
    k = document["composition"]["k"]
    assert k["scores"][0][0] is None and k["scores"][0][4] is not None  # 0.0 → 0.0 undefined, 0.0 → 1.0 defined
    assert len(k["top"]) == 5 and k["heads"][4] == [1, 0]

    monkeypatch.setenv("COLUMNS", "80")
    svg, html = tmp_path / "c.svg", tmp_path / "c.html"
    result = runner.invoke(app, ["circuits", "--model", directory, "--save", str(svg)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert lines[0].startswith("attn circuits") and any(line.startswith("K-composition") for line in lines)
    assert any(line.startswith(" K ") for line in lines)  # the strongest pairs
    text = svg.read_text(encoding="utf-8")
    assert "<svg" in text[:200] and "K-composition" in text and "OV copying score" in text
    result = runner.invoke(app, ["circuits", "--model", directory, "--save", str(html)], catch_exceptions=False)
    assert result.exit_code == 0 and "K-composition" in html.read_text(encoding="utf-8")


def test_the_toy_says_it_has_no_circuits_view():
    result = runner.invoke(app, ["circuits", "--model", "toy"])
    assert result.exit_code == 1 and "circuits" in result.stderr


def test_circuits_takes_no_arguments_and_says_so(minilm_backend):
    with pytest.raises(attn.BadInput, match="circuits"):
        attn.Model(minilm_backend).circuits(3)


def test_qwen3_per_head_q_and_k_norms_are_named_and_gemma_norm_scales_are_one_plus_weight(tmp_path):
    """Qwen3 normalises q and k per head after the projections (its notes say QK leaves that out);
    Gemma's RMSNorm multiplies by 1 + weight, so a weight of 0 folds in as 1."""
    from transformers import Qwen3Config, Qwen3Model

    from attn_cli.backends.circuit_weights import _norm

    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=30522,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=128,
    )
    report = attn.load(str(save_tiny(Qwen3Model(config), tmp_path)), device="cpu").circuits()
    assert any("q_norm" in note for note in report.notes)

    class GemmaRMSNorm(torch.nn.Module):  # the class name is what marks the 1 + weight convention
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.zeros(4))

    assert torch.equal(_norm(GemmaRMSNorm()).scale, torch.ones(4, dtype=torch.float64))


def split_words(narrow: list[str], wide: list[str]) -> list[tuple[str, str]]:
    """Line breaks of narrow that cut a word of wide in two: the line's last piece is no word of wide,
    but joined to the next line's first piece it is one."""
    words = set(" ".join(wide).split())
    cuts = []
    for line, following in zip(narrow, narrow[1:]):
        last, first = line.split()[-1:], following.split()[:1]
        if last and first and last[0] not in words and last[0] + first[0] in words:
            cuts.append((line, following))
    return cuts


@pytest.mark.parametrize("width", [80, 120])
def test_the_lab_view_fits_its_width_without_cutting_a_word(width):
    """Every line within the width, every break between words (Rich's console at that width, as a terminal
    of that many columns draws it); the strongest pairs fill the width they have (5 at 120, 4 at 80)."""
    import io

    from rich.console import Console

    from attn_cli.render.circuits_view import CircuitsView

    report = attn.load("lab", device="cpu").circuits()

    def drawn(columns: int) -> list[str]:
        buffer = io.StringIO()
        Console(file=buffer, width=columns, color_system=None).print(CircuitsView(report))
        return buffer.getvalue().splitlines()

    lines = drawn(width)
    assert max(len(line) for line in lines) <= width
    assert split_words(lines, drawn(1000)) == []
    pairs = next(line for line in lines if line.startswith(" K "))
    assert pairs.count("→") == (5 if width >= 103 else 4)
