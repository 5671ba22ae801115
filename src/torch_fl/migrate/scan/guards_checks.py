"""How a CUDA check is recognised (part of the guards mixin, ``guards.py``): a condition that asks about
CUDA, whether it is negated, the findings it holds, and the guards that are correct as they are (a check
for a CUDA-only library, one that guards only CUDA tuning or picks a CUDA-only package)."""

from __future__ import annotations

import ast

from ..rules.libraries import CUDA_ONLY_LIBRARIES, CUDA_ONLY_PACKAGES
from .dispatch import AVAILABILITY, Dispatch

# Statements that leave a function or loop: `if not torch.cuda.is_available(): return`.
_EXITS = (ast.Return, ast.Raise, ast.Continue, ast.Break)


class CudaChecks(Dispatch):
    """Conditions that ask about CUDA, and the guards made of them that need no fix."""

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

    def exits_without_cuda(self, stmt: ast.stmt) -> bool:
        """`if not torch.cuda.is_available(): return` (raise, continue, break): what follows runs only
        where the check passes."""
        return (type(stmt) is ast.If and not stmt.orelse and bool(stmt.body)
                and all(type(inner) in _EXITS for inner in stmt.body) and self.negated_check(stmt.test))

    def check_findings(self, test: ast.expr, start: int) -> list[int]:
        """Raw findings of a guard's test: those recorded from `start` on, and those of a variable the
        test reads that holds a CUDA check (`use_cuda = torch.cuda.is_available()`; `if use_cuda:`)."""
        found = list(range(start, len(self.raw)))
        for sub in ast.walk(test):
            if type(sub) in (ast.Name, ast.Attribute):
                key = self.key(sub)  # type: ignore[attr-defined]
                found.extend(self.check_keys.get(key, ()))
        return found

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

    def picks_cuda_package(self, branch: list[ast.AST]) -> bool:
        """A branch that names a CUDA-only package or provider ("CUDAExecutionProvider",
        "onnxruntime-gpu"): the CUDA check choosing it is correct on every host."""
        for node in branch:
            for sub in ast.walk(node):
                if type(sub) is ast.Constant and type(sub.value) is str \
                        and any(name in sub.value for name in CUDA_ONLY_PACKAGES):
                    return True
        return False
