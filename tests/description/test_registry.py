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


# Equal detect priorities (issue 31): auto-detection would decide between two descriptions by name.
def test_equal_priorities_of_one_device_type_are_an_error_naming_both(tmp_path, monkeypatch):
    folder = tmp_path / "descs"
    folder.mkdir()
    (folder / "a.toml").write_text(CHIP.format(name="chip-a", vendor="x") + "\n[detect]\npriority = 20\n")
    (folder / "b.toml").write_text(CHIP.format(name="chip-b", vendor="x") + "\n[detect]\npriority = 20\n")
    monkeypatch.setenv("FL_DESCRIPTION_PATH", str(folder))
    registry.reload()
    with pytest.raises(DescriptionError) as info:
        registry.descriptions()
    text = str(info.value)
    assert text.startswith(f"{folder / 'a.toml'}:8: [detect.priority] 20 is also the detect.priority of 'chip-b' "
                           f"({folder / 'b.toml'})")
    assert "the same device type 'privateuseone'" in text and "between 'chip-a' and 'chip-b' by their names" in text
    assert "Priorities of 'privateuseone': 20 chip-a, 20 chip-b" in text and "(e.g. 19;" in text
    (folder / "b.toml").write_text(CHIP.format(name="chip-b", vendor="x") + "\n[detect]\npriority = 19\n")
    registry.reload()
    assert {"chip-a", "chip-b"} <= set(registry.descriptions())


USER_CHIP = 'schema = 1\nname = "{name}"\ndevice_type = "{type}"\ndispatch_key = "{key}"\n[detect]\npriority = {priority}\n'


@pytest.mark.parametrize(("text", "says"), [
    pytest.param(USER_CHIP.format(name="mynpu", type="npu", key="PrivateUse1", priority=60),
                 [r"mine\.toml:6: \[detect\.priority\] 60 is also the detect\.priority of 'npu' \(.*builtin/npu\.toml\)",
                  "60 npu, 60 mynpu, 59 npu-910, 58 npu-a3, 57 npu-310p"], id="ties-with-a-builtin"),
    pytest.param(USER_CHIP.format(name="gleu-chip", type="cpu", key="CPU", priority=-1)
                 + '[ops]\nfallback = ["aten::gleu"]\n',
                 [r"mine\.toml:8: \[ops.fallback\] 'aten::gleu' is not an aten operator of this torch\. "
                  r"Did you mean 'aten::gelu'\?"], id="unknown-op"),
])
def test_a_user_file_is_refused_when_it_loads_at_its_line(tmp_path, monkeypatch, text, says):
    """Refused when the file loads (file, line, key, and the fix), not only when its routes are activated."""
    mine = tmp_path / "mine.toml"
    mine.write_text(text)
    monkeypatch.setenv("FL_DESCRIPTION", str(mine))
    registry.reload()
    with pytest.raises(DescriptionError, match=says[0]) as info:
        registry.descriptions()
    assert all(more in str(info.value) for more in says[1:]), str(info.value)


def test_builtins_have_one_priority_per_device_type():
    # npu, mlu and musa share 60 but are different device types (each plugin is probed); cuda and rocm
    # share 50 and 'cuda', but a torch is either a CUDA or a HIP build; the npu generations extend npu
    # below it, each at its own priority
    by_type: dict[tuple[str, str], list[str]] = {}
    for desc in registry.descriptions().values():
        detect = desc.section("detect")
        if detect["priority"] >= 0:
            by_type.setdefault((desc.device_type, detect["torch_build"]), []).append(detect["priority"])
    assert all(len(p) == len(set(p)) for p in by_type.values()), by_type
    assert [registry.get(n).section("detect")["priority"] for n in ("npu", "npu-910", "npu-a3", "npu-310p")] == \
        [60, 59, 58, 57]


def test_negative_priorities_and_other_builds_do_not_tie(tmp_path, monkeypatch):
    folder = tmp_path / "descs"
    folder.mkdir()
    (folder / "emu.toml").write_text('schema = 1\nname = "emu-only"\ndevice_type = "cpu"\ndispatch_key = "CPU"\n'
                                     "[detect]\npriority = -1\n")  # minimal.toml has -1 on cpu too
    (folder / "hip.toml").write_text('schema = 1\nname = "myhip"\ndevice_type = "cuda"\ndispatch_key = "CUDA"\n'
                                     '[detect]\npriority = 50\ntorch_build = "hip"\n')  # cuda's 50 is a CUDA build
    monkeypatch.setenv("FL_DESCRIPTION_PATH", str(folder))
    registry.reload()
    with pytest.raises(DescriptionError, match=r"50 is also the detect\.priority of 'rocm'"):
        registry.descriptions()
    (folder / "hip.toml").unlink()
    registry.reload()
    assert "emu-only" in registry.descriptions()


def test_describe_as_gives_the_copy_a_free_priority(tmp_path, monkeypatch, capsys):
    from torch_fl.cli import main

    assert main(["describe", "npu", "--as", "ascend-mine", "-o", str(tmp_path / "mine.toml")]) == 0
    text = (tmp_path / "mine.toml").read_text()
    assert "\npriority = 56\n" in text  # 60..57 are npu's and its generations'
    monkeypatch.setenv("FL_DESCRIPTION", str(tmp_path / "mine.toml"))
    registry.reload()
    assert registry.get("ascend-mine").section("detect")["priority"] == 56
