"""The unified runtime facade: ``torch.cuda``-style calls for whichever device torch.fl names.

Every function takes an optional ``device`` (a virtual id ``acc0``, a physical name ``cuda:1``, an
int ``N`` meaning ``accN``, a ``torch.device``, or None for ``torch.fl.device()``) and routes it:

1. Facts about the device come from its description: a host allocator means "report process
   memory", sync submission means "synchronize is a no-op and host timing is exact", ``streams = false``
   means "one queue: streams are host objects", and so on.
2. Otherwise the call goes to ``torch.accelerator`` when it has the function and the device is the
   current accelerator (torch >= 2.6), then to the device module ``getattr(torch, device_type)``
   (torch.cuda, torch.xpu, torch.mps, torch.npu once torch_npu is imported, ...). ``_ROUTES`` is the
   table of candidate names; the first that exists and does not raise wins.

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
import functools
import inspect
import logging
import os
import platform
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any, TypeAlias

import torch

from . import plugins
from .description.model import Description
from .device import description_for, device_map, resolve
from .errors import DeviceNotFoundError, PluginImportError, TorchFLError

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

# Facade call -> (torch.accelerator attribute or None, device-module attributes in preference order).
# Names differ across modules (torch.mps.current_allocated_memory is torch.cuda.memory_allocated).
_ROUTES: dict[str, tuple[str | None, tuple[str, ...]]] = {
    "is_available": ("is_available", ("is_available",)),
    "device_count": ("device_count", ("device_count",)),
    "current_device": ("current_device_index", ("current_device",)),
    "set_device": ("set_device_index", ("set_device",)),
    "synchronize": ("synchronize", ("synchronize",)),
    "memory_allocated": ("memory_allocated", ("memory_allocated", "current_allocated_memory")),
    "max_memory_allocated": ("max_memory_allocated", ("max_memory_allocated",)),
    "reset_peak_memory_stats": ("reset_peak_memory_stats", ("reset_peak_memory_stats",)),
    "empty_cache": ("empty_cache", ("empty_cache",)),
    "mem_get_info": ("get_memory_info", ("mem_get_info",)),
    "manual_seed": (None, ("manual_seed_all", "manual_seed")),
    "get_device_properties": (None, ("get_device_properties",)),
}

# Property names that count a device's parallel compute units (CUDA SMs, XPU Xe-cores, Ascend cubes).
_COMPUTE_UNIT_ATTRS = ("multi_processor_count", "gpu_subslice_count", "max_compute_units", "cube_core_num")

# What a stream or event object must offer to stand in for torch.fl.Stream / torch.fl.Event.
_STREAM_METHODS = ("synchronize", "query", "wait_stream", "wait_event", "record_event")
_EVENT_METHODS = ("record", "synchronize", "query", "wait", "elapsed_time")


class RuntimeUnsupportedError(TorchFLError, NotImplementedError):
    """The device's torch module offers nothing that implements a runtime call."""


# Routing ------------------------------------------------------------------------------------------
def _is_host(desc: Description) -> bool:
    return desc.section("memory")["allocator"] == "host"


def _is_sync(desc: Description) -> bool:
    return desc.section("streams")["submission"] == "sync"


def _device_module(dev: torch.device) -> ModuleType | None:
    desc = description_for(dev)
    if desc.device_type == dev.type:
        plugins.import_plugin(desc)  # torch.npu and friends exist only once their plugin is imported
    return getattr(torch, dev.type, None)


def _accelerator(dev: torch.device) -> ModuleType | None:
    """torch.accelerator when it speaks for `dev` (its calls act on the current accelerator only)."""
    acc = getattr(torch, "accelerator", None)
    current = getattr(acc, "current_accelerator", None)
    if current is None:
        return None
    found = current()
    return acc if found is not None and found.type == dev.type else None


def _candidates(name: str, dev: torch.device) -> list[tuple[str, Callable[..., Any]]]:
    acc_attr, module_attrs = _ROUTES[name]
    found: list[tuple[str, Callable[..., Any]]] = []
    acc = _accelerator(dev) if acc_attr else None
    if acc is not None and callable(getattr(acc, acc_attr, None)):
        found.append((f"torch.accelerator.{acc_attr}", getattr(acc, acc_attr)))
    module = _device_module(dev)
    for attr in module_attrs:
        fn = getattr(module, attr, None)
        if callable(fn):
            found.append((f"torch.{dev.type}.{attr}", fn))
    return found


