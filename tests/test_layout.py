"""The package's layout holds: small rooms, no import circle, nothing reaching up a floor.

The floors, from the ground up (STYLE.md's map): the shared base modules; then git; where the source
comes from; the series; the project and the interface check; the checkout; what is built, ported and
deployed; the command line on top.  A module may import its own package and anything below its floor.
Imports inside functions count too: a lazy import is still a dependency.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "sgpatch"
MAX_LINES = 450

FLOORS: dict[str, int] = {
    **dict.fromkeys(
        ("__init__", "errors", "atomic", "results", "tomlpos", "pyast", "lock", "projectfiles", "requirements"), 0
    ),
    **dict.fromkeys(("config", "cache", "pins"), 1),
    "git": 2,
    "source": 3,
    "series": 4,
    **dict.fromkeys(("project", "interface"), 5),
    "checkout": 6,
    **dict.fromkeys(("wheel", "port", "deployed", "preflight", "workspace"), 7),
    **dict.fromkeys(("cli", "__main__"), 8),
}


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


MODULES = _modules()


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _imports(path: Path, *, top_level_only: bool) -> set[str]:
    """The sgpatch modules ``path`` imports (``from sgpatch.x import y`` counts ``sgpatch.x.y`` when that is a
    module); with ``top_level_only``, only those run when the module is imported (not in functions, not
    under ``if TYPE_CHECKING``)."""
    tree = ast.parse(path.read_text())
    nodes: list[ast.AST]
    if top_level_only:
        nodes = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
    else:
        nodes = [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("sgpatch"))
        elif node.module and node.module.startswith("sgpatch") and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in MODULES else node.module)
    return found


def test_the_floors_name_every_room() -> None:
    rooms = {_room(m) for m in MODULES}
    assert rooms <= set(FLOORS), f"rooms without a floor: {sorted(rooms - set(FLOORS))}"
    top = sorted(p.name for p in PACKAGE.iterdir() if p.suffix == ".py")
    assert len(top) <= 14, f"{len(top)} modules side by side at the top of sgpatch/: {top}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_is_over_the_size_of_a_room(module: str) -> None:
    lines = MODULES[module].read_text().count("\n")
    assert lines <= MAX_LINES, f"{module}: {lines} lines (split it: one concept in one room)"


def test_nothing_reaches_up_a_floor() -> None:
    up = []
    for module, path in MODULES.items():
        for target in _imports(path, top_level_only=False):
            if target in MODULES and FLOORS[_room(target)] > FLOORS[_room(module)]:
                up.append(f"{module} imports {target}")
    assert up == []


def test_no_import_circle() -> None:
    graph: dict[str, set[str]] = defaultdict(set)
    for module, path in MODULES.items():
        graph[module] = {t for t in _imports(path, top_level_only=True) if t in MODULES and t != module}
    state: dict[str, int] = {}
    circle: list[str] = []

    def visit(node: str, stack: list[str]) -> bool:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                circle.extend([*stack[stack.index(nxt) :], nxt] if nxt in stack else [node, nxt])
                return True
            if state.get(nxt) is None and visit(nxt, [*stack, nxt]):
                return True
        state[node] = 2
        return False

    for module in sorted(MODULES):
        if state.get(module) is None and visit(module, [module]):
            break
    assert circle == [], " -> ".join(circle)
