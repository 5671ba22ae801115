"""torch's own CUDA / ROCm / XPU builds against the driver and runtime (analysis/build_compat.py), from the
generated facts (description/compat/{cuda,rocm,xpu}.json) and the driver probes' parsers (analysis/installed.py).
Every probe result is given as the text the probe would read: no GPU, no mock of torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from torch_fl.analysis import build_compat, compat, installed
from torch_fl.analysis.build_compat import check, oneapi_version
from torch_fl.analysis.installed import Driver

REPO = Path(__file__).resolve().parents[2]
CACHE = Path.home() / ".cache" / "torch_fl" / "compat-sources"
CU121 = "https://download.pytorch.org/whl/cu121"
CU118 = "https://download.pytorch.org/whl/cu118"

PROC_PROPRIETARY = ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n"
                    "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n")
PROC_OPEN = ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build  "
             "(dvs-builder@U16-I3-B03-4-3)  Thu Jan 23 22:50:36 UTC 2025\nGCC version:  gcc version 13.3.0\n")
SMI = ("+-----------------------------------------------------------------------------------------+\n"
       "| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15      CUDA Version: 12.4     |\n"
       "|-----------------------------------------+------------------------+----------------------+\n")
ROCM_SMI = ("============================ ROCm System Management Interface ============================\n"
            "============================= Version of System Component ==============================\n"
            "Driver version: 6.8.5\n"
            "==========================================================================================\n")


# The facts ----------------------------------------------------------------------------------------
def test_cuda_facts_follow_each_torch_wheels_metadata() -> None:
    data = compat.build_facts("cuda")
    rows = {r["torch"]: r for r in data["releases"]}
    assert {s["id"] for s in data["sources"]} == {"pypi", "pytorch-matrix", "nvidia-minor-compat",
                                                  "nvidia-release-notes"}
    # the CUDA a plain `pip install torch` gets: the wheel's runtime pin (nvidia-cuda-runtime-cu12, then cuda-toolkit)
    assert rows["2.7.0"]["runtime"] == "12.6" and rows["2.7.0"]["sources"]["pypi"]["cuda_runtime"] == "12.6.77"
    assert rows["2.11.0"]["runtime"] == "13.0"
    assert rows["2.7.0"]["variants"] == ["11.8", "12.6", "12.8"] and rows["2.7.0"]["experimental"] == ["12.8"]
    assert rows["2.7.0"]["index"]["11.8"] == CU118 and "12.6" not in rows["2.7.0"]["index"]  # 12.6 is PyPI's
    assert data["drivers"]["12.6"] == {"floor": "525", "toolkit": "560.28.03"}
    assert data["drivers"]["13.0"]["floor"] == "580" and data["drivers"]["11.8"]["floor"] == "450.80.02"
    for row in data["releases"]:
        if row["runtime"]:  # every pinned CUDA of a release is one of its builds
            assert row["runtime"] in row["variants"], row["torch"]
    newest = data["releases"][-1]
    if not newest["sources"]["pytorch-matrix"]:  # a release newer than the matrix: said, not guessed
        assert any("the matrix has no" in d for d in newest["decisions"])


def test_rocm_and_xpu_facts_name_their_sources_and_decisions() -> None:
    rocm = {r["torch"]: r for r in compat.build_facts("rocm")["releases"]}
    assert rocm["2.4"]["runtime"] == "6.1" and rocm["2.4"]["validated_by_amd"] == ["6.3"]
    assert rocm["2.1"]["validated_by_amd"] == ["5.6", "5.7", "6.0", "6.1", "6.2", "6.3"]
    assert any("AMD's matrix read here stops at ROCm 6.3.x" in d for d in rocm["2.9"]["decisions"])
    xpu = compat.build_facts("xpu")
    assert {r["torch"]: r["runtime"] for r in xpu["releases"]}["2.9"] == "2025.2"
    assert next(s for s in xpu["sources"] if s["id"] == "pytorch-build-matrix")["commit"]
    assert compat.all_facts().keys() == {"torch_npu", "torch_mlu", "torch_musa"}  # builds are not plugins


@pytest.mark.skipif(not (CACHE / "pypi-torch.json").exists(), reason="needs the PyPI data gen_compat.py cached")
def test_build_facts_regenerate_from_their_sources() -> None:
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "gen_compat.py"), "--verify", "--chip", "cuda",
                           "--chip", "rocm", "--chip", "xpu", "--cache", str(CACHE)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# Driver probes ------------------------------------------------------------------------------------
def test_nvidia_driver_from_proc_and_smi_texts() -> None:
    assert installed.parse_proc_nvidia(PROC_PROPRIETARY) == "535.104.05"
    assert installed.parse_proc_nvidia(PROC_OPEN) == "570.86.15"
    assert installed.parse_nvidia_smi(SMI) == ("550.54.15", "12.4")
    assert installed.parse_nvidia_smi("550.54.15\n550.54.15\n") == ("550.54.15", "")  # --query-gpu csv
    assert installed.nvidia_driver(proc_text=PROC_OPEN) == Driver("nvidia", "570.86.15", "",
                                                                 "/proc/driver/nvidia/version")
    both = installed.nvidia_driver(proc_text=PROC_PROPRIETARY, smi_text=SMI)
    assert both.version == "550.54.15" and both.cuda == "12.4" and both.source == "nvidia-smi"
    assert installed.nvidia_driver(proc_text="", smi_text="NVIDIA-SMI has failed") is None


def test_amd_driver_and_rocm_install() -> None:
    assert installed.amd_driver(ROCM_SMI) == Driver("amdgpu", "6.8.5", "", "rocm-smi --showdriverversion")
    assert installed.amd_driver("") is None
    assert installed.rocm_version("6.3.1-48\n") == "6.3.1"


# CUDA ---------------------------------------------------------------------------------------------
def test_cuda_driver_below_the_floor_gives_the_build_that_fits() -> None:
    """torch 2.4.0's default wheel is CUDA 12.1; a driver of the CUDA 11 family cannot start it."""
    result = check("2.4.0", cuda="12.1", driver=Driver("nvidia", "470.199.02", "11.4"))
    assert not result.ok and result.known
    assert result.mismatches[0].startswith("torch 2.4.0 is built for CUDA 12.1, which needs an NVIDIA driver >=525 "
                                           "(CUDA 12.x minor version compatibility), and this machine has driver "
                                           "470.199.02 (its newest CUDA: 11.4)")
    assert result.fixes[0] == f"pip install --force-reinstall 'torch==2.4.0' --index-url {CU118}"
    text = result.problem()
    assert "Why: a torch wheel carries the CUDA runtime" in text and f"Fix: `{result.fixes[0]}`" in text


