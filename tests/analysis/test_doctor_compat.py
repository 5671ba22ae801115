"""The vendors' per-release compatibility facts (description/compat/*.json, scripts/gen_compat.py), the check
of an installed set against them (analysis/compat.py), and `torchfl doctor` printing the pip command."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from torch_fl.analysis import compat
from torch_fl.analysis.compat import check

REPO = Path(__file__).resolve().parents[2]
FACTS = REPO / "src" / "torch_fl" / "description" / "compat"
MIRROR = Path("/work/.mirror")


def _generator():
    spec = importlib.util.spec_from_file_location("gen_compat", REPO / "scripts" / "gen_compat.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _npu() -> dict:
    return json.loads((FACTS / "npu.json").read_text())


# The facts ----------------------------------------------------------------------------------------
def test_every_file_names_its_generator_and_sources() -> None:
    for path in FACTS.glob("*.json"):
        data = json.loads(path.read_text())
        assert data["generated_by"].startswith("scripts/gen_compat.py --chip "), path
        assert data["sources"] and data["releases"], path
        for source in data["sources"]:
            assert source.get("commit") or source.get("url"), source
        for row in data["releases"]:
            if data.get("kind") == "torch-build":  # torch's own builds: a release and the runtimes built for it
                assert row["torch"][0].isdigit() and row["variants"] is not None, row
            else:
                assert row["plugin"] and row["torch"].startswith("=="), row
            assert isinstance(row["decisions"], list)


def test_npu_covers_every_final_release_from_2_1_0_post8() -> None:
    versions = [r["plugin"] for r in _npu()["releases"]]
    assert versions[0] == "2.1.0.post8" and versions[-1] == "2.14.0" and len(versions) == 50
    assert not any("rc" in v for v in versions)
    table = next(s for s in _npu()["sources"] if s["id"] == "table")
    assert table["repo"] == "Ascend/pytorch" and len(table["commit"]) == 40 and table["path"] == "COMPATIBILITY.en.md"


def test_npu_facts_follow_the_wheels_metadata() -> None:
    """The real METADATA of every torch-npu wheel (kept per release: its file, sha256 and fields) decides
    torch and Python; the repository's table decides CANN; a disagreement is recorded with the winner."""
    for row in _npu()["releases"]:
        wheel = row["sources"]["pypi"]
        assert wheel["metadata_of"].startswith(f"torch_npu-{row['plugin']}-") and "sha256:" in wheel["metadata_of"]
        if wheel["requires_torch"]:
            assert row["torch"] == wheel["requires_torch"], row["plugin"]
        else:
            assert any(d.startswith("torch: the wheel pins no torch") for d in row["decisions"])
        assert row["python"] == wheel["wheel_pythons"]
        if wheel["classifier_pythons"] != row["python"]:
            assert any("classifiers list" in d and "the wheels won" in d for d in row["decisions"]), row["plugin"]
        if row["sources"]["table"]:
            assert row["runtime"] == row["sources"]["table"]["cann"]
        elif not row["runtime"]:
            assert any("CANN version is unknown" in d for d in row["decisions"])


def test_npu_known_facts() -> None:
    rows = {r["plugin"]: r for r in _npu()["releases"]}
    assert rows["2.5.1.post1"]["torch"] == "==2.5.1+cpu" and rows["2.5.1.post1"]["runtime"] == "8.2.RC1"
    assert rows["2.5.1.post1"]["python"] == ["3.9", "3.10", "3.11"]
    assert rows["2.1.0.post8"]["runtime"] == "8.0.RC3"
    assert rows["2.14.0"]["torch"] == "==2.14.0.*"
    assert "x86_64 glibc>=2.28" in rows["2.7.1"]["platforms"] and "x86_64 glibc>=2.17" in rows["2.6.0"]["platforms"]
    # the wheel's README copy says 'CANN 26.0.0': the Ascend release of its branch, which the table maps to 9.0.0
    assert rows["2.9.1"]["runtime"] == "9.0.0"
    assert any("the README cell names the release, not CANN" in d for d in rows["2.9.1"]["decisions"])


