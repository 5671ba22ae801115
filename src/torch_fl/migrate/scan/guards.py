"""Guards and tests: code that is CUDA-only on purpose. Findings inside a CUDA-only test
(``@pytest.mark.skipif(not torch.cuda.is_available(), ...)``, ``RunIf(min_cuda_gpus=1)``), after a
``skip unless CUDA`` statement, under a guard made only of CUDA tuning, or in a correct check for a
CUDA-only library are intended and not reported (``quiet``)."""

from __future__ import annotations

import ast
import re

from ..cuda_api import CUDA_DEVICE
from ..rules import RULES
from ..rules.base import names_vendors, str_value, terminal_name
from ..rules.libraries import CUDA_ONLY_LIBRARIES, CUDA_ONLY_PACKAGES
from .dispatch import AVAILABILITY, Dispatch, calls

# Test-skip decorators and calls (pytest, unittest) whose condition names CUDA: the test is CUDA-only.
_SKIP_DECORATORS = frozenset({"skipif", "skipIf", "skipUnless"})
_SKIP_CALLS = frozenset({"skip", "skipTest", "SkipTest", "xfail"})
# Functions whose whole body is CUDA-only by its decorator (lightning's RunIf(min_cuda_gpus=1)).
_CUDA_TEST_KEYWORDS = frozenset({"min_cuda_gpus", "min_gpus", "cuda"})
# Test marks and decorators whose name says "CUDA only": @pytest.mark.requires_cuda, @requires_gpu,
# @pytest.mark.cuda, @cuda_only, @skip_if_no_cuda, @onlyCUDA (PyTorch's own tests).
_CUDA_MARK = re.compile(r"(requires?_?|needs?_?|only_?|skip_?if_?no_?|skip_?unless_?)?(cuda|gpu)s?(_?only)?"
                        r"|only_?cuda|onlycuda|cuda_?required", re.IGNORECASE)
# A point of the walk: (raw findings, data-flow sources, module-function calls, calls into the project's
# other modules, "cuda" literals) so far.
Mark = tuple[int, int, int, int, int]
# Statements that leave a function or loop: `if not torch.cuda.is_available(): return`.
_EXITS = (ast.Return, ast.Raise, ast.Continue, ast.Break)


def _device_types(test: ast.expr) -> set[str]:
    """The device types a dispatch test names: `X == "cuda"`, `X in ("npu", "xpu")`, `X.startswith("mps")`,
    joined by `or`."""
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


