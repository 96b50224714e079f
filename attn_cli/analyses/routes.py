"""`attn routes`: the information-flow graph of one prediction (Ferrando & Voita 2024), on pre-norm decoders.

Which residual states, attention edges (per head) and FFN blocks the prediction at one position is built
from: every layer's residual stream split into its parts (math/routes.py), each part weighted by its L1
proximity to the whole, and the graph pruned at τ from the last layer's state at that position down.

The position is the last token's unless `position` or `target` says otherwise; `target` is a token of the
text, and the prediction explained is the one that produced its last occurrence (the state one position
before it), so the route of a copied token shows where the copy came from.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from attn_cli.backends.capabilities import DecoderBlocks, require
from attn_cli.data.capture import ModelInfo
from attn_cli.data.document import SCHEMA_VERSION, Document, counted, num_json
from attn_cli.plumbing.errors import BadInput

THRESHOLD = 0.04  # the reference tool's default contribution threshold
TOP_PATHS = 5


@dataclass
class RoutesReport(Document):
    text: str
    model: ModelInfo
    device: str
    dtype: str
    tokens: list
    position: int  # the residual state explained: the prediction made at this token
    threshold: float
    layers: int
    edges: list  # math.routes.Edge, kept (weight > threshold), top layer first
    target: str | None = None  # --target: the token whose prediction this is
    paths: list = field(default_factory=list)  # [(weight, [node, …])] strongest first, input to output
    heads: list = field(default_factory=list)  # [(layer, head, carried)] the heads whose shares add up most
    truncated_from: int | None = None

    def summary_shape(self) -> str:
        return f"position {self.position}, {counted(len(self.edges), 'edge')} above {self.threshold:g}"

    def nodes(self) -> list[dict]:
        """Every node a kept edge touches: its name, kind, layer and position (and the token there)."""
        names = {edge.source for edge in self.edges} | {edge.target for edge in self.edges}
        if not names:
            names = {f"I{self.layers - 1}_{self.position}"}
        described = [describe(name) for name in names]
        for item in described:
            item["token"] = self.tokens[item["position"]].text
        return sorted(described, key=lambda item: (item["layer"], STAGES.index(item["kind"]), item["position"]))

    def to_json_dict(self) -> dict:
        return {
            "schema_version": SCHEMA_VERSION,
            "command": "routes",
            "text": self.text,
            "model": asdict(self.model),
            "device": self.device,
            "dtype": self.dtype,
            "tokens": [asdict(token) for token in self.tokens],
            "position": self.position,
            "target": self.target,
            "threshold": self.threshold,
            "nodes": self.nodes(),
            "edges": [
                {
                    "source": edge.source,
                    "target": edge.target,
                    "kind": edge.kind,
                    "weight": num_json(edge.weight),
                    **({"heads": [num_json(share) for share in edge.heads]} if edge.heads else {}),
                }
                for edge in self.edges
            ],
            "paths": [{"weight": num_json(weight), "nodes": nodes} for weight, nodes in self.paths],
            "heads": [
                {"layer": layer, "head": head, "carried": num_json(carried)} for layer, head, carried in self.heads
            ],
            **({"truncated_from": self.truncated_from} if self.truncated_from is not None else {}),
        }


STAGES = ("embedding", "attention", "ffn", "output")
_KINDS = {"X": "embedding", "A": "attention", "M": "ffn", "I": "output"}


def describe(name: str) -> dict:
    """X0_3 -> {"id": "X0_3", "kind": "embedding", "layer": -1, "position": 3}: A/M/I name layer l's residual
    after the attention, its FFN block and its output; the embedding is drawn below layer 0 (layer -1)."""
    layer, position = (int(part) for part in name[1:].split("_"))
    kind = _KINDS[name[0]]
    return {"id": name, "kind": kind, "layer": -1 if kind == "embedding" else layer, "position": position}


def strongest_paths(edges: list, start: str, count: int = TOP_PATHS) -> list[tuple[float, list[str]]]:
    """The `count` paths from an embedding node up to `start` whose edge weights multiply to the most: each
    node keeps its best `count` paths down (the graph is a DAG, layers only go up)."""
    into: dict[str, list] = {}
    for edge in edges:
        into.setdefault(edge.target, []).append(edge)
    best: dict[str, list[tuple[float, list[str]]]] = {}

    def paths_to(name: str) -> list[tuple[float, list[str]]]:
        if name not in best:
            if name.startswith("X") or name not in into:
                best[name] = [(1.0, [name])] if name.startswith("X") else []
            else:
                found = [
                    (weight * edge.weight, [*nodes, name])
                    for edge in into[name]
                    for weight, nodes in paths_to(edge.source)
                ]
                best[name] = sorted(found, key=lambda item: -item[0])[:count]
        return best[name]

    return paths_to(start)


def carrying_heads(edges: list, count: int = 8) -> list[tuple[int, int, float]]:
    """(layer, head, the sum of its shares over the kept attention edges), largest first."""
    totals: dict[tuple[int, int], float] = {}
    for edge in edges:
        if edge.heads and edge.target.startswith("A"):
            layer = describe(edge.target)["layer"]
            for head, share in enumerate(edge.heads):
                totals[layer, head] = totals.get((layer, head), 0.0) + share
    ranked = sorted(totals.items(), key=lambda item: -item[1])[:count]
    return [(layer, head, carried) for (layer, head), carried in ranked]


def chosen_position(texts: list[str], position: int | None, target: str | None) -> int:
    """The position whose prediction is explained: `position` (negative counts from the end), the one before
    `target`'s last occurrence, or the last."""
    if position is not None and target is not None:
        raise BadInput(
            "--position and --target both given", "--target TOKEN explains that token's prediction; pick one"
        )
    count = len(texts)
    if target is not None:
        found = [index for index, text in enumerate(texts) if text.strip() == target.strip()]
        if not found:
            raise BadInput(f"--target {target!r} is not a token of the text", f"its tokens: {' '.join(texts)}")
        if found[-1] == 0:
            raise BadInput(f"--target {target!r} is the first token: nothing predicted it", "pick a later token")
        return found[-1] - 1
    if position is None:
        return count - 1
    if not -count <= position < count:
        raise BadInput(f"--position {position}", f"the text has {count} tokens: 0 to {count - 1}, or -1 for the last")
    return position % count


def routes(
    backend,
    text: str,
    target: str | None = None,
    threshold: float = THRESHOLD,
    position: int | None = None,
    truncate: bool = False,
) -> RoutesReport:
    """The pruned information-flow graph of the prediction at `position` (see the module docstring)."""
    from attn_cli.math.routes import node, route

    if not 0 <= threshold < 1:
        raise BadInput(f"--threshold {threshold:g}", "a share between 0 and 1, such as the default 0.04")
    source = require(backend, DecoderBlocks, "attn routes")
    tokens, truncated_from = backend.tokens(text, truncate)
    at = chosen_position([token.text for token in tokens], position, target)
    blocks = source.decoder_blocks(text, truncate)
    edges = route(blocks, at, threshold)
    top = node("I", len(blocks) - 1, at)
    return RoutesReport(
        text,
        backend.info,
        backend.device,
        backend.dtype,
        tokens,
        at,
        threshold,
        len(blocks),
        edges,
        target,
        strongest_paths(edges, top),
        carrying_heads(edges),
        truncated_from,
    )
