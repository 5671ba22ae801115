"""The host's memory and CPU facts, and the peak-memory watermarks, for the runtime facade.

torch gives the host CPU no allocator statistics (torch.cpu has no memory_allocated), so the runtime
facade answers host memory questions from the operating system: the process's resident set
(/proc/self/statm, else getrusage), the machine's free/total memory (/proc/meminfo, else sysconf), and
a watermark of sampled values that stands in for a peak counter on any backend without one. Nothing here
imports torch at module level except for the CPU name (torch.cpu.get_capabilities names Apple chips).
"""

from __future__ import annotations

import contextlib
import os
import platform
import sys
import threading

__all__ = ["Watermarks", "cpu_name", "meminfo", "memory_info", "os_peak_rss", "process_rss"]


def _page_size() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 4096


def os_peak_rss() -> int:
    """The process's lifetime peak resident set in bytes (0 where the OS does not say)."""
    try:
        import resource
    except ImportError:  # Windows
        return 0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # macOS reports bytes, Linux/BSD KiB


def process_rss() -> int:
    """The process's resident set now; the lifetime peak where /proc is missing (macOS)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * _page_size()
    except (OSError, ValueError, IndexError):
        return os_peak_rss()


def meminfo() -> dict[str, int]:
    """/proc/meminfo as bytes per key ({} where the file is missing)."""
    try:
        with open("/proc/meminfo") as info:
            lines = info.read().splitlines()
    except OSError:
        return {}
    values: dict[str, int] = {}
    for line in lines:
        key, _, rest = line.partition(":")
        fields = rest.split()
        if fields and fields[0].isdigit():
            values[key] = int(fields[0]) * (1024 if fields[1:] == ["kB"] else 1)
    return values


def memory_info() -> tuple[int, int]:
    """(free, total) bytes of the machine's memory: MemAvailable/MemTotal, else sysconf page counts.

    These are the machine's figures, not a container's cgroup limit.
    """
    info = meminfo()
    if "MemTotal" in info and "MemAvailable" in info:
        return info["MemAvailable"], info["MemTotal"]
    try:
        total = os.sysconf("SC_PHYS_PAGES") * _page_size()
    except (ValueError, OSError, AttributeError):
        return 0, 0
    try:
        free = os.sysconf("SC_AVPHYS_PAGES") * _page_size()
    except (ValueError, OSError, AttributeError):
        free = max(0, total - process_rss())  # macOS has no available-pages count
    return min(free, total), total


def cpu_name() -> str:
    """The host CPU's model name ('cpu' when nothing says)."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and value.strip():
                    return value.strip()
    except OSError:
        pass
    import torch

    capabilities = getattr(torch.cpu, "get_capabilities", None)  # torch >= 2.8; names Apple chips
    if capabilities is not None:
        with contextlib.suppress(Exception):
            name = str(capabilities().get("cpu_name", ""))
            if name:
                return name
    return platform.processor() or platform.machine() or "cpu"


class Watermarks:
    """The highest memory value sampled per key since start or the key's last reset (thread-safe).

    A key that was reset is no longer bounded below by the OS's lifetime peak: `was_reset` says so.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._peaks: dict[str, int] = {}
        self._reset: set[str] = set()

    def raise_to(self, key: str, value: int) -> int:
        """Record `value` for `key` and return the peak so far."""
        with self._lock:
            peak = max(self._peaks.get(key, 0), value)
            self._peaks[key] = peak
            return peak

    def reset(self, key: str, value: int) -> None:
        """Start a new peak for `key` at `value`."""
        with self._lock:
            self._peaks[key] = value
            self._reset.add(key)

    def was_reset(self, key: str) -> bool:
        with self._lock:
            return key in self._reset
