"""Virtual device resolution: lookup order, explicit maps, pass-through and error texts."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import torch_fl
from torch_fl.errors import ConfigError, DeviceNotFoundError


def test_import_installs_torch_fl():
    import torch.fl as alias

    assert torch.fl is torch_fl and alias is torch_fl


@pytest.mark.slow
@pytest.mark.parametrize(("fl_device", "name"), [("", "privateuseone"), ("emu:minimal", "emu")])
def test_privateuse1_is_borrowed_only_for_emulation(fl_device, name):
    # never at import otherwise: vendor plugins own that slot. (This session's conftest borrows it for
    # the emulation tests, hence a fresh process.)
    import os
    import subprocess
    import sys

    env = {**os.environ, "FL_DEVICE": fl_device}
    out = subprocess.run([sys.executable, "-c", "import torch_fl, torch; "
                          "print(torch._C._get_privateuse1_backend_name())"],
                         env=env, capture_output=True, text=True, timeout=120, check=True).stdout
    assert out.split() == [name]


def test_default_is_acc0_on_cpu():
    assert torch_fl.device() == torch.device("cpu")
    assert torch_fl.devices() == [torch.device("cpu")]
    assert torch_fl.device_type() == "cpu"
    assert torch_fl.device(0) == torch.device("cpu")


def test_physical_names_and_devices_pass_through():
    assert torch_fl.device("cuda:1") == torch.device("cuda", 1)
    assert torch_fl.device("cpu") == torch.device("cpu")
    dev = torch.device("meta")
    assert torch_fl.device(dev) is dev


def test_explicit_map_from_environment(monkeypatch):
    monkeypatch.setenv("FL_DEVICE_MAP", "acc1=cpu, acc0=cuda:1")
    assert torch_fl.devices() == [torch.device("cuda", 1), torch.device("cpu")]
    assert torch_fl.device("acc1") == torch.device("cpu")
    assert torch_fl.device_type() == "cuda"


@pytest.mark.parametrize("text", ["acc0", "acc0=", "gpu0=cuda:0", "acc0=gpu:0"])
def test_bad_device_map(monkeypatch, text):
    monkeypatch.setenv("FL_DEVICE_MAP", text)
    with pytest.raises(ConfigError, match="FL_DEVICE_MAP"):
        torch_fl.devices()


def test_lookup_order_argument_env_project_user(monkeypatch, tmp_path):
    user = tmp_path / "user.toml"
    user.write_text('device = "acc1"\ndevice_map = { acc0 = "cpu", acc1 = "meta" }\n')
    monkeypatch.setenv("FL_CONFIG", str(user))
    assert torch_fl.device() == torch.device("meta")                 # user file
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "pyproject.toml").write_text('[tool.torch_fl]\ndevice = "acc0"\n')
    (tmp_path / "proj" / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "proj" / "sub")                     # found walking up
    assert torch_fl.device() == torch.device("cpu")                  # project beats user
    (tmp_path / "proj" / "sub" / "torch_fl.toml").write_text('device = "acc0"\ndevice_map = { acc0 = "cuda:3" }\n')
    assert torch_fl.device() == torch.device("cuda", 3)              # nearer project file wins
    monkeypatch.setenv("FL_DEVICE_MAP", "acc0=cuda:2")
    assert torch_fl.device() == torch.device("cuda", 2)              # environment beats files
    monkeypatch.setenv("FL_DEVICE", "cpu")
    assert torch_fl.device() == torch.device("cpu")                  # FL_DEVICE picks the id
    assert torch_fl.device("acc0") == torch.device("cuda", 2)        # the argument beats FL_DEVICE


def test_auto_detection_when_nothing_is_configured():
    assert torch_fl.backend().source == "auto-detected"
    assert torch_fl.backend().description.name == "cpu"


def test_unknown_config_key(monkeypatch, tmp_path):
    (tmp_path / "torch_fl.toml").write_text('devcie = "acc0"\n')
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="Did you mean 'device'"):
        torch_fl.device()


def test_acc9_on_a_one_device_machine():
    with pytest.raises(DeviceNotFoundError) as info:
        torch_fl.device("acc9")
    text = str(info.value)
    assert "device 'acc9' does not exist" in text
    assert "acc0 -> cpu" in text and "Did you mean 'acc0'?" in text and "FL_DEVICE_MAP" in text
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("bad", ["acx0", "gpu:0"])
def test_misspelled_ids_suggest_acc0(bad):
    with pytest.raises(DeviceNotFoundError) as info:
        torch_fl.device(bad)
    text = str(info.value)
    assert f"device '{bad}' is neither a virtual id" in text
    assert "acc0 -> cpu" in text and "Did you mean 'acc0'?" in text


def test_bad_fl_device_names_its_source(monkeypatch):
    monkeypatch.setenv("FL_DEVICE", "acc3")
    with pytest.raises(DeviceNotFoundError, match=r"'acc3' \(from FL_DEVICE\)"):
        torch_fl.device()


def test_emulated_device_is_a_device_of_its_own_and_checks_the_name():
    assert torch_fl.device("emu:cuda") == torch.device("emu", 0)
    assert torch_fl.device("emu:0") == torch.device("emu", 0)
    with pytest.raises(LookupError, match="Did you mean 'cuda'"):
        torch_fl.device("emu:cdua")


def test_emulated_virtual_ids(monkeypatch):
    from torch_fl.device import resolve_spec

    monkeypatch.setenv("FL_DEVICE", "emu:mps")
    monkeypatch.setenv("FL_EMU_DEVICES", "2")
    resolved = resolve_spec("acc1")
    assert resolved.device == torch.device("emu", 1) and resolved.emulated
    assert resolved.description.name == "mps" and resolved.source == "emulation"
    assert torch_fl.description().name == "mps"


def test_tensors_are_plain_native_tensors():
    x = torch.ones(3, device=torch_fl.device())
    assert type(x) is torch.Tensor and x.device.type == "cpu"


def test_import_device_module_is_the_module_and_still_callable():
    import types

    import torch_fl.device as d
    from torch_fl.device import resolve

    assert isinstance(d, types.ModuleType) and d is torch_fl.device
    assert d() == resolve() == torch.fl.device("acc0")
    assert d.resolve_spec("acc0").device == torch.device("cpu")


@pytest.mark.parametrize(("spec", "device", "description", "emulated", "source"), [
    ("acc0", "cpu", "cpu", False, "auto-detected"),
    ("cuda:1", "cuda:1", "cuda", False, "physical name"),
    ("emu:minimal", None, "minimal", True, "emulation"),
    (" emu:mps ", None, "mps", True, "emulation"),
])
def test_resolve_spec_is_one_pure_immutable_object(spec, device, description, emulated, source):
    from torch_fl.device import resolve_spec

    resolved = resolve_spec(spec)
    assert resolved.description.name == description and resolved.emulated is emulated
    assert resolved.source == source and resolved.origin == "argument"
    if device is not None:
        assert resolved.device == torch.device(device)
    with pytest.raises(AttributeError):
        resolved.spec = "acc1"  # frozen
    assert torch_fl.routing.active() is None  # resolving activates nothing


def test_resolve_spec_names_where_the_spec_and_the_map_came_from(monkeypatch):
    from torch_fl.device import resolve_spec

    monkeypatch.setenv("FL_DEVICE_MAP", "acc0=cpu,acc1=meta")
    monkeypatch.setenv("FL_DEVICE", "acc1")
    resolved = resolve_spec()
    assert (resolved.spec, resolved.device, resolved.origin, resolved.source) == \
        ("acc1", torch.device("meta"), "FL_DEVICE", "FL_DEVICE_MAP")


def test_a_description_names_the_device_it_governs(tmp_path):
    from torch_fl.device import governing, resolve_spec

    chip = tmp_path / "chip.toml"
    builtin = Path(torch_fl.description("cpu").path).read_text()
    chip.write_text(builtin.replace('name = "cpu"', 'name = "mychip"'))
    resolved = resolve_spec(str(chip))
    assert resolved.device == torch.device("cpu") and resolved.description.name == "mychip"
    assert governing("mps").name == "mps"          # a description, though this machine has no MPS
    with pytest.raises(DeviceNotFoundError, match=r"describes a 'npu' chip.*use 'emu:npu'"):
        resolve_spec("npu")


def test_resolving_is_pure_and_torch_fl_device_is_what_activates():
    # issue 32: the device layer resolves; the runtime object (routing/current.py) acts
    from torch_fl.device import resolve, resolve_spec
    from torch_fl.routing.current import runtime

    assert resolve("acc0") == resolve_spec().device == torch.device("cpu")
    assert torch_fl.devices() == [torch.device("cpu")] and torch_fl.description().name == "cpu"
    assert torch_fl.routing.active() is None and not runtime.activated  # nothing above activated
    assert torch_fl.device() == torch.device("cpu")
    assert torch_fl.routing.active().description.name == "cpu" and runtime.activated
    torch_fl.reset()
    assert torch_fl.routing.active() is None and not runtime.activated


def test_the_device_layer_imports_nothing_of_routing_not_even_inside_a_function():
    import ast

    source = Path(torch_fl.device.__file__).read_text(encoding="utf-8")
    names = [n.module or "" for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ImportFrom)]
    names += [a.name for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Import) for a in n.names]
    assert not [n for n in names if "routing" in n], names


def test_the_device_layer_without_its_emulator_port_says_so(monkeypatch):
    import torch_fl.device as d
    from torch_fl._state import process

    monkeypatch.setattr(process, "emulator", None)
    with pytest.raises(torch_fl.TorchFLError, match="emulator port is not set"):
        d.emulated_devices(create=True)
