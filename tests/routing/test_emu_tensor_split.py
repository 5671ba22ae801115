"""routing/emu/tensor.py's dispatch is split over dispatch.py (plans), wrapping.py (arguments in, results out)
and convolution.py; the tables and hooks the other modules reach through tensor.py are the ones the dispatch
reads, so what they register there takes effect on the device."""

from __future__ import annotations

import pytest
import torch

from torch_fl.routing.emu import tensor

aten = torch.ops.aten


def test_a_handler_registered_through_tensor_special_runs_for_the_device_op(d):
    # npu_ops.py and streams.py register their handlers through tensor.SPECIAL, and drop the op's plan
    op = aten.frac.default
    calls = []

    def handler(func, args, kwargs):
        calls.append(func)
        return tensor._wrap(torch.full(args[0].shape, 7.0), args[0]._index)

    x = torch.tensor([1.25, -2.5], device=d)
    assert x.frac().cpu().tolist() == [0.25, -0.5]
    tensor.SPECIAL[op] = handler
    tensor._plans.pop(id(op), None)
    try:
        assert x.frac().cpu().tolist() == [7.0, 7.0]
    finally:
        del tensor.SPECIAL[op]
        tensor._plans.pop(id(op), None)
    assert calls == [op]
    assert x.frac().cpu().tolist() == [0.25, -0.5]


def test_the_device_op_hook_set_through_tensor_sees_each_op_and_leaves_nothing_behind(d):
    seen = []
    x = torch.ones(2, 2, device=d)
    tensor.set_device_op_hook("test", lambda func, args: seen.append(func))
    try:
        assert tensor.on_device_op is not None
        (x + x).t()
    finally:
        tensor.set_device_op_hook("test", None)
    assert seen == [aten.add.Tensor, aten.t.default]
    assert tensor.on_device_op is None
    x + x
    assert len(seen) == 2


def test_a_convolution_of_input_and_weight_on_two_devices_raises_the_mismatch(d):
    # (convolution.py's handler, reached through SPECIAL, then the plan's unwrap)
    x, weight = torch.ones(1, 1, 3, 3, device=d), torch.ones(1, 1, 1, 1)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.nn.functional.conv2d(x, weight)
    assert torch.nn.functional.conv2d(x, weight.to(d)).cpu().tolist() == torch.ones(1, 1, 3, 3).tolist()
