"""The fingerprint of a compile stack: every version a compiled artifact silently depends on.

A compiled graph (Inductor's C++/Triton code, an AOTInductor ``.so``) is only valid for the stack that
built it. The fingerprint names that stack as a few readable components; its digest names the cache
entry, and a change of any component means a new entry (see cache.py) or a refused AOT package.

Components (each a string; ``none`` where the stack has no such part):

``torch``        ``torch.__version__`` (2.13.0+cpu): the generated code calls into this libtorch.
``torch_git``    ``torch.version.git_version``: two builds of one version (nightly, vendor rebuild) differ.
``python``       ``platform.python_version()``: Dynamo's bytecode handling is per Python release.
``python_abi``   ``sys.implementation.cache_tag`` and ``sysconfig`` SOABI: extension modules and
                 Inductor's Python wrappers are built for one ABI (cpython-311, free-threaded, ...).
``torch_fl``     the torch-fl version: it decides what is compiled (routing, policies).
``description``  the description's name and the sha256 of its file text: backend, dynamic-shape policy,
                 dtypes and op routes all come from it.
``plugin``       the vendor plugin and its installed version (torch_npu 2.1.0), ``none`` when built in.
``runtime``      the device runtime torch was built against (torch.version.cuda / hip / xpu).
``cxx``          first line of ``$CXX --version`` (Inductor's default ``g++``, ``clang++`` on macOS):
                 Inductor and AOTInductor compile C++ with it.
``triton``       the installed Triton version (GPU kernels are Triton code), ``none`` without Triton.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from importlib import metadata

import torch

from .. import _version, plugins
from ..description.model import Description

# Order is display order (manifest, `torchfl cache info`, mismatch errors).
COMPONENTS: dict[str, str] = {
    "torch": "torch version",
    "torch_git": "torch build (git hash)",
    "python": "Python version",
    "python_abi": "Python ABI",
    "torch_fl": "torch-fl version",
    "description": "device description (name and sha256 of its text)",
    "plugin": "vendor plugin version",
    "runtime": "device runtime version",
    "cxx": "C++ compiler",
    "triton": "Triton version",
}
# Distributions that install the `triton` module (upstream, and the ROCm/XPU builds torch pins).
_TRITON_DISTS = ("triton", "pytorch-triton", "pytorch-triton-rocm", "pytorch-triton-xpu")


@dataclass(frozen=True)
class Fingerprint:
    description: str  # the description's name (readable prefix of the entry name)
    components: dict[str, str]

    @property
    def digest(self) -> str:
        return digest(self.components)

    @property
    def entry_name(self) -> str:
        """The cache entry directory name: '<description>-<digest>'."""
        return entry_name(self.description, self.digest)

    def diff(self, other: Fingerprint | dict[str, str]) -> dict[str, tuple[str, str]]:
        """Components that differ: name -> (other's value, this value)."""
        theirs = other.components if isinstance(other, Fingerprint) else other
        names = list(COMPONENTS) + [n for n in {**theirs, **self.components} if n not in COMPONENTS]
        return {n: (theirs.get(n, "missing"), self.components.get(n, "missing")) for n in names
                if theirs.get(n) != self.components.get(n)}


def digest(components: dict[str, str]) -> str:
    """16 hex digits of the sha256 of the components (canonical JSON: key order does not matter)."""
    text = json.dumps(components, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def entry_name(description: str, fingerprint_digest: str) -> str:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in description) or "device"
    return f"{safe}-{fingerprint_digest}"


def describe_change(changes: dict[str, tuple[str, str]]) -> str:
    """'torch 2.13.0 -> 2.14.1; cxx gcc 12.2.0 -> gcc 13.1.0' (long hashes shortened)."""
    def short(value: str) -> str:
        value = re.sub(r"sha256:([0-9a-f]{12})[0-9a-f]+", r"sha256:\1", value)
        return value if len(value) <= 48 else value[:45] + "..."

    return "; ".join(f"{name} {short(old)} -> {short(new)}" for name, (old, new) in changes.items())


def fingerprint(desc: Description) -> Fingerprint:
    """The fingerprint of this process's compile stack for `desc` (cheap: the compiler is asked once)."""
    components = {
        "torch": torch.__version__,
        "torch_git": torch.version.git_version or "none",
        "python": platform.python_version(),
        "python_abi": f"{sys.implementation.cache_tag} {sysconfig.get_config_var('SOABI') or 'none'}",
        "torch_fl": _version.__version__,
        "description": f"{desc.name} sha256:{desc.sha256}",
        "plugin": f"{desc.plugin} {plugins.plugin_version(desc) or 'unknown'}" if desc.plugin else "none",
        "runtime": " ".join(plugins.runtime_version(desc)).strip() or "none",  # "cuda 12.8"; "none": the CPU
        "cxx": cxx_version(cxx_command()),
        "triton": triton_version(),
    }
    return Fingerprint(desc.name, components)


def cxx_command() -> str:
    """The C++ compiler Inductor uses by default (its config.cpp.cxx: $CXX, else g++ / clang++)."""
    return os.environ.get("CXX") or ("clang++" if sys.platform == "darwin" else "g++")


@functools.lru_cache(maxsize=8)
def cxx_version(command: str) -> str:
    """First line of `command --version` ('not found' when it is not installed). Cached: one
    subprocess per compiler per process."""
    if shutil.which(command) is None:
        return f"{command} not found"
    try:
        out = subprocess.run([command, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{command} unusable ({type(exc).__name__})"
    return (out.strip().splitlines() or [f"{command} (no version output)"])[0].strip()


def triton_version() -> str:
    """The installed Triton distribution and version, from package metadata (importing triton costs
    about a second), 'none' when no Triton is installed."""
    for dist in _TRITON_DISTS:
        try:
            return f"{dist} {metadata.version(dist)}"
        except metadata.PackageNotFoundError:
            continue
    return "none"
