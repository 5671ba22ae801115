"""`torchfl scan`'s engine: find CUDA-coupled code with the stdlib ``ast`` module.

Detection uses ``ast`` only (about 4x faster than libcst; see DESIGN.md "Parsing speed"); libcst is
for the fixer, on the files it rewrites. One pass over each module resolves import aliases
(``import torch as th``, ``from torch.cuda.amp import autocast``), tracks loop nesting (FL203) and
collects assignments and device arguments for the small data flow of FL105 and FL501.

Suppression: ``# noqa`` on a line silences every finding on it, ``# noqa: FL101, FL202`` only those
codes. The line of the finding counts, and so does the first line of the statement containing it, so
one comment covers a multi-line call. The comment is found by a regex on the line, so the text
``# noqa`` inside a string on that line also counts.

Configuration: the nearest ``pyproject.toml`` with a ``[tool.torchfl]`` table, searched from each
scanned path upwards (as ruff does), may set ``select``, ``ignore`` (codes or prefixes such as "FL1")
and ``extend-exclude`` (globs, relative to that file, also matched against bare file and directory
names). Command-line ``--select`` replaces the file's selection; ``--ignore`` adds to it. Exclusions
apply while walking directories; a file named on the command line is always scanned.

Files that cannot be scanned (a syntax error, bytes that are not in the file's encoding) are returned
as :class:`ScanError` records (code E999 or E902), separate from findings, and skipped.
"""

from __future__ import annotations

import ast
import fnmatch
import io
import os
import re
import tokenize
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import TorchFLError
from .rules import (
    CUDA_ONLY_LIBRARIES,
    GPU_INTEROP_LIBRARIES,
    RULES,
    Finding,
    FixSafety,
    expand,
    selected,
)

PYTHON_SUFFIXES = (".py", ".pyi")
CUDA_SUFFIXES = (".cu", ".cuh")
SKIP_DIRS = frozenset({
    ".git", ".hg", ".svn", ".venv", "venv", "__pycache__", "build", "dist", "node_modules",
    "site-packages", ".tox", ".nox", ".mypy_cache", ".ruff_cache", ".pytest_cache", ".eggs",
    ".ipynb_checkpoints", "__pypackages__",
})
CONFIG_KEYS = ("select", "ignore", "extend-exclude")

# Every rule needs one of these words (lower-cased) in the file's text, or a `.item(` call, so a
# module without any is parsed (to report syntax errors) but not walked. Plain substring tests: a
# case-insensitive regex of the same words took as long as ast.parse. Extend this when a rule
# learns a new spelling.
_TRIGGER_WORDS = ("cuda", "cudnn", "nccl", "synchroni", "data_ptr", "storage_offset", "triton", "cupy",
                  "cublas", "nvrtc", "nvml",
                  *{m.split(".")[0] for m in (*CUDA_ONLY_LIBRARIES, *GPU_INTEROP_LIBRARIES)})
_ITEM_CALL = re.compile(r"item\s*\(")
_CUDA_STRING = re.compile(r"cuda(?::(\d+))?")
_CUDA_LIBRARY_FILE = re.compile(r"cud(?:a|art|nn)|cublas|cufft|curand|cusparse|cusolver|nvrtc|nccl|nvml",
                                re.IGNORECASE)
_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*))?", re.IGNORECASE)

# Names assumed to be these modules when no import binds them (snippets, exported notebooks).
_DEFAULT_ALIASES = {"torch": "torch", "os": "os"}

DEVICE_KWARGS = frozenset({"device", "map_location", "device_map"})
BACKEND_KWARGS = frozenset({"backend", "process_group_backend", "dist_backend"})
# Functions that take "nccl" positionally, by their last name (works for dist.x and bare x):
# name -> index of the backend argument.
BACKEND_POSITIONS = {"init_process_group": 0, "new_group": 2, "init_distributed": 0}
# AMP entry points whose device type is "cuda" in CUDA-era code: name -> positional index or None.
AMP_DEVICE_TYPE = {
    "torch.autocast": 0, "torch.amp.autocast": 0, "torch.amp.autocast_mode.autocast": 0,
    "torch.amp.GradScaler": 0, "torch.amp.grad_scaler.GradScaler": 0,
    "torch.amp.custom_fwd": None, "torch.amp.custom_bwd": None,
    "torch.get_autocast_dtype": 0, "torch.is_autocast_available": 0,
    "torch.amp.is_autocast_available": 0, "torch.set_autocast_dtype": 0,
}
CUDA_TENSOR_TYPES = {
    "FloatTensor": "float32", "DoubleTensor": "float64", "HalfTensor": "float16",
    "BFloat16Tensor": "bfloat16", "ByteTensor": "uint8", "CharTensor": "int8", "ShortTensor": "int16",
    "IntTensor": "int32", "LongTensor": "int64", "BoolTensor": "bool",
}
# torch.cuda.X -> (torch.fl replacement, fix safety); functions not listed get FL201 without a fix.
RUNTIME_FIXES: dict[str, tuple[str, FixSafety]] = {
    **{name: (f"torch.fl.{name}", "safe") for name in (
        "is_available", "device_count", "set_device", "current_device", "empty_cache",
        "memory_allocated", "max_memory_allocated", "reset_peak_memory_stats", "mem_get_info",
        "manual_seed", "Stream", "Event", "stream")},
    "manual_seed_all": ("torch.fl.manual_seed", "safe"),
    "get_device_name": ("torch.fl.get_device_properties(...).name", "unsafe"),
}
RUNTIME_REMEDIES = {
    "get_device_properties": "Use `torch.fl.get_device_properties()` (the same fields on every device)",
    "current_stream": "Use a `torch.fl.Stream()` and `with torch.fl.stream(s):`",
    "get_device_capability": "Check the device description (`torch.fl.description()`) instead",
    "is_bf16_supported": "Check `torch.fl.description()`'s precision dtypes instead",
    "nvtx": "Use `torch.profiler.record_function`",
}
DEFAULT_REMEDY = ("Use the torch.fl runtime API (docs/runtime.md), or guard the call with "
                  "`torch.fl.device_type() == \"cuda\"`")
