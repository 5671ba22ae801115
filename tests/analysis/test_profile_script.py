"""`torchfl profile train.py` (analysis/profile.py's profile_script): a training script run as `torchfl run` runs
it, its optimizer steps as the profiled steps, stopped after the last one (issue 41 item 2: `torchfl profile
SCRIPT`)."""

from __future__ import annotations

import json
import warnings

import pytest

import torch_fl
from torch_fl.cli import main

SCRIPT = '''
import sys
import torch

epochs = int(sys.argv[sys.argv.index("--epochs") + 1])
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(epochs):
    model(torch.randn(8, 16, device="cuda")).square().mean().backward()
    opt.step()
    opt.zero_grad()
print("all epochs ran")
'''


@pytest.fixture
def script(tmp_path, monkeypatch):
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    monkeypatch.setenv("FL_ROUTE", "aten::gelu=translate")
    torch_fl.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield path
    torch_fl.deactivate()
    torch_fl.reset()


def test_a_scripts_optimizer_steps_are_the_profiled_steps(script, tmp_path, capsys):
    trace, out = tmp_path / "t.json", tmp_path / "o.json"
    assert main(["profile", str(script), "--device", "emu:npu", "--steps", "3", "--warmup", "2", "--trace", str(trace),
                 "--json", str(out), "--args=--epochs 20"]) == 0
    assert "all epochs ran" not in capsys.readouterr().out  # (stopped after the profiled steps)
    data = json.loads(out.read_text())
    assert data["steps"] == 3 and data["warmup"] == 2 and data["model"] == str(script)
    # one translated gelu per forward: the 3 profiled steps' calls, as route_stats() counts them
    assert data["route_calls"] == [{"route": "translate", "op": "aten::gelu.default", "calls": 3}]
    assert [r["calls"] for r in torch_fl.route_stats()] == [3]
    events = json.loads(trace.read_text())["traceEvents"]
    assert sorted(e["name"] for e in events if e.get("name", "").startswith("ProfilerStep#")) == \
        ["ProfilerStep#0", "ProfilerStep#1", "ProfilerStep#2"]
    assert {"aten::erf", "aten::addmm"} <= {e["name"] for e in events if e.get("cat") == "kernel"}


def test_fewer_steps_than_the_warm_up_profile_nothing_and_say_so(script, capsys):
    assert main(["profile", str(script), "--device", "emu:npu", "--warmup", "5", "--args=--epochs 2"]) == 2
    err = capsys.readouterr().err
    assert "made 2 optimizer steps (exit status 0), fewer than the 5 warm-up steps" in err
    assert "pass --warmup 2 or fewer" in err


def test_script_arguments_with_a_model_entry_point_are_a_usage_error(tmp_path, capsys):
    (tmp_path / "m.py").write_text("import torch\ndef f():\n    return torch.nn.Linear(2, 2), (torch.randn(1, 2),)\n")
    assert main(["profile", f"{tmp_path / 'm.py'}:f", "--device", "cpu", "--args=--epochs 1"]) == 2
    assert "--args are a script's arguments (--epochs 1)" in capsys.readouterr().err
