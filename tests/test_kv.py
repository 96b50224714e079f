"""attn kv: each head's KV statistics against an independent numpy recomputation from the model's own eager
attention weights (output_attentions), on a tiny GPT-2, a grouped-query Llama and a sliding-window Mistral.

Tolerances: the shares are means over rows of float32 softmax weights that attn recomputes from q and k, while
the reference reads eager's: 1e-6 absolute. The keys a row needs are integers, compared exactly (as
histograms over the rows)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import attn_cli
from attn_cli.analyses.kv import MASSES

TEXT = "the cat sat on the mat and the dog ran far away from the old house today"
SINKS, WINDOWS, BUDGET = 2, (2, 5), 6
LAB_TEXT = "only party company among there world keeps on may business only party company among there world"


def reference(weights: np.ndarray, allowed: np.ndarray, sampled=lambda row: True) -> dict:
    """One head's statistics from its weights (T, T) and allowed keys (T, T), row by row, in plain numpy, over
    the rows `sampled` says (H2O's heavy hitters ranked by those rows' attention); SnapKV over its whole window."""
    count = weights.shape[0]
    sink, local = [], {window: [] for window in WINDOWS}
    streaming, heavy, needed = [], [], {p: [] for p in MASSES}
    accumulated = np.zeros(count)
    for row in range(count):
        if not sampled(row):
            continue
        w = weights[row].astype(np.float64)
        keys = np.flatnonzero(allowed[row])
        sink.append(w[:SINKS].sum())
        for window in WINDOWS:
            local[window].append(sum(w[j] for j in range(count) if abs(row - j) < window))
        ordered = np.cumsum(np.sort(w)[::-1])
        for p in MASSES:
            needed[p].append(int(np.argmax(ordered >= (p - 1e-6) * ordered[-1])) + 1)
        if len(keys) > BUDGET:
            recent_keys = [j for j in keys if 0 <= row - j < BUDGET - SINKS]
            streaming.append(sum(w[j] for j in set(range(SINKS)) | set(recent_keys)))
            recent = BUDGET - BUDGET // 2
            near = [j for j in range(count) if 0 <= row - j < recent]
            older = [j for j in range(count) if row - j >= recent]
            # the most attention from earlier rows; keys none of them attended, the most recent first
            hitters = sorted(older, key=lambda j: (-accumulated[j], -j))[: BUDGET // 2]
            heavy.append(sum(w[j] for j in set(near) | set(hitters)))
        accumulated += w
    window = min(32, BUDGET // 2)  # SnapKV's observation window
    snap = None
    if count > BUDGET:
        prefix = count - window
        votes = weights[prefix:, :prefix].astype(np.float64).sum(0)
        padded = np.concatenate([np.zeros(2), votes, np.zeros(2)])  # avg_pool1d, kernel 5, zero padding 2
        pooled = np.array([padded[j : j + 5].sum() / 5 for j in range(prefix)])
        chosen = set(np.argsort(-pooled, kind="stable")[: BUDGET - window]) | set(range(prefix, count))
        snap = np.mean([sum(weights[row, j] for j in chosen) for row in range(prefix, count)])
    return {
        "snap": snap,
        "sink": np.mean(sink),
        "local": {window: np.mean(values) for window, values in local.items()},
        "streaming": np.mean(streaming) if streaming else None,
        "heavy": np.mean(heavy) if heavy else None,
        "needed": needed,
    }


def eager_weights(directory, text: str, model_class):
    """The model's own weights with output_attentions under eager attention: per layer (H, T, T)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(directory)
    model = model_class.from_pretrained(directory, attn_implementation="eager").eval()
    encoded = tokenizer(text, return_tensors="pt")
    encoded = {name: value for name, value in encoded.items() if name in ("input_ids", "attention_mask")}
    if model.config.model_type == "gpt2":
        encoded["token_type_ids"] = torch.zeros_like(encoded["input_ids"])  # as attn feeds BERT's tokenizer's
    with torch.no_grad():
        attentions = model(**encoded, output_attentions=True).attentions
    return [layer[0].numpy() for layer in attentions]


@pytest.fixture(scope="module")
def tiny_mistral_dir(tmp_path_factory):
    """A 2-layer Mistral whose sliding window (4 keys) is shorter than the text, 4 query heads on 2 kv heads."""
    from conftest import save_tiny
    from transformers import MistralConfig, MistralModel

    torch.manual_seed(0)
    config = MistralConfig(
        vocab_size=30522,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        sliding_window=4,
        max_position_embeddings=128,
    )
    return save_tiny(MistralModel(config), tmp_path_factory.mktemp("tiny-mistral"))


