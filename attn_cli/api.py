"""The Python API: load a model once, then ask it as many questions as you like.

    import attn_cli as attn

    model = attn.load("minilm")                       # or "toy", a local directory, a hub id in the HF cache
    report = model.inspect("Hello, how are you?")
    report.head(0, 2).weights                         # numpy (T, T): layer 0, head 2
    report.to_json_dict()                             # the document `attn inspect --json` prints

Every command of the `attn` CLI is a thin caller of these methods, and they raise
the same errors (attn_cli.plumbing.errors.AttnError and its kinds) the CLI turns into
messages. Every argument is checked at the door (@door) by its kind before anything runs:
a wrong type or value is a BadInput naming the argument, never a bare TypeError from inside.
"""

from __future__ import annotations

import functools
import inspect as signatures
import json
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import overload

from attn_cli.analyses.compare import CompareReport
from attn_cli.analyses.inspect import Progress, inspect_texts
from attn_cli.analyses.inspect_report import InspectReport
from attn_cli.backends.capabilities import Seq2Seq, supports
from attn_cli.data import arguments
from attn_cli.data.capture import Capture, ModelInfo
from attn_cli.data.selection import Analysis, Selection, Span, Spec, parse_span
from attn_cli.plumbing.errors import SPELLING, AttnError, BadInput

# The kind of every argument of load and of Model's methods, by name: one name means one thing in every
# method (a method whose argument means more says so with @door(name=kind)). None passes where None is the
# default. What a string means is parsed further in, where the command line's strings are parsed too.
# Each name is a key once: a second entry for a name would silently replace the first for every method.
KINDS: dict[str, Callable] = {
    **dict.fromkeys(("text", "other", "prompt", "target", "foil", "clean", "corrupt"), arguments.text),
    **dict.fromkeys(("texts", "reference"), arguments.corpus),
    "image": lambda value, name: value,  # a path, "-" or a PIL image: _image reads it, or says what it takes
    **dict.fromkeys(("layers", "heads", "layer", "head"), arguments.selection),
    **dict.fromkeys(("rows", "cols"), arguments.span),
    **dict.fromkeys(
        (
            "top_k",
            "cell_limit",
            "max_new_tokens",
            "seed",
            "probe_length",
            "budget",
            "sinks",
            "batch_size",
            "limit",
            "top",
            "samples",
            "part_texts",
            "workers",
        ),
        arguments.index,
    ),
    **dict.fromkeys(
        ("tolerance", "temperature", "epsilon", "ratio", "floor", "gpus_per_worker", "mass"), arguments.number
    ),
    "windows": lambda value, name: [arguments.index(item, name, "window sizes") for item in value],
    **dict.fromkeys(
        (
            "propagate",
            "truncate",
            "full",
            "vectors",
            "norms",
            "lazy",
            "pre_rope",
            "inputs",
            "sample",
            "words",
            "resume",
            "per_text",
            "keep_workers",
            "together",
            "by_position",
            "prune",
            "retrieval_probe",
        ),
        arguments.flag,
    ),
    **dict.fromkeys(
        (
            "variant",
            "padding",
            "head_fusion",
            "probe",
            "device",
            "dtype",
            "column",
            "method",
            "metric",
            "direction",
            "measure",
            "vs",
            "engine",
            "address",
        ),
        arguments.word,
    ),
    **dict.fromkeys(("variants", "stacks", "include"), arguments.words),
    **dict.fromkeys(("file", "store"), arguments.path),
    **dict.fromkeys(("progress", "on_token"), arguments.callback),
    "model": lambda value, name: arguments.path(value, name, "a model name or a directory"),
    "against": lambda value, name: (
        value if isinstance(value, Model) else arguments.path(value, name, "a Model, a model name or a directory")
    ),
}


def _head_pairs(value, name: str) -> Spec:
    """ablate's heads: a selection of each selected layer's heads, or (layer, head) pairs, which name their
    layers themselves (the command line's "1.0,1.1")."""
    if isinstance(value, (list, tuple)) and value and all(isinstance(item, (list, tuple)) for item in value):
        pairs = [[arguments.index(part, name, "(layer, head) pairs") for part in item] for item in value]
        if any(len(pair) != 2 for pair in pairs):
            raise BadInput(f"{name}={value!r} is not a list of (layer, head) pairs")
        return ",".join(f"{layer}.{head}" for layer, head in pairs)
    return arguments.selection(value, name)


def _gradient_target(value, name: str) -> str | int:
    """attribute's target (--method gradient): a token or a label as a string, or an output index."""
    return value if isinstance(value, str) else arguments.index(value, name, "a token, a label or an output index")


