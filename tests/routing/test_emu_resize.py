"""Moving and resizing on the emulated device as on a real one: module.to() after host use (LSTM/GRU flat
weights, weight norm, parametrizations, tied weights, buffers, a live host autograd graph), out= resizing,
resize_, resize_as_, set_, randn(out=), as_strided_; never a PyTorch INTERNAL ASSERT."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from torch import nn

import torch_fl


# out= resizing ----------------------------------------------------------------------------------------------
def test_out_is_resized_as_on_a_device(d):
    x = torch.randn(3, 4)
    out = torch.empty(0, device=d)
    result = torch.add(x.to(d), x.to(d), out=out)
    assert result is out and out.shape == (3, 4) and out.stride() == (4, 1)
    assert torch.equal(out.cpu(), x + x) and out.sum().item() == pytest.approx((x + x).sum().item())
    smaller = torch.mm(x.to(d), x.t().to(d), out=out.resize_(0))  # reused as PyTorch asks: resize_(0) first
    assert smaller is out and out.shape == (3, 3) and torch.equal(out.cpu(), x @ x.t())
    values, indices = torch.empty(0, device=d), torch.empty(0, dtype=torch.long, device=d)
    got = torch.max(x.to(d), 1, out=(values, indices))             # several out= arguments
    assert got[0] is values and got[1] is indices and values.shape == (3,) and indices.shape == (3,)
    expected = torch.max(x, 1)
    assert torch.equal(values.cpu(), expected.values) and torch.equal(indices.cpu(), expected.indices)


def test_randn_out_matches_the_cpu_stream(d):
    torch.manual_seed(3)
    expected = torch.randn(2, 5)
    torch.manual_seed(3)
    out = torch.randn(2, 5, out=torch.empty(0, device=d))
    assert out.device == d and out.shape == (2, 5) and torch.equal(out.cpu(), expected)


def test_resize_and_resize_as(d):
    x = torch.arange(6.0, device=d)
    assert x.resize_(2, 3) is x and x.shape == (2, 3) and x.stride() == (3, 1)
    assert x.cpu().tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    grown = torch.empty(0, device=d).resize_(4, 5)
    assert grown.shape == (4, 5) and grown.untyped_storage().nbytes() == 80
    grown.fill_(2.0)
    assert grown.sum().item() == 40.0
    like = torch.empty(0, device=d).resize_as_(torch.empty(3, 7, device=d))
    assert like.shape == (3, 7)
    assert torch.empty(3, device=d).resize_(0).shape == (0,)


def test_set_to_tensors_and_storages(d):
    x = torch.arange(12.0, device=d).view(3, 4)
    same = torch.empty(0, device=d).set_(x)
    assert same.shape == (3, 4) and same.untyped_storage() is x.untyped_storage()
    part = torch.empty(0, device=d).set_(x.untyped_storage(), 4, (2, 2), (4, 1))
    assert part.shape == (2, 2) and part.storage_offset() == 4
    assert part.cpu().tolist() == [[4.0, 5.0], [8.0, 9.0]]
    part.fill_(-1.0)                                                 # shares the memory with x
    assert x.cpu()[1, :2].tolist() == [-1.0, -1.0]
    whole = torch.empty(0, device=d).set_(x.untyped_storage())
    assert whole.shape == (12,)
    emptied = x.clone().set_()
    assert emptied.shape == (0,)
    with pytest.raises(RuntimeError, match="cpu storage"):
        torch.empty(0, device=d).set_(torch.ones(2).untyped_storage())
    with pytest.raises(RuntimeError, match=r"same device|two devices"):
        torch.empty(0, device=d).set_(torch.ones(2))


@pytest.mark.parametrize("chip", ["cuda", "xpu"])
def test_as_strided_inplace_is_every_backends(chip):
    # as_strided_ is a composite every backend inherits (no chip kernel): xpu's op list lacks it, and
    # the chip still runs it
    with torch_fl.emulate(chip) as activation:
        x = torch.arange(12.0, device=activation.device)
        assert x.as_strided_((3, 2), (4, 2), 1) is x and x.shape == (3, 2) and x.stride() == (4, 2)
        assert x.cpu().tolist() == torch.arange(12.0).as_strided((3, 2), (4, 2), 1).tolist()
        y = torch.zeros(2, 3, device=activation.device)
        y.transpose_(0, 1).unsqueeze_(0)
        assert y.shape == (1, 3, 2)


# module.to() after host use -----------------------------------------------------------------------------------
def _moves(make, inputs, d, *, keep_graph):
    """The module used on the host (its autograd graph kept alive or not), then moved to `d`: its
    output there equals the host's."""
    torch.manual_seed(0)
    module = make()
    host_out = module(*inputs)
    host_out = host_out[0] if isinstance(host_out, tuple) else host_out
    expected = host_out.detach().clone()
    if not keep_graph:
        host_out.sum().backward()
        del host_out
    module.to(d)
    assert all(p.device == d for p in module.parameters()) and all(b.device == d for b in module.buffers())
    out = module(*(t.to(d) for t in inputs))
    out = out[0] if isinstance(out, tuple) else out
    torch.testing.assert_close(out.cpu(), expected)
    out.sum().backward()
    assert all(p.grad is None or p.grad.device == d for p in module.parameters())
    return module


