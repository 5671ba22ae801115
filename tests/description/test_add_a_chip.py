"""Adding a chip is one TOML file (issue 43 item 6): a chip torch-fl has never heard of, with a collective
library nobody here named, loads, is emulated (its own device type, `import torch_zpu`, `torch.zpu`), is
covered, and trains in one job beside an Ascend rank. docs/descriptions.md "Adding a chip" walks the same
steps."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from torch_fl.description import registry

ROOT = Path(__file__).resolve().parents[2]
ZCHIP = """\
schema = 1
name = "zchip"
vendor = "Zeta Silicon"
summary = "A new chip: one TOML, a collective library torch-fl has never heard of"
device_type = "zpu"
dispatch_key = "PrivateUse1"
plugin = "torch_zpu"
visible_devices_env = "ZPU_VISIBLE_DEVICES"

[collectives]
backend = "zccl"

[precision]
dtypes = ["float32", "float16", "bfloat16", "int64", "int32", "bool"]
autocast_dtype = "bfloat16"

[ops]
native = ["aten::add.Tensor", "aten::mm", "aten::addmm", "aten::relu", "aten::empty_strided",
          "aten::empty.memory_format", "aten::randn", "aten::normal_", "aten::uniform_", "aten::copy_",
          "aten::_to_copy", "aten::t", "aten::view", "aten::fill_", "aten::zero_"]
default = "fallback"
"""


@pytest.fixture
def chip_dir(tmp_path: Path) -> Path:
    (tmp_path / "zchip.toml").write_text(ZCHIP, encoding="utf-8")
    return tmp_path


def _env(chip_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FL_")}
    return {**env, "FL_DESCRIPTION_PATH": str(chip_dir), "OMP_NUM_THREADS": "1", **extra}


def test_one_toml_with_a_new_collective_name_loads(chip_dir, monkeypatch):
    monkeypatch.setenv("FL_DESCRIPTION_PATH", str(chip_dir))
    registry.reload()
    try:
        desc = registry.get("zchip")
        assert (desc.vendor, desc.device_type, desc.collective_backend) == ("Zeta Silicon", "zpu", "zccl")
    finally:
        monkeypatch.delenv("FL_DESCRIPTION_PATH")
        registry.reload()


@pytest.mark.slow  # a subprocess
def test_the_new_chip_is_emulated_under_its_own_names(chip_dir):
    code = """
import json, torch, torch_fl, torch.distributed as dist
d = torch.fl.device()
layer = torch.nn.Linear(3, 2).to(d)
y = torch.nn.functional.gelu(layer(torch.randn(4, 3, device=d)))
y.sum().backward()
import torch_zpu
print(json.dumps({"device": str(d), "grad": str(layer.weight.grad.device), "count": torch.zpu.device_count(),
                  "backend": torch.fl.dist_backend(d), "zccl": "zccl" in dist.Backend.backend_list,
                  "routes": sorted({r["route"] for r in torch.fl.route_stats()})}))
"""
    done = subprocess.run([sys.executable, "-c", code], env=_env(chip_dir, FL_DEVICE="emu:zchip"),
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["device"] == got["grad"] == "zpu:0" and got["count"] == 1
    assert got["backend"] == "cpu:gloo,zpu:zpu" and got["zccl"]  # vendor code's init_process_group("zccl") starts
    assert got["routes"] == ["fallback"]  # gelu and friends are not in its table: counted, not hidden


@pytest.mark.slow  # a subprocess
def test_coverage_of_a_model_on_the_new_chip(chip_dir, tmp_path):
    out = tmp_path / "coverage.json"
    done = subprocess.run([sys.executable, "-m", "torch_fl", "coverage", "examples/gpt.py:factory", "--device",
                           "emu:zchip", "--json", str(out)], env=_env(chip_dir), capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(out.read_text())
    text = json.dumps(data)
    assert "zchip" in text and "aten::gelu" in text  # the ops it must add or provide kernels for
    assert "not native on zchip" in done.stdout


@pytest.mark.slow  # torchrun, two processes
def test_the_new_chip_trains_in_one_job_beside_an_ascend_rank(chip_dir, tmp_path):
    port = subprocess.run([sys.executable, "-c", "import socket; s = socket.socket(); s.bind(('', 0)); "
                           "print(s.getsockname()[1])"], capture_output=True, text=True).stdout.strip()
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", port,
               str(ROOT / "tests" / "distributed" / "mixed_workers.py"), "ddp", str(tmp_path), "3"]
    done = subprocess.run(command, env=_env(chip_dir, FL_RANK_DEVICES="emu:zchip,emu:npu"), capture_output=True,
                          text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Zeta Silicon zchip (zpu) on rank 0: zccl (emulated: gloo on the host data) inside" in done.stderr
    assert "autocast dtype: bfloat16 (computed by every chip; their own: bfloat16, float16)" in done.stderr
    assert (tmp_path / "rank0.pt").is_file() and (tmp_path / "rank1.pt").is_file()
