"""The import graph of guiagent's six packages, read from the source: every import, those inside
functions included (an import-time check cannot see a function's imports).

Three rules (ARCHITECTURE.md, "Layers and imports"):

* **layers**: ``guiagent`` (the core) imports none of the other packages, except ``guiagent.cli``
  (and ``guiagent.__main__``), the top, which may import everything and which nothing else imports;
  ``grounding``, ``emulators`` and ``judge`` import only ``guiagent``; ``rl`` imports those four;
  ``webui`` imports only ``guiagent`` (it reads runs through the store API);
* **no cycles** between modules;
* **imports inside functions** only of a heavy or optional dependency in :data:`LAZY_DEPENDENCIES`,
  or marked on the import (or the comment line above it) with ``# lazy: <reason>``.

``from package import name`` counts as an import of the submodule ``package.name`` when that is a
module (Python imports the submodule, not the rest of the package's ``__init__``), else of the
package; ``import a.b.c`` counts as an import of ``a.b.c``. Importing a submodule runs its parent
packages' ``__init__`` first, as Python always does; that is not counted as an edge. Imports by
name (``importlib.import_module``: the CLI's command table, the suite table) are not seen, nor
imports under ``if TYPE_CHECKING:`` (they never run; annotations only).

Run ``python tests/test_architecture.py`` to print the number of imports inside functions per package.
"""

from __future__ import annotations

import ast
import re
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

PACKAGES = ("guiagent", "grounding", "emulators", "judge", "rl", "webui")

#: the packages each package may import besides itself
ALLOWED: dict[str, frozenset[str]] = {
    "guiagent": frozenset(),
    "grounding": frozenset({"guiagent"}),
    "emulators": frozenset({"guiagent"}),
    "judge": frozenset({"guiagent"}),
    "rl": frozenset({"guiagent", "grounding", "emulators", "judge"}),
    "webui": frozenset({"guiagent"}),
}

#: the top: may import every package; nothing outside it imports it
TOP = ("guiagent.cli", "guiagent.__main__")

#: third-party packages a function may import without a ``# lazy:`` comment, and why. Each is slow to
#: import (measured on the 2-core CPU machine, ``python -c "import time; t=time.perf_counter(); import X;
#: print(time.perf_counter()-t)"``, best of 3) or an optional extra (pyproject.toml), so a command or a
#: module that never needs it must not load it: ``guiagent <command> --help``, the store, the web UI.
LAZY_DEPENDENCIES: dict[str, str] = {
    "torch": "2.3 s and ~300 MB at import; tasks, ui, data, export, farm, the store, the UI never need it",
    "transformers": "1.0-1.4 s (torch with it); only loading, building or running a model needs it",
    "peft": "optional (the lora and vllm extras); seconds to import",
    "vllm": "optional (the vllm extra, GPU machines)",
    "ray": "0.7 s; only the env pool and its workers need it",
    "playwright": "0.1-0.25 s and a driver process; only browser devices need it",
    "datasets": "optional (the datasets extra); 1.0-1.5 s",
    "pyarrow": "0.2 s; only Parquet and Hugging Face export and import need it",
    "huggingface_hub": "0.1-0.2 s; only resolving a hub model id needs it",
    "pydantic": "0.14 s (TypeAdapter); only checking a YAML config or a judge report needs it",
    "tensorboardX": "optional (the tensorboard extra); 1.8 s",
    "wandb": "optional (the wandb extra)",
    "docker": "optional (the farm extra); 0.2 s",
    "appium": "optional (the android extra); 0.2 s",
    "selenium": "optional (the android extra, Appium's client needs it)",
    "android_env": "optional (the android extra)",
    "grpc": "optional (the android extra)",
}

_LAZY_MARK = re.compile(r"#\s*lazy:\s*\S")


@dataclass(frozen=True)
class Import:
    """One imported module as a statement names it."""

    module: str          #: the importing module
    line: int
    target: str          #: the imported module's absolute dotted name, as written
    resolved: str | None  #: the first-party module it loads (None: third-party or stdlib)
    in_function: bool
    marked: bool         #: carries a ``# lazy: <reason>`` comment

    @property
    def where(self) -> str:
        return f"{self.module}:{self.line}"


