"""The flow runs one way: no module imports one from a later stage (imports inside functions included).

    data and pure math → backends → variants, analysis → report → engine → api → render → cli
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "attn_cli"

# Each module's stage; a module may import modules of its own stage or an earlier one.
STAGES = [
    ("data and math", ["errors", "config", "document", "selection", "devices", "capture", "masks", "attention",
                       "scoring", "textio", "atomic", "interrupts"]),
    ("backends", ["backends", "catalog"]),
    ("analysis", ["variants", "analysis", "head_rows", "heads"]),
    ("report", ["report", "heads_report"]),
    ("engine", ["core", "compare", "steps", "rollout", "diff", "generate", "heads_run"]),
    ("api", ["api"]),
    ("render", ["render"]),
    ("explore", ["explore"]),
    ("cli", ["cli", "__main__", "launch"]),
]
RANK = {name: rank for rank, (_, names) in enumerate(STAGES) for name in names}


def stage_of(module: str) -> int | None:
    """attn_cli.backends.hf → the rank of "backends"; the package itself (attn_cli) has none."""
    parts = module.split(".")
    return RANK.get(parts[1]) if len(parts) > 1 else None


def imports_of(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)  # from attn_cli import x
    return {name for name in names if name.startswith("attn_cli.")}


def module_name(path: Path) -> str:
    return ".".join(("attn_cli", *path.relative_to(PACKAGE).with_suffix("").parts)).removesuffix(".__init__")


def test_every_module_has_a_stage():
    unplaced = [module_name(path) for path in PACKAGE.rglob("*.py")
                if path.name != "__init__.py" or path.parent != PACKAGE
                if stage_of(module_name(path)) is None]
    assert unplaced == []


def test_no_module_imports_a_later_stage():
    wrong = []
    for path in PACKAGE.rglob("*.py"):
        importer = module_name(path)
        own = stage_of(importer)
        if own is None:
            continue
        for imported in imports_of(path):
            theirs = stage_of(imported)
            if theirs is not None and theirs > own:
                wrong.append(f"{importer} ({STAGES[own][0]}) imports {imported} ({STAGES[theirs][0]})")
    assert wrong == []