def test_mlu_and_musa_facts() -> None:
    mlu = {r["plugin"]: r for r in compat.facts("torch_mlu")["releases"]}
    assert mlu["1.22.2+torch2.4.0"]["torch"] == "==2.4.0" and mlu["1.22.2+torch2.4.0"]["runtime"] == "3.13.5"
    assert mlu["1.22.2+torch2.4.0"]["driver"] == "6.2.0"
    musa = compat.releases("torch_musa", "2.0.0")
    assert sorted(r["torch"] for r in musa) == ["==2.2.0", "==2.5.0"]  # v2.0.0 and v2.0.0-pt25
    assert compat.releases("torch_musa", "2.7.1")[0]["torch"] == "==2.7.1"


# The generator's parsers --------------------------------------------------------------------------
def test_readme_tables_in_both_layouts() -> None:
    gen = _generator()
    old = ("| CANN Version | Supported PyTorch Version | Supported Extension Version | Github Branch |\n"
           "|---|---|---|---|\n| CANN 8.2.RC1 | 2.6.0 | 2.6.0 | v2.6.0-7.1.0 |\n|  | 2.5.1 | 2.5.1.post1 | v2.5.1-7.1.0 |\n")
    new = ("| TorchNPU installation package version | GitCode Branch | PyTorch Version | CANN version |\n"
           "|:-:|:-:|:-:|:-:|\n| 2.12.0 | v2.12.0-26.1.0 | 2.12.0 | CANN 9.1.0 |\n")
    assert gen.readme_cann(old) == {"2.6.0": ["8.2.RC1", "v2.6.0-7.1.0"], "2.5.1.post1": ["8.2.RC1", "v2.5.1-7.1.0"]}
    assert gen.readme_cann(new) == {"2.12.0": ["9.1.0", "v2.12.0-26.1.0"]}
    assert gen.version_key("2.1.0.post10") > gen.version_key("2.1.0.post8") > gen.version_key("2.1.0")
    assert gen._platform("manylinux_2_17_x86_64.manylinux2014_x86_64") == "x86_64 glibc>=2.17"
    assert gen._platform("manylinux2014_aarch64") == "aarch64 glibc>=2.17"


@pytest.mark.skipif(not (MIRROR / "Cambricon+torch_mlu" / "repo").is_dir(), reason="needs the torch_mlu clone")
def test_mlu_and_musa_regenerate_from_their_clones(tmp_path: Path) -> None:
    repos = ["--repo", f"Cambricon/torch_mlu={MIRROR / 'Cambricon+torch_mlu' / 'repo'}",
             "--repo", f"MooreThreads/torch_musa={MIRROR / 'MooreThreads+torch_musa' / 'repo'}"]
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "gen_compat.py"), "--verify", "--chip", "mlu",
                           "--chip", "musa", *repos], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# The check ----------------------------------------------------------------------------------------
def test_a_matching_set_passes() -> None:
    result = check("torch_npu", "2.5.1.post1", torch="2.5.1", python="3.11")
    assert result.ok and result.known and result.problem() == ""


def test_a_torch_mismatch_prints_both_fixes() -> None:
    result = check("torch_npu", "2.5.1.post1", torch="2.6.0", python="3.11")
    assert not result.ok
    assert result.mismatches == ["torch_npu 2.5.1.post1 needs torch ==2.5.1+cpu, and torch 2.6.0 is installed"]
    assert result.fixes[0] == "pip install 'torch-npu==2.6.0.post5'"  # the newest release for torch 2.6
    assert result.fixes[1].startswith("pip install 'torch==2.5.1+cpu' --index-url https://download.pytorch.org/whl/cpu")
    assert "Why:" in result.problem() and "Fix: `pip install 'torch-npu==2.6.0.post5'`" in result.problem()


