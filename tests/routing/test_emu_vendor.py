"""Emulated PrivateUse1 chips under their vendor's name (npu:0, torch.npu, Tensor.npu()), xpu as emu,
and PyTorch's ModuleInfo database on emu:npu.

PyTorch names the PrivateUse1 slot once per process, and the test session registers it as 'emu'
(conftest), so every check of a renamed chip runs in a fresh process with FL_DEVICE set."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import torch_fl
from torch_fl.description.loader import parse
from torch_fl.routing.emu import vendor

REPO = Path(__file__).resolve().parents[2]

NPU_STYLE = r'''
import json, torch, torch_fl
out = {}
d = torch.fl.device()
out["fl_device"] = [d.type, d.index]
x = torch.ones(3).npu()
z = torch.zeros(2, device="npu:0")
out["tensors"] = [str(x.device), x.is_npu, str(z.device), torch.ones(1).is_npu]
torch.npu.synchronize()
torch.npu.set_device(0)
torch.npu.manual_seed(0)
out["module"] = [torch.npu.is_available(), torch.npu.device_count(), torch.npu.current_device(),
                 torch.npu.memory_allocated() > 0]
start, end = torch.npu.Event(enable_timing=True), torch.npu.Event(enable_timing=True)
stream = torch.npu.Stream()
start.record(); y = x * 2; end.record(); end.synchronize(); stream.synchronize()
out["timing"] = start.elapsed_time(end) >= 0
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.GELU(), torch.nn.Linear(4, 1))
host = [p.detach().clone() for p in model.parameters()]
model = model.npu()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loss = model(torch.ones(2, 3, device="npu:0")).sum(); loss.backward(); opt.step()
ref = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.GELU(), torch.nn.Linear(4, 1))
with torch.no_grad():
    for p, h in zip(ref.parameters(), host):
        p.copy_(h)
ropt = torch.optim.SGD(ref.parameters(), lr=0.1)
ref(torch.ones(2, 3)).sum().backward(); ropt.step()
out["step_equal"] = all(torch.equal(p.cpu(), r) for p, r in zip(model.parameters(), ref.parameters()))
out["param_device"] = str(next(model.parameters()).device)
try:
    torch.ones(2) + torch.ones(2, device="npu")
    out["mismatch"] = "no error"
except RuntimeError as exc:
    out["mismatch"] = str(exc)
from torch_fl.routing import emu
import pickle
scaler = pickle.loads(pickle.dumps(torch.npu.amp.GradScaler(init_scale=1024.0)))  # checkpoints pickle it
out["scaler"] = [type(scaler).__name__, scaler.get_scale()]
stats = torch.npu.memory_stats()
out["memory"] = [torch.npu.memory_cached() == torch.npu.memory_allocated() == stats["allocated_bytes.all.current"],
                 stats["reserved_bytes.all.peak"] == torch.npu.max_memory_reserved()]
out["status"] = emu.status()["detail"]
print(json.dumps(out))
'''


def _run(code: str, **env: str) -> dict:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env}, cwd=REPO, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


# The naming rule (no registration: runs in the session) ---------------------------------------------
@pytest.mark.parametrize(("chip", "name"), [("npu", "npu"), ("mlu", "mlu"), ("musa", "musa"), ("xpu", "emu"),
                                            ("cuda", "emu"), ("minimal", "emu"), ("cpu", "emu")])
def test_which_chips_emulate_under_their_own_name(chip, name):
    assert vendor.emulated_name(torch_fl.description(chip)) == name


def test_a_plugin_chip_named_like_a_torch_type_stays_emu():
    fake = parse('schema = 1\nname = "fakechip"\ndevice_type = "privateuseone"\ndispatch_key = "PrivateUse1"\n'
                 'plugin = "fake_vendor_fl"\n', "fakechip.toml")
    assert vendor.emulated_name(fake) == "emu"
    assert "xpu' is a device type built into PyTorch" in vendor.why_emu(torch_fl.description("xpu"))
    assert vendor.why_emu(torch_fl.description("npu")) == ""


# A fresh process per chip ----------------------------------------------------------------------------
@pytest.mark.slow  # a fresh process: ~5 s
def test_torch_npu_style_code_runs_unmodified_on_emu_npu():
    out = _run(NPU_STYLE, FL_DEVICE="emu:npu")
    assert out["fl_device"] == ["npu", 0]
    assert out["tensors"] == ["npu:0", True, "npu:0", False]
    assert out["module"] == [True, 1, 0, True]
    assert out["timing"] and out["step_equal"] and out["param_device"] == "npu:0"
    assert "npu:0 and cpu" in out["mismatch"] or "cpu and npu:0" in out["mismatch"]
    assert "borrowed as 'npu'" in out["status"]
    assert out["scaler"] == ["GradScaler", 1024.0] and out["memory"] == [True, True]


@pytest.mark.slow  # a fresh process: ~5 s
def test_xpu_is_emulated_as_emu():
    out = _run("import json, torch, torch_fl\nd = torch.fl.device()\nx = torch.ones(2, device=d) * 2\n"
               "print(json.dumps({'type': d.type, 'sum': x.sum().item(), 'xpu': torch.xpu.is_available()}))",
               FL_DEVICE="emu:xpu")
    assert out == {"type": "emu", "sum": 4.0, "xpu": False}


@pytest.mark.slow  # a fresh process: ~5 s
def test_never_when_the_plugin_owns_the_slot(tmp_path):
    # torch_npu renames PrivateUse1 to 'npu' at import; a process where it did keeps its own backend. A
    # package on the path stands for the installed plugin: torch-fl must leave the slot to it, even though
    # FL_DEVICE=emu:npu is set when torch imports
    (tmp_path / "torch_npu").mkdir()
    (tmp_path / "torch_npu" / "__init__.py").write_text("import torch\ntorch.utils.rename_privateuse1_backend('npu')\n")
    code = ("import torch\nimport torch_npu\nimport json, torch_fl\n"
            "from torch_fl.routing import emu\nd = torch.fl.device()\n"
            "print(json.dumps({'device': str(d), 'borrowed': emu.borrowed(), 'why': emu.unavailable_reason()}))")
    out = _run(code, FL_DEVICE="emu:npu", PYTHONPATH=f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    assert out["device"] == "cpu" and not out["borrowed"]
    assert "belongs to 'npu'" in out["why"]


# PyTorch's ModuleInfo database -----------------------------------------------------------------------
# Modules whose emulated run still fails, with why; the list only shrinks.
KNOWN: dict[str, str] = {}


@pytest.mark.slow  # every module, 4 samples each, in child processes: ~30 s (the script runs all samples)
def test_module_db_on_emu_npu(tmp_path):
    report = tmp_path / "moduledb.json"
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "moduledb_emu.py"), "--isolate",
                           "--samples", "4", "--json", str(report)], capture_output=True, text=True, timeout=900,
                          env={**os.environ, "FL_DEVICE": "emu:npu"}, cwd=REPO, check=False)
    data = json.loads(report.read_text(encoding="utf-8"))
    results = data["results"]
    assert len({r["module"] for r in results}) > 100 and data["counts"]["pass"] > 350, done.stderr[-2000:]
    failed = {r["module"]: r["detail"] for r in results if r["result"] == "fail"}
    assert set(failed) == set(KNOWN), failed
    assert all(failed[m].startswith(KNOWN[m]) for m in KNOWN)
    # Ascend implements GRU cells' autograd itself (op-plugin's autograd: section): they train on emu:npu
    assert {r["result"] for r in results if r["module"] in ("nn.GRU", "nn.GRUCell")} == {"pass"}
    for r in results:
        if r["result"] == "unsupported":  # the clear error: op, device, chip
            assert " is not supported on emu:npu (npu:0) (description 'npu')" in r["detail"], r


@pytest.mark.slow  # coverage plus an emulated step in a fresh process: ~25 s
def test_coverage_and_the_emulated_step_agree_on_a_vendor_chip(tmp_path):
    # Cambricon registers no bucketize: torch_mlu's own CPU fallback runs it (ops.vendor_fallback), so
    # coverage routes it to fallback, and the emulated step counts it
    report = tmp_path / "agree.json"
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "vendor_agreement.py"), "--chips", "mlu",
                           "--models", "examples/unusual.py:factory", "--json", str(report)],
                          capture_output=True, text=True, timeout=900, cwd=REPO, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (row,) = json.loads(report.read_text(encoding="utf-8"))
    assert row["agree"] and row["emulated"]["device"] == "mlu:0"
    assert row["coverage"]["non_native"] == row["emulated"]["non_native"] == {"aten::bucketize.Tensor": "fallback"}
    assert row["emulated"]["loss"] == row["emulated"]["cpu_loss"]
