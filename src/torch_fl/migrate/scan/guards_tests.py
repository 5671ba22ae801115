"""How a CUDA-only test is recognised (part of the guards mixin, ``guards.py``): skip marks and
decorators whose condition names CUDA (``@pytest.mark.skipif(not torch.cuda.is_available(), ...)``,
``RunIf(min_cuda_gpus=1)``, ``@requires_cuda``), CUDA-only test cases and modules, and the statements
that skip a test without CUDA. Findings inside them are intended."""

from __future__ import annotations

import ast
import re

from ..rules.base import terminal_name
from .dispatch import calls
from .guards_checks import CudaChecks

# Test-skip decorators and calls (pytest, unittest) whose condition names CUDA: the test is CUDA-only.
_SKIP_DECORATORS = frozenset({"skipif", "skipIf", "skipUnless"})
_SKIP_CALLS = frozenset({"skip", "skipTest", "SkipTest", "xfail"})
# Functions whose whole body is CUDA-only by its decorator (lightning's RunIf(min_cuda_gpus=1)).
_CUDA_TEST_KEYWORDS = frozenset({"min_cuda_gpus", "min_gpus", "cuda"})
# Test marks and decorators whose name says "CUDA only": @pytest.mark.requires_cuda, @requires_gpu,
# @pytest.mark.cuda, @cuda_only, @skip_if_no_cuda, @onlyCUDA (PyTorch's own tests).
_CUDA_MARK = re.compile(r"(requires?_?|needs?_?|only_?|skip_?if_?no_?|skip_?unless_?)?(cuda|gpu)s?(_?only)?"
                        r"|only_?cuda|onlycuda|cuda_?required", re.IGNORECASE)


class CudaOnlyTests(CudaChecks):
    """Tests, test cases and test modules that exist to exercise CUDA, and test skips without it."""

    def skip_condition(self, test: ast.expr) -> bool:
        """names_cuda for the condition of a test skip (skipif, skipUnless, `if not ...: pytest.skip()`).
        A flag it reads that holds a CUDA check (`cuda_available = torch.cuda.is_available()`, also read
        from a class body) is a test's capability flag: CUDA-only tests must keep skipping on other
        accelerators, so its check is left as it is (settle_guards drops its findings)."""
        found = False
        for sub in ast.walk(test):
            if type(sub) not in (ast.Name, ast.Attribute):
                continue
            keys = [self.key(sub)]  # type: ignore[attr-defined]
            if type(sub) is ast.Name:
                keys.append(("name", 0, sub.id))  # a module flag read in a class body or a function
            for key in keys:
                if key in self.check_keys:
                    self.skip_keys.add(key)
                    found = True
        return found or self.names_cuda(test)

    def is_cuda_mark(self, node: ast.AST) -> bool:
        """A test mark that says "CUDA only": skipif(<CUDA condition>), RunIf(min_cuda_gpus=1)."""
        if any(type(sub) is ast.Attribute and _CUDA_MARK.fullmatch(sub.attr) for sub in ast.walk(node)):
            return True  # marks=pytest.mark.requires_cuda
        return any(self.skip_call(call) for call in calls(node))

    def skip_call(self, call: ast.Call) -> bool:
        """skipif(<CUDA condition>), skipUnless(...), RunIf(min_cuda_gpus=1): a call marking CUDA only."""
        name = terminal_name(call.func)
        if name in _SKIP_DECORATORS and call.args and self.skip_condition(call.args[0]):
            return True
        return any(kw.arg in _CUDA_TEST_KEYWORDS for kw in call.keywords)

    def cuda_only_test(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> bool:
        """@pytest.mark.skipif(not torch.cuda.is_available(), ...), @unittest.skipUnless(...cuda...),
        @RunIf(min_cuda_gpus=1): the test exists to exercise CUDA."""
        for decorator in node.decorator_list:
            if _CUDA_MARK.fullmatch(terminal_name(decorator.func if type(decorator) is ast.Call else decorator)
                                    or ""):
                return True
            if type(decorator) is ast.Call and self.skip_call(decorator):
                return True
        return False

    def cuda_only_case(self, node: ast.Call) -> bool:
        """pytest.param(torch.device("cuda"), marks=RunIf(min_cuda_gpus=1)): a CUDA-only test case; and
        a skip mark made anywhere (`requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), ...)`):
        its condition is right as it is."""
        name = terminal_name(node.func)
        if name in _SKIP_DECORATORS and node.args and self.skip_condition(node.args[0]):
            return True
        return name == "param" and any(
            kw.arg == "marks" and self.is_cuda_mark(kw.value) for kw in node.keywords)

    def cuda_only_module(self, node: ast.Module) -> bool:
        """pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), ...): a CUDA-only test module."""
        for stmt in node.body:
            if (type(stmt) is ast.Assign and any(type(t) is ast.Name and t.id == "pytestmark" for t in stmt.targets)
                    and any(terminal_name(c.func) in _SKIP_DECORATORS and c.args and self.skip_condition(c.args[0])
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
                return self.skip_condition(stmt.test)
            if type(inner) is ast.Raise and terminal_name(call if type(call) is not ast.Call else call.func) \
                    in _SKIP_CALLS:
                return self.skip_condition(stmt.test)
        return False
