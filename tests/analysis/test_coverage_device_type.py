"""Coverage of a plugin chip (npu, mlu, musa) traces on the chip's own device type, so that library code
that branches on ``x.device.type == "npu"`` is traced down the branch the chip takes (issue 36: offline
``coverage --device npu`` traced on meta and ``emu:npu`` on ``emu``, and listed ops the chip never runs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

import torch_fl
from torch_fl.analysis.coverage import coverage
from torch_fl.analysis.model import load_model

BRANCHY = textwrap.dedent("""
    import torch

    class Norm(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(8, 8)

        def forward(self, x):
            y = self.proj(x)
            if y.device.type == "npu":  # what Ascend ports do: the vendor's fused kernel on the chip
                import torch_npu
                return torch_npu.npu_rms_norm(y, torch.ones(8, device=y.device))[0]
            return torch.nn.functional.rms_norm(y, (8,))

    def factory():
        return Norm(), (torch.randn(2, 8),), None
""")
GENERIC = {"aten::pow.Tensor_Scalar", "aten::rsqrt.default", "aten::mean.dim"}


@pytest.fixture
def model_file(tmp_path):
    path = tmp_path / "branchy.py"
    path.write_text(BRANCHY)
    return path


def _coverage_in_a_fresh_process(model_file, device: str, **env: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "torch_fl", "coverage", "--device", device,
                           f"{model_file}:factory", "--json", "-"], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1", **env}, cwd=model_file.parent)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


@pytest.mark.slow
@pytest.mark.parametrize("device", ["npu", "emu:npu"])
def test_a_plugin_chip_is_traced_on_its_own_device_type(model_file, device):
    data = _coverage_in_a_fresh_process(model_file, device)
    ops = {row["op"] for row in data["ops"]}
    assert "npu::npu_rms_norm.default" in ops and not ops & GENERIC, ops  # the chip's branch, as on the chip
    assert data["notes"][0].startswith("Traced on fake npu:0 tensors")


@pytest.mark.slow
def test_another_plugin_chip_takes_its_own_branch(model_file):
    data = _coverage_in_a_fresh_process(model_file, "mlu")
    ops = {row["op"] for row in data["ops"]}
    assert ops >= GENERIC and "npu::npu_rms_norm.default" not in ops  # an MLU is no npu: the generic branch
    assert data["notes"][0].startswith("Traced on fake mlu:0 tensors")


def test_where_the_slot_has_another_name_the_report_says_so(model_file):
    # the suite's process named the emulated slot 'emu' (tests/conftest.py): npu cannot be traced as itself
    assert torch_fl.device.emulated_devices()[0].type == "emu"
    data = coverage(load_model(f"{model_file}:factory"), "npu").data
    ops = {row["op"] for row in data["ops"]}
    assert ops >= GENERIC
    note = next(n for n in data["notes"] if "is a plugin chip" in n)
    assert "took its other branch" in note and "FL_DEVICE=emu:npu" in note
