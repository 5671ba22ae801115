"""The chip's kernel, not the host's: ops a chip computes in dtypes the host's kernel refuses.

CUDA's ``histc`` takes integer tensors (HF Mixtral's MoE routing counts experts with it), and the CPU kernel
refuses them ("histogram_cpu" not implemented for 'Int'). On the emulated chip that refusal
would stop a model that runs on the real one. Where the chip's kernel is documented to take the dtype,
the emulator computes the op in a wider dtype on the host and returns the chip's result dtype: integers
through float64 (exact for counts and for integers below 2**53), float16/bfloat16 through float32,
complex32 through complex64.

The facts are PyTorch's own: the OpInfo database's ``dtypesIfCUDA`` against its CPU ``dtypes``
(``torch.testing._internal.common_methods_invocations.op_db``, checked by tests/routing/test_emu_wider.py),
for the chips whose kernels are CUDA's (dispatch key CUDA: cuda, rocm). Other chips' kernels where their
sources say so: integer ``histc`` on XPU (torch-xpu-ops ``_histc_kernel``, src/ATen/native/xpu/sycl/
SummaryOpsKernels.cpp: ``AT_DISPATCH_ALL_TYPES``, Half refused) and on MLU (torch_mlu ``cnnl_histc``,
torch_mlu/csrc/aten/operators/cnnl/histc.cpp: ``AT_DISPATCH_ALL_TYPES``, int64 through int32) and on MUSA
(torch_musa ``Histc``, torch_musa/csrc/aten/ops/musa/SummaryOps.mu at 8b583b3: ``AT_DISPATCH_ALL_TYPES`` with
Half and Double refused, and its own comment that Long "would cause MUSA UNKNOWN ERROR": int64 is left to the
host's refusal, a failure where the chip fails too); npu's
``histc`` takes float16/float32 alone (its table row), so the route table refuses integers there first.
A plugin chip (PrivateUse1) is named by its device type. Only the failure path pays: the host kernel is
tried first, as for every native op.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._pytree import tree_map

INTS = frozenset({"uint8", "int8", "int16", "int32", "int64"})
# the chip (chip_key: its dispatch key, a plugin chip's device type) -> aten op (bare name) -> the dtypes its kernel takes that the CPU's does not
# (OpInfo's other CUDA-only dtypes are not reachable from the emulated device: half FFTs are refused by
# PyTorch's own fft frontend on every device type but cuda before any kernel runs, and complex32 is in no
# built-in chip's precision.dtypes; tests/routing/test_emu_wider.py lists them with the reason)
HALVES = frozenset({"float16", "bfloat16"})
WIDER: dict[str, dict[str, frozenset[str]]] = {
    "CUDA": {
        "aten::histc": INTS,
        # float16/bfloat16 kernels CUDA has and the CPU lacks ("... not implemented for 'Half'")
        "aten::_upsample_bilinear2d_aa": HALVES, "aten::_upsample_bilinear2d_aa_backward": HALVES,
        "aten::avg_pool3d": HALVES, "aten::avg_pool3d_backward": HALVES,
        "aten::multi_margin_loss": HALVES, "aten::multi_margin_loss_backward": HALVES,
        "aten::multilabel_margin_loss_forward": HALVES, "aten::multilabel_margin_loss_backward": HALVES,
    },
    "XPU": {"aten::histc": INTS},
    "mlu": {"aten::histc": INTS},
    "musa": {"aten::histc": INTS - {"int64"}},
}

_WIDE = {torch.float16: torch.float32, torch.bfloat16: torch.float32, torch.complex32: torch.complex64}


def chip_key(desc: Any) -> str:
    """The key of WIDER for chip description `desc`: its dispatch key, or for a plugin chip (PrivateUse1,
    which npu, mlu and musa share) its device type."""
    return desc.device_type if desc.dispatch_key == "PrivateUse1" else desc.dispatch_key


def applies(dispatch_key: str, op: str, dtype: str | None) -> bool:
    """Whether chip key `dispatch_key` computes `op` ('aten::histc.default') in `dtype` itself."""
    table = WIDER.get(dispatch_key)
    return bool(table) and dtype is not None and dtype in table.get(op.rsplit(".", 1)[0], ())


def compute(dispatch_key: str, op: str, func: Any, args: tuple, kwargs: dict) -> Any:
    """`func` on host tensors: those in a dtype the chip computes `op` in (and the host does not) widened,
    the results returned in the chip's dtype; other tensors (integer targets, indices) as they are."""
    narrow: list[torch.dtype] = []
    takes = WIDER[dispatch_key][op.rsplit(".", 1)[0]]

    def widen(value: Any) -> Any:
        if not isinstance(value, torch.Tensor) or str(value.dtype).removeprefix("torch.") not in takes:
            return value
        narrow.append(value.dtype)
        return value.to(_WIDE.get(value.dtype, torch.float64))

    out = func(*tree_map(widen, args), **tree_map(widen, kwargs))
    if not narrow:
        return out
    first = narrow[0]

    def back(value: Any) -> Any:
        if not isinstance(value, torch.Tensor):
            return value
        if first.is_complex or first in _WIDE:  # half FFTs: complex64 -> complex32, float32 -> float16
            if value.dtype == torch.complex64:
                return value.to(torch.complex32)
            if value.dtype == torch.float32:
                return value.to(torch.float16 if first in (torch.float16, torch.complex32) else first)
            return value
        return value.to(first) if value.dtype == torch.float64 else value  # integer histc: counts in its dtype

    return tree_map(back, out)


