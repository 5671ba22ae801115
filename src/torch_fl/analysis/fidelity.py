"""Kernel choices that PyTorch makes by the backend a tensor lives on, made for the traced device.

The trace runs on fake *CPU* tensors, so C++ code that picks a kernel by device type picks the CPU's
one. Three such choices change the op set a model needs, and each is steered here from facts about
the device, not from its name:

- **Attention.** ``scaled_dot_product_attention`` takes a fused kernel when the device has one that
  fits the inputs. Which fused kernels a device has is its description's native op set (with
  ``ops.fused_attention``); the order PyTorch tries them in and what each accepts are PyTorch facts
  (routing/attention.py, shared with the emulated device). Without a fitting one the math path runs
  (bmm, _safe_softmax), as on a chip without fused attention. An emulated chip runs the same fused
  kernel, computed by the host's (routing/emu/attention.py), except with dropout or a mask that needs
  its gradient, which the host's kernel does not give: there it takes the math path, and so does its
  trace.
- **CPU-only kernels.** The CPU runs RNNs through oneDNN (``mkldnn_rnn_layer``) and attention through
  ``*_for_cpu`` kernels; no other backend calls those. Off the host, oneDNN is switched off for the
  trace, so an LSTM decomposes into the generic cell ops every backend runs.
- **Dropout.** ``F.dropout`` in training runs as one ``native_dropout`` call on the backends listed in
  FUSED_DROPOUT_BACKENDS and as ``empty_like``/``bernoulli_``/``div_``/``mul`` elsewhere (the CPU).

Which backend a traced device is: an emulated chip is PyTorch's PrivateUse1 backend (torch-fl borrows
that slot for emulation); otherwise the description's ``dispatch_key``.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from .._mode_exit import entered
from ..routing.attention import FUSED_ATTENTION, FusedAttention, additive_bias, chip_kernels, fitting

# aten/src/ATen/native/Dropout.cpp, is_fused_kernel_acceptable: dropout is one native_dropout call on
# these backends (dispatch keys), in training, for 0 < p < 1 and a non-empty input.
FUSED_DROPOUT_BACKENDS = frozenset({"CUDA", "XPU", "PrivateUse1"})
EMULATED_BACKEND = "PrivateUse1"
# Backends whose autocast op lists are PyTorch's CUDA lists (aten/src/ATen/autocast_mode.cpp), which the
# emulated backend registers too (routing/emu/autocast.py): an AMP trace of them runs on fake tensors of
# the emulated backend to get those lists (the CPU's lists differ).
CUDA_AUTOCAST_BACKENDS = frozenset({"CUDA"})


@dataclass(frozen=True)
class DeviceKernels:
    """How the traced device chooses kernels where PyTorch decides by backend."""

    backend: str                              # dispatch key of the backend the device is
    host: bool                                # the host CPU itself: its own choices stand
    attention: tuple[FusedAttention, ...]     # fused SDPA kernels the device has, preferred first
    math_attention: bool                      # SDPA's math path where no fused kernel is recorded
    emulated: bool = False                    # an emulated chip: computed on the CPU

    @property
    def fused_dropout(self) -> bool:
        return self.backend in FUSED_DROPOUT_BACKENDS


def device_kernels(desc: Any, emulated: bool) -> DeviceKernels:
    """The kernel choices of `desc`'s device (emulated: the chip as torch-fl emulates it on the CPU)."""
    backend = EMULATED_BACKEND if emulated else desc.dispatch_key
    host = backend == "CPU"
    fused = bool(desc.section("ops")["fused_attention"])
    attention = () if host else chip_kernels(desc)
    return DeviceKernels(backend, host, attention, math_attention=not (host and fused), emulated=emulated)


