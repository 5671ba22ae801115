"""`torchfl env lock | check | diff` (analysis/envlock.py): a lock of the versions that matter, and every node
checked against it, naming the node, the component and the fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from torch_fl.analysis import envlock
from torch_fl.cli import main


def _lock(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str = "a.lock") -> Path:
    path = tmp_path / name
    assert main(["env", "lock", "-o", str(path)]) == 0
    assert f"wrote {path}" in capsys.readouterr().out
    return path


def _edit(path: Path, node: str, **components: str | None) -> Path:
    data = json.loads(path.read_text())
    data["node"] = node
    for key, value in components.items():
        key = key.replace("__", ".")
        if value is None:
            data["components"].pop(key, None)
        else:
            data["components"][key] = value
    out = path.with_name(f"{node}.lock")
    out.write_text(json.dumps(data))
    return out


def test_the_lock_holds_what_matters(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = json.loads(_lock(tmp_path, capsys).read_text())
    found = data["components"]
    assert found["torch"] == torch.__version__ and found["python.abi"].startswith("cpython-")
    assert found["torch_fl"] and found["glibc"] and "description.npu" in found and "description.cpu" in found
    assert len(found["description.npu"]) == 64
    assert data["schema"] == 1 and data["node"]


def test_check_against_its_own_lock_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _lock(tmp_path, capsys)
    assert main(["env", "check", str(path)]) == 0
    assert "matches the lock" in capsys.readouterr().out


def test_check_names_node_component_and_fix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = _edit(_lock(tmp_path, capsys), "node7", torch="2.5.1+cpu", plugin__torch_npu="2.5.1.post1",
                  description__npu="0" * 64)
    assert main(["env", "check", str(other)]) == 1
    out = capsys.readouterr().out
    here = envlock.snapshot()["node"]
    assert f"node {here}: 3 components differ from the lock {other} (written on node7" in out
    assert (f"torch: {torch.__version__} on {here}, 2.5.1+cpu in the lock. Fix: pip install 'torch==2.5.1+cpu' "
            f"--index-url https://download.pytorch.org/whl/cpu") in out
    assert "plugin.torch_npu: absent on" in out and "pip install 'torch-npu==2.5.1.post1'" in out
    assert "description.npu:" in out and "`torchfl describe npu`" in out


def test_check_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = _edit(_lock(tmp_path, capsys), "node2", python="3.10.14")
    assert main(["env", "check", str(other), "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["same"] is False
    assert data["differences"] == [{"component": "python", "locked": "3.10.14", "here": envlock.snapshot()[
        "components"]["python"], "fix": "use Python 3.10.14 (the same minor release) in this node's environment"}]


def test_diff_names_each_node(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first = _lock(tmp_path, capsys)
    same = _edit(first, "node1")
    drift = _edit(first, "node2", package__numpy="1.26.4")
    assert main(["env", "diff", str(first), str(same), str(drift)]) == 1
    out = capsys.readouterr().out
    assert f"node node1 ({same}): same as" in out
    assert f"node node2 ({drift}): 1 component differs from" in out
    assert "package.numpy: 1.26.4 on node2" in out and "pip install 'numpy==" in out


def test_a_file_that_is_not_a_lock(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.lock"
    bad.write_text('{"hello": 1}')
    assert main(["env", "check", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "not a torchfl env lock" in err and f"torchfl env lock -o {bad}" in err
    assert main(["env", "check", str(tmp_path / "missing.lock")]) == 2


# One process's facts, as preflight compares them across ranks ------------------------------------
def test_lock_facts_are_the_lock_components_without_node_or_time() -> None:
    facts = envlock.lock_facts()
    assert facts == envlock.snapshot()["components"]
    assert json.loads(json.dumps(facts)) == facts and all(isinstance(v, str) for v in facts.values())
    assert envlock.compare_facts(facts, dict(facts)) == []


def test_compare_facts_names_driver_and_toolkit_fixes() -> None:
    here = envlock.lock_facts()
    other = {**here, "driver.nvidia": "550.54.15", "toolkit.CANN": "8.0.RC3"}
    found = {d.component: d for d in envlock.compare_facts(other, here)}
    assert found["driver.nvidia"].fix().startswith("install the nvidia driver 550.54.15 the lock's node has")
    assert "not pip" in found["driver.nvidia"].fix()
    assert found["toolkit.CANN"].fix().startswith("install CANN 8.0.RC3 as on the lock's node")


def test_the_lock_records_an_installed_vendor_toolkit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    info = tmp_path / "latest" / "x86_64-linux" / "ascend_toolkit_install.info"
    info.parent.mkdir(parents=True)
    info.write_text("package_name=Ascend-cann-toolkit\nversion=8.0.RC3\narch=x86_64\n")
    monkeypatch.delenv("ASCEND_HOME_PATH", raising=False)
    monkeypatch.setenv("ASCEND_TOOLKIT_HOME", str(tmp_path / "latest"))
    assert envlock.lock_facts()["toolkit.CANN"] == "8.0.RC3"
