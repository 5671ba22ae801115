"""Scopes and aliases: which module a name stands for (``import torch as th``, ``from torch.cuda.amp
import autocast``), the innermost function and class, and loop depth (a call inside a loop runs once
per iteration)."""

from __future__ import annotations

import ast
import os
from typing import Any

from .dispatch import Dispatch

# Names assumed to be these modules when no import binds them (snippets, exported notebooks).
DEFAULT_ALIASES = {"torch": "torch", "os": "os"}


_PACKAGES: dict[str, str | None] = {}  # directory -> the top-level package it is in (None: not in one)


def own_package(path: str) -> str | None:
    """The top-level package a scanned file belongs to: the outermost folder of the run of folders with an
    __init__.py that holds it (composer/composer/utils/device.py -> "composer"). None for a file outside a
    package, a path that is not a file (source given as text), and torch's own sources, whose torch
    names the rules read as torch's."""
    if not os.path.isfile(path):
        return None
    folder = os.path.dirname(os.path.abspath(path))
    if folder in _PACKAGES:
        return _PACKAGES[folder]
    top, current = None, folder
    while os.path.isfile(os.path.join(current, "__init__.py")):
        top = os.path.basename(current)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    _PACKAGES[folder] = None if top == "torch" else top
    return _PACKAGES[folder]


