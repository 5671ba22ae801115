"""Sparse tensors on the emulated chip: the ops its plugin registers for the sparse layouts, and its refusal.

A sparse tensor on a real PrivateUse1 chip dispatches to another backend key than a dense one
(``SparsePrivateUse1`` for COO, ``SparseCsrPrivateUse1`` for CSR/CSC/BSR/BSC), where the plugin registers a
separate, much shorter op list. The dense route table (builtin/tables) leaves those entries out on purpose
(another layout), so a call with a sparse argument (or a factory asked for a sparse layout) is decided here:
it runs the host's sparse kernel when the chip has a kernel for the op on that key, else it fails as the
chip fails. The values are the CPU's: the host's sparse kernels compute them.

What each plugin registers (facts from its own codegen, against the torch it is built with):

- ``torch_npu`` (Ascend/pytorch torchnpugen/gen_backend_stubs.py ``gen_target_registration`` and
  torchnpugen/utils.py ``get_target_native_registration`` at 9e73e70): every op whose SparseCPU and SparseCUDA
  kernels are one function in PyTorch's native_functions.yaml (device-generic kernels: ``_nnz_sparse``,
  ``new_with_dims_and_tensor_sparse_symint``, ``sparse_to_dense``...), plus op-plugin's ``sparse:`` entries
  (Ascend/op-plugin op_plugin/config/op_plugin_functions.yaml at 517f2e7: ``add.out``, ``_coalesce``, ``max``,
  ``mul.out``; kernels in op_plugin/ops/opapi/sparse/). Any other op on SparsePrivateUse1 reaches
  ``npu_Sparse_fallback`` (torch_npu/csrc/aten/VariableFallbackKernel.cpp), which raises "CAUTION: The
  operator '...' is not currently supported on the NPU backend." (no CPU fallback for sparse tensors). CSR:
  the same common-kernel rule, plus ``_sparse_csr_sum.dim_dtype`` / ``_sparse_csr_prod.dim_dtype``
  (torch_npu/csrc/aten/ops/SparseCsrReductionFallbackKernelNpu.cpp).
- ``torch_mlu`` (Cambricon/torch_mlu codegen/mlu_functions.yaml at 9e95f97, "Note: [SparsePrivateUse1]"):
  the same common-kernel rule, plus the entries with ``dispatch: ... SparsePrivateUse1`` (``addmm``,
  ``addmm_``, ``addmm.out``, ``_coalesce``). No sparse fallback: PyTorch's "Could not run" error.
- ``torch_musa`` (MooreThreads/torch_musa torch_musa/csrc/aten/ops/musa_functions.yaml at 8b583b3): only the
  entries that name ``SparsePrivateUse1`` / ``SparseCsrPrivateUse1`` (construction, ``_nnz``, indices and
  values, coalescing, conversions); no common-kernel rule. PyTorch's "Could not run" error otherwise.

Ops with a CompositeExplicitAutograd kernel run on every backend key, sparse ones included
(CompositeExplicitAutogradNonFunctional ones on SparseCsr, not on Sparse); the CompositeImplicitAutograd
ones decompose before they reach the device. Chips not listed here (built-in
backends: their sparse kernels are PyTorch's) keep the dense route table's answer.

A kernel the chip has is not the whole answer: the device-generic kernels call other ops, and those calls
dispatch on the chip's sparse key again. ``mm`` of a COO matrix is device-generic (``_sparse_mm``), but it calls
``_sparse_addmm`` and then ``addmm``, which torch_npu has no sparse kernel for, so ``torch.sparse.mm`` fails on
the chip. The host's kernel therefore runs with each sparse call it makes checked the same way (`checked`).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

COO = "Sparse"
CSR = "SparseCsr"
_CSR_LAYOUTS = frozenset({torch.sparse_csr, torch.sparse_csc, torch.sparse_bsr, torch.sparse_bsc})


@dataclass(frozen=True)
class SparseKernels:
    """What one plugin registers on its sparse keys."""

    common: bool                        # PyTorch's device-generic sparse kernels (SparseCPU == SparseCUDA)
    ops: dict[str, frozenset[str]]      # key (COO, CSR) -> the plugin's own entries ('aten::add.out')
    refusal: str                        # 'vendor': the plugin's own message (below); 'dispatcher': PyTorch's
    message: str = ""                   # the plugin's message, '{op}' for the operator name
    # the plugin's own kernels where the host's sparse kernel differs or is missing: op -> host function
    reference: dict[str, Callable[..., Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # (the emulated device looks a kernel up as reference.get(op, host_kernel): _Kernels answers the host's
        # kernel run under the chip's checks for the ops that have none of the plugin's own)
        object.__setattr__(self, "reference", _Kernels(self, self.reference))


class _Kernels(dict):
    """op -> the plugin's own sparse kernel; ``get(op, host_kernel)`` of an op it has none for: the host's
    kernel, with every sparse call that kernel makes checked against the chip's registrations (`checked`)."""

    def __init__(self, chip: SparseKernels, own: dict[str, Callable[..., Any]]) -> None:
        super().__init__(own)
        self.chip = chip

    def get(self, name: str, default: Any = None) -> Any:
        own = super().get(name)
        if own is not None or default is None:
            return own if own is not None else default
        return functools.partial(checked, self.chip, default)


