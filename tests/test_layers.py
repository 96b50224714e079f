"""The flow runs one way, and the folders show it: a module's folder is its stage, and no module imports one
from a later stage (imports inside functions included).

    plumbing → math → data → backends → analyses → api → render → explore → cli
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "attn_cli"

# The stages in order: a module may import its own stage or an earlier one. Each stage is a folder of
# attn_cli/; the only loose modules are the package's doors, placed by name.
STAGES = [
    ("plumbing", "the process: errors, config, devices, atomic files, text input, interrupts"),
    ("math", "pure tensor math: attention, masks, scoring, measures, head scores"),
    ("data", "plain data every later stage shares: capture, selection, document"),
    ("backends", "models and tokenizers: load, tokenize, run, capture; the model catalog"),
    ("analyses", "one module per command's engine with its report: inspect, compare, heads, …"),
    ("api", "the one door to the engine: load and Model"),
    ("render", "reports into Rich renderables, SVG, HTML, JSON and safetensors files"),
    ("explore", "the Textual app: a session's state and the widgets that draw it"),
    ("cli", "the Typer commands and the process edge"),
]
LOOSE = {"api": "api", "launch": "cli", "__main__": "cli"}  # top-level module → its stage
RANK = {name: rank for rank, (name, _) in enumerate(STAGES)}


def stage_of(module: str) -> int | None:
    """attn_cli.backends.hf → the rank of "backends"; attn_cli.api → "api"; the package itself has none.
    A folder (or loose module) missing from the table has none either, and the first test names it."""
    parts = module.split(".")
    if len(parts) == 1:
        return None
    if len(parts) == 2 and parts[1] in LOOSE:
        return RANK[LOOSE[parts[1]]]
    return RANK.get(parts[1])


def imports_of(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)  # from attn_cli.math import x
    return {name for name in names if name.startswith("attn_cli.")}


def module_name(path: Path) -> str:
    return ".".join(("attn_cli", *path.relative_to(PACKAGE).with_suffix("").parts)).removesuffix(".__init__")


def test_every_module_has_a_stage():
    """A new folder (or a new loose module) must be placed in STAGES first."""
    unplaced = [
        module_name(path)
        for path in PACKAGE.rglob("*.py")
        if path.name != "__init__.py" or path.parent != PACKAGE
        if stage_of(module_name(path)) is None
    ]
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


def test_no_relative_imports():
    """Relative imports would hide a module's stage from the test above."""
    relative = [
        module_name(path)
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and node.level > 0
    ]
    assert relative == []


def test_the_folders_are_the_stages():
    """`ls attn_cli` reads like the table: every stage folder exists, and no folder is left out of it."""
    folders = {path.name for path in PACKAGE.iterdir() if path.is_dir() and (path / "__init__.py").exists()}
    assert folders == {name for name, _ in STAGES} - {"api"}  # the api stage is one module, attn_cli/api.py


def test_a_renderer_knows_no_backend():
    """render/ and explore/ draw reports and plain data (analyses/, data/); how a model is loaded or run is the
    backend's. (The model catalog's types live in data/catalog.py for that reason.)"""
    reaching = [
        f"{module_name(path)} imports {imported}"
        for folder in ("render", "explore")
        for path in (PACKAGE / folder).rglob("*.py")
        for imported in imports_of(path)
        if imported.startswith("attn_cli.backends")
    ]
    assert reaching == []


def test_every_top_level_name_is_used():
    """A module-level function, class or constant of attn_cli that nothing in attn_cli names is dead code (a
    test alone does not keep it alive: its reference lives with the tests). Counted by word, over the package's
    Python and JavaScript and pyproject.toml (entry points); a decorated function is used by its decorator."""
    root = PACKAGE.parent
    sources = [*PACKAGE.rglob("*.py"), *PACKAGE.rglob("*.js"), root / "pyproject.toml"]
    counts: dict[str, int] = {}
    for path in sources:
        for word in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", path.read_text()):
            counts[word] = counts.get(word, 0) + 1
    unused = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names = [] if node.decorator_list else [node.name]
            elif isinstance(node, ast.Assign):
                names = [target.id for target in node.targets if isinstance(target, ast.Name)]
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names = [node.target.id]
            else:
                continue
            unused += [
                f"{module_name(path)}.{name}" for name in names if not name.startswith("__") and counts[name] < 2
            ]
    assert unused == []


def test_no_private_name_crosses_a_module():
    """A _name is its module's own: one imported from another module (`from attn_cli.x import _name`, or
    `x._name` on an imported attn_cli module) means a concept cut in two; give it one home and a public name."""
    crossing = []
    every = {module_name(path) for path in PACKAGE.rglob("*.py")}
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text())
        modules = set()  # names this file binds to an attn_cli module
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("attn_cli"):
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        crossing.append(f"{module_name(path)} imports {node.module}.{alias.name}")
                    if f"{node.module}.{alias.name}" in every:
                        modules.add(alias.asname or alias.name)
            elif isinstance(node, ast.Import):
                modules.update(alias.asname or alias.name for alias in node.names if alias.name.startswith("attn_cli"))
        crossing += [
            f"{module_name(path)} reads {node.value.id}.{node.attr}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in modules
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ]
    assert crossing == []


# The import cycles not untied yet, each named by exactly the modules that import one another, so that this
# list can only shrink: a cycle listed here that is gone (or no longer these modules) fails the test below as
# surely as a new one does. Whoever unties one removes its entry.
KNOWN_CYCLES: set[frozenset[str]] = set()  # every cycle untied


def import_graph() -> dict[str, set[str]]:
    """Module → the attn_cli modules it imports, at module level or inside a function alike (a lazy import
    is still a cycle: it only moves the failure to the first call). `from attn_cli.x import name` is an
    edge to attn_cli.x, or to attn_cli.x.name where that is a module; the package itself is no node."""
    modules = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {module: set() for module in modules}
    for module, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                inner = [f"{node.module}.{alias.name}" for alias in node.names]
                named = [name for name in inner if name in modules]
                targets = named if len(named) == len(inner) else [node.module, *named]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                continue
            graph[module].update(target for target in targets if target in modules and target != module)
        graph[module].discard("attn_cli")
    return graph


def cycles_of(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """The groups of two or more modules that import one another (strongly connected components; Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: set[frozenset[str]] = set()

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for imported in graph[module]:
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            group = {stack.pop()}
            while module not in group:
                group.add(stack.pop())
            if len(group) > 1:
                found.add(frozenset(group))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_no_import_cycles():
    """No two attn_cli modules import each other, directly or around a loop: a cycle means a concept split
    across modules, or a shared piece that belongs in the lower one. Only KNOWN_CYCLES, exactly as listed."""
    cycles = cycles_of(import_graph())
    new = [sorted(cycle) for cycle in cycles - KNOWN_CYCLES]
    gone = [sorted(cycle) for cycle in KNOWN_CYCLES - cycles]
    assert new == [], f"modules that import each other: {new}"
    assert gone == [], f"no longer a cycle as KNOWN_CYCLES lists it (remove or correct the entry): {gone}"


def test_the_cycle_finder_finds_a_loop_and_only_a_loop():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set(), "f": {"g"}, "g": {"f"}}
    assert cycles_of(graph) == {frozenset("abc"), frozenset("fg")}
    assert cycles_of({"a": {"b"}, "b": set()}) == set()
