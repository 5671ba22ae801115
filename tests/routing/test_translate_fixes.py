"""Forced translations that PyTorch's decompositions get wrong for some inputs give the kernels'
results (routing/translate.py, _CORRECTIONS), checked against the CPU kernel through the router."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torch_fl


@pytest.fixture
def translated(monkeypatch):
    def make(op: str) -> torch.device:
        monkeypatch.setenv("FL_DEVICE", "emu:cuda")
        monkeypatch.setenv("FL_ROUTE", f"{op}=translate")
        torch_fl.reset()
        torch_fl.reset_route_stats()
        return torch_fl.device()
    return make


def _routes(op: str) -> set[str]:
    return {r["route"] for r in torch_fl.route_stats() if r["op"].startswith(op)}


@pytest.mark.parametrize("training", [False, True])
def test_native_batch_norm_saves_what_the_kernel_saves(translated, training):
    x, w, b = torch.randn(4, 3, 5), torch.randn(3), torch.randn(3)
    rm, rv = torch.randn(3), torch.rand(3) + 0.5
    expected = torch.ops.aten.native_batch_norm(x, w, b, rm.clone(), rv.clone(), training, 0.1, 1e-5)
    device = translated("aten::native_batch_norm")
    rm_d, rv_d = rm.to(device), rv.to(device)
    got = torch.ops.aten.native_batch_norm(x.to(device), w.to(device), b.to(device), rm_d, rv_d, training,
                                           0.1, 1e-5)
    assert _routes("aten::native_batch_norm") == {"translate"}
    assert [t.shape for t in got] == [t.shape for t in expected]
    torch.testing.assert_close([t.cpu() for t in got], list(expected))


def test_multilabel_margin_loss_of_one_sample_is_0_dim(translated):
    x, target = torch.randn(10), torch.tensor([3, 0, -1, 1, 2, 4, 5, 6, 7, 8])
    expected = F.multilabel_margin_loss(x, target, reduction="none")
    device = translated("aten::multilabel_margin_loss_forward")
    got = F.multilabel_margin_loss(x.to(device), target.to(device), reduction="none")
    assert _routes("aten::multilabel_margin_loss_forward") == {"translate"}
    assert got.shape == expected.shape == ()
    torch.testing.assert_close(got.cpu(), expected)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_multilabel_margin_loss_of_a_0_dim_input(translated, reduction):
    # OpInfo's first sample: one sample of one class (musa translates the op; it has no CPU fallback)
    x, target = torch.tensor(0.7), torch.tensor(0)
    expected = F.multilabel_margin_loss(x, target, reduction=reduction)
    device = translated("aten::multilabel_margin_loss_forward")
    got = F.multilabel_margin_loss(x.to(device), target.to(device), reduction=reduction)
    assert got.shape == expected.shape
    torch.testing.assert_close(got.cpu(), expected)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_multilabel_margin_loss_stops_at_the_first_minus_one(translated, reduction):
    torch.manual_seed(0)
    x = torch.randn(3, 6, requires_grad=True)
    target = torch.tensor([[1, 2, -1, 0, 0, 0], [5, 0, 1, 2, 3, 4], [3, -1, 2, 2, 2, 2]])
    expected = F.multilabel_margin_loss(x, target, reduction=reduction)
    device = translated("aten::multilabel_margin_loss_forward")
    got = F.multilabel_margin_loss(x.detach().to(device), target.to(device), reduction=reduction)
    torch.testing.assert_close(got.cpu(), expected.detach())
