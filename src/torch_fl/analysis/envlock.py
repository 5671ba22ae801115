"""The versions that matter on one node, written to a lock file, and every node checked against it
(``torchfl env lock`` / ``torchfl env check LOCK`` / ``torchfl env diff LOCK...``).

A cluster whose nodes differ in one torch minor release, one plugin post release or one description file
trains on some nodes and crashes or hangs on others. `snapshot` reads what decides that without importing
any vendor plugin (package metadata, torch's own version attributes, the description files' sha256, the C
libraries' versions, the GPU driver and vendor toolkits found by analysis/installed.py); `compare` names each
component that differs and the command that makes it equal. `lock_facts` / `compare_facts` are the same check
for one process, as preflight runs it across ranks.

Example::

    >>> lock = snapshot()
    >>> compare(lock, snapshot())
    []
"""

from __future__ import annotations

import json
import platform
import socket
import sys
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from ..report import plural

SCHEMA = 1
# Python distributions whose version changes what a training step does or whether it runs.
PACKAGES = ("torch", "numpy", "triton", "pytorch-triton-rocm", "pytorch-triton-xpu", "torchvision", "torchaudio",
            "transformers", "accelerate", "deepspeed")
_CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def snapshot() -> dict[str, Any]:
    """This node's lock: its name, when, and the components (name -> version) that must match."""
    return {"schema": SCHEMA, "node": socket.gethostname(), "created": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                                      time.gmtime()),
            "components": components()}


def components() -> dict[str, str]:
    import torch

    from .._version import __version__
    from ..description import registry
    from .plugin_load import host_facts

    found: dict[str, str] = {
        "python": platform.python_version(),
        "python.abi": sys.implementation.cache_tag or "",
        "torch": torch.__version__,
        "torch.git": torch.version.git_version or "",
        "torch.cxx11_abi": str(int(torch.compiled_with_cxx11_abi())),
        "torch_fl": __version__,
    }
    for runtime in ("cuda", "hip", "xpu"):  # torch's own record of the runtime it was built for
        value = getattr(torch.version, runtime, None)
        if isinstance(value, str) and value:
            found[f"torch.{runtime}"] = value
    host = host_facts()
    found.update({"glibc": host["glibc"], "libstdc++": host["glibcxx"]})
    for dist in PACKAGES:
        version = _dist_version(dist)
        if version and dist != "torch":
            found[f"package.{dist}"] = version
    for name, desc in sorted(registry.descriptions().items()):
        found[f"description.{name}"] = desc.sha256
        if desc.plugin:
            version = _module_version(desc.plugin.split(".")[0])
            if version:
                found[f"plugin.{desc.plugin.split('.')[0]}"] = version
    found.update(_machine())
    return found


def _machine() -> dict[str, str]:
    """The driver and vendor toolkits installed on this node (what torch does not report): driver.<kind>,
    toolkit.<name>. Nodes of one job that differ here run the same wheels against other system software."""
    from . import compat, installed

    found = {}
    gpu = installed.driver()
    if gpu is not None:
        found[f"driver.{gpu.kind}"] = gpu.version
    for data in compat.all_facts().values():
        kit = installed.chip_toolkit(data)
        if kit is not None:
            found[f"toolkit.{kit.name}"] = kit.version
    rocm = installed.rocm_version()
    if rocm:
        found["toolkit.ROCm"] = rocm
    return found


def lock_facts() -> dict[str, str]:
    """This process's lock components (component -> version), JSON-ready: what every rank sends in a preflight
    fingerprint, compared with `compare_facts` (the same components `torchfl env lock` writes, without the
    node name and time, so equal nodes give equal dicts)."""
    return components()


def compare_facts(reference: dict[str, str], here: dict[str, str]) -> list[Difference]:
    """The components of `here` that differ from `reference` (two `lock_facts()` dicts), each with its fix."""
    return compare({"components": reference}, {"components": here})


def _dist_version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return ""


def _module_version(module: str) -> str:
    from ..description.probe import installed_version

    return installed_version(module)