CUDNN_REMEDIES = {
    "deterministic": "Use `torch.use_deterministic_algorithms(True)`",
    "allow_tf32": "Use `torch.set_float32_matmul_precision(\"high\")`",
}
CUDA_BACKEND_REMEDIES = {
    "matmul": "Use `torch.set_float32_matmul_precision(...)`",
    "sdp": "Use `torch.nn.attention.sdpa_kernel([...])`, which every backend honours",
}
GUARD_REMEDY = "Guard it with `if torch.fl.device_type() == \"cuda\":` to say it is CUDA-only tuning"
_ENV_WRITERS = {"os.environ.setdefault": "set", "os.environ.pop": "removed", "os.putenv": "set",
                "os.unsetenv": "removed"}
_ENV_READERS = {"os.environ.get": "read", "os.getenv": "read"}
_AVAILABILITY = frozenset({"torch.cuda.is_available", "torch.cuda.device_count"})
_SYNCS = frozenset({"torch.cuda.synchronize", "torch.fl.synchronize", "torch.accelerator.synchronize"})


class ScanConfigError(TorchFLError, ValueError):
    """A bad selector or a bad [tool.torchfl] table."""


@dataclass(frozen=True)
class ScanError:
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


@dataclass
class ScanResult:
    """What :func:`scan_paths` found: findings and errors sorted by (path, line, col), and how many
    files and Python lines were scanned."""

    findings: list[Finding] = field(default_factory=list)
    errors: list[ScanError] = field(default_factory=list)
    files: int = 0
    lines: int = 0


@dataclass(frozen=True)
class Config:
    """A [tool.torchfl] table; ``path`` is None when no pyproject.toml has one."""

    select: tuple[str, ...] | None = None
    ignore: tuple[str, ...] = ()
    extend_exclude: tuple[str, ...] = ()
    path: Path | None = None

    @property
    def root(self) -> Path | None:
        return None if self.path is None else self.path.parent


# Detection ----------------------------------------------------------------------------------------
_Key = tuple[Any, ...]  # ("name", scope, id) or ("member", name)
_Pos = tuple[int, int, int, int]  # lineno, col_offset (UTF-8 bytes), end_lineno, end_col_offset


def _pos(node: ast.AST) -> _Pos:
    return (node.lineno, node.col_offset, node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]


def _str(node: ast.AST | None) -> str | None:
    if type(node) is ast.Constant and type(node.value) is str:
        return node.value
    return None


def _alternatives(node: ast.expr) -> Iterator[ast.expr]:
    """The expressions `node` may evaluate to: both arms of `a if c else b`, each operand of `or`."""
    if type(node) is ast.IfExp:
        yield from _alternatives(node.body)
        yield from _alternatives(node.orelse)
    elif type(node) is ast.BoolOp:
        for value in node.values:
            yield from _alternatives(value)
    else:
        yield node


def _cuda_strings(node: ast.expr) -> Iterator[tuple[ast.expr, str | None]]:
    """The CUDA device strings `node` may be, as (node, index): index is "N" for "cuda:N", None for
    "cuda", and "?" for computed strings (f"cuda:{rank}", "cuda:%d" % rank, "cuda:{}".format(r))."""
    for alt in _alternatives(node):
        text = _str(alt)
        if text is not None:
            match = _CUDA_STRING.fullmatch(text)
            if match:
                yield alt, match.group(1)
            continue
        head: ast.AST | None = None
        if type(alt) is ast.JoinedStr and alt.values:
            head = alt.values[0]
        elif type(alt) is ast.BinOp and type(alt.op) in (ast.Add, ast.Mod):
            head = alt.left
        elif (type(alt) is ast.Call and type(alt.func) is ast.Attribute and alt.func.attr == "format"):
            head = alt.func.value
        if (_str(head) or "").startswith("cuda:"):
            yield alt, "?"


def _nccl_strings(node: ast.expr) -> Iterator[ast.expr]:
    for alt in _alternatives(node):
        if _str(alt) == "nccl":
            yield alt


def _device_replacement(index: str | None) -> str:
    if index is None:
        return "torch.fl.device()"
    return 'torch.fl.device(f"acc{...}")' if index == "?" else f'torch.fl.device("acc{index}")'


