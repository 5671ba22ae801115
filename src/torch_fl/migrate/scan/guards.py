"""Guards and tests: code that is CUDA-only on purpose. Findings inside a CUDA-only test
(``@pytest.mark.skipif(not torch.cuda.is_available(), ...)``, ``RunIf(min_cuda_gpus=1)``), after a
``skip unless CUDA`` statement, under a guard made only of CUDA tuning, or in a correct check for a
CUDA-only library are intended and not reported (``quiet``)."""

from __future__ import annotations

import ast

from ..rules.base import terminal_name
from ..rules.libraries import CUDA_ONLY_LIBRARIES
from .dispatch import AVAILABILITY, Dispatch, calls

# Test-skip decorators and calls (pytest, unittest) whose condition names CUDA: the test is CUDA-only.
_SKIP_DECORATORS = frozenset({"skipif", "skipIf", "skipUnless"})
_SKIP_CALLS = frozenset({"skip", "skipTest", "SkipTest", "xfail"})
# Functions whose whole body is CUDA-only by its decorator (lightning's RunIf(min_cuda_gpus=1)).
_CUDA_TEST_KEYWORDS = frozenset({"min_cuda_gpus", "min_gpus", "cuda"})


class Guards(Dispatch):
    """CUDA-only tests and guards (a mixin of the detector)."""

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

    def is_cuda_mark(self, node: ast.AST) -> bool:
        """A test mark that says "CUDA only": skipif(<CUDA condition>), RunIf(min_cuda_gpus=1)."""
        for call in calls(node):
            name = terminal_name(call.func)
            if name in _SKIP_DECORATORS and call.args and self.names_cuda(call.args[0]):
                return True
            if any(kw.arg in _CUDA_TEST_KEYWORDS for kw in call.keywords):
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

    def cuda_only_case(self, node: ast.Call) -> bool:
        """pytest.param(torch.device("cuda"), marks=RunIf(min_cuda_gpus=1)): a CUDA-only test case."""
        return terminal_name(node.func) == "param" and any(
            kw.arg == "marks" and self.is_cuda_mark(kw.value) for kw in node.keywords)

    def cuda_only_module(self, node: ast.Module) -> bool:
        """pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), ...): a CUDA-only test module."""
        for stmt in node.body:
            if (type(stmt) is ast.Assign and any(type(t) is ast.Name and t.id == "pytestmark" for t in stmt.targets)
                    and any(terminal_name(c.func) in _SKIP_DECORATORS and c.args and self.names_cuda(c.args[0])
                            for c in calls(stmt.value))):
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