@functools.lru_cache(maxsize=256)
def _positional_slots(fn: Callable[..., Any]) -> int | None:
    """How many positional arguments `fn` takes (None: unknown or unbounded)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None  # builtins without a signature: assume they take the device like torch.cuda's
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return None
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)


def _invoke(fn: Callable[..., Any], dev: torch.device, args: tuple[Any, ...]) -> Any:
    # torch.mps.synchronize() and torch.mps.current_allocated_memory() take no device: MPS has one.
    slots = _positional_slots(fn)
    return fn(*args, dev) if slots is None or slots > len(args) else fn(*args)


_MISSING: Any = object()


def _native(name: str, dev: torch.device, *args: Any, fallback: Callable[[], Any] = _MISSING) -> Any:
    """Call the first candidate of `name` that works; `fallback()` when none exists or all fail."""
    first_error: Exception | None = None
    for label, fn in _candidates(name, dev):
        try:
            return _invoke(fn, dev, args)
        except (RuntimeError, NotImplementedError, TypeError, AttributeError) as exc:
            # torch.accelerator may have a function the backend's allocator does not implement.
            _log.debug("%s(%s) raised %s: %s; trying the next candidate", label, dev, type(exc).__name__, exc)
            first_error = first_error or exc
    if fallback is not _MISSING:
        return fallback()
    if first_error is not None:
        raise first_error
    acc_attr, module_attrs = _ROUTES[name]
    looked = ([f"torch.accelerator.{acc_attr}"] if acc_attr else []) + [f"torch.{dev.type}.{a}" for a in module_attrs]
    raise RuntimeUnsupportedError(
        f"torch.fl.{name}({dev}): the '{description_for(dev).name}' backend offers none of "
        f"{', '.join(looked)}. Update its plugin, or use a description whose [memory]/[streams] "
        f"sections say the call is unneeded.")


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
        dev = resolve(device)
    except DeviceNotFoundError:
        return False
    if dev.type == _HOST_TYPE:
        return True
    try:
        return bool(_native("is_available", dev, fallback=lambda: False))
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
    dev = resolve(device)
    if dev.type == _HOST_TYPE:
        return max(1, sum(d.type == _HOST_TYPE for d in device_map().values()))
    return int(_native("device_count", dev))


def current_device(device: DeviceLike = None) -> int:
    """The physical index of the current device of `device`'s type (as torch.cuda.current_device).

    The host is always 0: every virtual id mapped to cpu shares the one process.

    Args:
        device: any device of the type to ask about (default torch.fl.device()).

    Example:
        >>> torch.fl.current_device("cpu")
        0
    """
    dev = resolve(device)
    if dev.type == _HOST_TYPE:
        return 0
    return int(_native("current_device", dev))


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
    dev = resolve(device)
    if dev.type == _HOST_TYPE:
        if dev.index not in (None, 0):
            named = f"'{device}'" + ("" if str(device) == str(dev) else f" ({dev})")
            raise DeviceNotFoundError(f"device {named} does not exist: the host CPU is one device, index 0. "
                                      f"Use 'cpu', 'cpu:0' or a virtual id mapped to cpu.")
        return
    _native("set_device", dev)


def synchronize(device: DeviceLike = None) -> None:
    """Wait until every queued kernel of `device` has finished (no-op where submission is sync).

    Args:
        device: the device (default torch.fl.device()).

    Example:
        >>> torch.fl.synchronize()
    """
    dev = resolve(device)
    if _is_sync(description_for(dev)):
        return
    _native("synchronize", dev)


# Memory -------------------------------------------------------------------------------------------
_mem_lock = threading.Lock()
_watermarks: dict[str, int] = {}  # key -> highest memory_allocated seen since start or last reset
_reset_keys: set[str] = set()  # keys whose peak was reset: the OS lifetime peak no longer bounds them


def _page_size() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 4096


def _os_peak_rss() -> int:
    """The process's lifetime peak resident set (0 where the OS does not say)."""
    try:
        import resource
    except ImportError:  # Windows
        return 0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # macOS reports bytes, Linux/BSD KiB