@pytest.mark.parametrize("kind", ["gpt2", "llama", "mistral", "lab", "lab-sampled"])
def test_every_statistic_is_the_numpy_recomputation_from_eager_weights(kind, request, monkeypatch):
    """The tiny random models' attention is nearly uniform; the lab decoder's is peaked, so H2O's heavy hitters
    there depend on which rows' attention was accumulated (the rows before, not the row itself)."""
    from transformers import AutoModel

    from attn_cli.backends.lab import lab_dir

    sampled = lambda row: True  # noqa: E731
    if kind == "lab-sampled":  # a long input's rows sampled: runs of 2 rows every 6 (ceil(17 / 6) = 3 runs)
        from attn_cli.analyses import kv

        monkeypatch.setattr(kv, "SAMPLED_ROWS", 6)
        monkeypatch.setattr(kv, "RUN", 2)
        kind, sampled = "lab", lambda row: row in (0, 1, 6, 7, 12, 13)
    directory = lab_dir() if kind == "lab" else request.getfixturevalue(f"tiny_{kind}_dir")
    model = attn_cli.load("lab" if kind == "lab" else str(directory), device="cpu")
    report = model.kv_profile(
        LAB_TEXT if kind == "lab" else TEXT, budget=BUDGET, sinks=SINKS, windows=WINDOWS, retrieval_probe=False
    )
    eager = eager_weights(directory, LAB_TEXT if kind == "lab" else TEXT, AutoModel)
    count = eager[0].shape[-1]
    rows, keys = np.arange(count)[:, None], np.arange(count)[None, :]
    allowed = keys <= rows
    if kind == "mistral":
        allowed &= rows - keys < 4
        assert report.model.kv_heads == 2 and len(report.kv_heads()) == 4
    assert report.rows == sum(map(sampled, range(count))) and report.texts == 1
    for head in report.heads:
        expected = reference(eager[head.layer][head.head], allowed, sampled)
        assert head.sink == pytest.approx(expected["sink"], abs=1e-6)
        for window in WINDOWS:
            assert head.windows[window] == pytest.approx(expected["local"][window], abs=1e-6)
        assert head.streaming == pytest.approx(expected["streaming"], abs=1e-6)
        assert head.heavy_hitters == pytest.approx(expected["heavy"], abs=1e-6)
        assert head.snapkv == pytest.approx(expected["snap"], abs=1e-6)
        for p in MASSES:
            values = expected["needed"][p]
            assert head.keys[p][0] == pytest.approx(np.mean(values)), (head.layer, head.head, p)
            assert head.keys[p][2] == max(values)


def test_on_the_lab_decoder_the_induction_heads_are_retrieval_heads_and_the_previous_token_head_is_local():
    lab = attn_cli.load("lab", device="cpu")
    words = "only party company among there world keeps on may business"
    report = lab.kv_profile([f"{words} {words}", "the cat saw a dog . the cat saw a dog"], budget=8, windows=(2, 8))
    by_head = {(head.layer, head.head): head for head in report.heads}
    assert by_head[0, 2].windows[2] > 0.95  # the token itself and the one before it
    assert by_head[0, 2].label == "streaming" and by_head[0, 2].budget <= 2
    for head in range(4):
        assert by_head[1, head].label == "retrieval" and by_head[1, head].retrieval >= 0.5
        assert by_head[0, head].retrieval < 0.5
    assert report.full_attention()[1].tolist() == [1.0] * 4


def test_the_command_exports_duoattentions_pattern_and_refuses_in_one_line(tmp_path, tiny_llama_dir):
    from typer.testing import CliRunner

    from attn_cli.cli import app

    runner = CliRunner()
    folder = tmp_path / "pattern"
    ran = runner.invoke(
        app,
        [
            "kv",
            TEXT,
            "--model",
            str(tiny_llama_dir),
            "--budget",
            "6",
            "--no-probe",
            "--export-dir",
            str(folder),
            "--json",
        ],
    )
    assert ran.exit_code == 0, ran.output
    document = json.loads(ran.stdout)
    grid = np.loadtxt(folder / "full_attention_heads.tsv", delimiter="\t")  # as DuoAttention's load_attn_pattern
    assert grid.shape == (2, 2)  # layers × KV heads
    labels = {(group["layer"], group["kv_head"]): group["label"] for group in document["kv_heads"]}
    assert all(grid[layer, kv] == (labels[layer, kv] == "retrieval") for layer, kv in labels)
    assert json.loads((folder / "config.json").read_text()) == {"sink_size": 4, "recent_size": 2}
    assert json.loads((folder / "kv_profile.json").read_text())["command"] == "kv"
    assert document["rule"].startswith("retrieval: the needle probe's retrieval score")
    for wrong, said in [
        (["--budget", "3"], "leaves no room past the 4 sinks"),
        (["--window", "a,b"], "is not a list of window sizes"),
        (["--mass", "2"], "is not a share of attention"),
    ]:
        refused = runner.invoke(app, ["kv", TEXT, "--model", str(tiny_llama_dir), *wrong])
        assert refused.exit_code == 2 and said in refused.output and "Traceback" not in refused.output


