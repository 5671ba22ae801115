"""The layers of docs/architecture.md hold: no import goes from a lower layer to a higher one, and no
import loop, counting the imports inside functions.

The layer table is read from the doc (one place for the order); every unit of src/torch_fl (a top-level
module or package) must be in it. An import inside a function (lazy) runs at call time, not at load time,
but it is still a dependency: an upward one must be a row of the doc's table of lazy upward imports, and
none may close a loop. Imports under ``if TYPE_CHECKING`` are not dependencies and are not checked.
"""

from __future__ import annotations

import ast
import itertools
import re
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).parents[1]
PACKAGE = ROOT / "src" / "torch_fl"
DOC = ROOT / "docs" / "architecture.md"

# Import loops that run through a lazy import, measured when this test learnt to see them (issue 24): four
# then, none now. Each entry would be one import (importer, imported) that closes a loop; the test fails on
# any loop not closed by one of them, and on an entry that no longer closes one. The list only shrinks.
KNOWN_LOOPS: dict[tuple[str, str], str] = {}


def layers() -> dict[str, int]:
    """unit -> layer number, from the doc's table rows ``| N name | `unit`, `unit` | ... |``."""
    found: dict[str, int] = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        row = re.match(r"\|\s*(\d+)\b[^|]*\|([^|]*)\|", line)
        if row:
            for unit in re.findall(r"`([\w.]+)`", row.group(2)):
                assert unit not in found, f"docs/architecture.md puts {unit} in two layers"
                found[unit] = int(row.group(1))
    return found


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def unit_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def is_module(module: str) -> bool:
    path = PACKAGE.parent.joinpath(*module.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


class Import(NamedTuple):
    line: int
    module: str  # the torch_fl module (or package) imported
    lazy: bool  # inside a function: runs at call time


def imports(path: Path, type_only: bool = False) -> list[Import]:
    """Every torch_fl import of `path`, at module level and inside functions; those under TYPE_CHECKING
    too with `type_only` (they are not dependencies at run time, but a reader still follows them)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[Import] = []

    def visit(node: ast.AST, lazy: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if _is_type_checking(child) and not type_only:
                continue
            inner = lazy or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                found.extend(Import(child.lineno, alias.name, inner) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join(anchor + ([child.module] if child.module else []))
                for alias in child.names:  # `from . import x`: the submodule x when there is one
                    sub = f"{base}.{alias.name}"
                    found.append(Import(child.lineno, sub if is_module(sub) else base, inner))
            visit(child, inner)

    visit(ast.parse(path.read_text(encoding="utf-8")), False)
    return [i for i in found if i.module.split(".")[0] == "torch_fl" and i.module != name]


def load_time_imports(path: Path) -> list[tuple[int, str]]:
    """(line, torch_fl module) of every import that runs when `path` is imported."""
    return [(i.line, i.module) for i in imports(path) if not i.lazy]


def lazy_upward_rows() -> list[tuple[str, str]]:
    """(importer, imported) rows of the doc's table of lazy upward imports: ``| `a.b` | `c` | why |``, names
    relative to torch_fl; a row covers the modules under the names it gives."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split("### Lazy upward imports", 1)[1].split("\n#", 1)[0]
    return re.findall(r"^\|\s*`([\w.]+)`\s*\|\s*`([\w.]+)`\s*\|", section, re.M)


def _covers(row: str, module: str) -> bool:
    name = module.removeprefix("torch_fl.") if module != "torch_fl" else "__init__"
    return name == row or name.startswith(row + ".")


def test_the_layer_table_names_every_unit():
    table = layers()
    units = {unit_of(module_name(path)) for path in PACKAGE.rglob("*.py")}
    missing = sorted(units - set(table))
    assert not missing, f"add {missing} to the layer table of docs/architecture.md"
    stale = sorted(set(table) - units)
    assert not stale, f"docs/architecture.md names units that no longer exist: {stale}"


def test_no_lower_layer_imports_a_higher_one():
    table = layers()
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = unit_of(module_name(path))
        for line, target in load_time_imports(path):
            if table.get(unit_of(target), -1) > table.get(source, 99):
                upward.append(f"{path.relative_to(ROOT)}:{line} imports {target} "
                              f"(layer {table[unit_of(target)]} > layer {table[source]} of {source})")
    assert not upward, "imports against docs/architecture.md's layers:\n" + "\n".join(upward)


def test_every_lazy_upward_import_is_a_row_of_the_docs_table():
    table, rows = layers(), lazy_upward_rows()
    assert rows, "docs/architecture.md lost its '### Lazy upward imports' table"
    undocumented, used = [], set()
    for path in sorted(PACKAGE.rglob("*.py")):
        source = module_name(path)
        for line, target, lazy in imports(path):
            if not lazy or table.get(unit_of(target), -1) <= table.get(unit_of(source), 99):
                continue
            row = next((r for r in rows if _covers(r[0], source) and _covers(r[1], target)), None)
            if row is None:
                undocumented.append(f"{path.relative_to(ROOT)}:{line} imports {target} inside a function "
                                    f"(layer {table[unit_of(target)]} > layer {table[unit_of(source)]})")
            used.add(row)
    assert not undocumented, ("lazy upward imports docs/architecture.md does not list (move the code down, "
                              "or add a row with the reason):\n" + "\n".join(undocumented))
    stale = [f"| `{a}` | `{b}` |" for a, b in rows if (a, b) not in used]
    assert not stale, "rows of docs/architecture.md's lazy upward imports no import needs: " + ", ".join(stale)


def parents(importer: str, imported: str) -> list[str]:
    """The packages importing `imported` runs first, when not loaded yet: torch_fl.routing for
    torch_fl.routing.activation (its __init__ imports run too). Not the top package (every module is
    imported through it) nor the importer's own packages (they are already being imported)."""
    parts = imported.split(".")
    found = [".".join(parts[:k]) for k in range(2, len(parts))]
    return [p for p in found if p != importer and not importer.startswith(p + ".")]


def import_graph(lazy: bool, under: Path | None = None, type_only: bool = False) -> dict[str, dict[str, str]]:
    """module -> {imported module: 'file:line' of the first such import}; lazy ones too when `lazy`,
    type-only ones too when `type_only`; an import of a submodule is an edge to each package above it
    too (their __init__ runs first). `under`: only the modules in that folder and the edges between them."""
    graph: dict[str, dict[str, str]] = {}
    folder = PACKAGE if under is None else under
    inside = module_name(folder / "__init__.py")
    for path in sorted(folder.rglob("*.py")):
        name = module_name(path)
        edges = graph.setdefault(name, {})
        for line, target, is_lazy in imports(path, type_only):
            if under is not None and not (target == inside or target.startswith(inside + ".")):
                continue
            if lazy or not is_lazy:
                where = f"{path.relative_to(ROOT)}:{line}"
                edges.setdefault(target, where)
                for package in parents(name, target):
                    edges.setdefault(package, f"{where} (runs {package}/__init__.py)")
    return graph


def find_cycle(graph: dict[str, dict[str, str]]) -> list[str] | None:
    """One import cycle as [a, b, ..., a], or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1:
                return [*path[path.index(target):], target]
            if target not in state and (cycle := visit(target)):
                return cycle
        state[module] = 2
        path.pop()
        return None

    for module in sorted(graph):
        if module not in state and (cycle := visit(module)):
            return cycle
    return None


def reaches(graph: dict[str, dict[str, str]], start: str, goal: str) -> bool:
    seen, todo = set(), [start]
    while todo:
        module = todo.pop()
        if module == goal:
            return True
        if module not in seen:
            seen.add(module)
            todo.extend(graph.get(module, ()))
    return False


def _describe(cycle: list[str], graph: dict[str, dict[str, str]]) -> str:
    return "\n".join(f"  {a} -> {b}  ({graph[a][b]})" for a, b in itertools.pairwise(cycle))


def test_no_import_loop_counting_imports_inside_functions():
    graph = import_graph(lazy=True)
    cut = {a: {b: where for b, where in edges.items() if (a, b) not in KNOWN_LOOPS} for a, edges in graph.items()}
    cycle = find_cycle(cut)
    assert cycle is None, ("import loop (a lazy import is still a dependency; move the shared part down "
                           "into a module both import):\n" + _describe(cycle, graph))
    stale = []
    for a, b in KNOWN_LOOPS:
        if b not in graph.get(a, {}):
            stale.append(f"{a} -> {b} (no such import any more)")
            continue
        if not reaches(graph, b, a):  # the import is on a loop while b leads back to a
            stale.append(f"{a} -> {b} (closes no loop now)")
    assert not stale, "loops fixed; delete them from KNOWN_LOOPS in tests/test_architecture.py:\n" + "\n".join(stale)


def test_no_import_cycle_inside_migrate_counting_type_only_imports():
    # Issue 43: the CUDA alias's four modules imported each other under TYPE_CHECKING (alias.py <->
    # alias_calls.py <-> patches.py <-> cuda_surface.py) and rules/base.py imported scan/results.py, which
    # imports the rules package: loops the run-time walk cannot see, but a reader must follow. The shared
    # part lives in a lower module (alias_calls.AliasHooks, rules.base.Raw) instead.
    graph = import_graph(lazy=True, under=PACKAGE / "migrate", type_only=True)
    assert "torch_fl.migrate.alias_calls" in graph["torch_fl.migrate.patches"]  # the walk sees the folder
    cycle = find_cycle(graph)
    assert cycle is None, ("import cycle inside migrate/ (type-only imports count here: name a Protocol "
                           "or a record in a module both import instead):\n" + _describe(cycle, graph))


# Private names one migrate/ module may import from another, with why (one fact has one owner: a name
# another module needs is public). The list only shrinks.
KNOWN_PRIVATE_IMPORTS = {
    ("namerefs", "_Fallback"): "tests/test_public_api.py lists it by this name as an internal exception",
}


def private_imports(folder: Path) -> list[tuple[str, str, str]]:
    """(importer file:line, module, name) of every `from .x import _name` between modules of `folder`."""
    found = []
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level and node.module:
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        found.append((f"{path.relative_to(ROOT)}:{node.lineno}", node.module.rpartition(".")[2],
                                      alias.name))
    return found


def test_no_migrate_module_imports_another_ones_private_names():
    found = private_imports(PACKAGE / "migrate")
    bad = [f"{where} imports {name} from {module}" for where, module, name in found
           if (module, name) not in KNOWN_PRIVATE_IMPORTS]
    assert not bad, "private names across migrate/ modules (make the name public, or move it):\n" + "\n".join(bad)
    stale = set(KNOWN_PRIVATE_IMPORTS) - {(module, name) for _, module, name in found}
    assert not stale, f"fixed: delete {sorted(stale)} from KNOWN_PRIVATE_IMPORTS"


def test_the_walk_sees_imports_marks_lazy_ones_and_skips_type_checking_ones(tmp_path, monkeypatch):
    package = tmp_path / "torch_fl"
    (package / "sub").mkdir(parents=True)
    for name in ("__init__.py", "low.py", "sub/__init__.py", "sub/high.py"):
        (package / name).write_text("")
    (package / "low.py").write_text(
        "from typing import TYPE_CHECKING\nfrom .sub import high\nimport torch_fl.sub\n"
        "if TYPE_CHECKING:\n    from .sub import high as h\n"
        "def f():\n    from .sub import high\n    from . import low\n")
    monkeypatch.setattr(__import__(__name__), "PACKAGE", package)
    assert load_time_imports(package / "low.py") == [(2, "torch_fl.sub.high"), (3, "torch_fl.sub")]
    assert imports(package / "low.py")[2:] == [Import(7, "torch_fl.sub.high", True)]  # not itself
    assert Import(5, "torch_fl.sub.high", False) in imports(package / "low.py", type_only=True)


def test_a_loop_through_a_lazy_import_is_found():
    graph = {"a": {"b": "a.py:1"}, "b": {"c": "b.py:3"}, "c": {"a": "c.py:9"}, "d": {"a": "d.py:2"}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert "b -> c  (b.py:3)" in _describe(["a", "b", "c", "a"], graph)
    assert reaches(graph, "d", "c") and not reaches(graph, "a", "d")
    del graph["c"]["a"]
    assert find_cycle(graph) is None


def test_importing_a_submodule_depends_on_the_packages_above_it(tmp_path, monkeypatch):
    # device -> routing.activation runs routing/__init__.py, whose imports lead back to device: a loop the
    # walk missed while it counted only the module named (issue 32).
    package = tmp_path / "torch_fl"
    (package / "routing").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "device.py").write_text("def f():\n    from .routing import activation\n")
    (package / "routing" / "__init__.py").write_text("from . import activation\nfrom .. import device\n")
    (package / "routing" / "activation.py").write_text("from . import other\n")
    (package / "routing" / "other.py").write_text("")
    monkeypatch.setattr(__import__(__name__), "PACKAGE", package)
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    graph = import_graph(lazy=True)
    assert "torch_fl.routing" in graph["torch_fl.device"]  # the package above the module imported
    assert "torch_fl.routing" not in graph["torch_fl.routing.activation"]  # not its own package
    assert find_cycle(graph) == ["torch_fl.device", "torch_fl.routing", "torch_fl.device"]
    assert parents("torch_fl.x", "torch_fl.a.b.c") == ["torch_fl.a", "torch_fl.a.b"]


def _bound_names(init: Path) -> dict[str, int]:
    """Names an __init__.py binds at load time to something other than its own submodule of that name."""
    bound: dict[str, int] = {}
    for node in ast.parse(init.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound[node.name] = node.lineno
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            bound.update({t.id: node.lineno for t in targets if isinstance(t, ast.Name)})
        elif isinstance(node, ast.ImportFrom) and not (node.level == 1 and node.module is None):
            bound.update({(a.asname or a.name): node.lineno for a in node.names})  # `from .x import y`
    return bound


def test_no_submodule_is_shadowed_by_a_name_of_its_package():
    # `import torch_fl.description.registry as r` failed when torch_fl bound a function `description`.
    shadowed = []
    for init in sorted(PACKAGE.rglob("__init__.py")):
        submodules = {p.stem for p in init.parent.glob("*.py")} | {p.name for p in init.parent.iterdir()
                                                                  if (p / "__init__.py").is_file()}
        for name, line in _bound_names(init).items():
            if name in submodules - {"__init__"}:
                shadowed.append(f"{init.relative_to(ROOT)}:{line} binds '{name}', the name of its submodule")
    assert not shadowed, "\n".join(shadowed)


def test_no_module_level_import_cycle():
    # analysis/html.py and analysis/report.py once imported each other; a cycle makes import order matter.
    graph = import_graph(lazy=False)
    cycle = find_cycle(graph)
    assert cycle is None, "module-level import cycle:\n" + _describe(cycle, graph)


# Commands that still import another command (measured, issue 24); the list only shrinks.
KNOWN_COMMAND_IMPORTS: dict[tuple[str, str], str] = {}  # (audit -> run went: run_target is migrate/script.py)


def test_a_command_imports_no_other_command():
    # The work of a command lives in a layer below, where every command can use it (bugreport once
    # imported cli.doctor for doctor's facts). A command is a cli module with add_parser and run.
    cli = PACKAGE / "cli"
    commands = {f"torch_fl.cli.{p.stem}" for p in cli.glob("*.py")
                if {"add_parser", "run"} <= {n.name for n in ast.parse(p.read_text(encoding="utf-8")).body
                                             if isinstance(n, ast.FunctionDef)}}
    assert "torch_fl.cli.doctor" in commands
    found = {(module_name(p), target): f"{p.relative_to(ROOT)}:{line}" for p in sorted(cli.glob("*.py"))
             for line, target, _ in imports(p) if target in commands and target != module_name(p)}
    crossing = [f"{where} imports {b}" for (a, b), where in found.items() if (a, b) not in KNOWN_COMMAND_IMPORTS]
    assert not crossing, "a command imports another (move the shared part below cli/):\n" + "\n".join(crossing)
    stale = sorted(set(KNOWN_COMMAND_IMPORTS) - set(found))
    assert not stale, f"fixed: delete {stale} from KNOWN_COMMAND_IMPORTS"
