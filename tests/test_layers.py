"""The layers of mrtpo/: imports point only down, and no modules import each other.

Every `import mrtpo...` and `from ... import` in mrtpo/**/*.py counts, at module level and inside
functions alike (a lazy import is still a dependency); relative imports are resolved. A package's
__init__ counts as a module: an import of pkg.mod from outside pkg depends on pkg/__init__ too
(it runs first), and so does `from pkg import name` from anywhere, inside pkg included (it reads
pkg's namespace), so cycles through __init__ files are found. Only
imports under `if TYPE_CHECKING:` are left out: they never run (the replay package names the
item type it duck-types that way). An imported name is resolved to the module that defines it
(`from mrtpo.harness import checkpoints` is the module mrtpo.harness.run.checkpoints; `from
mrtpo.tasks import Task` is the package mrtpo.tasks). docs/design.md ("Layout") lists the layers.
"""
from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "mrtpo"

#: the layers, bottom to top: a module may import its own layer's modules and lower layers' only.
#: A module takes the layer of its longest matching entry (a package covers its modules, its
#: __init__ included).
LAYERS: list[tuple[str, list[str]]] = [
    ("foundation: pure helpers and math, importing nothing above them", [
        "mrtpo", "mrtpo.cache", "mrtpo.textio", "mrtpo.yamlio", "mrtpo.chat", "mrtpo.progress", "mrtpo.formats",
        "mrtpo.edits", "mrtpo.advantages", "mrtpo.spans", "mrtpo.replay", "mrtpo.statistics", "mrtpo.loading"]),
    ("verifiers: scoring one response (SQL sandbox, IFEval/IFBench checks, tool calls)", ["mrtpo.verifiers"]),
    ("tasks: the task types, the registry, the built-in tasks and their data readers", ["mrtpo.tasks"]),
    ("contexts: P0 / P_all / P_without_k as messages and token ids", ["mrtpo.contexts"]),
    ("blocks: the writing-rules lint, sample responses and previews of each reward's block", ["mrtpo.blocks"]),
    ("models: the built-in policies (their table, their factory)", ["mrtpo.models"]),
    ("harness.fast: the trainer's exact fast paths, drop-ins below the recipe", ["mrtpo.harness.fast"]),
    ("harness: the recipe (config, policy, loop...) and harness.run: what a run writes and reads back "
     "(its runs read back as models)", ["mrtpo.harness", "mrtpo.harness.run"]),
    ("uses of trained models: evaluation, credit, other training engines",
     ["mrtpo.evaluation", "mrtpo.credit", "mrtpo.integrations"]),
    ("commands: the CLI", ["mrtpo.commands", "mrtpo.cli", "mrtpo.__main__"]),
]


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def all_modules(root: Path = ROOT) -> dict[str, Path]:
    return {module_name(p, root): p for p in sorted(root.rglob("*.py"))}


def _defining_module(name: str, modules: dict[str, Path]) -> str | None:
    """The module an imported dotted name lives in: the longest prefix that is a module."""
    parts = name.split(".")
    while parts:
        if ".".join(parts) in modules:
            return ".".join(parts)
        parts.pop()
    return None


def _type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _imported_names(node: ast.AST, package: str) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom):
        if node.level:  # relative: from the module's package, up level - 1
            base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
            module = ".".join(base + ([node.module] if node.module else []))
        else:
            module = node.module or ""
        return [module] + [f"{module}.{a.name}" for a in node.names]
    return []


