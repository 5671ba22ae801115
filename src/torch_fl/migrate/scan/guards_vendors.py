"""Multi-vendor dispatch (part of the guards mixin, ``guards.py``): an if/elif chain or a ``match`` on the
device type with a branch for CUDA and one for another accelerator. Each branch is for its device, so
torch.cuda calls in the CUDA branch are right and are not reported."""

from __future__ import annotations

import ast
import re

from ..rules.base import names_vendors, str_value, terminal_name
from .dispatch import Dispatch

_VENDOR_WORD = re.compile(r"(?<![a-z])(cuda|npu|xpu|mps|hpu|mlu|musa|xla|gcu|sdaa)(?![a-z])")


def _availability(test: ast.expr) -> set[str]:
    """The device types an availability test asks about: `torch.npu.is_available()`,
    `is_torch_xpu_available()`, `torch.backends.mps.is_available()`, `hasattr(torch, "npu") and ...`."""
    if type(test) is ast.BoolOp and type(test.op) is ast.And:
        parts = [_availability(v) for v in test.values]
        return set().union(*parts) if all(parts) else set()
    if type(test) is not ast.Call:
        return set()
    name = terminal_name(test.func) or ""
    if "available" in name:
        return set(_VENDOR_WORD.findall(ast.unparse(test.func)))
    if name == "hasattr" and len(test.args) == 2:
        text = str_value(test.args[1])
        return {text} if text and _VENDOR_WORD.fullmatch(text) else set()
    return set()


def _device_types(test: ast.expr) -> set[str]:
    """The device types a dispatch test names: `X == "cuda"`, `X in ("npu", "xpu")`, `X.startswith("mps")`,
    joined by `or`; or the one an availability test asks about (`torch.npu.is_available()`)."""
    asked = _availability(test)
    if asked:
        return asked
    if type(test) is ast.BoolOp and type(test.op) is ast.Or:
        return set().union(*(_device_types(v) for v in test.values))
    if type(test) is ast.Compare and len(test.ops) == 1 and type(test.ops[0]) in (ast.Eq, ast.In, ast.Is):
        other = test.comparators[0]
        for side in (test.left, other):
            text = str_value(side)
            if text is not None:
                return {text.split(":")[0]}
        if type(other) in (ast.Tuple, ast.List, ast.Set):
            return {t.split(":")[0] for e in other.elts if (t := str_value(e)) is not None}  # type: ignore[attr-defined]
    if type(test) is ast.Call and type(test.func) is ast.Attribute and test.func.attr == "startswith" and test.args:
        text = str_value(test.args[0])
        return {text.split(":")[0]} if text else set()
    return set()


def _case_types(pattern: ast.AST) -> set[str]:
    """The strings a match case's pattern names (`case "cuda":`, `case "npu" | "xpu":`)."""
    if type(pattern).__name__ == "MatchValue":
        text = str_value(pattern.value)  # type: ignore[attr-defined]
        return {text.split(":")[0]} if text else set()
    if type(pattern).__name__ == "MatchOr":
        return set().union(*(_case_types(p) for p in pattern.patterns))  # type: ignore[attr-defined]
    return set()


class VendorDispatch(Dispatch):
    """Code that dispatches on the device type, CUDA among other vendors."""

    def vendor_chain(self, node: ast.If) -> list[tuple[ast.If, set[str]]] | None:
        """`if device.type == "cuda": ... elif device.type == "npu": ...`: an if/elif chain that dispatches
        on the device type, with a branch for CUDA and one for another accelerator. Returns each `if` with
        the types its test names, or None when `node` is no such chain."""
        chain: list[tuple[ast.If, set[str]]] = []
        current: ast.stmt | None = node
        while type(current) is ast.If:
            chain.append((current, _device_types(current.test)))  # type: ignore[arg-type]
            current = current.orelse[0] if len(current.orelse) == 1 else None  # type: ignore[attr-defined]
        named = set().union(*(types for _, types in chain))
        return chain if len(chain) > 1 and names_vendors(named) else None

    def vendor_returns(self, statements: list[ast.stmt]) -> list[tuple[ast.If, set[str]]] | None:
        """`if torch.cuda.is_available(): return "cuda"` then `if is_torch_npu_available(): return "npu"`:
        consecutive `if`s that each end in a return, without else, one per vendor: a chain as well."""
        chain: list[tuple[ast.If, set[str]]] = []
        for stmt in statements:
            if type(stmt) is not ast.If or stmt.orelse or type(stmt.body[-1]) is not ast.Return:
                break
            chain.append((stmt, _device_types(stmt.test)))
        named = set().union(*(types for _, types in chain)) if chain else set()
        return chain if len(chain) > 1 and names_vendors(named) else None

    def visit_vendor_chain(self, chain: list[tuple[ast.If, set[str]]]) -> None:
        """Multi-vendor code: each branch is for its device, so the tests and the CUDA branch (where
        torch.cuda calls are right) are not findings; the other branches are scanned as usual."""
        for index, (branch, types) in enumerate(chain):
            outer, self.stmt_line = self.stmt_line, branch.lineno
            self.quiet += 1
            self.visit(branch.test)
            self.quiet -= 1
            cuda = "cuda" in types
            self.quiet += cuda
            for stmt in branch.body:
                self.visit(stmt)
            self.quiet -= cuda
            if index == len(chain) - 1:
                for stmt in branch.orelse:
                    self.visit(stmt)
            self.stmt_line = outer

    def visit_Match(self, node: ast.AST) -> None:
        """`match device.type: case "cuda": ... case "xpu": ...`: multi-vendor dispatch, as an if/elif chain."""
        cases = node.cases  # type: ignore[attr-defined]
        types = [_case_types(case.pattern) for case in cases]
        if not names_vendors(set().union(*types)):
            self.statement(node)  # type: ignore[arg-type]
            return
        outer, self.stmt_line = self.stmt_line, node.lineno  # type: ignore[attr-defined]
        self.visit(node.subject)  # type: ignore[attr-defined]
        for case, named in zip(cases, types, strict=True):
            cuda = "cuda" in named
            self.quiet += cuda
            if case.guard is not None:
                self.visit(case.guard)
            for stmt in case.body:
                self.visit(stmt)
            self.quiet -= cuda
        self.stmt_line = outer
