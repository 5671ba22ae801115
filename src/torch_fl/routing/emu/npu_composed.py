"""torch_npu's simple custom ops whose result is an aten computation (``torch_npu.npu_dtype_cast``, ``npu_transpose``,
``npu_max``, ...): the emulated chip computes each with the aten ops it names, so every one of them is routed and
counted as the chip's own aten op (no fused kernel is claimed).

Which: the ones the vendor's own tests call (``torch_npu.X`` in Ascend/pytorch test/, 2026-12) whose meaning is
fixed by the vendor's documentation (Ascend/op-plugin docs/zh/custom_APIs/torch_npu/) and by what its tests compare
them with (test/custom_ops/test_npu_*.py: ``torch.max`` with int32 indices, ``one_hot`` cut or padded to ``depth``,
the row sum of ``-labels * log_softmax``). Each function takes the arguments of its schema in
op_plugin_functions.yaml (``SCHEMAS``; ``self`` is ``input`` in Python, as in PyTorch's bindings).

Left out, with the reason (docs/vendor-ops.md, "Identity and API surface"): the detection-box ops (npu_iou, npu_giou,
npu_bounding_box_*, npu_roi_align, npu_nms_*: each a format of its own), npu_indexing and npu_pad (argument layouts
documented only by example), the quantized matmuls, grouped matmul and MoE routing, convolutions with the chip's
internal formats, npu_lstm/npu_gru (fused cell layouts), and HiFloat8 (a dtype torch does not have).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

# the vendor's schemas (Ascend/op-plugin op_plugin/config/op_plugin_functions.yaml, Ascend/pytorch
# torch_npu/csrc/aten/npu_native_functions.yaml), which the Python functions below follow
SCHEMAS = {
    "get_storage_size": "get_storage_size(Tensor self) -> int",
    "npu_dtype_cast": "npu_dtype_cast(Tensor self, int dtype, int? input_dtype=None) -> Tensor",
    "npu_transpose": "npu_transpose(Tensor self, int[] perm, bool require_contiguous=True) -> Tensor",
    "npu_linear": "npu_linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor",
    "npu_max": "npu_max.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)",
    "npu_min": "npu_min.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)",
    "npu_slice": "npu_slice(Tensor self, int[] offsets, int[] size) -> Tensor",
    "npu_reshape": "npu_reshape(Tensor self, int[] shape, bool can_refresh=False) -> Tensor",
    "npu_bmmV2": "npu_bmmV2(Tensor self, Tensor mat2, int[] output_sizes) -> Tensor",
    "npu_silu": "npu_silu(Tensor self) -> Tensor",
    "npu_silu_": "npu_silu_(Tensor(a!) self) -> Tensor(a!)",
    "npu_mish": "npu_mish(Tensor self) -> Tensor",
    "npu_one_hot": "npu_one_hot(Tensor self, int num_classes=-1, int depth=1, Scalar on_value=1, Scalar off_value=0) "
                   "-> Tensor",
    "npu_layer_norm_eval": "npu_layer_norm_eval(Tensor input, int[] normalized_shape, Tensor? weight=None, "
                           "Tensor? bias=None, float eps=1e-05) -> Tensor",
    "npu_broadcast": "npu_broadcast(Tensor self, int[] size) -> Tensor",
    "npu_softmax_cross_entropy_with_logits": "npu_softmax_cross_entropy_with_logits(Tensor self, Tensor labels) "
                                             "-> Tensor",
}


def get_storage_size(input: torch.Tensor) -> int:
    """The number of elements of the tensor's storage (the emulated chip stores every format as ND)."""
    return input.untyped_storage().nbytes() // input.element_size()


def npu_dtype_cast(input: torch.Tensor, dtype: torch.dtype, input_dtype: Any = None) -> torch.Tensor:
    """``input.to(dtype)`` (input_dtype: the chip's hint for a packed source format; nothing to unpack here)."""
    return input.to(dtype)


def npu_transpose(input: torch.Tensor, perm: Any, require_contiguous: bool = True) -> torch.Tensor:
    """``input.permute(perm)``, made contiguous unless require_contiguous=False."""
    out = input.permute(*[int(p) for p in perm])
    return out.contiguous() if require_contiguous else out


