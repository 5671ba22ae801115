"""``torch.Event`` on the emulated device (routing/emu/events.py): record, query, wait, synchronize and
elapsed_time as on a chip (PyTorch's own event asks a C++ device guard a Python backend cannot provide)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch


def test_device_generic_events_time_and_sync_on_the_emulated_device(d):
    start, end = torch.Event(device=d, enable_timing=True), torch.Event(enable_timing=True)  # (current accelerator)
    assert start.device == d and end.device == d
    start.record()
    y = torch.randn(64, 64, device=d) @ torch.randn(64, 64, device=d)
    end.record()
    end.synchronize()
    assert start.query() and end.query()
    assert end.elapsed_time(start) <= 0 <= start.elapsed_time(end)
    end.wait()
    assert y.device == d
    assert isinstance(start, torch.Event) and isinstance(torch.Event(device="cpu"), torch.Event)
    untimed = torch.Event(device=d)
    untimed.record()
    with pytest.raises(RuntimeError, match="enable_timing=True"):
        untimed.elapsed_time(end)


def test_an_event_of_a_device_that_does_not_exist_is_refused(d):
    with pytest.raises(RuntimeError, match=r"does not exist.*FL_EMU_DEVICES"):
        torch.Event(device=torch.device(d.type, 7))


@pytest.mark.slow  # a fresh process: the chip's own name
def test_torch_event_under_the_vendor_name():
    code = textwrap.dedent("""
        import torch, torch_fl
        e1, e2 = torch.Event(device="npu", enable_timing=True), torch.Event(device="npu:0", enable_timing=True)
        e1.record(torch.npu.current_stream()); torch.ones(3, device="npu").sum(); e2.record()
        e2.synchronize()
        print(e1.device, e2.device, e1.query(), e1.elapsed_time(e2) >= 0)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "FL_DEVICE": "emu:npu", "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["npu:0", "npu:0", "True", "True"]
