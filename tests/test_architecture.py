"""The layers of docs/architecture.md hold: no module-level import goes from a lower layer to a higher one.

The layer table is read from the doc (one place for the order); every unit of src/torch_fl (a top-level
module or package) must be in it. Imports inside functions (lazy) and under ``if TYPE_CHECKING`` are not
load-time dependencies and are not checked; the doc lists the lazy upward ones.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).parents[1]
PACKAGE = ROOT / "src" / "torch_fl"
DOC = ROOT / "docs" / "architecture.md"


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


def load_time_imports(path: Path) -> list[tuple[int, str]]:
    """(line, torch_fl module) of every import that runs when `path` is imported."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) or _is_type_checking(child):
                continue
            if isinstance(child, ast.Import):
                found.extend((child.lineno, alias.name) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join(anchor + ([child.module] if child.module else []))
                for alias in child.names:  # `from . import x`: the submodule x when there is one
                    sub = f"{base}.{alias.name}"
                    found.append((child.lineno, sub if is_module(sub) else base))
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return [(line, module) for line, module in found if module.split(".")[0] == "torch_fl"]


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


def test_the_walk_sees_imports_and_skips_lazy_and_type_checking_ones(tmp_path, monkeypatch):
    package = tmp_path / "torch_fl"
    (package / "sub").mkdir(parents=True)
    for name in ("__init__.py", "low.py", "sub/__init__.py", "sub/high.py"):
        (package / name).write_text("")
    (package / "low.py").write_text(
        "from typing import TYPE_CHECKING\nfrom .sub import high\nimport torch_fl.sub\n"
        "if TYPE_CHECKING:\n    from .sub import high as h\n"
        "def f():\n    from .sub import high\n")
    monkeypatch.setattr(__import__(__name__), "PACKAGE", package)
    assert load_time_imports(package / "low.py") == [(2, "torch_fl.sub.high"), (3, "torch_fl.sub")]


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
    graph = {module_name(p): {t for _, t in load_time_imports(p)} - {module_name(p)}
             for p in PACKAGE.rglob("*.py")}
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
            raise AssertionError("module-level import cycle: " + " -> ".join(cycle))
