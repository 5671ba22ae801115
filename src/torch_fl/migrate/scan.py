"""`torchfl scan`'s engine: find CUDA-coupled code with the stdlib ``ast`` module.

Detection uses ``ast`` only (about 4x faster than libcst; see DESIGN.md "Parsing speed"); libcst is
for the fixer, on the files it rewrites. The rules live in ``migrate/rules/`` (one module per family,
each rule's detection and fix together); this module is the one pass over each module that they hook
into: it resolves import aliases (``import torch as th``, ``from torch.cuda.amp import autocast``),
tracks loop nesting (FL203), CUDA-only guards and tests (findings inside them are intended), and
collects assignments and device arguments for the small data flow of FL105 and FL501.

No torch import anywhere on this path: ``torchfl scan`` runs in hook environments without torch.

Suppression: ``# noqa`` on a line silences every finding on it, ``# noqa: FL101, FL202`` only those
codes. The line of the finding counts, and so does the first line of the statement containing it, so
one comment covers a multi-line call. The comment is found by a regex on the line, so the text
``# noqa`` inside a string on that line also counts.

Configuration: the nearest ``pyproject.toml`` with a ``[tool.torch_fl.scan]`` table (or the deprecated
``[tool.torchfl]``), searched from each scanned path upwards (as ruff does), may set ``select``,
``extend-select``, ``ignore`` (codes or prefixes such as "FL1") and ``extend-exclude`` (globs, relative
to that file, also matched against bare file and directory names); see ``torch_fl/config.py``.
Command-line ``--select`` replaces the file's selection; ``--ignore`` adds to it. Exclusions apply while
walking directories; a file named on the command line is always scanned. Performance hints (FL203) are
off unless selected.

Files that cannot be scanned (a syntax error, bytes that are not in the file's encoding) are returned
as :class:`ScanError` records (code E999 or E902), separate from findings, and skipped.
"""

from __future__ import annotations

import ast
import fnmatch
import io
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from ..config import ScanConfig as Config
from ..config import ScanConfigError, load_scan_config
from .rules import HOOKS, RULES, Finding, FixSafety, expand, selected
from .rules.base import str_value, terminal_name
from .rules.libraries import CUDA_ONLY_LIBRARIES, GPU_INTEROP_LIBRARIES

PYTHON_SUFFIXES = (".py", ".pyi")
CUDA_SUFFIXES = (".cu", ".cuh")
SKIP_DIRS = frozenset({
    ".git", ".hg", ".svn", ".venv", "venv", "__pycache__", "build", "dist", "node_modules",
    "site-packages", ".tox", ".nox", ".mypy_cache", ".ruff_cache", ".pytest_cache", ".eggs",
    ".ipynb_checkpoints", "__pypackages__",
})

# Every rule needs one of these words (lower-cased) in the file's text, or a `.item(` call, so a
# module without any is parsed (to report syntax errors) but not walked. Plain substring tests: a
# case-insensitive regex of the same words took as long as ast.parse. Extend this when a rule
# learns a new spelling.
_TRIGGER_WORDS = ("cuda", "cudnn", "nccl", "synchroni", "data_ptr", "storage_offset", "triton", "cupy",
                  "cublas", "nvrtc", "nvml", "device", "rank", "gpu",
                  *{m.split(".")[0] for m in (*CUDA_ONLY_LIBRARIES, *GPU_INTEROP_LIBRARIES)})
_ITEM_CALL = re.compile(r"item\s*\(")
_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*))?", re.IGNORECASE)

# Names assumed to be these modules when no import binds them (snippets, exported notebooks).
_DEFAULT_ALIASES = {"torch": "torch", "os": "os"}
# Calls that tell whether CUDA is there; a test made of them guards CUDA-only code.
AVAILABILITY = frozenset({"torch.cuda.is_available", "torch.cuda.device_count", "torch.cuda.is_initialized",
                          "torch.backends.cudnn.is_available"})
# Test-skip decorators and calls (pytest, unittest) whose condition names CUDA: the test is CUDA-only.
_SKIP_DECORATORS = frozenset({"skipif", "skipIf", "skipUnless"})
_SKIP_CALLS = frozenset({"skip", "skipTest", "SkipTest", "xfail"})
# Functions whose whole body is CUDA-only by its decorator (lightning's RunIf(min_cuda_gpus=1)).
_CUDA_TEST_KEYWORDS = frozenset({"min_cuda_gpus", "min_gpus", "cuda"})


class ScanError(NamedTuple):
    """A file that could not be scanned. ``code`` is "E999" (does not parse) or "E902" (cannot be
    read or decoded); positions as in :class:`Finding`."""

    code: str
    path: str
    line: int
    col: int
    message: str

    @property
    def name(self) -> str:
        return "syntax-error" if self.code == "E999" else "io-error"

    def to_json(self) -> dict[str, Any]:
        return {"code": self.code, "name": self.name, "path": self.path, "line": self.line,
                "col": self.col, "end_line": self.line, "end_col": self.col, "message": self.message,
                "fix_title": None, "fixable": False, "safety": None}


