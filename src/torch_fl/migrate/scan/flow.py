"""The small data flow behind the rules that follow a value (a device string or a backend name held in
a variable, a dict entry, a default, an attribute): *sources* (a literal bound to a key), *sinks* (a key
passed to a device or backend argument) and *edges* (``b = a``). At the end of the pass each source that
reaches a sink of its kind is handed to the rules' "flow" hooks; a module global that reaches none here
is kept as an *export*, for the module that imports it (:func:`cross_module`)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any, NamedTuple

from ..rules.base import (
    Raw,
    alternatives,
    cuda_or_nccl,
    cuda_strings,
    is_int,
    names_vendors,
    nccl_strings,
    str_value,
    terminal_name,
)
from .dispatch import Dispatch

Key = tuple[Any, ...]  # ("name", scope, id) or ("member", name)
# A source: kind ("device" / "backend"), key, the literal, its index ("N", None, "?"), the statement's
# first line, and the target's text.
Source = tuple[str, Key, ast.expr, "str | None", int, str]
# What a flow kind is called in the rules' events: a device argument, a backend argument.
KINDS = ("device", "backend")


def _carriers(value: ast.expr) -> list[ast.expr]:
    """The names whose value `value` carries on: `b = a`, `b = a if c else d`, and the head of a string
    built from it (`f"{DEVICE}:{ID}"`, `DEVICE + ":0"`, `"%s:0" % DEVICE`): a device type stays one."""
    found: list[ast.expr] = []
    for alt in alternatives(value):
        if type(alt) in (ast.Name, ast.Attribute):
            found.append(alt)
        elif type(alt) is ast.JoinedStr and alt.values and type(alt.values[0]) is ast.FormattedValue:
            head = alt.values[0].value  # type: ignore[attr-defined]
            if type(head) in (ast.Name, ast.Attribute):
                found.append(head)
        elif type(alt) is ast.BinOp and type(alt.op) is ast.Add and type(alt.left) in (ast.Name, ast.Attribute):
            found.append(alt.left)
    return found


class Flow(Dispatch):
    """Sources, sinks and edges (a mixin of the detector)."""

    sources: list[Source]
    sinks: dict[tuple[str, Key], int]
    edges: dict[Key, set[Key]]
    exports: dict[str, list[Source]]
    strings: dict[Key, set[str]]  # names bound to string literals

    def key(self, target: ast.AST) -> Key | None:
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
        for alt in alternatives(node):
            key = self.key(alt)
            if key is None:
                continue
            line = alt.lineno
            self.sinks[(kind, key)] = min(self.sinks.get((kind, key), line), line)

    def source(self, key: Key | None, value: ast.expr | None, target: str) -> None:
        if key is None or value is None or self.quiet:
            return  # a value bound inside a CUDA-only test is intended
        for node, index in cuda_strings(value):
            self.sources.append(("device", key, node, index, self.stmt_line, target))
        for node in nccl_strings(value):
            self.sources.append(("backend", key, node, None, self.stmt_line, target))

    def string_values(self, node: ast.AST) -> list[str]:
        """The strings `node` may be: a literal, or a name bound to literals (`key = "NCCL_DEBUG"`,
        `for key in ("NCCL_A", "NCCL_B"):`), for rules that read a key through a variable."""
        text = str_value(node)
        if text is not None:
            return [text]
        key = self.key(node) if type(node) in (ast.Name, ast.Attribute) else None
        return sorted(self.strings.get(key, ())) if key is not None else []

    def bind_strings(self, target: ast.expr, value: ast.expr) -> None:
        key = self.key(target) if type(target) in (ast.Name, ast.Attribute) else None
        if key is None:
            return
        values = value.elts if type(value) in (ast.Tuple, ast.List, ast.Set) else [value]  # type: ignore[attr-defined]
        texts = [str_value(v) for v in values]
        if texts and all(t is not None for t in texts):
            self.strings.setdefault(key, set()).update(texts)  # type: ignore[arg-type]

    # Statements that bind ------------------------------------------------------------------------
    def visit_Assign(self, node: ast.Assign) -> None:
        outer, self.stmt_line = self.stmt_line, node.lineno
        binds = len(self.ordinal_binds)  # type: ignore[attr-defined]
        for target in node.targets:
            if type(target) is ast.Tuple and type(node.value) is ast.Tuple \
                    and len(target.elts) == len(node.value.elts):
                for elt, value in zip(target.elts, node.value.elts, strict=True):
                    self.assign(elt, value)
            else:
                self.assign(target, node.value)
        start = len(self.raw)
        self.generic(node)
        if type(node.value) is ast.IfExp and len(self.ordinal_binds) > binds:  # type: ignore[attr-defined]
            # `gpu = 0 if torch.cuda.is_available() else -1`: the check in the test, now reported, picks it
            test = node.value.test
            first, last = (test.lineno, test.col_offset), (test.end_lineno, test.end_col_offset)
            direct = [i for i in range(start, len(self.raw))
                      if first <= self.raw[i].where[:2] and self.raw[i].where[2:] <= last]
            for k in range(binds, len(self.ordinal_binds)):  # type: ignore[attr-defined]
                name, line, checks, like = self.ordinal_binds[k]  # type: ignore[attr-defined]
                self.ordinal_binds[k] = (name, line, [*checks, *direct], like)  # type: ignore[attr-defined]
        if len(self.raw) > start and len(node.targets) == 1 and self.names_cuda(node.value):  # type: ignore[attr-defined]
            # `use_cuda = torch.cuda.is_available()`: a later `if use_cuda:` is a guard on this check.
            key = self.key(node.targets[0])
            if key is not None:
                self.check_keys[key] = list(range(start, len(self.raw)))
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
        if type(target) is ast.Name:
            self.bind_local(target.id)  # type: ignore[attr-defined]
        if type(value) is ast.Call and terminal_name(value.func) == "field":  # dataclass field(default=)
            value = next((kw.value for kw in value.keywords if kw.arg == "default"), value)
        key = self.key(target)
        if type(value) is ast.Constant:
            self.bind_strings(target, value)
        self.source(key, value, ast.unparse(target) if cuda_or_nccl(value) else "")
        if key is not None and any(self.ordinal_value(alt) for alt in alternatives(value)):
            # `gpu_index = 0` (under `if cuda_available:`, or `0 if cuda_available else -1`): an ordinal the
            # check picks; where it is used as a device with no fix, the check cannot be fixed alone.
            checks = self.check_findings(value.test, len(self.raw)) if type(value) is ast.IfExp else []  # type: ignore[attr-defined]
            self.ordinal_binds.append((ast.unparse(target), target.lineno, checks, _ordinal_like(target, value)))
        if key is not None:
            for part in _carriers(value):
                origin = self.key(part)
                if origin is not None and origin != key:
                    self.edges.setdefault(origin, set()).add(key)
        self.emit("assign", target, value)

    def ordinal_value(self, node: ast.expr, listed: bool = False) -> bool:
        """An integer, or a list or tuple of integers and `torch.cuda.current_device()` calls: device
        ordinals (`devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []`, handed to
        `torch.random.fork_rng(devices=...)`, whose device type is CUDA's unless it is given). A lone
        `torch.cuda.current_device()` is FL201's (torch.fl.current_device(), the accelerator's own)."""
        if type(node) in (ast.List, ast.Tuple):
            return bool(node.elts) and all(self.ordinal_value(e, True) for e in node.elts)  # type: ignore[attr-defined]
        if type(node) is ast.Call:
            return listed and self.qualname(node.func) == "torch.cuda.current_device"  # type: ignore[attr-defined]
        return is_int(node)

    def visit_Dict(self, node: ast.Dict) -> None:
        if names_vendors(str_value(k) for k in node.keys):
            # {"cuda": torch.cuda.is_available(), "npu": ..., "mps": ...}: a table with an entry per
            # vendor; its CUDA entry is right as it is (rewritten, "cuda" would look available on an NPU).
            self.quiet += 1  # type: ignore[attr-defined]
            self.generic(node)
            self.quiet -= 1  # type: ignore[attr-defined]
            return
        for key, value in zip(node.keys, node.values, strict=True):
            text = str_value(key)
            if text is not None:
                self.key_literals.add(id(key))  # type: ignore[attr-defined]
                self.source(("member", text), value, f'["{text}"]')
        self.emit("dict", node)
        self.generic(node)

    def pass_arguments(self, call: ast.Call, function: ast.FunctionDef | ast.AsyncFunctionDef, skip: int = 0) -> None:
        """`evaluate(args.device)` with `def evaluate(device): model.to(device)`: the argument's value
        reaches the parameter (a module's own functions, by position or keyword; a class's __init__ with
        `skip=1` for `self`)."""
        params = [a.arg for a in (*function.args.posonlyargs, *function.args.args)][skip:]
        named = set(params) | {a.arg for a in function.args.kwonlyargs}
        pairs = [(params[i], arg) for i, arg in enumerate(call.args) if i < len(params) and type(arg) is not ast.Starred]
        pairs += [(kw.arg, kw.value) for kw in call.keywords if kw.arg in named]
        for param, value in pairs:
            origin = self.key(value)
            if origin is not None:
                self.edges.setdefault(origin, set()).add(("name", id(function), param))
            elif type(value) is ast.JoinedStr:
                # Runner(f"cuda:{rank}") with `def __init__(self, device): ... torch.device(device)`: the
                # string is bound to the parameter, as a default would be.
                self.source(("name", id(function), param), value, f"{function.name}({param}=...)")

    # Results --------------------------------------------------------------------------------------
    def reaches(self, kind: str, key: Key) -> int | None:
        """The first line where a value bound to `key` reaches a `kind` sink, following `b = a` edges.
        A module global is read in any function that does not bind the same name itself."""
        seen: set[Key] = set()
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
        """Sources that reach a sink go to the "flow" hooks (one finding per literal); module globals that
        reach none are kept in `exports`. Then the "finish" event."""
        seen: set[int] = set()
        for source in self.sources:
            kind, key, node, index, stmt_line, target = source
            if id(node) in seen or id(node) in self.done:
                continue
            line = self.reaches(kind, key)
            if line is None:
                if key[0] == "name" and key[1] == 0:  # a module global: maybe used where it is imported
                    self.exports.setdefault(key[2], []).append(source)
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
            lines = [line for kind in KINDS if (line := self.reaches(kind, ("name", 0, local))) is not None]
            if lines:
                found.append((module, level, name, min(lines)))
        return found


class ModuleFacts(NamedTuple):
    """What one module offers the cross-module pass: its unreached module-level sources, the imported
    names it passes to a device or backend argument, and what is needed to turn a source into a finding."""

    exports: dict[str, list[Source]]
    imports: list[tuple[str, int, str, int]]
    lines: list[str]
    codes: frozenset[str]
    unsafe_fixes: bool


def module_names(path: str) -> set[str]:
    """Dotted names `path` may be imported as: every suffix of its path (pkg/sub/mod.py is mod, sub.mod,
    pkg.sub.mod; a package's __init__.py is the package)."""
    parts = list(Path(path).with_suffix("").parts)
    if parts and parts[-1] == "__init__":
        parts.pop()
    return {".".join(parts[i:]) for i in range(len(parts))}


def cross_module(facts: dict[str, ModuleFacts], new_detector: Any) -> list[tuple[str, ModuleFacts, list[Raw]]]:
    """A module global holding a device string or backend name that another scanned module imports and
    passes to a device or backend argument (`from config import DEVICE; x.to(DEVICE)`): the exporter's
    source goes to the "flow" hooks with the importer's place as the sink (a "file:line" string), on a
    detector that allows no fix (`torchfl fix` works one file at a time, and the literal's meaning
    depends on the importer's use). Returns (exporter path, its facts, raw findings)."""
    by_name: dict[str, list[str]] = {}
    for path, fact in facts.items():
        if fact.exports:
            for name in module_names(path):
                by_name.setdefault(name, []).append(path)
    out = []
    done: set[tuple[str, int]] = set()
    for importer, fact in facts.items():
        for module, level, name, line in fact.imports:
            if level:  # from .config import DEVICE: relative to the importer's package
                base = Path(importer).parent
                for _ in range(level - 1):
                    base = base.parent
                wanted = str(base / (module.replace(".", "/") if module else "")).replace("/", ".").lstrip(".")
                candidates = by_name.get(wanted, [])
            else:
                candidates = by_name.get(module, [])
            for exporter in candidates:
                detector = new_detector()
                detector.fixes_allowed = False
                for kind, _key, node, index, stmt_line, target in facts[exporter].exports.get(name, ()):
                    if (exporter, id(node)) in done:
                        continue
                    done.add((exporter, id(node)))
                    detector.stmt_line = stmt_line
                    detector.emit("flow", kind, node, index, target, f"{importer}:{line}")
                if detector.raw:
                    out.append((exporter, facts[exporter], detector.raw))
    return out


_ORDINAL_WORDS = ("device", "gpu", "cuda", "index", "idx", "ordinal", "rank", "dev_id", "device_id")


def _ordinal_like(target: ast.expr, value: ast.expr) -> bool:
    """Whether an integer bound to `target` is a device ordinal whatever its later use: the name says so
    (`gpu_index`, `device_id`) or the other choice is -1, the CPU in pipelines' and many tools' terms
    (`0 if cuda_available else -1`). `batch = 64 if ... else 8` is not."""
    name = (terminal_name(target) or "").lower()
    minus_one = any(type(alt) is ast.UnaryOp and type(alt.op) is ast.USub and is_int(alt.operand)
                    for alt in alternatives(value))
    return minus_one or any(word in name for word in _ORDINAL_WORDS)
