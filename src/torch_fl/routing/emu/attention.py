"""Fused attention on the emulated device, as the chip runs it.

On a real chip ``scaled_dot_product_attention`` asks the backend which kernel to run; a Python backend is
never asked (PyTorch's choice for PrivateUse1 is a C++ stub), so the emulated device registers the
function's own kernel on its autograd key, as a PrivateUse1 plugin may: where the chip has a fused kernel
that takes the inputs (routing/attention.py, the same choice coverage makes) and the host's fused kernel
takes them too, SDPA runs PyTorch's kernel slot for out-of-tree backends,
``_scaled_dot_product_fused_attention_overrideable`` (autograd records it and its backward), whose route is
the chip's kernel (``_scaled_dot_product_efficient_attention`` on CUDA for float32) and whose result is
computed by the host's fused kernel (``_scaled_dot_product_flash_attention_for_cpu`` and its backward), so
the values are the plain CPU run's: one call in place of the math path's ten, and its backward in place of
fifteen (under inference mode, where SDPA reaches the device itself, the same). Otherwise (no fitting kernel, dropout, a mask that needs its gradient, grouped-query attention,
an unchecked device) PyTorch's own composite runs: the math path, as on a chip without a fused kernel for
those inputs.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.nn.attention import SDPBackend

from ..._names import RouteKind
from ..attention import FusedAttention, additive_bias, chip_kernels, fitting
from ..table import dtype_name
from .dispatch import DRAWS_NOTHING
from .slot import state
from .tensor import SPECIAL, EmuTensor, _unwrap, _wrap
from .wrapping import _logical

aten = torch.ops.aten
_HOST_FLASH = int(SDPBackend.FLASH_ATTENTION)


# (name, default) of each argument of the two overrideable ops, read from the schema once (~4 us a call)
_parameters: dict[Any, tuple[tuple[str, Any], ...]] = {}


def _bound(func: Any, args: tuple, kwargs: dict) -> dict[str, Any]:
    """The op's arguments by name, defaults filled in."""
    parameters = _parameters.get(func)
    if parameters is None:
        parameters = _parameters[func] = tuple(
            (a.name, a.default_value if a.has_default_value() else None) for a in func._schema.arguments)
    values = dict(zip((name for name, _ in parameters), args, strict=False))  # args may stop early
    for name, default in parameters[len(args):]:
        values[name] = kwargs.get(name, default)
    return values


def chip_kernel(query: Any, key: Any, value: Any, mask: Any, dropout_p: float, is_causal: bool,
                scale: float | None, enable_gqa: bool) -> FusedAttention | None:
    """The chip's fused kernel for these inputs where the emulator can run it, else None (math path)."""
    if state.router is None or state.description is None or not isinstance(query, EmuTensor):
        return None
    dtype = dtype_name(query.dtype)
    kernel = fitting(chip_kernels(state.description), dtype, mask=mask is not None, head_dim=query.shape[-1])
    if kernel is None or query.dim() != 4 or enable_gqa or key.shape[1] != query.shape[1] or \
            (mask is not None and mask.requires_grad):
        return None
    grad = torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in (query, key, value))
    if any(state.table.route(op, dtype).kind is not RouteKind.NATIVE for op in (kernel.op, *([kernel.backward] if grad else []))):
        return None  # FL_ROUTE or a config routes the chip's kernel elsewhere: the math path's ops then
    host = [_logical(t) if isinstance(t, EmuTensor) else t for t in (query, key, value, mask)]
    if torch._fused_sdp_choice(*host, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa) != _HOST_FLASH:
        return None  # the host's fused kernel would refuse them (dropout, a mask shape): the math path
    return kernel


def _sdpa(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: torch.Tensor | None = None,
          dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
          enable_gqa: bool = False) -> torch.Tensor:
    """scaled_dot_product_attention on the emulated device's autograd key."""
    kernel = chip_kernel(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    if kernel is None:
        return aten.scaled_dot_product_attention.default.decompose(
            query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)
    return aten._scaled_dot_product_fused_attention_overrideable.default(
        query, key, value, additive_bias(attn_mask, query.dtype), dropout_p, is_causal, False, scale=scale)[0]


def _sdp_choice(func: Any, args: tuple, kwargs: dict) -> int:
    """Asked by the few callers that go through the op (SDPA itself uses the kernel above): the CPU's
    answer would name CPU-only kernels, so the math path, as on a chip without a fused kernel of its own."""
    return int(SDPBackend.MATH)


_library: Any = None


def register() -> None:
    """Put `_sdpa` on the emulated backend's autograd key (once per process; the backend is registered)."""
    global _library
    if _library is None:
        _library = torch.library.Library("aten", "IMPL")
        _library.impl("scaled_dot_product_attention", _sdpa, "AutogradPrivateUse1")


def _forward(func: Any, args: tuple, kwargs: dict) -> Any:
    index, cargs, ckwargs = _unwrap(func, args, kwargs)
    b = _bound(func, cargs, ckwargs)
    out, logsumexp = aten._scaled_dot_product_flash_attention_for_cpu.default(
        b["query"], b["key"], b["value"], b["dropout_p"], b["is_causal"], attn_mask=b["attn_bias"],
        scale=b["scale"])
    seed = torch.empty((), dtype=torch.long)
    # (output, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, philox_seed, philox_offset, debug_attn_mask),
    # the undefined ones None as in PyTorch's meta kernel of the op
    return (_wrap(out, index), _wrap(logsumexp, index), None, None, b["query"].shape[-2], b["key"].shape[-2],
            _wrap(seed, index), _wrap(seed.clone(), index), None)


def _backward(func: Any, args: tuple, kwargs: dict) -> Any:
    index, cargs, ckwargs = _unwrap(func, args, kwargs)
    b = _bound(func, cargs, ckwargs)
    grads = aten._scaled_dot_product_flash_attention_for_cpu_backward.default(
        b["grad_out"], b["query"], b["key"], b["value"], b["out"], b["logsumexp"], b["dropout_p"],
        b["is_causal"], attn_mask=b["attn_bias"], scale=b["scale"])
    # no gradient of the mask: chip_kernel keeps a mask that needs one on the math path
    return (*(_wrap(g, index) for g in grads), None)


SPECIAL[aten._fused_sdp_choice.default] = _sdp_choice
# Under inference mode tensors have no autograd key, so SDPA reaches the device itself (tensor.py runs such
# composite ops there): the same choice then.
SPECIAL[aten.scaled_dot_product_attention.default] = lambda func, args, kwargs: _sdpa(*args, **kwargs)
SPECIAL[aten._scaled_dot_product_fused_attention_overrideable.default] = _forward
# Tagged seeded for its dropout_p, but _forward runs the host's flash kernel, which refuses dropout (chip_kernel
# sends dropout to the math path): it draws nothing, so no generator swap around it.
DRAWS_NOTHING.add(aten._scaled_dot_product_fused_attention_overrideable.default)
SPECIAL[aten._scaled_dot_product_fused_attention_overrideable_backward.default] = _backward
