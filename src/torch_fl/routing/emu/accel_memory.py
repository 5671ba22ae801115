"""``torch.accelerator``'s memory API on the emulated device.

PyTorch's ``torch.accelerator.memory_allocated()`` / ``memory_stats()`` / ``empty_cache()`` /
``reset_peak_memory_stats()`` / ``get_memory_info()`` ask the current accelerator's C++ DeviceAllocator.
The emulated device (PrivateUse1, registered from Python) has none, so each of them stopped with
PyTorch's "INTERNAL ASSERT FAILED ... Allocator for emu is not a DeviceAllocator" (accelerate 1.16's
``Accelerator()`` calls ``torch.accelerator.empty_cache()`` on the device it picks). The Python functions
look up their ``torch._C._accelerator_*`` entry points at call time, so those entry points are wrapped:
while the current accelerator is the emulated device they answer from the emulator's own counts (live
and peak tensor bytes, memory.py; free/total from host memory, module.py), the same numbers
``torch.npu.memory_allocated()`` and ``torch.fl.memory_allocated()`` give; any other accelerator gets
PyTorch's functions untouched.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from . import memory
from .slot import backend_name

_WRAPPED: dict[str, Callable[..., Any]] = {}  # entry point name -> PyTorch's original


def _emulated() -> bool:
    """Whether torch.accelerator's current accelerator is the emulated device."""
    current = torch._C._accelerator_getAccelerator()
    return current is not None and current.type == backend_name()


def _index(device_index: Any) -> int:
    return torch._C._accelerator_getDeviceIndex() if device_index is None or device_index < 0 else device_index


def _stats(device_index: Any) -> dict[str, Any]:
    return memory.stats(_index(device_index))


def _memory_info(device_index: Any) -> tuple[int, int]:
    from .module import _BackendModule

    return _BackendModule.mem_get_info(_index(device_index))


def _reset_peak(device_index: Any) -> None:
    memory.reset_peak_memory_stats(_index(device_index))


_EMULATED: dict[str, Callable[..., Any]] = {
    "_accelerator_isAllocatorInitialized": lambda: True,
    "_accelerator_emptyCache": lambda: None,  # freed device tensors return their host memory at once
    "_accelerator_getDeviceStats": _stats,
    "_accelerator_resetAccumulatedStats": lambda device_index: None,
    "_accelerator_resetPeakStats": _reset_peak,
    "_accelerator_getMemoryInfo": _memory_info,
}


def _wrap(name: str, emulated: Callable[..., Any]) -> Callable[..., Any]:
    original = getattr(torch._C, name)

    def entry(*args: Any) -> Any:
        return emulated(*args) if _emulated() else original(*args)

    entry.__name__ = entry.__qualname__ = name
    entry.__doc__ = f"{original.__doc__ or name} (torch-fl: the emulated device answers from its own counts)"
    return entry


def install() -> None:
    """Wrap the entry points (once per process: the emulated backend is registered once)."""
    for name, emulated in _EMULATED.items():
        if name in _WRAPPED or not hasattr(torch._C, name):  # (an older torch without the API: nothing)
            continue
        _WRAPPED[name] = getattr(torch._C, name)
        setattr(torch._C, name, _wrap(name, emulated))
