"""Guards and tests: code that is CUDA-only on purpose. Findings inside a CUDA-only test
(``@pytest.mark.skipif(not torch.cuda.is_available(), ...)``, ``RunIf(min_cuda_gpus=1)``), after a
``skip unless CUDA`` statement, under a guard made only of CUDA tuning, or in a correct check for a
CUDA-only library are intended and not reported (``quiet``).

:class:`Guards`, the detector's mixin, is assembled from parts by concern:

* ``guards_checks.py``: how a CUDA check is recognised, and the guards that are right as they are;
* ``guards_tests.py``: CUDA-only tests, test cases and modules, and skips without CUDA;
* ``guards_vendors.py``: multi-vendor dispatch (an if/elif chain or ``match`` on the device type);
* ``guards_settle.py``: the marks a guard is recorded between, and settling each test's fix safety;
* this module: walking guarded code (``if``, ``and``, conditional expressions, early exits).
"""

from __future__ import annotations

import ast

from .guards_settle import GuardSettling, Mark
from .guards_tests import CudaOnlyTests
from .guards_vendors import VendorDispatch

__all__ = ["CUDA_WORDS", "Guards", "Mark"]

# Values a CUDA check picks that name CUDA (or its mixed precision) without saying "cuda": composer's and
# Lightning's device "gpu", precision "amp". A check rewritten alone would pick them on every accelerator.
CUDA_WORDS = frozenset({"gpu", "gpus", "amp"})


