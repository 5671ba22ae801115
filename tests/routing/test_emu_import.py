"""`import torch_fl` under an emulated FL_DEVICE registers the device but pays for nothing heavy: the
emulator's autograd check (one backward on the device, which makes PyTorch import DTensor and sympy,
~0.8 s) waits for the device's first use, and still tells when a backward ran before registration."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

# each test starts interpreters (7-14 s measured on the shared 2-core machine)
pytestmark = pytest.mark.slow

HEAVY = ("sympy", "torch.distributed.tensor", "torch._dynamo", "torch._inductor")


def _run(code: str, **env: str) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith("FL_")}
    return subprocess.run([sys.executable, "-c", code], env={**full, **env}, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("chip", ["npu", "cuda"])
def test_import_registers_the_chip_without_heavy_modules_and_the_first_use_checks_autograd(chip):
    code = f"""
import json, sys
import torch_fl, torch
from torch_fl.routing import emu
heavy = [m for m in {HEAVY!r} if m in sys.modules]
registered, pending = emu.borrowed(), emu.state.probe_pending
x = torch.ones(3, device=torch.fl.device(), requires_grad=True)
(x * 2).sum().backward()
print(json.dumps({{"heavy": heavy, "registered": registered, "pending": pending, "grad": x.grad.tolist(),
                  "device": str(x.device), "checked": emu.state.probed and not emu.state.probe_pending}}))
"""
    out = _run(code, FL_DEVICE=f"emu:{chip}")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["heavy"] == [], f"import torch_fl imported {got['heavy']}"
    assert got["registered"] and got["pending"], "registered at import, autograd check left for first use"
    assert got["grad"] == [2.0, 2.0, 2.0] and got["checked"]


def test_the_first_device_tensor_of_vendor_code_runs_the_check_outside_the_kernel():
    """`x.npu()` with no torch.fl call: the check runs inside the first factory kernel (autograd is
    excluded there), so it runs on a thread of its own; `torch.fl.activate()` first holds the activation
    lock, so there it runs inline (a thread would wait for that lock forever)."""
    for first in ("x = torch.ones(3, device='npu', requires_grad=True)",
                  "torch.fl.activate(); x = torch.ones(3, device='npu', requires_grad=True)"):
        out = _run(f"import torch_fl, torch\n{first}\n(x * 2).sum().backward()\nprint(x.grad.tolist())",
                   FL_DEVICE="emu:npu")
        assert out.returncode == 0, (first, out.stderr)
        assert out.stdout.strip().splitlines()[-1] == "[2.0, 2.0, 2.0]"


def test_a_backward_before_registration_leaves_the_device_usable():
    """PyTorch's engine fixes its device queues at the first backward, so a CPU backward before `import
    torch_fl` (autoload off) used to leave the emulated device unable to run backward (the fallback to the
    dispatch mode, with a warning). Backward on an emulated device runs on the calling thread
    (routing/emu/engine.py), so the device works: it trains, with no warning."""
    code = """
import torch
p = torch.ones(1, requires_grad=True); (p * 2).sum().backward()
import torch_fl
d = torch.fl.device()
w = torch.ones(2, device=d, requires_grad=True)
(w * 3).sum().backward()
print(d, w.grad.tolist())
"""
    out = _run(code, FL_DEVICE="emu:npu", TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "npu:0 [3.0, 3.0]"
    assert "a backward pass ran in this process before the emulated device was registered" not in out.stderr
