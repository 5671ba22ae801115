"""The unified runtime facade: ``torch.cuda``-style calls for whichever device torch.fl names.

Every function takes an optional ``device`` (a virtual id ``acc0``, a physical name ``cuda:1``, an
int ``N`` meaning ``accN``, a ``torch.device``, or None for ``torch.fl.device()``) and routes it:

1. Facts about the device come from its description: a host allocator means "report process
   memory", sync submission means "synchronize is a no-op and host timing is exact", ``streams = false``
   means "one queue: streams are host objects", and so on.
2. Otherwise the call goes to ``torch.accelerator`` when it has the function and the device is the
   current accelerator (torch >= 2.6), then to the device module ``getattr(torch, device_type)``
   (torch.cuda, torch.xpu, torch.mps, torch.npu once torch_npu is imported, ...). ``CALL_ROUTES`` of
   device_calls.py is the table of candidate names; the first that exists and does not raise wins.

On the host CPU every call returns a meaningful value or is a documented no-op; docs/runtime.md has the
per-backend table.

Example::

    import torch, torch_fl
    start, end = torch.fl.Event(enable_timing=True), torch.fl.Event(enable_timing=True)
    start.record()
    y = x @ x
    end.record()
    torch.fl.synchronize()
    print(start.elapsed_time(end), "ms;", torch.fl.max_memory_allocated(), "bytes peak")
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass
from typing import Any, TypeAlias

import torch

from . import device_calls, hostmem
from .description.model import Description
from .device import description_for, device_map, is_emulated
from .errors import DeviceNotFoundError, PluginImportError, RuntimeUnsupportedError
from .routing.current import use_device
from .streams import Event, Stream, stream

__all__ = [
    "DeviceProperties", "Event", "RuntimeUnsupportedError", "Stream", "autocast", "current_device",
    "device_count", "dist_backend", "empty_cache", "get_device_properties", "is_available",
    "manual_seed", "max_memory_allocated", "mem_get_info", "memory_allocated",
    "reset_peak_memory_stats", "set_device", "stream", "synchronize",
]

DeviceLike: TypeAlias = "str | int | torch.device | None"

_log = logging.getLogger("torch_fl.runtime")

# torch gives the host no device index and no device module worth routing to (torch.cpu's functions
# are placeholders), so the host is the one device type whose index bookkeeping is ours.
_HOST_TYPE = "cpu"

# Property names that count a device's parallel compute units (CUDA SMs, XPU Xe-cores, Ascend cubes).
_COMPUTE_UNIT_ATTRS = ("multi_processor_count", "gpu_subslice_count", "max_compute_units", "cube_core_num")


# Device management ---------------------------------------------------------------------------------
def is_available(device: DeviceLike = None) -> bool:
    """Whether `device` exists on this machine and its runtime is usable.

    Args:
        device: device to check (default torch.fl.device()). An unknown id gives False, not an error.

    Example:
        >>> torch.fl.is_available("cpu")
        True
    """
    try:
        dev = use_device(device)
    except DeviceNotFoundError:
        return False
    if dev.type == _HOST_TYPE:
        return True
    try:
        return bool(device_calls.native("is_available", dev, fallback=lambda: False))
    except PluginImportError as exc:
        _log.warning("%s", exc)
        return False


def device_count(device: DeviceLike = None) -> int:
    """How many devices of `device`'s type this process sees.

    On the host: the number of virtual ids mapped to cpu (at least 1); elsewhere the runtime's count.

    Args:
        device: any device of the type to count (default torch.fl.device()).

    Example:
        >>> torch.fl.device_count("cpu")
        1
    """
    dev = use_device(device)
    if dev.type == _HOST_TYPE:
        return max(1, sum(d.type == _HOST_TYPE for d in device_map().values()))
    return int(device_calls.native("device_count", dev))


def current_device(device: DeviceLike = None) -> int:
    """The physical index of the current device of `device`'s type (as torch.cuda.current_device).

    The host is always 0: every virtual id mapped to cpu shares the one process.

    Args:
        device: any device of the type to ask about (default torch.fl.device()).

    Example:
        >>> torch.fl.current_device("cpu")
        0
    """
    dev = use_device(device)
    if dev.type == _HOST_TYPE:
        return 0
    return int(device_calls.native("current_device", dev))


def set_device(device: DeviceLike = None) -> None:
    """Make `device` the current device of its type. The host accepts 0, acc0 (when mapped to cpu),
    cpu and cpu:0 as no-ops.

    Args:
        device: the device (default torch.fl.device()); an int N means accN.

    Raises:
        DeviceNotFoundError: for an id that names no device of this machine.

    Example:
        >>> torch.fl.set_device("acc0")
    """
    dev = use_device(device)
    if dev.type == _HOST_TYPE:
        if dev.index not in (None, 0):
            named = f"'{device}'" + ("" if str(device) == str(dev) else f" ({dev})")
            raise DeviceNotFoundError(f"device {named} does not exist: the host CPU is one device, index 0. "
                                      f"Use 'cpu', 'cpu:0' or a virtual id mapped to cpu.")
        return
    device_calls.native("set_device", dev)


def synchronize(device: DeviceLike = None) -> None:
    """Wait until every queued kernel of `device` has finished (no-op where submission is sync).

    Args:
        device: the device (default torch.fl.device()).

    Example:
        >>> torch.fl.synchronize()
    """
    device_calls.synchronize(use_device(device))


# Memory -------------------------------------------------------------------------------------------
# Host memory facts (resident set, /proc/meminfo) live in hostmem; so does the watermark type.
_watermarks = hostmem.Watermarks()  # key -> highest memory_allocated seen since start or last reset


def _host_memory(dev: torch.device, desc: Description) -> bool:
    """Whether `dev`'s memory is the process's own (an emulated device counts its live tensors even
    when the chip it emulates shares host memory)."""
    return device_calls.is_host(desc) and not is_emulated(dev)


def _watermark_key(dev: torch.device, desc: Description) -> str:
    return "host" if _host_memory(dev, desc) else str(dev)


def _current_bytes(dev: torch.device, desc: Description) -> int:
    if _host_memory(dev, desc):
        return hostmem.process_rss()
    return int(device_calls.native("memory_allocated", dev))


def memory_allocated(device: DeviceLike = None) -> int:
    """Bytes of memory in use on `device`.

    Accelerators: bytes held by tensors (the allocator's count). Host CPU: the process's resident set
    (/proc/self/statm), which includes the interpreter, libraries and freed-but-cached memory; where
    /proc is missing (macOS) it is the process's peak resident set from getrusage.

    Args:
        device: the device (default torch.fl.device()).

    Example:
        >>> torch.fl.memory_allocated("cpu") > 0
        True
    """
    dev = use_device(device)
    desc = description_for(dev)
    current = _current_bytes(dev, desc)
    _watermarks.raise_to(_watermark_key(dev, desc), current)
    return current


def max_memory_allocated(device: DeviceLike = None) -> int:
    """Peak of memory_allocated(`device`) since process start or the last reset_peak_memory_stats.

    Accelerators with allocator statistics report the allocator's exact peak. Elsewhere (host CPU,
    backends without a peak counter) torch.fl keeps a watermark raised by every memory_allocated /
    max_memory_allocated call; on the host, until the first reset, the OS's lifetime peak resident
    set (getrusage ru_maxrss) is a floor, so spikes between calls are counted. After a reset the host
    peak is the highest value sampled by those calls.

    Args:
        device: the device (default torch.fl.device()).

    Example:
        >>> torch.fl.max_memory_allocated() >= torch.fl.memory_allocated()
        True
    """
    dev = use_device(device)
    desc = description_for(dev)
    key = _watermark_key(dev, desc)
    sampled = _watermarks.raise_to(key, _current_bytes(dev, desc))
    if _host_memory(dev, desc):
        return sampled if _watermarks.was_reset(key) else max(sampled, hostmem.os_peak_rss())
    return int(device_calls.native("max_memory_allocated", dev, fallback=lambda: sampled))


def reset_peak_memory_stats(device: DeviceLike = None) -> None:
    """Start a new peak: max_memory_allocated(`device`) drops to the memory in use now.

    Args:
        device: the device (default torch.fl.device()).

    Example:
        >>> torch.fl.reset_peak_memory_stats()
    """
    dev = use_device(device)
    desc = description_for(dev)
    key = _watermark_key(dev, desc)
    current = _current_bytes(dev, desc)
    _watermarks.reset(key, current)
    if not _host_memory(dev, desc):
        device_calls.native("reset_peak_memory_stats", dev, fallback=lambda: None)


def empty_cache(device: DeviceLike = None) -> None:
    """Return cached, unused allocator memory to the device (no-op where the description's
    memory.empty_cache is false, e.g. the host CPU, or where the runtime has no such call).

    Args:
        device: the device (default torch.fl.device()).

    Example:
        >>> torch.fl.empty_cache()
    """
    dev = use_device(device)
    if not description_for(dev).section("memory")["empty_cache"]:
        return
    device_calls.native("empty_cache", dev, fallback=lambda: None)


def _derived_memory_info(dev: torch.device, desc: Description) -> tuple[int, int]:
    module = device_calls.device_module(dev)
    total_fn = getattr(module, "recommended_max_memory", None)
    used_fn = getattr(module, "driver_allocated_memory", None)
    if callable(total_fn) and callable(used_fn):  # MPS: a budget within unified memory, not a card
        total = int(total_fn())
        return max(0, total - int(used_fn())), total
    if desc.section("memory")["allocator"] == "unified":
        return hostmem.memory_info()
    raise RuntimeUnsupportedError(f"torch.fl.mem_get_info({dev}): the '{desc.name}' backend reports no "
                                  f"free/total memory")


def mem_get_info(device: DeviceLike = None) -> tuple[int, int]:
    """(free, total) bytes of `device`'s memory.

    Host CPU: (MemAvailable, MemTotal) from /proc/meminfo, else os.sysconf page counts; these are the
    machine's figures, not a container's cgroup limit.

    Args:
        device: the device (default torch.fl.device()).

    Example:
        >>> free, total = torch.fl.mem_get_info()
    """
    dev = use_device(device)
    desc = description_for(dev)
    if device_calls.is_host(desc):
        return hostmem.memory_info()
    free, total = device_calls.native("mem_get_info", dev, fallback=lambda: _derived_memory_info(dev, desc))
    return int(free), int(total)


# Randomness and precision -------------------------------------------------------------------------
def manual_seed(seed: int, device: DeviceLike = None) -> torch.Generator:
    """Seed torch's generators on every device (CPU, CUDA, MPS, XPU, the vendor plugin).

    Python's `random` and NumPy are not seeded: torch.fl only owns torch's state.

    Args:
        seed: the seed.
        device: a device whose plugin must be imported (and seeded) first (default torch.fl.device()).

    Returns:
        The default CPU generator, as torch.manual_seed does.

    Example:
        >>> _ = torch.fl.manual_seed(0)
        >>> a = torch.randn(3); _ = torch.fl.manual_seed(0)
        >>> torch.equal(a, torch.randn(3))
        True
    """
    dev = use_device(device)
    generator = torch.manual_seed(seed)  # covers built-in backends and the registered PrivateUse1 one
    if dev.type != _HOST_TYPE:
        # A plugin module lacking torch's seeding hooks (_is_in_bad_fork) is skipped by torch.manual_seed.
        device_calls.native("manual_seed", dev, int(seed), fallback=lambda: None)
    return generator


def autocast(device: DeviceLike = None, dtype: torch.dtype | str | None = None, enabled: bool = True,
             cache_enabled: bool | None = None) -> torch.autocast:
    """A torch.autocast context for `device`, in the description's autocast dtype unless `dtype` is given.

    Args:
        device: the device (default torch.fl.device()).
        dtype: a torch.dtype or its name; default the description's precision.autocast_dtype
            (bfloat16 on cpu, float16 on cuda).
        enabled: False makes the context a no-op.
        cache_enabled: weight-cast cache, as torch.autocast (None: torch's default).

    Example:
        >>> with torch.fl.autocast("cpu"):
        ...     y = torch.ones(2, 2) @ torch.ones(2, 2)
        >>> y.dtype
        torch.bfloat16
    """
    dev = use_device(device)
    name = dtype if isinstance(dtype, str) else description_for(dev).autocast_dtype
    chosen = dtype if isinstance(dtype, torch.dtype) else getattr(torch, name, None)
    if not isinstance(chosen, torch.dtype):
        raise ValueError(f"torch.fl.autocast: '{name}' is not a torch dtype (examples: bfloat16, float16)")
    return torch.autocast(device_type=dev.type, dtype=chosen, enabled=enabled, cache_enabled=cache_enabled)


def dist_backend(device: DeviceLike = None) -> str:
    """The torch.distributed backend for `device` (the description's collectives.backend).

    Args:
        device: the device (default torch.fl.device()).

    Example:
        >>> torch.fl.dist_backend("cpu")
        'gloo'
    """
    dev = use_device(device)
    if is_emulated(dev):
        # gloo runs on the host data of emulated tensors (routing/emu/dist.py), whatever chip is emulated
        from .routing.emu import dist

        dist.register()
        return dist.backend_string()
    return description_for(dev).collective_backend


# Properties ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DeviceProperties:
    """What torch.fl.get_device_properties reports, the same fields on every backend.

    `total_memory` is bytes; `multi_processor_count` counts parallel compute units (CUDA SMs, XPU
    Xe-cores, Ascend cube cores, host logical CPUs; 0 when the runtime does not say); `description`
    is the name of the governing device description.
    """

    name: str
    type: str
    index: int
    total_memory: int
    multi_processor_count: int
    vendor: str
    description: str


def _compute_units(props: Any) -> int:
    for attr in _COMPUTE_UNIT_ATTRS:
        value = getattr(props, attr, None)
        if isinstance(value, int) and value > 0:
            return value
    return 0


def get_device_properties(device: DeviceLike = None) -> DeviceProperties:
    """Name, memory and compute-unit count of `device`.

    Args:
        device: the device (default torch.fl.device()).

    Example:
        >>> props = torch.fl.get_device_properties("cpu")
        >>> props.type, props.index
        ('cpu', 0)
    """
    dev = use_device(device)
    desc = description_for(dev)
    if dev.type == _HOST_TYPE:
        return DeviceProperties(hostmem.cpu_name(), dev.type, 0, hostmem.memory_info()[1], os.cpu_count() or 1,
                                desc.vendor, desc.name)
    index = dev.index if dev.index is not None else current_device(dev)
    props = device_calls.native("get_device_properties", dev, fallback=lambda: None)
    name = str(getattr(props, "name", "") or "")
    if not name:  # unified memory: the accelerator sits on the host's chip (Apple M-series)
        name = hostmem.cpu_name() if desc.section("memory")["allocator"] == "unified" else f"{desc.vendor} {dev.type}"
    total = int(getattr(props, "total_memory", 0) or 0)
    if not total:
        with contextlib.suppress(RuntimeUnsupportedError):
            total = mem_get_info(dev)[1]
    return DeviceProperties(name, dev.type, index, total, _compute_units(props), desc.vendor, desc.name)