def door(function=None, **overrides: Callable):
    """Check every argument of `function` by its kind (KINDS, or an override) before it runs.

    A call Python itself would refuse (an unknown keyword, a missing text) is a BadInput too."""
    if function is None:
        return lambda given: door(given, **overrides)
    signature = signatures.signature(function)
    checks = {
        name: overrides.get(name) or KINDS[name]
        for name, parameter in signature.parameters.items()
        if name != "self" and parameter.kind is not parameter.VAR_KEYWORD
    }  # KeyError: give it a kind

    @functools.wraps(function)
    def checked(*args, **kwargs):
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as error:
            raise BadInput(f"{function.__name__}(): {error}") from None
        given = dict(bound.arguments)
        try:
            for name, value in bound.arguments.items():
                if name in checks and not (value is None and signature.parameters[name].default is None):
                    bound.arguments[name] = checks[name](value, name)
            return function(*bound.args, **bound.kwargs)
        except AttnError as error:
            if SPELLING.get() != "cli":  # called from Python: the message names its keyword arguments, not options
                error.message = python_spelled(error.message, given, bound.arguments)
                error.args = (error.message,)
            raise

    return checked


def python_spelled(text: str, given: dict, converted: dict) -> str:
    """A message that names the command line's options, naming the call's keyword arguments instead: "--layer 9
    is out of range" → "layers=9 is out of range", "--top-k must be" → "top_k must be". given: the arguments as the
    caller wrote them; converted: as the door made them (what the message quotes)."""
    import re

    for name, value in given.items():
        flags = {"--" + name.replace("_", "-")}
        if name.endswith("s"):
            flags.add("--" + name[:-1].replace("_", "-"))  # layers= is --layer, heads= is --head
        for flag in sorted(flags, key=len, reverse=True):
            try:  # the value as the message quotes it (plain or repr), and as the caller wrote it (a huge int has no str)
                shown = converted.get(name)
                quoted, written = [f"{flag} {shown!r}", f"{flag} {shown}"], f"{name}={value!r}"
            except ValueError:
                quoted, written = [], ""
            for form in quoted:  # whole: --method alti is not the start of --method alti-logit
                text = re.sub(rf"{re.escape(form)}(?![\w-])", lambda _: written, text)
            text = re.sub(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", name, text)
    return text


@door
def load(model: str = "minilm", *, device: str = "auto", dtype: str = "auto", **options) -> Model:
    """Load a model once: "minilm" (bundled), "toy", a local Hugging Face directory, or a hub id.

    device: auto (CUDA, then MPS, then CPU), cpu, cuda, cuda:N or mps.
    dtype: auto (as saved), float32, float16 or bfloat16; analysis is always float32.
    options: the backend's own settings. Hugging Face models: revision, allow_pickle,
    trust_remote_code, device_map. The toy: d_model, heads, layers, positions, seed, scoring,
    additive_hidden, shared_projection, causal, valid_len, config, weights, save_weights.
    An option the backend does not take is a BadInput naming the backend.
    """
    from attn_cli.backends.registry import load_backend

    loaded = Model(load_backend(model, device=device, dtype=dtype, **options))
    loaded.loaded_as = {"model": model, "device": device, "dtype": dtype, "options": options}  # a Ray worker's load
    return loaded


class Model:
    """A loaded model. Cheap to ask: the model stays loaded between calls."""

    def __init__(self, backend):
        self.backend = backend
        self.loaded_as = None  # load()'s arguments, when load() made it: what heads(engine="ray") workers load

    @property
    def info(self) -> ModelInfo:
        """Name, architecture, layers, heads, kv heads, head dim, causal, position limit."""
        return self.backend.info

    @property
    def device(self) -> str:
        return self.backend.device

    @property
    def dtype(self) -> str:
        return self.backend.dtype

    @property
    def seq2seq(self) -> bool:
        """An encoder–decoder model: inspect and heads take a source and its target (backends/capabilities.Seq2Seq)."""
        return supports(self.backend, Seq2Seq)

    def __repr__(self) -> str:
        info = self.info
        return (
            f"<attn Model {info.name!r}: {info.architecture}, {info.layers} layers × {info.heads} heads, "
            f"{self.device}, {self.dtype}>"
        )

    @overload
    def inspect(self, text: str, **kwargs) -> InspectReport: ...

    @overload
    def inspect(self, text: Sequence[str], **kwargs) -> list[InspectReport]: ...

    @door(text=arguments.texts)
    def inspect(
        self,
        text,
        *,
        layers: Spec = "all",
        heads: Spec = "all",
        top_k: int | None = None,
        variant: str = "baseline",
        propagate: bool = False,
        truncate: bool = False,
        padding: str | None = None,
        pre_rope: bool = False,
        rows: Span = None,
        cols: Span = None,
        full: bool = False,
        include: Sequence[str] = (),
        measure: str = "weights",
        vectors: bool | None = None,
        norms: bool | None = None,
        tolerance: float | None = None,
        cell_limit: int | None = None,
        lazy: bool = False,
        words: bool = False,
        progress: Progress | None = None,
        target: str | None = None,
        stacks: str | Sequence[str] = "all",
    ):
        """Every selected head's scores, weights, symmetry, entropy, self-weight and top keys.

        text: one text (one report) or a list of texts (run as one padded batch, one report each).
        layers, heads: "all", 3, [0, 2], "0,2" or "1-4". top_k: keys listed per query (default 3).
        variant: baseline, shared-k, no-scale, raw, scoring=dot|scaled-dot|cosine.
        propagate: inject the variant into every layer instead of recomputing each layer.
        truncate: cut a text past the model's positions instead of failing.
        padding: left or right for several texts (default: the tokenizer's side).
        pre_rope: q and k before rotary position embeddings.
        rows, cols: keep only this window of the matrices ("100:140" or (100, 140)).
        full: keep whole matrices however large; by default they are kept up to cell_limit cells.
        include: extra fields, as --include: "qkv" keeps each head's q, k, v and output.
        measure: "weights", or "norm" (as --measure norm): also each head's value-weighted norms
        ‖α_ij · v_j·W_Oʰ‖ (head.norms), where a token's weight is scaled by how much its transformed value can
        carry (Kobayashi et al. 2020); or a measure a plugin registers (head.measured). vectors=True and norms=True, the old spellings of include=("qkv",) and
        measure="norm", still work (DeprecationWarning).
        lazy: analyse each layer when report.layers is iterated (once), for streaming writers.
        words: merge subword pieces into words (Clark et al. 2019): weights to a word summed over its
        pieces, from a word averaged over them, so rows still sum to 1; report.words says which pieces
        made which word, and the matrices and per-row statistics are over report.words (report.axis).
        Scores are left out (head.scores is None); symmetry and score_stats stay token-level.
        progress(done, total): called per analysed layer.
        target: an encoder–decoder model's decoder runs teacher-forced on it: text is the source, and the one
        report (a PairReport) holds the encoder, decoder and cross-attention stacks (stacks: "all", or some of
        "encoder,decoder,cross"); the cross heads' matrices are target rows × source columns.
        """
        vectors, measured = _fields(include, measure, vectors, norms)
        if target is not None or self.seq2seq:
            return self._pair(
                text,
                target,
                stacks,
                _selection(layers, heads, rows, cols, full),
                Analysis.defaults(top_k=top_k, tolerance=tolerance, cell_limit=cell_limit),
                progress,
                plain=variant == "baseline" and not (propagate or pre_rope or vectors or measured or words),
            )
        texts = [text] if isinstance(text, str) else list(text)
        reports = inspect_texts(
            self.backend,
            texts,
            _selection(layers, heads, rows, cols, full),
            Analysis.defaults(
                top_k=top_k, tolerance=tolerance, vectors=vectors, cell_limit=cell_limit, measure=measured
            ),
            variant=variant,
            propagate=propagate,
            truncate=truncate,
            padding_side=padding,
            pre_rope=pre_rope,
            lazy=lazy,
            words=words,
            progress=progress,
        )
        return reports[0] if isinstance(text, str) else reports

    def _pair(self, source, target, stacks, selection: Selection, analysis: Analysis, progress, plain: bool):
        from attn_cli.analyses.seq2seq import inspect_pair
        from attn_cli.backends.hf_seq2seq import parse_stacks

        if not isinstance(source, str):
            raise BadInput("an encoder–decoder model takes one source text and its --target", "run each pair alone")
        if target is None:
            raise BadInput(
                f"{self.info.name} is an encoder–decoder model: its decoder needs a target",
                "pass --target TEXT (the decoder runs teacher-forced on it)",
            )
        if not plain:
            raise BadInput(
                "variants, --propagate, --pre-rope, --words, --measure norm and q/k/v are not available "
                "for encoder–decoder models yet",
                "drop them",
            )
        return inspect_pair(self.backend, source, target, selection, analysis, parse_stacks(stacks), progress)

    @door
    def inspect_image(
        self,
        image,
        *,
        layers: Spec = "all",
        heads: Spec = "all",
        top_k: int | None = None,
        variant: str = "baseline",
        rows: Span = None,
        cols: Span = None,
        full: bool = False,
        include: Sequence[str] = (),
        measure: str = "weights",
        vectors: bool | None = None,
        norms: bool | None = None,
        tolerance: float | None = None,
        cell_limit: int | None = None,
        lazy: bool = False,
        progress: Progress | None = None,
    ) -> InspectReport:
        """A vision transformer's attention over an image (docs/vision.md): a file path, "-"
        for stdin, or a PIL image. Tokens are [CLS], the model's other special tokens and the patches
        r{row}c{col}; report.image is the patch grid (rows, cols, the image as the model saw it).
        The other arguments are inspect's."""
        from attn_cli.analyses.image import inspect_image

        vectors, measured = _fields(include, measure, vectors, norms)
        picture, source = _image(image)
        return inspect_image(
            self.backend,
            picture,
            source,
            _selection(layers, heads, rows, cols, full),
            Analysis.defaults(
                top_k=top_k, tolerance=tolerance, vectors=vectors, cell_limit=cell_limit, measure=measured
            ),
            variant=variant,
            lazy=lazy,
            progress=progress,
        )

    @door
    def compare(
        self,
        text: str,
        *,
        variants: Sequence[str] | str = ("shared-k",),
        propagate: bool = False,
        layers: Spec = "all",
        heads: Spec = "all",
        top_k: int | None = None,
        truncate: bool = False,
        full: bool = False,
        include: Sequence[str] = (),
        vectors: bool | None = None,
        tolerance: float | None = None,
        cell_limit: int | None = None,
    ) -> CompareReport:
        """The model beside counterfactual variants, head by head: runs, per-head diffs and summaries.
        include: as inspect's ("qkv"; vectors=True is its old spelling)."""
        from attn_cli.analyses.compare import compare_text

        vectors, _ = _fields(include, "weights", vectors, None)
        return compare_text(
            self.backend,
            text,
            _selection(layers, heads, None, None, full),
            Analysis.defaults(top_k=top_k, tolerance=tolerance, vectors=vectors, cell_limit=cell_limit),
            variants=variants,
            propagate=propagate,
            truncate=truncate,
        )

    @door
    def capture(
        self, text: str, *, layers: Spec = "all", truncate: bool = False, pre_rope: bool = False, inputs: bool = False
    ) -> Capture:
        """The raw capture: tokens, and per selected layer q (H, T, D), k and v (H_kv, T, D), mask, scale.

        inputs: also keep each layer's input X (T, d_model).
        """
        chosen = Selection(layers=layers).resolve(self.info)[0]
        return self.backend.capture_batch([text], chosen, truncate=truncate, keep_inputs=inputs, pre_rope=pre_rope)[0]

    @door
    def diff(
        self,
        text: str,
        other: str | None = None,
        *,
        against: Model | str | Path | None = None,
        layers: Spec = "all",
        heads: Spec = "all",
        top_k: int | None = None,
    ):
        """Every selected head on two texts (diff(a, b)), or on one text in this model and another
        checkpoint of the same shape and tokenizer (diff(text, against=other_model)): a DiffReport
        whose .heads are ranked most changed first. against may also name the checkpoint (a name, hub
        id or directory): it is loaded on this model's device in this model's dtype, with no options
        (load it yourself to give it some)."""
        from attn_cli.analyses.diff import diff_runs

        if (other is None) == (against is None):
            raise BadInput(
                "diff takes two texts, or one text and another model to run it against",
                "attn diff TEXT_A TEXT_B, or attn diff TEXT --against-model M",
            )
        selection, analysis = _selection(layers, heads, None, None, False), Analysis.defaults(top_k=top_k)
        if against is not None:
            second = against if isinstance(against, Model) else load(against, device=self.device, dtype=self.dtype)
            return diff_runs(self.backend, second.backend, text, text, selection, analysis, "models")
        assert other is not None  # checked above: two texts, or a text and another model
        return diff_runs(self.backend, self.backend, text, other, selection, analysis, "texts")

    @door
    def generate(
        self,
        prompt: str,
        *,
        max_new_tokens: int = 20,
        sample: bool = False,
        temperature: float = 1.0,
        seed: int | None = None,
        layers: Spec = "all",
        heads: Spec = "all",
        top_k: int | None = None,
        on_token=None,
    ):
        """Generate from `prompt` (greedy, or sampled at `temperature` with `seed`) and record each generated
        token's attention in the selected heads: a GenerateReport. on_token(text) sees the text as it comes.
        On an encoder–decoder model, prompt is the source: a PairGenerateReport of each generated token's decoder
        self-attention and cross-attention rows (on_token is not called)."""
        from attn_cli.analyses.generate import generate_from
        from attn_cli.analyses.seq2seq_generate import generate_pair

        selection = _selection(layers, heads, None, None, False)
        top_k = Analysis.defaults(top_k=top_k).top_k
        if self.seq2seq:  # decoder and cross rows (analyses/seq2seq_generate.py)
            return generate_pair(
                self.backend,
                prompt,
                selection,
                max_new_tokens=max_new_tokens,
                sample=sample,
                temperature=temperature,
                seed=seed,
                top_k=top_k,
            )
        return generate_from(
            self.backend,
            prompt,
            selection,
            max_new_tokens=max_new_tokens,
            sample=sample,
            temperature=temperature,
            seed=seed,
            top_k=top_k,
            on_token=on_token,
        )

    @door(text=lambda value, name: value)
    def rollout(
        self,
        text: str | None = None,
        *,
        image=None,
        layers: Spec = "all",
        head_fusion: str = "mean",
        top_k: int | None = None,
        truncate: bool = False,
    ):
        """Attention rollout over the selected consecutive layers: a RolloutReport whose .matrix (T, T)
        says how much of each output token traces back to each input token. image (a file, "-" or a PIL
        image) instead of text: a vision transformer's rollout, report.image its patch grid."""
        from attn_cli.analyses.rollout import roll_out

        if (text is None) == (image is None):
            raise BadInput("rollout takes a text or an image", "pass TEXT, or --image FILE")
        if image is not None:
            image = _image(image)
        else:
            text = arguments.text(text, "text")
        return roll_out(
            self.backend, text, layers, head_fusion, Analysis.defaults(top_k=top_k).top_k, truncate, image=image
        )

    @door(target=_gradient_target, explain=_gradient_target)
    def attribute(
        self,
        text: str,
        *,
        method: str = "alti",
        layers: Spec = "all",
        top_k: int | None = None,
        truncate: bool = False,
        vs: str | None = None,
        explain: str | int | None = None,
        target: str | int | None = None,
    ):
        """Contributions through whole layers (residual, values and LayerNorms in), rolled out to the input
        tokens: an AttributionReport whose .matrix (T, T) says how much of each output token comes from each
        input token, and .per_layer (L, T, T) each layer's own. method: alti, globenc, value-zeroing, gradient
        or flow; vs="attention" adds the raw attention rollout over the same layers (.attention). explain (gradient
        and alti-logit, as --explain): the next token for a language model, an output dimension otherwise; the
        report's .target says what was differentiated. method="alti-logit" (explain required, a pre-norm decoder
        with its LM head) returns a LogitAttributionReport instead: the next-token logit of explain split over the
        input tokens (.contributions (T,), .per_layer (L, T)) and the heads (.heads (L, H)), the rest in .terms.
        target= is explain's old spelling (DeprecationWarning)."""
        from attn_cli.analyses.attribute import attribute

        if target is not None:
            _deprecated("target", "explain")
            explain = target if explain is None else explain
        options = {} if explain is None else {"target": explain}
        return attribute(
            self.backend, text, method, layers, Analysis.defaults(top_k=top_k).top_k, truncate, vs, **options
        )

    def routes(
        self,
        text: str,
        *,
        target: str | None = None,
        threshold: float = 0.04,
        position: int | None = None,
        truncate: bool = False,
    ):
        """The information-flow graph of one prediction (Ferrando & Voita 2024) on a pre-norm decoder: a
        RoutesReport whose .edges are the kept edges (source, target, kind, weight, each head's share), .paths
        the strongest paths from an input token up, .heads the heads that carry most. position: the token
        whose prediction is explained (default the last); target: a token of the text, explaining the
        prediction that produced its last occurrence; threshold: keep edges whose share is above it."""
        from attn_cli.analyses.routes import routes

        text = arguments.text(text, "text")
        return routes(self.backend, text, target, threshold, position, truncate)

    @door(heads=_head_pairs)
    def ablate(
        self,
        text: str | None = None,
        *,
        image=None,
        file: str | Path | None = None,
        limit: int | None = None,
        store: str | Path | None = None,
        resume: bool = False,
        layers: Spec = "all",
        heads: Spec | Sequence[tuple[int, int]] = "all",
        together: bool = False,
        method: str = "zero",
        metric: str | None = None,
        target: str | None = None,
        foil: str | None = None,
        reference: str | Iterable[str] | None = None,
        seed: int = 0,
        truncate: bool = False,
        progress: Callable[[int], None] | None = None,
    ):
        """What removing each selected head does to the model's output: an AblationReport whose .ablations
        hold each head's (or, with together=True, the set's) metric value and its effect (value − the clean
        run's), .grid() the effects as layers × heads, .top() the largest. heads: a selection of each layer's
        heads, or (layer, head) pairs: [(1, 0), (1, 1)]. method: zero, mean or resample (from `reference`, a
        list of texts; default the text's own tokens). metric: loss (of the text's own next tokens, or of
        `target`'s, a continuation), logit-diff (`target` − `foil`, single tokens after the text) or kl for a
        language model; cosine (of the mean-pooled embedding) for an encoder. image (a file, "-" or a PIL image)
        instead of text: a vision transformer's heads, by the cosine distance of its mean-pooled embedding. file
        (a corpus, as heads() reads it; at most `limit` texts) instead: every ablation on every text, the mean
        effect, its .std over the texts and the .examples where it was largest; progress(texts done); store (a
        directory): each text's values written there as they are made, resume=True continues it."""
        from attn_cli.analyses.ablate import ablate

        if (text is not None) + (image is not None) + (file is not None) != 1:
            raise BadInput("ablate takes a text, an image or a corpus file", "pass TEXT, --image FILE or --file FILE")
        if file is not None:
            from itertools import islice

            from attn_cli.analyses.ablate import ablate_corpus

            texts, _, source, _ = _corpus(None, file)
            kept = None
            if store is not None:
                from attn_cli.analyses.ablate_store import AblationStore

                identity = {
                    "model": self.info.name,
                    "architecture": self.info.architecture,
                    "dtype": self.backend.dtype,
                    "corpus": source,
                    "options": {
                        "layers": layers,
                        "heads": heads,
                        "together": together,
                        "method": method,
                        "metric": metric,
                        "reference": None if reference is None else list(reference),
                        "seed": seed,
                        "truncate": truncate,
                    },
                }
                kept = AblationStore(Path(store), json.loads(json.dumps(identity)), resume)
            return ablate_corpus(
                self.backend,
                texts if limit is None else islice(texts, limit),
                layers,
                heads,  # type: ignore[arg-type]  # _head_pairs made pairs a "1.0,1.1" string
                together=together,
                method=method,
                metric=metric,
                reference=None if reference is None else [reference] if isinstance(reference, str) else list(reference),
                seed=seed,
                truncate=truncate,
                progress=progress,
                store=kept,
            )
        if store is not None:
            raise BadInput("--store keeps a corpus' ablations", "add --file CORPUS")
        picture, source = _image(image) if image is not None else (None, "image")
        return ablate(
            self.backend,
            text,
            layers,
            heads,  # type: ignore[arg-type]  # _head_pairs made pairs a "1.0,1.1" string
            image=picture,
            image_source=source,
            together=together,
            method=method,
            metric=metric,
            target=target,
            foil=foil,
            reference=None if reference is None else [reference] if isinstance(reference, str) else list(reference),
            seed=seed,
            truncate=truncate,
        )

    @door(heads=_head_pairs)
    def patch(
        self,
        clean: str,
        corrupt: str,
        *,
        target: str,
        foil: str,
        layers: Spec = "all",
        heads: Spec | Sequence[tuple[int, int]] = "all",
        by_position: bool = False,
        direction: str = "denoising",
        truncate: bool = False,
    ):
        """Activation patching per head between a clean text and a corrupted one of as many tokens: a PatchReport
        whose .patches hold each head's patched logit difference (`target` − `foil` after the text) and its
        recovery, (LD_patched − LD_corrupt) / (LD_clean − LD_corrupt); .grid() is layers × heads, or layers ×
        positions × heads with by_position=True. direction: denoising (the corrupted run with one head from
        the clean run) or noising (the reverse)."""
        from attn_cli.analyses.patch import patch

        return patch(
            self.backend,
            clean,
            corrupt,
            layers,
            heads,  # type: ignore[arg-type]  # _head_pairs made pairs a "1.0,1.1" string
            target=target,
            foil=foil,
            by_position=by_position,
            direction=direction,
            truncate=truncate,
        )

    @door
    def importance(
        self,
        texts: str | Iterable[str] | None = None,
        *,
        file: str | Path | None = None,
        limit: int | None = None,
        batch_size: int = 8,
        prune: bool = True,
        truncate: bool = False,
    ):
        """Each head's importance to a language model's loss (Michel et al. 2019): the mean over the texts (or
        the corpus file, as heads() reads it) of |∂L/∂ξ| for a gate ξ on the head's output, one backward per
        batch; an ImportanceReport whose .importance is layers × heads, .order() the heads least important
        first, and .pruning the loss as heads are removed in that order (prune=False skips it)."""
        from itertools import islice

        from attn_cli.analyses.importance import head_importance

        if (texts is None) == (file is None):
            raise BadInput("give one of texts or file", "pass text or --file FILE")
        chosen, _, _, _ = _corpus(texts, file)
        if limit is not None:
            chosen = islice(chosen, limit)
        return head_importance(self.backend, chosen, batch_size=batch_size, prune=prune, truncate=truncate)

    @door
    def kv_profile(
        self,
        texts: str | Iterable[str] | None = None,
        *,
        file: str | Path | None = None,
        limit: int | None = None,
        batch_size: int = 8,
        budget: int = 64,
        sinks: int = 4,
        windows: Sequence[int] = (16, 64, 256, 1024),
        mass: float = 0.95,
        retrieval_probe: bool = True,
        seed: int = 0,
        truncate: bool = False,
        progress: Progress | None = None,
        store: str | Path | None = None,
        resume: bool = False,
    ):
        """How much KV cache each head needs: a KVReport whose .heads hold per (layer, head) the sink mass, the
        local mass per window, the keys a row needs to keep 0.9/0.95/0.99 of its attention, what StreamingLLM
        and H2O keep at `budget` keys, the retrieval score on a needle probe (retrieval_probe), a class
        (streaming or retrieval) and a recommended budget for `mass`; .kv_heads() per KV head;
        .full_attention() DuoAttention's full_attention_heads.tsv grid. store (a directory, with file): the sums
        written there as they grow, resume=True continues it."""
        from attn_cli.analyses.kv import Settings, profile

        if (texts is None) == (file is None):
            raise BadInput("give one of texts or file", "pass text or --file FILE")
        if not 0 < mass <= 1:
            raise BadInput(f"--mass {mass} is not a share of attention", "give a number in (0, 1], like 0.95")
        chosen, total, source, _ = _corpus(texts, file)
        settings = Settings(sinks=sinks, windows=tuple(windows), budget=budget, target=mass)
        kept = None
        if store is not None:
            from dataclasses import asdict

            from attn_cli.analyses.kv_store import KVStore

            if file is None:
                raise BadInput("store keeps a corpus' profile", "give file=CORPUS (--file) with it")
            identity = {
                "model": self.info.name,
                "architecture": self.info.architecture,
                "dtype": self.backend.dtype,
                "corpus": source,
                "settings": asdict(settings),
                "truncate": truncate,
            }
            kept = KVStore(Path(store), json.loads(json.dumps(identity)), resume)
        return profile(
            self.backend,
            chosen,
            settings,
            batch_size=batch_size,
            limit=limit,
            total=total,
            truncate=truncate,
            retrieval_probe=retrieval_probe,
            seed=seed,
            progress=progress,
            store=kept,
        )

    @door(target=arguments.text)
    def heads(
        self,
        texts: str | Iterable[str] | None = None,
        *,
        file: str | Path | None = None,
        probe: str | None = None,
        seed: int = 0,
        probe_length: int | None = None,
        layers: Spec = "all",
        heads: Spec = "all",
        batch_size: int = 32,
        limit: int | None = None,
        truncate: bool = False,
        progress=None,
        store: str | Path | None = None,
        resume: bool = False,
        per_text: bool = False,
        top: int = 10,
        samples: int = 5,
        column: str = "text",
        part_texts: int = 2048,
        engine: str = "local",
        address: str | None = None,
        workers: int | None = None,
        gpus_per_worker: float = 0.0,
        keep_workers: bool = False,
        target: str | None = None,
        stacks: str | Sequence[str] = "all",
        image=None,
    ):
        """What every selected head does: previous-token, duplicate-token, induction, first-token,
        last-token, punctuation, self, broad and sink scores, and a label, averaged over the texts.

        texts: one text, a list, or any iterable (read as it goes); or file: a text per line, JSONL
        {"text": …}, a Parquet or Arrow file or a directory of them, or a saved `datasets` directory (the
        texts in `column`); or probe="induction": a seeded random token sequence repeated twice, or
        probe="retrieval": a needle inside a random haystack, then the needle again (the retrieval score).
        Texts run in parts of part_texts, shortest first within a part, in padded batches of batch_size;
        limit caps how many. progress(done, total).
        store: a directory to write the corpus store to (Parquet tables: per-head summaries, each head's
        `top` texts per score, `samples` texts per decile and `top` edges; per-text scores with per_text);
        resume continues one an interrupted run left. The report is the same either way.
        Ctrl-C stops at the current batch: the report covers the texts done (report.interrupted).
        engine="ray": the batches are scored by `workers` Ray actors (each loads this model again, on
        gpus_per_worker GPUs) on the cluster at `address` (default: the one joined, or a local one); the
        report and the store are those of engine="local" (docs/commands/heads.md, "Corpus runs on Ray"). keep_workers=True: the
        workers, their model loaded, stay alive for this process's next heads() with the same engine arguments
        (which stops them after unless it keeps them too), so they start once, not a call.
        Formulas: attn_cli.math.head_scores. report.head(0, 2).scores["previous_token"]; report.to_json_dict().
        target: an encoder–decoder model's decoder runs teacher-forced on it, texts being the one source; every
        head of the stacks asked for ("all", or some of "encoder,decoder,cross") is scored, each profile saying
        its stack (report.head(1, 0, "cross")). A cross head's scores that pair query i with a key by position
        (previous_token, duplicate_token, induction, self) are None, and profile.not_defined says why.
        image: a vision transformer's image (a path, "-" or a PIL image) instead of texts: [CLS] and the patches.
        """
        from attn_cli.analyses.heads import PROBE_LENGTH, run_heads
        from attn_cli.analyses.heads import probe as make_probe

        if target is not None or image is not None or self.seq2seq:
            corpus_only = {
                "--file": file,
                "--probe": probe,
                "--store": store,
                "--per-text": per_text or None,
                "--limit": limit,
                "--engine": None if engine == "local" else engine,
            }
            from attn_cli.analyses.heads_stacks import heads_alone

            return heads_alone(
                self.backend,
                texts,
                target,
                stacks,
                None if image is None else _image(image),
                Selection(layers=layers, heads=heads),
                [name for name, value in corpus_only.items() if value is not None],
            )
        given = [name for name, value in (("texts", texts), ("file", file), ("probe", probe)) if value is not None]
        if len(given) != 1:
            raise BadInput(
                "give one of texts, file or probe" if not given else f"{' and '.join(given)} are separate sources",
                "pass text, --file FILE or --probe induction",
            )
        described, corpus_format = None, "arguments"
        total: int | None
        from attn_cli.analyses.ray_engine import engine_for

        run_on = engine_for(self.loaded_as, engine, address, workers, gpus_per_worker, keep_workers)
        if probe is not None:
            described = make_probe(self.backend, probe, seed, PROBE_LENGTH if probe_length is None else probe_length)
            texts, total, source, corpus_format = [described["text"]], 1, "probe", "probe"
        else:
            texts, total, source, corpus_format = _corpus(texts, file, column, remote=run_on is not None)
        keeper_of = None
        if per_text and store is None:
            raise BadInput("per_text writes the store's texts table", "give store=DIR (--store DIR) with it")
        if store is not None:
            from attn_cli.analyses.store_writer import check_store, keeper_for

            check_store(Path(store), resume)
            keeper_of = keeper_for(
                self.backend,
                Path(store),
                resume=resume,
                corpus=source,
                corpus_format=corpus_format,
                options={
                    "batch_size": batch_size,
                    "truncate": truncate,
                    "limit": limit,
                    "top": top,
                    "samples": samples,
                    "column": column,
                    "per_text": per_text,
                    "part_texts": part_texts,
                    "layers": str(layers),
                    "heads": str(heads),
                    "probe": described,
                },
            )
        return run_heads(
            self.backend,
            texts,
            Selection(layers=layers, heads=heads),
            batch_size=batch_size,
            limit=limit,
            total=total,
            truncate=truncate,
            source=source,
            probe=described,
            progress=progress,
            part_texts=part_texts,
            top=top,
            samples=samples,
            per_text=per_text,
            keeper_of=keeper_of,
            engine=run_on,
        )

    @door
    def circuits(self):
        """Every head's QK (W_Q·W_Kᵀ) and OV (W_V·W_O) circuits from the weights, no text run: a CircuitsReport
        with .heads (singular values, copying score, positional split), .composition ("q", "k", "v": every
        writer × reader pair), .score(mode, writer, reader), .top(mode) and .to_json_dict(). The weights are
        processed as TransformerLens loads them (norms folded, writing weights and W_U centred)."""
        from attn_cli.analyses.circuits import run_circuits

        return run_circuits(self.backend)

    @door
    def diagnose(
        self,
        texts: str | Iterable[str] | None = None,
        *,
        file: str | Path | None = None,
        epsilon: float | None = None,
        ratio: float | None = None,
        floor: float | None = None,
        batch_size: int = 32,
        limit: int | None = None,
        truncate: bool = False,
        progress=None,
    ):
        """The model's attention sinks and massive activations over one text, a list, any iterable or a
        file (as heads() reads them): a DiagnoseReport with the sink rate (Gu et al. 2024: the share of
        heads whose mean weight on the first token exceeds epsilon, default 0.3) per layer and over the
        model, each head's first-token weight, and the residual stream's largest entries, massive when
        over ratio × the layer's median magnitude and over floor (Sun et al. 2024; defaults 100, 100).
        Formulas: attn_cli.math.diagnostics. report.layers[1].sink_rate; report.to_json_dict()."""
        from attn_cli.analyses.diagnose import run_diagnose
        from attn_cli.math.diagnostics import MASSIVE_FLOOR, MASSIVE_RATIO
        from attn_cli.math.head_scores import SINK_EPSILON

        if (texts is None) == (file is None):
            raise BadInput("give one of texts or file", "pass text or --file FILE")
        texts, total, source, _ = _corpus(texts, file)
        return run_diagnose(
            self.backend,
            texts,
            epsilon=SINK_EPSILON if epsilon is None else epsilon,
            ratio=MASSIVE_RATIO if ratio is None else ratio,
            floor=MASSIVE_FLOOR if floor is None else floor,
            batch_size=batch_size,
            limit=limit,
            total=total,
            truncate=truncate,
            source=source,
            progress=progress,
        )

    @door
    def steps(self, text: str, *, layer: int | str = 0, head: int | str = 0):
        """One head walked through X, Q, K, V, Q·Kᵀ, the scale, the mask, softmax, ·V (and W_O on the toy)."""
        from attn_cli.analyses.steps import walk_head

        return walk_head(self.backend, text, layer, head)


def _corpus(texts, file, column: str = "text", remote: bool = False) -> tuple[Iterable[str], int | None, str, str]:
    """(texts, how many if known, source, format) of texts given as one, a list, an iterable, or file: lines,
    JSONL, Parquet or Arrow (the texts in `column`), read as it goes (plumbing/corpus.py); with remote (the
    Ray engine), a file at an object-store URL is read by Ray Data."""
    if file is not None and remote:
        from attn_cli.analyses import ray_engine

        if ray_engine.is_url(file):
            return ray_engine.url_texts(str(file), column), None, str(file), ray_engine.url_format(str(file))
    if file is not None:
        from attn_cli.plumbing.corpus import open_corpus

        corpus = open_corpus(file, column)
        return corpus.texts(), corpus.count(), "stdin" if str(file) == "-" else str(file), corpus.format
    if isinstance(texts, str):
        return [texts], 1, "arguments", "arguments"
    return texts, len(texts) if hasattr(texts, "__len__") else None, "arguments", "arguments"


def _image(image) -> tuple:
    """(PIL image, its source name) from a path, "-" (stdin) or a PIL image."""
    from attn_cli.plumbing.images import read_image

    if hasattr(image, "convert") and hasattr(image, "size"):  # a PIL image already
        return image.convert("RGB"), "image"
    source = arguments.path(image, "image", "an image file, - or a PIL image")
    return read_image(source), source


def _selection(layers: Spec, heads: Spec, rows: Span, cols: Span, full: bool) -> Selection:
    return Selection(
        layers=layers, heads=heads, rows=parse_span(rows, "--rows"), cols=parse_span(cols, "--cols"), full=full
    )


INCLUDES = ("qkv",)  # --include's words


def _fields(include, measure: str, vectors: bool | None, norms: bool | None) -> tuple[bool, str | None]:
    """The command line's include=("qkv",) and measure="NAME" as the analysis's (vectors, measure: a registered
    Measure's name, None for the weights alone). vectors= and norms=, their old spellings in this API, still
    count, with a DeprecationWarning."""
    from attn_cli.data.registry import measure_named

    unknown = [item for item in include if item not in INCLUDES]
    if unknown:
        raise BadInput(f"include={unknown[0]!r} is not a field", f"choose from {', '.join(INCLUDES)}")
    if not isinstance(measure, str):
        raise BadInput(f"measure={measure!r} is not a measure", 'give a measure\'s name, e.g. measure="norm"')
    if measure != "weights":
        measure_named(measure)  # refused in one line naming the registered ones
    if vectors is not None:
        _deprecated("vectors", 'include=("qkv",)', stacklevel=5)
    if norms is not None:
        _deprecated("norms", 'measure="norm"', stacklevel=5)
    chosen = "norm" if norms and measure == "weights" else None if measure == "weights" else measure
    return "qkv" in include or bool(vectors), chosen


def _deprecated(old: str, new: str, stacklevel: int = 4) -> None:
    """A DeprecationWarning at the caller's line (stacklevel: frames up to it, through @door's wrapper)."""
    import warnings

    warnings.warn(f"{old}= is deprecated and goes in the next release; use {new}", DeprecationWarning, stacklevel)
