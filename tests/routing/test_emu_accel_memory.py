"""torch.accelerator's memory API on the emulated device answers from the emulator's counts (PyTorch's own
functions stopped with 'INTERNAL ASSERT FAILED ... Allocator for emu is not a DeviceAllocator': there is no
C++ allocator behind a Python backend; accelerate 1.16's Accelerator() calls torch.accelerator.empty_cache())."""

from __future__ import annotations

import gc

import pytest
import torch

import torch_fl
from torch_fl.routing import emu


@pytest.fixture
def chip(monkeypatch):
    monkeypatch.setenv("FL_DEVICE", "emu:cuda")
    torch_fl.reset()
    dev = torch.fl.device()
    assert torch.accelerator.current_accelerator().type == dev.type
    gc.collect()
    return dev


def test_allocated_and_peak_are_the_emulated_devices_live_tensor_bytes(chip):
    torch.accelerator.empty_cache()  # the call accelerate 1.16 makes: no INTERNAL ASSERT
    start = torch.accelerator.memory_allocated()
    assert start == emu.memory_allocated(chip.index) == torch.fl.memory_allocated()
    torch.accelerator.reset_peak_memory_stats()
    x = torch.ones(4096, device=chip)  # 16 KiB
    assert torch.accelerator.memory_allocated() == start + x.nbytes == torch.accelerator.memory_reserved()
    assert torch.accelerator.max_memory_allocated() == start + x.nbytes
    del x
    gc.collect()
    assert torch.accelerator.memory_allocated() == start
    assert torch.accelerator.max_memory_allocated() == start + 16384  # the peak stays until it is reset
    torch.accelerator.reset_peak_memory_stats()
    assert torch.accelerator.max_memory_allocated() == start
    stats = torch.accelerator.memory_stats(chip)
    assert stats["allocated_bytes.all.current"] == start and stats["num_ooms"] == 0
    torch.accelerator.reset_accumulated_memory_stats()


def test_memory_info_is_host_memory_less_the_live_tensors(chip):
    free, total = torch.accelerator.get_memory_info()
    assert 0 < free <= total
    assert (free, total) == torch.fl.mem_get_info() or abs(free - torch.fl.mem_get_info()[0]) < 2**28


def test_the_wrapped_entry_points_say_so():
    assert "torch-fl" in (torch._C._accelerator_getDeviceStats.__doc__ or "")


def test_the_backend_modules_memory_calls_agree_with_torch_accelerator(chip):
    # torch.emu (emu:cuda's device module) had no memory_reserved / memory_stats (issue 36)
    module = getattr(torch, chip.type)
    x = torch.ones(1024, device=chip)
    live = torch.accelerator.memory_allocated()
    assert module.memory_reserved() == live == module.memory_allocated()
    assert module.max_memory_reserved() == torch.accelerator.max_memory_allocated()
    stats = module.memory_stats()
    assert stats == torch.accelerator.memory_stats(chip)  # the same flat layout as CUDA's
    assert stats["allocated_bytes.all.current"] == live == stats["reserved_bytes.all.current"]
    assert f"allocated_bytes.all.current: {live}" in module.memory_summary()
    del x