def _packages_above(module: str, modules: dict[str, Path]) -> list[str]:
    """The packages (directories with an __init__.py) that hold `module`, outermost first."""
    parts = module.split(".")
    return [p for p in (".".join(parts[:i]) for i in range(1, len(parts))) if p in modules]


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> dict[str, int]:
    """{imported mrtpo module: first line} for one module, in-function imports included."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: dict[str, int] = {}

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if _type_checking(child):
                for stmt in child.orelse:
                    visit_one(stmt)
                continue
            visit_one(child)

    def visit_one(node: ast.AST) -> None:
        names = _imported_names(node, package)
        if names:
            # `from a.b import c`: c is the module a.b.c when there is one, else a name in a.b
            targets = {_defining_module(n, modules) for n in (names[1:] or names)}
            # a package's __init__ runs before any of its modules: importing a.b.c from outside
            # a.b runs a/__init__ and a/b/__init__ (the importer's own packages are running already)
            targets |= {a for t in targets if t for a in _packages_above(t, modules) if not _within(name, a)}
            # `from a.b import c` reads a.b's namespace: its __init__, even from inside a.b
            if isinstance(node, ast.ImportFrom) and modules.get(names[0], Path()).name == "__init__.py":
                targets.add(names[0])
            for target in targets - {None, name}:
                if target.split(".")[0] == "mrtpo":
                    found.setdefault(target, node.lineno)
        visit(node)

    visit(ast.parse(path.read_text(encoding="utf-8"), str(path)))
    return found


def import_graph(root: Path = ROOT) -> dict[str, dict[str, int]]:
    modules = all_modules(root)
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def layer_of(module: str) -> int:
    best, layer = -1, None
    for n, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, layer = len(prefix), n
    assert layer is not None, f"{module} is in no layer; add it to LAYERS (and to docs/design.md)"
    return layer


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            nxt = next((w for w in edges if w not in index or w in on_stack), None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                else:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def upward_imports(graph: dict[str, dict[str, int]]) -> list[str]:
    return [f"{a} (layer {layer_of(a)}) imports {b} (layer {layer_of(b)}) at line {line}"
            for a, targets in sorted(graph.items()) for b, line in sorted(targets.items())
            if layer_of(b) > layer_of(a)]


def test_no_import_cycles():
    graph = import_graph()
    found = cycles(graph)
    detail = [" <-> ".join(c) + ": " + "; ".join(f"{a} -> {b} (line {graph[a][b]})"
                                                  for a in c for b in c if b in graph[a]) for c in found]
    assert not found, "import cycles:\n" + "\n".join(detail)


def test_imports_point_down():
    bad = upward_imports(import_graph())
    assert not bad, "imports of a higher layer:\n" + "\n".join(bad)


def test_every_module_has_a_layer():
    for name in all_modules():
        layer_of(name)


def test_the_checks_see_in_function_and_relative_imports(tmp_path):
    """The checks themselves: a lazy import inside a function and a relative one are found, one
    under `if TYPE_CHECKING:` is not."""
    pkg = tmp_path / "mrtpo"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "low.py").write_text("def f():\n    from mrtpo.sub.high import g\n")
    (pkg / "sub" / "high.py").write_text("from ..low import f\nfrom typing import TYPE_CHECKING\n"
                                         "if TYPE_CHECKING:\n    from mrtpo import sub\n")
    graph = import_graph(pkg)
    assert graph["mrtpo.low"] == {"mrtpo.sub.high": 2, "mrtpo.sub": 2}  # sub/__init__ runs first
    assert graph["mrtpo.sub.high"] == {"mrtpo.low": 1}
    assert cycles(graph) == [["mrtpo.low", "mrtpo.sub.high"]]


def test_the_checks_see_cycles_through_package_inits(tmp_path):
    """A package's __init__ is a module too: `from pkg import sibling` reads pkg's namespace (its
    __init__), and an import of pkg.mod from outside pkg runs pkg/__init__ first; a module's
    imports of its own package's modules (`from pkg.mod import x` inside pkg) do not."""
    pkg = tmp_path / "mrtpo"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from mrtpo.sub.reg import get\n")
    (pkg / "sub" / "reg.py").write_text("from mrtpo.sub import checks\n")
    (pkg / "sub" / "checks.py").write_text("from mrtpo.sub.reg import get\n")
    (pkg / "user.py").write_text("from mrtpo.sub.checks import x\n")
    graph = import_graph(pkg)
    assert graph["mrtpo.sub.reg"] == {"mrtpo.sub.checks": 1, "mrtpo.sub": 1}
    assert graph["mrtpo.user"] == {"mrtpo.sub.checks": 1, "mrtpo.sub": 1}
    assert cycles(graph) == [["mrtpo.sub", "mrtpo.sub.checks", "mrtpo.sub.reg"]]
    (pkg / "sub" / "reg.py").write_text("from mrtpo.sub.checks import y\n")  # the module, not the package
    assert cycles(import_graph(pkg)) == [["mrtpo.sub.checks", "mrtpo.sub.reg"]]


def test_each_built_in_policy_is_one_entry():
    """mrtpo/models/builtin.py's table gives each built-in policy its recipe and its train
    defaults together; `RECIPES` and `TRAIN_DEFAULTS` are that table by name."""
    from mrtpo.models.builtin import POLICIES, RECIPES, TRAIN_DEFAULTS

    assert list(RECIPES) == list(TRAIN_DEFAULTS) == [p.name for p in POLICIES]
    assert all(RECIPES[p.name] is p.recipe and TRAIN_DEFAULTS[p.name] is p.train_defaults for p in POLICIES)


def test_the_trainer_builds_no_built_in_policy():
    """The training loop loads the model path it is given: importing it (and everything it
    imports) brings in the built-in policies' table, never their factory (mrtpo.models.builds)."""
    code = ("import sys, mrtpo.harness.loop; "
            "print('mrtpo.models.builtin' in sys.modules, 'mrtpo.models.builds' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT.parent)}).stdout
    assert out.split() == ["True", "False"]