@dataclass
class Difference:
    """One component that differs between a lock and a node."""

    component: str
    locked: str  # '' when the lock does not have it
    here: str  # '' when the node does not have it

    def sentence(self, node: str, reference: str) -> str:
        locked = self.locked or "absent"
        here = self.here or "absent"
        return f"{self.component}: {here} on {node}, {locked} in {reference}. Fix: {self.fix()}"

    def fix(self) -> str:
        name, _, detail = self.component.partition(".")
        if not self.locked:
            if name in ("package", "plugin"):
                return f"pip uninstall {detail.replace('_', '-')} (the lock has none), or lock again with it"
            return f"lock again on a node that has it, or make this node like the lock's ({self.component})"
        if name == "torch" and not detail:
            index = f" --index-url {_CPU_INDEX}" if self.locked.endswith("+cpu") else ""
            return f"pip install 'torch=={self.locked}'{index}"
        if name in ("package", "plugin"):
            dist = detail.replace("_", "-")
            return f"pip install '{dist}=={self.locked}'"
        if name == "torch_fl":
            return f"pip install 'torch-fl=={self.locked}'"
        if name == "torch":  # torch.git, torch.cxx11_abi, torch.cuda: another build of the same version
            return (f"install the same torch wheel as the lock's node (its torch.{detail} is {self.locked}): the "
                    f"same version from another index or build differs here")
        if name == "python":
            return f"use Python {self.locked} ({'its ABI ' + self.locked if detail else 'the same minor release'}) " \
                   f"in this node's environment"
        if name == "description":
            return (f"use the same '{detail}' description on every node (same torch-fl, same FL_DESCRIPTION / "
                    f"FL_DESCRIPTION_PATH files): `torchfl describe {detail}` shows the one in use")
        if name == "driver":
            return (f"install the {detail} driver {self.locked} the lock's node has (a driver is system software: "
                    f"the node image or the vendor's installer, not pip)")
        if name == "toolkit":
            return (f"install {detail} {self.locked} as on the lock's node, or point this node's environment at "
                    f"it (`torchfl doctor` shows where it looked)")
        return "use the same OS image (system libraries) on every node"


def compare(lock: dict[str, Any], here: dict[str, Any]) -> list[Difference]:
    """The components of `here` that differ from `lock` (each a lock-file dict)."""
    locked, current = lock["components"], here["components"]
    return [Difference(name, locked.get(name, ""), current.get(name, ""))
            for name in sorted(set(locked) | set(current)) if locked.get(name, "") != current.get(name, "")]


def read(path: str | Path) -> dict[str, Any]:
    """A lock file; a file that is not one is an error naming the file and what is wrong."""
    from ..errors import ConfigError

    text = Path(path).read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{path}: not a torchfl env lock (not JSON: {exc}). Fix: write it with "
                          f"`torchfl env lock -o {path}`") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("components"), dict):
        raise ConfigError(f"{path}: not a torchfl env lock (schema {SCHEMA} with 'node' and 'components' "
                          f"expected). Fix: write it with `torchfl env lock -o {path}`")
    return data


def write(path: str | Path, lock: dict[str, Any]) -> None:
    Path(path).write_text(json.dumps(lock, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def report(lock: dict[str, Any], here: dict[str, Any], lock_name: str) -> tuple[bool, list[str]]:
    """(same, lines): this node against the lock, one line per differing component."""
    differences = compare(lock, here)
    reference = f"the lock {lock_name} (written on {lock.get('node', '?')} at {lock.get('created', '?')})"
    if not differences:
        return True, [f"node {here['node']}: matches {reference} ({len(lock['components'])} components)"]
    lines = [f"node {here['node']}: {plural(len(differences), 'component')} differ{'s' if len(differences) == 1 else ''} from {reference}:"]
    lines += [f"  {d.sentence(here['node'], 'the lock')}" for d in differences]
    return False, lines


def diff_nodes(locks: list[tuple[str, dict[str, Any]]]) -> tuple[bool, list[str]]:
    """Several nodes' locks against the first: each node and component that differs."""
    (first_name, first), rest = locks[0], locks[1:]
    lines, same = [], True
    for name, lock in rest:
        differences = compare(first, lock)
        if not differences:
            lines.append(f"node {lock.get('node', name)} ({name}): same as {first.get('node', first_name)}")
            continue
        same = False
        lines.append(f"node {lock.get('node', name)} ({name}): {plural(len(differences), 'component')} differ{'s' if len(differences) == 1 else ''} from "
                     f"{first.get('node', first_name)} ({first_name}):")
        lines += [f"  {d.sentence(lock.get('node', name), first.get('node', first_name))}" for d in differences]
    return same, lines