class ScanResult:
    """What :func:`scan_paths` found: findings and errors sorted by (path, line, col), and how many
    files and Python lines were scanned."""

    def __init__(self, findings: list[Finding] | None = None, errors: list[ScanError] | None = None,
                 files: int = 0, lines: int = 0) -> None:
        self.findings: list[Finding] = [] if findings is None else findings
        self.errors: list[ScanError] = [] if errors is None else errors
        self.files = files
        self.lines = lines

    def __repr__(self) -> str:
        return (f"ScanResult({len(self.findings)} findings, {len(self.errors)} errors, {self.files} files, "
                f"{self.lines} lines)")


# Detection ----------------------------------------------------------------------------------------
_Key = tuple[Any, ...]  # ("name", scope, id) or ("member", name)
_Pos = tuple[int, int, int, int]  # lineno, col_offset (UTF-8 bytes), end_lineno, end_col_offset
_Raw = tuple[str, _Pos, int, FixSafety, dict[str, Any], "str | None"]


def _pos(node: ast.AST) -> _Pos:
    return (node.lineno, node.col_offset, node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]


def _calls(node: ast.AST) -> Iterator[ast.Call]:
    for sub in ast.walk(node):
        if type(sub) is ast.Call:
            yield sub


class _Detector:
    """One pass over a module's AST. Rule hooks (rules/*.py) record raw findings through
    :meth:`report`; noqa and selection come afterwards."""

    def __init__(self) -> None:
        self.aliases: dict[str, str] = dict(_DEFAULT_ALIASES)
        self.raw: list[_Raw] = []
        self.stmt_line = 1
        self.loop = 0
        self.scope = 0  # id() of the innermost function; 0 at module level
        self.in_class = False
        self.quiet = 0  # > 0 inside a CUDA-only test or guard: findings there are intended
        self.periodic = 0  # > 0 inside `if step % N == 0:` (a sync there happens every N steps, on purpose)
        self.done: set[int] = set()  # nodes a more specific rule already reported (one finding per site)
        self.pointers: set[str] = set()  # names bound to a data_ptr() value
        self.availability_calls = 0  # torch.cuda.is_available() / device_count() calls seen
        # Data flow (FL105, FL501): kind is "device" or "backend".
        self.sources: list[tuple[str, _Key, ast.expr, str | None, int, str]] = []
        self.sinks: dict[tuple[str, _Key], int] = {}
        self.edges: dict[_Key, set[_Key]] = {}  # `b = a`: a's value reaches b
        self.locals: dict[int, set[str]] = {}  # function id -> names it binds
        self.string_keys: set[_Key] = set()  # keys compared with strings ("cuda" in device)
        self.choices: list[int] = []  # raw findings of device-choice idioms (FL901), settled at the end
        self.choice_keys: dict[int, _Key | None] = {}  # id(choice expression) -> the key it is bound to
        self.functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}  # module-level defs
        # Across modules: `from M import NAME as local` at module level, and module-level sources that
        # reach no sink here (another module may import them).
        self.imported: dict[str, tuple[str, int, str]] = {}  # local -> (module, level, name)
        self.exports: dict[str, list[_Raw]] = {}  # name -> the findings it gets if imported and used

    # Plumbing -------------------------------------------------------------------------------------
    def visit(self, node: ast.AST) -> None:
        handler = _HANDLERS.get(node.__class__)
        if handler is None:
            self.generic(node)
        else:
            handler(self, node)

    def generic(self, node: ast.AST) -> None:
        for name in _child_fields(node.__class__):
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

    def report(self, code: str, where: ast.AST | _Pos, safety: FixSafety = None, *,
               replacement: str | None = None, **fields: Any) -> None:
        """Record a finding (dropped inside CUDA-only tests and guards)."""
        if self.quiet:
            return
        if not isinstance(where, tuple):
            if id(where) in self.done and code not in ("FL105", "FL501"):
                return
            self.done.add(id(where))
        pos = where if isinstance(where, tuple) else _pos(where)
        if replacement is not None:
            fields.setdefault("replacement", replacement)
        self.raw.append((code, pos, self.stmt_line, safety, fields, replacement))

    def claim(self, node: ast.AST) -> None:
        """Mark `node` and everything under it as reported: inner rules stay quiet (one finding per site)."""
        for sub in ast.walk(node):
            self.done.add(id(sub))

    def emit(self, event: str, *args: Any) -> Any:
        hooks = _EVENTS.get(event)
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

    def key(self, target: ast.AST) -> _Key | None:
        """Data-flow key of an assignment target or an argument expression."""
        if type(target) is ast.Name:
            return ("member", target.id) if self.in_class else ("name", self.scope, target.id)
        if type(target) is ast.Attribute:
            return ("member", target.attr)
        if type(target) is ast.Subscript:
            text = str_value(target.slice)
            return None if text is None else ("member", text)
        if (type(target) is ast.Call and type(target.func) is ast.Attribute and target.func.attr == "get"
                and target.args):
            text = str_value(target.args[0])
            return None if text is None else ("member", text)
        if type(target) is ast.Call and type(target.func) is ast.Name and target.func.id == "str" and target.args:
            return self.key(target.args[0])
        return None

    def sink(self, kind: str, node: ast.expr) -> None:
        from .rules.base import alternatives

        for alt in alternatives(node):
            key = self.key(alt)
            if key is None:
                continue
            line = alt.lineno
            self.sinks[(kind, key)] = min(self.sinks.get((kind, key), line), line)

    def source(self, key: _Key | None, value: ast.expr | None, target: str) -> None:
        from .rules.base import cuda_strings, nccl_strings

        if key is None or value is None or self.quiet:
            return  # a value bound inside a CUDA-only test is intended
        for node, index in cuda_strings(value):
            self.sources.append(("device", key, node, index, self.stmt_line, target))
        for node in nccl_strings(value):
            self.sources.append(("backend", key, node, None, self.stmt_line, target))

    def bind_local(self, name: str) -> None:
        if self.scope:
            self.locals.setdefault(self.scope, set()).add(name)

    # Guards ---------------------------------------------------------------------------------------
    def names_cuda(self, test: ast.expr) -> bool:
        """Whether a condition asks about CUDA: torch.cuda.is_available(), device_count(), a comparison
        with "cuda", x.is_cuda, torch.version.cuda."""
        for sub in ast.walk(test):
            kind = type(sub)
            if kind is ast.Call and self.qualname(sub.func) in AVAILABILITY:
                return True
            if kind is ast.Constant and type(sub.value) is str and sub.value.startswith("cuda"):
                return True
            if kind is ast.Attribute and (sub.attr == "is_cuda" or self.qualname(sub) == "torch.version.cuda"):
                return True
        return False

    def cuda_only_test(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> bool:
        """@pytest.mark.skipif(not torch.cuda.is_available(), ...), @unittest.skipUnless(...cuda...),
        @RunIf(min_cuda_gpus=1): the test exists to exercise CUDA."""
        for decorator in node.decorator_list:
            if type(decorator) is not ast.Call:
                continue
            name = terminal_name(decorator.func)
            if name in _SKIP_DECORATORS and decorator.args and self.names_cuda(decorator.args[0]):
                return True
            if any(kw.arg in _CUDA_TEST_KEYWORDS for kw in decorator.keywords):
                return True
        return False

    def is_cuda_mark(self, node: ast.AST) -> bool:
        """A test mark that says "CUDA only": skipif(<CUDA condition>), RunIf(min_cuda_gpus=1)."""
        for call in _calls(node):
            name = terminal_name(call.func)
            if name in _SKIP_DECORATORS and call.args and self.names_cuda(call.args[0]):
                return True
            if any(kw.arg in _CUDA_TEST_KEYWORDS for kw in call.keywords):
                return True
        return False

    def skip_body(self, body: list[ast.stmt]) -> bool:
        """A branch that only skips the test: pytest.skip(...), self.skipTest(...), raise SkipTest, return."""
        for inner in body:
            call = inner.value if type(inner) is ast.Expr else inner.exc if type(inner) is ast.Raise else None
            if type(call) is ast.Call and terminal_name(call.func) in _SKIP_CALLS:
                continue
            if type(inner) is ast.Raise and terminal_name(call) in _SKIP_CALLS:  # type: ignore[arg-type]
                continue
            if type(inner) is ast.Return and inner.value is None:
                continue
            return False
        return bool(body)

    def skips_without_cuda(self, stmt: ast.stmt) -> bool:
        """`if not torch.cuda.is_available(): pytest.skip(...)` (or self.skipTest, raise SkipTest)."""
        if type(stmt) is not ast.If or not self.names_cuda(stmt.test) or stmt.orelse:
            return False
        for inner in stmt.body:
            call = inner.value if type(inner) is ast.Expr else inner.exc if type(inner) is ast.Raise else None
            if type(call) is ast.Call and terminal_name(call.func) in _SKIP_CALLS:
                return True
            if type(inner) is ast.Raise and terminal_name(call if type(call) is not ast.Call else call.func) \
                    in _SKIP_CALLS:
                return True
        return False

    def requires_cuda_library(self, stmt: ast.stmt) -> bool:
        """`assert torch.cuda.is_available(), "bitsandbytes needs CUDA"` / `if ... not torch.cuda.
        is_available(): raise ...("... bitsandbytes ...")`: a correct guard for a CUDA-only library."""
        if type(stmt) is ast.Assert:
            test, message = stmt.test, stmt.msg
        elif type(stmt) is ast.If and len(stmt.body) == 1 and type(stmt.body[0]) is ast.Raise:
            test, message = stmt.test, stmt.body[0].exc
        else:
            return False
        if message is None or not self.names_cuda(test):
            return False
        text = " ".join(n.value for n in ast.walk(message) if type(n) is ast.Constant and type(n.value) is str)
        lowered = text.lower()
        return any(lib.split(".")[0] in lowered for lib in CUDA_ONLY_LIBRARIES) or "bnb" in lowered

    def tuning_only(self, body: list[ast.stmt]) -> bool:
        """A block made only of CUDA-only tuning (cuDNN / CUDA backend flags): guarding it is right."""
        for stmt in body:
            quals = [self.qualname(n) or "" for n in ast.walk(stmt) if type(n) is ast.Attribute]
            if not any(q.startswith(("torch.backends.cudnn", "torch.backends.cuda")) for q in quals):
                return False
        return bool(body)

    def body(self, statements: list[ast.stmt]) -> None:
        """A function or module body: after a `skip unless CUDA` statement, the rest is CUDA-only."""
        quiet = False
        for stmt in statements:
            if not quiet and self.skips_without_cuda(stmt):
                quiet = True
                self.quiet += 1
                continue
            if self.requires_cuda_library(stmt):
                continue
            self.visit(stmt)
        if quiet:
            self.quiet -= 1

    # Imports --------------------------------------------------------------------------------------
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

    # Scopes and loops -----------------------------------------------------------------------------
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
        # pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), ...): a CUDA-only test module.
        for stmt in node.body:
            if (type(stmt) is ast.Assign and any(type(t) is ast.Name and t.id == "pytestmark" for t in stmt.targets)
                    and any(terminal_name(c.func) in _SKIP_DECORATORS and c.args and self.names_cuda(c.args[0])
                            for c in _calls(stmt.value))):
                return
        self.body(node.body)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        outer = self.stmt_line
        self.stmt_line = node.lineno
        self.bind_local(node.name)
        quiet = self.cuda_only_test(node)
        self.quiet += quiet
        self.emit("function", node)
        for expr in node.decorator_list:
            self.visit(expr)
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

    def visit_For(self, node: ast.For | ast.AsyncFor) -> None:
        outer = self.stmt_line
        self.stmt_line = node.lineno
        self.visit(node.target)
        self.visit(node.iter)
        self.loop += 1
        for stmt in node.body:
            self.visit(stmt)
        self.loop -= 1
        for stmt in node.orelse:
            self.visit(stmt)
        self.stmt_line = outer

    def visit_While(self, node: ast.While) -> None:
        outer = self.stmt_line
        self.stmt_line = node.lineno
        self.loop += 1  # the condition runs once per iteration too
        self.visit(node.test)
        for stmt in node.body:
            self.visit(stmt)
        self.loop -= 1
        for stmt in node.orelse:
            self.visit(stmt)
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
            value = getattr(node, name, None)
            if value is not None:
                self.visit(value)
        self.loop -= 1

    # Statements with data flow --------------------------------------------------------------------
    def visit_Assign(self, node: ast.Assign) -> None:
        outer, self.stmt_line = self.stmt_line, node.lineno
        for target in node.targets:
            if type(target) is ast.Tuple and type(node.value) is ast.Tuple \
                    and len(target.elts) == len(node.value.elts):
                for elt, value in zip(target.elts, node.value.elts, strict=True):
                    self.assign(elt, value)
            else:
                self.assign(target, node.value)
        self.generic(node)
        self.stmt_line = outer

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        outer, self.stmt_line = self.stmt_line, node.lineno
        if node.value is not None:
            self.assign(node.target, node.value)
        self.generic(node)
        self.stmt_line = outer

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        outer, self.stmt_line = self.stmt_line, node.lineno
        self.emit("augassign", node)
        self.generic(node)
        self.stmt_line = outer

    def assign(self, target: ast.expr, value: ast.expr) -> None:
        from .rules.base import cuda_or_nccl

        if type(target) is ast.Name:
            self.bind_local(target.id)
        if type(value) is ast.Call and terminal_name(value.func) == "field":  # dataclass field(default=)
            value = next((kw.value for kw in value.keywords if kw.arg == "default"), value)
        key = self.key(target)
        self.source(key, value, ast.unparse(target) if cuda_or_nccl(value) else "")
        if key is not None and type(value) in (ast.Name, ast.Attribute):
            origin = self.key(value)
            if origin is not None and origin != key:
                self.edges.setdefault(origin, set()).add(key)
        self.emit("assign", target, value)

    def visit_Dict(self, node: ast.Dict) -> None:
        for key, value in zip(node.keys, node.values, strict=True):
            text = str_value(key)
            if text is not None:
                self.source(("member", text), value, f'["{text}"]')
        self.emit("dict", node)
        self.generic(node)

    # Expressions ----------------------------------------------------------------------------------
    def visit_Assert(self, node: ast.Assert) -> None:
        if not self.requires_cuda_library(node):  # `assert torch.cuda.is_available(), "bitsandbytes ..."`
            self.statement(node)

    def visit_If(self, node: ast.If) -> None:
        outer, self.stmt_line = self.stmt_line, node.lineno
        if (self.names_cuda(node.test) and self.skip_body(node.body)) or self.requires_cuda_library(node):
            # `if not torch.cuda.is_available(): pytest.skip(...)`: a CUDA-only test says so; correct.
            self.quiet += 1
            self.visit(node.test)
            for stmt in node.body:
                self.visit(stmt)
            self.quiet -= 1
            for stmt in node.orelse:
                self.visit(stmt)
            self.stmt_line = outer
            return
        guard = self.names_cuda(node.test) and self.tuning_only(node.body)
        if guard:
            # `if torch.cuda.is_available(): torch.backends.cudnn.benchmark = True`: CUDA-only tuning,
            # correctly guarded: neither the guard nor the flags are couplings.
            self.quiet += 1
        before = self.availability_calls
        self.visit(node.test)
        self.emit("if", node, self.availability_calls > before)
        periodic = any(type(n) is ast.BinOp and type(n.op) is ast.Mod for n in ast.walk(node.test))
        self.periodic += periodic
        for stmt in node.body:
            self.visit(stmt)
        self.periodic -= periodic
        self.quiet -= guard
        for stmt in node.orelse:
            self.visit(stmt)
        self.stmt_line = outer

    def visit_IfExp(self, node: ast.IfExp) -> None:
        self.emit("ifexp", node)
        self.visit(node.test)
        self.visit(node.body)
        self.visit(node.orelse)

    def visit_Compare(self, node: ast.Compare) -> None:
        for operand in (node.left, *node.comparators):
            key = self.key(operand)
            if key is not None and any(str_value(o) is not None for o in (node.left, *node.comparators)):
                self.string_keys.add(key)
        self.emit("compare", node)
        self.generic(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        self.emit("binop", node)
        self.generic(node)

    def is_pointer(self, node: ast.AST) -> bool:
        return (type(node) is ast.Call and type(node.func) is ast.Attribute
                and node.func.attr in ("data_ptr", "storage_offset")) or (
            type(node) is ast.Name and node.id in self.pointers)

    def is_pointer_math(self, node: ast.AST) -> bool:
        return (type(node) is ast.BinOp and type(node.op) in (ast.Add, ast.Sub)
                and (self.is_pointer(node.left) or self.is_pointer(node.right)))

    def visit_Subscript(self, node: ast.Subscript) -> None:
        self.emit("subscript", node)
        self.generic(node)

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

    # Calls ----------------------------------------------------------------------------------------
    def visit_Call(self, node: ast.Call) -> None:
        if terminal_name(node.func) == "param" and any(kw.arg == "marks" and self.is_cuda_mark(kw.value)
                                                       for kw in node.keywords):
            return  # pytest.param(torch.device("cuda"), marks=RunIf(min_cuda_gpus=1)): a CUDA-only case
        func = node.func
        qual = self.qualname(func)
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
        if type(func) is ast.Name and func.id in self.functions:
            self.pass_arguments(node, self.functions[func.id])
        for hook in HOOKS.call_names.get(name, ()) if name else ():
            hook(self, node, name)
        for kw in node.keywords:
            if kw.arg is not None and id(kw.value) not in self.done:
                for hook in HOOKS.keywords.get(kw.arg, ()):
                    hook(self, node, kw.arg, kw.value, qual or name)
        # Children: the callee's chain (already resolved) and the arguments.
        if type(func) is ast.Attribute:
            self.visit_Attribute(func, qual, called=True)
        else:
            self.visit(func)
        for arg in node.args:
            self.visit(arg)
        for kw in node.keywords:
            self.visit(kw.value)

    def pass_arguments(self, call: ast.Call, function: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        """`evaluate(args.device)` with `def evaluate(device): model.to(device)`: the argument's value
        reaches the parameter (a module's own functions, by position or keyword)."""
        params = [a.arg for a in (*function.args.posonlyargs, *function.args.args)]
        named = set(params) | {a.arg for a in function.args.kwonlyargs}
        pairs = [(params[i], arg) for i, arg in enumerate(call.args) if i < len(params) and type(arg) is not ast.Starred]
        pairs += [(kw.arg, kw.value) for kw in call.keywords if kw.arg in named]
        for param, value in pairs:
            origin = self.key(value)
            if origin is not None:
                self.edges.setdefault(origin, set()).add(("name", id(function), param))

    # Results --------------------------------------------------------------------------------------
    def reaches(self, kind: str, key: _Key) -> int | None:
        """The first line where a value bound to `key` reaches a `kind` sink, following `b = a` edges.
        A module global is read in any function that does not bind the same name itself."""
        seen: set[_Key] = set()
        pending = [key]
        best: int | None = None
        while pending:
            current = pending.pop()
            if current in seen:
                continue
            seen.add(current)
            candidates = [current]
            if current[0] == "name" and current[1] == 0:
                candidates += [sink_key for (k, sink_key) in self.sinks if k == kind and sink_key[0] == "name"
                               and sink_key[2] == current[2] and current[2] not in self.locals.get(sink_key[1], ())]
            for candidate in candidates:
                line = self.sinks.get((kind, candidate))
                if line is not None:
                    best = line if best is None else min(best, line)
            pending.extend(self.edges.get(current, ()))
            if current[0] == "name" and current[1] == 0:
                for origin, targets in self.edges.items():
                    if origin[0] == "name" and origin[2] == current[2] and origin[1] \
                            and current[2] not in self.locals.get(origin[1], ()):
                        pending.extend(targets)
        return best

    def flows(self) -> None:
        """Sources that reach a sink become FL105 / FL501 findings (one per literal), via the "flow" hooks."""
        seen: set[int] = set()
        for kind, key, node, index, stmt_line, target in self.sources:
            if id(node) in seen or id(node) in self.done:
                continue
            line = self.reaches(kind, key)
            if line is None:
                if key[0] == "name" and key[1] == 0:  # a module global: maybe used where it is imported
                    before = len(self.raw)
                    self.stmt_line = stmt_line
                    self.emit("flow", kind, node, index, target, 0)
                    self.exports.setdefault(key[2], []).extend(self.raw[before:])
                    del self.raw[before:]
                continue
            seen.add(id(node))
            self.stmt_line = stmt_line
            self.emit("flow", kind, node, index, target, line)
        self.emit("finish")

    def imported_sinks(self) -> list[tuple[str, int, str, int]]:
        """(module, level, name, line) for each imported name whose value reaches a device or backend
        argument here."""
        found = []
        for local, (module, level, name) in self.imported.items():
            lines = [line for kind in ("device", "backend")
                     if (line := self.reaches(kind, ("name", 0, local))) is not None]
            if lines:
                found.append((module, level, name, min(lines)))
        return found


_SKIPPED_FIELDS = frozenset({"ctx", "op", "ops", "name", "id", "attr", "arg", "asname", "module", "level",
                             "type_comment", "kind", "is_async", "conversion", "names"})
_FIELDS: dict[type, tuple[str, ...]] = {}


def _child_fields(cls: type) -> tuple[str, ...]:
    fields = _FIELDS.get(cls)
    if fields is None:
        fields = _FIELDS[cls] = tuple(f for f in cls._fields if f not in _SKIPPED_FIELDS)  # type: ignore[attr-defined]
    return fields


def _all_subclasses(cls: type) -> Iterator[type]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _all_subclasses(sub)


_EVENTS = HOOKS.events
_D = _Detector
_HANDLERS: dict[type, Any] = {cls: _D.statement for cls in _all_subclasses(ast.stmt)}
_HANDLERS.update({cls: _D.leaf for cls in (ast.Name, ast.Constant, ast.Pass, ast.Break, ast.Continue)})
_HANDLERS.update({
    ast.Module: _D.visit_Module, ast.Import: _D.visit_Import, ast.ImportFrom: _D.visit_ImportFrom,
    ast.FunctionDef: _D.visit_FunctionDef, ast.AsyncFunctionDef: _D.visit_FunctionDef,
    ast.Lambda: _D.visit_Lambda, ast.ClassDef: _D.visit_ClassDef,
    ast.For: _D.visit_For, ast.AsyncFor: _D.visit_For, ast.While: _D.visit_While,
    ast.ListComp: _D.visit_comprehension, ast.SetComp: _D.visit_comprehension,
    ast.GeneratorExp: _D.visit_comprehension, ast.DictComp: _D.visit_comprehension,
    ast.Assign: _D.visit_Assign, ast.AnnAssign: _D.visit_AnnAssign, ast.AugAssign: _D.visit_AugAssign,
    ast.Dict: _D.visit_Dict, ast.If: _D.visit_If, ast.IfExp: _D.visit_IfExp,
    ast.Compare: _D.visit_Compare, ast.BinOp: _D.visit_BinOp, ast.Subscript: _D.visit_Subscript,
    ast.Attribute: _D.visit_Attribute, ast.Call: _D.visit_Call, ast.Assert: _D.visit_Assert,
})


# From raw findings to Finding ---------------------------------------------------------------------
def _char_col(lines: list[str], lineno: int, byte_col: int) -> int:
    """1-based character column of a UTF-8 byte offset (what ast reports)."""
    line = lines[lineno - 1] if 0 < lineno <= len(lines) else ""
    if line.isascii():
        return byte_col + 1
    return len(line.encode("utf-8")[:byte_col].decode("utf-8", "replace")) + 1


def _suppressed(lines: list[str], lineno: int, code: str) -> bool:
    if not 0 < lineno <= len(lines) or "noqa" not in lines[lineno - 1].lower():
        return False
    match = _NOQA.search(lines[lineno - 1])
    if match is None:
        return False
    codes = match.group("codes")
    return codes is None or code in re.split(r"[\s,]+", codes.upper())


def _finding(code: str, path: str, pos: _Pos, lines: list[str], safety: FixSafety,
             fields: dict[str, Any], unsafe_fixes: bool, replacement: str | None) -> Finding:
    rule = RULES[code]
    line, col, end_line, end_col = pos
    fixable = safety == "safe" or (unsafe_fixes and safety == "unsafe")
    return Finding(code, rule.name, path, line, _char_col(lines, line, col), end_line,
                   _char_col(lines, end_line, end_col), rule.message_template.format(**fields),
                   rule.fix_title.format(**fields), fixable, safety, replacement)


def _parse(text: str, path: str) -> ast.Module:
    try:
        return ast.parse(text, filename=path)
    except SyntaxError:
        raise
    except (ValueError, MemoryError, RecursionError) as exc:  # null bytes, absurd nesting
        raise SyntaxError(str(exc), (path, 1, 1, None)) from None


def _has_trigger(text: str) -> bool:
    lowered = text.lower()
    return any(word in lowered for word in _TRIGGER_WORDS) or _ITEM_CALL.search(text) is not None


class _ModuleFacts(NamedTuple):
    """What one module offers the cross-module pass: its unreached module-level sources, the imported
    names it passes to a device or backend argument, and what is needed to turn a source into a finding."""

    exports: dict[str, list[_Raw]]
    imports: list[tuple[str, int, str, int]]
    lines: list[str]
    codes: frozenset[str]
    unsafe_fixes: bool


def _scan_text(text: str, path: str, codes: frozenset[str], unsafe_fixes: bool,
               facts: dict[str, _ModuleFacts] | None = None) -> list[Finding]:
    tree = _parse(text, path)
    if not _has_trigger(text):
        return []
    detector = _Detector()
    try:
        detector.visit(tree)
    except RecursionError:
        raise SyntaxError("too deeply nested for the scanner", (path, 1, 1, None)) from None
    detector.flows()
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if facts is not None:
        imports = detector.imported_sinks()
        if detector.exports or imports:
            facts[path] = _ModuleFacts(detector.exports, imports, lines, codes, unsafe_fixes)
    if not detector.raw:
        return []
    findings = []
    for code, pos, stmt_line, safety, fields, replacement in detector.raw:
        if code not in codes or _suppressed(lines, pos[0], code) or _suppressed(lines, stmt_line, code):
            continue
        findings.append(_finding(code, path, pos, lines, safety, fields, unsafe_fixes, replacement))
    findings.sort(key=lambda f: f.sort_key)
    return findings


def enabled_codes(select: Iterable[str] | None, ignore: Iterable[str] | None,
                  config: Config | None = None) -> frozenset[str]:
    """The rule codes in force: the coupling rules, then the config's scan table, then select/ignore as
    on the command line."""
    try:
        layers: list[tuple[Any, ...]] = [] if config is None else [
            (config.select, config.ignore, config.extend_select)]
        return selected(*layers, (None if select is None else list(select), list(ignore or ())))
    except ValueError as exc:
        raise ScanConfigError(str(exc)) from None


def scan_source(source: str, path: str = "<string>", *, select: Iterable[str] | None = None,
                ignore: Iterable[str] | None = None, unsafe_fixes: bool = False) -> list[Finding]:
    """Findings in one module's source, sorted by position, after ``# noqa`` and selection.

    Args:
        source: Python source text.
        path: the name findings carry.
        select, ignore: codes or prefixes ("FL1", "FL203"); default the coupling rules (FL203, a
            performance hint, only when selected).
        unsafe_fixes: count findings with an unsafe fix as fixable.

    Raises:
        SyntaxError: the source does not parse (null bytes and absurd nesting included).

    Example:
        >>> [f.code for f in scan_source('import torch\\nx = torch.zeros(3).cuda()\\n')]
        ['FL102']
    """
    return _scan_text(source, path, enabled_codes(select, ignore), unsafe_fixes)


# Files, directories and configuration -------------------------------------------------------------
class _Unreadable(Exception):
    """A file whose bytes are not text in its declared (or the default UTF-8) encoding."""


def _read_source(path: Path) -> str:
    data = path.read_bytes()
    head = data[:400]
    if b"coding" not in head and not head.startswith(b"\xef\xbb\xbf"):
        try:
            return data.decode("utf-8")  # PEP 3120 default; tokenize is imported only for a cookie or BOM
        except UnicodeDecodeError as exc:
            raise _Unreadable(f"the bytes are not valid in the file's encoding (UTF-8 unless a PEP 263 "
                              f"coding comment says otherwise): {exc.reason}") from None
    import tokenize

    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        return data.decode(encoding)
    except (SyntaxError, UnicodeDecodeError, LookupError) as exc:
        # detect_encoding reports undecodable first lines and unknown cookies as SyntaxError.
        detail = exc.reason if isinstance(exc, UnicodeDecodeError) else getattr(exc, "msg", str(exc))
        raise _Unreadable(f"the bytes are not valid in the file's encoding (UTF-8 unless a PEP 263 "
                          f"coding comment says otherwise): {detail}") from None


def load_config(start: Path) -> Config:
    """The scan table of the nearest config above `start` (see ``torch_fl.config.load_scan_config``)."""
    return load_scan_config(start, expand)


def _excluded(path: Path, config: Config) -> bool:
    if not config.extend_exclude:
        return False
    try:
        relative = path.resolve().relative_to(config.root).as_posix()  # type: ignore[arg-type]
    except ValueError:
        relative = path.as_posix()
    return any(fnmatch.fnmatchcase(relative, pattern) or fnmatch.fnmatchcase(path.name, pattern)
               for pattern in config.extend_exclude)


def iter_files(root: Path, config: Config | None = None) -> Iterator[Path]:
    """Python and CUDA source files under `root` in sorted order, skipping SKIP_DIRS and the
    config's extend-exclude globs. A file given as `root` is yielded whatever its name."""
    config = Config() if config is None else config
    if not root.is_dir():
        yield root
        return
    stack = [root]
    while stack:
        directory = stack.pop()
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError:
            continue
        subdirs = []
        for entry in entries:
            path = directory / entry.name
            if entry.is_dir(follow_symlinks=False):
                if entry.name not in SKIP_DIRS and not _excluded(path, config):
                    subdirs.append(path)
            elif entry.name.endswith(PYTHON_SUFFIXES + CUDA_SUFFIXES) and not _excluded(path, config):
                yield path
        stack.extend(reversed(subdirs))


def _module_names(path: str) -> set[str]:
    """Dotted names `path` may be imported as: every suffix of its path (pkg/sub/mod.py is mod, sub.mod,
    pkg.sub.mod; a package's __init__.py is the package)."""
    parts = list(Path(path).with_suffix("").parts)
    if parts and parts[-1] == "__init__":
        parts.pop()
    return {".".join(parts[i:]) for i in range(len(parts))}


def _cross_module(facts: dict[str, _ModuleFacts]) -> list[Finding]:
    """FL105 / FL501 for a module global holding "cuda" or "nccl" that another scanned module imports
    and passes to a device or backend argument (`from config import DEVICE; x.to(DEVICE)`)."""
    by_name: dict[str, list[str]] = {}
    for path, fact in facts.items():
        if fact.exports:
            for name in _module_names(path):
                by_name.setdefault(name, []).append(path)
    findings = []
    done: set[tuple[str, int, int]] = set()
    for importer, fact in facts.items():
        for module, level, name, line in fact.imports:
            if level:  # from .config import DEVICE: relative to the importer's package
                base = Path(importer).parent
                for _ in range(level - 1):
                    base = base.parent
                wanted = [str(base / (module.replace(".", "/") if module else "")).replace("/", ".").lstrip(".")]
                candidates = [p for key in wanted for p in by_name.get(key, ())]
            else:
                candidates = by_name.get(module, [])
            for source in candidates:
                exporter = facts[source]
                for code, pos, stmt_line, _safety, fields, _replacement in exporter.exports.get(name, ()):
                    if (source, pos[0], pos[1]) in done or code not in exporter.codes \
                            or _suppressed(exporter.lines, pos[0], code) \
                            or _suppressed(exporter.lines, stmt_line, code):
                        continue
                    done.add((source, pos[0], pos[1]))
                    where = f"{importer}:{line}"
                    fields = {**fields, "sink_line": where}
                    if code == "FL501":
                        fields["detail"] = f" (via `{name}`, used in {where})"
                    # Reported without a fix: `torchfl fix` works one file at a time, and the literal's
                    # meaning depends on the importer's use.
                    findings.append(_finding(code, source, pos, exporter.lines, None, fields,
                                             exporter.unsafe_fixes, None))
    return findings


def scan_file(path: Path, codes: frozenset[str] | None = None, *, unsafe_fixes: bool = False,
              facts: dict[str, _ModuleFacts] | None = None) -> tuple[list[Finding], ScanError | None, int]:
    """Scan one file: (findings, error or None, Python lines). `.cu`/`.cuh` files give FL702."""
    codes = frozenset(RULES) if codes is None else codes
    name = str(path)
    if path.name.endswith(CUDA_SUFFIXES):
        if "FL702" not in codes:
            return [], None, 0
        rule = RULES["FL702"]
        return [Finding("FL702", rule.name, name, 1, 1, 1, 1, rule.message_template, rule.fix_title,
                        False, None)], None, 0
    try:
        text = _read_source(path)
    except _Unreadable as exc:
        return [], ScanError("E902", name, 1, 1, f"cannot decode: {exc}"), 0
    except OSError as exc:
        return [], ScanError("E902", name, 1, 1, f"cannot read: {exc.strerror or exc}"), 0
    lines = text.count("\n") + (1 if text and not text.endswith("\n") else 0)
    try:
        return _scan_text(text, name, codes, unsafe_fixes, facts), None, lines
    except SyntaxError as exc:
        message = f"SyntaxError: {exc.msg} (file skipped)"
        return [], ScanError("E999", name, exc.lineno or 1, exc.offset or 1, message), lines


def scan_paths(paths: Sequence[str | os.PathLike[str]], select: Iterable[str] | None = None,
               ignore: Iterable[str] | None = None, *, unsafe_fixes: bool = False) -> ScanResult:
    """Scan files and directories (recursively).

    Each path uses the scan table of the nearest config above it ([tool.torch_fl.scan]); `select` and
    `ignore` come on top of it as on the command line. Findings carry paths as given (``src`` gives
    ``src/model.py``), so relative arguments give relative, machine-independent paths.

    Raises:
        ScanConfigError: a selector that names no rule, or a bad scan table.
        FileNotFoundError: a path that does not exist.

    Example:
        >>> result = scan_paths(["src"], ignore=["FL203"])  # doctest: +SKIP
        >>> result.findings[0].code, result.files, result.lines  # doctest: +SKIP
    """
    result = ScanResult()
    facts: dict[str, _ModuleFacts] = {}
    for path, codes in targets(paths, select, ignore):
        findings, error, lines = scan_file(path, codes, unsafe_fixes=unsafe_fixes, facts=facts)
        result.files += 1
        result.lines += lines
        result.findings.extend(findings)
        if error is not None:
            result.errors.append(error)
    result.findings.extend(_cross_module(facts))
    result.findings.sort(key=lambda f: f.sort_key)
    result.errors.sort(key=lambda e: (e.path, e.line, e.col))
    return result


def targets(paths: Iterable[str | os.PathLike[str]], select: Iterable[str] | None = None,
            ignore: Iterable[str] | None = None) -> Iterator[tuple[Path, frozenset[str]]]:
    """Every file under `paths` once, with the codes enabled for it (its nearest scan table plus
    select/ignore): what `torchfl scan` scans and `torchfl fix` fixes."""
    seen: set[Path] = set()
    select = None if select is None else list(select)
    ignore = list(ignore or ())
    for argument in paths:
        root = Path(argument)
        if not root.exists():
            raise FileNotFoundError(f"{argument}: no such file or directory")
        config = load_config(root)
        codes = enabled_codes(select, ignore, config)
        for path in iter_files(root, config):
            resolved = path.resolve()
            if resolved not in seen:
                seen.add(resolved)
                yield path, codes


def findings_json(result: ScanResult) -> list[dict[str, Any]]:
    """Findings and errors as one list of JSON objects, sorted by position (`torchfl scan --format
    json`)."""
    items = [f.to_json() for f in result.findings] + [e.to_json() for e in result.errors]
    return sorted(items, key=lambda i: (i["path"], i["line"], i["col"], i["code"]))


__all__ = ["Config", "Finding", "ScanConfigError", "ScanError", "ScanResult", "enabled_codes",
           "findings_json", "iter_files", "load_config", "scan_file", "scan_paths", "scan_source", "targets"]
