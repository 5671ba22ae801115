"""Generic implementations of operators: PyTorch's own decompositions.

Sources, in order: ``torch._decomp.decomposition_table`` (which also covers many in-place and ``out=``
overloads), ``OpOverload.decompose()`` for CompositeImplicitAutograd kernels, and for the ``_foreach_*``
ops their CompositeExplicitAutograd kernel: the per-tensor loop PyTorch itself runs on any backend that
registers no fused kernel of its own. A decomposition can
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

from .._opnames import dispatcher_op_name


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
        correct = _CORRECTIONS.get(op)
        return found if correct is None else functools.partial(_corrected, found, correct)
    if is_composite_implicit(op):
        return ovl.decompose
    return _composite_explicit(ovl)


def _composite_explicit(ovl: torch._ops.OpOverload) -> Callable | None:
    """A ``_foreach_*`` op's CompositeExplicitAutograd kernel (PyTorch's ``foreach_tensor_*_slow``: one
    call of the per-tensor op for each tensor, each routed in turn) as a callable, or None. Only these:
    other ops' CompositeExplicitAutograd kernels are often not decompositions but device code of their
    own (copy_'s checks device types and reaches into the storage), which is no generic implementation."""
    name = ovl.name()
    if not name.startswith("aten::_foreach_"):
        return None
    computed = getattr(torch._C, "_dispatch_get_computed_kernel_for_dispatch_key", None)  # torch >= 2.9
    if computed is None or not torch._C._dispatch_has_kernel_for_dispatch_key(name, "CompositeExplicitAutograd"):
        return None
    # The alias key has no runtime entry; the Undefined key's entry is the alias's default kernel
    # (no backend registers kernels there).
    kernel = computed(name, "Undefined")
    keyset = torch._C.DispatchKeySet(torch._C.DispatchKey.CompositeExplicitAutograd)

    def composite(*args: Any, **kwargs: Any) -> Any:
        return kernel.call_boxed(keyset, *args, **kwargs)

    return composite


def _corrected(decomposition: Callable, correct: Callable, *args: Any, **kwargs: Any) -> Any:
    out = decomposition(*args, **kwargs)
    return out if out is NotImplemented else correct(out, *args, **kwargs)


# Decompositions whose results differ in shape from every device kernel's for some inputs; each fix
# gives the kernel's shape (checked against the CPU kernel in tests/routing/test_translate_fixes.py).
def _batch_norm_eval(out: tuple, input: torch.Tensor, weight: Any, bias: Any, running_mean: Any,
                     running_var: Any, training: bool, *rest: Any, **kwargs: Any) -> tuple:
    if training or running_mean is None:
        return out
    # in eval the kernels save no statistics: save_mean and save_invstd are empty
    empty = out[0].new_empty((0,))
    return out[0], empty, empty.clone()


def _multilabel_margin_loss(out: tuple, input: torch.Tensor, target: torch.Tensor, reduction: int,
                            *rest: Any) -> tuple:
    """The loss again, with the targets after the first -1 left out (PyTorch's decomposition gathers
    them as class 0) and one sample's loss 0-dim, as the kernels give; its is_target is right."""
    x, y = torch.atleast_2d(input), torch.atleast_2d(target)
    classes = x.shape[-1]  # (a 0-dim input is one sample of one class, as the kernels take it)
    position = torch.arange(classes, device=y.device)
    end = torch.amin(torch.where(y == -1, position, classes), dim=-1, keepdim=True)
    valid = position < end  # [N, j]: the j-th target counts
    picked = torch.gather(x, -1, torch.where(valid, y, 0))
    margins = (1.0 - picked.unsqueeze(-1) + x.unsqueeze(1)).clamp_min(0) / classes  # [N, j, i]
    margins = margins * valid.unsqueeze(-1)
    margins = torch.where(torch.atleast_2d(out[1]).bool().unsqueeze(1), 0, margins)
    loss = margins.sum((1, 2))
    if reduction == 1:
        loss = loss.mean()
    elif reduction == 2:
        loss = loss.sum()
    else:
        loss = loss.reshape(input.shape[:-1] if input.dim() else ())
    return loss, out[1]


_CORRECTIONS: dict[str, Callable[..., Any]] = {
    "aten::native_batch_norm.default": _batch_norm_eval,
    "aten::multilabel_margin_loss_forward.default": _multilabel_margin_loss,
}


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


def is_composite_implicit(op: str) -> bool:
    """CompositeImplicitAutograd ops decompose above the backend key, so they never need a route (and
    their decomposition is a translation)."""
    try:
        return torch._C._dispatch_has_kernel_for_dispatch_key(dispatcher_op_name(op),
                                                              "CompositeImplicitAutograd")
    except RuntimeError:
        return False


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
