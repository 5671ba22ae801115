"""Backend detection and the version-drift message of a plugin that fails to import."""

from __future__ import annotations

import sys

import pytest
import torch

import torch_fl
from torch_fl import plugins
from torch_fl.description import registry
from torch_fl.errors import PluginImportError

BROKEN = """\
schema = 1
name = "brokenchip"
device_type = "privateuseone"
dispatch_key = "PrivateUse1"
plugin = "broken_plugin_fl"

[compat]
torch = ">=1.13,<2.0"
plugin = "==1.13.*"
"""


@pytest.fixture
def broken_plugin(tmp_path, monkeypatch):
    (tmp_path / "broken_plugin_fl.py").write_text(
        "raise ImportError('libtorch_cpu.so: undefined symbol: _ZN3c104impl8GPUTrace')\n")
    desc = tmp_path / "broken.toml"
    desc.write_text(BROKEN)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("FL_DESCRIPTION", str(desc))
    registry.reload()
    yield
    sys.modules.pop("broken_plugin_fl", None)


def test_version_drift_message(broken_plugin, monkeypatch):
    monkeypatch.setenv("FL_BACKEND", "brokenchip")
    with pytest.raises(PluginImportError) as info:
        torch_fl.device()
    text = str(info.value)
    assert "'broken_plugin_fl'" in text and "undefined symbol" in text
    assert f"installed torch {torch.__version__} is outside the range" in text and ">=1.13,<2.0" in text
    assert "FL_BACKEND=cpu" in text
    assert isinstance(info.value, ImportError)


def test_auto_detection_reports_a_broken_installed_plugin(broken_plugin):
    # An installed plugin that cannot load must not silently degrade the machine to CPU.
    with pytest.raises(PluginImportError, match="broken_plugin_fl"):
        torch_fl.backend()


def test_absent_plugins_are_skipped_cheaply():
    assert not plugins.is_present(registry.get("npu"))       # torch_npu is not installed here
    assert not plugins.is_present(registry.get("cuda"))      # CPU build: torch.version.cuda is None
    assert plugins.is_present(registry.get("cpu"))


def test_forced_backend_must_exist(monkeypatch):
    monkeypatch.setenv("FL_BACKEND", "cdua")
    with pytest.raises(LookupError, match="Did you mean 'cuda'"):
        torch_fl.backend()


def test_forced_backend_from_config_file(monkeypatch, tmp_path):
    (tmp_path / "torch_fl.toml").write_text('backend = "cpu"\n')
    monkeypatch.chdir(tmp_path)
    assert torch_fl.backend().source == str(tmp_path / "torch_fl.toml")


def test_forced_backend_whose_plugin_is_not_installed(tmp_path, monkeypatch):
    desc = tmp_path / "absent.toml"
    desc.write_text(BROKEN.replace("brokenchip", "absentchip").replace("broken_plugin_fl", "absent_plugin_fl"))
    monkeypatch.setenv("FL_DESCRIPTION", str(desc))
    monkeypatch.setenv("FL_BACKEND", "absentchip")
    torch_fl.reset()
    with pytest.raises(PluginImportError) as info:
        torch_fl.backend()
    assert "'absent_plugin_fl', which is not installed" in str(info.value)
    assert "FL_BACKEND=cpu" in str(info.value)
