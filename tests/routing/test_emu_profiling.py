"""``torch.autograd.profiler.profile(use_device=<emulated device>)`` (routing/emu/profiling.py): torch_npu's own
tests profile so, and every op printed PyTorch's kineto_ctx_ptr INTERNAL ASSERT (no C++ event stubs behind a
Python backend); the profile is now Kineto's host trace, and no PyTorch assert is printed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

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