def _process_rss() -> int:
    """The process's resident set now; the lifetime peak where /proc is missing (macOS)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * _page_size()
    except (OSError, ValueError, IndexError):
        return _os_peak_rss()


def _meminfo() -> dict[str, int]:
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


def _host_memory_info() -> tuple[int, int]:
    info = _meminfo()
    if "MemTotal" in info and "MemAvailable" in info:
        return info["MemAvailable"], info["MemTotal"]
    try:
        total = os.sysconf("SC_PHYS_PAGES") * _page_size()
    except (ValueError, OSError, AttributeError):
        return 0, 0
    try:
        free = os.sysconf("SC_AVPHYS_PAGES") * _page_size()
    except (ValueError, OSError, AttributeError):
        free = max(0, total - _process_rss())  # macOS has no available-pages count
    return min(free, total), total


def _watermark_key(dev: torch.device, desc: Description) -> str:
    return "host" if _is_host(desc) else str(dev)


def _raise_watermark(key: str, value: int) -> int:
    with _mem_lock:
        peak = max(_watermarks.get(key, 0), value)
        _watermarks[key] = peak
        return peak


def _current_bytes(dev: torch.device, desc: Description) -> int:
    if _is_host(desc):
        return _process_rss()
    return int(_native("memory_allocated", dev))


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
    dev = resolve(device)
    desc = description_for(dev)
    current = _current_bytes(dev, desc)
    _raise_watermark(_watermark_key(dev, desc), current)
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
    dev = resolve(device)
    desc = description_for(dev)
    key = _watermark_key(dev, desc)
    sampled = _raise_watermark(key, _current_bytes(dev, desc))
    if _is_host(desc):
        with _mem_lock:
            lifetime = key not in _reset_keys
        return max(sampled, _os_peak_rss()) if lifetime else sampled
    return int(_native("max_memory_allocated", dev, fallback=lambda: sampled))


def reset_peak_memory_stats(device: DeviceLike = None) -> None:
    """Start a new peak: max_memory_allocated(`device`) drops to the memory in use now.

    Args:
        device: the device (default torch.fl.device()).

    Example:
        >>> torch.fl.reset_peak_memory_stats()
    """
    dev = resolve(device)
    desc = description_for(dev)
    key = _watermark_key(dev, desc)
    current = _current_bytes(dev, desc)
    with _mem_lock:
        _watermarks[key] = current
        _reset_keys.add(key)
    if not _is_host(desc):
        _native("reset_peak_memory_stats", dev, fallback=lambda: None)


def empty_cache(device: DeviceLike = None) -> None:
    """Return cached, unused allocator memory to the device (no-op where the description's
    memory.empty_cache is false, e.g. the host CPU, or where the runtime has no such call).

    Args:
        device: the device (default torch.fl.device()).

    Example:
        >>> torch.fl.empty_cache()
    """
    dev = resolve(device)
    if not description_for(dev).section("memory")["empty_cache"]:
        return
    _native("empty_cache", dev, fallback=lambda: None)


def _derived_memory_info(dev: torch.device, desc: Description) -> tuple[int, int]:
    module = _device_module(dev)
    total_fn = getattr(module, "recommended_max_memory", None)
    used_fn = getattr(module, "driver_allocated_memory", None)
    if callable(total_fn) and callable(used_fn):  # MPS: a budget within unified memory, not a card
        total = int(total_fn())
        return max(0, total - int(used_fn())), total
    if desc.section("memory")["allocator"] == "unified":
        return _host_memory_info()
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
    dev = resolve(device)
    desc = description_for(dev)
    if _is_host(desc):
        return _host_memory_info()
    free, total = _native("mem_get_info", dev, fallback=lambda: _derived_memory_info(dev, desc))
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
    dev = resolve(device)
    generator = torch.manual_seed(seed)  # covers built-in backends and the registered PrivateUse1 one
    if dev.type != _HOST_TYPE:
        # A plugin module lacking torch's seeding hooks (_is_in_bad_fork) is skipped by torch.manual_seed.
        _native("manual_seed", dev, int(seed), fallback=lambda: None)
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
    dev = resolve(device)
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
    return description_for(resolve(device)).collective_backend


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


def _host_cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and value.strip():
                    return value.strip()
    except OSError:
        pass
    capabilities = getattr(torch.cpu, "get_capabilities", None)  # torch >= 2.8; names Apple chips
    if capabilities is not None:
        with contextlib.suppress(Exception):
            name = str(capabilities().get("cpu_name", ""))
            if name:
                return name
    return platform.processor() or platform.machine() or "cpu"


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
    dev = resolve(device)
    desc = description_for(dev)
    if dev.type == _HOST_TYPE:
        return DeviceProperties(_host_cpu_name(), dev.type, 0, _host_memory_info()[1], os.cpu_count() or 1,
                                desc.vendor, desc.name)
    index = dev.index if dev.index is not None else current_device(dev)
    props = _native("get_device_properties", dev, fallback=lambda: None)
    name = str(getattr(props, "name", "") or "")
    if not name:  # unified memory: the accelerator sits on the host's chip (Apple M-series)
        name = _host_cpu_name() if desc.section("memory")["allocator"] == "unified" else f"{desc.vendor} {dev.type}"
    total = int(getattr(props, "total_memory", 0) or 0)
    if not total:
        with contextlib.suppress(RuntimeUnsupportedError):
            total = mem_get_info(dev)[1]
    return DeviceProperties(name, dev.type, index, total, _compute_units(props), desc.vendor, desc.name)


# Streams and events -------------------------------------------------------------------------------
def _construct(cls: Callable[..., Any], **kwargs: Any) -> Any:
    """cls(**kwargs) without the keywords it does not accept (torch.mps.Event takes enable_timing only)."""
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return cls(**kwargs)
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return cls(**kwargs)
    dropped = {k: v for k, v in kwargs.items() if k not in params}
    if dropped:
        _log.debug("%s ignores %s", getattr(cls, "__qualname__", cls), dropped)
    return cls(**{k: v for k, v in kwargs.items() if k in params})


def _has_methods(obj: Any, names: tuple[str, ...]) -> bool:
    return all(callable(getattr(obj, name, None)) for name in names)


class _Structural(type):
    """isinstance() by capability, so native streams/events (torch.cuda.Event, torch.Stream, ...) that
    torch.fl.Stream / torch.fl.Event return also count as instances."""

    _methods: tuple[str, ...] = ()

    def __instancecheck__(cls, obj: Any) -> bool:
        return type.__instancecheck__(cls, obj) or (cls._methods != () and _has_methods(obj, cls._methods))


def _native_stream(dev: torch.device, priority: int) -> Any:
    if not description_for(dev).section("streams")["streams"]:
        return None
    module_cls = getattr(_device_module(dev), "Stream", None)
    if module_cls is not None and _has_methods(module_cls, _STREAM_METHODS):
        return _construct(module_cls, device=dev, priority=priority)
    generic = getattr(torch, "Stream", None)
    return generic(device=dev, priority=priority) if generic is not None else None


class Stream(metaclass=_Structural):
    """A queue of work on a device: torch.cuda.Stream-style.

    Where the description says the device has streams, this returns the native object (the device
    module's Stream, else torch.Stream), so there is no wrapper on the hot path. Otherwise (host CPU,
    single-queue devices such as MPS) it returns a host stream: work on it is already ordered, so
    wait_* are no-ops and synchronize()/query() synchronize the device.

    Args:
        device: the device (default torch.fl.device()).
        priority: stream priority, passed to native streams (lower is higher priority on CUDA).

    Example:
        >>> s = torch.fl.Stream()
        >>> with torch.fl.stream(s):
        ...     y = torch.ones(4) * 2
        >>> s.synchronize()
    """

    _methods = _STREAM_METHODS
    device: torch.device
    priority: int

    def __new__(cls, device: DeviceLike = None, priority: int = 0) -> Stream:
        dev = resolve(device)
        if cls is Stream:
            native = _native_stream(dev, priority)
            if native is not None:
                return native
        obj = super().__new__(cls)
        obj.device, obj.priority = dev, priority
        return obj

    def query(self) -> bool:
        """True: a host stream's work is done once synchronize returns (it blocks on async devices)."""
        synchronize(self.device)
        return True

    def synchronize(self) -> None:
        synchronize(self.device)

    def wait_stream(self, stream: Any) -> None:
        """No-op: a single queue is already ordered."""

    def wait_event(self, event: Any) -> None:
        """No-op: a single queue is already ordered."""

    def record_event(self, event: Any = None) -> Any:
        """Record `event` (a new torch.fl.Event when None) on this stream and return it."""
        event = event if event is not None else Event(device=self.device)
        event.record(self)
        return event

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def __repr__(self) -> str:
        return f"torch.fl.Stream(device={self.device}, host)"


