"""An emulated chip's kernels and copies as device activity in the trace of a plain ``torch.profiler.profile``, the
profiler users write (routing/emu/profiling.py), and a CPU fallback's two copies as memcpy events with their bytes
(issue 41 items 1 and 2)."""

from __future__ import annotations

import gzip
import json
import warnings
from collections.abc import Callable, Iterator

import pytest
import torch

import torch_fl
from torch_fl.analysis.profile import profile

Activity = torch.profiler.ProfilerActivity


@pytest.fixture
def emulated(monkeypatch) -> Iterator[Callable[[str], torch.device]]:
    """emu:npu with FL_ROUTE=`route` (torch_fl.emulate), undone after the test."""
    stack = []

    def start(route: str) -> torch.device:
        monkeypatch.setenv("FL_ROUTE", route)
        torch_fl.reset()
        activation = torch_fl.emulate("npu")
        stack.append(activation)
        return activation.__enter__().device

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", torch_fl.errors.FallbackWarning)
        yield start
    for activation in stack:
        activation.__exit__(None, None, None)
    torch_fl.reset()


def device_events(path, cat: str) -> list[dict]:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as file:
        return [e for e in json.load(file)["traceEvents"] if e.get("cat") == cat]


def test_a_plain_profile_shows_kernels_and_a_fallbacks_copies_with_bytes(emulated, tmp_path):
    d = emulated("aten::mm.default=fallback")
    x = torch.randn(8, 16).to(d)
    w = torch.randn(16, 4).to(d)
    with torch.profiler.profile() as prof:  # (torch.profiler's defaults, as a user writes it)
        y = (x @ w).relu()
    trace = tmp_path / "trace.json"
    prof.export_chrome_trace(str(trace))
    from torch_fl.routing.emu import tensor
    assert tensor.on_device_op is None  # (nothing hooked once the profile has ended)
    kernels = {e["name"] for e in device_events(trace, "kernel")}
    assert "aten::relu" in kernels and "aten::mm" not in kernels  # (the fallback's work ran on the host)
    copies = [(e["name"], e["args"]["bytes"], e["args"].get("fallback")) for e in device_events(trace, "gpu_memcpy")]
    # the fallback's arguments to the host (8x16 and 16x4 floats) and its 8x4 result back, as cpu_fallback copies
    assert copies == [("Memcpy DtoH (Device -> Pageable)", (8 * 16 + 16 * 4) * 4, "aten::mm.default"),
                      ("Memcpy HtoD (Pageable -> Device)", 8 * 4 * 4, "aten::mm.default")]
    # each copy launched from the aten::mm that fell back, on the device's default stream
    ops = {e["args"]["External id"]: e["name"] for e in device_events(trace, "cpu_op")}
    launches = {e["args"]["correlation"]: e for e in device_events(trace, "cuda_runtime")}
    for copy in device_events(trace, "gpu_memcpy"):
        assert ops[launches[copy["args"]["correlation"]]["args"]["External id"]] == "aten::mm"
        assert (copy["pid"], copy["tid"]) == (0, 0)
    assert torch.equal(y.cpu(), (x.cpu() @ w.cpu()).relu())


def test_an_in_place_fallback_copies_back_the_tensor_it_writes(emulated, tmp_path):
    d = emulated("aten::mul_.Tensor=fallback")
    x = torch.ones(32).to(d)
    scale = torch.full((32,), 2.0).to(d)
    with torch.profiler.profile() as prof:
        x.mul_(scale)
    trace = tmp_path / "trace.json"
    prof.export_chrome_trace(str(trace))
    copies = [(e["name"], e["args"]["bytes"]) for e in device_events(trace, "gpu_memcpy")]
    assert copies == [("Memcpy DtoH (Device -> Pageable)", 2 * 32 * 4), ("Memcpy HtoD (Pageable -> Device)", 32 * 4)]
    assert torch.equal(x.cpu(), torch.full((32,), 2.0))


def test_cpu_activity_alone_gets_cpu_events_only_as_on_a_gpu(emulated, tmp_path):
    d = emulated("")
    x = torch.randn(8, 8).to(d)
    with torch.profiler.profile(activities=[Activity.CPU]) as prof:
        (x @ x).relu()
    trace = tmp_path / "trace.json"
    prof.export_chrome_trace(str(trace))
    assert device_events(trace, "kernel") == [] and device_events(trace, "cpu_op")


def test_a_schedule_and_tensorboard_handler_export_each_active_cycle(emulated, tmp_path):
    d = emulated("")
    x = torch.randn(8, 8).to(d)
    with torch.profiler.profile(schedule=torch.profiler.schedule(wait=1, warmup=1, active=1, repeat=2),
                                on_trace_ready=torch.profiler.tensorboard_trace_handler(str(tmp_path),
                                                                                        use_gzip=True)) as prof:
        for step in range(6):
            y = x @ x if step % 3 == 2 else x + x  # (the active steps: 2 and 5)
            y.relu()
            prof.step()
    traces = sorted(tmp_path.glob("*.pt.trace.json.gz"))
    assert len(traces) == 2
    for path in traces:  # each cycle's trace holds that cycle's kernels only
        assert sorted(e["name"] for e in device_events(path, "kernel")) == ["aten::mm", "aten::relu"]


def test_the_autograd_profilers_use_device_form_exports_kernels_too(emulated, tmp_path):
    d = emulated("")
    x = torch.randn(8, 8).to(d)
    with torch.autograd.profiler.profile(use_device=d.type) as prof:
        x.sin()
    trace = tmp_path / "trace.json"
    prof.export_chrome_trace(str(trace))
    assert [e["name"] for e in device_events(trace, "kernel")] == ["aten::sin"]


def test_torch_fl_profile_reports_the_fallback_copies_of_its_trace(emulated, tmp_path):
    d = emulated("aten::mm.default=fallback")
    x = torch.randn(8, 8).to(d)
    with profile(str(tmp_path / "trace.json"), device=d) as result:
        x @ x
    copies = result.summary()["copies"]
    assert copies["device_memcpy"] == {"Memcpy DtoH (Device -> Pageable)": 1, "Memcpy HtoD (Pageable -> Device)": 1}
    assert copies["device_memcpy_bytes"] == {"Memcpy DtoH (Device -> Pageable)": 2 * 64 * 4,
                                             "Memcpy HtoD (Pageable -> Device)": 64 * 4}
