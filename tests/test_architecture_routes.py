"""A route is a RouteKind from end to end (issue 43 item 5): outside the enum's module (torch_fl._names) no
route word is compared as a string, matched, passed as a `route=`/`kind=` constant or made a default, and no
route is typed `str`. Code compares members (``route.kind is RouteKind.NATIVE``); the words stay what logs,
reports and FL_ROUTE print, because a member is its word (``RouteKind.NATIVE == "native"``).

The scan reads the sources (ast), so it finds a site whatever the module imports. It flags:
- a comparison (==, !=, is, in ...) with a route word, or with a literal tuple/list/set made only of route
  words, as an operand ("fallback" inside ("translate-or-fallback", "fallback") is a policy, not a route; a
  route word left of `in` asks for a key: ``"native" in cache``; a mapping's entry under a key that names
  something else is not a route: ``event.get("cat") == "kernel"``);
- a `case "native":` pattern;
- a route word passed as `route=` or `kind=`, or as the default of such a parameter, or as an argument of
  a call that takes a route (ROUTE_TAKERS: Route(...), stats.record, ...; of get/pop/setdefault, the
  default: ``worst.get(chain, "native")``);
- a parameter or annotated name that holds a route (route, routes, route_kind, *_route, route_*: not
  router/routed/routing) typed `str` (also `str | None`), or a container of routes typed with `str` as one
  of its own type arguments (``Counter[str]``, ``dict[str, int]``; a ``str | None`` argument is a dtype).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from torch_fl._names import ROUTES

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "torch_fl"
ENUM_MODULE = SRC / "_names.py"
WORDS = frozenset(ROUTES)
ROUTE_NAME = re.compile(r"^_?(?!router|routed|routing)(\w+_)?routes?(_\w+)?$")
SINGULAR = re.compile(r"^_?(\w+_)?route(_kind)?$")
ROUTE_KEYS = {"kind", "verdict", "faster"}  # besides any key naming a route: entries that hold one
# Callables whose arguments include a route; for a mapping's get/pop/setdefault, the default (after the key).
ROUTE_TAKERS = {"Route": 0, "record": 0, "add_time": 0, "_ranged": 0, "range_name": 0, "get": 1, "pop": 1,
                "setdefault": 1}

# Sites left in files that other work owns for now (issue 43): the most each file may keep, and what they
# are. A number may only go down; a file not listed may have none. When a file is converted, delete its line.
ALLOWED: dict[str, tuple[int, str]] = {
    "src/torch_fl/_env.py": (1, "FL_ROUTE parses to dict[str, str] (op -> route word)"),
    "src/torch_fl/cli/routes.py": (3, "--route choices, filters and call counts typed str"),
    "src/torch_fl/description/loader.py": (1, "the schema's key kind 'native' (a name clash, not a route)"),
}


def _route_word(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in WORDS


def _route_words(node: ast.AST) -> bool:
    """A route word, or a literal tuple/list/set of route words only."""
    if _route_word(node):
        return True
    return isinstance(node, ast.Tuple | ast.List | ast.Set) and bool(node.elts) and all(map(_route_word, node.elts))


def _is_str(node: ast.AST) -> bool:
    """`str`, or `str | None` / `Optional[str]`."""
    if isinstance(node, ast.Name):
        return node.id == "str"
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        sides = (node.left, node.right)
        return any(_is_str(s) for s in sides) and all(_is_str(s) or _is_none(s) for s in sides)
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "Optional":
        return _is_str(node.slice)
    return False


def _is_none(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _typed_str(name: str, annotation: ast.AST | None) -> bool:
    """Whether `name` holds routes and `annotation` types them `str`."""
    if annotation is None or not ROUTE_NAME.match(name):
        return False
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):  # a quoted annotation
        annotation = ast.parse(annotation.value, mode="eval").body
    if SINGULAR.match(name) and _is_str(annotation):
        return True
    if isinstance(annotation, ast.Subscript):  # a container: one of its own type arguments is exactly str
        args = annotation.slice.elts if isinstance(annotation.slice, ast.Tuple) else [annotation.slice]
        return any(isinstance(arg, ast.Name) and arg.id == "str" for arg in args)
    return False


def _may_hold_a_route(node: ast.AST) -> bool:
    """False for a mapping's entry under a constant key that names something else (a trace event's
    ``event.get("cat") == "kernel"`` is a category): route, kind, verdict and faster entries hold routes."""
    key = None
    if isinstance(node, ast.Subscript):
        key = node.slice
    elif isinstance(node, ast.Call) and _callee(node) == "get" and node.args:
        key = node.args[0]
    if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
        return True
    return "route" in key.value or key.value in ROUTE_KEYS


def _callee(call: ast.Call) -> str:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def route_sites(source: str) -> list[tuple[int, str]]:
    """(line, what) of each place `source` uses a route word as a string or types a route `str`."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            for i, operand in enumerate(operands):
                key_lookup = i == 0 and isinstance(node.ops[0], ast.In | ast.NotIn) and _route_word(operand)
                others = operands[:i] + operands[i + 1:]
                if _route_words(operand) and not key_lookup and all(map(_may_hold_a_route, others)):
                    found.append((node.lineno, f"a route word compared: {ast.unparse(node)}"))
                    break
        elif isinstance(node, ast.MatchValue) and _route_word(node.value):
            found.append((node.lineno, f"a route word matched: case {ast.unparse(node.value)}"))
        elif isinstance(node, ast.Call) and _callee(node) in ROUTE_TAKERS:
            if any(map(_route_word, node.args[ROUTE_TAKERS[_callee(node)]:])):
                found.append((node.lineno, f"a route word passed: {ast.unparse(node)[:80]}"))
        elif isinstance(node, ast.keyword) and node.arg in ("route", "kind") and _route_word(node.value):
            found.append((node.value.lineno, f"a route word passed: {node.arg}={ast.unparse(node.value)}"))
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            args = node.args
            positional = [*args.posonlyargs, *args.args]
            defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults) + list(args.kw_defaults)
            for arg, default in zip([*positional, *args.kwonlyargs], defaults, strict=True):
                if _typed_str(arg.arg, arg.annotation):
                    found.append((arg.lineno, f"a route typed str: {arg.arg}: {ast.unparse(arg.annotation)}"))
                if default is not None and _route_word(default) and (arg.arg == "kind" or ROUTE_NAME.match(arg.arg)):
                    found.append((arg.lineno, f"a route word as a default: {arg.arg}={ast.unparse(default)}"))
        elif isinstance(node, ast.AnnAssign):
            target = node.target
            name = target.id if isinstance(target, ast.Name) else target.attr if isinstance(target, ast.Attribute) else ""
            if _typed_str(name, node.annotation):
                found.append((node.lineno, f"a route typed str: {name}: {ast.unparse(node.annotation)}"))
    return sorted(found)


