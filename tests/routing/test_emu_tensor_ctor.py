"""torch.tensor(...) with device tensors in its data or under torch.compile's fake tensors, on the emulated
device (routing/emu/factories.py): what CUDA gives, never PyTorch's `func != nullptr` internal assert."""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode


def test_a_list_of_0dim_device_tensors_reads_their_values(d):
    items = [torch.tensor(1.5, device=d), torch.tensor(-2.0, device=d), torch.tensor(3, device=d)]
    # as on CUDA: the values are read, and the tensor is made on the CPU unless device= says otherwise
    on_host = torch.tensor(items)
    assert on_host.device.type == "cpu" and on_host.tolist() == [1.5, -2.0, 3.0]
    on_device = torch.tensor(items, device=d)
    assert on_device.device == d and on_device.cpu().tolist() == [1.5, -2.0, 3.0]
    nested = torch.tensor([[items[0], 4.0], [5, items[2]]], dtype=torch.float64)
    assert nested.dtype == torch.float64 and nested.tolist() == [[1.5, 4.0], [5.0, 3.0]]


def test_tensor_on_the_device_under_fake_tensor_mode(d):
    with FakeTensorMode(allow_non_fake_inputs=True):
        empty = torch.tensor([], device=d)
        values = torch.tensor([1.0, 2.0], device=d)
    assert (empty.device, tuple(empty.shape)) == (d, (0,))
    assert (values.device, tuple(values.shape)) == (d, (2,))


def _cache(x: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
    # what Hugging Face's DynamicCache does in every forward with use_cache=True
    keys = torch.tensor([], device=x.device)
    keys = torch.cat([keys, x * 2])
    return torch.cat([keys, step + torch.tensor([1.0, 2.0], device=x.device)])


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_tensor_on_the_device_inside_a_compiled_function(d, backend):
    torch._dynamo.reset()
    x, step = torch.arange(3.0), torch.full((2,), 10.0)
    compiled = torch.compile(_cache, backend=backend)
    got = compiled(x.to(d), step.to(d))
    assert got.device == d
    assert torch.equal(got.cpu(), _cache(x, step))
    assert not isinstance(got, FakeTensor)


def test_tensor_of_a_device_storage_reads_it_as_the_cpu_reads_a_host_storage(d):
    expected = torch.tensor(torch.arange(3.0).untyped_storage())  # (PyTorch reads the bytes as int64)
    storage = torch.arange(3.0, device=d).untyped_storage()
    assert torch.equal(torch.tensor(storage), expected)
    on_device = torch.tensor(storage, device=d)
    assert on_device.device == d and torch.equal(on_device.cpu(), expected)