def _source_text(node: ast.expr) -> str:
    text = _str(node)
    return f'"{text}"' if text is not None else ast.unparse(node)


def _terminal_name(node: ast.AST) -> str | None:
    if type(node) is ast.Name:
        return node.id
    if type(node) is ast.Attribute:
        return node.attr
    return None


def _deviceish(node: ast.expr) -> bool:
    """Whether `node` looks like a device or device type: x.device.type, device, self.device_type,
    args.dev, str(device)."""
    if type(node) is ast.Call and type(node.func) is ast.Name and node.func.id == "str" and node.args:
        return _deviceish(node.args[0])
    name = _terminal_name(node)
    if name is None:
        return False
    lowered = name.lower()
    if lowered == "type" and type(node) is ast.Attribute:
        return _deviceish(node.value)  # x.device.type, dev.type
    return "device" in lowered or lowered == "dev"


def _is_pointer_call(node: ast.AST) -> bool:
    return (type(node) is ast.Call and type(node.func) is ast.Attribute
            and node.func.attr in ("data_ptr", "storage_offset"))


class _Detector:
    """One pass over a module's AST. Records raw findings; noqa and selection come afterwards."""

    def __init__(self) -> None:
        self.aliases: dict[str, str] = dict(_DEFAULT_ALIASES)
        self.raw: list[tuple[str, _Pos, int, FixSafety, dict[str, Any]]] = []
        self.stmt_line = 1
        self.loop = 0
        self.scope = 0  # id() of the innermost function; 0 at module level
        self.in_class = False
        self.done: set[int] = set()  # nodes a more specific rule already reported
        self.pointers: set[str] = set()  # names bound to a data_ptr() value
        self.availability_calls = 0  # torch.cuda.is_available() / device_count() calls seen (FL901)
        # Data flow (FL105, FL501): kind is "device" or "backend".
        self.sources: list[tuple[str, _Key, ast.expr, str | None, int, str]] = []
        self.sinks: dict[tuple[str, _Key], int] = {}
        self.global_sinks: dict[tuple[str, str], int] = {}

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

    def report(self, code: str, where: ast.AST | _Pos, safety: FixSafety = None, **fields: Any) -> None:
        pos = where if isinstance(where, tuple) else _pos(where)
        self.raw.append((code, pos, self.stmt_line, safety, fields))

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
            text = _str(target.slice)
            return None if text is None else ("member", text)
        if (type(target) is ast.Call and type(target.func) is ast.Attribute and target.func.attr == "get"
                and target.args):
            text = _str(target.args[0])
            return None if text is None else ("member", text)
        return None

    def sink(self, kind: str, node: ast.expr) -> None:
        for alt in _alternatives(node):
            key = self.key(alt)
            if key is None:
                continue
            line = alt.lineno
            self.sinks[(kind, key)] = min(self.sinks.get((kind, key), line), line)
            if key[0] == "name":
                slot = (kind, key[2])
                self.global_sinks[slot] = min(self.global_sinks.get(slot, line), line)

    def source(self, key: _Key | None, value: ast.expr | None, target: str) -> None:
        if key is None or value is None:
            return
        for node, index in _cuda_strings(value):
            self.sources.append(("device", key, node, index, self.stmt_line, target))
        for node in _nccl_strings(value):
            self.sources.append(("backend", key, node, None, self.stmt_line, target))

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

    def visit_Import(self, node: ast.Import) -> None:
        self.stmt_line = node.lineno
        self.bind_import(node)
        for alias in node.names:
            self.check_library(alias.name, alias)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        self.stmt_line = node.lineno
        self.bind_import(node)
        if node.level or not node.module:
            return
        if not self.check_library(node.module, node):
            for alias in node.names:
                self.check_library(f"{node.module}.{alias.name}", alias)

    def check_library(self, module: str, where: ast.AST) -> bool:
        for prefix, (provides, alternative) in CUDA_ONLY_LIBRARIES.items():
            if module == prefix or module.startswith(prefix + "."):
                self.report("FL801", where, module=prefix, provides=provides, alternative=alternative)
                return True
        for prefix, what in GPU_INTEROP_LIBRARIES.items():
            if module == prefix or module.startswith(prefix + "."):
                self.report("FL603", where, what=f"`{prefix}` ({what})")
                return True
        return False

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
        self.generic(node)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        outer = self.stmt_line
        self.stmt_line = node.lineno
        self.check_triton(node)
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
        for stmt in node.body:
            self.visit(stmt)
        self.loop, self.scope, self.in_class = saved
        self.stmt_line = outer

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self.visit(node.args)
        saved, self.loop = self.loop, 0
        self.visit(node.body)
        self.loop = saved

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        outer = self.stmt_line
        self.stmt_line = node.lineno
        for expr in (*node.decorator_list, *node.bases, *node.keywords):
            self.visit(expr)
        saved = (self.loop, self.in_class)
        self.loop, self.in_class = 0, True
        for stmt in node.body:
            self.visit(stmt)
        self.loop, self.in_class = saved
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
        if type(node.target) is ast.Name and node.target.id in self.pointers \
                and type(node.op) in (ast.Add, ast.Sub):
            self.report("FL602", node, how="offset in place")
        self.generic(node)
        self.stmt_line = outer

    def assign(self, target: ast.expr, value: ast.expr) -> None:
        if type(value) is ast.Call and _terminal_name(value.func) == "field":  # dataclass field(default=)
            value = next((kw.value for kw in value.keywords if kw.arg == "default"), value)
        self.source(self.key(target), value, ast.unparse(target) if _cuda_or_nccl(value) else "")
        if type(target) is ast.Name and (_is_pointer_call(value) or self.is_pointer_math(value)):
            self.pointers.add(target.id)

    def visit_Dict(self, node: ast.Dict) -> None:
        for key, value in zip(node.keys, node.values, strict=True):
            text = _str(key)
            if text is not None:
                self.source(("member", text), value, f'["{text}"]')
        self.generic(node)

    # Expressions ----------------------------------------------------------------------------------
    def visit_If(self, node: ast.If) -> None:
        outer, self.stmt_line = self.stmt_line, node.lineno
        if self.checks_availability(node.test):
            test = node.test
            self.report("FL901", (node.lineno, node.col_offset, test.end_lineno, test.end_col_offset))  # type: ignore[arg-type]
        for stmt in (*node.body, *node.orelse):
            self.visit(stmt)
        self.stmt_line = outer

    def visit_IfExp(self, node: ast.IfExp) -> None:
        if self.checks_availability(node.test):
            self.report("FL901", node)
        self.visit(node.body)
        self.visit(node.orelse)

    def checks_availability(self, test: ast.expr) -> bool:
        """Visit `test`; True when it called torch.cuda.is_available() or device_count()."""
        before = self.availability_calls
        self.visit(test)
        return self.availability_calls > before

    def visit_Compare(self, node: ast.Compare) -> None:
        left = node.left
        for op, right in zip(node.ops, node.comparators, strict=True):
            kind = type(op)
            if kind in (ast.Eq, ast.NotEq, ast.Is, ast.IsNot):
                for literal, other in ((left, right), (right, left)):
                    if _is_cuda_literal(literal) and _deviceish(other):
                        self.report_comparison(literal)
            elif kind in (ast.In, ast.NotIn):
                if _is_cuda_literal(left) and _deviceish(right):
                    self.report_comparison(left)
                elif type(right) in (ast.Tuple, ast.List, ast.Set) and _deviceish(left):
                    for elt in right.elts:  # type: ignore[attr-defined]
                        if _is_cuda_literal(elt):
                            self.report_comparison(elt)
            left = right
        self.generic(node)

    def report_comparison(self, literal: ast.expr) -> None:
        match = _CUDA_STRING.fullmatch(_str(literal) or "")
        index = match.group(1) if match else None
        replacement = "torch.fl.device_type()" if index is None else f'str(torch.fl.device("acc{index}"))'
        self.report("FL902", literal, "unsafe", text=_source_text(literal), replacement=replacement)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if type(node.op) in (ast.Add, ast.Sub) and (self.is_pointer(node.left) or self.is_pointer(node.right)):
            self.report("FL602", node, how=f"used in arithmetic (`{'+' if type(node.op) is ast.Add else '-'}`)")
        self.generic(node)

    def is_pointer(self, node: ast.AST) -> bool:
        return _is_pointer_call(node) or (type(node) is ast.Name and node.id in self.pointers)

    def is_pointer_math(self, node: ast.AST) -> bool:
        return (type(node) is ast.BinOp and type(node.op) in (ast.Add, ast.Sub)
                and (self.is_pointer(node.left) or self.is_pointer(node.right)))

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if self.qualname(node.value) == "os.environ":
            key = _str(node.slice)
            if key is not None:
                ctx = type(node.ctx)
                action = "read" if ctx is ast.Load else "set" if ctx is ast.Store else "removed"
                self.check_env(key, node, action)
        self.generic(node)

    def check_env(self, key: str, where: ast.AST, action: str) -> None:
        if key.startswith("NCCL_") and action != "read":
            self.report("FL502", where, var=key, action=action)
        elif key == "CUDA_VISIBLE_DEVICES":
            self.report("FL503", where, action=action)

    def visit_Attribute(self, node: ast.Attribute, qual: str | bool | None = False) -> None:
        # An attribute chain is checked once, at its outermost node; only its base is visited.
        base: ast.AST = node.value
        while type(base) is ast.Attribute:
            base = base.value
        if type(base) is not ast.Name:
            self.visit(base)
            return
        if qual is False:
            qual = self.qualname(node)
        if type(qual) is str and qual.startswith("torch.") and id(node) not in self.done:
            self.check_torch_attribute(node, qual)

    def check_torch_attribute(self, node: ast.Attribute, qual: str) -> None:
        parts = qual.split(".")
        if parts[1] == "backends" and len(parts) > 2 and parts[2] in ("cudnn", "cuda"):
            last = parts[3] if len(parts) > 3 else ""
            if parts[2] == "cudnn":
                remedy = CUDNN_REMEDIES.get(last, GUARD_REMEDY)
                self.report("FL401", node, attr=qual, remedy=remedy)
            else:
                family = "sdp" if "sdp" in last else last
                self.report("FL402", node, attr=qual, remedy=CUDA_BACKEND_REMEDIES.get(family, GUARD_REMEDY))
        elif parts[1] == "cuda" and len(parts) > 2 and parts[2] in CUDA_TENSOR_TYPES:
            self.report("FL103", node, attr=".".join(parts[:3]), dtype=f"torch.{CUDA_TENSOR_TYPES[parts[2]]}")

    # Calls ----------------------------------------------------------------------------------------
    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        qual = self.qualname(func)
        if qual is not None:
            if qual in _AVAILABILITY:
                self.availability_calls += 1
            check = _QUALIFIED_CHECKS.get(qual)
            if check is not None:
                check(self, node, qual)
            elif qual.startswith("torch.cuda."):
                self.check_cuda_call(node, qual)
            elif qual in AMP_DEVICE_TYPE:
                self.check_amp_device_type(node, qual)
        if type(func) is ast.Attribute:
            check = _METHOD_CHECKS.get(func.attr)
            if check is not None:
                check(self, node, func.attr)
        name = _terminal_name(func)
        if name in BACKEND_POSITIONS:
            index = BACKEND_POSITIONS[name]
            if len(node.args) > index:
                self.check_backend(node.args[index])
        for kw in node.keywords:
            if kw.arg is not None and id(kw.value) not in self.done:
                self.check_keyword(node, kw.arg, kw.value, qual or name)
        # Children: the callee's chain (already resolved) and the arguments.
        if type(func) is ast.Attribute:
            self.visit_Attribute(func, qual)
        else:
            self.visit(func)
        for arg in node.args:
            self.visit(arg)
        for kw in node.keywords:
            self.visit(kw.value)

    def check_keyword(self, call: ast.Call, arg: str, value: ast.expr, func: str | None) -> None:
        if arg in DEVICE_KWARGS:
            self.report_device_strings(value)
            self.sink("device", value)
        elif arg == "device_type":
            self.report_device_type(value, func or "call")
            self.sink("device", value)
        elif arg in BACKEND_KWARGS:
            self.check_backend(value)

    def check_backend(self, value: ast.expr) -> None:
        for literal in _nccl_strings(value):
            self.report("FL501", literal, "safe", detail="")
        self.sink("backend", value)

    def report_device_strings(self, value: ast.expr) -> None:
        for literal, index in _cuda_strings(value):
            self.report("FL101", literal, None if index == "?" else "safe", text=_source_text(literal),
                        replacement=_device_replacement(index))

    def report_device_type(self, value: ast.expr, func: str) -> None:
        for literal in _alternatives(value):
            if _str(literal) == "cuda":
                self.report("FL303", literal, "safe", func=func, text='"cuda"')
        self.done.add(id(value))

    def check_device_call(self, node: ast.Call, qual: str) -> None:
        """torch.device("cuda"), torch.device("cuda", 0), torch.device(type="cuda")."""
        value = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "type"), None)
        if value is None:
            return
        self.sink("device", value)
        self.done.add(id(value))
        text = _str(value)
        match = _CUDA_STRING.fullmatch(text) if text is not None else None
        if match is None:
            self.report_device_strings(value)
            return
        index = match.group(1)
        rest = node.args[1:] + [k.value for k in node.keywords if k.arg != "type"]
        if index is None and rest:
            number = rest[0].value if type(rest[0]) is ast.Constant else None
            index = str(number) if type(number) is int and len(rest) == 1 else "?"
        self.report("FL101", node, None if index == "?" else "safe", text=_source_text(value),
                    replacement=_device_replacement(index))

    def check_default_device(self, node: ast.Call, qual: str) -> None:
        if not node.args:
            return
        value = node.args[0]
        self.done.add(id(value))
        self.sink("device", value)
        call = f"{qual}({_source_text(value)})"
        if qual == "torch.set_default_device":
            for literal, index in _cuda_strings(value):
                self.report("FL104", literal, None if index == "?" else "safe", call=call)
        elif (self.qualname(value) or _str(value) or "").startswith("torch.cuda."):
            self.report("FL104", node, call=call)

    def check_sync(self, node: ast.Call, qual: str) -> None:
        if qual == "torch.cuda.synchronize":
            self.report("FL202", node, "safe")
        if self.loop:
            self.report("FL203", node, call=f"{qual}()")

    def check_cuda_call(self, node: ast.Call, qual: str) -> None:
        rest = qual[len("torch.cuda."):]
        head = rest.split(".")[0]
        if head in CUDA_TENSOR_TYPES:
            return  # FL103, reported on the attribute
        target, safety = RUNTIME_FIXES.get(rest, (None, None))
        if target is not None:
            remedy = f"Replace with `{target}" + ("`" if target.endswith(".name") else "()`")
        else:
            remedy = RUNTIME_REMEDIES.get(rest, RUNTIME_REMEDIES.get(head, DEFAULT_REMEDY))
        self.report("FL201", node, safety, call=qual, remedy=remedy)

    def check_amp_call(self, node: ast.Call, qual: str) -> None:
        self.report("FL301" if qual.endswith("autocast") else "FL302", node, "safe")

    def check_amp_device_type(self, node: ast.Call, qual: str) -> None:
        index = AMP_DEVICE_TYPE[qual]
        if index is not None and len(node.args) > index:
            self.report_device_type(node.args[index], qual)
            self.sink("device", node.args[index])
        for kw in node.keywords:
            if kw.arg in ("device_type", "device"):
                self.report_device_type(kw.value, qual)
                self.sink("device", kw.value)

    def check_extension(self, node: ast.Call, qual: str) -> None:
        name = qual.rsplit(".", 1)[1]
        keywords = {kw.arg: kw.value for kw in node.keywords if kw.arg}
        if name == "CUDAExtension":
            cuda = True
        elif name == "load":
            sources = keywords.get("sources", node.args[1] if len(node.args) > 1 else None)
            files = sources.elts if type(sources) in (ast.List, ast.Tuple) else [sources]  # type: ignore[union-attr]
            cuda = (any((_str(f) or "").endswith(CUDA_SUFFIXES) for f in files)
                    or "extra_cuda_cflags" in keywords
                    or (type(keywords.get("with_cuda")) is ast.Constant and keywords["with_cuda"].value is True))  # type: ignore[union-attr]
        else:  # load_inline(name, cpp_sources, cuda_sources=None, ...)
            cuda_sources = keywords.get("cuda_sources", node.args[2] if len(node.args) > 2 else None)
            cuda = cuda_sources is not None and not (type(cuda_sources) is ast.Constant
                                                     and cuda_sources.value is None)
        if cuda:
            self.report("FL701", node, call=qual.replace("torch.utils.cpp_extension.", "") + "(...)")

    def check_ctypes(self, node: ast.Call, qual: str) -> None:
        if qual in ("ctypes.c_void_p", "ctypes.cast", "ctypes.c_uint64", "ctypes.c_size_t"):
            if any(self.is_pointer(arg) or self.is_pointer_math(arg) for arg in node.args):
                self.report("FL602", node, how=f"handed to `{qual}`")
        elif node.args:
            text = _str(node.args[0])
            if text and _CUDA_LIBRARY_FILE.search(text):
                self.report("FL603", node, what=f'`{qual}("{text}")`')

    def check_environ_call(self, node: ast.Call, qual: str) -> None:
        action = _ENV_WRITERS.get(qual) or _ENV_READERS.get(qual)
        if qual == "os.environ.update":
            for arg in node.args:
                if type(arg) is ast.Dict:
                    for key in arg.keys:
                        if _str(key) is not None:
                            self.check_env(_str(key), key, "set")  # type: ignore[arg-type]
            for kw in node.keywords:
                if kw.arg:
                    self.check_env(kw.arg, kw.value, "set")
        elif action and node.args and _str(node.args[0]) is not None:
            self.check_env(_str(node.args[0]), node, action)  # type: ignore[arg-type]

    # Method calls (any receiver) ----------------------------------------------------------------------
    def check_cuda_method(self, node: ast.Call, attr: str) -> None:
        arguments = [*node.args, *node.keywords]
        device = node.args[0] if node.args else next(
            (kw.value for kw in node.keywords if kw.arg == "device"), None)
        others = [kw.arg for kw in node.keywords if kw.arg != "device"]
        if device is None:
            index: str | None = None
        elif type(device) is ast.Constant and type(device.value) is int:
            index = str(device.value)
        else:
            index = "?"
        safe = index != "?" and all(arg in ("non_blocking", "memory_format") for arg in others)
        call = ".cuda(" + ", ".join(ast.unparse(a) for a in arguments) + ")"
        self.report("FL102", node, "safe" if safe else None, call=call,
                    replacement=_device_replacement(index))

    def check_to(self, node: ast.Call, attr: str) -> None:
        if node.args and id(node.args[0]) not in self.done:
            self.report_device_strings(node.args[0])
            self.sink("device", node.args[0])

    def check_item(self, node: ast.Call, attr: str) -> None:
        if self.loop and not node.args and not node.keywords:
            self.report("FL203", node, call=".item()")

    def check_data_ptr(self, node: ast.Call, attr: str) -> None:
        if not node.args:
            self.report("FL601", node)

    def check_type(self, node: ast.Call, attr: str) -> None:
        text = _str(node.args[0]) if node.args else None
        if text and text.startswith("torch.cuda.") and text[len("torch.cuda."):] in CUDA_TENSOR_TYPES:
            self.report("FL103", node.args[0], attr=text,
                        dtype=f"torch.{CUDA_TENSOR_TYPES[text[len('torch.cuda.'):]]}")

    def check_startswith(self, node: ast.Call, attr: str) -> None:
        receiver = node.func.value  # type: ignore[attr-defined]
        if node.args and _str(node.args[0]) == "cuda" and _deviceish(receiver):
            self.report_comparison(node.args[0])

    def check_add_argument(self, node: ast.Call, attr: str) -> None:
        default = next((kw.value for kw in node.keywords if kw.arg == "default"), None)
        if default is None or not _cuda_or_nccl(default):
            return
        dest = next((_str(kw.value) for kw in node.keywords if kw.arg == "dest"), None)
        if dest is None:
            options = [_str(a) for a in node.args if _str(a)]
            longs = [o for o in options if o.startswith("--")]  # type: ignore[union-attr]
            dest = (longs or options or [None])[0]
        if dest:
            dest = dest.lstrip("-").replace("-", "_")
            self.source(("member", dest), default, f"args.{dest}")

    # Decorators -----------------------------------------------------------------------------------
    def check_triton(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for decorator in node.decorator_list:
            target = decorator.func if type(decorator) is ast.Call else decorator
            if self.qualname(target) in ("triton.jit", "triton.autotune"):
                self.report("FL703", decorator, func=node.name)
                return

    # Results --------------------------------------------------------------------------------------
    def flows(self) -> None:
        """Turn sources that reach a sink into FL105 / FL501 findings (one per literal)."""
        seen: set[int] = set()
        for kind, key, node, index, stmt_line, target in self.sources:
            if id(node) in seen:
                continue
            if key[0] == "name" and key[1] == 0:
                line = self.global_sinks.get((kind, key[2]))  # module globals are read in functions too
            else:
                line = self.sinks.get((kind, key))
            if line is None:
                continue
            seen.add(id(node))
            self.stmt_line = stmt_line
            if kind == "device":
                replacement = ("torch.fl.device_type()" if index is None else
                               'str(torch.fl.device(f"acc{...}"))' if index == "?" else
                               f'str(torch.fl.device("acc{index}"))')
                self.report("FL105", node, None if index == "?" else "unsafe", text=_source_text(node),
                            target=target, sink_line=line, replacement=replacement)
            else:
                self.report("FL501", node, "unsafe", detail=f" (via `{target}`, line {line})")


def _is_cuda_literal(node: ast.AST) -> bool:
    text = _str(node)
    return text is not None and _CUDA_STRING.fullmatch(text) is not None


def _cuda_or_nccl(value: ast.expr) -> bool:
    return any(True for _ in _cuda_strings(value)) or any(True for _ in _nccl_strings(value))


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
    ast.Attribute: _D.visit_Attribute, ast.Call: _D.visit_Call,
})
_QUALIFIED_CHECKS: dict[str, Any] = {
    "torch.device": _D.check_device_call,
    "torch.set_default_device": _D.check_default_device,
    "torch.set_default_tensor_type": _D.check_default_device,
    **{qual: _D.check_sync for qual in _SYNCS},
    "torch.cuda.amp.autocast": _D.check_amp_call, "torch.cuda.amp.autocast_mode.autocast": _D.check_amp_call,
    "torch.cuda.amp.GradScaler": _D.check_amp_call, "torch.cuda.amp.grad_scaler.GradScaler": _D.check_amp_call,
    **{f"torch.utils.cpp_extension.{name}": _D.check_extension for name in ("CUDAExtension", "load", "load_inline")},
    **{f"ctypes.{name}": _D.check_ctypes for name in (
        "c_void_p", "cast", "c_uint64", "c_size_t", "CDLL", "PyDLL", "cdll.LoadLibrary")},
    **{qual: _D.check_environ_call for qual in (*_ENV_WRITERS, *_ENV_READERS, "os.environ.update")},
}
_METHOD_CHECKS: dict[str, Any] = {
    "cuda": _D.check_cuda_method, "to": _D.check_to, "item": _D.check_item,
    "data_ptr": _D.check_data_ptr, "type": _D.check_type, "startswith": _D.check_startswith,
    "add_argument": _D.check_add_argument,
}


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
             fields: dict[str, Any], unsafe_fixes: bool) -> Finding:
    rule = RULES[code]
    line, col, end_line, end_col = pos
    fixable = safety == "safe" or (unsafe_fixes and safety == "unsafe")
    return Finding(code, rule.name, path, line, _char_col(lines, line, col), end_line,
                   _char_col(lines, end_line, end_col), rule.message_template.format(**fields),
                   rule.fix_title.format(**fields), fixable, safety)


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


