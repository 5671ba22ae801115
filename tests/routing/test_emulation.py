"""Emulated chips: the same router on the CPU, enforcing a description's (op, dtype) set."""

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


def train(model, tokens, loss_fn, steps):
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
    assert torch_fl.device() == torch.device("cpu")     # activates the emulation
    activation = torch_fl.routing.active()
    assert activation.emulated and activation.description.name == "minimal"
    emulated = train(twin, tokens, loss_fn, steps=3)
    torch_fl.deactivate()
    torch.testing.assert_close(emulated, reference, rtol=1e-4, atol=1e-4)
    routes = {(r["op"], r["route"]) for r in torch_fl.route_stats()}
    # the model needs translation on this chip: backward ops and in-place optimizer updates
    assert ("aten::gelu_backward.default", "translate") in routes
    assert ("aten::addcdiv_.default", "translate") in routes
    assert {r for _, r in routes} == {"translate"}


def test_dtype_outside_the_chip_is_unsupported():
    with torch_fl.emulate("minimal"), pytest.raises(UnsupportedOperatorError) as info:
        torch.randn(3, dtype=torch.float64) * 2
    assert "float64" in str(info.value)


def test_emulate_mps_has_no_float64():
    # mps.toml: no float64, and ops.default = "translate-or-fallback" (like PYTORCH_ENABLE_MPS_FALLBACK)
    torch_fl.reset_route_stats()
    x = torch.randn(4, 4)
    x64 = x.double()                    # made on the host, before the emulation
    with torch_fl.emulate("mps") as activation:
        assert activation.emulated and activation.description.name == "mps"
        y = x @ x
        # converting to float64 on the chip fails where real MPS fails: the conversion itself
        with pytest.raises(UnsupportedOperatorError, match="produces float64"):
            x.double()
        # a float64 op the chip cannot run falls back to the CPU, counted and warned
        with pytest.warns(torch_fl.errors.FallbackWarning, match=r"aten::mm.default \[float64\].*emu:mps"):
            x64 @ x64
    torch.testing.assert_close(y, x @ x)
    records = {(r["op"], r["dtype"], r["route"]) for r in torch_fl.route_stats()}
    assert ("aten::mm.default", "float64", "fallback") in records
    assert not any(dtype == "float32" for _, dtype, _ in records)
    x.double().sum()   # the emulation ended with the block: no error, no count
    assert len(torch_fl.route_stats()) == len(records)


def test_sub_ops_of_a_translation_are_checked(monkeypatch):
    monkeypatch.setenv("FL_ROUTE", "aten::mul.Tensor=unsupported")
    torch_fl.reset()
    x = torch.randn(8, requires_grad=True)
    with torch_fl.emulate("minimal"):
        y = torch.nn.functional.gelu(x).sum()          # gelu itself is core: native
        with pytest.raises(UnsupportedOperatorError, match=r"aten::mul\.Tensor"):
            y.backward()                                # gelu_backward translates into mul


def test_fl_route_applies_to_emulated_chips(monkeypatch):
    monkeypatch.setenv("FL_ROUTE", "aten::mm=fallback")
    torch_fl.reset()
    torch_fl.reset_route_stats()
    x = torch.randn(4, 4)
    with torch_fl.emulate("minimal"), pytest.warns(torch_fl.errors.FallbackWarning):
        torch.testing.assert_close(x @ x, torch.mm(x, x))
    assert any(r["op"] == "aten::mm.default" and r["route"] == "fallback" for r in torch_fl.route_stats())


def test_emulated_cuda_uses_the_generated_table():
    table = torch_fl.route_table("emu:cuda")
    assert table.route("aten::_cudnn_rnn.default", "float32").kind == "native"
    assert table.route("aten::_scaled_dot_product_flash_attention_for_cpu.default", "float32").kind \
        != "native"


def test_emulated_gpu_takes_the_math_attention_path():
    # On the CPU, SDPA would pick the CPU-only fused kernel, whose backward no CUDA chip has.
    model, (tokens,), loss_fn = factory(batch=2, context=16)
    torch_fl.reset_route_stats()
    with torch_fl.emulate("cuda"):
        loss_fn(model(tokens), tokens).backward()
    assert not any("flash_attention_for_cpu" in r["op"] for r in torch_fl.route_stats())
