"""The Python API's door: a bad argument to `load` or to any Model method is an AttnError (BadInput naming
the argument), never a TypeError, AttributeError, ValueError or UnicodeError from inside, and good ones
still work. Property-based like tests/test_fuzz.py, on the toy (milliseconds a call), plus one MiniLM check
and a tiny GPT-2 for generate (the toy does not generate).
"""

from __future__ import annotations

import inspect
import io
import os
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import isolate
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attn_cli.api import KINDS, Model, load  # load as imported: test_readme memoises attn_cli.api.load
from attn_cli.plumbing.errors import AttnError, BadInput, ModelNotFound

EXAMPLES = int(os.environ.get("ATTN_FUZZ_EXAMPLES", "25"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
FEW = settings(FUZZ, max_examples=max(EXAMPLES // 5, 1))  # a real tokenizer: slower calls

METHODS = ("inspect", "compare", "capture", "diff", "generate", "rollout", "heads", "diagnose", "steps")


@pytest.fixture(autouse=True)
def isolated_env(monkeypatch):
    """No network or user settings; stdin holds a corpus line (file="-" reads it, as the CLI would)."""
    isolate(monkeypatch, 100)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"from stdin\n")))


@pytest.fixture(scope="module")
def toy() -> Model:
    return load("toy")  # 1 layer, 4 heads


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "texts.txt"
    path.write_text("the cat sat\na b c d\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def gpt2_lm(tiny_gpt2_lm_dir) -> Model:
    return load(str(tiny_gpt2_lm_dir), device="cpu")


# ---- every case found so far, as a plain test


BAD_CALLS = [  # (call on the toy, words its message holds)
    (lambda toy: load("toy", device=5), "device must be a name"),
    (lambda toy: toy.inspect(123), "text must be a string or a list of strings, not 123"),
    (lambda toy: toy.inspect(None), "text must be a string or a list of strings, not None"),
    (lambda toy: toy.inspect("a b", layers=0.5), "layers must be 'all', an index"),
    (lambda toy: toy.inspect("a b", layers=None), "layers must be 'all', an index"),
    (lambda toy: toy.inspect("a b", variant=None), "variant must be a name"),
    (lambda toy: toy.inspect("a \ud800 b"), "text is not valid UTF-8: lone surrogate U+D800"),
    (lambda toy: toy.heads(123), "texts must be a string or an iterable of strings"),
    (lambda toy: toy.heads(file=123), "file must be a file path"),
    (lambda toy: toy.compare("a b", variants=5), "variants must be a name or a list of names"),
    (lambda toy: toy.diff("a b", against=5), "against must be a Model, a model name or a directory"),
    (lambda toy: toy.generate("a b", max_new_tokens="5"), "max_new_tokens must be a whole number"),
    (lambda toy: toy.generate("a b", temperature="hot"), "temperature must be a number"),
    (lambda toy: toy.generate("a b", seed="x"), "seed must be a whole number"),
    (lambda toy: toy.inspect(["a b", 7]), "text[1] must be a string"),
    (lambda toy: toy.inspect("a b", layer=0), "inspect(): got an unexpected keyword argument 'layer'"),
    (lambda toy: toy.inspect("a b", truncate="no"), "truncate must be True or False"),
    (lambda toy: toy.inspect("a b", rows=5), "rows must be 'START:STOP' or a pair"),
    (lambda toy: toy.inspect("a b", tolerance=float("nan")), "tolerance must be a finite number"),
    (lambda toy: toy.inspect("a b", heads=[]), "selects no head"),
    (lambda toy: toy.steps("a b", head=2**20000), "is out of range"),
    (lambda toy: toy.inspect("a b", progress=3), "progress must be a function"),
    # a seq2seq target is a text in inspect as in heads (attribute's target, a token or an index, is its own kind)
    (lambda toy: toy.inspect("a b", target=3), "target must be a string, not int"),
    (lambda toy: toy.inspect("a b", target="x \ud800"), "target is not valid UTF-8: lone surrogate"),
    (lambda toy: toy.attribute("a b", target=[1]), "target must be a token, a label or an output index"),
]


@pytest.mark.parametrize(("call", "words"), BAD_CALLS)
def test_each_bad_argument_found_is_a_bad_input_naming_it(toy, call, words):
    with pytest.raises(BadInput) as error:
        call(toy)
    assert words in str(error.value)


def test_diff_against_a_name_loads_it_on_this_device_and_dtype(toy):
    by_name = toy.diff("the cat sat", against="toy")
    by_model = toy.diff("the cat sat", against=load("toy"))
    by_path = toy.diff("the cat sat", against=Path("toy"))
    assert by_name.to_json_dict() == by_model.to_json_dict() == by_path.to_json_dict()
    assert (by_name.b.device, by_name.b.dtype) == (toy.device, toy.dtype)


def test_paths_the_file_system_refuses_are_attn_errors(toy):
    """A name too long for the file system, an unknown user's ~: bare OSError and RuntimeError before."""
    with pytest.raises(ModelNotFound, match="File name too long"):
        load("a" * 300)
    with pytest.raises(ModelNotFound, match="no model directory"):
        load("~no-such-user-here/model")
    with pytest.raises(BadInput, match="File name too long"):
        toy.heads(file="a" * 300)


def test_a_huge_probe_on_a_model_without_positions_is_cut(toy, monkeypatch):
    """The toy has no position limit: the probe is cut as it is for other models, not drawn for ever."""
    from attn_cli.analyses import heads

    monkeypatch.setattr(heads, "UNBOUNDED_PROBE_LENGTH", 30)  # 1024 in use: the same cut, a faster test
    report = toy.heads(probe="induction", probe_length=200)
    assert report.probe["requested"] == 200 and report.probe["length"] == 30
    assert toy.heads(probe="induction", probe_length=10**12).probe["length"] == 30  # was drawn for ever


def test_a_seed_torch_cannot_take_is_a_bad_input(gpt2_lm):
    with pytest.raises(BadInput, match="^seed must be between"):
        gpt2_lm.generate("a b", max_new_tokens=1, sample=True, seed=2**64)
    assert gpt2_lm.generate("a b", max_new_tokens=1, sample=True, seed=2**64 - 1).text is not None


def test_every_argument_of_every_method_has_a_kind():
    """@door refuses to wrap a method with an argument it has no kind for; and every method is wrapped."""
    for function in (load, *(getattr(Model, name) for name in METHODS)):
        assert hasattr(function, "__wrapped__"), function.__name__
        names = {
            name
            for name, p in inspect.signature(function).parameters.items()
            if name != "self" and p.kind is not p.VAR_KEYWORD
        }
        assert names <= set(KINDS), function.__name__


# ---- properties: arbitrary values of each argument


TEXTS = st.sampled_from(["the cat sat on the mat", "a b c", "早上好 , world", "I love you"])
# Good values on the toy (1 layer, 4 heads), by argument name, combined as every method allows.
GOOD = {
    "text": TEXTS,
    "other": TEXTS,
    "prompt": TEXTS,
    "layers": st.sampled_from(["all", 0, "0", [0], (0,), range(1), "0-0", np.int64(0)]),
    "heads": st.sampled_from(["all", 1, "0,2", [3, 1], "1-3", np.arange(2), " * "]),
    "layer": st.sampled_from([0, "0"]),
    "head": st.sampled_from([0, 3, "2", np.int64(1)]),
    "rows": st.sampled_from(["0:2", (1, 3), "1:", ":2", [0, 2**70]]),
    "cols": st.sampled_from(["0:2", (0, 3), "2:"]),
    "top_k": st.integers(1, 8) | st.just(2**70),
    "cell_limit": st.integers(10**5, 10**9),
    "tolerance": st.floats(0, 1),
    "temperature": st.floats(0.1, 3),
    "epsilon": st.floats(0, 1),
    "ratio": st.floats(0, 1e4),
    "floor": st.floats(0, 1e4),
    "max_new_tokens": st.integers(1, 3),
    "seed": st.integers(-(2**63), 2**64 - 1),
    "probe_length": st.integers(2, 40),
    "batch_size": st.integers(1, 64),
    "limit": st.integers(1, 5),
    **dict.fromkeys(("propagate", "truncate", "full", "vectors", "norms", "lazy", "inputs", "sample"), st.booleans()),
    "pre_rope": st.just(False),  # the toy has no rotary embeddings (a BadInput that says so)
    "variant": st.sampled_from(["baseline", "shared-k", "no-scale", "cosine", "scoring=dot"]),
    "variants": st.sampled_from(["shared-k", ["no-scale", "cosine"], ("scoring=dot",)]),
    "padding": st.sampled_from(["left", "right"]),
    "head_fusion": st.sampled_from(["mean", "max", "min"]),
    "progress": st.just(lambda done, total: None),
    "on_token": st.just(lambda text: None),
    "device": st.sampled_from(["cpu", "auto", " CPU "]),
    "dtype": st.sampled_from(["auto", "float32"]),
}

# Anything at all: wrong types, near misses (a number as a string, a float index, a bool), edge values.
ANY = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 6),
    st.integers(-(2**70), 2**70),
    st.floats(),
    st.text(st.characters(codec=None, exclude_categories=()), max_size=12),
    st.sampled_from(
        [
            "",
            " ",
            "-",
            "all",
            "0",
            "-1",
            "1-0",
            "x",
            "\ud800",
            "a\udcff",
            "0:2",
            "2:1",
            ":",
            "shared-k",
            "raw",
            "bilinear",
            "left",
            "mean",
            "induction",
            "cpu",
            "cuda:7",
            "float16",
        ]
    ),
    st.binary(max_size=6),
    st.lists(st.one_of(st.integers(-2, 6), st.text(max_size=2), st.none(), st.floats()), max_size=3),
    st.tuples(st.integers(-2, 6), st.integers(-2, 6)),
    st.tuples(st.floats(), st.text(max_size=2)),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
    st.sampled_from(
        [
            object(),
            b"",
            (),
            [],
            {},
            set(),
            np.float32(1.5),
            np.int64(2),
            np.array([0, 1]),
            np.bool_(True),
            Path("nowhere"),
            lambda *a: None,
            1j,
            float("inf"),
            10**400,
        ]
    ),
)


