"""attendout's one import style, checked and, where a rewrite can fix it, fixed in place.

    python experiments/import_style.py                 # list the violations in src/attendout (exit 1 if any)
    python experiments/import_style.py --fix           # rewrite the imports that can be, then list the rest
    python experiments/import_style.py --fix FILE ...  # only these files (paths, or under src/attendout)
    python experiments/import_style.py --fix --no-ruff # leave the rewritten lines unsorted, unformatted

The rules (``tests/test_layout.py`` checks them with :func:`violations`):

* **Home or front door.** Every name a module imports from another module of the package comes from one
  place, its *source*: the outermost package on the way to the module that defines it (its home) whose
  ``__init__`` exports it (``__all__`` or the lazy names of its ``__init__.pyi``) and that does not contain the
  importing module; else the home itself. So from outside a package a name comes through the
  package's ``__init__`` (``from ..run import finetune``), inside it from its home
  (``from .train import finetune``, never ``from . import finetune``), and a name a package does not
  export comes from its home. Which module defines a name is read with ``ast``, following re-exports
  and lazy stubs (``experiments/import_graph.py``).
* **Private names stay private.** No module imports another module's underscored name
  (``from .paths import _masked_sdpa``), nor reads one off a module it imported
  (``paths._masked_sdpa``); dunder names (``__version__``) are not private.

``--fix`` rewrites every statement that breaks the first rule into one statement per source (relative,
keeping ``as`` names, a trailing comment and the statement's place: module level, function,
``if TYPE_CHECKING:``), and an import of a private name made public (:data:`RENAMED`) into the public name
``as`` the old one; then it runs ``ruff check --select I --fix`` and ``ruff format`` on the files it
changed (with the repository's ``pyproject.toml``: run it inside the checkout). Other private names, and a
name whose home is the ``__init__`` of a package that contains the importer (it belongs in a module of its
own; a package's ``__main__`` may import its ``__init__``), it only reports: they need a decision.
Rerunnable: a second ``--fix`` finds nothing to rewrite.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path


def _load_graph():
    path = Path(__file__).resolve().parent / "import_graph.py"
    if "import_graph_tool" in sys.modules:
        return sys.modules["import_graph_tool"]
    spec = importlib.util.spec_from_file_location("import_graph_tool", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["import_graph_tool"] = module
    spec.loader.exec_module(module)
    return module


graph_tool = _load_graph()
PACKAGE = graph_tool.PACKAGE
DEFAULT_SRC = graph_tool.DEFAULT_SRC

#: Private names made public (issue 58), by (the module that had it, its old name): the new name. ``--fix``
#: rewrites ``from M import _old`` to ``from SOURCE import new as _old``, so the importing code is untouched.
RENAMED: dict[tuple[str, str], str] = {
    ("attendout.attention.paths", "_per_query_head"): "per_query_head",
    ("attendout.attention.paths", "_per_head"): "per_head",
    ("attendout.attention.paths", "_masked_sdpa"): "masked_sdpa",
    ("attendout.attention.paths", "_fills_in_place"): "fills_in_place",
    ("attendout.attention.paths", "_filled_softmax"): "filled_softmax",
    ("attendout.attention.paths", "_attention_probs"): "attention_probs",
    ("attendout.attention.families", "_distance"): "query_key_distance",
    ("attendout.attention.families", "_family_of"): "family_of",
    ("attendout.methods.addrop.layers", "_key_valid"): "attended_keys",
    ("attendout.methods.addrop.layers", "_stacks"): "stack_layers",
    ("attendout.tasks.readers", "_open_text"): "open_text",
    ("attendout.tasks.readers", "_check_exists"): "check_file",
    ("attendout.tasks.glue", "_import_datasets"): "import_datasets",
    ("attendout.tasks.generation", "_read_lines"): "read_lines",
    ("attendout.tasks.generation", "_format"): "text_format",
}


@dataclass(frozen=True)
class Violation:
    module: str
    path: Path
    line: int
    rule: str  # "style", "private", "init-home"
    message: str
    fixable: bool

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: [{self.rule}] {self.message}"


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def source_for(modules, importer: str, home: str, name: str) -> str:
    """Where ``importer`` should import ``name`` (defined in ``home``) from: see the module's docstring."""
    parts = home.split(".")
    for depth in range(1, len(parts)):
        package = ".".join(parts[:depth])
        info = modules.get(package)
        if info is None or not info.is_package or _inside(importer, package) or package == home:
            continue
        if name in graph_tool.exports(info) and graph_tool.home(modules, package, name) == home:
            return package
    return home


