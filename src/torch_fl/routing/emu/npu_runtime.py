"""``torch_npu.npu.npurt()``: the emulated Ascend chip's runtime calls (torch_npu._C._npurt), as ACL answers them.

torch_npu exposes a few ACL runtime calls to Python for code that manages host memory and streams itself (vLLM's
pinned buffers): registering host memory with the device (``aclrtHostRegister``), creating and destroying raw
streams. Each returns ACL's status code, 0 on success. On the emulated chip the device's memory is host memory, so
a registration is bookkeeping: a range is registered (and can be unregistered once) when its pointer and size are
valid, as ACL checks them; a stream is a handle the emulator hands out. Invalid arguments give ACL's parameter
error, as on the chip.
"""

from __future__ import annotations

import ctypes
import itertools
import threading
from typing import Any

ACL_SUCCESS = 0
ACL_ERROR_INVALID_PARAM = 100000  # ACL's acl_base.h: the code an invalid argument gets
ACL_HOST_REG_MAPPED = 0x2
ACL_HOST_REG_PINNED = 0x10000000
_FLAGS = ACL_HOST_REG_MAPPED | ACL_HOST_REG_PINNED


class NpuRT:
    """The runtime calls object ``torch_npu.npu.npurt()`` returns (one per process)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._registered: dict[int, int] = {}  # host pointer -> bytes
        self._streams: set[int] = set()
        self._handles = itertools.count(0x1000, 0x10)  # (non-zero, aligned: ACL's handles are pointers)

    def npuHostRegister(self, ptr: int, size: int, flag: int) -> int:
        """Register `size` bytes of host memory at `ptr` with the device (flag: ACL_HOST_REG_PINNED and/or
        ACL_HOST_REG_MAPPED)."""
        ptr, size, flag = int(ptr), int(size), int(flag)
        if ptr == 0 or size <= 0 or flag == 0 or flag & ~_FLAGS:
            return ACL_ERROR_INVALID_PARAM
        with self._lock:
            if ptr in self._registered:
                return ACL_ERROR_INVALID_PARAM  # (registered already, as ACL refuses a second registration)
            self._registered[ptr] = size
        return ACL_SUCCESS

    def npuHostUnregister(self, ptr: int) -> int:
        """Unregister the host memory registered at `ptr`."""
        with self._lock:
            return ACL_SUCCESS if self._registered.pop(int(ptr), None) is not None else ACL_ERROR_INVALID_PARAM

    def npuStreamCreate(self, stream_ptr: int) -> int:
        """Create a stream and write its handle at address `stream_ptr` (an aclrtStream*)."""
        if int(stream_ptr) == 0:
            return ACL_ERROR_INVALID_PARAM
        with self._lock:
            handle = next(self._handles)
            self._streams.add(handle)
        ctypes.c_void_p.from_address(int(stream_ptr)).value = handle
        return ACL_SUCCESS

    def npuStreamDestroy(self, stream: int) -> int:
        """Destroy a stream npuStreamCreate made (the emulated device's work is ordered on the host: nothing waits)."""
        with self._lock:
            if int(stream) not in self._streams:
                return ACL_ERROR_INVALID_PARAM
            self._streams.discard(int(stream))
        return ACL_SUCCESS

    def registered(self) -> dict[int, int]:
        """The host ranges registered now (pointer -> bytes)."""
        with self._lock:
            return dict(self._registered)


_runtime: list[NpuRT] = []


def npurt() -> NpuRT:
    """The process's runtime calls object (the same one each call, as the vendor's)."""
    if not _runtime:
        _runtime.append(NpuRT())
    return _runtime[0]


def native_module() -> Any:
    """``torch_npu._C._npurt``: the binding module, whose ``npurt`` the device module's call returns."""
    import types

    module = types.ModuleType("torch_npu._C._npurt", "torch-fl's emulation of torch_npu's ACL runtime bindings")
    module.npurt = npurt  # type: ignore[attr-defined]
    module.NpuRT = NpuRT  # type: ignore[attr-defined]
    return module
