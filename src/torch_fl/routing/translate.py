"""Generic implementations of operators: PyTorch's own decompositions.

Sources, in order: ``torch._decomp.decomposition_table`` (which also covers many in-place and ``out=``
overloads) and ``OpOverload.decompose()`` for CompositeImplicitAutograd kernels. A decomposition can
return ``NotImplemented`` for inputs it does not cover (``adaptive_max_pool2d``): that means "no
translation for these inputs", never a result.
"""

from __future__ import annotations

import functools
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch

from .table import is_composite_implicit


@functools.cache
def _table() -> dict[Any, Callable]:
    import torch._decomp  # heavy (imports torch._refs); loaded on the first translation only

    return torch._decomp.decomposition_table


def overload(op: str) -> torch._ops.OpOverload | None:
    """The OpOverload of canonical name 'aten::name.overload', or None if this torch lacks it."""
    namespace, rest = op.split("::", 1)
    name, _, ovl = rest.partition(".")
    packet = getattr(getattr(torch.ops, namespace), name, None)
    return getattr(packet, ovl or "default", None) if packet is not None else None


def translation(op: str) -> Callable | None:
    """A generic implementation of `op`, or None."""
    return _translation(op)


@functools.cache
def _translation(op: str) -> Callable | None:
    ovl = overload(op)
    if ovl is None:
        return None
    found = _table().get(ovl)
    inplace = _pointwise_inplace(ovl, found)
    if inplace is not None:
        return inplace
    if found is not None:
        return found
    if is_composite_implicit(op):
        return ovl.decompose
    return None


def _signature(ovl: torch._ops.OpOverload) -> list[tuple[str, str]]:
    return [(a.name, str(a.type)) for a in ovl._schema.arguments]


def _pointwise_inplace(ovl: torch._ops.OpOverload, decomposition: Callable | None) -> Callable | None:
    """An in-place pointwise op (lerp_, addcdiv_, mul_) as its functional op plus copy_ into self.

    PyTorch's in-place decompositions go through torch._refs' Python wrappers, ~10x the cost of the
    functional op on small tensors; optimizer updates are made of these ops. Where the functional result
    cannot be written into self as the in-place op would (a broadcast to a larger shape, a dtype self
    cannot hold), PyTorch's own decomposition runs instead, so errors stay PyTorch's."""
    name = ovl._schema.name
    if not name.endswith("_") or torch.Tag.pointwise not in ovl.tags or decomposition is None:
        return None
    functional = overload(f"{name[:-1]}.{ovl._overloadname}")
    if functional is None or _signature(functional) != _signature(ovl):
        return None  # pow_.Scalar is (Tensor self, Scalar exponent); pow.Scalar is (Scalar self, Tensor ...)

    def inplace(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        out = functional(self, *args, **kwargs)
        if out.shape != self.shape or not torch.can_cast(out.dtype, self.dtype):
            return decomposition(self, *args, **kwargs)
        return self.copy_(out)

    return inplace


def has_translation(op: str) -> bool:
    return translation(op) is not None


class RecursionGuard(threading.local):
    """Translation depth per op on this thread. Some decompositions call their own op on smaller
    problems (roll over several dims peels one dim per call), which ends; one that calls itself with
    the same inputs would not. A depth limit tells the two apart without inspecting arguments."""

    LIMIT = 16

    def __init__(self) -> None:
        self.depth: Counter[str] = Counter()
        self.in_kernel: Counter[str] = Counter()  # registered kernels running, per op


guard = RecursionGuard()


def untranslatable_reason(op: str) -> str | None:
    """Why `op` cannot be translated here and now (None: it can). The router and coverage's chain
    replay both ask this, so they refuse the same calls with the same words."""
    if translation(op) is None:
        return "no generic (decomposed) implementation exists"
    if guard.depth[op] >= guard.LIMIT:
        return f"its decomposition keeps calling {op} itself ({guard.LIMIT} levels deep)"
    return None
