"""The detector's core: walking the tree, dispatching nodes to the rules' hooks (``rules/base.py``
``HOOKS``), and recording what they report. It knows no rule: a rule says what it listens to (a callee,
a method, a keyword, an event) and whether its finding claims the site (one finding per node).

Scopes and imports (``scopes.py``), guards and tests (``guards.py``) and data flow (``flow.py``) are
mixins of the one :class:`~torch_fl.migrate.scan.detector.Detector`; the handler table that routes
each node class to its method is built there.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import Any, ClassVar

from ..rules import HOOKS, RULES, FixSafety
from ..rules.base import Pos, Raw, names_vendors, str_value, terminal_name, torch_callee
from .results import pos

# Calls that tell whether CUDA is there; a test made of them guards CUDA-only code.
AVAILABILITY = frozenset({"torch.cuda.is_available", "torch.cuda.device_count", "torch.cuda.is_initialized",
                          "torch.backends.cudnn.is_available"})

# str methods: a receiver they are called on is a string.
STRING_METHODS = frozenset({
    "split", "rsplit", "partition", "rpartition", "startswith", "endswith", "replace", "lower", "upper",
    "strip", "lstrip", "rstrip", "capitalize", "casefold", "title", "swapcase", "encode", "isdigit",
    "isalpha", "isalnum", "find", "rfind", "index", "rindex", "count", "zfill", "ljust", "rjust", "center",
    "removeprefix", "removesuffix", "splitlines", "format", "join",
})

_SKIPPED_FIELDS = frozenset({"ctx", "op", "ops", "name", "id", "attr", "arg", "asname", "module", "level",
                             "type_comment", "kind", "is_async", "conversion", "names"})
_FIELDS: dict[type, tuple[str, ...]] = {}


def child_fields(cls: type) -> tuple[str, ...]:
    fields = _FIELDS.get(cls)
    if fields is None:
        fields = _FIELDS[cls] = tuple(f for f in cls._fields if f not in _SKIPPED_FIELDS)
    return fields


def calls(node: ast.AST) -> Iterator[ast.Call]:
    for sub in ast.walk(node):
        if type(sub) is ast.Call:
            yield sub


class Dispatch:
    """Walking and reporting. ``HANDLERS`` (set by the detector module) maps node classes to methods."""

    HANDLERS: ClassVar[dict[type, Any]] = {}
    call_hooks: ClassVar[list[Any]] = HOOKS.events.setdefault("call", [])  # hook(det, call, callee name)

    # The detector's state (set in Detector.__init__), read by the mixins and by the rules' hooks.
    aliases: dict[str, str]
    raw: list[Raw]
    stmt_line: int
    loop: int
    scope: int  # id() of the innermost function; 0 at module level
    in_class: bool
    quiet: int
    import_fallback: int  # > 0 inside a `try:` that catches ImportError (scopes.py)
    periodic: int
    decorating: int  # > 0 while visiting a function's decorators
    done: set[int]
    availability_calls: int
    fixes_allowed: bool
    locals: dict[int, set[str]]
    functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef]
    constructors: dict[str, ast.FunctionDef]
    imported: dict[str, tuple[str, int, str]]
    string_keys: set[Any]
    check_keys: dict[Any, list[int]]  # a variable holding a CUDA check -> the raw findings of its value
    dropped: set[int]  # raw findings withdrawn (a check found correct after the fact)
    local_calls: list[tuple[int, str]]  # (raw findings so far, name) per call of a module-level function
    project_calls: list[tuple[int, str]]  # (line, text) per call of a function imported relatively
    key_literals: set[int]
    table_keys: dict[Any, int]

    def visit(self, node: ast.AST) -> None:
        handler = self.HANDLERS.get(node.__class__)
        if handler is None:
            self.generic(node)
        else:
            handler(self, node)

    def visit_counted(self, counter: str, node: ast.If | ast.For | ast.AsyncFor | ast.While,
                      *first: ast.AST) -> None:
        """`first` (a test) and the body with the depth `counter` ("loop", "quiet") one higher, then the
        else branch at the depth outside."""
        setattr(self, counter, getattr(self, counter) + 1)
        for inner in (*first, *node.body):
            self.visit(inner)
        setattr(self, counter, getattr(self, counter) - 1)
        for stmt in node.orelse:
            self.visit(stmt)

    def generic(self, node: ast.AST) -> None:
        for name in child_fields(node.__class__):
            value = getattr(node, name, None)
            if type(value) is list:
                for item in value:
                    if isinstance(item, ast.AST):
                        self.visit(item)
            elif isinstance(value, ast.AST):
                self.visit(value)

    def leaf(self, node: ast.AST) -> None:
        pass

    def statement(self, node: ast.stmt) -> None:
        outer, self.stmt_line = self.stmt_line, node.lineno
        self.generic(node)
        self.stmt_line = outer

    def report(self, code: str, where: ast.AST | Pos, safety: FixSafety = None, *,
               replacement: str | None = None, **fields: Any) -> None:
        """Record a finding (dropped inside CUDA-only tests and guards). A node already reported by a
        rule that claims its site is not reported again, except by rules that do not claim sites
        (data-flow findings about a literal another rule may also name)."""
        if self.quiet:
            return
        if not isinstance(where, tuple):
            if id(where) in self.done and RULES[code].claims_site:
                return
            self.done.add(id(where))
        where_pos = where if isinstance(where, tuple) else pos(where)
        if replacement is not None:
            fields.setdefault("replacement", replacement)
        if not self.fixes_allowed:  # the message keeps the replacement it suggests; no fix is offered
            safety, replacement = None, None
        self.raw.append(Raw(code=code, where=where_pos, stmt_line=self.stmt_line, safety=safety, fields=fields,
                            replacement=replacement))

    def claim(self, node: ast.AST) -> None:
        """Mark `node` and everything under it as reported: inner rules stay quiet (one finding per site)."""
        for sub in ast.walk(node):
            self.done.add(id(sub))

    def emit(self, event: str, *args: Any) -> Any:
        hooks = HOOKS.events.get(event)
        if not hooks:
            return False
        result = False
        for hook in hooks:
            result = hook(self, *args) or result
        return result

    def qualname(self, node: ast.AST) -> str | None:
        parts: list[str] = []
        while type(node) is ast.Attribute:
            parts.append(node.attr)
            node = node.value
        if type(node) is not ast.Name:
            return None
        base = self.aliases.get(node.id)
        if base is None:
            return None
        parts.append(base)
        return ".".join(reversed(parts))

    # Expressions the rules listen to --------------------------------------------------------------
    def visit_Compare(self, node: ast.Compare) -> None:
        for operand in (node.left, *node.comparators):
            key = self.key(operand)
            if key is not None and any(str_value(o) is not None for o in (node.left, *node.comparators)):
                self.string_keys.add(key)
        self.emit("compare", node)
        self.generic(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if type(node.op) in (ast.Add, ast.Mod) and any(str_value(side) is not None for side in (node.left, node.right)):
            self.use_as_string(node.left if str_value(node.right) is not None else node.right)  # "run-" + device
        self.emit("binop", node)
        self.generic(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        self.use_as_string(node.slice)  # TABLE[device]: a key, compared by value and type
        if type(node.slice) in (ast.Name, ast.Attribute) and type(node.ctx) is ast.Load:
            key = self.key(node.slice)  # type: ignore[attr-defined]
            if key is not None:
                self.table_keys.setdefault(key, node.lineno)
        if str_value(node.slice) is not None:
            self.key_literals.add(id(node.slice))  # cfg["cuda"]
        self.emit("subscript", node)
        self.generic(node)

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        for value in node.values:
            if type(value) is ast.FormattedValue:
                self.use_as_string(value.value)  # f"{device}": "cuda" and str(torch.device) differ ("cuda:0")
        self.generic(node)

    def use_as_string(self, node: ast.AST) -> None:
        """`node` is used as a string: a value it holds must stay one (see rules/control.py)."""
        if type(node) in (ast.Name, ast.Attribute):
            key = self.key(node)  # type: ignore[attr-defined]
            if key is not None:
                self.string_keys.add(key)

    def note_uses(self, node: ast.Call, qual: str | None) -> None:
        """What a call does with the values it is given: a string method on its receiver
        (`device.split(":")`), and arguments of a callee that is not torch's (opaque: it may do anything)."""
        func = node.func
        if type(func) is ast.Attribute and func.attr in STRING_METHODS:
            self.use_as_string(func.value)
        if torch_callee(self, node):
            return
        for value in (*node.args, *(kw.value for kw in node.keywords)):
            if type(value) in (ast.Name, ast.Attribute):
                key = self.key(value)  # type: ignore[attr-defined]
                if key is not None:
                    self.opaque_keys.add(key)

    def visit_Attribute(self, node: ast.Attribute, qual: str | bool | None = False, called: bool = False) -> None:
        # An attribute chain is checked once, at its outermost node; only its base is visited.
        hooks = HOOKS.members.get(node.attr)
        if hooks:
            for hook in hooks:
                hook(self, node)
        base: ast.AST = node.value
        while type(base) is ast.Attribute:
            base = base.value
        if type(base) is not ast.Name:
            self.visit(node.value)
            return
        if qual is False:
            qual = self.qualname(node)
        if type(qual) is str and qual.startswith("torch.") and id(node) not in self.done:
            self.emit("attribute", node, qual, called)

    def visit_Call(self, node: ast.Call) -> None:
        if self.cuda_only_case(node):
            return
        func = node.func
        if type(func) is ast.Name and func.id == "dict" and names_vendors(kw.arg for kw in node.keywords):
            # dict(cuda=torch.cuda.memory_allocated, xpu=torch.xpu.memory_allocated): a per-vendor table,
            # as the {"cuda": ..., "xpu": ...} display is (flow.visit_Dict)
            self.quiet += 1  # type: ignore[attr-defined]
            for kw in node.keywords:
                self.visit(kw.value)
            self.quiet -= 1  # type: ignore[attr-defined]
            return
        qual = self.qualname(func)
        self.note_uses(node, qual)
        if qual is not None:
            if qual in AVAILABILITY:
                self.availability_calls += 1
            hooks = HOOKS.calls.get(qual)
            if hooks:
                for hook in hooks:
                    hook(self, node, qual)
            else:
                for prefix, hook in HOOKS.call_prefixes:
                    if qual.startswith(prefix):
                        hook(self, node, qual)
        if type(func) is ast.Attribute:
            for hook in HOOKS.methods.get(func.attr, ()):
                hook(self, node, func.attr)
        name = terminal_name(func)
        if type(func) is ast.Name and func.id in self.constructors:  # a class of this module: its __init__
            self.pass_arguments(node, self.constructors[func.id], skip=1)
        if type(func) is ast.Name and func.id in self.functions:
            self.pass_arguments(node, self.functions[func.id])
            self.local_calls.append((len(self.raw), func.id))  # for guards: what the call runs (see Guards.mark)
        elif self.relative_import(func):
            self.project_calls.append((node.lineno, ast.unparse(func)))
            # `train(model, device)` with `from .engine import train`: a device handed to the project's own
            # code (another module, not followed) is used there as a device.
            for value in (*node.args, *(kw.value for kw in node.keywords)):
                if type(value) is ast.Name and "device" in value.id.lower():
                    self.sink("device", value)  # type: ignore[attr-defined]
        for hook in HOOKS.call_names.get(name, ()) if name else ():
            hook(self, node, name)
        for kw in node.keywords:
            if kw.arg is not None and id(kw.value) not in self.done:
                for hook in HOOKS.keywords.get(kw.arg, ()):
                    hook(self, node, kw.arg, kw.value, qual or name)
        if self.call_hooks:  # after every specific hook: what they left unclaimed
            for hook in self.call_hooks:
                hook(self, node, qual or name)
        # Children: the callee's chain (already resolved) and the arguments.
        if type(func) is ast.Attribute:
            self.visit_Attribute(func, qual, called=True)
        elif type(func) is ast.Call:
            # `torch.cuda.amp.autocast()(fn)`: the inner call's result is applied to `fn` as a decorator.
            self.decorating += 1
            self.visit(func)
            self.decorating -= 1
        else:
            self.visit(func)
        for arg in node.args:
            self.visit(arg)
        for kw in node.keywords:
            self.visit(kw.value)
