"""An unsupported op's error offers only fixes that work: each one is tried with the same router."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import torch

import torch_fl
from torch_fl.errors import UnsupportedOperatorError
from torch_fl.routing.router import Router
from torch_fl.routing.table import Route


def _error(monkeypatch, call, **env) -> str:
    for name, value in {"FL_DEVICE": "emu:minimal", **env}.items():
        monkeypatch.setenv(name, value)
    torch_fl.reset()
    with pytest.raises(UnsupportedOperatorError) as info:
        call(torch_fl.device())
    return str(info.value)


def _median(device):
    return torch.arange(9.0).view(3, 3).to(device).median()


def test_every_route_fix_offered_runs_the_call(monkeypatch):
    text = _error(monkeypatch, _median)
    fixes = text.split("fixes:")[1]
    offered = re.findall(r"FL_ROUTE='([^']+)'", fixes)
    assert offered, text
    for route in offered:
        monkeypatch.setenv("FL_ROUTE", route)
        torch_fl.reset()
        assert _median(torch_fl.device()).item() == 4.0, route
    assert "/builtin/" not in fixes and "minimal.toml" not in fixes  # never a file inside the package


def test_no_translation_is_offered_for_an_op_without_one(monkeypatch):
    text = _error(monkeypatch, _median)
    assert "=translate" not in text.split("fixes:")[1]  # median has no decomposition


def test_a_dtype_the_chip_lacks_is_not_offered_a_route(monkeypatch):
    text = _error(monkeypatch, lambda d: torch.ones(3, device=d).double())
    fixes = text.split("fixes:")[1]
    assert "FL_ROUTE" not in fixes and "float32, float16, int64, bool" in fixes and ".float()" in fixes


def test_no_fallback_is_offered_for_an_op_the_cpu_cannot_run():
    router = Router(torch_fl.route_table("cuda"), "cuda:0", host_is_device=False)
    fixes = router.fixes("aten::_cudnn_rnn.default", Route("unsupported", "test"))
    assert not any("fallback" in f for f in fixes)
    assert router.fixes("aten::median.default", Route("unsupported", "test"))[0].startswith("run it on the CPU")


# An op the chip refuses, whose host kernel is missing too (a chip-native fused kernel), in forward or in
# backward: the error reaches the caller; in backward PyTorch's engine thread would abort the whole process on it
# (run in a child process, so a regression cannot take the test session down).
_REFUSED_IN_BACKWARD = """
import torch, torch_fl
torch_fl.device.emulated_devices(create=True)
with torch_fl.emulate("cuda") as chip:
    gru = torch.nn.GRU(4, 4).to(chip.device)
    try:
        out, _ = gru(torch.randn(3, 2, 4, device=chip.device))
        out.sum().backward()
    except torch_fl.errors.UnsupportedOperatorError as exc:
        print("raised:", str(exc).splitlines()[0])
print("alive")
"""


@pytest.mark.slow  # measured: 10-12 s per op on the shared 2-core machine (a subprocess/interpreter start)
@pytest.mark.parametrize("op", ["aten::_thnn_fused_gru_cell_backward", "aten::_thnn_fused_gru_cell"])
def test_an_op_refused_inside_backward_raises_from_backward_not_an_abort(op):
    env = {k: v for k, v in os.environ.items() if not k.startswith("FL_")}
    done = subprocess.run([sys.executable, "-c", _REFUSED_IN_BACKWARD], capture_output=True, text=True,
                          timeout=300, env={**env, "FL_ROUTE": f"{op}=unsupported"}, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"raised: {op}" in done.stdout and "alive" in done.stdout