def test_the_retrieval_score_is_wu_et_al_retrieval_calculate_run_as_their_decode_loop():
    """nightdessert/Retrieval_Head's retrieval_head_detection.py, written again: the prompt runs once, then
    decode() feeds one token at a time with the KV cache and output_attentions (eager), takes the argmax as the
    next token, and retrieval_calculate adds 1 / (needle_end − needle_start) to a head when its top-1 key in
    the last row lies in the needle and holds the token just generated. Here the prompt is the probe up to the
    needle's copy's first token (its cue), the decode runs the copy's other tokens, and the lab decoder copies
    them all (checked: the run is a successful retrieval, as the reference requires by ROUGE > 50).

    attn's score (math/head_scores.py) differs in two ways, both adaptations: it is teacher-forced (every row
    of one forward reads the given text), and it also counts the row before the cue, whose next token is the
    copy's first (it cannot know it: a hit there is chance). So attn = reference + that row's own hit."""
    from transformers import AutoModelForCausalLM

    from attn_cli.analyses.heads import PROBE_LENGTH, probe
    from attn_cli.backends.lab import lab_dir

    lab = attn_cli.load("lab", device="cpu")
    described = probe(lab.backend, "retrieval", 0, PROBE_LENGTH)
    report = lab.kv_profile(described["text"], retrieval_probe=True, windows=(16,))
    ids = lab.backend.tokenizer(described["text"], return_tensors="pt")["input_ids"]
    needle_len = described["needle"]
    needle_start = 1 + described["depth"]  # <bos>, then the haystack's first `depth` words
    needle_end = needle_start + needle_len
    cue = ids.shape[1] - needle_len  # the copy's first token
    assert ids[0, needle_start:needle_end].tolist() == ids[0, cue:].tolist()
    model = AutoModelForCausalLM.from_pretrained(lab_dir(), attn_implementation="eager").eval()
    layers, heads = model.config.num_hidden_layers, model.config.num_attention_heads
    score = np.zeros((layers, heads))
    generated = []
    with torch.no_grad():
        outputs = model(input_ids=ids[:, :cue], use_cache=True)
        past, token = outputs.cache, ids[:, cue]
        for _ in range(needle_len - 1):
            outputs = model(input_ids=token.view(1, 1), cache=past, use_cache=True, output_attentions=True)
            past, token = outputs.cache, outputs.logits[0, -1].argmax()
            generated.append(int(token))
            for layer in range(layers):
                for head in range(heads):
                    key = int(outputs.attentions[layer][0, head, -1].topk(1).indices[0])
                    if needle_start <= key < needle_end and int(token) == int(ids[0, key]):
                        score[layer, head] += 1 / (needle_end - needle_start)
        assert generated == ids[0, cue + 1 :].tolist()  # a successful retrieval
        before_cue = model(input_ids=ids, output_attentions=True).attentions  # the uncued row, cue − 1
    for head in report.heads:
        key = int(before_cue[head.layer][0, head.head, cue - 1].argmax())
        chance = needle_start <= key < needle_end and int(ids[0, key]) == int(ids[0, cue])
        assert head.retrieval == pytest.approx(score[head.layer, head.head] + chance / needle_len, abs=1e-6)
    assert max(head.retrieval for head in report.heads if head.layer == 1) >= 0.8


