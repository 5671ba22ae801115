"""Optimizers on an emulated chip take the path PyTorch takes on the real chip (the foreach ops on cuda,
npu, xpu; the per-tensor loop on mps), a chip without foreach kernels runs PyTorch's own per-tensor loop
of them, and re-entering an emulation keeps its route decisions."""

from __future__ import annotations

import copy

import pytest
import torch
from dispatch_record import CalledOps  # this folder's helper
from torch.optim import optimizer

import torch_fl
from torch_fl import routing


def _train(model: torch.nn.Module, x: torch.Tensor, **options) -> list[torch.Tensor]:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, **options)
    for _ in range(3):
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
    return [p.detach().cpu() for p in model.parameters()]


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU(), torch.nn.Linear(8, 1))


@pytest.mark.parametrize(("chip", "foreach"), [("cuda", True), ("npu", True), ("xpu", True), ("mps", False)])
def test_adamw_takes_the_real_chips_default_path(chip, foreach):
    model, x = _model(), torch.randn(16, 8)
    expected = _train(copy.deepcopy(model), x, foreach=foreach)  # the CPU, on the path the chip takes
    with torch_fl.emulate(chip) as activation:
        d = activation.device
        twin = copy.deepcopy(model).to(d)
        ops = CalledOps()
        with ops:
            got = _train(twin, x.to(d))
    assert any(name.startswith("aten::_foreach_") for name in ops.names) is foreach
    for e, g in zip(expected, got, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-6)


def test_the_foreach_listing_lasts_as_long_as_the_emulation():
    from torch_fl.routing.emu import EmuTensor

    with torch_fl.emulate("cuda"):
        assert EmuTensor in optimizer._foreach_supported_types
        with torch_fl.emulate("mps"):  # nested: the inner chip decides
            assert EmuTensor not in optimizer._foreach_supported_types
        assert EmuTensor in optimizer._foreach_supported_types
    assert EmuTensor not in optimizer._foreach_supported_types


def test_a_chip_without_foreach_kernels_runs_pytorchs_per_tensor_loop():
    # minimal has no _foreach_* kernel: as on any backend without one, PyTorch's CompositeExplicitAutograd
    # loop runs, its per-tensor ops checked against the chip (a translation, counted)
    model, x = _model(), torch.randn(16, 8)
    expected = _train(copy.deepcopy(model), x, foreach=True)
    torch_fl.reset_route_stats()
    with torch_fl.emulate("minimal") as activation:
        got = _train(copy.deepcopy(model).to(activation.device), x.to(activation.device), foreach=True)
    translated = {r["op"] for r in torch_fl.route_stats() if r["route"] == "translate"}
    assert "aten::_foreach_addcdiv_.ScalarList" in translated and "aten::_foreach_mul_.Scalar" in translated
    for e, g in zip(expected, got, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-6)


def test_a_foreach_loop_reaches_the_chips_dtype_check():
    table = torch_fl.route_table("minimal")
    assert table.route("aten::_foreach_mul_.Scalar", "float32").kind == "translate"
    with torch_fl.emulate("minimal") as activation:
        ts = [torch.ones(2, dtype=torch.float16, device=activation.device)]
        torch._foreach_mul_(ts, 3.0)                     # the loop's mul_ is native for float16
        assert ts[0].cpu().tolist() == [3.0, 3.0]


def test_reentering_an_emulation_keeps_its_route_table_and_decisions():
    with torch_fl.emulate("cuda") as first:
        (torch.ones(2, device=first.device) + 1).cpu()
        decided = dict(first.table.dispatch_routes)
    with torch_fl.emulate("cuda") as again:
        assert again.table is first.table
        assert decided and all(again.table.dispatch_routes[key] is route for key, route in decided.items())


def test_a_changed_fl_route_gives_a_new_table(monkeypatch):
    with torch_fl.emulate("minimal") as before:
        assert before.table.route("aten::mm.default", "float32").kind == "native"
    monkeypatch.setenv("FL_ROUTE", "aten::mm=fallback")
    with torch_fl.emulate("minimal") as after:
        assert after.table is not before.table
        assert after.table.route("aten::mm.default", "float32").kind == "fallback"
    monkeypatch.delenv("FL_ROUTE")
    with torch_fl.emulate("minimal") as back:
        assert back.table.route("aten::mm.default", "float32").kind == "native"


def test_a_registered_kernel_reaches_a_reentered_emulation():
    x = torch.randn(3)
    with torch_fl.emulate("cuda") as activation:
        torch.nn.functional.gelu(x.to(activation.device)).cpu()  # decided native, kept in the table
    handle = torch_fl.register_kernel("aten::gelu", lambda t, approximate="none": t * 0)
    try:
        with torch_fl.emulate("cuda") as activation:
            assert routing.route_table().route("aten::gelu.default", "float32").kind == "kernel"
            assert torch.nn.functional.gelu(x.to(activation.device)).cpu().abs().sum().item() == 0
    finally:
        handle.remove()
    with torch_fl.emulate("cuda") as activation:
        torch.testing.assert_close(torch.nn.functional.gelu(x.to(activation.device)).cpu(),
                                   torch.nn.functional.gelu(x))
