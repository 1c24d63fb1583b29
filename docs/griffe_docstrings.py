"""A Griffe extension for the API reference (loaded by mkdocstrings, see ``mkdocs.yml``).

attendout's docstrings are written with a few reStructuredText idioms that Markdown does not know:
Sphinx roles (:class:`x`), ``>>>`` examples and ``::`` before a literal block. This rewrites them, at
build time only, into what mkdocstrings renders:

* a role becomes a link when its target is on an API reference page, and inline code otherwise; a role
  whose target does not exist in the package is a warning, so ``mkdocs build --strict`` fails on a
  docstring that names something that is gone;
* consecutive ``>>>`` / ``...`` lines become a fenced ``pycon`` block;
* a paragraph's closing ``::`` becomes ``:`` (the indented block after it is a code block already);
* an aligned block of ``name:   description`` lines (a field list) becomes a bulleted list;
* an attribute without a docstring takes its ``#:`` comment, and a dataclass field its
  ``field(metadata={"help": ...})`` text (what ``--help`` prints), and shows its default as its value;
* a package whose ``__init__.py`` takes its names from its ``__init__.pyi`` (``lazy_loader.attach_stub``,
  an ``__all__`` no static reader sees) exports the names the stub imports, in the stub's order.
"""

from __future__ import annotations

import ast
import builtins
import re
import textwrap
from pathlib import Path
from typing import Any

from griffe import Alias, Docstring, Extension, Module, Object, get_logger

logger = get_logger("attendout_docs")

#: The modules whose ``__all__`` the API reference renders (docs/reference/*.md).
DOCUMENTED_MODULES = ("attendout", "attendout.methods", "attendout.advise", "attendout.hf")

