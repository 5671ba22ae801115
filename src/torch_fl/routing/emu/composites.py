"""Ops the chip computes with its own kernel though PyTorch also gives them a composite one.

``silu_backward``, ``mish_backward`` and ``native_channel_shuffle`` have both backend kernels (CPU, CUDA, and a
plugin's where its table lists them) and a CompositeImplicitAutograd kernel for backends without one. On a real
chip that registers the op, its kernel wins; a Python backend registers none, so autograd's key decomposed them
on the emulated device even where the chip's table has them native: ``silu_backward`` became sigmoid, sub, mul,
add, whose rounding is not the kernel's (1e-10 on the gradients of every SiLU MLP: HF Phi-3, Mamba and
diffusers' AutoencoderKL were not bit for bit on any emulated chip; the held-out zoo judge,
scripts/model_zoo.py, found it). Here each op gets a kernel on the emulated backend's autograd key: where the
chip's table has the op native for the dtype and no graph of the result is needed (a backward without
create_graph), the op goes below autograd to the device as one call (the host kernel, as every native op);
otherwise PyTorch's composite runs, as on a chip without the kernel. ``one_hot`` has only the composite in
PyTorch, and a kernel of its own in op-plugin (npu's table), which takes int32 indices the composite refuses:
it reaches the chip the same way, computed by `HOST`.
"""

from __future__ import annotations

from typing import Any

import torch

from ..._names import RouteKind
from ..table import dtype_name
from .slot import state

aten = torch.ops.aten
OPS = ("silu_backward", "mish_backward", "native_channel_shuffle", "one_hot")
_library: Any = None


# chips (wider.chip_key) whose own one_hot takes integer indices of any width: op-plugin's
# (op_plugin/ops/opapi/OneHotKernelNpuOpApi.cpp; npu's table: int32, int64), its result in the indices' dtype.
# torch_musa's (torch_musa/csrc/aten/ops/OneHot.cpp) and PyTorch's take int64 alone.
ONE_HOT_ANY_WIDTH = frozenset({"npu"})


def _one_hot(self: torch.Tensor, num_classes: int = -1) -> torch.Tensor:
    from .wider import chip_key

    if state.description is not None and chip_key(state.description) in ONE_HOT_ANY_WIDTH:
        return torch.nn.functional.one_hot(self.long(), num_classes).to(self.dtype)
    return torch.nn.functional.one_hot(self, num_classes)  # (int64 only: "... of type LongTensor")


# The host computation of a chip's own kernel where PyTorch's composite (the host's only kernel) differs from it
HOST: dict[Any, Any] = {aten.one_hot.default: _one_hot}


_registered: dict[int, tuple[Any, frozenset[str]]] = {}


def _kernels_of(desc: Any) -> frozenset[str]:
    """The ops the chip's own kernels cover: its vendor table's rows, without the composite ops that
    native_ops() adds (every backend inherits those, so they say nothing about a kernel of its own)."""
    known = _registered.get(id(desc))
    if known is None or known[0] is not desc:
        ops = desc.native_ops()
        if desc.data["ops"]["native"] == "probe":
            resolved = desc.native_table()
            if resolved is not None:
                table, version, _ = resolved
                ops = table.ops(version)
        known = _registered[id(desc)] = (desc, frozenset(ops))
    return known[1]


def _native(op: Any, args: tuple) -> bool:
    """Whether the emulated chip has a kernel of its own for `op` in its first argument's dtype."""
    table = state.table
    first = args[0] if args else None
    if table is None or not isinstance(first, torch.Tensor):
        return False
    name = f"{op._schema.name}.default"
    return name in _kernels_of(table.description) and table.route(name, dtype_name(first.dtype)).kind is RouteKind.NATIVE


def _kernel(op: Any) -> Any:
    def kernel(*args: Any, **kwargs: Any) -> Any:
        graph = torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad for a in args)
        if not graph and _native(op, args):
            with torch._C._AutoDispatchBelowAutograd():
                return op(*args, **kwargs)
        return op.decompose(*args, **kwargs)

    return kernel


def register() -> None:
    """Put the kernels on the emulated backend's autograd key (once per process)."""
    global _library
    if _library is None:
        _library = torch.library.Library("aten", "IMPL")
        for name in OPS:
            _library.impl(name, _kernel(getattr(aten, name).default), "AutogradPrivateUse1")