def good_call(method: str, corpus: Path):
    """(positional, keywords) strategies of a call that must work on the toy."""
    names = [name for name in inspect.signature(getattr(Model, method)).parameters if name != "self"]
    optional = {name: GOOD[name] for name in names if name in GOOD and name not in ("text", "prompt", "other")}
    if method == "inspect":
        text = TEXTS | st.lists(TEXTS, min_size=1, max_size=3)
    elif method in ("heads", "diagnose"):  # one source of texts
        optional = {name: strategy for name, strategy in optional.items() if name not in ("seed", "probe_length")}
        probes = (
            [
                st.fixed_dictionaries(
                    {"probe": st.sampled_from(["induction", "retrieval"])},
                    optional={"seed": st.integers(-(2**70), 2**70), "probe_length": GOOD["probe_length"]},
                )
            ]
            if method == "heads"
            else []
        )
        return st.one_of(
            st.fixed_dictionaries({"texts": TEXTS | st.lists(TEXTS, min_size=1, max_size=4)}),
            st.fixed_dictionaries({"file": st.sampled_from([corpus, str(corpus)])}),
            *probes,
        ).flatmap(
            lambda source: st.fixed_dictionaries({**{k: st.just(v) for k, v in source.items()}}, optional=optional)
        )
    elif method == "diff":  # two texts, or one against another model
        return st.one_of(
            st.fixed_dictionaries({"text": TEXTS, "other": TEXTS}, optional=optional),
            st.fixed_dictionaries({"text": TEXTS, "against": st.sampled_from(["toy", Path("toy")])}, optional=optional),
        )
    else:
        text = TEXTS
    first = "prompt" if method == "generate" else "text"
    return st.fixed_dictionaries({first: text}, optional=optional)


