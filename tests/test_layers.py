"""The house's import rules, read from the source (AST), not from what happens to be imported.

- Layers: ``replay`` <- ``collector`` <- ``learner`` <- ``services``; a module imports only its
  own package and those to its left, at module level or inside a function alike.
- No circles between rooms: inside a package, the rooms (its sub-packages and top-level
  modules) import each other without a cycle at run time, so each room can be read on its own.
  Imports under ``if TYPE_CHECKING:`` (annotations only, e.g. the typed views of
  ``services.driver.views`` that other rooms' parameters are annotated with) do not count here;
  they still count for the layers.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import ROOT

LAYERS = ("replay", "collector", "learner", "services")


def modules(package: str) -> list[Path]:
    """The package's source files (generated protobuf modules aside)."""
    return sorted(p for p in (ROOT / package).rglob("*.py") if "_pb2" not in p.name)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def type_checking_nodes(tree: ast.AST) -> set[int]:
    """Ids of the nodes inside ``if TYPE_CHECKING:`` blocks."""
    inside = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING"):
            inside |= {id(child) for stmt in node.body for child in ast.walk(stmt)}
    return inside


def imports(path: Path, *, runtime_only: bool = False) -> list[tuple[int, str]]:
    """``(line, dotted name)`` of every absolute import in the file, nested ones included.

    With ``runtime_only``, imports under ``if TYPE_CHECKING:`` are left out.
    """
    found = []
    tree = ast.parse(path.read_text(), filename=str(path))
    skip = type_checking_nodes(tree) if runtime_only else set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            assert node.level == 0, f"{path}:{node.lineno}: relative import"
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


@pytest.mark.parametrize("package", LAYERS)
def test_no_module_imports_a_higher_layer(package):
    allowed = set(LAYERS[: LAYERS.index(package) + 1])
    upward = [
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for path in modules(package)
        for line, name in imports(path)
        if name.split(".")[0] in LAYERS and name.split(".")[0] not in allowed
    ]
    assert not upward, "imports that run up the layers:\n" + "\n".join(upward)


def room_of(dotted: str, package: str) -> str | None:
    """The room (``services.driver``, ``replay.wire``, ``replay.table``) a dotted name is in."""
    parts = dotted.split(".")
    if parts[0] != package or len(parts) < 2:
        return None
    return ".".join(parts[:2])


def is_room(dotted: str) -> bool:
    """Whether ``dotted`` is a sub-package or module (not a name a package re-exports)."""
    path = ROOT / dotted.replace(".", "/")
    return path.is_dir() or path.with_suffix(".py").exists()


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a path of nodes, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


@pytest.mark.parametrize("package", LAYERS)
def test_rooms_import_each_other_without_a_circle(package):
    graph: dict[str, set[str]] = {}
    for path in modules(package):
        source = room_of(module_name(path), package)
        if source is None:  # the package's own __init__
            continue
        for _, name in imports(path, runtime_only=True):
            target = room_of(name, package)
            if target is not None and target != source and is_room(target):
                graph.setdefault(source, set()).add(target)
    cycle = find_cycle(graph)
    assert cycle is None, "rooms import each other in a circle: " + " -> ".join(cycle)


def test_the_detector_finds_a_circle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}}) is None