def _native_event(dev: torch.device, enable_timing: bool, blocking: bool, interprocess: bool) -> Any:
    streams = description_for(dev).section("streams")
    if streams["submission"] == "sync" or not streams["events"]:
        return None  # host clock: exact for sync devices; the only clock where events are missing
    module_cls = getattr(_device_module(dev), "Event", None)
    if module_cls is not None and _has_methods(module_cls, _EVENT_METHODS):
        return _construct(module_cls, enable_timing=enable_timing, blocking=blocking, interprocess=interprocess)
    generic = getattr(torch, "Event", None)
    if generic is None:
        return None
    return generic(device=dev, enable_timing=enable_timing, blocking=blocking, interprocess=interprocess)


class Event(metaclass=_Structural):
    """A marker in a device's queue, for timing and synchronisation: torch.cuda.Event-style.

    On async devices with events this returns the native object (the device module's Event, else
    torch.Event). On the host (sync submission) or where the description says events = false, it
    returns a host event: record() reads time.perf_counter_ns() (after synchronizing an async device,
    so the time is when queued work finished) and elapsed_time() is milliseconds between two records.

    Args:
        enable_timing: whether elapsed_time may be used (required, as on CUDA, so code tested on the
            CPU behaves the same on a GPU).
        blocking: passed to native events that accept it.
        interprocess: passed to native events that accept it.
        device: the device (default torch.fl.device()).

    Example:
        >>> start, end = torch.fl.Event(enable_timing=True), torch.fl.Event(enable_timing=True)
        >>> start.record(); y = torch.ones(256, 256) @ torch.ones(256, 256); end.record()
        >>> end.synchronize()
        >>> start.elapsed_time(end) >= 0
        True
    """

    _methods = _EVENT_METHODS
    device: torch.device
    enable_timing: bool
    _wait_for_device: bool
    _recorded_ns: int | None

    def __new__(cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False, *,
                device: DeviceLike = None) -> Event:
        dev = resolve(device)
        if cls is Event:
            native = _native_event(dev, enable_timing, blocking, interprocess)
            if native is not None:
                return native
        obj = super().__new__(cls)
        obj.device, obj.enable_timing, obj._recorded_ns = dev, enable_timing, None
        # Decided once: record() is inside timed regions, where a description lookup would be noise.
        obj._wait_for_device = not _is_sync(description_for(dev))
        return obj

    def record(self, stream: Any = None) -> None:
        """Mark now (after the device's queued work, on async devices)."""
        if self._wait_for_device:
            synchronize(self.device)
        self._recorded_ns = time.perf_counter_ns()

    def query(self) -> bool:
        """True: host events complete when record() returns."""
        return True

    def synchronize(self) -> None:
        """No-op: record() already waited."""

    def wait(self, stream: Any = None) -> None:
        """No-op: record() already waited."""

    def elapsed_time(self, end_event: Event) -> float:
        """Milliseconds from this event's record() to `end_event`'s.

        Raises:
            RuntimeError: when either event lacks enable_timing=True or was never recorded.
        """
        end_ns = getattr(end_event, "_recorded_ns", _MISSING)
        if end_ns is _MISSING:
            raise TypeError(f"elapsed_time needs another host torch.fl.Event, got {type(end_event).__name__}")
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("elapsed_time needs both events created with enable_timing=True")
        if self._recorded_ns is None or end_ns is None:
            raise RuntimeError("elapsed_time needs both events to be recorded first (call record())")
        return (end_ns - self._recorded_ns) / 1e6

    def __repr__(self) -> str:
        state = "recorded" if self._recorded_ns is not None else "not recorded"
        return f"torch.fl.Event(device={self.device}, host, {state})"