def outcome(call) -> object:
    """The call's result, or its AttnError; any other exception fails the test with its traceback."""
    try:
        return call()
    except AttnError as error:
        assert error.message
        return error


@FUZZ
@given(data=st.data(), method=st.sampled_from(METHODS))
def test_arbitrary_values_of_any_argument_raise_only_attn_errors(toy, corpus, data, method):
    keywords = data.draw(good_call(method, corpus), label="good")
    names = [name for name in inspect.signature(getattr(Model, method)).parameters if name != "self"]
    spoiled = data.draw(st.lists(st.sampled_from(names), min_size=1, max_size=3, unique=True), label="spoiled")
    keywords.update({name: data.draw(ANY, label=name) for name in spoiled})
    outcome(lambda: getattr(toy, method)(**keywords))


@FUZZ
@given(data=st.data(), method=st.sampled_from([m for m in METHODS if m != "generate"]))
def test_good_values_still_work(toy, corpus, data, method):
    keywords = data.draw(good_call(method, corpus), label="good")
    result = getattr(toy, method)(**keywords)
    assert not isinstance(result, Exception) and result is not None


@FUZZ
@given(
    model=st.just("toy") | ANY,
    device=GOOD["device"] | ANY,
    dtype=GOOD["dtype"] | ANY,
    options=st.dictionaries(
        st.sampled_from(["d_model", "heads", "seed", "causal", "scoring", "revision"]),
        st.sampled_from([8, 16, "16", 2, True, "true", "dot", 3]) | ANY,
        max_size=2,
    ),
)
def test_arbitrary_load_arguments_raise_only_attn_errors(model, device, dtype, options):
    if isinstance(options.get("d_model"), int) and not 0 <= options["d_model"] <= 64:
        options["d_model"] = 16  # a valid toy of 2**70 dimensions would be refused only by memory
    outcome(lambda: load(model, device=device, dtype=dtype, **options))