def relative(importer: str, is_package: bool, target: str) -> tuple[int, str]:
    """(level, module) of a relative ``from`` import of ``target`` in ``importer``."""
    base = importer.split(".") if is_package else importer.split(".")[:-1]
    parts = target.split(".")
    common = 0
    while common < min(len(base), len(parts)) and base[common] == parts[common]:
        common += 1
    return len(base) - common + 1, ".".join(parts[common:])


def _display(path: Path, src: Path) -> Path:
    try:
        return path.relative_to(src.parent.parent)
    except ValueError:
        return path


def _module_aliases(modules, module: str) -> dict[str, str]:
    """Local names bound to modules of the package (``from . import paths``): name -> module."""
    info = modules[module]
    found: dict[str, str] = {}
    for imp in info.imports:
        if isinstance(imp.node, ast.ImportFrom):
            for alias in imp.node.names:
                if f"{imp.source}.{alias.name}" in modules:
                    found[alias.asname or alias.name] = f"{imp.source}.{alias.name}"
        else:
            for alias in imp.node.names:
                if alias.name in modules and alias.asname:
                    found[alias.asname] = alias.name
    return found


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def violations(src: Path = DEFAULT_SRC, modules=None) -> list[Violation]:
    """Every break of the rules in the package under ``src``, in file order."""
    modules = modules if modules is not None else graph_tool.read_package(src)
    found: list[Violation] = []
    for module, info in modules.items():
        where = _display(info.path, src)
        for imp in info.imports:
            node = imp.node
            if isinstance(node, ast.Import):
                continue
            if not _inside(imp.source, PACKAGE):
                continue
            for alias in node.names:
                if f"{imp.source}.{alias.name}" in modules and modules[imp.source].is_package:
                    continue  # a submodule
                if _private(alias.name) and imp.source != module:
                    renamed = RENAMED.get((imp.source, alias.name))
                    found.append(
                        Violation(
                            module,
                            where,
                            node.lineno,
                            "private",
                            f"imports {imp.source}'s private name {alias.name}"
                            + (f" (now {renamed})" if renamed else ""),
                            renamed is not None,
                        )
                    )
                    continue
                home = graph_tool.home(modules, imp.source, alias.name)
                if home is None:
                    continue
                if (
                    home != module
                    and modules[home].is_package
                    and _inside(module, home)
                    and not module.endswith(".__main__")  # a package's __main__ runs its package
                ):
                    found.append(
                        Violation(
                            module,
                            where,
                            node.lineno,
                            "init-home",
                            f"imports {alias.name} from the __init__ of {home}, which contains it: "
                            "move the name into a module of its own",
                            False,
                        )
                    )
                    continue
                want = source_for(modules, module, home, alias.name)
                if want != imp.source:
                    found.append(
                        Violation(
                            module,
                            where,
                            node.lineno,
                            "style",
                            f"{alias.name}: from {want}, not from {imp.source}",
                            True,
                        )
                    )
        aliases = _module_aliases(modules, module)
        for node in ast.walk(info.tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
                and _private(node.attr)
            ):
                found.append(
                    Violation(
                        module,
                        where,
                        node.lineno,
                        "private",
                        f"reads {aliases[node.value.id]}'s private name {node.attr}",
                        False,
                    )
                )
    return sorted(found, key=lambda v: (str(v.path), v.line, v.message))


