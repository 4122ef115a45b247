"""Imports point downward only, and no two modules import each other (DESIGN.md, "Layout").

Every module under ``src/ragassay`` is parsed with ``ast``; every import counts wherever it stands — at
module level, inside a function (a lazy import still couples the two modules), under ``TYPE_CHECKING`` —
in both spellings (``import a.b``, ``from a import b``), relative ones resolved against the importing
module's package. ``from pkg import name`` is an import of the submodule ``pkg.name`` when there is one,
else of ``pkg`` itself. Modules named by string count too: ``importlib.import_module("ragassay.x")`` (an
f-string naming a module by its prefix, ``f"ragassay.cli.{name}"``, counts as an import of every module under
that prefix) and ``"ragassay.x:attr"`` entry-point strings (the ``analyze`` kinds table). Not counted: the
PEP 562 ``lazy_exports`` maps of the ``__init__`` files, which name submodules of their own package (a
package re-exporting its own modules on first use is no coupling), and the root ``ragassay/__init__.py``,
which names ``api`` so: it holds ``__version__`` and imports only ``_lazy``, so it counts as a base helper.

A module's layer is its top-level package's (or, for a top-level module, its own name's). ``store`` is
not in DESIGN.md's list: it imports only base helpers and ``judges`` keeps its call cache there, so it
sits beside ``stats`` and ``metrics``. ``__main__`` and ``pytest_plugin`` are entry points, beside ``cli``.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict, deque
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "ragassay"

# Bottom to top. A module may import its own layer and the ones below.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("ragassay", "errors", "fsio", "yamlio", "_arrow_json", "_gc", "_lazy", "_markdown", "_progress"),
    ("stats", "metrics", "store"),
    ("corpus", "golden", "trace"),
    ("pipeline", "judges"),
    ("executors", "importers"),
    ("analysis",),
    ("online",),
    ("report", "api"),
    ("cli", "__main__", "pytest_plugin"),
)


def module_names(root: Path) -> dict[str, Path]:
    """Dotted name -> file of every module of the package at ``root`` (a package is its ``__init__``)."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = [root.name, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


# "package.module:attribute", the entry-point spelling of a module named by string
ENTRY_POINT = re.compile(r"^(\w+(?:\.\w+)+):\w+$")


def _named_by_string(node: ast.AST, modules: dict[str, Path]) -> list[str] | None:
    """The modules ``node`` names by string: the argument of an ``import_module`` call (a constant, or an
    f-string's constant prefix: every module under it) or a ``"module:attr"`` constant; None for other nodes."""
    if isinstance(node, ast.Call) and node.args and (
            (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
            or (isinstance(node.func, ast.Name) and node.func.id == "import_module")):
        arg = node.args[0]
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            return [arg.value]
        if isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
            prefix = str(arg.values[0].value)
            return sorted(m for m in modules if m.startswith(prefix) and m != prefix.rstrip("."))
        return None
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        m = ENTRY_POINT.match(node.value)
        return [m.group(1)] if m and m.group(1) in modules else None
    return None


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, int]]:
    """(imported module of this package, line) for every import in the file, resolved to known modules."""
    top = name.split(".")[0]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        named = _named_by_string(node, modules)
        if named is not None:
            targets = named
        elif isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            targets = [f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules else source
                       for alias in node.names]
        else:
            continue
        for target in targets:
            if target.split(".")[0] != top:
                continue
            while target and target not in modules:  # `import pkg.mod.attr` is an import of `pkg.mod`
                target = target.rpartition(".")[0]
            if not target:
                continue
            if target != name:
                found.append((target, node.lineno))
    return sorted(set(found))


def import_graph(root: Path) -> tuple[dict[str, Path], list[tuple[str, str, int]]]:
    modules = module_names(root)
    return modules, [(name, target, line) for name, path in modules.items()
                     for target, line in imports_of(name, path, modules)]


def layer_of(module: str) -> int | None:
    parts = module.split(".")
    key = parts[1] if len(parts) > 1 else parts[0]
    return next((i for i, names in enumerate(LAYERS) if key in names), None)