def _scan_text(text: str, path: str, codes: frozenset[str], unsafe_fixes: bool) -> list[Finding]:
    tree = _parse(text, path)
    if not _has_trigger(text):
        return []
    detector = _Detector()
    try:
        detector.visit(tree)
    except RecursionError:
        raise SyntaxError("too deeply nested for the scanner", (path, 1, 1, None)) from None
    detector.flows()
    if not detector.raw:
        return []
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    findings = []
    for code, pos, stmt_line, safety, fields in detector.raw:
        if code not in codes or _suppressed(lines, pos[0], code) or _suppressed(lines, stmt_line, code):
            continue
        findings.append(_finding(code, path, pos, lines, safety, fields, unsafe_fixes))
    findings.sort(key=lambda f: f.sort_key)
    return findings


def enabled_codes(select: Iterable[str] | None, ignore: Iterable[str] | None,
                  config: Config | None = None) -> frozenset[str]:
    """The rule codes in force: the [tool.torchfl] table, then select/ignore as on the command line."""
    try:
        layers = [] if config is None else [(config.select, config.ignore)]
        return selected(*layers, (None if select is None else list(select), list(ignore or ())))
    except ValueError as exc:
        raise ScanConfigError(str(exc)) from None


def scan_source(source: str, path: str = "<string>", *, select: Iterable[str] | None = None,
                ignore: Iterable[str] | None = None, unsafe_fixes: bool = False) -> list[Finding]:
    """Findings in one module's source, sorted by position, after ``# noqa`` and selection.

    Args:
        source: Python source text.
        path: the name findings carry.
        select, ignore: codes or prefixes ("FL1", "FL203"); default every rule.
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
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        return data.decode(encoding)
    except (SyntaxError, UnicodeDecodeError, LookupError) as exc:
        # detect_encoding reports undecodable first lines and unknown cookies as SyntaxError.
        detail = exc.reason if isinstance(exc, UnicodeDecodeError) else getattr(exc, "msg", str(exc))
        raise _Unreadable(f"the bytes are not valid in the file's encoding (UTF-8 unless a PEP 263 "
                          f"coding comment says otherwise): {detail}") from None


def _string_list(value: Any, key: str, where: Path) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ScanConfigError(f"{where}: [tool.torchfl] {key} must be a list of strings, got {value!r}")
    return tuple(value)


def load_config(start: Path) -> Config:
    """The [tool.torchfl] table of the nearest pyproject.toml that has one, from `start` upwards."""
    from .._toml import TOMLDecodeError, loads

    directory = start.resolve()
    if not directory.is_dir():
        directory = directory.parent
    for candidate in (directory, *directory.parents):
        pyproject = candidate / "pyproject.toml"
        if not pyproject.is_file():
            continue
        try:
            table = loads(pyproject.read_text(encoding="utf-8")).get("tool", {}).get("torchfl")
        except (TOMLDecodeError, OSError, UnicodeDecodeError) as exc:
            raise ScanConfigError(f"{pyproject}: cannot read: {exc}") from None
        if table is None:
            continue
        unknown = sorted(set(table) - set(CONFIG_KEYS))
        if unknown:
            raise ScanConfigError(f"{pyproject}: unknown key(s) in [tool.torchfl]: {', '.join(unknown)} "
                                  f"(allowed: {', '.join(CONFIG_KEYS)})")
        select = _string_list(table["select"], "select", pyproject) if "select" in table else None
        config = Config(select, _string_list(table.get("ignore", []), "ignore", pyproject),
                        _string_list(table.get("extend-exclude", []), "extend-exclude", pyproject),
                        pyproject)
        try:
            for selector in (*(config.select or ()), *config.ignore):
                expand(selector)
        except ValueError as exc:
            raise ScanConfigError(f"{pyproject}: [tool.torchfl] {exc}") from None
        return config
    return Config()


def _excluded(path: Path, config: Config) -> bool:
    if not config.extend_exclude:
        return False
    try:
        relative = path.resolve().relative_to(config.root).as_posix()  # type: ignore[arg-type]
    except ValueError:
        relative = path.as_posix()
    return any(fnmatch.fnmatchcase(relative, pattern) or fnmatch.fnmatchcase(path.name, pattern)
               for pattern in config.extend_exclude)


def iter_files(root: Path, config: Config = Config()) -> Iterator[Path]:
    """Python and CUDA source files under `root` in sorted order, skipping SKIP_DIRS and the
    config's extend-exclude globs. A file given as `root` is yielded whatever its name."""
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


