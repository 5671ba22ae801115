"""Where this process runs: bare metal, a container, WSL. Used by `torchfl doctor` and `bugreport`.

Device trouble inside containers and WSL has its own causes (devices not passed through, a driver
that lives on the host), so the diagnosis needs to know. Every probe is a file read or an
environment lookup: nothing is executed. `root` and `environ` exist so tests can fake a machine.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

# cgroup path fragment -> container runtime; kubepods first because pods also mention containerd.
_CGROUP_MARKERS = (("kubepods", "kubernetes"), ("docker", "docker"), ("libpod", "podman"),
                   ("containerd", "containerd"), ("lxc", "lxc"))


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def container_kind(root: Path = Path("/"), environ: Mapping[str, str] | None = None) -> str | None:
    """The container runtime this process runs under ('docker', 'kubernetes', ...), or None."""
    environ = os.environ if environ is None else environ
    if environ.get("KUBERNETES_SERVICE_HOST"):
        return "kubernetes"
    if (root / ".dockerenv").exists():
        return "docker"
    if (root / "run" / ".containerenv").exists():
        return "podman"
    cgroups = _read(root / "proc" / "1" / "cgroup") + _read(root / "proc" / "self" / "cgroup")
    return next((kind for marker, kind in _CGROUP_MARKERS if marker in cgroups), None)


def wsl_kind(root: Path = Path("/")) -> str | None:
    """'WSL2' or 'WSL1' when the Linux kernel is Microsoft's, else None."""
    version = _read(root / "proc" / "version").lower()
    if "microsoft" not in version:
        return None
    # WSL1 has no real Linux kernel and no GPU passthrough; its kernel string lacks the WSL2 tag.
    return "WSL2" if "wsl2" in version or "microsoft-standard" in version else "WSL1"


def environment_kind(root: Path = Path("/"), environ: Mapping[str, str] | None = None) -> str:
    """'bare metal', 'container (docker)', 'WSL2', 'container (docker) on WSL2', ..."""
    container, wsl = container_kind(root, environ), wsl_kind(root)
    if container and wsl:
        return f"container ({container}) on {wsl}"
    if container:
        return f"container ({container})"
    return wsl or "bare metal"
