"""Fused scaled-dot-product attention: the fused kernels PyTorch has, what each accepts, and which of them a
chip has.

The order PyTorch tries them in and the inputs each takes are PyTorch facts (aten/src/ATen/native/
transformers/sdp_utils.cpp); which of them a chip has is its description's (``ops.fused_attention`` and its
native op set). Coverage's trace (analysis/fidelity.py) and the emulated device (routing/emu/attention.py)
both choose a chip's kernel with `fitting`, so a report names the kernel the emulated step runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["FUSED_ATTENTION", "FusedAttention", "additive_bias", "chip_kernels", "fitting"]


@dataclass(frozen=True)
class FusedAttention:
    """One fused SDPA kernel: its op and the inputs PyTorch sends to it."""

    op: str
    backward: str            # its backward op
    dtypes: frozenset[str]
    mask: bool               # accepts an attn_mask
    max_head_dim: int


# PyTorch's order of preference (flash, then memory-efficient); the math path when neither fits.
FUSED_ATTENTION = (
    FusedAttention("aten::_scaled_dot_product_flash_attention.default",
                   "aten::_scaled_dot_product_flash_attention_backward.default",
                   frozenset({"float16", "bfloat16"}), mask=False, max_head_dim=256),
    FusedAttention("aten::_scaled_dot_product_efficient_attention.default",
                   "aten::_scaled_dot_product_efficient_attention_backward.default",
                   frozenset({"float32", "float16", "bfloat16"}), mask=True, max_head_dim=512),
)


def chip_kernels(desc: Any) -> tuple[FusedAttention, ...]:
    """The fused SDPA kernels of chip `desc`, preferred first: none where ``ops.fused_attention`` is false,
    and none for the host CPU (its own choice stands; it has CPU-only kernels of its own)."""
    if desc.dispatch_key == "CPU" or not desc.section("ops")["fused_attention"]:
        return ()
    native = desc.native_ops()
    return tuple(kernel for kernel in FUSED_ATTENTION if kernel.op in native)


def additive_bias(mask: Any, dtype: Any) -> Any:
    """The mask as the additive bias PyTorch hands a fused kernel: a boolean mask (True: attend) becomes
    0 / -inf in `dtype`; any other mask (or None) is passed on as it is."""
    import torch

    if mask is None or mask.dtype != torch.bool:
        return mask
    return torch.where(mask.logical_not(), float("-inf"), 0.0).to(dtype)


def fitting(kernels: tuple[FusedAttention, ...], dtype: str, *, mask: bool, head_dim: int) -> FusedAttention | None:
    """The first of `kernels` that takes a query of `dtype` and `head_dim`, with or without a `mask`."""
    for kernel in kernels:
        if dtype in kernel.dtypes and (kernel.mask or not mask) and head_dim <= kernel.max_head_dim:
            return kernel
    return None