def test_routes_are_route_kinds_outside_the_enum_module():
    over, seen = [], {}
    for path in sorted(SRC.rglob("*.py")):
        if path == ENUM_MODULE:
            continue
        name = path.relative_to(ROOT).as_posix()
        sites = route_sites(path.read_text(encoding="utf-8"))
        seen[name] = len(sites)
        allowed = ALLOWED.get(name, (0, ""))[0]
        if len(sites) > allowed:
            over.append(f"{name}: {len(sites)} sites (allowed {allowed})\n" +
                        "\n".join(f"  {name}:{line}: {what}" for line, what in sites))
    assert not over, ("route words used as strings, or routes typed str, outside torch_fl/_names.py (issue 43): "
                      "compare members (route.kind is RouteKind.NATIVE) and type routes RouteKind\n" + "\n".join(over))
    gone = [name for name in ALLOWED if name not in seen]
    assert not gone, f"tests/test_architecture_routes.py allows files that no longer exist: {gone}"


def test_the_scan_finds_each_form_and_leaves_members_and_other_words_alone():
    planted = '''
def f(route: str, kind: RouteKind = "native", *, routes: Counter[str], other_route: "str | None" = None):
    if route == "translate" or kind in ("kernel", "fallback") or row["route"] == "native":
        g(route="unsupported")
        stats.record(op, dtype, "fallback", source), seen.get(op, "kernel")
    match kind:
        case "native":
            pass
    by_route: dict[str, int] = {}
'''
    found = route_sites(planted)
    assert [line for line, _ in found] == [2, 2, 2, 2, 3, 3, 3, 4, 5, 5, 7, 9], found
    clean = '''
def f(route: RouteKind, dtype: str | None, routes: dict[str | None, Route], router: str):
    if route is RouteKind.NATIVE and policy in ("translate-or-fallback", "fallback") and "native" in cache:
        g(key="fallback", route=RouteKind.KERNEL)
    data["ops"]["native"] = cache.get("native")
    if event.get("cat") == "kernel" or row["op"] in ("native", "fallback"):
        pass
'''
    assert route_sites(clean) == []
