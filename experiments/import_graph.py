"""The import graph of attendout between its rooms (subpackages and top-level modules), drawn as floors.

    python experiments/import_graph.py                    # this checkout's src/attendout
    python experiments/import_graph.py --src OTHER/src/attendout --lazy

Every ``import`` / ``from ... import`` of a module of ``src/attendout`` that names another room is an
arrow; the imports at module level by default, with ``--lazy`` those inside functions too (deferred to
run time, but still a dependency). A room's floor is one above the highest room it imports (floor 0
imports no other room). Rooms that import each other, directly or round a loop, cannot be put on floors:
they are printed as one loop, with the arrows that close it ("arrows that go up"). Prints the floors,
top first, each room with the rooms it imports, then the loops.
"""

from __future__ import annotations

import argparse
import ast
from collections import defaultdict
from pathlib import Path


def room_of(module: str) -> str:
    """``attendout.methods.addrop.config`` -> ``methods``; ``attendout.run.loop`` -> ``loop``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "attendout"


def module_name(path: Path, src: Path) -> str:
    relative = path.relative_to(src.parent).with_suffix("")
    parts = list(relative.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(path: Path, module: str, lazy: bool) -> set[str]:
    tree = ast.parse(path.read_text())
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    nodes = ast.walk(tree) if lazy else iter(tree.body)
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("attendout"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("attendout"):
                # "from . import x" names submodules: count them as the room of the package
                found.add(target)
    return found


def graph(src: Path, lazy: bool) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = defaultdict(set)
    for path in sorted(src.rglob("*.py")):
        module = module_name(path, src)
        room = room_of(module)
        edges[room]
        for target in imported_modules(path, module, lazy):
            other = room_of(target)
            if other not in (room, "attendout"):
                edges[room].add(other)
    return dict(edges)


def loops(edges: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm); nodes without an
    entry of their own are leaves. ``tests/test_layout.py`` finds the package's import circles with it."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(edges.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def floors(edges: dict[str, set[str]], cycles: list[set[str]]) -> dict[str, int]:
    """Each room's floor; the rooms of a loop share one floor (the loop counts as one room)."""
    group = {room: frozenset(c) for c in cycles for room in c}
    floor: dict[frozenset[str], int] = {}

    def of(room: str) -> int:
        key = group.get(room, frozenset([room]))
        if key not in floor:
            floor[key] = 0  # a guard while the loop's own floor is worked out
            below = [of(o) for r in key for o in edges.get(r, ()) if o not in key]
            floor[key] = 1 + max(below) if below else 0
        return floor[key]

    return {room: of(room) for room in edges}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", default=str(Path(__file__).resolve().parents[1] / "src" / "attendout"))
    parser.add_argument("--lazy", action="store_true", help="count imports inside functions too")
    args = parser.parse_args()
    edges = graph(Path(args.src), args.lazy)
    cycles = loops(edges)
    level = floors(edges, cycles)
    for number in sorted(set(level.values()), reverse=True):
        print(f"floor {number}")
        for room in sorted(r for r in level if level[r] == number):
            print(f"  {room:12s} -> {', '.join(sorted(edges[room])) or '-'}")
    print(f"{len(edges)} rooms, {sum(len(v) for v in edges.values())} arrows")
    if not cycles:
        print("no loop: no arrow goes up")
    for cycle in cycles:
        inside = sorted((a, b) for a in cycle for b in edges[a] if b in cycle)
        print(f"loop {' <-> '.join(sorted(cycle))}: arrows {', '.join(f'{a} -> {b}' for a, b in inside)}")


if __name__ == "__main__":
    main()
