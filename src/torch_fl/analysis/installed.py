"""What is installed beside torch that torch does not report: the GPU driver and the vendor toolkit (CANN,
CNToolkit, MUSA SDK, ROCm). These are the detection probes behind doctor's compatibility checks and the env lock.

Each probe is split in two: a parser that takes the text the probe would read (``nvidia-smi``'s output,
``/proc/driver/nvidia/version``, a toolkit's version file) and returns facts, and a reader that finds that text on
this machine. Tests call the parsers, and `toolkit` with a fake install tree, so no probe needs the hardware.
Where to look for a vendor's toolkit is not written here: it comes from the chip's generated facts
(description/compat/<chip>.json, its `installed` recipe, scripts/gen_compat.py).

Example::

    >>> nvidia_driver(proc_text="NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar 5 2024")
    Driver(kind='nvidia', version='550.54.15', cuda='', source='/proc/driver/nvidia/version')
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

_PROBE_TIMEOUT = 10.0  # seconds; a wedged driver can hang nvidia-smi, and doctor must still answer
_VERSION = re.compile(r"\d+\.\d+(?:\.[0-9A-Za-z]+)*")
_PROC_NVIDIA = "/proc/driver/nvidia/version"
_ROCM_INFO = "/opt/rocm/.info/version"


@dataclass(frozen=True)
class Driver:
    """A GPU driver as its own tools report it."""

    kind: str  # 'nvidia' | 'amdgpu'
    version: str
    cuda: str = ""  # nvidia: the newest CUDA this driver supports, as nvidia-smi prints it
    source: str = ""  # where it was read

    def json(self) -> dict[str, str]:
        return asdict(self)


# NVIDIA -------------------------------------------------------------------------------------------
def parse_proc_nvidia(text: str) -> str:
    """The driver version in /proc/driver/nvidia/version ('' when absent).

    'NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  ...' (proprietary module) and
    'NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build ...' (open module)."""
    match = re.search(r"NVRM version:.*?Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)", text)
    return match.group(1) if match else ""


def parse_nvidia_smi(text: str) -> tuple[str, str]:
    """(driver, cuda) from nvidia-smi's banner ('Driver Version: 550.54.15   CUDA Version: 12.4'), or from
    `--query-gpu=driver_version --format=csv,noheader` (one version per GPU: the first)."""
    driver = re.search(r"Driver Version:\s*(\d+\.\d+(?:\.\d+)?)", text)
    cuda = re.search(r"CUDA Version:\s*(\d+\.\d+)", text)
    if driver:
        return driver.group(1), cuda.group(1) if cuda else ""
    line = next((ln.strip() for ln in text.splitlines() if re.fullmatch(r"\d+\.\d+(?:\.\d+)?", ln.strip())), "")
    return line, cuda.group(1) if cuda else ""


def nvidia_driver(proc_text: str | None = None, smi_text: str | None = None) -> Driver | None:
    """The NVIDIA driver, from the texts given, else read here (the /proc file first: no process to start)."""
    if proc_text is None and smi_text is None:
        proc_text, smi_text = _read(_PROC_NVIDIA), None
        if shutil.which("nvidia-smi"):
            smi_text = _run(["nvidia-smi"])
    version, cuda = parse_nvidia_smi(smi_text or "")
    source = "nvidia-smi" if version else ""
    if not version and proc_text:
        version, source = parse_proc_nvidia(proc_text), _PROC_NVIDIA
    return Driver("nvidia", version, cuda, source) if version else None


# AMD ----------------------------------------------------------------------------------------------
def parse_rocm_smi(text: str) -> str:
    """The amdgpu driver version from `rocm-smi --showdriverversion` ('Driver version: 6.8.5')."""
    match = re.search(r"Driver version:\s*([0-9][\w.\-]*)", text, re.I)
    return match.group(1) if match else ""


def amd_driver(smi_text: str | None = None) -> Driver | None:
    if smi_text is None:
        smi_text = _run(["rocm-smi", "--showdriverversion"]) if shutil.which("rocm-smi") else ""
    version = parse_rocm_smi(smi_text)
    return Driver("amdgpu", version, source="rocm-smi --showdriverversion") if version else None


def rocm_version(text: str | None = None) -> str:
    """The ROCm installed under /opt/rocm (its .info/version: '6.3.1-48' -> '6.3.1'); '' when none."""
    if text is None:
        root = os.environ.get("ROCM_PATH") or "/opt/rocm"
        text = _read(os.path.join(root, ".info", "version")) or ""
    match = _VERSION.search(text.split("-", 1)[0])
    return match.group(0) if match else ""


def driver(kind: str = "") -> Driver | None:
    """The GPU driver of this machine for a torch built for `kind` ('cuda' / 'hip'), or the first found."""
    probes = {"cuda": nvidia_driver, "hip": amd_driver}
    for name in ([kind] if kind in probes else list(probes)):
        found = probes[name]()
        if found is not None:
            return found
    return None


# Vendor toolkits ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Toolkit:
    """A vendor toolkit found on disk."""

    name: str  # 'CANN'
    version: str
    path: str  # the file the version was read from
    root_from: str  # the environment variable that named its root, or 'default'

    def json(self) -> dict[str, str]:
        return asdict(self)


def parse_version_file(text: str) -> str:
    """A toolkit version file's version: a `version=` / `Version=` line (CANN's ascend_toolkit_install.info and
    version.info), a JSON `version` key, else the first X.Y[.Z] in the text ('Neuware Version 3.9.0')."""
    line = re.search(r"^\s*version\s*[=:]\s*\"?([0-9][\w.\-]*)", text, re.I | re.M)
    if line:
        return line.group(1)
    try:
        data = json.loads(text[text.index("{"):]) if "{" in text else None
    except ValueError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("version"), str):
        return data["version"]
    match = _VERSION.search(text)
    return match.group(0) if match else ""


def toolkit(recipe: dict[str, Any], env: dict[str, str] | None = None, *, default_roots: bool = True) -> Toolkit | None:
    """The toolkit a chip's `installed` recipe describes, found through its environment variables, then its
    default roots (skipped with default_roots=False, as tests do); None when no version file is found."""
    env = os.environ if env is None else env
    roots = [(env[var], var) for var in recipe.get("env", []) if env.get(var)]
    if default_roots:
        roots += [(root, "default") for root in recipe.get("roots", [])]
    for root, origin in roots:
        for pattern in recipe.get("files", []):
            for path in sorted(glob.glob(os.path.join(root, pattern))):
                version = parse_version_file(_read(path) or "")
                if version:
                    return Toolkit(recipe["name"], version, path, origin)
    return None


def chip_toolkit(data: dict[str, Any] | None, env: dict[str, str] | None = None, *,
                 default_roots: bool = True) -> Toolkit | None:
    """The toolkit a chip's generated facts (`data`, from analysis/compat.py) say how to find, by their
    recipe; None when they have none or none is found. (The facts are passed in: this module only probes.)"""
    recipe = (data or {}).get("installed")
    return toolkit(recipe, env, default_roots=default_roots) if recipe else None


# Helpers ------------------------------------------------------------------------------------------
def _read(path: str) -> str | None:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def _run(command: list[str]) -> str:
    """A probe command's output; '' when it fails or hangs (the probe then reports nothing, never raises)."""
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=_PROBE_TIMEOUT).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
