"""The vendor toolkit installed beside a plugin (CANN, CNToolkit, MUSA SDK: analysis/installed.py), found in
fake install trees under tmp_path through the recipes of the generated facts, and compared with the facts of
the installed plugin release (analysis/compat.py installed_check, and `torchfl doctor`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from torch_fl.analysis import compat, installed
from torch_fl.analysis.installed import Toolkit

# the file as the CANN toolkit installer writes it (version, innerversion, arch, path: key=value lines)
CANN_INFO = ("package_name=Ascend-cann-toolkit\nversion={version}\ninnerversion=V100R001C19SPC001B105\n"
             "compatible_version=[V100R001C15],[V100R001C18],[V100R001C19]\narch=x86_64\nos=linux\n"
             "path=/usr/local/Ascend/ascend-toolkit/{version}/x86_64-linux\n")
ASCEND_VARS = ("ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH")


def _cann(root: Path, version: str) -> Path:
    info = root / "x86_64-linux" / "ascend_toolkit_install.info"
    info.parent.mkdir(parents=True)
    info.write_text(CANN_INFO.format(version=version))
    return root


def _recipe(chip: str) -> dict:
    return compat.facts_of_chip(chip)["installed"]


# Finding the toolkit ------------------------------------------------------------------------------
def test_cann_found_through_its_environment_variables(tmp_path: Path) -> None:
    root = _cann(tmp_path / "ascend-toolkit" / "latest", "8.0.RC3")
    found = installed.toolkit(_recipe("npu"), {"ASCEND_TOOLKIT_HOME": str(root)}, default_roots=False)
    assert found == Toolkit("CANN", "8.0.RC3", str(root / "x86_64-linux" / "ascend_toolkit_install.info"),
                            "ASCEND_TOOLKIT_HOME")
    # ASCEND_HOME_PATH (set_env.sh of newer CANN) when ASCEND_TOOLKIT_HOME is unset; the version.info layout
    newer = tmp_path / "cann"
    newer.mkdir()
    (newer / "version.info").write_text("Version=9.1.0\n")
    found = installed.toolkit(_recipe("npu"), {"ASCEND_HOME_PATH": str(newer)}, default_roots=False)
    assert (found.version, found.root_from) == ("9.1.0", "ASCEND_HOME_PATH")


def test_cntoolkit_and_musa_version_files(tmp_path: Path) -> None:
    neuware = tmp_path / "neuware"
    neuware.mkdir()
    (neuware / "version.txt").write_text("Neuware Version 3.9.0\n")
    assert installed.toolkit(_recipe("mlu"), {"NEUWARE_HOME": str(neuware)}, default_roots=False).version == "3.9.0"
    musa = tmp_path / "musa"
    musa.mkdir()
    (musa / "version.json").write_text('{"version": "4.1.0", "gitbranch": "HEAD"}')
    assert installed.toolkit(_recipe("musa"), {"MUSA_HOME": str(musa)}, default_roots=False).version == "4.1.0"


def test_no_toolkit_or_an_unreadable_one_is_none(tmp_path: Path) -> None:
    assert installed.toolkit(_recipe("npu"), {}, default_roots=False) is None
    empty = tmp_path / "empty"
    (empty / "x86_64-linux").mkdir(parents=True)
    (empty / "x86_64-linux" / "ascend_toolkit_install.info").write_text("package_name=Ascend-cann-toolkit\n")
    assert installed.toolkit(_recipe("npu"), {"ASCEND_TOOLKIT_HOME": str(empty)}, default_roots=False) is None
    assert installed.parse_version_file('musa_toolkits:{"version":"4.3.0","gittag":"Notag"}') == "4.3.0"


# Against the plugin's facts -----------------------------------------------------------------------
@pytest.fixture
def ascend_env(monkeypatch: pytest.MonkeyPatch):
    for var in ASCEND_VARS:
        monkeypatch.delenv(var, raising=False)
    if any(Path(root).exists() for root in _recipe("npu")["roots"]):
        pytest.skip("a real CANN install is present on this machine")
    return monkeypatch


def test_installed_cann_against_the_release_facts(tmp_path: Path, ascend_env: pytest.MonkeyPatch) -> None:
    ascend_env.setenv("ASCEND_TOOLKIT_HOME", str(_cann(tmp_path / "ok", "8.0.RC3")))
    same = compat.installed_check("torch_npu", "2.1.0.post8", "")
    assert same["toolkit"]["version"] == "8.0.RC3" and same["runtime"] == "8.0.RC3"
    assert not any("CANN" in c for c in same["cautions"])
    ascend_env.setenv("ASCEND_TOOLKIT_HOME", str(_cann(tmp_path / "other", "8.1.RC1")))
    other = compat.installed_check("torch_npu", "2.1.0.post8", "")
    assert "torch_npu 2.1.0.post8 was released for CANN 8.0.RC3, and CANN 8.1.RC1 is installed" in other["cautions"]


def test_no_cann_found_says_where_it_looked(ascend_env: pytest.MonkeyPatch) -> None:
    found = compat.installed_check("torch_npu", "2.5.1.post1", "")
    assert found["toolkit"] is None
    assert any(c.startswith("no CANN installation was found (looked in $ASCEND_TOOLKIT_HOME, $ASCEND_HOME_PATH, "
                            "/usr/local/Ascend/ascend-toolkit/latest") and "so whether CANN 8.2.RC1 (torch_npu "
                            "2.5.1.post1 was released for it) is installed is unchecked; set ASCEND_TOOLKIT_HOME" in c
               for c in found["cautions"])


def test_doctor_reports_the_installed_cann(tmp_path: Path, doctor_beside_torch_npu) -> None:
    """A fake torch_npu 2.5.1.post1 (released for CANN 8.2.RC1) next to a fake CANN 8.1.RC1 tree."""
    root = _cann(tmp_path / "Ascend" / "ascend-toolkit" / "latest", "8.1.RC1")
    proc, data = doctor_beside_torch_npu({**{k: v for k, v in os.environ.items() if k not in ASCEND_VARS},
                                          "ASCEND_TOOLKIT_HOME": str(root)})
    assert data["release_compat"]["toolkit"]["version"] == "8.1.RC1", proc.stdout + proc.stderr
    assert ("torch_npu 2.5.1.post1 was released for CANN 8.2.RC1, and CANN 8.1.RC1 is installed"
            in data["release_compat"]["cautions"])
    assert "CANN 8.1.RC1 is installed" in proc.stdout