#: Packages a role may name without being checked (rendered as code).
EXTERNAL = {"torch", "transformers", "numpy", "optuna", "scipy", "accelerate", "matplotlib"}
ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|data|exc|obj|const):`(~?)([^`<>]+?)`")
PROMPT = re.compile(r"^(\s*)(>>>|\.\.\.)( |$)")
FIELD = re.compile(r"^(\s*)([A-Za-z_][\w.]*):(\s+)(\S.*)$")


def _target(obj: Object | Alias) -> Object | None:
    try:
        return obj.final_target if isinstance(obj, Alias) else obj
    except Exception:  # an alias to something outside the package (torch, transformers)
        return None


def _get(root: Module, path: str) -> Object | Alias | None:
    """The object at dotted ``path`` (absolute, starting with the package's name), or None."""
    parts = path.split(".")
    if parts[0] != root.name:
        return None
    current: Any = root
    for part in parts[1:]:
        try:  # an alias on the way (a name re-exported by a package) resolves to its target first
            current = (_target(current) or current).members[part]
        except Exception:  # no such member, or an alias to outside the package
            return None
    return current


def _walk(obj: Object):
    yield obj
    for member in list(obj.members.values()):
        if isinstance(member, Alias) or (member.is_module and not member.path.startswith(obj.path)):
            continue
        yield from _walk(member)


class RstDocstrings(Extension):
    """Rewrite reStructuredText idioms of attendout's docstrings as Markdown (see the module docstring)."""

    def on_package(self, *, pkg: Module, **kwargs: Any) -> None:
        if pkg.name != "attendout":
            return
        self.root = pkg
        for obj in _walk(pkg):
            if obj.is_module:
                self.export_stub_names(obj)
        self.public = self._public_paths(pkg)
        self.by_name: dict[str, list[str]] = {}
        for obj in _walk(pkg):
            self.by_name.setdefault(obj.name, []).append(obj.path)
        for obj in _walk(pkg):
            if obj.is_attribute and obj.docstring is None:
                self.document_attribute(obj)
            if obj.docstring is not None:
                obj.docstring.value = self.convert(obj, obj.docstring.value)

    # -- a package's names from its stub (``__init__.pyi``, read by ``lazy_loader.attach_stub``) ------------
    @staticmethod
    def export_stub_names(module: Module) -> None:
        """Set the ``__all__`` of a package whose ``__init__.py`` attaches its stub: the stub's names."""
        paths = module.filepath if isinstance(module.filepath, list) else [module.filepath]
        stub = next((Path(p).with_suffix(".pyi") for p in paths if Path(p).name == "__init__.py"), None)
        if module.exports is not None or stub is None or not stub.is_file():
            return
        names = [
            alias.asname or alias.name
            for node in ast.parse(stub.read_text()).body
            if isinstance(node, ast.ImportFrom) and node.level == 1
            for alias in node.names
        ]
        module.exports = names

    # -- attributes: ``#:`` comments and dataclass fields' help ------------------------------------------
    def document_attribute(self, attr: Object) -> None:
        text = None
        try:
            lines = attr.lines_collection[attr.filepath] if attr.lineno else None
        except KeyError:
            lines = None
        if lines:
            comment = []
            number = attr.lineno - 2  # the line above, 0-based
            while number >= 0 and lines[number].strip().startswith("#:"):
                comment.insert(0, lines[number].strip()[2:].strip())
                number -= 1
            text = " ".join(comment) or None
        if text is None and attr.value is not None and attr.parent is not None and attr.parent.is_class:
            text, default = self.field_help(attr, str(attr.value))
            if default is not None:
                attr.value = default
        if text:
            attr.docstring = Docstring(text, parent=attr)

    def field_help(self, attr: Object, value: str, depth: int = 0) -> tuple[str | None, str | None]:
        """(help, default source) of a ``field(...)`` call, or of the ``field`` a package function returns."""
        try:
            call = ast.parse(value, mode="eval").body
        except SyntaxError:
            return None, None
        if not isinstance(call, ast.Call):
            return None, None
        callee = ast.unparse(call.func)
        if callee in {"field", "dataclasses.field"}:
            text = default = None
            for keyword in call.keywords:
                if keyword.arg == "default":
                    default = ast.unparse(keyword.value)
                elif keyword.arg == "default_factory":
                    default = ast.unparse(keyword.value) + "()"
                elif keyword.arg == "metadata" and isinstance(keyword.value, ast.Dict):
                    for key, item in zip(keyword.value.keys, keyword.value.values, strict=True):
                        if isinstance(key, ast.Constant) and key.value == "help":
                            if isinstance(item, ast.Constant) and isinstance(item.value, str):
                                text = item.value
            return text, default
        function = self.resolve(attr, callee) if depth == 0 else None
        if function is not None and function.is_function and function.source:
            for node in ast.walk(ast.parse(textwrap.dedent(function.source))):
                if isinstance(node, ast.Call) and ast.unparse(node.func) in {"field", "dataclasses.field"}:
                    return self.field_help(attr, ast.unparse(node), depth + 1)
        return None, None

    # -- which objects have a heading (an anchor) in the API reference ---------------------------------
    def _public_paths(self, pkg: Module) -> dict[str, str]:
        """canonical path -> the path of its heading on the API pages (first page that renders it)."""
        public: dict[str, str] = {}
        for module_path in DOCUMENTED_MODULES:
            module = _get(pkg, module_path)
            module = _target(module) if module is not None else None
            if module is None:
                continue
            public.setdefault(module.path, module_path)
            for name in module.exports or ():
                name = str(name)
                if name.startswith("_"):
                    continue
                member = module.members.get(name)
                target = _target(member) if member is not None else None
                if target is None:
                    continue
                here = f"{module_path}.{name}"
                public.setdefault(target.path, here)
                if target.is_class:
                    for child_name, child in target.members.items():
                        child_target = _target(child)
                        if child_target is not None and not child_name.startswith("_"):
                            public.setdefault(child_target.path, f"{here}.{child_name}")
        return public

    # -- resolving a role's target ------------------------------------------------------------------------
    def resolve(self, context: Object, name: str) -> Object | None:
        module = context if context.is_module else context.module
        candidates: list[str] = []
        if name.startswith("."):
            # relative: this module, then its package (``.base`` in a package's __init__)
            candidates += [module.path + name, module.path.rsplit(".", 1)[0] + name]
            if module.is_init_module:
                candidates.insert(0, module.path + name)
        elif name.startswith(self.root.name + "."):
            candidates.append(name)
        else:
            head = name.split(".", 1)[0]
            scope = context if context.is_class or context.is_module else context.parent
            while scope is not None:  # enclosing class, module, its packages
                if head in scope.members:
                    candidates.append(f"{scope.path}.{name}")
                scope = scope.parent
            imported = module.imports.get(head)
            if imported:
                candidates.append(imported + name[len(head) :])
        for path in candidates:
            found = _get(self.root, path)
            target = _target(found) if found is not None else None
            if target is not None:
                return target
        # last resort: a unique object of that (dotted) name anywhere in the package
        last = name.rsplit(".", 1)[-1].lstrip(".")
        matches = [p for p in self.by_name.get(last, []) if p.endswith(name.lstrip("."))]
        if len(matches) == 1:
            found = _get(self.root, matches[0])
            return _target(found) if found is not None else None
        return None

    def role(self, context: Object, match: re.Match) -> str:
        short, name = match.group(1), match.group(2).strip()
        if name.endswith("()"):
            name = name[:-2]
        text = name.rsplit(".", 1)[-1] if short else name.lstrip(".")
        target = self.resolve(context, name)
        if target is None:
            if name.split(".")[0] in EXTERNAL or hasattr(builtins, name):
                return f"`{text}`"  # outside the package: code, not checked
            logger.warning(f"{context.path}: the docstring names {match.group(0)}, which does not exist")
            return f"`{text}`"
        public = self.public.get(target.path)
        return f"[`{text}`][{public}]" if public else f"`{text}`"

    @staticmethod
    def field_lists(lines: list[str]) -> list[str]:
        """Aligned ``name:   description`` blocks (two or more fields) as ``- `name`: description`` items."""
        out: list[str] = []
        i = 0
        while i < len(lines):
            items: list[list[str]] = []
            aligned = False  # one field's description padded to a column: a field list, not prose
            j = i
            while j < len(lines) and (field := FIELD.match(lines[j])):
                indent, name, gap, first = field.groups()
                aligned = aligned or len(gap) >= 2
                item = [f"{indent}- `{name}`: {first}"]
                j += 1
                while (
                    j < len(lines)
                    and lines[j].strip()
                    and len(lines[j]) - len(lines[j].lstrip()) > len(indent)
                ):
                    if FIELD.match(lines[j]):
                        break
                    item.append(f"{indent}  {lines[j].strip()}")
                    j += 1
                items.append(item)
            if len(items) >= 2 and aligned:
                if out and out[-1].strip():
                    out.append("")
                out += [line for item in items for line in item]
                i = j
            else:
                out.append(lines[i])
                i += 1
        return out

    # -- the rewrite ----------------------------------------------------------------------------------------
    def convert(self, context: Object, text: str) -> str:
        out: list[str] = []
        lines = self.field_lists(text.splitlines())
        i = 0
        while i < len(lines):
            prompt = PROMPT.match(lines[i])
            if prompt and prompt.group(2) == ">>>":
                indent = prompt.group(1)
                block = []
                while i < len(lines) and PROMPT.match(lines[i]):
                    block.append(lines[i][len(indent) :])
                    i += 1
                if out and out[-1].strip():
                    out.append("")
                out += [f"{indent}```pycon", *(indent + line for line in block), f"{indent}```"]
                if i < len(lines) and lines[i].strip():
                    out.append("")
                continue
            line = lines[i]
            if line.rstrip().endswith("::") and (i + 1 == len(lines) or not lines[i + 1].strip()):
                stripped = line.rstrip()[:-2].rstrip()
                line = stripped + ":" if stripped.strip() else ""
            out.append(ROLE.sub(lambda m: self.role(context, m), line))
            i += 1
        return "\n".join(out)
