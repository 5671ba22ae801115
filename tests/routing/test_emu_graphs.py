"""Device graphs on the emulated chip (routing/emu/graphs.py): capture records the region's ops, replay runs them
again on the same tensors, random ops drawing from the device generator at replay time, as op-plugin's
test_npu_flash_attention*.py (NPUGraph) and torch_musa's test_musa_graph.py check them, in our words. Each chip's
name is fixed per process, so each runs in a fresh one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

GRAPH = r'''
import json, torch
chip = torch.fl.device().type
mod = getattr(torch, chip)
Graph = getattr(mod, chip.upper() + "Graph")
out = {}
mod.manual_seed(7)
state = mod.get_rng_state()
eager = []
for _ in range(2):
    a = torch.randn(4, 4, device=chip)
    eager.append((a @ a).relu())
static_in = torch.ones(4, device=chip)
g = Graph()
with mod.graph(g):
    a = torch.randn(4, 4, device=chip)
    result = (a @ a).relu()
    doubled = static_in * 2
    static_in.add_(1)  # in place: each replay adds 1 again
out["pool"] = g.pool()[0] == mod.graph_pool_handle()[0]
mod.set_rng_state(state)
result.zero_()
g.replay()
out["first"] = torch.equal(result.cpu(), eager[0].cpu())
g.replay()
out["second"] = torch.equal(result.cpu(), eager[1].cpu())
out["static"] = [doubled.cpu().tolist(), static_in.cpu().tolist()]
print(json.dumps(out))
'''


@pytest.mark.parametrize("chip", ["emu:npu", "emu:musa"])
def test_capture_and_replay(chip):
    done = subprocess.run([sys.executable, "-c", "import torch_fl\n" + GRAPH], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "FL_DEVICE": chip}, cwd=REPO, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    # capture ran once (static_in 1 -> 2), then two replays: doubled = 2 * 2, then 2 * 3; static_in ends at 4
    assert out == {"pool": True, "first": True, "second": True, "static": [[6.0] * 4, [4.0] * 4]}
