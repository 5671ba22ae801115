"""Emulated chips: a device of their own (emu:N), checked by the same router against a description's
(op, dtype) set; host tensors are never checked."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest
import torch

import torch_fl
from torch_fl.errors import UnsupportedOperatorError

sys.path.insert(0, str(Path(__file__).parents[2] / "examples"))
from gpt import factory


def train(model, tokens, loss_fn, steps, device="cpu"):
    model, tokens = model.to(device), tokens.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = loss_fn(model(tokens), tokens)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_transformer_trains_on_emu_minimal_like_plain_cpu(monkeypatch):
    model, (tokens,), loss_fn = factory(batch=4, context=32)
    twin = copy.deepcopy(model)
    reference = train(model, tokens, loss_fn, steps=3)
    monkeypatch.setenv("FL_DEVICE", "emu:minimal")
    torch_fl.reset()
    device = torch_fl.device()                          # activates the emulation
    assert device == torch.device("emu", 0)
    activation = torch_fl.routing.active()
    assert activation.emulated and activation.description.name == "minimal" and activation.device == device
    emulated = train(twin, tokens, loss_fn, steps=3, device=device)
    assert all(p.device == device for p in twin.parameters())
    assert twin.head.weight is twin.tok.weight          # module.to() keeps tied weights tied
    torch_fl.deactivate()
    torch.testing.assert_close(emulated, reference, rtol=1e-4, atol=1e-4)
    routes = {(r["op"], r["route"]) for r in torch_fl.route_stats()}
    # the model needs translation on this chip: backward ops and in-place optimizer updates
    assert ("aten::gelu_backward.default", "translate") in routes
    assert ("aten::addcdiv_.default", "translate") in routes
    assert {r for _, r in routes} == {"translate"}


def test_dtype_outside_the_chip_is_unsupported():
    with torch_fl.emulate("minimal") as activation:
        with pytest.raises(UnsupportedOperatorError) as info:
            torch.randn(3, dtype=torch.float64, device=activation.device) * 2
        assert "float64" in str(info.value) and "aten::randn" in str(info.value)
        # the same work on the host is the host's business: not checked, not counted
        torch_fl.reset_route_stats()
        torch.randn(3, dtype=torch.float64).sum() * 2
    assert torch_fl.route_stats() == []


def test_emulate_mps_has_no_float64(monkeypatch):
    # mps.toml: no float64, and ops.default = "translate-or-fallback" (like PYTORCH_ENABLE_MPS_FALLBACK)
    monkeypatch.setenv("FL_ROUTE", "aten::mm=fallback")
    torch_fl.reset()
    torch_fl.reset_route_stats()
    x = torch.randn(4, 4)
    x64 = x.double()                    # host float64: fine, the host has it
    with torch_fl.emulate("mps") as activation:
        assert activation.emulated and activation.description.name == "mps"
        xd = x.to(activation.device)
        # converting to float64 on the chip fails where real MPS fails: the conversion itself
        with pytest.raises(UnsupportedOperatorError, match="produces float64"):
            xd.double()
        with pytest.raises(UnsupportedOperatorError, match="produces float64"):
            x64.to(activation.device)
        # an op routed to the CPU is counted and warned, and its result stays on the device
        with pytest.warns(torch_fl.errors.FallbackWarning, match=r"aten::mm.default \[float32\].*emu:mps"):
            y = xd @ xd
        assert y.device == activation.device
        x64 @ x64                        # host work next to the device: unchecked, uncounted
    torch.testing.assert_close(y.cpu(), x @ x)
    records = {(r["op"], r["dtype"], r["route"]) for r in torch_fl.route_stats()}
    assert records == {("aten::mm.default", "float32", "fallback")}


def test_sub_ops_of_a_translation_are_checked(monkeypatch):
    monkeypatch.setenv("FL_ROUTE", "aten::mul.Tensor=unsupported")
    torch_fl.reset()
    with torch_fl.emulate("minimal") as activation:
        x = torch.randn(8, device=activation.device, requires_grad=True)
        y = torch.nn.functional.gelu(x).sum()          # gelu itself is core: native
        with pytest.raises(UnsupportedOperatorError, match=r"aten::mul\.Tensor"):
            y.backward()                                # gelu_backward translates into mul


def test_fl_route_applies_to_emulated_chips(monkeypatch):
    monkeypatch.setenv("FL_ROUTE", "aten::mm=fallback")
    torch_fl.reset()
    torch_fl.reset_route_stats()
    x = torch.randn(4, 4)
    with torch_fl.emulate("minimal") as activation, pytest.warns(torch_fl.errors.FallbackWarning):
        xd = x.to(activation.device)
        torch.testing.assert_close((xd @ xd).cpu(), torch.mm(x, x))
    assert any(r["op"] == "aten::mm.default" and r["route"] == "fallback" for r in torch_fl.route_stats())


def test_emulated_cuda_uses_the_generated_table():
    table = torch_fl.route_table("emu:cuda")
    assert table.route("aten::_cudnn_rnn.default", "float32").kind == "native"
    assert table.route("aten::_scaled_dot_product_flash_attention_for_cpu.default", "float32").kind \
        != "native"
