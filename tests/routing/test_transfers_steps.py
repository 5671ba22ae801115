"""route_stats()["transfers"] reads per step (issue 38: host syncs per step in route stats): the optimizer steps
the emulated device's syncs span are counted beside them, and reset with them."""

from __future__ import annotations

import os
import subprocess
import sys

SCRIPT = """
import torch, torch_fl
from torch_fl.routing import reset_route_stats
dev = torch.fl.device()
m = torch.nn.Linear(4, 4).to(dev)
opt = torch.optim.SGD(m.parameters(), lr=0.1)
m(torch.randn(2, 4, device=dev)).sum().item()          # before any step: a sync, no step
reset_route_stats()
for _ in range(3):
    loss = m(torch.randn(2, 4, device=dev)).sum()
    loss.backward()
    opt.step()
    opt.zero_grad()
    loss.item()                                         # one sync per step
    if loss.item() > 1e9:                               # and a second one
        pass
t = torch.fl.route_stats()["transfers"]
print(t["syncs"], t["steps"])
"""


def test_syncs_and_the_steps_they_span(tmp_path):
    run = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "FL_DEVICE": "emu:npu"})
    assert run.returncode == 0, run.stderr[-2000:]
    syncs, steps = map(int, run.stdout.split())
    assert steps == 3 and syncs == 6, run.stdout  # 2 syncs per step, the one before the reset forgotten

