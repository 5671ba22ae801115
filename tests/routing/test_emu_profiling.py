"""``torch.autograd.profiler.profile(use_device=<emulated device>)`` (routing/emu/profiling.py): torch_npu's own
tests profile so, and every op printed PyTorch's kineto_ctx_ptr INTERNAL ASSERT (no C++ event stubs behind a
Python backend); the profile is now Kineto's host trace, and no PyTorch assert is printed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

import torch_fl
from torch_fl.analysis.profile import profile

CODE = textwrap.dedent("""
    import json, torch, torch_fl
    d = torch.fl.device()
    x = torch.randn(20, 30, 40, 16, device=d)
    with torch.autograd.profiler.profile(use_device=d.type) as prof:
        y = x.flatten(2).select(1, 1).contiguous()
    keys = [e.key for e in prof.key_averages()]
    print(json.dumps({"keys": keys, "equal": torch.equal(y.cpu(), x.cpu().flatten(2).select(1, 1))}))
""")


@pytest.mark.slow  # a fresh process per chip
@pytest.mark.parametrize("chip", ["emu:npu", "emu:cuda"])
def test_profiling_the_emulated_device_asserts_nothing(chip):
    done = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "FL_DEVICE": chip, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "INTERNAL ASSERT" not in done.stderr, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["equal"] and {"aten::contiguous", "aten::copy_"} <= set(out["keys"])


VENDOR_API = textwrap.dedent("""
    import json, os, sys, tempfile, torch, torch_npu
    out = {"lazy": "torch_npu.profiler" not in sys.modules}
    import torch_npu.profiler as npu_profiler
    config = npu_profiler._ExperimentalConfig(profiler_level=npu_profiler.ProfilerLevel.Level1,
                                              aic_metrics=npu_profiler.AiCMetrics.PipeUtilization,
                                              export_type=npu_profiler.ExportType.Text)
    folder = tempfile.mkdtemp()
    with npu_profiler.profile(activities=[npu_profiler.ProfilerActivity.CPU, npu_profiler.ProfilerActivity.NPU],
                              schedule=npu_profiler.schedule(wait=0, warmup=1, active=1, repeat=1),
                              on_trace_ready=npu_profiler.tensorboard_trace_handler(folder), record_shapes=True,
                              experimental_config=config) as prof:
        for _ in range(3):
            x = torch.randn(8, 8, device="npu")
            with npu_profiler.record_function("step"):
                (x @ x).sum()
            prof.step()
    out["traces"] = [f.endswith(".pt.trace.json") for f in os.listdir(folder)]
    out["keys"] = sorted({e.key for e in prof.key_averages()} & {"aten::mm", "step"})
    out["level"] = prof.npu_config.profiler_level
    try:
        npu_profiler._ExperimentalConfig(profiler_level="Level9")
    except ValueError as exc:
        out["refused"] = "Level9" in str(exc)
    print(json.dumps(out))
""")


@pytest.mark.slow  # a fresh process
def test_the_vendors_profiler_api_on_the_emulated_npu():
    # torch_npu.profiler as Ascend's docs use it (profile with the NPU activity, schedule, tensorboard handler,
    # experimental_config), in our words
    done = subprocess.run([sys.executable, "-c", VENDOR_API], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "FL_DEVICE": "emu:npu", "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out == {"lazy": True, "traces": [True], "keys": ["aten::mm", "step"], "level": "Level1", "refused": True}


def _trace_of(tmp_path, monkeypatch, route, work):
    """The Chrome trace torch.fl.profile writes of `work(device)` on emu:npu, FL_ROUTE=`route`."""
    monkeypatch.setenv("FL_ROUTE", route)
    torch_fl.reset()
    trace = tmp_path / "trace.json"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", torch_fl.errors.FallbackWarning)
        with torch_fl.emulate("npu") as activation:
            d = activation.device
            x = torch.randn(8, 8).to(d)
            with profile(str(trace), device=d):
                work(d, x, getattr(torch, d.type))
    torch_fl.reset()
    return json.loads(trace.read_text())["traceEvents"]


def _device_events(events, cat):
    return [e for e in events if e.get("cat") == cat]


def test_the_trace_shows_the_emulated_kernels_and_copies_as_device_activity(tmp_path, monkeypatch):
    """Issue 41 item 1: kernels on a device process, one thread per stream, memcpy events for host<->device
    copies, each tied to its CPU op by a launch event and an ac2g flow, as Kineto writes a GPU's."""
    def work(d, x, mod):
        pinned = torch.ones(8, 8).pin_memory()
        y = (x @ x.t()).relu()  # (t(): a view, no kernel)
        y.add_(pinned.to(d, non_blocking=True))
        side = mod.Stream()
        side.wait_stream(mod.current_stream())
        with mod.stream(side):
            y.mul_(2)
        mod.current_stream().wait_stream(side)
        y.cpu()

    events = _trace_of(tmp_path, monkeypatch, "", work)
    from torch_fl.routing.emu import tensor
    assert tensor.on_device_op is None  # (the recorder is off after the profile: the dispatch pays nothing)
    names = {(e["name"], e["tid"]) for e in _device_events(events, "kernel")}
    assert {("aten::mm", 0), ("aten::relu", 0), ("aten::add_", 0)} <= names
    assert any(name == "aten::mul_" and tid != 0 for name, tid in names)  # the side stream's own thread
    assert not any(name == "aten::t" for name, _ in names)
    memcpy = {e["name"] for e in _device_events(events, "gpu_memcpy")}
    assert {"Memcpy HtoD (Pinned -> Device)", "Memcpy DtoH (Device -> Pageable)"} <= memcpy
    device = {e["pid"] for e in _device_events(events, "kernel")}
    labels = [e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name" and e["pid"] == 0]
    assert device == {0} and labels and labels[0].endswith(":0 (emulated by torch-fl)")  # (npu:0, or emu:0 here)
    # each device event: a launch on the CPU thread inside its aten op, and a flow from one to the other
    ops = {e["args"]["External id"]: e["name"] for e in events if e.get("cat") == "cpu_op"}
    launches = {e["args"]["correlation"]: e for e in _device_events(events, "cuda_runtime")}
    flows = {(e["id"], e["ph"]) for e in _device_events(events, "ac2g")}
    for kernel in _device_events(events, "kernel"):
        cid = kernel["args"]["correlation"]
        assert ops[launches[cid]["args"]["External id"]] == kernel["name"]
        assert {(cid, "s"), (cid, "f")} <= flows


def test_a_translated_op_shows_its_sub_ops_and_a_fallback_no_kernel(tmp_path, monkeypatch):
    def work(d, x, mod):
        torch.nn.functional.gelu(x)
        x @ x

    events = _trace_of(tmp_path, monkeypatch, "aten::gelu=translate,aten::mm.default=fallback", work)
    kernels = {e["name"] for e in _device_events(events, "kernel")}
    assert "aten::gelu" not in kernels and {"aten::erf", "aten::mul", "aten::add"} <= kernels  # its sub-ops
    assert "aten::mm" not in kernels and "aten::erf" in kernels  # the fallback ran on the host