def _where(modules: dict[str, Path], module: str, line: int) -> str:
    """``src/ragassay/x.py:line``: the file from the folder that holds the package's folder."""
    base = modules[module.split(".")[0]].parents[2]
    return f"{modules[module].relative_to(base)}:{line}"


def upward_imports(modules: dict[str, Path], edges: list[tuple[str, str, int]]) -> list[str]:
    """One line per import from a lower layer into a higher one: file, line and the two layers."""
    out = []
    for src, dst, line in edges:
        a, b = layer_of(src), layer_of(dst)
        if a is not None and b is not None and b > a:
            out.append(f"{_where(modules, src, line)}: {src} imports {dst}, but layer {a} "
                       f"({', '.join(LAYERS[a])}) sits below layer {b} ({', '.join(LAYERS[b])})")
    return sorted(out)


def import_circles(modules: dict[str, Path], edges: list[tuple[str, str, int]]) -> list[str]:
    """One line per strongly connected set of modules: a shortest circle through its first module, each
    step as file:line."""
    graph: dict[str, dict[str, int]] = defaultdict(dict)
    for src, dst, line in edges:
        graph[src][dst] = min(line, graph[src].get(dst, line))
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def connect(v: str) -> None:  # Tarjan's algorithm; the module graph is a few hundred nodes deep at most
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(component)

    for v in sorted(modules):
        if v not in index:
            connect(v)
    out = []
    for component in sorted(components, key=min):
        start = min(component)
        back = {start: None}
        queue = deque([start])
        while queue:  # breadth first, inside the component, until an edge leads back to the start
            v = queue.popleft()
            if start in graph[v]:
                break
            for w in sorted(graph[v]):
                if w in component and w not in back:
                    back[w] = v
                    queue.append(w)
        path = [v]
        while back[path[-1]] is not None:
            path.append(back[path[-1]])
        path = [*reversed(path), start]
        steps = [f"{_where(modules, a, graph[a][b])} imports {b}" for a, b in zip(path, path[1:], strict=False)]
        out.append(f"import circle {' -> '.join(path)}: " + "; ".join(steps))
    return out


MODULES, EDGES = import_graph(SRC)


def test_every_module_has_a_layer():
    assert [m for m in MODULES if layer_of(m) is None] == []


def test_no_import_points_up_a_layer():
    found = upward_imports(MODULES, EDGES)
    assert found == [], "\n" + "\n".join(found)


def test_no_two_modules_import_each_other_directly_or_around_a_circle():
    found = import_circles(MODULES, EDGES)
    assert found == [], "\n" + "\n".join(found)


def test_the_graph_holds_lazy_relative_and_type_only_imports(tmp_path):
    """The checker on a planted package: each kind of import it must see, and the exact findings."""
    pkg = tmp_path / "src" / "ragassay"
    files = {
        "__init__.py": "",
        "errors.py": "def fail():\n    from ragassay.metrics import names\n",  # lazy, upward
        "metrics/__init__.py": "",
        "metrics/names.py": "from .. import errors\nimport ragassay.metrics.rank as rank\n",  # relative
        "metrics/rank.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                           "    from ragassay.metrics.names import X\n",  # type-only, closes a circle
        "cli/__init__.py": "from ragassay.cli import app\n",
        "cli/app.py": "import ragassay.cli\nfrom ragassay.metrics.names import X\nimport json\n",
    }
    for name, text in files.items():
        (pkg / name).parent.mkdir(parents=True, exist_ok=True)
        (pkg / name).write_text(text)
    modules, edges = import_graph(pkg)
    assert sorted(edges) == [
        ("ragassay.cli", "ragassay.cli.app", 1),
        ("ragassay.cli.app", "ragassay.cli", 1),
        ("ragassay.cli.app", "ragassay.metrics.names", 2),
        ("ragassay.errors", "ragassay.metrics.names", 2),
        ("ragassay.metrics.names", "ragassay.errors", 1),
        ("ragassay.metrics.names", "ragassay.metrics.rank", 2),
        ("ragassay.metrics.rank", "ragassay.metrics.names", 3),
    ]
    assert upward_imports(modules, edges) == [
        "src/ragassay/errors.py:2: ragassay.errors imports ragassay.metrics.names, but layer 0 "
        "(ragassay, errors, fsio, yamlio, _arrow_json, _gc, _lazy, _markdown, _progress) sits below layer 1 "
        "(stats, metrics, store)",
    ]
    assert import_circles(modules, edges) == [
        "import circle ragassay.cli -> ragassay.cli.app -> ragassay.cli: src/ragassay/cli/__init__.py:1 "
        "imports ragassay.cli.app; src/ragassay/cli/app.py:1 imports ragassay.cli",
        "import circle ragassay.errors -> ragassay.metrics.names -> ragassay.errors: "
        "src/ragassay/errors.py:2 imports ragassay.metrics.names; src/ragassay/metrics/names.py:1 imports "
        "ragassay.errors",
    ]
    # names -> rank -> names is the same strongly connected set as errors <-> names: one line for the set
    assert layer_of("ragassay.cli.app") == len(LAYERS) - 1