def find_modules(root: Path, packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` file of ``packages`` under ``root``."""
    out: dict[str, Path] = {}
    for pkg in packages:
        for f in sorted((root / pkg).rglob("*.py")):
            parts = f.relative_to(root).with_suffix("").parts
            if any(p.startswith(".") or p == "__pycache__" for p in parts):
                continue
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = f
    return out


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The deepest first-party module ``name`` loads (``a.b.c`` -> ``a.b`` when ``c`` is no module)."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def read_imports(module: str, path: Path, modules: dict[str, Path]) -> list[Import]:
    """Every import of ``module`` (in functions too), one :class:`Import` per imported module."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    tree = ast.parse(text, str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[Import] = []

    def marked(node: ast.stmt) -> bool:
        span = lines[node.lineno - 1:node.end_lineno or node.lineno]
        i = node.lineno - 2
        while i >= 0 and lines[i].strip().startswith("#"):  # the comment lines right above
            span.append(lines[i])
            i -= 1
        return any(_LAZY_MARK.search(s) for s in span)

    def add(node: ast.stmt, target: str, resolved: str | None, in_function: bool) -> None:
        found.append(Import(module, node.lineno, target, resolved, in_function, marked(node)))

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if _type_checking_only(child):
                continue
            if isinstance(child, ast.Import):
                for alias in child.names:
                    add(child, alias.name, _resolve(alias.name, modules), in_function)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")
                    base = base[:len(base) - (child.level - 1)]
                    target = ".".join(base + ([child.module] if child.module else []))
                else:
                    target = child.module or ""
                subs = {f"{target}.{a.name}" for a in child.names if f"{target}.{a.name}" in modules}
                for sub in sorted(subs):
                    add(child, sub, sub, in_function)
                if len(subs) < len(child.names):  # some names are attributes of ``target`` itself
                    add(child, target, _resolve(target, modules), in_function)
            scope = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            visit(child, in_function or scope)

    visit(tree, False)
    return found


def _type_checking_only(node: ast.AST) -> bool:
    """``if TYPE_CHECKING:`` (or ``typing.TYPE_CHECKING``) without an ``else``: imports for annotations."""
    if not isinstance(node, ast.If) or node.orelse:
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def all_imports(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> list[Import]:
    modules = find_modules(root, packages)
    return [imp for name, path in modules.items() for imp in read_imports(name, path, modules)]


def _top(module: str) -> str:
    return module.partition(".")[0]


def _is_top_layer(module: str) -> bool:
    return any(module == t or module.startswith(t + ".") for t in TOP)


def layer_violations(imports: list[Import], package: str) -> list[str]:
    out = []
    for imp in imports:
        if _top(imp.module) != package or imp.resolved is None or _is_top_layer(imp.module):
            continue
        if _is_top_layer(imp.resolved):
            out.append(f"{imp.where} imports {imp.target}: only the CLI imports the CLI")
        elif _top(imp.resolved) not in ALLOWED[package] | {package}:
            allowed = ", ".join(sorted(ALLOWED[package])) or "no other package"
            out.append(f"{imp.where} imports {imp.target}: {package} imports {allowed}")
    return out


def cycles(imports: list[Import]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each as a cycle path."""
    graph: dict[str, set[str]] = {}
    for imp in imports:
        graph.setdefault(imp.module, set())
        if imp.resolved is not None and imp.resolved != imp.module:
            graph[imp.module].add(imp.resolved)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    comps: list[set[str]] = []

    def strong(v: str) -> None:  # iterative-enough for a few hundred modules
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(comp)

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(graph) + 100))
    try:
        for v in sorted(graph):
            if v not in index:
                strong(v)
    finally:
        sys.setrecursionlimit(limit)
    return [_cycle_path(graph, comp) for comp in comps]


def _cycle_path(graph: dict[str, set[str]], comp: set[str]) -> list[str]:
    """One cycle through the component's first module: ``[a, b, ..., a]`` (breadth-first, shortest)."""
    start = min(comp)
    prev: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & comp):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(prev[path[-1]])
                    return [start, *reversed(path[:-1]), start] if v != start else [start, start]
                if w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return sorted(comp)  # pragma: no cover - a component always has a cycle


def lazy_violations(imports: list[Import], package: str, modules: tuple[str, ...] | None = None) -> list[str]:
    """Unjustified imports inside functions of ``package`` (only of ``modules``, when given)."""
    return [f"{imp.where} imports {imp.target} inside a function: hoist it to the top of the module, or "
            f"mark it '# lazy: <reason>' (or add a heavy dependency to LAZY_DEPENDENCIES)"
            for imp in imports
            if _top(imp.module) == package and (modules is None or imp.module in modules)
            and imp.in_function and not imp.marked and _top(imp.target) not in LAZY_DEPENDENCIES]


def function_level_counts(imports: list[Import]) -> Counter[str]:
    """Import statements inside functions per package (a statement naming several modules counts once)."""
    return Counter(_top(m) for m, _ in {(i.module, i.line) for i in imports if i.in_function})


# ---- the rules, per package -------------------------------------------------------------------

@pytest.fixture(scope="module")
def imports() -> list[Import]:
    return all_imports()


@pytest.mark.parametrize("package", PACKAGES)
def test_each_package_imports_only_the_layers_below_it(imports, package):
    bad = layer_violations(imports, package)
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycle_between_modules(imports, package):
    bad = [" -> ".join(c) for c in cycles(imports) if any(_top(m) == package for m in c)]
    assert not bad, "import cycles (counting imports inside functions):\n" + "\n".join(bad)


@pytest.mark.parametrize("package", PACKAGES)
def test_imports_inside_functions_are_of_heavy_dependencies_or_say_why(imports, package):
    bad = lazy_violations(imports, package)
    assert not bad, "\n".join(bad)


def test_every_package_is_read(imports):
    # the checks above see every module of every package, the CLI's commands among them
    modules = {i.module for i in imports}
    assert {_top(m) for m in modules} == set(PACKAGES)
    assert {"guiagent.cli.main", "guiagent.policy.hf", "rl.trainer", "webui.app", "judge.vlm",
            "grounding.spec", "emulators.browser"} <= modules


# ---- the checker on small trees it must get right ---------------------------------------------

def _tree(root: Path, files: dict[str, str]) -> list[Import]:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return all_imports(root, tuple(sorted({rel.split("/")[0] for rel in files})))


def test_checker_sees_imports_inside_functions_and_their_marks(tmp_path):
    imps = _tree(tmp_path, {
        "guiagent/__init__.py": "",
        "guiagent/a.py": ("import json\n\ndef f():\n    import torch\n    from guiagent import b\n"
                          "    # lazy: b is slow\n    from guiagent.b import x\n"
                          "    from guiagent.b import (  # lazy: also slow\n        y,\n    )\n"),
        "guiagent/b.py": "x = y = 1\n",
    })
    lazy = {(i.line, i.target, i.marked) for i in imps if i.in_function}
    assert lazy == {(4, "torch", False), (5, "guiagent.b", False), (7, "guiagent.b", True),
                    (8, "guiagent.b", True)}
    assert lazy_violations(imps, "guiagent") == [
        "guiagent.a:5 imports guiagent.b inside a function: hoist it to the top of the module, or mark it "
        "'# lazy: <reason>' (or add a heavy dependency to LAZY_DEPENDENCIES)"]
    assert function_level_counts(imps) == Counter({"guiagent": 4})


def test_checker_finds_layer_breaks_and_cycles_a_lazy_import_closes(tmp_path):
    imps = _tree(tmp_path, {
        "guiagent/__init__.py": "",
        "guiagent/cli/__init__.py": "import judge.x\n",
        "guiagent/core.py": "def f():\n    from judge import x  # lazy: reason\n",
        "judge/__init__.py": "from judge.x import X\n",
        "judge/x.py": "from judge import y\nX = 1\n",
        "judge/y.py": "def g():\n    from judge import X\n",
    })
    assert layer_violations(imps, "guiagent") == [
        "guiagent.core:2 imports judge.x: guiagent imports no other package"]
    assert layer_violations(imps, "judge") == []
    # ``from judge import y`` is an import of the module judge.y; ``from judge import X`` of judge/__init__
    assert cycles(imps) == [["judge", "judge.x", "judge.y", "judge"]]


def test_checker_skips_imports_for_annotations_only(tmp_path):
    imps = _tree(tmp_path, {
        "guiagent/__init__.py": "",
        "guiagent/a.py": ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from guiagent import b\n"
                          "import typing\nif typing.TYPE_CHECKING:\n    import guiagent.b\n"
                          "if TYPE_CHECKING:\n    pass\nelse:\n    from guiagent import b\n"),
        "guiagent/b.py": "from guiagent import a\n",
    })
    # only the import in the else branch runs, and it closes a cycle
    assert {(i.module, i.line) for i in imps if i.resolved} == {("guiagent.a", 10), ("guiagent.b", 1)}
    assert cycles(imps) == [["guiagent.a", "guiagent.b", "guiagent.a"]]


def test_checker_resolves_relative_imports_and_submodules(tmp_path):
    imps = _tree(tmp_path, {
        "webui/__init__.py": "from .app import create\n",
        "webui/app.py": "from . import views\nfrom .views import pages\nimport webui.views.pages as p\n",
        "webui/views/__init__.py": "from ..app import create\n",
        "webui/views/pages.py": "",
    })
    got = {(i.module, i.resolved) for i in imps}
    assert got == {("webui", "webui.app"), ("webui.app", "webui.views"), ("webui.app", "webui.views.pages"),
                   ("webui.views", "webui.app")}
    assert cycles(imps) == [["webui.app", "webui.views", "webui.app"]]


if __name__ == "__main__":
    counts = function_level_counts(all_imports())
    for pkg in PACKAGES:
        print(f"{pkg:10s} {counts.get(pkg, 0):4d} imports inside functions")
    print(f"{'total':10s} {sum(counts.values()):4d}")