def test_a_corpus_profile_store_is_saved_by_chunks_and_resumes_to_the_same_profile(tmp_path, monkeypatch):
    """CHUNK = 2: a run over 3 of 5 texts saves after the first two (and after the third); --resume skips the
        three, profiles the last two, and the report is the uninterrupted run's: its histograms exactly, its shares to
    1e-6 (a chunk pads its texts with other neighbours than one run does: float32 weights differ in their last bits).
        Another run's options, or another corpus, are refused in one line."""
    from attn_cli.analyses import kv
    from attn_cli.plumbing.errors import BadInput

    monkeypatch.setattr(kv, "CHUNK", 2)
    lab = attn_cli.load("lab", device="cpu")
    words = "only party company among there world keeps on may business".split()
    texts = [" ".join(words[index:] + words[:index]) for index in range(5)]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(texts) + "\n")
    asked = dict(file=str(corpus), budget=6, windows=(2, 4), retrieval_probe=False, batch_size=2)
    whole = lab.kv_profile(**asked)
    store = tmp_path / "store"
    first = lab.kv_profile(**asked, limit=3, store=str(store))
    assert first.texts == 3 and (store / "totals.npz").is_file()
    profiled = []
    original = kv.score_batch
    monkeypatch.setattr(
        kv, "score_batch", lambda backend, batch, *a, **k: profiled.extend(batch) or original(backend, batch, *a, **k)
    )
    resumed = lab.kv_profile(**asked, store=str(store), resume=True)
    assert sorted(profiled) == sorted(texts[3:])
    assert resumed.texts == 5 and resumed.rows == whole.rows
    for mine, theirs in zip(resumed.heads, whole.heads):
        assert mine.sink == pytest.approx(theirs.sink, abs=1e-6) and mine.windows == pytest.approx(theirs.windows)
        assert mine.streaming == pytest.approx(theirs.streaming, abs=1e-6) and mine.keys == theirs.keys
    with pytest.raises(BadInput, match="written by another run"):
        lab.kv_profile(**{**asked, "budget": 8}, store=str(store), resume=True)
    corpus.write_text("\n".join(reversed(texts)) + "\n")
    with pytest.raises(BadInput, match="are not the ones"):
        lab.kv_profile(**asked, store=str(store), resume=True)


def test_a_target_mass_of_its_own_has_its_distribution_and_its_budget():
    """--mass 0.97 (not one of the three kept anyway): its keys-needed distribution is kept too, and the
    recommended budget is its 90th percentile, between 0.95's and 0.99's."""
    lab = attn_cli.load("lab", device="cpu")
    report = lab.kv_profile(LAB_TEXT, budget=8, windows=(2,), mass=0.97, retrieval_probe=False)
    assert report.to_json_dict()["settings"]["masses"] == [0.9, 0.95, 0.97, 0.99]
    for head in report.heads:
        assert head.budget == int(np.ceil(head.keys[0.97][1])) >= 1
        assert head.keys[0.95][1] <= head.keys[0.97][1] <= head.keys[0.99][1]


def test_the_keys_a_row_needs_on_long_rows_equal_a_float64_sort_largest_first():
    """keys_for_mass sorts smallest first (numpy's integer sort of the float32 bits, rows split over threads) and
    counts from the complement; a float64 sort largest first, summed, is the definition: equal on every row of
    seeded long rows, peaked and flat, with masked zeros and an empty row."""
    from attn_cli.math.kv import keys_for_mass

    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 3, 40, 3000, generator=generator) * torch.tensor([0.5, 3.0, 8.0])[:, None, None]
    weights = torch.softmax(logits, -1)
    weights[..., 2000:] = 0.0  # keys a row may not attend
    weights[0, 0, 0] = 0.0  # a row with no weight
    masses = (0.5, 0.9, 0.99, 1.0)
    rows = weights.double().numpy().reshape(-1, weights.shape[-1])
    ordered = np.cumsum(-np.sort(-rows, -1), -1)
    total = ordered[:, -1:]
    expected = [np.where(total[:, 0] > 0, (ordered < (p - 1e-6) * total).sum(-1) + 1, 0) for p in masses]
    got = keys_for_mass(weights, masses).reshape(len(masses), -1).numpy()
    assert (got == np.array(expected)).all()
    assert got[:, 0].tolist() == [0, 0, 0, 0]


def test_a_long_text_says_its_rows_were_sampled(monkeypatch):
    """Past SAMPLED_ROWS rows the report counts the rows read and every token, and the terminal says so."""
    from rich.console import Console

    from attn_cli.analyses import kv
    from attn_cli.render.kv_view import render_kv

    monkeypatch.setattr(kv, "SAMPLED_ROWS", 6)
    monkeypatch.setattr(kv, "RUN", 2)
    lab = attn_cli.load("lab", device="cpu")
    report = lab.kv_profile(LAB_TEXT, budget=BUDGET, sinks=SINKS, windows=WINDOWS, retrieval_probe=False)
    assert (report.rows, report.tokens) == (6, 17)
    assert report.to_json_dict()["tokens"] == 17
    console = Console(width=100, record=True, color_system=None)
    console.print(render_kv(report))
    assert "6 of 17 query rows (a sample of the long texts' rows)" in console.export_text()