def test_a_python_without_wheels() -> None:
    result = check("torch_npu", "2.5.1", torch="2.5.1", python="3.12")
    assert result.mismatches == ["torch_npu 2.5.1 has wheels for Python 3.9, 3.10, 3.11, and this is Python 3.12"]
    assert result.fixes[0] == "pip install 'torch==2.14.0' 'torch-npu==2.14.0'"
    assert result.fixes[1].startswith("python3.11 -m venv env && env/bin/pip install 'torch==2.5.1+cpu' 'torch-npu==2.5.1'")


def test_unknown_release_and_unknown_plugin() -> None:
    result = check("torch_npu", "9.9.9", torch="2.13.0", python="3.11")
    assert result.ok and not result.known and "not in torch-fl's release facts" in result.cautions[0]
    assert check("torch_xyz", "1.0", torch="2.13.0", python="3.11").facts_path == ""


def test_runtime_versions_compare_case_blind() -> None:
    assert check("torch_npu", "2.1.0.post8", torch="2.1.0", python="3.10", runtime="8.0.rc3").cautions == []
    result = check("torch_npu", "2.1.0.post8", torch="2.1.0", python="3.10", runtime="8.1.RC1")
    assert result.ok and "released for CANN 8.0.RC3, and CANN 8.1.RC1 is installed" in result.cautions[0]


# doctor -------------------------------------------------------------------------------------------
def test_doctor_prints_the_pip_command(doctor_beside_torch_npu) -> None:
    proc, data = doctor_beside_torch_npu(dict(os.environ))
    assert proc.returncode == 1
    found = data["release_compat"]
    import torch

    assert found["known"] and not found["ok"] and found["expected"]["torch"] == "==2.5.1+cpu"
    assert any("torch_npu 2.5.1.post1 needs torch ==2.5.1+cpu" in p and "pip install 'torch-npu==" in p
               for p in data["problems"]), data["problems"]
    assert f"and torch {torch.__version__} is installed" in found["mismatches"][0]
    assert "release facts:" in proc.stdout and "MISMATCH" in proc.stdout


CACHE = Path.home() / ".cache" / "torch_fl" / "compat-sources"


@pytest.mark.skipif(not (CACHE / "pypi-torch-npu.json").exists() or not (MIRROR / "Ascend+pytorch" / "repo").is_dir(),
                    reason="needs the PyPI data gen_compat.py cached and the Ascend/pytorch clone")
def test_npu_regenerates_from_the_cached_wheel_metadata() -> None:
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "gen_compat.py"), "--verify", "--chip", "npu",
                           "--repo", f"Ascend/pytorch={MIRROR / 'Ascend+pytorch' / 'repo'}", "--cache", str(CACHE)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _pypi_reachable() -> bool:
    import urllib.request

    try:
        urllib.request.urlopen("https://pypi.org/pypi/torch-npu/json", timeout=5).close()
        return True
    except Exception:
        return False


@pytest.mark.skipif(os.environ.get("FL_TEST_NETWORK") != "1" or not _pypi_reachable(),
                    reason="set FL_TEST_NETWORK=1 (and reach PyPI) to read a live wheel's METADATA")
def test_a_live_wheel_metadata_matches_the_facts() -> None:
    """One real wheel's METADATA, read from PyPI now by range requests, against what the facts recorded."""
    import hashlib
    import urllib.parse
    import urllib.request

    gen = _generator()
    url = gen.PYPI.format(name="torch-npu")
    index = json.loads(urllib.request.urlopen(url, timeout=60).read())
    row = next(r for r in _npu()["releases"] if r["plugin"] == "2.5.1.post1")
    wanted = row["sources"]["pypi"]["metadata_of"].split(" ")[0]
    info = next(f for f in index["releases"]["2.5.1.post1"] if f["filename"] == wanted)
    text = gen.wheel_metadata(urllib.parse.urljoin(url, info["url"]), info["size"])
    assert hashlib.sha256(text.encode()).hexdigest() == row["sources"]["pypi"]["metadata_sha256"]
    assert "Requires-Dist: torch (==2.5.1+cpu)" in text  # the pin the facts record as ==2.5.1+cpu