@FEW
@given(data=st.data())
def test_generate_with_good_and_bad_values(gpt2_lm, data):
    names = ("max_new_tokens", "sample", "temperature", "seed", "layers", "heads", "top_k", "on_token")
    keywords = data.draw(st.fixed_dictionaries({}, optional={name: GOOD[name] for name in names}), label="good")
    assert gpt2_lm.generate("the cat", **keywords).text is not None
    spoiled = data.draw(st.sampled_from(names), label="spoiled")
    keywords[spoiled] = data.draw(ANY, label=spoiled)
    outcome(lambda: gpt2_lm.generate("the cat", **keywords))


@FEW
@given(
    method=st.sampled_from(["inspect", "compare", "rollout"]),
    text=TEXTS | ANY,
    layers=st.just(0) | ANY,
    top_k=GOOD["top_k"] | ANY,
    truncate=st.booleans() | ANY,
)
def test_minilm_takes_the_same_arguments(minilm_backend, method, text, layers, top_k, truncate):
    """The real tokenizer behind the same door: a lone surrogate or a number never reaches it."""
    outcome(lambda: getattr(Model(minilm_backend), method)(text, layers=layers, top_k=top_k, truncate=truncate))


def test_an_api_error_names_the_keyword_argument_and_the_cli_error_the_option(toy):
    """From Python a refusal names the call's keyword argument (layers=9, top_k); the same refusal from the
    command line names its option (--layer 9): one check, spelled for whoever asked (plumbing.errors.SPELLING)."""
    from typer.testing import CliRunner

    from attn_cli.cli import app

    with pytest.raises(BadInput, match=r"^layers=9 is out of range for this model"):
        toy.inspect("the cat", layers=9)
    with pytest.raises(BadInput, match=r"^top_k must be at least 1, not 0"):
        toy.inspect("the cat", top_k=0)
    result = CliRunner().invoke(app, ["inspect", "the cat", "--model", "toy", "--layer", "9"])
    assert result.exit_code == 2 and "--layer 9 is out of range for this model" in result.output