def npu_linear(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    return torch.nn.functional.linear(input, weight, bias)


def npu_max(input: torch.Tensor, dim: int, keepdim: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.max(input, dim, keepdim)`` with int32 indices, as the chip's kernel returns them."""
    values, indices = torch.max(input, int(dim), bool(keepdim))
    return values, indices.to(torch.int32)


def npu_min(input: torch.Tensor, dim: int, keepdim: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.min(input, dim, keepdim)`` with int32 indices, as the chip's kernel returns them."""
    values, indices = torch.min(input, int(dim), bool(keepdim))
    return values, indices.to(torch.int32)


def npu_slice(input: torch.Tensor, offsets: Any, size: Any, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """The block of shape `size` starting at `offsets` (one per dimension), as a new tensor (or written into
    `out`: the vendor's npu_slice.out)."""
    if len(offsets) != input.dim() or len(size) != input.dim():
        raise RuntimeError(f"npu_slice: offsets {list(offsets)} and size {list(size)} must name each of the input's "
                           f"{input.dim()} dimensions")
    block = input
    for axis, (start, length) in enumerate(zip(offsets, size, strict=True)):
        block = block.narrow(axis, int(start), int(length))
    if out is None:
        return block.contiguous()
    if out.shape != block.shape:
        out.resize_(block.shape)
    return out.copy_(block)


def npu_reshape(input: torch.Tensor, shape: Any, can_refresh: bool = False) -> torch.Tensor:
    """``input.reshape(shape)`` as a new tensor. can_refresh=True (the vendor reshapes `input` itself) is refused:
    changing a tensor's shape under code that holds it is not emulated."""
    if can_refresh:
        raise NotImplementedError("npu_reshape(can_refresh=True) reshapes the input tensor itself on the NPU, which "
                                  "torch-fl does not emulate; use can_refresh=False (a new tensor) or "
                                  "input.reshape(shape)")
    return input.reshape([int(s) for s in shape]).clone()


def npu_bmmV2(input: torch.Tensor, mat2: torch.Tensor, output_sizes: Any) -> torch.Tensor:
    """``torch.matmul(input, mat2)`` (output_sizes: the shape the chip's backward wants; the result has it)."""
    return torch.matmul(input, mat2)


def npu_silu(input: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.silu(input)


def npu_silu_(input: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.silu(input, inplace=True)


def npu_mish(input: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.mish(input)


def npu_one_hot(input: torch.Tensor, num_classes: int = -1, depth: int = 1, on_value: float = 1,
                off_value: float = 0) -> torch.Tensor:
    """A float one-hot of `input` along a new last axis of length `depth` (classes beyond it cut, missing ones
    zero-padded), on_value where the class is, off_value elsewhere."""
    hot = torch.nn.functional.one_hot(input.long(), int(num_classes)).float()
    width = hot.shape[-1]
    if width >= depth:
        hot = hot[..., :depth]
    else:
        hot = torch.cat((hot, hot.new_zeros((*hot.shape[:-1], depth - width))), dim=-1)
    on = hot.new_full((), float(on_value))
    off = hot.new_full((), float(off_value))
    return torch.where(hot == 1, on, off)


def npu_layer_norm_eval(input: torch.Tensor, normalized_shape: Any, weight: torch.Tensor | None = None,
                        bias: torch.Tensor | None = None, eps: float = 1e-5) -> torch.Tensor:
    return torch.nn.functional.layer_norm(input, [int(s) for s in normalized_shape], weight, bias, float(eps))


def npu_broadcast(input: torch.Tensor, size: Any) -> torch.Tensor:
    """``input.expand(size)``, materialized."""
    return input.expand(*[int(s) for s in size]).contiguous()


def npu_softmax_cross_entropy_with_logits(input: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Per row: the sum over axis 1 of ``-labels * log(softmax(input, 1))`` (the vendor's formula)."""
    return torch.sum(-labels * torch.log_softmax(input, dim=1), dim=1)


COMPOSED_OPS: dict[str, Callable[..., Any]] = {name: globals()[name] for name in SCHEMAS}

__all__ = ["COMPOSED_OPS", "SCHEMAS", *SCHEMAS]
