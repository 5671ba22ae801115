"""Every fingerprint component changes the fingerprint, and only that component differs."""

from __future__ import annotations

import os
import platform
import sysconfig
from pathlib import Path

import pytest
import torch

import torch_fl
from torch_fl import _version, plugins
from torch_fl.compiler import fingerprint as fp_module
from torch_fl.compiler.fingerprint import COMPONENTS, digest, fingerprint
from torch_fl.description import registry
from torch_fl.description.loader import parse

DOCS = Path(__file__).parents[2] / "docs" / "compile.md"


def _fake_compiler(tmp_path: Path) -> str:
    script = tmp_path / "fakecc"
    script.write_text("#!/bin/sh\necho 'fakecc (torch-fl test) 99.1'\n")
    script.chmod(0o755)
    return str(script)


def _fake_triton(name: str) -> str:
    if name == "triton":
        return "9.9.9"
    raise fp_module.metadata.PackageNotFoundError(name)


# component -> (description name, change(monkeypatch, tmp_path) -> description or None)
CHANGES = {
    "torch": lambda mp, tmp: mp.setattr(torch, "__version__", "2.99.0"),
    "torch_git": lambda mp, tmp: mp.setattr(torch.version, "git_version", "0123456789abcdef"),
    "python": lambda mp, tmp: mp.setattr(platform, "python_version", lambda: "3.99.0"),
    "python_abi": lambda mp, tmp: mp.setattr(
        sysconfig, "get_config_var",
        lambda name, real=sysconfig.get_config_var: "cpython-399t-x86_64-linux-gnu" if name == "SOABI"
        else real(name)),
    "torch_fl": lambda mp, tmp: mp.setattr(_version, "__version__", "99.0.0"),
    "description": lambda mp, tmp: parse(Path(registry.get("cpu").path).read_text() + "\n# edited\n",
                                         "edited.toml"),
    "plugin": lambda mp, tmp: mp.setattr(plugins, "plugin_version", lambda desc: "2.0.0"),
    "runtime": lambda mp, tmp: mp.setattr(torch.version, "cuda", "99.9"),
    "cxx": lambda mp, tmp: mp.setenv("CXX", _fake_compiler(tmp)),
    "triton": lambda mp, tmp: mp.setattr(fp_module.metadata, "version", _fake_triton),
}


def _description(component: str, tmp_path: Path):
    if component == "plugin":  # the cpu description has no plugin: give it one
        text = Path(registry.get("cpu").path).read_text().replace('plugin = ""', 'plugin = "fake_plugin"')
        return parse(text, str(tmp_path / "plugged.toml"))
    if component == "runtime":
        return registry.get("cuda")  # its runtime is torch.version.cuda
    return registry.get("cpu")


def test_every_component_is_tested_and_documented():
    assert set(CHANGES) == set(COMPONENTS)
    text = DOCS.read_text()
    for name in COMPONENTS:
        assert f"`{name}`" in text, name


@pytest.mark.parametrize("component", list(COMPONENTS))
def test_each_component_changes_the_fingerprint(component, monkeypatch, tmp_path):
    desc = _description(component, tmp_path)
    if component == "plugin":
        monkeypatch.setattr(plugins, "plugin_version", lambda d: "1.0.0")
    before = fingerprint(desc)
    changed = CHANGES[component](monkeypatch, tmp_path)
    after = fingerprint(changed if changed is not None else desc)
    assert after.digest != before.digest
    assert list(after.diff(before)) == [component]
    assert after.entry_name != before.entry_name


def test_digest_ignores_key_order_and_names_the_entry():
    fp = fingerprint(registry.get("cpu"))
    assert digest(dict(reversed(list(fp.components.items())))) == fp.digest
    assert fp.entry_name == f"cpu-{fp.digest}" and len(fp.digest) == 16


def test_components_describe_this_stack():
    components = fingerprint(registry.get("cpu")).components
    assert list(components) == list(COMPONENTS)
    assert components["torch"] == torch.__version__
    assert components["torch_fl"] == torch_fl.__version__
    assert components["description"] == f"cpu sha256:{registry.get('cpu').sha256}"
    assert components["plugin"] == "none" and components["runtime"] == "none"  # CPU build, no plugin


def test_compiler_version_is_asked_once_per_compiler(monkeypatch, tmp_path):
    calls = []
    real = fp_module.subprocess.run
    monkeypatch.setattr(fp_module.subprocess, "run", lambda *a, **k: calls.append(a) or real(*a, **k))
    monkeypatch.setenv("CXX", _fake_compiler(tmp_path))
    for _ in range(3):
        assert fingerprint(registry.get("cpu")).components["cxx"] == "fakecc (torch-fl test) 99.1"
    assert len(calls) == 1
    monkeypatch.setenv("CXX", os.fspath(tmp_path / "no-such-compiler"))
    assert fingerprint(registry.get("cpu")).components["cxx"].endswith("not found")
