"""The package's layout (issues 40 and 58): no import circle, one import style, private names private, a
docstring per module, a small root. Read from the source with ``ast``; nothing is imported.

The import graph and the style are the scripts' (``experiments/import_graph.py``,
``experiments/import_style.py``): an import of a name through a package's ``__init__`` is an arrow to
the module that defines it, read from the package's ``__init__.pyi`` stub and re-exports, so that a lazy
``__init__`` hides no circle. ``python experiments/import_style.py --fix`` rewrites the imports that
break the style.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import re
import sys
from pathlib import Path

PACKAGE = "attendout"
SRC = Path(__file__).resolve().parent.parent / "src"
ROOT = SRC / PACKAGE
EXPERIMENTS = SRC.parent / "experiments"

#: A backstop: a module says one idea (its docstring's first line), and one idea fits in this many lines.
MAX_LINES = 800
#: The package's root holds its packages and at most this many modules besides ``__init__``.
MAX_ROOT_MODULES = 8

#: Import circles allowed (none since issue 58 undid the last, which closed through types imported for
#: annotations only). A new circle fails; one undone fails until it is taken off here.
KNOWN_CIRCLES: set[frozenset[str]] = set()


def _load(name: str):
    """A script of ``experiments/`` loaded as a module (once: the style script loads the graph's too)."""
    key = f"{name}_tool"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, EXPERIMENTS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
    return sys.modules[key]


graph_tool = _load("import_graph")
style_tool = _load("import_style")


@functools.cache
def package_modules() -> dict:
    """The package's modules as the import graph reads them (read once, by the first test that asks: not
    at collection, where every pytest-xdist worker would pay for it)."""
    return graph_tool.read_package(ROOT)


circles = graph_tool.loops


def describe(circle: frozenset[str], graph: dict[str, set[str]]) -> str:
    return "; ".join(f"{m} -> {', '.join(sorted(graph[m] & circle))}" for m in sorted(circle))


def test_the_checks_see_the_package():
    graph = graph_tool.module_graph(package_modules())
    assert {"attendout", "attendout.run.loop", "attendout.attention.hook"} <= graph.keys()
    assert "attendout.attention.paths" in graph["attendout.attention.hook"]
    # a name imported through a lazy __init__ is an arrow to the module that defines it
    assert graph_tool.home(package_modules(), "attendout.run", "finetune") == "attendout.run.loop"
    assert graph_tool.home(package_modules(), "attendout", "AttentionCall") == "attendout.attention.call"
    assert graph_tool.home(package_modules(), "attendout.methods", "apply") == "attendout.methods.base"
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [frozenset("abc")]


def test_the_floors_hold():
    """The import-linter contracts of pyproject.toml hold (``lint-imports``, which .ci/run runs too): the
    floors from the command line down to the ground, no method importing another, no circle between the
    modules of one package. Imports inside functions count; those under ``if TYPE_CHECKING:`` do not."""
    import os
    import subprocess

    env = {**os.environ, "PYTHONPATH": str(SRC)}  # this checkout's code, whatever the venv points at
    done = subprocess.run(
        [Path(sys.executable).with_name("lint-imports"), "--no-cache"],
        cwd=SRC.parent, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert (
        "0 broken" in done.stdout and "floors, from the command line down to the ground KEPT" in done.stdout
    )


def test_the_floors_name_every_top_level_package_and_module():
    """The layers contract names every room of the package: a new one has to be given its floor."""
    import tomllib

    config = tomllib.loads((SRC.parent / "pyproject.toml").read_text())["tool"]["importlinter"]
    (layers,) = [c for c in config["contracts"] if c["type"] == "layers"]
    named = {name.strip() for floor in layers["layers"] for name in floor.split("|")}
    rooms = {p.stem for p in ROOT.glob("*.py") if p.name != "__init__.py"}
    rooms |= {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file()}
    assert named == rooms


def _violations(*rules: str) -> list[str]:
    return [str(v) for v in style_tool.violations(ROOT, package_modules()) if v.rule in rules]


def test_no_module_imports_a_private_name_of_another():
    """``from .paths import _masked_sdpa`` and ``paths._masked_sdpa`` reach into another module: what a
    sibling needs is public (named without the underscore, documented)."""
    found = _violations("private")
    assert not found, "\n".join(found)


def test_one_import_style():
    """A name comes from its package's ``__init__`` from outside the package (when the ``__init__``
    exports it), from its home module inside (never from its own package's ``__init__``). To fix:
    ``python experiments/import_style.py --fix``."""
    found = _violations("style", "init-home")
    assert not found, (
        f"{len(found)} imports break the style (experiments/import_style.py --fix):\n" + "\n".join(found)
    )


def test_the_style_fixer_rewrites_both_ways(tmp_path):
    """From outside a package, through its ``__init__`` (lazy or not); inside it, from the home module;
    a second run finds nothing."""
    package = tmp_path / PACKAGE
    (package / "run").mkdir(parents=True)
    (package / "__init__.py").write_text('"""Root."""\n')
    (package / "run" / "__init__.py").write_text(
        '"""Run."""\n\nimport lazy_loader\n\n'
        "__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)\n"
    )
    (package / "run" / "__init__.pyi").write_text("from .train import finetune\n")
    (package / "run" / "train.py").write_text('"""Train."""\n\n\ndef finetune():\n    pass\n')
    (package / "run" / "helper.py").write_text('"""Help."""\n\nfrom . import finetune\n')
    (package / "cli.py").write_text(
        '"""Cli."""\n\nfrom .run.train import finetune as go  # the loop\n\n\ndef main():\n'
        "    from .run.train import finetune\n\n    return finetune, go\n"
    )
    assert style_tool.main(["--fix", "--no-ruff", "--src", str(package)]) == 0
    assert "from .run import finetune as go  # the loop\n" in (package / "cli.py").read_text()
    assert "    from .run import finetune\n" in (package / "cli.py").read_text()
    assert "from .train import finetune\n" in (package / "run" / "helper.py").read_text()
    assert not style_tool.violations(package)


def test_the_attention_modules_import_only_those_above_them():
    """attention/__init__'s docstring lists its modules in order, "each imports only those above it"."""
    doc = ast.get_docstring(package_modules()["attendout.attention"].tree)
    order = list(dict.fromkeys(re.findall(r":mod:`~?(attendout\.attention\.\w+)`", doc)))
    inside = {m for m in package_modules() if m.startswith("attendout.attention.")}
    assert set(order) == inside, f"listed: {order}; modules: {sorted(inside)}"
    graph = graph_tool.module_graph(package_modules())
    for index, module in enumerate(order):
        below = graph[module] & inside - set(order[:index])
        assert not below, f"{module} imports {sorted(below)}, listed after it"


def test_the_hook_imports_no_family_route():
    """DeBERTa's route lives in attention/ but registers itself: the hook's modules never import it, and
    it imports only the hook's modules and the loop contract."""
    graph = graph_tool.module_graph(package_modules())
    route = "attendout.attention.deberta"
    attention = {m for m in graph if m == "attendout.attention" or m.startswith("attendout.attention.")}
    for module in attention - {route}:
        assert route not in graph[module], module
    assert {t for t in graph[route] if t.startswith("attendout.")} <= attention | {"attendout.contract"}


def test_every_module_says_its_one_idea():
    """A docstring whose first line starts the module's one idea (a phrase, not a blank or a word), and
    a backstop on length: a module past MAX_LINES holds more than one idea."""
    missing, long = [], {}
    for info in package_modules().values():
        doc = ast.get_docstring(info.tree)
        first = doc.splitlines()[0].strip() if doc else ""
        if len(first.split()) < 3:
            missing.append(f"{info.path.relative_to(SRC)}: {first!r}")
        lines = len(info.path.read_text().splitlines())
        if lines > MAX_LINES:
            long[info.path.relative_to(ROOT).as_posix()] = lines
    assert not missing, "no docstring, or a first line that says nothing:\n" + "\n".join(missing)
    assert not long, f"over {MAX_LINES} lines: split along the module's own lines: {long}"


def test_only_the_loop_takes_the_loop():
    """The loop owns its state (issue 71): no function outside run/loop.py takes the training loop itself
    (a parameter ``loop`` untyped, typed ``Any`` or ``TrainingLoop``) to read or set its attributes; a
    method gets the :class:`~attendout.contract.LoopContext`, a record gets the values it records."""
    taking = []
    for info in package_modules().values():
        if info.path == ROOT / "run" / "loop.py":
            continue
        for node in ast.walk(info.tree):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for arg in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]:
                kind = "" if arg.annotation is None else ast.unparse(arg.annotation).strip("'\"")
                if arg.arg == "loop" and kind in ("", "Any", "TrainingLoop"):
                    taking.append(
                        f"{info.path.relative_to(SRC)}:{node.lineno} {node.name}(loop: {kind or '?'})"
                    )
    assert not taking, "\n".join(taking)


def test_the_root_holds_packages_and_a_few_modules():
    modules = sorted(p.name for p in ROOT.glob("*.py") if p.name != "__init__.py")
    assert len(modules) <= MAX_ROOT_MODULES, f"{len(modules)} modules at the root: {modules}"


def test_no_module_imports_the_package_init():
    reaching = []
    for module, info in package_modules().items():
        if module == PACKAGE:
            continue
        for imp in info.imports:
            if isinstance(imp.node, ast.ImportFrom):
                hit = imp.source == PACKAGE
            else:
                hit = any(alias.name == PACKAGE for alias in imp.node.names)
            if hit:
                reaching.append(f"{info.path.relative_to(SRC)}:{imp.node.lineno}: {ast.unparse(imp.node)}")
    assert not reaching, "\n".join(reaching)


def test_the_trace_from_p_to_the_mask_is_where_it_says():
    """experiments/import_graph.py counts the hops of ``--p`` from a trace kept by hand: each function
    of it must still be where the trace names it, and the trace no longer than this layout made it (24 hops
    before the method's config was made once and the loop used ``prepare``; 19 after)."""
    assert not graph_tool.check_trace(package_modules())
    count, calls, files = graph_tool.hops()
    assert calls < count and 0 < files <= len(graph_tool.P_TO_MASK)
    assert count <= 19, (
        f"--p takes {count} hops to the mask; update the trace's count in docs/guides/development.md"
    )


def test_moved_public_paths_still_import_with_a_deprecation_warning():
    # attendout.train (finetune from Python) and attendout.experiments (the bench API in its docstring) moved
    # in issue 58; each old path re-exports the new names for one release and says where they went.
    import importlib
    import sys
    import warnings

    from attendout.bench import load_experiment
    from attendout.run import TrainingLoop, finetune

    for old, names in {
        "attendout.train": {"finetune": finetune, "Trainer": TrainingLoop},
        "attendout.experiments": {"load_experiment": load_experiment},
    }.items():
        sys.modules.pop(old, None)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            module = importlib.import_module(old)
        assert any(
            issubclass(w.category, DeprecationWarning) and "2027-03-01" in str(w.message) for w in caught
        )
        for name, value in names.items():
            assert getattr(module, name) is value, (old, name)


def _hand_kept_names(info) -> list[str]:
    """What in a package ``__init__`` lists its names by hand: a literal ``__all__``, an ``if TYPE_CHECKING:``
    block, a table of names to modules (``{"finetune": ".loop"}``, ``dict.fromkeys((...), ".loop")``)."""
    found = ["a literal __all__"] if info.all is not None else []
    for node in ast.walk(info.tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            found.append(f"line {node.lineno}: an if TYPE_CHECKING: block")
        modules = (
            node.values
            if isinstance(node, ast.Dict)
            else node.args[1:]
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "dict.fromkeys"
            else []
        )
        if any(isinstance(v, ast.Constant) and str(v.value).startswith(".") for v in modules):
            found.append(f"line {node.lineno}: a table of names to modules")
    return found


def test_a_package_writes_its_names_once_in_its_stub():
    """Issue 71: a package's public names are written once, in its ``__init__.pyi`` (``from .loop import
    finetune``); its ``__init__.py`` exports them with ``lazy_loader.attach_stub`` and keeps no list or
    table of them. Every name of every stub resolves, and ``__all__`` is the stub's names."""
    import importlib
    import warnings

    hand_kept, unattached = [], []
    for info in package_modules().values():
        if not info.is_package:
            continue
        hand_kept += [f"{info.path.relative_to(SRC)}: {what}" for what in _hand_kept_names(info)]
        attached = "lazy_loader.attach_stub(__name__, __file__)" in info.path.read_text()
        if attached != info.path.with_suffix(".pyi").is_file():
            unattached.append(f"{info.path.relative_to(SRC)}: a stub without attach_stub, or the other way")
    assert not hand_kept, "write the names once, in the package's __init__.pyi:\n" + "\n".join(hand_kept)
    assert not unattached, "\n".join(unattached)
    stubbed = {module: info for module, info in package_modules().items() if info.lazy}
    assert {"attendout", "attendout.methods", "attendout.run", "attendout.tasks"} <= stubbed.keys()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for module, info in stubbed.items():
            package = importlib.import_module(module)
            assert sorted(package.__all__) == sorted(info.lazy), module
            for name in package.__all__:
                assert getattr(package, name) is not None or name in package.__dict__, (module, name)