def stream(stream: Any) -> contextlib.AbstractContextManager[Any]:
    """Context manager that makes `stream` current for its device (no-op for None and host streams).

    Args:
        stream: a torch.fl.Stream (native or host) or None.

    Example:
        >>> with torch.fl.stream(torch.fl.Stream()):
        ...     pass
    """
    if stream is None or type.__instancecheck__(Stream, stream):
        return contextlib.nullcontext(stream)
    dev = getattr(stream, "device", None)
    dev_type = dev.type if isinstance(dev, torch.device) else getattr(stream, "device_type", None)
    module_ctx = getattr(getattr(torch, str(dev_type), None), "stream", None)
    if callable(module_ctx):
        return module_ctx(stream)
    if hasattr(stream, "__enter__"):
        return stream  # torch.Stream is its own context manager
    return _set_stream_context(stream)


@contextlib.contextmanager
def _set_stream_context(native: Any) -> Iterator[Any]:
    acc = getattr(torch, "accelerator", None)
    if acc is None or not hasattr(acc, "set_stream"):
        raise RuntimeUnsupportedError(f"torch.fl.stream: cannot make {native!r} current on torch "
                                      f"{torch.__version__}")
    previous = acc.current_stream(native.device)
    acc.set_stream(native)
    try:
        yield native
    finally:
        acc.set_stream(previous)