def scan_file(path: Path, codes: frozenset[str] | None = None, *,
              unsafe_fixes: bool = False) -> tuple[list[Finding], ScanError | None, int]:
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
        return _scan_text(text, name, codes, unsafe_fixes), None, lines
    except SyntaxError as exc:
        message = f"SyntaxError: {exc.msg} (file skipped)"
        return [], ScanError("E999", name, exc.lineno or 1, exc.offset or 1, message), lines


def scan_paths(paths: Sequence[str | os.PathLike[str]], select: Iterable[str] | None = None,
               ignore: Iterable[str] | None = None, *, unsafe_fixes: bool = False) -> ScanResult:
    """Scan files and directories (recursively).

    Each path uses the [tool.torchfl] table of the nearest pyproject.toml above it; `select` and
    `ignore` come on top of it as on the command line. Findings carry paths as given (``src`` gives
    ``src/model.py``), so relative arguments give relative, machine-independent paths.

    Raises:
        ScanConfigError: a selector that names no rule, or a bad [tool.torchfl] table.
        FileNotFoundError: a path that does not exist.

    Example:
        >>> result = scan_paths(["src"], ignore=["FL203"])  # doctest: +SKIP
        >>> result.findings[0].code, result.files, result.lines  # doctest: +SKIP
    """
    result = ScanResult()
    for path, codes in targets(paths, select, ignore):
        findings, error, lines = scan_file(path, codes, unsafe_fixes=unsafe_fixes)
        result.files += 1
        result.lines += lines
        result.findings.extend(findings)
        if error is not None:
            result.errors.append(error)
    result.findings.sort(key=lambda f: f.sort_key)
    result.errors.sort(key=lambda e: (e.path, e.line, e.col))
    return result


def targets(paths: Iterable[str | os.PathLike[str]], select: Iterable[str] | None = None,
            ignore: Iterable[str] | None = None) -> Iterator[tuple[Path, frozenset[str]]]:
    """Every file under `paths` once, with the codes enabled for it (its nearest [tool.torchfl]
    table plus select/ignore): what `torchfl scan` scans and `torchfl fix` fixes."""
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
