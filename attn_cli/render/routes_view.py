"""Rich renderables for a RoutesReport: the strongest paths to the explained state and the heads that carry
them, in 80 columns."""

from __future__ import annotations

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from attn_cli.render.terminal import header, titled


def node_label(name: str, tokens: list[str]) -> str:
    """X0_4 -> 'emb 4 a', A1_10 -> 'L1 attn 10 a', M1_3 -> 'L1 ffn 3 …', I1_10 -> 'L1 out 10 a'."""
    layer, position = (int(part) for part in name[1:].split("_"))
    stage = {"X": "emb", "A": f"L{layer} attn", "M": f"L{layer} ffn", "I": f"L{layer} out"}[name[0]]
    return f"{stage} {position} {tokens[position]}"


def render_routes(report) -> RenderableType:
    tokens = [token.text for token in report.tokens]
    about = f"the prediction at position {report.position} ({tokens[report.position]!r})"
    if report.target is not None:
        about += f", which produced {report.target!r}"
    parts: list[RenderableType] = [
        header(report, "attn routes"),
        Text(f"routes of {about}"),
        Text(f"{len(report.edges)} edges above {report.threshold:g}", style="dim"),
    ]
    if report.paths:
        paths = Table(box=box.SIMPLE_HEAD, pad_edge=False)
        paths.add_column("weight", justify="right", no_wrap=True)
        paths.add_column("path, input to output")
        for weight, nodes in report.paths:
            paths.add_row(f"{weight:.3f}", " → ".join(node_label(name, tokens) for name in nodes))
        parts.append(titled("strongest paths (edge weights multiplied)", paths))
    else:
        parts.append(Text("no path from an input token passes the threshold: lower --threshold", style="yellow"))
    if report.heads:
        heads = Table(box=box.SIMPLE_HEAD, pad_edge=False)
        heads.add_column("head", no_wrap=True)
        heads.add_column("carried", justify="right")
        for layer, head, carried in report.heads:
            heads.add_row(f"L{layer} H{head}", f"{carried:.3f}")
        parts.append(titled("heads that carry most (their shares summed over the kept edges)", heads))
    return Group(*parts)
