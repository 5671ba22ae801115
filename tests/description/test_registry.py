"""Discovery: built-ins, entry points (a really installed vendor package), FL_DESCRIPTION_PATH,
FL_DESCRIPTION, and the order in which they override each other."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import torch_fl
from torch_fl.description import registry
from torch_fl.errors import DescriptionError, UnknownDescriptionError

FAKE_VENDOR = Path(__file__).parents[1] / "fixtures" / "fake_vendor"
CHIP = """\
schema = 1
name = "{name}"
vendor = "{vendor}"
device_type = "privateuseone"
dispatch_key = "PrivateUse1"
"""


def test_builtins_are_found():
    assert {"cpu", "cuda", "rocm", "mps", "xpu", "npu", "mlu", "musa"} <= set(torch_fl.descriptions())


def test_search_path_then_explicit_file_override(tmp_path, monkeypatch):
    folder = tmp_path / "descs"
    folder.mkdir()
    (folder / "a.toml").write_text(CHIP.format(name="chip-a", vendor="from path"))
    explicit = tmp_path / "explicit.toml"
    explicit.write_text(CHIP.format(name="chip-a", vendor="from FL_DESCRIPTION"))
    monkeypatch.setenv("FL_DESCRIPTION_PATH", str(folder))
    registry.reload()
    assert registry.get("chip-a").vendor == "from path"
    monkeypatch.setenv("FL_DESCRIPTION", str(explicit))
    registry.reload()
    assert registry.get("chip-a").vendor == "from FL_DESCRIPTION"


def test_missing_explicit_file_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setenv("FL_DESCRIPTION", str(tmp_path / "nope.toml"))
    registry.reload()
    with pytest.raises(DescriptionError, match="FL_DESCRIPTION names a description file that does not exist"):
        registry.descriptions()


def test_unknown_name_did_you_mean():
    with pytest.raises(UnknownDescriptionError) as info:
        registry.get("cdua")
    assert "Did you mean 'cuda'?" in str(info.value) and "FL_DESCRIPTION" in str(info.value)


@pytest.fixture(scope="module")
def installed_fake_vendor(tmp_path_factory):
    """pip-installs tests/fixtures/fake_vendor into a private target directory (like vLLM's plugin tests)."""
    target = tmp_path_factory.mktemp("site")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--target", str(target), str(FAKE_VENDOR)], check=True, capture_output=True)
    return target


def run_with_vendor(site: Path, code: str, **env: str) -> dict:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FL_")}
    clean["PYTHONPATH"] = os.pathsep.join([str(site), clean.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-c", code], env={**clean, **env}, check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout)


def test_entry_point_vendor_is_discovered_and_detected(installed_fake_vendor):
    result = run_with_vendor(installed_fake_vendor, """
import json, torch_fl
d = torch_fl.description("fakechip")
print(json.dumps({"vendor": d.vendor, "backend": torch_fl.backend().description.name,
                  "source": torch_fl.backend().source, "devices": [str(x) for x in torch_fl.devices()],
                  "native": sorted(d.native_ops())}))
""")
    assert result["vendor"] == "Fake Silicon"
    # priority 70 beats every built-in, and its probe module reports two devices
    assert result["backend"] == "fakechip" and result["source"] == "auto-detected"
    assert result["devices"] == ["privateuseone:0", "privateuseone:1"]
    assert result["native"] == ["aten::add.Tensor", "aten::mm.default"]


@pytest.mark.slow
def test_backend_override_beats_detection(installed_fake_vendor):
    result = run_with_vendor(installed_fake_vendor, """
import json, torch_fl
print(json.dumps({"backend": torch_fl.backend().description.name, "source": torch_fl.backend().source,
                  "devices": [str(x) for x in torch_fl.devices()]}))
""", FL_BACKEND="cpu")
    assert result == {"backend": "cpu", "source": "FL_BACKEND", "devices": ["cpu"]}
