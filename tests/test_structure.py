"""The shape of the code, checked: no import cycles between modules (function-local imports
included), no module over 800 lines, no module importing another's private names, and outside the
format packages no code that names a particular output format (everything dispatches through the
format registry)."""

from __future__ import annotations

import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PKG = os.path.join(ROOT, "lovecraft_convert")
MAX_LINES = 800
BUILTIN_FORMATS = ("memmap", "hdf5", "parquet", "tfrecord")


def _modules() -> dict[str, str]:
    """Dotted module name -> path, for every module of the package."""
    out = {}
    for dirpath, _dirs, files in os.walk(PKG):
        for f in files:
            if not f.endswith(".py"):
                continue
            path = os.path.join(dirpath, f)
            rel = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
            out[rel.removesuffix(".__init__")] = path
    return out


MODULES = _modules()


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
    )


def _imports(name: str, path: str) -> list[tuple[str, list[str], int]]:
    """(module imported, names imported from it, line) for every import, function-local ones
    included, ``if TYPE_CHECKING:`` blocks excluded (they never run)."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    out = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for c in child.orelse:
                    visit(c)
                continue
            if isinstance(child, ast.Import):
                for a in child.names:
                    out.append((a.name, [], child.lineno))
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")
                    base = base[: len(base) - (child.level - 1)]
                    mod = ".".join(base + ([child.module] if child.module else []))
                else:
                    mod = child.module or ""
                out.append((mod, [a.name for a in child.names], child.lineno))
            visit(child)

    visit(tree)
    return out


def _graph() -> dict[str, set[str]]:
    """Module -> package modules it imports (``from pkg import mod`` counts as importing ``mod``)."""
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for name, path in MODULES.items():
        for mod, names, _line in _imports(name, path):
            if not mod.startswith("lovecraft_convert"):
                continue
            targets = [f"{mod}.{n}" for n in names if f"{mod}.{n}" in MODULES]
            if len(targets) < len(names) or not names:
                targets.append(mod)  # names that are attributes, not submodules
            for t in targets:
                if t in MODULES and t != name:
                    graph[name].add(t)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


def _parents(name: str) -> set[str]:
    parts = name.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts))}


def test_no_import_cycles():
    graph = _graph()
    # a package's __init__ is imported before any of its modules: an edge from a module to its
    # own package is not a cycle of ours unless the package imports the module back
    for name in graph:
        graph[name] -= {p for p in _parents(name) if p not in graph or name not in graph.get(p, set())}
    assert _cycles(graph) == []


def test_the_cycle_check_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_module_over_800_lines(name):
    with open(MODULES[name], encoding="utf-8") as f:
        assert sum(1 for _ in f) <= MAX_LINES


def test_no_module_imports_anothers_private_names():
    found = []
    for name, path in MODULES.items():
        for mod, names, line in _imports(name, path):
            if mod.startswith("lovecraft_convert") and mod != name:
                found += [f"{name}:{line} imports {mod}.{n}" for n in names if n.startswith("_") and n != "__version__"]
    assert found == []


def _string_constants(tree: ast.AST) -> list[tuple[str, int]]:
    """String literals of code (docstrings left out)."""
    docs = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = getattr(node, "body", [])
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docs.add(id(body[0].value))
    return [
        (n.value, n.lineno)
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs
    ]


def test_outside_the_format_packages_no_code_names_a_format():
    found = []
    for name, path in MODULES.items():
        if name.startswith("lovecraft_convert.formats."):
            continue
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        for value, line in _string_constants(tree):
            if value in BUILTIN_FORMATS:
                found.append(f"{name}:{line}: {value!r}")
    # the registry lists the built-in packages (and the default format) by name: that is its job;
    # the table of input kinds names the Parquet *input* kind, which shares its name with the format
    allowed = {"lovecraft_convert.formats", "lovecraft_convert.inputs.kinds"}
    assert [x for x in found if x.split(":")[0] not in allowed] == []