class Guards(Dispatch):
    """CUDA-only tests and guards (a mixin of the detector)."""

    def names_cuda(self, test: ast.expr) -> bool:
        """Whether a condition asks about CUDA: torch.cuda.is_available(), device_count(), a comparison
        with "cuda" or a CUDA type name ("torch.cuda.HalfTensor"), x.is_cuda, torch.version.cuda."""
        for sub in ast.walk(test):
            kind = type(sub)
            if kind is ast.Call and self.qualname(sub.func) in AVAILABILITY:
                return True
            if kind is ast.Constant and type(sub.value) is str and sub.value.startswith(("cuda", "torch.cuda.")):
                return True
            if kind is ast.Attribute and (sub.attr == "is_cuda" or self.qualname(sub) == "torch.version.cuda"):
                return True
            if self.check_keys and kind in (ast.Name, ast.Attribute) and self.key(sub) in self.check_keys:  # type: ignore[attr-defined]
                return True  # `use_cuda = torch.cuda.is_available()`; `if use_cuda:`
            if self.check_keys and kind is ast.Name and ("name", 0, sub.id) in self.check_keys \
                    and sub.id not in self.locals.get(self.scope, ()):  # type: ignore[attr-defined]
                return True  # a module flag read in a function
        return False

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
        for call in calls(node):
            name = terminal_name(call.func)
            if name in _SKIP_DECORATORS and call.args and self.skip_condition(call.args[0]):
                return True
            if any(kw.arg in _CUDA_TEST_KEYWORDS for kw in call.keywords):
                return True
        return False

    def cuda_only_test(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> bool:
        """@pytest.mark.skipif(not torch.cuda.is_available(), ...), @unittest.skipUnless(...cuda...),
        @RunIf(min_cuda_gpus=1): the test exists to exercise CUDA."""
        for decorator in node.decorator_list:
            if _CUDA_MARK.fullmatch(terminal_name(decorator.func if type(decorator) is ast.Call else decorator)
                                    or ""):
                return True
            if type(decorator) is not ast.Call:
                continue
            name = terminal_name(decorator.func)
            if name in _SKIP_DECORATORS and decorator.args and self.skip_condition(decorator.args[0]):
                return True
            if any(kw.arg in _CUDA_TEST_KEYWORDS for kw in decorator.keywords):
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
        """A function or module body: after a `skip unless CUDA` statement, the rest is CUDA-only; after
        `if not torch.cuda.is_available(): return`, the rest is guarded by it."""
        quiet = False
        for index, stmt in enumerate(statements):
            if not quiet and self.skips_without_cuda(stmt):
                quiet = True
                self.quiet += 1
                continue
            if self.requires_cuda_library(stmt):
                continue
            if not quiet and self.exits_without_cuda(stmt):
                rest = statements[index + 1:]
                if self.tuning_only(rest):
                    # `if not torch.cuda.is_available(): return` then cuDNN flags: correctly guarded.
                    self.quiet += 1
                    self.visit(stmt)
                    self.body(rest)
                    self.quiet -= 1
                    break
                start = len(self.raw)
                self.visit(stmt)
                test = list(range(start, len(self.raw)))
                guarded = self.mark()
                self.body(rest)
                self.guards.append((test, guarded, self.mark()))
                break
            self.visit(stmt)
        if quiet:
            self.quiet -= 1

    def exits_without_cuda(self, stmt: ast.stmt) -> bool:
        """`if not torch.cuda.is_available(): return` (raise, continue, break): what follows runs only
        where the check passes."""
        return (type(stmt) is ast.If and not stmt.orelse and bool(stmt.body)
                and all(type(inner) in _EXITS for inner in stmt.body) and self.negated_check(stmt.test))

    def negated_check(self, test: ast.expr) -> bool:
        """Whether the CUDA check in `test` is negated (`not torch.cuda.is_available()`, `device != "cuda"`):
        the guarded code is then the else branch."""
        for sub in ast.walk(test):
            if type(sub) is ast.UnaryOp and type(sub.op) is ast.Not and self.names_cuda(sub.operand):
                return True
            if type(sub) is ast.Compare and any(type(op) in (ast.NotEq, ast.IsNot, ast.NotIn) for op in sub.ops) \
                    and self.names_cuda(sub):
                return True
        return False

    def picks_cuda_package(self, branch: list[ast.AST]) -> bool:
        """A branch that names a CUDA-only package or provider ("CUDAExecutionProvider",
        "onnxruntime-gpu"): the CUDA check choosing it is correct on every host."""
        for node in branch:
            for sub in ast.walk(node):
                if type(sub) is ast.Constant and type(sub.value) is str \
                        and any(name in sub.value for name in CUDA_ONLY_PACKAGES):
                    return True
        return False

    def check_findings(self, test: ast.expr, start: int) -> list[int]:
        """Raw findings of a guard's test: those recorded from `start` on, and those of a variable the
        test reads that holds a CUDA check (`use_cuda = torch.cuda.is_available()`; `if use_cuda:`)."""
        found = list(range(start, len(self.raw)))
        for sub in ast.walk(test):
            if type(sub) in (ast.Name, ast.Attribute):
                key = self.key(sub)  # type: ignore[attr-defined]
                found.extend(self.check_keys.get(key, ()))
        return found

    def mark(self) -> Mark:
        """Where the walk is: how many raw findings, data-flow sources, module-function calls and calls into
        the project's other modules so far. Two marks delimit the code a guard covers."""
        return (len(self.raw), len(self.sources), len(self.local_calls),  # type: ignore[attr-defined]
                len(self.project_calls), len(self.cuda_literals))  # type: ignore[attr-defined]

    def settle_guards(self) -> None:
        """Settle every guard recorded during the walk, innermost first, once the data-flow findings
        (which come at the end) are in. Checks held by a test's skip flag are dropped first."""
        for key in self.skip_keys:
            self.dropped.update(self.check_keys.get(key, ()))
        for test, start, end in self.guards:
            if test and all(i in self.dropped for i in test):
                continue  # the guard is a skip flag's: left as it is, and so is what it guards
            self.settle_guard(test, start, end)

    def visit_Constant(self, node: ast.Constant) -> None:
        if not self.quiet and type(node.value) is str and CUDA_DEVICE.fullmatch(node.value):
            self.cuda_literals.append((node, self.stmt_line))

    def guarded_literals(self, start: Mark, end: Mark) -> list[tuple[str, int, str | None]]:
        """A "cuda" literal that only a CUDA check reaches (`["cpu"] + (["cuda"] if
        torch.cuda.is_available() else [])`, detectron2) is part of the guarded code: rewriting the check
        alone would hand "cuda" to an NPU. The "guarded_literal" hooks (rules/device.py) report it with
        the fix that keeps it consistent and return (code, line, safety). A literal used as a table key
        (`cfg["cuda"]`) has no fix: the table has no "npu" entry. Returns the guard's candidates (what,
        line, safety)."""
        found: list[tuple[str, int, str | None]] = []
        for node, stmt_line in self.cuda_literals[start[4]:end[4]]:
            known = self.literal_findings.get(id(node))
            if known is not None:
                found.append(known)
                continue
            if id(node) in self.done:
                continue  # another finding's (`.to("cuda")`, `x.device.type == "cuda"`): counted as that
            if id(node) in self.key_literals:
                known = (f'the table key "{node.value}"', node.lineno, None)
            else:
                outer, self.stmt_line = self.stmt_line, stmt_line
                known = self.emit("guarded_literal", node) or (f'the device string "{node.value}"', node.lineno, None)
                self.stmt_line = outer
            self.literal_findings[id(node)] = known
            found.append(known)
        return found

    def settle_guard(self, test: list[int], start: Mark, end: Mark) -> None:
        """A guard's test is fixed only together with the code it guards. Rewriting the test alone opens
        the guard on every accelerator; code under it that does not run there (a CUDA-only call with no
        fix, a "cuda" string no fix rewrites) would then run where the original took the other branch.
        So the test's fixes get the weakest safety of the guarded findings (code that runs off CUDA, a
        flag write, does not count): all safe, safe; some unsafe, unsafe (fixed together under
        --unsafe-fixes); some with no fix, no fix, with the reason in the message."""
        guarded, sources = range(start[0], end[0]), range(start[1], end[1])
        literals = self.guarded_literals(start, end)
        by_pos = {raw.where: raw for i, raw in enumerate(self.raw) if i not in self.dropped}
        weakest: str | None = "safe"
        blocker = ""
        candidates = [(self.raw[i].code, self.raw[i].where[0], self.raw[i].safety) for i in guarded
                      if i not in self.dropped and not RULES[self.raw[i].code].runs_off_cuda]
        candidates += literals
        # A module function called under the guard runs under it too (`if torch.cuda.is_available():
        # print(gpu_name())`): its findings count (one level; methods not followed).
        called = {name for _, name in self.local_calls[start[2]:end[2]]}
        # A function of another module of the project (`from . import dist_util`; `dist_util.dev()`) runs
        # under it too, and this pass cannot see its body: the fix is not known to be safe.
        for line, text in self.project_calls[start[3]:end[3]]:  # type: ignore[attr-defined]
            candidates.append((f"{text}(), defined in another module of this project and not followed here",
                               line, "unsafe"))
        for name in called:
            function = self.functions[name]
            candidates += [(raw.code, raw.where[0], raw.safety) for i, raw in enumerate(self.raw)
                           if i not in self.dropped and function.lineno <= raw.where[0] <= (function.end_lineno or 0)
                           and not RULES[raw.code].runs_off_cuda]
        for kind, _key, literal, _index, _line, _target in (self.sources[i] for i in sources):  # type: ignore[attr-defined]
            found = by_pos.get((literal.lineno, literal.col_offset, literal.end_lineno, literal.end_col_offset))
            if found is None:  # bound here and used as a string: no fix rewrites it
                candidates.append((f'the {kind} string "{literal.value}"', literal.lineno, None))  # type: ignore[attr-defined]
            elif not RULES[found.code].runs_off_cuda:
                candidates.append((found.code, literal.lineno, found.safety))
        for what, line, safety in candidates:
            if safety is None:
                weakest, blocker = None, f"{what}, line {line}"
                break
            if safety == "unsafe" and weakest == "safe":
                weakest, blocker = "unsafe", f"{what}, line {line}"
        if weakest == "safe":
            return
        if weakest is None:
            note = (f"not fixed: it guards CUDA-only code that has no automatic fix ({blocker}); rewritten "
                    f"alone, the check would run that code on other accelerators, where the original took "
                    f"the other branch: port the guarded code, then the check")
        else:
            note = f"unsafe: it guards code whose fix is unsafe ({blocker}); --unsafe-fixes rewrites both"
        for index in test:
            raw = self.raw[index]
            if raw.safety is None or (raw.safety == "unsafe" and weakest == "unsafe"):
                continue
            self.raw[index] = raw._replace(safety=weakest, fields={**raw.fields, "note": note},
                                           replacement=raw.replacement if weakest else None)

    def visit_Assert(self, node: ast.Assert) -> None:
        if not self.requires_cuda_library(node):  # `assert torch.cuda.is_available(), "bitsandbytes ..."`
            self.statement(node)

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

    def visit_If(self, node: ast.If) -> None:
        chain = self.vendor_chain(node)
        if chain is not None:
            self.visit_vendor_chain(chain)
            return
        outer, self.stmt_line = self.stmt_line, node.lineno
        names_cuda = self.names_cuda(node.test)
        negated = names_cuda and self.negated_check(node.test)
        skips = names_cuda and self.skip_body(node.body)
        if skips and not all(type(inner) is ast.Return for inner in node.body):
            self.skip_condition(node.test)  # a test skip (not a bare `return`): its flag is a test's
        if skips or self.requires_cuda_library(node) \
                or (names_cuda and self.picks_cuda_package(node.orelse if negated else node.body)):
            # `if not torch.cuda.is_available(): pytest.skip(...)`: a CUDA-only test says so; a check
            # that picks a CUDA-only package (onnxruntime's CUDAExecutionProvider) is right as it is.
            self.quiet += 1
            self.visit(node.test)
            for stmt in node.body:
                self.visit(stmt)
            self.quiet -= 1
            for stmt in node.orelse:
                self.visit(stmt)
            self.stmt_line = outer
            return
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
        self.stmt_line = outer

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
            self.guards.append((test, orelse, self.mark()) if self.negated_check(node.test) else (test, body, orelse))