def _statement(level: int, target: str, names: list[ast.alias]) -> str:
    listed = ", ".join(f"{a.name} as {a.asname}" if a.asname else a.name for a in names)
    return f"from {'.' * level}{target} import {listed}"


def fix_file(modules, module: str) -> bool:
    """Rewrite the imports of one module that break the first rule; True if the file changed."""
    info = modules[module]
    lines = info.path.read_text().splitlines(keepends=True)
    edits: list[tuple[int, int, list[str]]] = []
    for imp in info.imports:
        node = imp.node
        if isinstance(node, ast.Import) or not _inside(imp.source, PACKAGE):
            continue
        groups: dict[str, list[ast.alias]] = {}
        changed = False
        for alias in node.names:
            renamed = RENAMED.get((imp.source, alias.name))
            if renamed is not None:
                alias = ast.alias(renamed, alias.asname or alias.name)
                changed = True
            want = imp.source
            is_submodule = f"{imp.source}.{alias.name}" in modules and modules[imp.source].is_package
            home = (
                None
                if is_submodule or _private(alias.name)
                else graph_tool.home(modules, imp.source, alias.name)
            )
            if home is not None and not (
                home != module and modules[home].is_package and _inside(module, home)
            ):
                want = source_for(modules, module, home, alias.name)
            changed |= want != imp.source
            groups.setdefault(want, []).append(alias)
        if not changed:
            continue
        first = lines[node.lineno - 1]
        indent = first[: len(first) - len(first.lstrip())]
        end_text = lines[node.end_lineno - 1]
        comment = end_text[end_text.index("#") :].rstrip("\n") if "#" in end_text else ""
        new = []
        for target, names in groups.items():
            level, name = relative(module, info.is_package, target)
            if target == imp.source and node.level == 0:
                text = _statement(0, target, names)
            else:
                text = _statement(level, name, names)
            new.append(f"{indent}{text}\n")
        if comment:
            new[0] = new[0].rstrip("\n") + f"  {comment}\n"
        edits.append((node.lineno - 1, node.end_lineno, new))
    if not edits:
        return False
    for start, end, new in sorted(edits, reverse=True):
        lines[start:end] = new
    info.path.write_text("".join(lines))
    return True


def _ruff(paths: list[Path]) -> None:
    ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    if not Path(ruff).exists() and shutil.which(ruff) is None:
        print("ruff not found: the rewritten imports are left unsorted", file=sys.stderr)
        return
    files = [str(p) for p in paths]
    subprocess.run([ruff, "check", "--select", "I", "--fix", "--quiet", *files], check=False)
    subprocess.run([ruff, "format", "--quiet", *files], check=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", help="only these files (default: every file of the package)")
    parser.add_argument("--src", default=str(DEFAULT_SRC), help="the package folder (src/attendout)")
    parser.add_argument("--fix", action="store_true", help="rewrite the imports that break the style")
    parser.add_argument("--no-ruff", action="store_true", help="do not sort and format the changed files")
    args = parser.parse_args(argv)
    src = Path(args.src).resolve()
    chosen = {Path(f).resolve() for f in args.files}
    if args.fix:
        changed: list[Path] = []
        for _ in range(3):  # a rewrite can reveal another (a name re-exported twice): until none is left
            modules = graph_tool.read_package(src)
            now = [
                info.path
                for module, info in modules.items()
                if (not chosen or info.path.resolve() in chosen) and fix_file(modules, module)
            ]
            changed += [p for p in now if p not in changed]
            if not now:
                break
        if changed and not args.no_ruff:
            _ruff(changed)
        print(f"rewrote the imports of {len(changed)} files")
        for path in changed:
            print(f"  {_display(path, src)}")
    left = [v for v in violations(src) if not chosen or (src.parent.parent / v.path).resolve() in chosen]
    for violation in left:
        print(violation)
    print(f"{len(left)} violations ({sum(v.fixable for v in left)} that --fix rewrites)")
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