def kernel_choices(device: DeviceKernels, *, cpu_kernels: bool = False,
                   attention_only: bool = False) -> contextlib.ExitStack:
    """Enter what makes the CPU trace take `device`'s kernels (close the stack to undo);
    `cpu_kernels` keeps the CPU's oneDNN kernels (only attention and dropout change). `attention_only`:
    the fused attention kernel alone (a trace on the emulated backend's own tensors, where PyTorch makes
    every other choice as the emulated device does, but SDPA's is the emulator's, routing/emu/attention.py)."""
    stack = contextlib.ExitStack()
    if device.host:
        return stack
    if attention_only:
        if device.attention:
            stack.enter_context(entered(_DeviceFunctions, device, dropout=False))
        return stack
    if not cpu_kernels:
        with warnings.catch_warnings():  # flags() re-sets oneDNN's TF32 switch, which warns on CPU builds
            warnings.simplefilter("ignore", UserWarning)
            stack.enter_context(torch.backends.mkldnn.flags(enabled=False))
    if device.math_attention:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        stack.enter_context(sdpa_kernel([SDPBackend.MATH]))
    if device.attention or device.fused_dropout:
        stack.enter_context(entered(_DeviceFunctions, device))
    return stack


class _DeviceFunctions(TorchFunctionMode):
    """Calls the fused aten op that the device's backend would call for SDPA and dropout."""

    def __init__(self, device: DeviceKernels, *, dropout: bool = True):
        super().__init__()
        import torch.nn.functional as F

        self.handlers: dict[Callable, Callable] = {}
        if device.attention:
            self.handlers[F.scaled_dot_product_attention] = self._attention
        if dropout and device.fused_dropout:
            self.handlers[F.dropout] = self._dropout
        self.attention = device.attention
        self.emulated = device.emulated

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        handler = self.handlers.get(func)
        if handler is not None:
            out = handler(*args, **kwargs)
            if out is not NotImplemented:
                return out
        return func(*args, **kwargs)

    @staticmethod
    def _dropout(input: torch.Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Any:
        # In-place dropout is never fused (dropout_ takes the generic path on every backend).
        if not training or inplace or not 0 < p < 1 or input.numel() == 0:
            return NotImplemented
        return torch.ops.aten.native_dropout(input, p, True)[0]

    def _attention(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                   attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0, is_causal: bool = False,
                   scale: float | None = None, enable_gqa: bool = False) -> Any:
        from torch._subclasses.fake_tensor import FakeTensor

        dtype = str(query.dtype).removeprefix("torch.")
        # A real run (the fallback for data-dependent models) computes on the CPU, which has none of
        # these kernels: attention takes the math path there, and the report says so.
        if not isinstance(query, FakeTensor) or query.dim() != 4 or enable_gqa or key.shape[1] != query.shape[1]:
            return NotImplemented
        if self.emulated and (dropout_p or (attn_mask is not None and attn_mask.requires_grad)):
            # the emulated chip computes fused attention with the host's kernel, which takes no dropout and
            # gives no mask gradient: it runs the math path there (routing/emu/attention.py)
            return NotImplemented
        kernel = fitting(self.attention, dtype, mask=attn_mask is not None, head_dim=query.shape[-1])
        if kernel is not None:
            if kernel.op.startswith("aten::_scaled_dot_product_flash_attention"):
                return torch.ops.aten._scaled_dot_product_flash_attention(
                    query, key, value, dropout_p, is_causal, scale=scale)[0]
            bias = additive_bias(attn_mask, query.dtype)
            if bias is not None:
                bias = bias.expand(query.shape[0], query.shape[1], query.shape[2], key.shape[2])
            grad = query.requires_grad or key.requires_grad or value.requires_grad
            return torch.ops.aten._scaled_dot_product_efficient_attention(
                query, key, value, bias, grad and torch.is_grad_enabled(), dropout_p, is_causal,
                scale=scale)[0]
        return NotImplemented


__all__ = ["CUDA_AUTOCAST_BACKENDS", "FUSED_ATTENTION", "FUSED_DROPOUT_BACKENDS", "DeviceKernels", "FusedAttention",
           "device_kernels", "kernel_choices"]
