"""The shape of the code, checked: the layers (bottom up, below) with no import running up a layer
and no import loop, counting every import (at module level, inside functions and under ``if
TYPE_CHECKING:``: a loop an annotation closes is still one a reader must hold in their head); no
module over 800 lines, no module importing another's private names, and outside the format
packages no code that names a particular output format (everything dispatches through the format
registry)."""

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


def _imports(name: str, path: str) -> list[tuple[str, list[str], int]]:
    """(module imported, names imported from it, line) for every import of the module: at module
    level, inside functions and classes, and under ``if TYPE_CHECKING:``."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                out.append((a.name, [], node.lineno))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out.append((mod, [a.name for a in node.names], node.lineno))
    return out


def _graph(modules: dict[str, str] | None = None) -> dict[str, dict[str, int]]:
    """Module -> {package module it imports: line} (``from pkg import mod`` counts as importing
    ``mod``), for ``modules`` (name -> path; the package's by default)."""
    modules = MODULES if modules is None else modules
    graph: dict[str, dict[str, int]] = {m: {} for m in modules}
    for name, path in modules.items():
        for mod, names, line in _imports(name, path):
            if not mod.startswith("lovecraft_convert"):
                continue
            targets = [f"{mod}.{n}" for n in names if f"{mod}.{n}" in modules]
            if len(targets) < len(names) or not names:
                targets.append(mod)  # names that are attributes, not submodules
            for t in targets:
                if t in modules and t != name:
                    graph[name].setdefault(t, line)
    return graph


def _cycles(graph) -> list[list[str]]:
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


def _loops(modules: dict[str, str] | None = None) -> list[list[str]]:
    graph = {name: set(targets) for name, targets in _graph(modules).items()}
    # a package's __init__ is imported before any of its modules: an edge from a module to its
    # own package is not a loop of ours unless the package imports the module back
    for name in graph:
        graph[name] -= {p for p in _parents(name) if p not in graph or name not in graph.get(p, set())}
    return _cycles(graph)


def test_no_import_cycles():
    loops = _loops()
    assert not loops, "modules in one import loop (every import counted):\n" + "\n".join(", ".join(c) for c in loops)


def test_the_cycle_check_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]


# --------------------------------------------------------------------------------------------
# the layers
# --------------------------------------------------------------------------------------------

# Bottom up. A module may import modules of its own layer (without a loop) and of the layers below,
# never one above. A name stands for the module and everything under it; the longest name that
# matches a module places it. docs/design/layers.md says what each layer is and why it sits there.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("runtime", ("runtime", "errors", "version", "util")),
    ("core", ("schema", "selection", "stats", "arrowconv", "manifest", "result", "storage")),
    ("transforms", ("transforms",)),
    ("inputs", ("inputs",)),
    ("engine", ("engine",)),
    ("formats", ("formats",)),
    ("loaders", ("loaders",)),
    ("jobs", ("jobs",)),
    ("commands", ("verification", "inspection")),
    ("cli", ("cli", "__main__")),
    ("api", ("",)),  # the package's __init__: the public API, imported lazily
]


def layer_of(module: str) -> int:
    """The index in :data:`LAYERS` of the layer ``module`` is in (by its longest matching name)."""
    rel = module.removeprefix("lovecraft_convert").removeprefix(".")
    best, found = -1, None
    for i, (_layer, names) in enumerate(LAYERS):
        for n in names:
            if (rel == n or rel.startswith(n + ".") or n == "") and len(n) > best:
                best, found = len(n), i
    assert found is not None, module
    return found


def _upward(modules: dict[str, str] | None = None) -> list[str]:
    """Every import that runs up a layer: ``module:line imports target (layer -> layer)``."""
    out = []
    for name, targets in _graph(modules).items():
        for target, line in sorted(targets.items()):
            a, b = layer_of(name), layer_of(target)
            if b > a:
                out.append(f"{name}:{line} imports {target} ({LAYERS[a][0]} -> {LAYERS[b][0]})")
    return out


def test_every_module_has_a_layer():
    api = [m for m in MODULES if LAYERS[layer_of(m)][0] == "api"]
    assert api == ["lovecraft_convert"]  # only the package's __init__ falls through to the top


def test_no_import_runs_up_a_layer():
    up = _upward()
    assert not up, "imports that run up a layer (tests/test_structure.py: LAYERS):\n" + "\n".join(up)


def _with_extra_line(module: str, code: str, tmp_path) -> dict[str, str]:
    """The package's modules with ``code`` appended to a copy of ``module``."""
    src = tmp_path / (module.replace(".", "_") + ".py")
    with open(MODULES[module], encoding="utf-8") as f:
        src.write_text(f.read() + "\n" + code + "\n", encoding="utf-8")
    return {**MODULES, module: str(src)}


@pytest.mark.parametrize(
    "code",
    [
        "from ..loaders import open_dataset",
        "def f():\n    from ..loaders import open_dataset",
        "if TYPE_CHECKING:\n    from ..loaders.dataset import Dataset",
    ],
    ids=["module level", "function-local", "annotation only"],
)
def test_the_layer_check_finds_a_hand_made_upward_import(code, tmp_path):
    modules = _with_extra_line("lovecraft_convert.storage.uri", code, tmp_path)
    found = sorted(set(_upward(modules)) - set(_upward()))
    assert len(found) == 1 and found[0].startswith("lovecraft_convert.storage.uri:")
    assert found[0].endswith("(core -> loaders)")


def test_the_loop_check_counts_an_annotation_only_import(tmp_path):
    """schema.py is imported by stats.py; stats.py named by schema.py under TYPE_CHECKING makes a loop."""
    modules = _with_extra_line(
        "lovecraft_convert.schema", "if TYPE_CHECKING:\n    from .stats import BatchStats", tmp_path
    )
    assert ["lovecraft_convert.schema", "lovecraft_convert.stats"] in _loops(modules)


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