# A vendor's fused kernel rounds once ----------------------------------------------------------------------
# Ops the host computes as a composite (no CPU kernel; PyTorch's CompositeExplicitAutograd kernel runs several
# ops, each rounding float16/bfloat16 on its own) but a plugin chip's vendor registers a kernel of its own: the
# vendor's kernel computes half inputs in float32 and rounds the result once, which is what the vendors' own
# tests check (torch_npu's test/npu/test_binary_cross_entropy_with_logits.py compares the chip's float16 result
# with the CPU's float32 result cast to float16, within 1e-3; the host's composite missed it by 6.6e-3 with
# reduction='none'). On such a chip the emulator computes those ops so: half tensor arguments widened to
# float32, the results returned in their half dtype. Chips whose kernels are PyTorch's own (cuda, xpu: their
# tables come from native_functions.yaml) run the same composite as the host and keep its roundings.


# A chip's kernel accumulates half inputs in float32 where the host's does not --------------------------------
# The host's nll_loss kernels (aten/src/ATen/native/LossNLL.cpp, LossNLL2d.cpp) sum float16/bfloat16 terms in the
# half dtype itself: a 'sum' of 128 terms of either sign lands at 0.0229 where the float32 sum, rounded once, is
# 0.0066. CUDA's (aten/src/ATen/native/cuda/Loss.cu, NLLLoss2d.cu) sum in acc_type (float32 for half), and so
# does torch_mlu's: its test/torch_ops/test_nll_loss.py (test_nll_loss1d_batch, test_nll_loss_backward) compares
# the chip's float16 result with the CPU's float32 result within a relative MSE of 3e-2 ("mlu and gpu is
# consistent"), which the half sum misses by 50x (1.59). The emulated chip computes these ops in float32 and
# rounds the results once, as its kernel does.
FLOAT_ACCUMULATION: dict[str, frozenset[str]] = {
    "CUDA": frozenset({"aten::nll_loss_forward", "aten::nll_loss2d_forward"}),
    "mlu": frozenset({"aten::nll_loss_forward", "aten::nll_loss2d_forward"}),
}
_ACCUMULATED = frozenset().union(*FLOAT_ACCUMULATION.values())


def accumulated(op: str) -> bool:
    """Whether some chip's kernel of `op` ('aten::nll_loss_forward.default') accumulates half inputs in
    float32 where the host's kernel does not (FLOAT_ACCUMULATION)."""
    return op.rsplit(".", 1)[0] in _ACCUMULATED


def accumulates_in_float(desc: Any, op: str) -> bool:
    """Whether chip `desc`'s kernel of `op` accumulates half inputs in float32 (FLOAT_ACCUMULATION)."""
    return desc is not None and op.rsplit(".", 1)[0] in FLOAT_ACCUMULATION.get(chip_key(desc), ())


def host_composite(func: Any) -> bool:
    """Whether the host computes `func` with PyTorch's composite kernel (several ops) rather than a kernel
    of its own, and it returns tensors (a candidate for a chip's fused kernel)."""
    name = func.name()
    return (not func._schema.is_mutable  # (in-place and out= ops write their arguments: left as they are)
            and not any(r.alias_info is not None for r in func._schema.returns)  # (views: t, alias)
            and not torch._C._dispatch_has_kernel_for_dispatch_key(name, "CPU")
            and torch._C._dispatch_has_kernel_for_dispatch_key(name, "CompositeExplicitAutograd")
            and any(isinstance(r.type, torch.TensorType) for r in func._schema.returns))


def vendor_fused(desc: Any, op: str) -> bool:
    """Whether chip `desc`'s vendor registers a kernel of its own for `op` (its vendor op table lists it in
    the chosen release line), rather than running PyTorch's composite."""
    resolved = desc.native_table() if desc is not None and desc.dispatch_key == "PrivateUse1" else None
    if resolved is None:
        return False
    table, version, _ = resolved
    return op in table.ops(version)


def rounding_once(kernel: Any) -> Any:
    """`kernel` computing float16/bfloat16 tensor arguments in float32 and returning its float32 results
    in the first half argument's dtype (other dtypes pass through as they are)."""

    def fused(*args: Any, **kwargs: Any) -> Any:
        if not _any_half(args) and not (kwargs and _any_half(kwargs.values())):
            return kernel(*args, **kwargs)  # (the common call: nothing to widen, no pytree walk)
        half: list[torch.dtype] = []

        def widen(value: Any) -> Any:
            if isinstance(value, torch.Tensor) and value.dtype in _HALF:
                half.append(value.dtype)
                return value.float()
            return value

        if any(isinstance(v, torch.dtype) for v in (*args, *kwargs.values())):
            return kernel(*args, **kwargs)  # a result dtype asked for (sum(x, dtype=...)): the kernel's own
        wide_args, wide_kwargs = tree_map(widen, args), tree_map(widen, kwargs)
        if not half:
            return kernel(*args, **kwargs)
        out = kernel(*wide_args, **wide_kwargs)
        return tree_map(lambda v: v.to(half[0]) if isinstance(v, torch.Tensor) and v.dtype == torch.float32
                        else v, out)

    return fused


_HALF = (torch.float16, torch.bfloat16)


def _any_half(values: Any) -> bool:
    """Whether a float16/bfloat16 tensor is among `values` or in a list of them (aten arguments nest no
    deeper)."""
    for value in values:
        kind = type(value)
        if kind is list or kind is tuple:
            if any(isinstance(v, torch.Tensor) and v.dtype in _HALF for v in value):
                return True
        elif isinstance(value, torch.Tensor) and value.dtype in _HALF:
            return True
    return False

