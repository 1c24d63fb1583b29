"""The import graph of attendout, between its modules and between its rooms (packages), drawn as floors.

    python experiments/import_graph.py                    # this checkout's src/attendout
    python experiments/import_graph.py --src OTHER/src/attendout --lazy
    python experiments/import_graph.py --path attendout.cli.flags attendout.attention.masks

Read from the source with ``ast``; nothing is imported. ``tests/test_layout.py`` and
``experiments/import_style.py`` build on the same reading (:func:`read_package`, :func:`module_graph`).

**Modules.** Every ``import`` / ``from ... import`` of a module of ``src/attendout`` is an arrow to the
module that *defines* what it imports: ``from ..run import finetune`` is an arrow to ``attendout.run``
(its ``__init__`` runs) and to ``attendout.run.train``, where ``finetune`` lives, read from the
package's stub of lazy names (its ``__init__.pyi``, ``from .loop import finetune``, which
``lazy_loader.attach_stub`` reads) or followed through its re-exports. ``from . import paths`` is an arrow to the submodule alone. Imports under
``if TYPE_CHECKING:`` and inside functions are arrows too, of their own kinds (``type_checking``,
``deferred``): never run at import time, but a dependency all the same.

**Rooms and floors.** A room is a subpackage of ``attendout`` or a module at its root. The rooms' graph
collapses the modules' (with ``--lazy``, the imports inside functions and under ``TYPE_CHECKING`` count
too; by default only those that run when a module is imported). A room's floor is one above the highest
room it imports (floor 0 imports no other room). Rooms that import each other, directly or round a loop,
cannot be put on floors: they are printed as one loop, with the arrows that close it.

**Hops from ``--p`` to the mask.** :data:`P_TO_MASK` is the trace of the value of the command line's
``--p`` (``attendout finetune --method scores-dropout --p 0.1``) until the attention mask is drawn: the
functions that read it or make something of it, in the order they run (an object that holds it, carried
unopened from a caller to its callee, adds no step). Its *hops* are the steps from one module to another,
its *calls* those that are not the value handed back, its *files* the distinct modules; each step is marked
imported, imports the caller, handed back, or through an object (the hook calling a method it was given).
The trace is kept by hand and
checked against the source (every function must still be where it is named: ``tests/test_layout.py``).
``--path A B`` prints the shortest chain of imports from A to B.
"""

from __future__ import annotations

import argparse
import ast
from collections import defaultdict, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

PACKAGE = "attendout"
DEFAULT_SRC = Path(__file__).resolve().parents[1] / "src" / PACKAGE


class Step(NamedTuple):
    """One function of a trace: where it is, what it does with the value, whether the value came back to it."""

    module: str
    function: str
    what: str
    back: bool = False


#: The value of ``--p`` from the command line to the drawn mask (``attendout finetune --method scores-dropout
#: --p 0.1``), as the functions that hold it, in the order they run: (module, the function or method, what it
#: does with it, whether the value came back to it from the step before). Every function the value passes
#: through is listed, a value handed back included (``back``): a hop is any step to another module, a call a
#: hop that is not a return. :func:`check_trace` checks that each function still exists where it is named.
P_TO_MASK: tuple[Step, ...] = (
    Step("attendout.cli", "main", "attendout finetune ...: the finetune command's main"),
    Step("attendout.cli.finetune", "config_from_args", "the method's parser reads --p into method_options"),
    Step(
        "attendout.methods.registry", "get_method_config", "the config class of 'scores-dropout', made with p"
    ),
    Step(
        "attendout.methods.dropout.config", "ScoresDropoutConfig", "p checked (a probability): the one config"
    ),
    Step(
        "attendout.methods.config",
        "MethodConfig.for_task",
        "settled for the task (no option of it depends on one)",
    ),
    Step(
        "attendout.cli.finetune",
        "config_from_args",
        "train_config(values, method_made=the config)",
        back=True,
    ),
    Step(
        "attendout.cli.flags", "train_config", "TrainConfig(method_options={'p': 0.1, ...}, method_made=...)"
    ),
    Step(
        "attendout.config", "TrainConfig.__post_init__", "keeps the config made (method_config() returns it)"
    ),
    Step(
        "attendout.run.loop",
        "TrainingLoop.__init__",
        "prepare(model, inputs.method): the method on the model",
    ),
    Step(
        "attendout.methods.base",
        "prepare",
        "the strategy registered for the config (default TrainingStrategy)",
    ),
    Step("attendout.methods.base", "TrainingStrategy.attach", "apply(model, config)"),
    Step(
        "attendout.methods.base",
        "_attach",
        "the method's part, found by name (method_parts), made with the config",
    ),
    Step("attendout.methods.dropout.method", "scores_dropout", "ScoresDropout(p)"),
    Step("attendout.methods.base", "_attach", "controller.add(method)", back=True),
    Step("attendout.attention.controller", "Controller.add", "the method joins the model's controller"),
    Step("attendout.attention.hook", "edited_attention", "a training forward: what acts on the call"),
    Step("attendout.attention.call", "combine_edits", "asks each acting method for its edit"),
    Step(
        "attendout.methods.drops", "ScoresDropout.edit", "AttentionEdit(random_drops=RandomDrops(p))"
    ),
    Step("attendout.attention.call", "combine_edits", "CombinedEdits(random=[RandomDrops(p)])", back=True),
    Step(
        "attendout.attention.hook",
        "edited_attention",
        "the fused path (masked_sdpa) is given combined.drops(call)",
        back=True,
    ),
    Step("attendout.attention.call", "CombinedEdits.drops", "the drops of the call: RandomDrops.draw"),
    Step("attendout.attention.masks", "bernoulli_drop", "the mask: each score dropped with probability p"),
)