def test_cuda_driver_of_the_right_family_but_older_than_the_toolkit_is_a_caution() -> None:
    result = check("2.7.0+cu128", cuda="12.8", driver=Driver("nvidia", "535.104.05", "12.2"))
    assert result.ok and result.fixes == []
    assert "older than the 570.26 CUDA 12.8 shipped with" in result.cautions[0]
    assert result.expected["runtime"] == ">=525 (every feature: >=570.26)"


def test_cuda_13_build_on_a_cuda_12_driver_keeps_the_release_when_it_can() -> None:
    """Only the driver's CUDA major is read from nvidia-smi; 2.11.0 has a CUDA 12.8 build for that driver."""
    result = check("2.11.0", cuda="13.0", driver=Driver("nvidia", "570.86.15", "12.8"))
    assert not result.ok
    assert result.fixes[0] == "pip install --force-reinstall 'torch==2.11.0' --index-url " \
                              "https://download.pytorch.org/whl/cu128"


def test_cuda_matching_driver_and_no_driver() -> None:
    assert check("2.7.0", cuda="12.6", driver=Driver("nvidia", "560.35.03", "12.6")).cautions == []
    missing = check("2.7.0", cuda="12.6", driver=None)
    assert missing.ok and "no NVIDIA driver was found" in missing.cautions[0]
    assert check("2.13.0+cpu") is None  # a CPU build: nothing to check


# ROCm and XPU -------------------------------------------------------------------------------------
def test_rocm_build_against_another_installed_rocm_is_a_caution_with_the_index() -> None:
    result = check("2.7.0+rocm6.3", hip="6.3.42131-fa1d09cbd", driver=Driver("amdgpu", "6.8.5"),
                   rocm_installed="6.2.4")
    assert result.ok and result.expected["amdgpu"] == "6.8.5"
    assert "carries ROCm 6.3 libraries and /opt/rocm is ROCm 6.2.4" in result.cautions[0]
    assert "`pip install --force-reinstall 'torch==2.6.*' --index-url https://download.pytorch.org/whl/rocm6.2.4`" \
        in result.cautions[0]
    assert check("2.7.0+rocm6.3", hip="6.3.42131-fa1d09cbd", rocm_installed="6.3.1").cautions == []
    # PyTorch's 2.4 wheels use ROCm 6.1; AMD validated 2.4 on ROCm 6.3 only
    assert check("2.4.0+rocm6.1", hip="6.1.40091").cautions == [
        "AMD's matrix lists PyTorch 2.4 for ROCm 6.3, not for the ROCm 6.1 its wheels use (PyTorch's build, not "
        "validated by AMD)"]


def test_xpu_runtime_wheel_of_another_release_is_a_mismatch() -> None:
    assert oneapi_version("20250301") == "2025.3.1"
    result = check("2.10.0+xpu", xpu="20250301", sycl_rt="2025.2.1")
    assert result.mismatches == ["torch 2.10.0+xpu is built with oneAPI 2025.3.1, and intel-sycl-rt 2025.2.1 is "
                                 "installed (another oneAPI release than the one torch's XPU libraries were built "
                                 "against: they may fail to load or misbehave)"]
    assert result.fixes == ["pip install 'intel-sycl-rt==2025.3.1'", "pip install --force-reinstall "
                            "'torch==2.10.0' --index-url https://download.pytorch.org/whl/xpu"]
    assert check("2.10.0+xpu", xpu="20250301", sycl_rt="2025.3.1").cautions == []
    assert "another patch release" in check("2.10.0+xpu", xpu="20250301", sycl_rt="2025.3.0").cautions[0]
    assert "unchecked" in check("2.10.0+xpu", xpu="20250301", sycl_rt="").cautions[0]


@pytest.mark.skipif(any(getattr(__import__("torch").version, a, None) for a in ("cuda", "hip", "xpu")),
                    reason="a CPU-only torch build")
def test_this_cpu_build_has_no_build_check() -> None:
    assert build_compat.check_here() is None
    assert compat.installed_check("", "", "") is None  # doctor's check for a description with no plugin