class Scopes(Dispatch):
    """Imports, functions, classes, loops (a mixin of the detector)."""

    package: str | None = None  # the top-level package of the file (own_package), None when unknown

    def bind_local(self, name: str) -> None:
        if self.scope:
            self.locals.setdefault(self.scope, set()).add(name)

    def bind_import(self, node: ast.Import | ast.ImportFrom) -> None:
        if type(node) is ast.Import:
            for alias in node.names:
                if alias.asname:
                    self.aliases[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    self.aliases[top] = top
        elif node.module and not node.level:
            for alias in node.names:
                if alias.name != "*":
                    self.aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        if type(node) is ast.ImportFrom and not self.scope and not self.in_class:
            for alias in node.names:
                if alias.name != "*":
                    self.imported[alias.asname or alias.name] = (node.module or "", node.level, alias.name)

    def relative_import(self, func: ast.expr) -> bool:
        """Whether a call's function comes from the project's own package: by a relative import (`from
        .util import dev` then `dev()`, or `from . import dist_util` then `dist_util.dev()`), or by an
        absolute one that names the package this file is in (`from composer.devices import DeviceGPU` in
        composer/utils/device.py, also inside a function)."""
        name = func.id if type(func) is ast.Name else \
            func.value.id if type(func) is ast.Attribute and type(func.value) is ast.Name else None
        if name is None:
            return False
        found = self.imported.get(name)
        if found is not None and found[1] > 0:
            return True
        qual = self.aliases.get(name)
        return bool(self.package) and qual is not None and qual.split(".")[0] == self.package

    def visit_Import(self, node: ast.Import) -> None:
        self.stmt_line = node.lineno
        self.bind_import(node)
        for alias in node.names:
            self.emit("import", alias.name, alias)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        self.stmt_line = node.lineno
        self.bind_import(node)
        if node.level or not node.module:
            return
        if not self.emit("import", node.module, node):
            for alias in node.names:
                self.emit("import", f"{node.module}.{alias.name}", alias)

    def visit_Module(self, node: ast.Module) -> None:
        # Bind top-level imports first so functions defined above an import still resolve it.
        pending: list[ast.stmt] = list(node.body)
        while pending:
            stmt = pending.pop()
            if type(stmt) in (ast.Import, ast.ImportFrom):
                self.bind_import(stmt)  # type: ignore[arg-type]
            elif type(stmt) in (ast.If, ast.Try, getattr(ast, "TryStar", ast.Try)):
                for name in ("body", "orelse", "finalbody", "handlers"):
                    for child in getattr(stmt, name, ()):
                        pending.extend(child.body if type(child) is ast.ExceptHandler else [child])
        for stmt in node.body:
            if type(stmt) in (ast.FunctionDef, ast.AsyncFunctionDef):
                self.functions[stmt.name] = stmt  # type: ignore[assignment]
            elif type(stmt) is ast.ClassDef:
                init = next((f for f in stmt.body if type(f) is ast.FunctionDef and f.name == "__init__"), None)  # type: ignore[attr-defined]
                if init is not None:
                    self.constructors[stmt.name] = init  # type: ignore[attr-defined]
        if self.cuda_only_module(node):
            return
        self.body(node.body)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        outer = self.stmt_line
        self.stmt_line = node.lineno
        self.bind_local(node.name)
        quiet = self.cuda_only_test(node)
        self.quiet += quiet
        self.emit("function", node)
        self.decorating += 1  # a call here is applied to the function, not entered (`@autocast()`)
        for expr in node.decorator_list:
            self.visit(expr)
        self.decorating -= 1
        args = node.args
        positional = [*args.posonlyargs, *args.args]
        for arg, default in zip(positional[len(positional) - len(args.defaults):], args.defaults, strict=True):
            self.source(("name", id(node), arg.arg), default, arg.arg)
        for arg, default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
            self.source(("name", id(node), arg.arg), default, arg.arg)
        self.visit(args)
        if node.returns is not None:
            self.visit(node.returns)
        saved = (self.loop, self.scope, self.in_class)
        self.loop, self.scope, self.in_class = 0, id(node), False
        self.locals[id(node)] = {a.arg for a in (*positional, *args.kwonlyargs, args.vararg, args.kwarg) if a}
        self.body(node.body)
        self.loop, self.scope, self.in_class = saved
        self.quiet -= quiet
        self.stmt_line = outer

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self.visit(node.args)
        saved, self.loop = self.loop, 0
        self.visit(node.body)
        self.loop = saved

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        outer = self.stmt_line
        self.stmt_line = node.lineno
        quiet = self.cuda_only_test(node)
        self.quiet += quiet
        for expr in (*node.decorator_list, *node.bases, *node.keywords):
            self.visit(expr)
        saved = (self.loop, self.in_class)
        self.loop, self.in_class = 0, True
        self.body(node.body)
        self.loop, self.in_class = saved
        self.quiet -= quiet
        self.stmt_line = outer

    def visit_Try(self, node: ast.Try) -> None:
        """`try: import fused_layer_norm_cuda` / `except ImportError:`: the code has a way without the
        import, so an import there is optional (rules read ``import_fallback``)."""
        outer, self.stmt_line = self.stmt_line, node.lineno
        optional = any(_catches_import_error(handler.type) for handler in node.handlers)
        self.import_fallback += optional
        for stmt in node.body:
            self.visit(stmt)
        self.import_fallback -= optional
        for part in (node.handlers, node.orelse, node.finalbody):
            for stmt in part:
                self.visit(stmt)
        self.stmt_line = outer

    def visit_For(self, node: ast.For | ast.AsyncFor) -> None:
        outer = self.stmt_line
        self.stmt_line = node.lineno
        self.visit(node.target)
        self.visit(node.iter)
        if type(node.iter) in (ast.Tuple, ast.List, ast.Set):
            self.bind_strings(node.target, node.iter)  # type: ignore[attr-defined]  # for key in ("A", "B"):
        self.visit_counted("loop", node)
        self.stmt_line = outer

    def visit_While(self, node: ast.While) -> None:
        outer = self.stmt_line
        self.stmt_line = node.lineno
        self.visit_counted("loop", node, node.test)  # the condition runs once per iteration too
        self.stmt_line = outer

    def visit_comprehension(self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp) -> None:
        first, *rest = node.generators
        if type(node) is ast.DictComp:
            self.emit("dictcomp", node)
        self.visit(first.iter)  # evaluated once, before the loop
        self.loop += 1
        self.visit(first.target)
        for expr in first.ifs:
            self.visit(expr)
        for gen in rest:
            self.visit(gen)
        for name in ("elt", "key", "value"):
            value: Any = getattr(node, name, None)
            if value is not None:
                self.visit(value)
        self.loop -= 1




# Exceptions whose handler catches a failed import.
_IMPORT_ERRORS = frozenset({"ImportError", "ModuleNotFoundError", "Exception", "BaseException"})


def _catches_import_error(kind: ast.expr | None) -> bool:
    if kind is None:
        return True  # a bare `except:`
    kinds = kind.elts if type(kind) is ast.Tuple else [kind]
    return any((k.id if type(k) is ast.Name else k.attr if type(k) is ast.Attribute else "") in _IMPORT_ERRORS
               for k in kinds)
