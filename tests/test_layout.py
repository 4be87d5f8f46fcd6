"""The package's layout holds: small rooms, no import circle, nothing reaching up a floor.

The floors, from the ground up (STYLE.md's map): the shared base modules; then git; where the source
comes from; the series; the project and the interface check; the checkout; what is built, ported and
deployed; the command line on top.  A module may import its own package and anything below its floor.
Imports inside functions and under ``if TYPE_CHECKING`` count too: a lazy import is still a dependency, and
a circle between two modules of one package is a circle (importing ``sgpatch.a.b`` imports ``sgpatch.a`` too).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "sgpatch"
MAX_LINES = 450
MAX_TOP_MODULES = 10  # __init__.py and __main__.py included: the rest lives in rooms

FLOORS: dict[str, int] = {
    **dict.fromkeys(("__init__", "errors", "atomic", "results", "pyast", "lock"), 0),
    **dict.fromkeys(("config", "cache"), 1),
    "git": 2,
    "source": 3,
    "series": 4,
    **dict.fromkeys(("project", "interface"), 5),
    **dict.fromkeys(("checkout", "verify"), 6),
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
    assert len(top) <= MAX_TOP_MODULES, f"{len(top)} modules side by side at the top of sgpatch/: {top}"


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


def _graph() -> dict[str, set[str]]:
    """Each module's sgpatch imports, wherever they are written, with the packages they import on the way."""
    graph: dict[str, set[str]] = defaultdict(set)
    for module, path in MODULES.items():
        for target in _imports(path, top_level_only=False):
            parts = target.split(".")
            for end in range(2, len(parts) + 1):
                step = ".".join(parts[:end])
                if step in MODULES and step != module and not module.startswith(step + "."):
                    graph[module].add(step)
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(MODULES):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, nexts = work[-1]
            for nxt in nexts:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        found.append(sorted(group))
    return found


def test_no_import_circle() -> None:
    """No two modules import each other, through any path, at the top, in a function or for type checking."""
    graph = _graph()
    circles = [" <-> ".join(c) for c in _circles(graph)]
    assert circles == [], "import circles (move the shared piece down):\n" + "\n".join(circles)


def test_the_circle_check_sees_lazy_and_typing_imports() -> None:
    """The check itself: an import in a function or under TYPE_CHECKING is an edge of the graph."""
    assert "sgpatch.deployed.inventory_raw" in _graph()["sgpatch.deployed.inventory_yaml"]
    fake = defaultdict(set, {m: set() for m in MODULES})
    first, second = sorted(MODULES)[1:3]
    fake[first].add(second)
    fake[second].add(first)
    assert _circles(fake) == [sorted([first, second])]
