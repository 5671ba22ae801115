"""Memory of the emulated devices: live and peak bytes of device storage per device, and the copies
and syncs between host and device."""

from __future__ import annotations

import weakref
from typing import Any

import torch

from .slot import state

_tracked: dict[int, Any] = {}  # data pointer -> weak reference of each storage counted in state.live


def _allocated(data: torch.Tensor, index: int) -> None:
    """Count a new storage as live on `index` until PyTorch frees it (its Python storage object lives as
    long as the storage). Sparse tensors (sparse gradients) have no storage of their own and are not
    counted."""
    try:
        storage = data.untyped_storage()
    except RuntimeError:  # (a try costs nothing when nothing is raised)
        return
    size = storage.nbytes()
    key = storage.data_ptr()
    if not size or key in _tracked:
        return

    def freed(_ref: Any) -> None:  # (the callback itself: one frame per free)
        _tracked.pop(key, None)
        state.live[index] -= size

    _tracked[key] = weakref.ref(storage, freed)
    live = state.live
    live[index] += size
    if live[index] > state.peak[index]:
        state.peak[index] = live[index]


def resized(storage: torch.UntypedStorage, old_key: int, old_size: int, index: int) -> None:
    """Count `storage` (a host storage resized in place from `old_size` bytes at `old_key`) at its new size:
    ``storage.resize_(0)`` frees device memory, as FSDP2 expects of ``memory_allocated()``."""
    ref = _tracked.get(old_key)
    if ref is not None and ref() is storage:
        # dropping the weak reference drops its callback, which would subtract the old size at the free
        del _tracked[old_key]
        state.live[index] -= old_size
    size, key = storage.nbytes(), storage.data_ptr()
    if not size or key in _tracked:
        return

    def freed(_ref: Any) -> None:
        _tracked.pop(key, None)
        state.live[index] -= size

    _tracked[key] = weakref.ref(storage, freed)
    state.live[index] += size
    if state.live[index] > state.peak[index]:
        state.peak[index] = state.live[index]


def memory_allocated(index: int) -> int:
    """Bytes of live tensor storage on emu:`index`."""
    return state.live[index] if index < len(state.live) else 0


def max_memory_allocated(index: int) -> int:
    return state.peak[index] if index < len(state.peak) else 0


def reset_peak_memory_stats(index: int) -> None:
    if index < len(state.peak):
        state.peak[index] = state.live[index]


def stats(index: int) -> dict[str, Any]:
    """CUDA's statistics layout of device `index`'s counts (torch.accelerator.memory_stats flattens it to
    'allocated_bytes.all.current' and so on): nothing is cached on the emulated device, so reserved equals
    allocated."""
    counts = {"all": {"current": memory_allocated(index), "peak": max_memory_allocated(index)}}
    return {"allocated_bytes": counts, "reserved_bytes": counts, "active_bytes": counts,
            "requested_bytes": counts, "num_alloc_retries": 0, "num_ooms": 0}


def flat_stats(index: int) -> dict[str, int]:
    """``torch.<chip>.memory_stats()``: `stats` flattened as PyTorch flattens CUDA's."""
    flat: dict[str, int] = {}
    for key, value in stats(index).items():
        if isinstance(value, dict):
            for pool, counts in value.items():
                for kind, number in counts.items():
                    flat[f"{key}.{pool}.{kind}"] = number
        else:
            flat[key] = value
    return dict(sorted(flat.items()))


def transfers() -> dict[str, int]:
    """Host-device copies and syncs so far on the emulated devices."""
    return {"h2d_bytes": state.h2d_bytes, "h2d_calls": state.h2d_calls, "d2h_bytes": state.d2h_bytes,
            "d2h_calls": state.d2h_calls, "syncs": state.syncs}


def reset_transfers() -> None:
    state.h2d_bytes = state.h2d_calls = state.d2h_bytes = state.d2h_calls = state.syncs = 0



def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()
