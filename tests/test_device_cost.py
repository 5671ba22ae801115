"""What a repeated torch.fl.device() costs (issue 43: user code calls it per step), counted in calls, not
seconds: a count does not change with the machine's load. And the config-file reading that made it cost
four directory walks a call stays right when files appear, change or go between calls."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import torch_fl
from torch_fl import _env, config

# Calls per repeated torch.fl.device(): Python functions and C functions, as cProfile counts them.
COUNT_CALLS = textwrap.dedent("""
    import json, sys, torch, torch_fl
    spec = sys.argv[1] or None
    torch.fl.device(spec)
    calls = 0
    def count(frame, event, arg):
        global calls
        if event in ("call", "c_call"):
            calls += 1
    sys.setprofile(count)
    for _ in range(50):
        torch.fl.device(spec)
    sys.setprofile(None)
    print(json.dumps({"per_call": calls / 50}))
""")


def _calls_per_device(tmp_path: Path, fl_device: str, spec: str = "") -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FL_")}
    env.update(FL_DEVICE=fl_device, OMP_NUM_THREADS="1", HOME=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", COUNT_CALLS, spec], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])["per_call"]


@pytest.mark.slow
def test_repeated_device_call_without_fl_device_is_at_most_100_calls(tmp_path):
    # (before: 623 calls, four walks up the directory tree for config files per call)
    assert _calls_per_device(tmp_path, "") <= 100


@pytest.mark.slow
def test_repeated_device_call_on_an_emulated_chip_is_at_most_100_calls(tmp_path):
    # (before: 130, then 108; FL_EMU_DEVICES is read again on every call: a test may change it)
    assert _calls_per_device(tmp_path, "emu:npu") <= 100
    assert _calls_per_device(tmp_path, "", "emu:npu") <= 100


FIRST_OP = textwrap.dedent("""
    import json, sys, torch, torch_fl
    dev = torch.fl.device()
    before = set(sys.modules)
    x = torch.ones(4, device=dev, requires_grad=True)
    (x * 2).sum().backward()
    loaded = set(sys.modules) - before
    print(json.dumps({"device": str(dev), "dtensor": "torch.distributed.tensor" in loaded,
                      "sympy": "sympy" in loaded, "grad": x.grad.tolist()}))
""")


@pytest.mark.slow
def test_the_emulated_devices_first_ops_import_neither_dtensor_nor_sympy(tmp_path):
    # PyTorch's C++ checks whether a wrapper subclass is a DTensor at its first __torch_dispatch__ unless
    # a dispatch rule is registered for the op (register.register_dispatch_rules): 519 modules, ~0.5 s
    env = {k: v for k, v in os.environ.items() if not k.startswith("FL_")}
    env.update(FL_DEVICE="emu:npu", OMP_NUM_THREADS="1", HOME=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", FIRST_OP], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found == {"device": "npu:0", "dtensor": False, "sympy": False, "grad": [2.0] * 4}


HOST_MODE = textwrap.dedent("""
    import json, sys, torch, torch_fl
    x = torch.ones(4)
    with torch_fl.emulate("npu", host=True):  # the dispatch-mode emulator, checking host tensors
        before = set(sys.modules)
        y = (x * 2).sum()
    loaded = set(sys.modules) - before
    print(json.dumps({"dynamo": "torch._dynamo" in loaded, "sympy": "sympy" in loaded, "y": y.item()}))
""")


@pytest.mark.slow
def test_the_dispatch_mode_emulators_first_op_imports_neither_dynamo_nor_sympy(tmp_path):
    # PyTorch wraps a TorchDispatchMode's __torch_dispatch__ in torch._disable_dynamo unless the mode says
    # otherwise, and its first call imports torch._dynamo (822 modules); the emulator's mode skips Dynamo by
    # a code flag instead (routing/emu/mode.py)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FL_")}
    env.update(OMP_NUM_THREADS="1", HOME=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", HOST_MODE], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"dynamo": False, "sympy": False, "y": 8.0}


def test_the_first_device_call_builds_no_native_set_and_lists_no_routed_op():
    # issue 43: the first torch.fl.device() cost ~150 ms, most of it deciding every aten overload's route
    # for the CPU key; the key's fallback serves the kernelless ops, a setting names the others
    torch_fl.reset()
    torch_fl.device()
    active = torch_fl.routing.active()
    assert "_native" not in vars(active.table) and active.installation._ops is None
    assert "aten::_cudnn_rnn.default" in active.installation.kernelless  # listed when asked
    assert "_native" in vars(active.table)


def test_a_project_config_created_after_a_lookup_is_seen(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert config.project_config().path is None
    (tmp_path / "torch_fl.toml").write_text('device = "acc0"\n')
    assert config.project_config().path == tmp_path / "torch_fl.toml"


def test_a_config_edited_in_place_or_removed_is_read_again(tmp_path, monkeypatch):
    sub = tmp_path / "pkg" / "inner"
    sub.mkdir(parents=True)
    monkeypatch.chdir(sub)
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")  # no table: the walk goes on
    assert config.project_config().path is None
    # the same file gains the table (written in place: its folder's mtime may not change)
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n\n[tool.torch_fl]\ndevice = 'acc1'\n")
    os.utime(tmp_path / "pyproject.toml", ns=(1, 1))  # a different stamp even on a coarse clock
    found = config.project_config()
    assert found.path == tmp_path / "pyproject.toml" and found.get("device") == "acc1"
    nearer = tmp_path / "pkg" / "torch_fl.toml"
    nearer.write_text('device = "acc0"\n')
    assert config.project_config().path == nearer
    nearer.unlink()
    assert config.project_config().path == tmp_path / "pyproject.toml"


def test_settings_follow_a_config_file_between_device_calls(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FL_DEVICE", raising=False)
    monkeypatch.delenv("FL_DEVICE_MAP", raising=False)
    assert torch_fl.device() == torch_fl.device("acc0")
    (tmp_path / "torch_fl.toml").write_text('device_map = { acc0 = "cpu", acc1 = "meta" }\ndevice = "acc1"\n')
    assert str(torch_fl.device()) == "meta"
    (tmp_path / "torch_fl.toml").write_text('device = "acc7"\n')
    with pytest.raises(torch_fl.errors.DeviceNotFoundError, match="acc7"):
        torch_fl.device()


def test_one_reading_reads_the_files_once_and_unpins(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "torch_fl.toml").write_text('device = "acc0"\n')
    with _env.one_reading():
        assert _env.config_value("device")[0] == "acc0"
        (tmp_path / "torch_fl.toml").write_text('device = "acc3"\n')
        os.utime(tmp_path / "torch_fl.toml", ns=(2, 2))
        assert _env.config_value("device")[0] == "acc0"  # one resolution sees one state of the files
    assert _env.config_value("device")[0] == "acc3"
