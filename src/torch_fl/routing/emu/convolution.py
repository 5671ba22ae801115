"""Convolutions on the emulated device: the vendor's wording of a device mismatch, and torch.jit.trace.

A handler of `SPECIAL` (dispatch.py) for ``aten::convolution`` and ``aten::_convolution``: it raises the
chip's own error where the input and weight are on different devices, runs the op by its plan, and records
``aten::_convolution`` in a trace in progress, as PyTorch's tracer sees it on a real device.
"""

from __future__ import annotations

from typing import Any

import torch

from . import wider
from .dispatch import SPECIAL, _dispatch_planned, _Plan
from .slot import state

aten = torch.ops.aten

# The vendor's own check of a convolution's devices, where its kernel words it (what a device mismatch of the
# input and weight raises on the chip): torch_musa/csrc/aten/ops/Conv.cpp `Convolution` (convolution_overrideable,
# which aten::convolution and aten::_convolution reach on the chip) checks the devices before anything else.
_CONV_MISMATCH = {
    "musa": "Expected weight tensor and input tensor to be on the same MUSA device, but got weight on {weight} "
            "and input on {input}",
}
_CONVOLUTIONS = (aten.convolution.default, aten._convolution.default)
_plain_plans: dict[int, _Plan] = {}


def _convolution(func: Any, args: tuple, kwargs: dict) -> Any:
    """A convolution on the device. While torch.jit.trace runs, ``aten::convolution`` goes on as its
    CompositeExplicitAutograd kernel does, to ``aten::_convolution`` with the cuDNN flags: PyTorch's tracer never
    records convolution itself (torchgen's DONT_RECORD_TRACE), only what it calls. On a real device that call passes
    the tracer; here the Python key took convolution before its kernel, so the trace missed the op and kept its
    result as a constant (torch_musa's tests/unittest/jit/test_jit_save_load.py: "Cannot insert a Tensor that
    requires grad as a constant")."""
    if len(args) > 1 and isinstance(args[0], torch.Tensor) and isinstance(args[1], torch.Tensor) and \
            args[0].device != args[1].device and state.description is not None:
        text = _CONV_MISMATCH.get(wider.chip_key(state.description))
        if text is not None:
            raise RuntimeError(text.format(weight=args[1].device, input=args[0].device))
    plan = _plain_plans.get(id(func))
    if plan is None:
        plan = _plain_plans[id(func)] = _Plan(func)
        plan.special = None
    out = _dispatch_planned(plan, func, args, kwargs)
    tracing = torch._C._get_tracing_state()
    if func is aten.convolution.default and tracing is not None:
        _trace_convolution(tracing, args, kwargs, out)
    return out


def _trace_convolution(tracing: Any, args: tuple, kwargs: dict, out: torch.Tensor) -> None:
    """Record ``aten::_convolution`` in the trace for `out`, as the tracer records it where convolution's
    kernel calls it (Python dispatch excludes the Tracer key, so the call made here would not be seen)."""
    cudnn = torch.backends.cudnn
    schema = aten.convolution.default._schema.arguments
    values = [args[i] if i < len(args) else kwargs.get(a.name, a.default_value) for i, a in enumerate(schema)]
    values += [cudnn.benchmark, cudnn.deterministic or torch.are_deterministic_algorithms_enabled(),
               cudnn.enabled, cudnn.allow_tf32]
    graph = tracing.graph()
    inputs = []
    for value in values:
        if isinstance(value, torch.Tensor):
            inputs.append(torch._C._get_value_trace(value))
        else:
            inputs.append(graph.insertConstant(list(value) if isinstance(value, tuple) else value))
    node = graph.create("aten::_convolution", inputs, 1)
    graph.insertNode(node)
    node.output().inferTypeFrom(out)
    torch._C._set_value_trace(out, node.output())


for _conv in _CONVOLUTIONS:
    SPECIAL[_conv] = _convolution
