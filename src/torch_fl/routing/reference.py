"""Reference implementations of chip-native ops the host has no kernel for.

PyTorch picks some kernels in C++ by the tensor's backend: on an accelerator (the emulated device
included) an LSTM cell is ``_thnn_fused_lstm_cell``, SyncBatchNorm calls ``batch_norm_stats``, a
depthwise convolution is ``_conv_depthwise2d``. These ops are native on CUDA/ROCm, and the CPU build
has no kernel for them, so the emulator runs them from the math here (on the CPU data, below autograd,
exactly where the chip's kernel would run). Each one is tested against the CPU's own composite path
(tests/routing/test_emu_reference.py).

`UNREACHED` lists every other op that is native on a built-in chip and has no CPU kernel, with why the
emulated device never calls it (PyTorch chooses those kernels only for tensors of that device type, or
the emulator takes another path, as a chip without the vendor library does). The test checks that the
two tables together cover the chips' tables, so a newer table with a new such op fails until it is
placed in one of them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .._opnames import canonical_op_name, dispatcher_op_name
from ..description.probe import has_native_kernel

aten = torch.ops.aten


# --- fused RNN cells (nn.LSTM, nn.GRU, nn.LSTMCell, nn.GRUCell on an accelerator) -------------------------
def _lstm_cell(input_gates: torch.Tensor, hidden_gates: torch.Tensor, cx: torch.Tensor,
               input_bias: torch.Tensor | None = None, hidden_bias: torch.Tensor | None = None) -> tuple:
    gates = input_gates + hidden_gates
    if input_bias is not None:
        gates = gates + input_bias + hidden_bias
    i, f, g, o = gates.chunk(4, 1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = f * cx + i * g
    hy = o * cy.tanh()
    # the workspace keeps the activated gates for the backward kernel (the chip's layout: N x 4H)
    return hy, cy, torch.cat((i, f, g, o), 1)


def _lstm_cell_backward(grad_hy: torch.Tensor | None, grad_cy: torch.Tensor | None, cx: torch.Tensor,
                        cy: torch.Tensor, workspace: torch.Tensor, has_bias: bool) -> tuple:
    i, f, g, o = workspace.chunk(4, 1)
    tanh_cy = cy.tanh()
    grad_hy = torch.zeros_like(cy) if grad_hy is None else grad_hy
    grad_c = grad_hy * o * (1 - tanh_cy * tanh_cy)
    if grad_cy is not None:
        grad_c = grad_c + grad_cy
    grad_gates = torch.cat((grad_c * g * i * (1 - i), grad_c * cx * f * (1 - f), grad_c * i * (1 - g * g),
                            grad_hy * tanh_cy * o * (1 - o)), 1)
    grad_bias = grad_gates.sum(0) if has_bias else None
    return grad_gates, grad_c * f, grad_bias


def _gru_cell(input_gates: torch.Tensor, hidden_gates: torch.Tensor, hx: torch.Tensor,
              input_bias: torch.Tensor | None = None, hidden_bias: torch.Tensor | None = None) -> tuple:
    if input_bias is not None:
        input_gates = input_gates + input_bias
        hidden_gates = hidden_gates + hidden_bias
    ir, iz, in_ = input_gates.chunk(3, 1)
    hr, hz, hn = hidden_gates.chunk(3, 1)
    r = (ir + hr).sigmoid()
    z = (iz + hz).sigmoid()
    n = (in_ + r * hn).tanh()
    hy = n + z * (hx - n)
    # workspace: r, z, n, hx and the hidden part of the new gate (the chip's layout: N x 5H)
    return hy, torch.cat((r, z, n, hx, hn), 1)


def _gru_cell_backward(grad_hy: torch.Tensor, workspace: torch.Tensor, has_bias: bool) -> tuple:
    r, z, n, hx, hn = workspace.chunk(5, 1)
    grad_n = grad_hy * (1 - z) * (1 - n * n)
    grad_z = grad_hy * (hx - n) * z * (1 - z)
    grad_r = grad_n * hn * r * (1 - r)
    grad_input_gates = torch.cat((grad_r, grad_z, grad_n), 1)
    grad_hidden_gates = torch.cat((grad_r, grad_z, grad_n * r), 1)
    grad_hx = grad_hy * z
    if not has_bias:
        return grad_input_gates, grad_hidden_gates, grad_hx, None, None
    return grad_input_gates, grad_hidden_gates, grad_hx, grad_input_gates.sum(0), grad_hidden_gates.sum(0)


# --- matmuls with an output dtype (fp16/bf16 in, fp32 out) -------------------------------------------------
def _out_dtype(op: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    def matmul(*args: Any, **kwargs: Any) -> torch.Tensor:
        out_dtype = kwargs.pop("out_dtype", None)
        if out_dtype is None:
            *args, out_dtype = args
        # the chip accumulates in float32 and writes out_dtype
        wide = [a.float() if isinstance(a, torch.Tensor) else a for a in args]
        return op(*wide, **kwargs).to(out_dtype)
    return matmul


# --- dropout kernels of an accelerator -------------------------------------------------------------------
def _fused_dropout(input: torch.Tensor, p: float, generator: Any = None) -> tuple:
    # p is the probability to KEEP an element (dropout calls _fused_dropout(x, 1 - p))
    mask = torch.empty_like(input, dtype=torch.uint8).bernoulli_(p, generator=generator)
    return input * mask * (1.0 / p if p > 0 else 0.0), mask


def _masked_scale(input: torch.Tensor, mask: torch.Tensor, scale: float) -> torch.Tensor:
    return input * mask * scale


# --- SyncBatchNorm's kernels ------------------------------------------------------------------------------
def _channel_shape(input: torch.Tensor) -> list[int]:
    return [1, -1] + [1] * (input.dim() - 2)


def _bn_stats(input: torch.Tensor, eps: float) -> tuple:
    dims = [d for d in range(input.dim()) if d != 1]
    var, mean = torch.var_mean(input, dims, correction=0)
    return mean, (var + eps).rsqrt()


def _bn_elemt(input: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, mean: torch.Tensor,
              invstd: torch.Tensor, eps: float) -> torch.Tensor:
    shape = _channel_shape(input)
    out = (input - mean.view(shape)) * invstd.view(shape)
    if weight is not None:
        out = out * weight.view(shape)
    if bias is not None:
        out = out + bias.view(shape)
    return out


def _bn_gather(input: torch.Tensor, mean: torch.Tensor, invstd: torch.Tensor, running_mean: torch.Tensor | None,
               running_var: torch.Tensor | None, momentum: float, eps: float, counts: torch.Tensor) -> tuple:
    """The statistics of all ranks (rows of mean/invstd, `counts` elements each) combined."""
    counts = counts.to(mean.dtype).view(-1, 1)
    total = counts.sum()
    global_mean = (mean * counts).sum(0) / total
    var = (1.0 / (invstd * invstd) - eps)  # each rank's biased variance
    global_var = ((var + (mean - global_mean) ** 2) * counts).sum(0) / total
    if running_mean is not None:
        running_mean.mul_(1 - momentum).add_(global_mean.to(running_mean.dtype), alpha=momentum)
    if running_var is not None:
        unbiased = global_var * total / (total - 1)
        running_var.mul_(1 - momentum).add_(unbiased.to(running_var.dtype), alpha=momentum)
    return global_mean, (global_var + eps).rsqrt()


def _bn_gather_count(input: torch.Tensor, mean: torch.Tensor, invstd: torch.Tensor,
                     running_mean: torch.Tensor | None, running_var: torch.Tensor | None, momentum: float,
                     eps: float, count: int) -> tuple:
    counts = torch.full((mean.shape[0],), count, dtype=mean.dtype)
    return _bn_gather(input, mean, invstd, running_mean, running_var, momentum, eps, counts)


def _bn_backward_reduce(grad_out: torch.Tensor, input: torch.Tensor, mean: torch.Tensor, invstd: torch.Tensor,
                        weight: torch.Tensor | None, input_g: bool, weight_g: bool, bias_g: bool) -> tuple:
    dims = [d for d in range(input.dim()) if d != 1]
    shape = _channel_shape(input)
    sum_dy = grad_out.sum(dims)
    sum_dy_xmu = (grad_out * (input - mean.view(shape))).sum(dims)
    grad_weight = sum_dy_xmu * invstd if weight_g else None
    grad_bias = sum_dy if bias_g else None
    if not input_g:
        return None, None, grad_weight, grad_bias
    return sum_dy, sum_dy_xmu, grad_weight, grad_bias


def _bn_backward_elemt(grad_out: torch.Tensor, input: torch.Tensor, mean: torch.Tensor, invstd: torch.Tensor,
                       weight: torch.Tensor | None, sum_dy: torch.Tensor, sum_dy_xmu: torch.Tensor,
                       count: torch.Tensor) -> torch.Tensor:
    shape = _channel_shape(input)
    total = count.sum().to(input.dtype)
    mean_dy = (sum_dy / total).view(shape)
    mean_dy_xmu = (sum_dy_xmu / total).view(shape)
    invstd = invstd.view(shape)
    scale = invstd if weight is None else invstd * weight.view(shape)
    return (grad_out - mean_dy - (input - mean.view(shape)) * invstd * invstd * mean_dy_xmu) * scale


# --- other kernels an accelerator's code paths call --------------------------------------------------------
def _conv_depthwise(conv: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    def depthwise(input: torch.Tensor, weight: torch.Tensor, kernel_size: Any, bias: torch.Tensor | None,
                  stride: Any, padding: Any, dilation: Any) -> torch.Tensor:
        return conv(input, weight, bias, stride, padding, dilation, input.shape[1])
    return depthwise


def _rms_norm_backward(grad_out: torch.Tensor, input: torch.Tensor, normalized_shape: list[int],
                       rstd: torch.Tensor, weight: torch.Tensor | None, output_mask: list[bool]) -> tuple:
    dims = list(range(input.dim() - len(normalized_shape), input.dim()))
    normed = input * rstd
    grad_weight = None
    if weight is not None and output_mask[1]:
        grad_weight = (grad_out * normed).sum(list(range(input.dim() - len(normalized_shape))))
    grad_input = None
    if output_mask[0]:
        grad = grad_out * weight if weight is not None else grad_out
        grad_input = rstd * (grad - normed * (grad * normed).mean(dims, keepdim=True))
    return grad_input, grad_weight


def _record_stream(tensor: torch.Tensor, stream: Any) -> None:
    return None  # the emulated device frees memory when the host tensor dies: nothing to defer


def _into_out(op: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """The out= overload of a reference: compute, then write the result into `out`."""
    def into(*args: Any, out: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        return out.copy_(op(*args, **kwargs))
    return into


REFERENCE: dict[Any, Callable[..., Any]] = {
    aten._thnn_fused_lstm_cell.default: _lstm_cell,
    aten._thnn_fused_lstm_cell_backward_impl.default: _lstm_cell_backward,
    aten._thnn_fused_gru_cell.default: _gru_cell,
    aten._thnn_fused_gru_cell_backward.default: _gru_cell_backward,
    aten.mm.dtype: _out_dtype(torch.mm),
    aten.bmm.dtype: _out_dtype(torch.bmm),
    aten.addmm.dtype: _out_dtype(torch.addmm),
    aten.baddbmm.dtype: _out_dtype(torch.baddbmm),
    aten.mm.dtype_out: _into_out(_out_dtype(torch.mm)),
    aten.bmm.dtype_out: _into_out(_out_dtype(torch.bmm)),
    aten.addmm.dtype_out: _into_out(_out_dtype(torch.addmm)),
    aten.baddbmm.dtype_out: _into_out(_out_dtype(torch.baddbmm)),
    aten._fused_dropout.default: _fused_dropout,
    aten._masked_scale.default: _masked_scale,
    aten.batch_norm_stats.default: _bn_stats,
    aten.batch_norm_elemt.default: _bn_elemt,
    aten.batch_norm_elemt.out: _into_out(_bn_elemt),
    aten.batch_norm_gather_stats_with_counts.default: _bn_gather,
    aten.batch_norm_gather_stats.default: _bn_gather_count,
    aten.batch_norm_backward_reduce.default: _bn_backward_reduce,
    aten.batch_norm_backward_elemt.default: _bn_backward_elemt,
    aten._conv_depthwise2d.default: _conv_depthwise(torch.conv2d),
    aten._conv_depthwise2d.out: _into_out(_conv_depthwise(torch.conv2d)),
    aten.conv_depthwise3d.default: _conv_depthwise(torch.conv3d),
    aten._fused_rms_norm_backward.default: _rms_norm_backward,
    aten.record_stream.default: _record_stream,
    # PyTorch asks whether cuDNN's CTC loss applies; no cuDNN here, so the generic _ctc_loss runs
    aten._use_cudnn_ctc_loss.default: lambda *args: False,
    aten._use_cudnn_ctc_loss.Tensor: lambda *args: False,
    aten._use_miopen_ctc_loss.default: lambda *args: False,
    aten._use_miopen_ctc_loss.Tensor: lambda *args: False,
}

# Why the emulated device never calls the other chip-native ops without a CPU kernel (by name prefix or
# name; every overload). PyTorch chooses these in C++ for tensors whose device type is CUDA or MPS, or
# they belong to a path the emulator does not take.
UNREACHED: dict[str, str] = {
    "cudnn_": "cuDNN kernels: PyTorch calls them only for CUDA tensors with cuDNN (a chip's own library)",
    "_cudnn_": "cuDNN kernels: PyTorch calls them only for CUDA tensors with cuDNN (a chip's own library)",
    "miopen_": "MIOpen kernels: PyTorch calls them only for ROCm tensors with MIOpen",
    "_mps_": "MPS kernels: PyTorch calls them only for tensors on the mps device",
    "mps_": "MPS kernels: PyTorch calls them only for tensors on the mps device",
    "_lstm_mps": "MPS kernels: PyTorch calls them only for tensors on the mps device",
    "lstm_mps_backward": "MPS kernels: PyTorch calls them only for tensors on the mps device",
    "_scaled_dot_product_attention_math_for_mps": "MPS kernels: only for tensors on the mps device",
    "_copy_from": "the MPS backend's copy kernels; the emulated device does its own copies (copies.py)",
    "linear_backward": "MPS's autograd formula for linear (only for tensors on the mps device)",
    "max_pool2d_backward": "MPS's autograd formula for max_pool2d (only for tensors on the mps device)",
    "_scaled_dot_product_flash_attention": "fused attention: the emulated device takes SDPA's math path, as a "
                                           "chip without the fused kernel does (tensor.py, _sdp_choice)",
    "_scaled_dot_product_efficient_attention": "fused attention: SDPA's math path on the emulated device",
    "_scaled_dot_product_cudnn_attention": "fused attention: SDPA's math path on the emulated device",
    "_flash_attention_": "fused attention: SDPA's math path on the emulated device",
    "_efficient_attention_": "fused attention: SDPA's math path on the emulated device",
    "_fill_mem_eff_dropout_mask_": "fused attention's dropout: SDPA's math path on the emulated device",
    "_triton_": "Triton attention kernels of CUDA builds: not in the emulated device's SDPA path",
    "_philox_": "CUDA's counter-based random streams: no host algorithm gives the chip's values",
    "_sparse_semi_structured_": "2:4 sparse formats of cuSPARSELt/CUTLASS: no host representation",
    "_to_sparse_semi_structured": "2:4 sparse formats of cuSPARSELt/CUTLASS: no host representation",
    "_cslt_": "cuSPARSELt kernels: no host representation of their compressed format",
    "_convert_weight_to_int4pack": "the chip's packed int4 weight layout: no host representation",
    "_weight_int4pack_mm": "the chip's packed int4 weight layout: no host representation",
    "_mixed_dtypes_linear": "CUTLASS's mixed-dtype layout: no host representation",
    "_scaled_grouped_mm": "FP8 grouped GEMM with the chip's scaling layouts: no host representation",
}


def unreached_reason(op: str) -> str | None:
    """Why the emulated device never calls chip-native op `op` ('aten::name.overload'), if listed."""
    name = op.removeprefix("aten::").split(".", 1)[0]
    for prefix, reason in UNREACHED.items():
        if name.startswith(prefix):
            return reason
    return None


def host_can_run(op: str) -> bool:
    """Whether the host can run `op` ('aten::name.overload'): the CPU's kernel, or the reference math
    here. A CPU fallback needs this (router.py), and coverage asks the same (analysis/chains.py)."""
    return has_cpu_kernel(op) or has_reference(op)


def has_cpu_kernel(op: str) -> bool:
    """Whether the CPU has a kernel of `op` (its own or a composite one): a fallback needs one, and an
    emulated chip computes its native ops with it (_thnn_fused_lstm_cell and the fused attention
    kernels have none). Asked per key (probe.has_native_kernel), not through the computed table: while
    routing is active on the CPU key, torch-fl's own backend fallback is in that table for every op."""
    try:
        return has_native_kernel(dispatcher_op_name(op), "CPU")
    except RuntimeError:
        return True  # not an operator the dispatcher can answer for: do not guess against it


def has_reference(op: str) -> bool:
    """Whether the emulator can run `op` ('aten::name.overload') from a reference implementation."""
    return op in _NAMES


_NAMES = frozenset(canonical_op_name(o) for o in REFERENCE)
