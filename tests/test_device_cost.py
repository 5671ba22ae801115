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
def test_repeated_device_call_on_an_emulated_chip_stays_small(tmp_path):
    # FL_EMU_DEVICES is read again on every call (a test may change it); that read is most of the count
    assert _calls_per_device(tmp_path, "emu:npu") <= 120
    assert _calls_per_device(tmp_path, "", "emu:npu") <= 120


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