MODULES = {
    "lstm": (lambda: nn.LSTM(4, 8, num_layers=2), (torch.randn(5, 2, 4),)),
    "gru": (lambda: nn.GRU(4, 8, bidirectional=True), (torch.randn(5, 2, 4),)),
    "weight_norm": (lambda: nn.utils.weight_norm(nn.Linear(4, 3)), (torch.randn(2, 4),)),
    "parametrized weight_norm": (lambda: nn.utils.parametrizations.weight_norm(nn.Linear(4, 3)), (torch.randn(2, 4),)),
    "orthogonal": (lambda: nn.utils.parametrizations.orthogonal(nn.Linear(4, 4)), (torch.randn(2, 4),)),
    "batchnorm buffers": (lambda: nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4)), (torch.randn(3, 4),)),
}


@pytest.mark.parametrize("keep_graph", [False, True], ids=["after backward", "host graph alive"])
@pytest.mark.parametrize("name", list(MODULES))
def test_modules_move_after_host_use(d, name, keep_graph):
    make, inputs = MODULES[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # (nn.utils.weight_norm is deprecated)
        _moves(make, inputs, d, keep_graph=keep_graph)


@pytest.mark.parametrize("keep_graph", [False, True], ids=["after backward", "host graph alive"])
def test_tied_weights_stay_tied_when_moving(d, keep_graph):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(6, 4), nn.Linear(4, 6, bias=False))
    model[1].weight = model[0].weight
    ids = torch.tensor([1, 2, 3])
    host = model(ids)
    if not keep_graph:
        host.sum().backward()
    weight = model[0].weight
    model.to(d)
    assert model[0].weight is model[1].weight and model[0].weight.device == d
    if not keep_graph:
        assert model[0].weight is weight                         # moved in place, as param.data = ... does
        assert model[0].weight.grad.device == d
    else:
        assert weight.device.type == "cpu"                       # the live host graph keeps its own
    torch.testing.assert_close(model(ids.to(d)).cpu(), host.detach())
    model.cpu()
    assert model[0].weight is model[1].weight and model[0].weight.device.type == "cpu"


def test_moves_on_the_host_keep_their_parameter_objects(d):
    lstm = nn.LSTM(4, 8)
    kept = lstm(torch.randn(2, 1, 4))                                # (a live graph)
    weight = lstm.weight_ih_l0
    lstm.double()                                                    # a host conversion: PyTorch's own path
    assert lstm.weight_ih_l0 is weight and weight.dtype == torch.float64
    assert kept[0].dtype == torch.float32
    twin = copy.deepcopy(lstm.float()).to(d)
    assert twin.weight_ih_l0.device == d and lstm.weight_ih_l0.device.type == "cpu"