#: The same trace in the code issue 58 read (commit c8b604a: ``train.Trainer``, the config made three
#: times, the registry entered from both sides of ``attach``), by the same rules. Check it against that
#: code: ``git worktree add /tmp/c8b604a c8b604a && python experiments/import_graph.py --src
#: /tmp/c8b604a/src/attendout --trace c8b604a``.
P_TO_MASK_C8B604A: tuple[Step, ...] = (
    Step("attendout.cli", "main", "attendout finetune ...: the finetune command's main"),
    Step("attendout.cli.finetune", "config_from_args", "parser reads --p"),
    Step(
        "attendout.methods.registry",
        "settle_for_task",
        "settle_for_task makes config 1 to settle it for the task",
    ),
    Step("attendout.methods.registry", "get_method_config", "made with p"),
    Step("attendout.methods.dropout.config", "ScoresDropoutConfig", "p checked: config 1"),
    Step("attendout.methods.config", "MethodConfig.for_task", "settled for the task"),
    Step("attendout.methods.registry", "settle_for_task", "options written out", back=True),
    Step("attendout.cli.finetune", "config_from_args", "train_config(method_options=...)", back=True),
    Step("attendout.cli.flags", "train_config", "TrainConfig(method_options=...)"),
    Step(
        "attendout.config",
        "TrainConfig.method_config",
        "__post_init__ makes config 2 to check it, then drops it",
    ),
    Step("attendout.methods.registry", "get_method_config", "made with p"),
    Step("attendout.methods.dropout.config", "ScoresDropoutConfig", "p checked: config 2"),
    Step("attendout.train", "Trainer.__init__", "config.method_config()"),
    Step("attendout.config", "TrainConfig.method_config", "made again: config 3"),
    Step("attendout.methods.registry", "get_method_config", "made with p"),
    Step("attendout.methods.dropout.config", "ScoresDropoutConfig", "p checked: config 3, the one applied"),
    Step("attendout.train", "Trainer.__init__", "build_strategy(method_config), attach", back=True),
    Step("attendout.methods.registry", "build_strategy", "the strategy registered for the config"),
    Step("attendout.methods.base", "TrainingStrategy.attach", "apply(model, config)"),
    Step("attendout.methods.registry", "build_method", "the method's part registered for the config"),
    Step("attendout.methods.dropout.method", "scores_dropout", "ScoresDropout(p)"),
    Step("attendout.methods.base", "_attach", "controller.add", back=True),
    Step("attendout.attention.controller", "Controller.add", "the method joins the model's controller"),
    Step("attendout.attention.hook", "edited_attention", "a training forward: what acts on the call"),
    Step("attendout.attention.call", "combine_edits", "asks each acting method for its edit"),
    Step("attendout.methods.dropout.method", "ScoresDropout.edit", "RandomDrops(p)"),
    Step("attendout.attention.call", "combine_edits", "CombinedEdits(random=[RandomDrops(p)])", back=True),
    Step("attendout.attention.hook", "edited_attention", "_masked_sdpa(combined.drops(call))", back=True),
    Step("attendout.attention.call", "CombinedEdits.drops", "RandomDrops.draw"),
    Step("attendout.attention.masks", "bernoulli_drop", "the mask: each score dropped with probability p"),
)