def _names(*names: str) -> frozenset[str]:
    return frozenset(f"aten::{n}" if "." in n else f"aten::{n}.default" for n in names)


def _max_of_dense(self: torch.Tensor) -> torch.Tensor:
    """op-plugin's sparse ``max`` (op_plugin/ops/opapi/sparse/SparseMaxKernelNpuOpApi.cpp ``max_sparse``): the
    maximum of ``self.to_dense()``, implicit zeros included (the host has no sparse ``max``)."""
    return torch.max(self.to_dense())


def _coalesce_in_float32(self: torch.Tensor) -> torch.Tensor:
    """op-plugin's ``_coalesce_sparse`` (op_plugin/ops/opapi/sparse/SparseCoalesceKernelOpApi.cpp): float16 and
    bfloat16 values are summed in float32 and rounded once; other dtypes as the host sums them."""
    values = self._values()
    if values.dtype not in (torch.float16, torch.bfloat16):
        return torch.ops.aten._coalesce.default(self)
    wide = torch.sparse_coo_tensor(self._indices(), values.float(), self.shape, is_coalesced=False)
    summed = torch.ops.aten._coalesce.default(wide)
    return torch.sparse_coo_tensor(summed._indices(), summed._values().to(values.dtype), self.shape,
                                   is_coalesced=True)


# the chip (wider.chip_key: a plugin chip's device type) -> its plugin's sparse registrations
KERNELS: dict[str, SparseKernels] = {
    "npu": SparseKernels(
        common=True,
        ops={COO: _names("add.out", "_coalesce", "max", "mul.out"),
             CSR: _names("_sparse_csr_sum.dim_dtype", "_sparse_csr_prod.dim_dtype")},
        refusal="vendor",
        message="CAUTION: The operator '{op}' is not currently supported on the NPU backend.",
        reference={"aten::max.default": _max_of_dense, "aten::_coalesce.default": _coalesce_in_float32}),
    "mlu": SparseKernels(
        common=True,
        ops={COO: _names("addmm", "addmm_", "addmm.out", "_coalesce"), CSR: frozenset()},
        refusal="dispatcher"),
    "musa": SparseKernels(
        common=False,
        ops={COO: _names("_sparse_coo_tensor_with_dims_and_tensors", "_to_sparse.sparse_dim", "_to_sparse",
                         "_to_sparse_csr", "sparse_dim", "_nnz", "_indices", "_values", "is_coalesced",
                         "_coalesce", "_coalesced_", "indices", "values"),
             CSR: _names("_to_sparse.sparse_dim", "_to_sparse", "_nnz", "values", "crow_indices", "col_indices")},
        refusal="dispatcher"),
}


def kernels(chip: str) -> SparseKernels | None:
    return KERNELS.get(chip)


def key_of(layout: torch.layout) -> str:
    """The sparse backend key (COO, CSR) a tensor of `layout` dispatches to."""
    return CSR if layout in _CSR_LAYOUTS else COO


def registered(chip: SparseKernels, key: str, func: Any, name: str) -> bool:
    """Whether the chip has a kernel for `func` (canonical `name`) on sparse key `key`."""
    if name in chip.ops.get(key, ()):
        return True
    if chip.common and name in _common(key):
        return True
    # (CompositeExplicitAutogradNonFunctional leaves out the Sparse functionality, not SparseCsr: c10's
    # non_functional_backend_dispatch_keyset)
    composites = ("CompositeExplicitAutograd",) if key == COO else \
        ("CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional")
    return any(torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), k) for k in composites)


