"""``torch.musa.memory`` and ``torch_musa.utils.musa_extension`` of the emulated MUSA chip.

``torch.musa.memory`` is torch_musa's copy of ``torch.cuda.memory``: the statistics calls (the emulator's own
counts, memory.py), ``_set_allocator_settings`` (PYTORCH_MUSA_ALLOC_CONF's syntax: recorded, memory.py) and memory
pools. A pool (``MemPool``) is a private allocator pool with an id; ``MemPoolContext`` makes one the active pool of
the calling thread until it is deleted, ``use_mem_pool`` for a ``with`` block. The emulated device's memory is the
host's, so a pool is bookkeeping: ids are unique and ordered as the vendor's (``graph_pool_handle`` draws from the
same counter), the active pool is thread-local, and allocations made under a pool are counted as the device's.
A pluggable allocator (``MUSAPluggableAllocator``) is a shared library of device malloc/free: it cannot allocate
the emulated device's (host) memory, and is refused.

``torch_musa.utils.musa_extension`` builds C++/MUSA extensions with the vendor's compiler: ``MUSA_HOME`` is the MUSA
toolkit found as the vendor looks for it (MUSA_HOME, MUSA_PATH, /usr/local/musa), None without one; building is
refused on the emulated chip (its device code would need the real GPU).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from typing import Any

from . import memory
from .graphs import graph_pool_handle
from .keyed import equal_by
from .vendor_module import device_index

_local = threading.local()


def _next_id() -> tuple[int, int]:
    return graph_pool_handle()  # (one counter for pools and graphs, as the vendor's)


@equal_by("id")
class MemPool:
    """A private memory pool of the emulated device: an id and an optional allocator (None: the device's own)."""

    def __init__(self, allocator: Any = None) -> None:
        self.allocator = allocator
        self.id = _next_id()

    def use_count(self) -> int:
        return 1

    def snapshot(self) -> list[Any]:
        return []

    def __repr__(self) -> str:
        return f"MemPool(id={self.id})"


class MemPoolContext:
    """Makes `pool` the calling thread's active pool until this context is deleted (then the previous one)."""

    def __init__(self, pool: MemPool | None) -> None:
        self._previous = getattr(_local, "pool", None)
        _local.pool = pool

    def __del__(self) -> None:
        _local.pool = self._previous

    @staticmethod
    def active_pool() -> MemPool | None:
        return getattr(_local, "pool", None)


@contextlib.contextmanager
def use_mem_pool(pool: MemPool, device: Any = None) -> Iterator[None]:
    """Allocate from `pool` inside the block (the calling thread's active pool)."""
    previous = getattr(_local, "pool", None)
    _local.pool = pool
    try:
        yield
    finally:
        _local.pool = previous


class MUSAPluggableAllocator:
    """Refused: a pluggable allocator is a shared library of device malloc/free (musaMalloc), and the emulated
    device's memory is the host's."""

    def __init__(self, path_to_so_file: str, alloc_fn_name: str, free_fn_name: str) -> None:
        raise NotImplementedError(
            "torch.musa.memory.MUSAPluggableAllocator is not emulated by torch-fl: its functions allocate MUSA device "
            "memory (musaMalloc) from a shared library, and the emulated device's memory is host memory. Run it on "
            "the real MUSA GPU")


def _set_allocator_settings(settings: str) -> None:
    memory.set_allocator_settings(settings)


def memory_allocated(device: Any = None) -> int:
    return memory.memory_allocated(device_index(device))


def max_memory_allocated(device: Any = None) -> int:
    return memory.max_memory_allocated(device_index(device))


def memory_stats(device: Any = None) -> dict[str, Any]:
    return memory.flat_stats(device_index(device))


def reset_peak_memory_stats(device: Any = None) -> None:
    memory.reset_peak_memory_stats(device_index(device))


def reset_accumulated_memory_stats(device: Any = None) -> None:
    memory.reset_accumulated_memory_stats(device_index(device))


def empty_cache() -> None:
    """Nothing is cached: freed device tensors return their host memory at once."""


memory_reserved = memory_allocated
max_memory_reserved = max_memory_allocated


def _find_musa_home() -> str | None:
    home = os.environ.get("MUSA_HOME") or os.environ.get("MUSA_PATH")
    if home:
        return home
    return "/usr/local/musa" if os.path.exists("/usr/local/musa") else None


MUSA_HOME = _find_musa_home()


def MUSAExtension(name: str, sources: Any, *args: Any, **kwargs: Any) -> Any:
    """Refused on the emulated chip: the extension's device code is compiled by the MUSA toolkit for the real GPU."""
    raise RuntimeError(f"torch_musa.utils.musa_extension.MUSAExtension('{name}') builds device code with the MUSA "
                       f"toolkit (MUSA_HOME={MUSA_HOME}) for the real MUSA GPU; the emulated chip runs no compiled "
                       f"device code. Build and run the extension on the real GPU")


def device_module_calls() -> dict[str, Any]:
    """What torch_musa adds to torch.musa: the memory module and its pools."""
    import types

    module = types.ModuleType("torch.musa.memory", __doc__)
    for name in ("MemPool", "MemPoolContext", "use_mem_pool", "MUSAPluggableAllocator", "_set_allocator_settings",
                 "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved", "memory_stats",
                 "reset_peak_memory_stats", "reset_accumulated_memory_stats", "empty_cache", "graph_pool_handle"):
        setattr(module, name, globals()[name])
    return {"memory": module, "MemPool": MemPool, "MemPoolContext": MemPoolContext, "use_mem_pool": use_mem_pool,
            "graph_pool_handle": graph_pool_handle}


__all__ = ["MUSA_HOME", "MUSAExtension"]
