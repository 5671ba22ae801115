"""torch_npu.optim's fused optimizers clip their gradients together (``clip_grad_norm_fused_``), as
Ascend/pytorch test/optim/test_fused_optimizers.py checks against torch.nn.utils.clip_grad_norm_, in our words."""

from __future__ import annotations

import pytest
import torch

from torch_fl.routing.emu import npu_optim


@pytest.mark.parametrize("name", ["NpuFusedSGD", "NpuFusedAdam", "NpuFusedAdamW", "NpuFusedRMSprop",
                                  "NpuFusedAdadelta"])
def test_clip_grad_norm_fused_equals_clip_grad_norm(name):
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(5, 3)) for _ in range(3)] + [torch.nn.Parameter(torch.randn(4))]
    for p in params[:-1]:
        p.grad = torch.randn_like(p) * 10  # (the last one has no gradient)
    clones = [torch.nn.Parameter(p.detach().clone()) for p in params]
    for p, c in zip(params, clones, strict=True):
        c.grad = None if p.grad is None else p.grad.clone()
    optimizer = getattr(npu_optim, name)(clones, lr=0.1)
    expected = torch.nn.utils.clip_grad_norm_(params, 5.0)
    total = optimizer.clip_grad_norm_fused_(5.0)
    torch.testing.assert_close(total, expected)
    for p, c in zip(params, clones, strict=True):
        assert (p.grad is None) == (c.grad is None)
        if p.grad is not None:
            torch.testing.assert_close(c.grad, p.grad)


def test_the_fused_total_norm_is_float32_with_half_gradients():
    # (test_fused_optimizers.py mixes float32 and float16 parameters and compares dtypes too)
    params = [torch.nn.Parameter(torch.arange(6.0).reshape(2, 3)), torch.nn.Parameter(torch.arange(6.0).half())]
    for p in params:
        p.grad = p.detach().clone() / 100
    total = npu_optim.NpuFusedSGD(params, lr=0.1).clip_grad_norm_fused_(5.0)
    assert total.dtype == torch.float32


def test_npu_slice_writes_into_out():
    # (Ascend/pytorch test/npu/test_jit_trace.py test_trace_npu_slice_out, in our words: a traced model calling
    # npu_slice(..., out=) gives what the eager one gives)
    from torch_fl.routing.emu import npu_composed

    x = torch.arange(10.0).reshape(2, 5)

    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
            npu_composed.npu_slice(x, [0, 1], [2, 2], out=out)
            return out

    eager = Model()(x, torch.zeros(2, 2))
    assert eager.tolist() == [[1.0, 2.0], [6.0, 7.0]]
    traced = torch.jit.trace(Model(), (x, torch.zeros(2, 2)))
    assert torch.equal(traced(x, torch.zeros(2, 2)), eager)
    grown = torch.zeros(0)
    assert npu_composed.npu_slice(x, [1, 0], [1, 3], out=grown) is grown and grown.tolist() == [[5.0, 6.0, 7.0]]