class Guards(CudaOnlyTests, VendorDispatch, GuardSettling):
    """CUDA-only tests and guards (a mixin of the detector): the visitors of guarded code."""

    def body(self, statements: list[ast.stmt]) -> None:
        """A function or module body: after a `skip unless CUDA` statement, the rest is CUDA-only; after
        `if not torch.cuda.is_available(): return`, the rest is guarded by it."""
        quiet = False
        skip = 0
        for index, stmt in enumerate(statements):
            if skip:
                skip -= 1
                continue
            chain = self.vendor_returns(statements[index:]) if type(stmt) is ast.If else None
            if chain is not None:
                self.visit_vendor_chain(chain)
                skip = len(chain) - 1
                continue
            if not quiet and self.skips_without_cuda(stmt):
                quiet = True
                self.quiet += 1
                continue
            if self.requires_cuda_library(stmt):
                continue
            if not quiet and self.exits_without_cuda(stmt):
                self.guarded_rest(stmt, statements[index + 1:])
                break
            self.visit(stmt)
        if quiet:
            self.quiet -= 1

    def guarded_rest(self, stmt: ast.stmt, rest: list[ast.stmt]) -> None:
        """`if not torch.cuda.is_available(): return` and the statements after it, which it guards."""
        if self.tuning_only(rest):
            # `if not torch.cuda.is_available(): return` then cuDNN flags: correctly guarded.
            self.quiet += 1
            self.visit(stmt)
            self.body(rest)
            self.quiet -= 1
            return
        start = len(self.raw)
        self.visit(stmt)
        test = list(range(start, len(self.raw)))
        guarded = self.mark()
        self.body(rest)
        self.guards.append((test, guarded, self.mark()))

    def visit_Assert(self, node: ast.Assert) -> None:
        if not self.requires_cuda_library(node):  # `assert torch.cuda.is_available(), "bitsandbytes ..."`
            start = len(self.raw)
            self.statement(node)
            # `assert str(x.device) == "cuda:0"`: a comparison runs anywhere, but asserted it fails off CUDA.
            self.asserted.update(range(start, len(self.raw)))

    def visit_If(self, node: ast.If) -> None:
        chain = self.vendor_chain(node)
        if chain is not None:
            self.visit_vendor_chain(chain)
            return
        outer, self.stmt_line = self.stmt_line, node.lineno
        names_cuda = self.names_cuda(node.test)
        negated = names_cuda and self.negated_check(node.test)
        if self.intended_if(node, names_cuda, negated):
            self.visit_intended_if(node)
        else:
            self.visit_guard_if(node, names_cuda, negated)
        self.stmt_line = outer

    def intended_if(self, node: ast.If, names_cuda: bool, negated: bool) -> bool:
        """`if not torch.cuda.is_available(): pytest.skip(...)`: a CUDA-only test says so; a check for a
        CUDA-only library, or one that picks a CUDA-only package (onnxruntime's CUDAExecutionProvider),
        is right as it is. A test skip (not a bare `return`) also marks the flags it reads as a test's."""
        skips = names_cuda and self.skip_body(node.body)
        if skips and not all(type(inner) is ast.Return for inner in node.body):
            self.skip_condition(node.test)
        return bool(skips or self.requires_cuda_library(node)
                    or (names_cuda and self.picks_cuda_package(node.orelse if negated else node.body)))

    def visit_intended_if(self, node: ast.If) -> None:
        """An intended check: its test and body are not reported; the else branch is scanned as usual."""
        self.visit_counted("quiet", node, node.test)

    def visit_guard_if(self, node: ast.If, names_cuda: bool, negated: bool) -> None:
        """Any other `if`: a CUDA check in its test guards the body (the else branch when negated)."""
        guard = names_cuda and self.tuning_only(node.body)
        if guard:
            # `if torch.cuda.is_available(): torch.backends.cudnn.benchmark = True`: CUDA-only tuning,
            # correctly guarded: neither the guard nor the flags are couplings.
            self.quiet += 1
        before = self.availability_calls
        start = len(self.raw)
        self.visit(node.test)
        test = self.check_findings(node.test, start) if names_cuda or self.check_keys else []
        self.emit("if", node, self.availability_calls > before)
        periodic = any(type(n) is ast.BinOp and type(n.op) is ast.Mod for n in ast.walk(node.test))
        self.periodic += periodic
        body = self.mark()
        for stmt in node.body:
            self.visit(stmt)
        self.periodic -= periodic
        self.quiet -= guard
        orelse = self.mark()
        for stmt in node.orelse:
            self.visit(stmt)
        if test:
            self.guards.append((test, orelse, self.mark()) if negated else (test, body, orelse))

    def visit_BoolOp(self, node: ast.BoolOp) -> None:
        """`torch.cuda.is_available() and torch.cuda.is_bf16_supported()`: what follows the check in an
        `and` runs only where it passed, so it is guarded by it like an `if` body."""
        if type(node.op) is not ast.And:
            self.generic(node)
            return
        pending: tuple[list[int], Mark] | None = None
        for value in node.values:
            start = len(self.raw)
            self.visit(value)
            if pending is None and self.names_cuda(value) and not self.negated_check(value):
                test = self.check_findings(value, start)
                if test:
                    pending = (test, self.mark())
        if pending is not None:
            self.guards.append((*pending, self.mark()))

    def visit_IfExp(self, node: ast.IfExp) -> None:
        if self.names_cuda(node.test) and self.picks_cuda_package(
                [node.orelse if self.negated_check(node.test) else node.body]):
            # providers = ["CUDAExecutionProvider", ...] if torch.cuda.is_available() else [...]: correct.
            start = len(self.raw)
            self.quiet += 1
            self.visit(node.test)
            self.quiet -= 1
            self.dropped.update(self.check_findings(node.test, start))
            self.visit(node.body)
            self.visit(node.orelse)
            return
        self.emit("ifexp", node)
        start = len(self.raw)
        self.visit(node.test)
        test = self.check_findings(node.test, start) if self.names_cuda(node.test) else []
        body = self.mark()
        self.visit(node.body)
        orelse = self.mark()
        self.visit(node.orelse)
        if test:  # `torch.cuda.memory_reserved() if torch.cuda.is_available() else 0`: a guard too
            negated = self.negated_check(node.test)
            self.guards.append((test, orelse, self.mark()) if negated else (test, body, orelse))
            picked, other = (node.orelse, node.body) if negated else (node.body, node.orelse)
            word = picked.value if type(picked) is ast.Constant and type(picked.value) is str else None
            # "0" against "cpu" (yolov7's select_device): CUDA's device index, written as a string.
            index = word is not None and word.isdigit() and type(other) is ast.Constant and other.value == "cpu"
            if word is not None and (word.lower() in CUDA_WORDS or index):
                # `device="gpu" if torch.cuda.is_available() else "cpu"` handed to a trainer: "gpu" is
                # CUDA's name there (composer, Lightning), and no fix rewrites it.
                self.picked_words.append((test, (f'the string "{picked.value}" the check picks, which the code it '
                                                 f'is given to reads as CUDA', picked.lineno, None)))
