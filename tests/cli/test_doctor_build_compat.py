"""`torchfl doctor` with torch's own CUDA build judged against the driver (analysis/build_compat.py): the
report's 'release facts' line and the problem with its pip command. The build check's result is made from
probe texts, as doctor would get them on a GPU machine (this one has none)."""

from __future__ import annotations

from torch_fl.analysis import doctor, doctor_text
from torch_fl.analysis.build_compat import check
from torch_fl.analysis.installed import nvidia_driver

PROC = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  470.199.02  Thu May 11 11:46:56 UTC 2023\n"


def _data() -> dict:
    result = check("2.4.0", cuda="12.1", driver=nvidia_driver(proc_text=PROC))
    data = doctor._skeleton()
    data["release_compat"] = {**result.json(), "problem": result.problem()}
    return data


def test_the_release_line_names_the_driver_torch_needs() -> None:
    rows = doctor_text._release_rows(_data()["release_compat"])
    assert rows[0][0] == "release facts"
    assert rows[0][1].startswith("torch 2.4.0 wants Python 3.8, 3.9, 3.10, 3.11, 3.12, NVIDIA driver >=525 "
                                 "(every feature: >=530.30.02) (MISMATCH; ")
    assert "wants torch" not in rows[0][1]  # torch's own build has no torch pin to show


def test_the_problem_ends_with_the_pip_command() -> None:
    problems = doctor.diagnose(_data())
    found = [p for p in problems if p.startswith("torch 2.4.0 is built for CUDA 12.1")]
    assert found and found[0].endswith("Fix: `pip install --force-reinstall 'torch==2.4.0' --index-url "
                                       "https://download.pytorch.org/whl/cu118` or: `pip install --force-reinstall "
                                       "'torch==2.7.1' --index-url https://download.pytorch.org/whl/cu118`.")
    assert "this machine has driver 470.199.02" in found[0]
