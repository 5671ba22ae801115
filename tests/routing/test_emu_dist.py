"""DDP across two processes, each on its own emulated device, with gloo running on the host data."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from torch_fl.routing.emu import dist as emu_dist

FIXTURE = Path(__file__).parent / "fixtures" / "ddp_emu.py"


def _free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


@pytest.mark.slow
@pytest.mark.skipif(not emu_dist.supports_distributed(), reason="torch.distributed with gloo is unavailable")
def test_ddp_on_two_emulated_devices_averages_gradients():
    port = _free_port()
    env = {**os.environ, "FL_DEVICE": "emu:cuda"}
    ranks = [subprocess.Popen([sys.executable, str(FIXTURE), str(rank), port], env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for rank in (0, 1)]
    outputs = [p.communicate(timeout=300) for p in ranks]
    assert all(p.returncode == 0 for p in ranks), [err[-2000:] for _, err in outputs]
    grads = [json.loads(out.split("GRAD", 1)[1].split(" ", 2)[2]) for out, _ in outputs]
    assert all("emu:0" in out for out, _ in outputs)
    # the reference: the average of both ranks' gradients, computed on the CPU
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    expected = []
    for rank in (0, 1):
        model.zero_grad()
        torch.manual_seed(rank)
        model(torch.randn(3, 4)).sum().backward()
        expected.append(model.weight.grad.clone())
    average = ((expected[0] + expected[1]) / 2).flatten()
    for grad in grads:
        torch.testing.assert_close(torch.tensor(grad), average)


def test_init_process_group_picks_host_collectives_for_an_emulated_chip():
    # emu:cuda's description names nccl, which needs a GPU; the emulated tensors live in host memory.
    from torch_fl import description
    from torch_fl.device import resolve_spec
    from torch_fl.distributed import _backend_of

    emulated = resolve_spec("emu:cuda").device
    assert _backend_of(description("cuda"), emulated) == torch.fl.dist_backend(emulated)
    assert "gloo" in _backend_of(description("cuda"), emulated)
    assert _backend_of(description("cuda"), torch.device("cuda", 0)) == "nccl"


VENDOR_FIXTURE = Path(__file__).parent / "fixtures" / "vendor_ddp.py"


@pytest.mark.slow
@pytest.mark.skipif(not emu_dist.supports_distributed(), reason="torch.distributed with gloo is unavailable")
@pytest.mark.parametrize(("chip", "plugin", "backend"), [("npu", "torch_npu", "hccl"), ("mlu", "torch_mlu", "cncl"),
                                                          ("musa", "torch_musa", "mccl")])
def test_vendor_code_starts_its_own_collectives_backend(chip, plugin, backend):
    """Code written for the chip names the vendor's backend ("hccl"); before, c10d answered "Unknown
    backend type hccl" under emu:npu. The description's collectives.backend is the emulated backend too."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FL_")}
    env["FL_DEVICE"] = f"emu:{chip}"
    proc = subprocess.run([sys.executable, str(VENDOR_FIXTURE), plugin, chip, backend], env=env, text=True,
                          capture_output=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines()[-1] == f"TRAINED {backend} {chip}:0 True"
