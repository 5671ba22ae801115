"""scaled_dot_product_attention on the emulated device takes the chip's fused kernel where the chip has one
that fits (routing/emu/attention.py), computed by the host's fused kernel: the values are the plain CPU run's,
bit for bit, and a chip without one, or inputs the host's kernel refuses, take the math path."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import torch_fl

sys.path.insert(0, str(Path(__file__).parents[2] / "examples"))
from dispatch_record import CalledOps  # this folder's helper
from gpt import factory

FUSED = "aten::_scaled_dot_product_fused_attention_overrideable"
MATH = "aten::_safe_softmax"


def _step(chip: str):
    model, (tokens,), loss_fn = factory(batch=2, context=16)
    expected = copy.deepcopy(model)
    loss = loss_fn(expected(tokens), tokens)
    loss.backward()
    with torch_fl.emulate(chip) as activation:
        d = activation.device
        twin, tokens_d = copy.deepcopy(model).to(d), tokens.to(d)
        ops = CalledOps()
        with ops:
            got = loss_fn(twin(tokens_d), tokens_d)
            got.backward()
        grads = [p.grad.cpu() for p in twin.parameters()]
    return ops.names, (loss, got.cpu()), list(zip([p.grad for p in expected.parameters()], grads, strict=True))


def test_emulated_cuda_runs_fused_attention_equal_to_the_cpu_bit_for_bit():
    names, (expected, got), grads = _step("cuda")
    assert f"{FUSED}_backward" in names and FUSED in names and MATH not in names
    assert torch.equal(expected, got)
    assert all(torch.equal(e, g) for e, g in grads)  # the plain CPU run takes its fused kernel as well


def test_a_chip_without_a_fused_kernel_takes_the_math_path():
    names, (expected, got), _ = _step("mps")  # mps's table has none of PyTorch's fused SDPA kernels
    assert FUSED not in names and MATH in names
    torch.testing.assert_close(got, expected)


def _attention(chip: str, *, mask=None, dropout_p=0.0, requires_grad=False):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 8, 16) for _ in range(3))
    with torch_fl.emulate(chip) as activation:
        d = activation.device
        qd, kd, vd = (t.to(d).requires_grad_(requires_grad) for t in (q, k, v))
        md = mask.to(d) if mask is not None else None
        ops = CalledOps()
        with ops:
            out = F.scaled_dot_product_attention(qd, kd, vd, attn_mask=md, dropout_p=dropout_p)
            if requires_grad:
                out.sum().backward()
        return ops.names, out.detach().cpu(), F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def test_inference_mode_takes_the_fused_kernel_too(monkeypatch):
    # no autograd key there: SDPA itself reaches the device (a mode sees only it), which chooses the same
    from torch_fl.routing.emu import attention

    chosen = []
    choose = attention.chip_kernel
    monkeypatch.setattr(attention, "chip_kernel", lambda *a: chosen.append(choose(*a)) or chosen[-1])
    torch.manual_seed(0)
    q = torch.randn(2, 4, 8, 16)
    with torch_fl.emulate("cuda") as activation, torch.inference_mode():
        out = F.scaled_dot_product_attention(*(q.to(activation.device),) * 3, is_causal=True)
    assert [k.op for k in chosen] == ["aten::_scaled_dot_product_efficient_attention.default"]
    assert torch.equal(out.cpu(), F.scaled_dot_product_attention(q, q, q, is_causal=True))


def test_a_boolean_mask_takes_the_fused_kernel():
    mask = torch.ones(8, 8, dtype=torch.bool).tril()
    names, out, expected = _attention("cuda", mask=mask, requires_grad=True)
    assert FUSED in names
    torch.testing.assert_close(out, expected)


def test_dropout_and_a_mask_that_needs_its_gradient_take_the_math_path():
    names, _, _ = _attention("cuda", dropout_p=0.5, requires_grad=True)
    assert FUSED not in names and MATH in names  # the host's fused kernel takes no dropout
    bias = torch.zeros(8, 8, requires_grad=True)
    with torch_fl.emulate("cuda") as activation:
        d = activation.device
        q = torch.randn(1, 2, 8, 4, device=d, requires_grad=True)
        bias_d = bias.detach().to(d).requires_grad_()
        F.scaled_dot_product_attention(q, q, q, attn_mask=bias_d).sum().backward()
        assert bias_d.grad is not None  # the math path gives the mask its gradient


def test_a_chip_kernel_routed_elsewhere_takes_the_math_path(monkeypatch):
    monkeypatch.setenv("FL_ROUTE", "aten::_scaled_dot_product_efficient_attention=fallback")
    torch_fl.reset()
    names, out, expected = _attention("cuda")
    assert FUSED not in names and MATH in names
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize("chip", ["cuda", "mps"])
def test_coverage_names_what_the_emulated_step_runs(chip):
    from torch_fl.analysis.coverage import coverage
    from torch_fl.analysis.model import load_model

    ops = {op["op"] for op in coverage(load_model(f"{Path(__file__).parents[2] / 'examples' / 'gpt.py'}:factory"),
                                       f"emu:{chip}", train=True).data["ops"]}
    names, _, _ = _step(chip)
    fused = FUSED in names
    assert ("aten::_scaled_dot_product_efficient_attention.default" in ops) is fused
    assert ("aten::_safe_softmax.default" in ops) is not fused
