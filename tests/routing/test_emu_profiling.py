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