@pytest.mark.parametrize("module, layer", [("ragassay", 0), ("ragassay._progress", 0), ("ragassay.store.db", 1),
                                           ("ragassay.judges.providers.base", 3), ("ragassay.api", 7)])
def test_layer_of_reads_the_top_level_package(module, layer):
    assert layer_of(module) == layer


def test_modules_named_by_string_are_imports_too(tmp_path):
    """``import_module`` with a constant or an f-string prefix, and ``"module:attr"`` entry points, on a planted
    package; a lazy_exports map, a logger name and other strings are not imports."""
    pkg = tmp_path / "src" / "ragassay"
    files = {
        "__init__.py": "from ragassay._lazy import lazy_exports\n"
                       "__getattr__, __dir__ = lazy_exports(__name__, {'run': 'api'})\n",
        "_lazy.py": "",
        "api.py": "",
        "errors.py": "import importlib\nimportlib.import_module('ragassay.metrics.rank')\n",  # upward, by string
        "metrics/__init__.py": "",
        "metrics/rank.py": "import logging\nlog = logging.getLogger('ragassay.cli')\nPATH = 'ragassay.duckdb'\n",
        "cli/__init__.py": "",
        "cli/app.py": "from importlib import import_module\n\ndef load(name):\n"
                      "    return import_module(f'ragassay.cli.{name}')\n",
        "cli/analyze.py": "KINDS = {'hygiene': ('ragassay.cli.causal:hygiene', 'help')}\n",
        "cli/causal.py": "from ragassay.cli.analyze import KINDS\n",
    }
    for name, text in files.items():
        (pkg / name).parent.mkdir(parents=True, exist_ok=True)
        (pkg / name).write_text(text)
    modules, edges = import_graph(pkg)
    assert sorted(edges) == [
        ("ragassay", "ragassay._lazy", 1),
        ("ragassay.cli.analyze", "ragassay.cli.causal", 1),
        ("ragassay.cli.app", "ragassay.cli.analyze", 4),
        ("ragassay.cli.app", "ragassay.cli.causal", 4),
        ("ragassay.cli.causal", "ragassay.cli.analyze", 1),
        ("ragassay.errors", "ragassay.metrics.rank", 2),
    ]
    assert upward_imports(modules, edges) == [
        "src/ragassay/errors.py:2: ragassay.errors imports ragassay.metrics.rank, but layer 0 "
        "(ragassay, errors, fsio, yamlio, _arrow_json, _gc, _lazy, _markdown, _progress) sits below layer 1 "
        "(stats, metrics, store)",
    ]
    assert import_circles(modules, edges) == [
        "import circle ragassay.cli.analyze -> ragassay.cli.causal -> ragassay.cli.analyze: "
        "src/ragassay/cli/analyze.py:1 imports ragassay.cli.causal; src/ragassay/cli/causal.py:1 imports "
        "ragassay.cli.analyze",
    ]
