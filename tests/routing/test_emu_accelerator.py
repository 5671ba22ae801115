"""The emulated device behaves as an accelerator where code asks it things: timed events, free memory,
inference mode (views, copies to the host, version counters)."""

from __future__ import annotations

import pytest
import torch

import torch_fl


@pytest.fixture(params=["emu:cuda", "emu:mps"])
def device(request, monkeypatch):
    monkeypatch.setenv("FL_DEVICE", request.param)
    torch_fl.reset()
    return torch_fl.device()


def test_timed_events_measure_the_work_between_them_on_the_host_clock(device):
    # docs/runtime.md's example, on the emulated device
    start, end = torch.fl.Event(enable_timing=True), torch.fl.Event(enable_timing=True)
    a = torch.randn(256, 256, device=device)
    start.record()
    for _ in range(20):
        a = a @ a.T / 256
    end.record()
    end.synchronize()
    assert end.query() and start.elapsed_time(end) > 0
    untimed = torch.fl.Event()
    untimed.record()
    with pytest.raises(RuntimeError, match="enable_timing=True"):
        untimed.elapsed_time(end)


def test_free_memory_is_host_memory_less_the_devices_live_tensors(device):
    free, total = torch.fl.mem_get_info()
    assert 0 < free <= total
    big = torch.empty(64 * 2**20, dtype=torch.uint8, device=device)
    assert torch.fl.memory_allocated() >= big.numel()
    assert torch.fl.mem_get_info()[1] == total


def test_inference_mode_copies_views_and_modules_as_on_an_accelerator(device):
    made_before = torch.randn(3, 1, device=device)
    with torch.inference_mode():
        x = torch.randn(3, 1, device=device)
        host = x.cpu()
        assert host.device.type == "cpu" and torch.equal(host, x.to("cpu"))
        # a view of a tensor made outside inference mode shares its version counter
        wide = made_before.expand(3, 4)
        assert not wide.is_inference()
        assert torch.equal(torch.cat([wide, wide]).cpu(), torch.cat([made_before.cpu().expand(3, 4)] * 2))
        model = torch.nn.Linear(4, 2).to(device)
        out = model(torch.ones(5, 4, device=device))
        assert out.device == device and out.is_inference()
        layer = torch.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True).to(device).eval()
        assert layer(torch.randn(2, 5, 8, device=device)).shape == (2, 5, 8)
    assert (made_before + 1).device == device


def test_a_sparse_gradient_stops_with_the_chips_error_not_an_abort(device):
    # the built-in tables list no sparse kernels (SparseCUDA/SparseMPS); the error of the backward pass
    # is raised from backward(), where PyTorch's engine would otherwise abort the process
    embedding = torch.nn.Embedding(10, 3, sparse=True).to(device)
    loss = (embedding(torch.tensor([1, 2], device=device)) ** 2).sum()
    with pytest.raises(torch_fl.errors.UnsupportedOperatorError, match="_sparse_coo_tensor"):
        loss.backward()