TRACES = {"now": P_TO_MASK, "c8b604a": P_TO_MASK_C8B604A}


def module_name(path: Path, src: Path) -> str:
    parts = list(path.relative_to(src.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@dataclass
class Import:
    """One ``import`` statement: where it is, what it names (absolute), and when it runs."""

    node: ast.Import | ast.ImportFrom
    source: str  # the module of ``from X import ...``; "" for ``import X``
    deferred: bool  # inside a function: runs when called
    type_checking: bool  # under ``if TYPE_CHECKING:``: never runs


@dataclass
class Module:
    """What the graph needs of one module: its imports, the names it defines and, for a package, exports."""

    name: str
    path: Path
    is_package: bool
    tree: ast.Module
    imports: list[Import] = field(default_factory=list)
    defined: set[str] = field(default_factory=set)  # bound at module level other than by an import
    imported: dict[str, tuple[str, str]] = field(default_factory=dict)  # name -> (module, its name there)
    lazy: dict[str, str] = field(default_factory=dict)  # name -> absolute module (its __init__.pyi)
    all: list[str] | None = None  # __all__, when a literal list


def resolve(module: str, is_package: bool, level: int, target: str | None) -> str:
    """The absolute module of a (relative) import in ``module``."""
    if level == 0:
        return target or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def _is_type_checking(node: ast.If) -> bool:
    return "TYPE_CHECKING" in ast.unparse(node.test)


def _strings(node: ast.AST) -> list[str] | None:
    if isinstance(node, ast.List | ast.Tuple) and all(
        isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts
    ):
        return [e.value for e in node.elts]
    return None


def read_module(name: str, path: Path) -> Module:
    tree = ast.parse(path.read_text())
    module = Module(name, path, path.name == "__init__.py", tree)

    def visit(node: ast.AST, deferred: bool, type_checking: bool, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import | ast.ImportFrom):
                source = (
                    resolve(name, module.is_package, child.level, child.module)
                    if isinstance(child, ast.ImportFrom)
                    else ""
                )
                module.imports.append(Import(child, source, deferred, type_checking))
                if top and isinstance(child, ast.ImportFrom):
                    for alias in child.names:
                        module.imported.setdefault(alias.asname or alias.name, (source, alias.name))
                continue
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                if top and not isinstance(child, ast.Lambda):
                    module.defined.add(child.name)
                visit(child, True, type_checking, False)
                continue
            if isinstance(child, ast.ClassDef):
                if top:
                    module.defined.add(child.name)
                visit(child, deferred, type_checking, False)
                continue
            if top and isinstance(child, ast.Assign | ast.AnnAssign | ast.AugAssign):
                targets = child.targets if isinstance(child, ast.Assign) else [child.target]
                for target in targets:
                    for leaf in ast.walk(target):
                        if isinstance(leaf, ast.Name):
                            module.defined.add(leaf.id)
                    if isinstance(target, ast.Name) and target.id == "__all__" and child.value is not None:
                        module.all = _strings(child.value)
            is_tc = isinstance(child, ast.If) and _is_type_checking(child)
            visit(child, deferred, type_checking or is_tc, top and not is_tc)

    visit(tree, False, False, True)
    module.lazy = stub_names(name, path)
    # names imported only for type checkers are still followed, to find where a name lives
    for imp in module.imports:
        if imp.type_checking and not imp.deferred and isinstance(imp.node, ast.ImportFrom):
            for alias in imp.node.names:
                module.imported.setdefault(alias.asname or alias.name, (imp.source, alias.name))
    return module


def stub_names(name: str, path: Path) -> dict[str, str]:
    """A package's lazy names, read from the stub beside its ``__init__.py`` (``__init__.pyi``, what
    ``lazy_loader.attach_stub`` reads): name -> the absolute module its ``from .module import name`` names."""
    stub = path.with_suffix(".pyi")
    if path.name != "__init__.py" or not stub.is_file():
        return {}
    found: dict[str, str] = {}
    for node in ast.walk(ast.parse(stub.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            for alias in node.names:
                found[alias.asname or alias.name] = resolve(name, True, 1, node.module)
    return found


def read_package(src: Path = DEFAULT_SRC) -> dict[str, Module]:
    """Every module of the package under ``src`` (``.../src/attendout``), by dotted name."""
    return {
        module_name(path, src): read_module(module_name(path, src), path)
        for path in sorted(src.rglob("*.py"))
    }


def home(
    modules: dict[str, Module], module: str, name: str, seen: frozenset[str] = frozenset()
) -> str | None:
    """The module that defines ``name`` as ``module`` has it (following re-exports and lazy stubs), the
    submodule itself if ``name`` is one; None if it is not the package's (or not found)."""
    if module not in modules or module in seen:
        return None
    if f"{module}.{name}" in modules and modules[module].is_package:
        return f"{module}.{name}"
    info = modules[module]
    if name in info.defined:
        return module
    if name in info.imported:
        source, original = info.imported[name]
        return home(modules, source, original, seen | {module})
    if name in info.lazy:
        return home(modules, info.lazy[name], name, seen | {module})
    return None


def exports(info: Module) -> set[str]:
    """The names a package's ``__init__`` (or a module) offers: its ``__all__`` and its lazy names."""
    return set(info.all or ()) | set(info.lazy)


def targets(modules: dict[str, Module], module: str, imp: Import) -> set[str]:
    """The package's modules one import statement of ``module`` is an arrow to."""
    if isinstance(imp.node, ast.Import):
        return {alias.name for alias in imp.node.names if alias.name in modules}
    found: set[str] = set()
    for alias in imp.node.names:
        where = home(modules, imp.source, alias.name)
        if where is not None:
            found.add(where)
        if f"{imp.source}.{alias.name}" not in modules and imp.source in modules:
            found.add(imp.source)  # a name, not a submodule: the module itself runs
    return found


def module_graph(
    modules: dict[str, Module], deferred: bool = True, type_checking: bool = True
) -> dict[str, set[str]]:
    """Module -> the package's modules it imports: at import time only, or with the imports inside
    functions (``deferred``) and those under ``if TYPE_CHECKING:`` (``type_checking``) too."""
    graph: dict[str, set[str]] = {}
    for module, info in modules.items():
        edges: set[str] = set()
        for imp in info.imports:
            if (imp.deferred and not deferred) or (imp.type_checking and not type_checking):
                continue
            edges |= targets(modules, module, imp)
        graph[module] = edges - {module}
    return graph


def room_of(module: str) -> str:
    """``attendout.methods.addrop.config`` -> ``methods``; ``attendout.config`` -> ``config``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else PACKAGE


def graph(src: Path, lazy: bool) -> dict[str, set[str]]:
    """The rooms' graph: room -> the other rooms it imports (the root ``__init__`` is no room's target)."""
    edges: dict[str, set[str]] = defaultdict(set)
    for module, imported in module_graph(read_package(src), deferred=lazy, type_checking=lazy).items():
        room = room_of(module)
        edges[room]
        for target in imported:
            other = room_of(target)
            if other not in (room, PACKAGE):
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


def floors(edges: dict[str, set[str]], cycles: list[frozenset[str]]) -> dict[str, int]:
    """Each node's floor; the nodes of a loop share one floor (the loop counts as one node)."""
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


def shortest_path(edges: dict[str, set[str]], start: str, goal: str) -> list[str] | None:
    """The shortest chain of arrows from ``start`` to ``goal`` (breadth first), None if there is none."""
    before: dict[str, str | None] = {start: None}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        if node == goal:
            chain = [node]
            while before[chain[-1]] is not None:
                chain.append(before[chain[-1]])
            return chain[::-1]
        for other in sorted(edges.get(node, ())):
            if other not in before:
                before[other] = node
                queue.append(other)
    return None


def print_floors(edges: dict[str, set[str]], what: str) -> None:
    cycles = loops(edges)
    level = floors(edges, cycles)
    for number in sorted(set(level.values()), reverse=True):
        print(f"floor {number}")
        for room in sorted(r for r in level if level[r] == number):
            print(f"  {room:12s} -> {', '.join(sorted(edges[room])) or '-'}")
    print(
        f"{len(edges)} {what}, {sum(len(v) for v in edges.values())} arrows, {len(set(level.values()))} floors"
    )
    if not cycles:
        print("no loop: no arrow goes up")
    for cycle in cycles:
        inside = sorted((a, b) for a in cycle for b in edges[a] if b in cycle)
        print(f"loop {' <-> '.join(sorted(cycle))}: arrows {', '.join(f'{a} -> {b}' for a, b in inside)}")


def defines(info: Module, qualname: str) -> bool:
    """Whether a module defines ``qualname`` (``f`` or ``Class.method``) at its top level."""
    scope: list[ast.stmt] = info.tree.body
    for part in qualname.split("."):
        found = [n for n in scope if isinstance(n, ast.FunctionDef | ast.ClassDef) and n.name == part]
        if not found:
            return False
        scope = found[0].body
    return True


def check_trace(modules: dict[str, Module], trace=P_TO_MASK) -> list[str]:
    """What no longer holds in a trace: a module or function that is not where it is named."""
    return [
        f"{module}.{function}"
        for module, function, *_ in trace
        if module not in modules or not defines(modules[module], function)
    ]


def hops(trace=P_TO_MASK) -> tuple[int, int, int]:
    """(hops, calls, files) of a trace: the steps from one module to another, those of them that are not a
    value handed back, and the distinct modules."""
    moves = [b for a, b in zip(trace, trace[1:], strict=False) if a.module != b.module]
    return len(moves), sum(1 for b in moves if not b.back), len({step.module for step in trace})


def print_chain(modules: dict[str, Module], edges: dict[str, set[str]], trace=P_TO_MASK) -> None:
    count, calls, files = hops(trace)
    print(
        f"hops from --p to the mask: {count} hops ({calls} calls, {count - calls} values handed back) across {files} files"
    )
    for index, (module, function, what, back) in enumerate(trace):
        link = ""
        if index:
            before = trace[index - 1].module
            if before == module:
                link = "(same module)"
            elif back:
                link = "(handed back)"
            elif module in edges.get(before, ()):
                link = "(imported)"
            elif before in edges.get(module, ()):
                link = "(imports the caller)"
            else:
                link = "(handed back, or through an object)"
        print(f"  {index:2d}. {module}.{function} {link}: {what}")
    broken = check_trace(modules, trace)
    if broken:
        print(f"  NOT FOUND (update P_TO_MASK): {', '.join(broken)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", default=str(DEFAULT_SRC))
    parser.add_argument(
        "--lazy", action="store_true", help="count imports inside functions and TYPE_CHECKING too"
    )
    parser.add_argument(
        "--path", nargs=2, metavar=("FROM", "TO"), help="the shortest import chain FROM -> TO"
    )
    parser.add_argument(
        "--trace", choices=sorted(TRACES), default="now", help="which trace of --p to follow (default: now)"
    )
    args = parser.parse_args()
    src = Path(args.src)
    modules = read_package(src)
    every = module_graph(modules)
    if args.path:
        chain = shortest_path(every, *args.path)
        print(
            " -> ".join(chain) if chain else "no chain of imports",
            f"({len(chain) - 1} hops)" if chain else "",
        )
        return
    rooms = graph(src, args.lazy)
    packages = sorted(m for m, info in modules.items() if info.is_package)
    top = [m for m in modules if m.count(".") == 1 and not modules[m].is_package]
    print(
        f"{len(modules)} modules, {len(packages)} packages, {len(top)} modules at the root: {', '.join(top)}"
    )
    print_floors(rooms, "rooms")
    module_loops = loops(every)
    print(
        f"module graph, every import: {sum(len(v) for v in every.values())} arrows, {len(module_loops)} circles"
    )
    for cycle in module_loops:
        print(f"  circle: {', '.join(sorted(cycle))}")
    print_chain(modules, every, TRACES[args.trace])
    chain = shortest_path(every, "attendout.cli", P_TO_MASK[-1][0])
    if chain:
        print(f"shortest import chain from {chain[0]} to {chain[-1]}: {len(chain) - 1} hops")


if __name__ == "__main__":
    main()