def refusal(chip: SparseKernels, key: str, name: str, device_type: str) -> Exception:
    """The error the chip raises for an op it has no sparse kernel for."""
    op = name.removesuffix(".default")
    if chip.refusal == "vendor" and key == COO:
        return RuntimeError(chip.message.format(op=op) + " (emulated by torch-fl: the plugin's sparse "
                            "fallback refuses every op it has no sparse kernel for)")
    return NotImplementedError(
        f"Could not run '{op}' with arguments from the '{key}{device_type}' backend. This could be because the "
        f"operator doesn't exist for this backend, or was omitted during the selective/custom build process "
        f"(if using custom build). (emulated by torch-fl: the chip's plugin registers no {key} kernel for it)")


_AFTER_PYTHON = torch._C._dispatch_keyset_full_after(torch._C.DispatchKey.Python)


class _SubCalls(TorchDispatchMode):
    """While a host sparse kernel runs: each call it makes with a sparse argument is one the chip's sparse key
    answers too, so one the chip has no kernel for fails as on the chip. Its own calls are checked as well
    (the mode is active again while the call's kernel runs below the Python key)."""

    def __init__(self, chip: SparseKernels, device_type: str) -> None:
        super().__init__()
        self.chip, self.device_type = chip, device_type

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        layout = _sparse_layout(args, kwargs)
        if layout is None:  # (a dense call: its kernel makes no sparse call, nothing to check below it)
            return func(*args, **kwargs)
        key, name = key_of(layout), f"{func._schema.name}.{func._overloadname}"
        # (a CompositeImplicitAutograd op a kernel calls, result_type, runs its decomposition on every key)
        if not registered(self.chip, key, func, name) and \
                not torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "CompositeImplicitAutograd"):
            raise refusal(self.chip, key, name, self.device_type)
        keys = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
        for arg in (*args, *kwargs.values()):
            for item in arg if isinstance(arg, (list, tuple)) else (arg,):  # (cat's tensors come in a list)
                if isinstance(item, torch.Tensor):
                    keys = keys | torch._C._dispatch_keys(item)
        if func.is_view:  # (computes nothing; and detach of a tensor while the mode is active calls the mode)
            return func.redispatch(keys & _AFTER_PYTHON, *args, **kwargs)
        with self:
            return func.redispatch(keys & _AFTER_PYTHON, *args, **kwargs)


def _sparse_layout(args: tuple, kwargs: dict) -> torch.layout | None:
    for arg in (*args, *kwargs.values()):
        for item in arg if isinstance(arg, (list, tuple)) else (arg,):
            if isinstance(item, torch.Tensor) and item.layout is not torch.strided:
                return item.layout
    return None


def checked(chip: SparseKernels, kernel: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """`kernel` (the host's) on host tensors, each sparse call it makes answered as the chip's sparse key
    answers it: a call the chip has no kernel for raises the chip's error (`refusal`)."""
    from .slot import backend_name

    with _SubCalls(chip, backend_name()):
        return kernel(*args, **kwargs)


@functools.cache
def _common(key: str) -> frozenset[str]:
    """The ops whose sparse CPU and CUDA kernels are one device-generic function in the installed torch's
    native_functions.yaml (what the plugins' codegen reads when it builds against that torch)."""
    import torchgen
    import yaml

    path = os.path.join(os.path.dirname(torchgen.__file__), "packaged", "ATen", "native", "native_functions.yaml")
    with open(path, encoding="utf-8") as file:
        entries = yaml.load(file, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    cpu, cuda = f"{key}CPU", f"{key}CUDA"
    found = set()
    for entry in entries:
        kernels_by_key: dict[str, str] = {}
        for keys, kernel in (entry.get("dispatch") or {}).items():
            for one in keys.split(","):
                kernels_by_key[one.strip()] = kernel
        if cpu in kernels_by_key and kernels_by_key[cpu] == kernels_by_key.get(cuda):
            name = entry["func"].split("(", 1)[0]
            found.add(f"aten::{name}" if "." in name else f"aten::{name}.default")
    return frozenset(found)
