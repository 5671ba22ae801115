"""Memory of the emulated devices: live and peak bytes of device storage per device, and the copies
and syncs between host and device."""

from __future__ import annotations

import weakref
from typing import Any

import torch

from .slot import state

_tracked: dict[int, Any] = {}  # data pointer -> weak reference of each storage counted in state.live

# The caching allocator's settings (``torch_npu._C._npu_npuCachingAllocator_set_allocator_settings``, the
# PYTORCH_NPU_ALLOC_CONF syntax "key:value,key:value"). Recorded; two change what the emulated device does:
# throw_on_npumalloc_oom with per_process_memory_fraction rejects an allocation that would take the device's
# live bytes over fraction * total memory, with torch.OutOfMemoryError, counted as num_oom_rejections.
ALLOCATOR_DEFAULTS: dict[str, Any] = {
    # the vendor's own keys (torch_npu NPUAllocatorConfig.h getKeys)
    "pin_memory_expandable_segments": False, "pinned_mem_register": False, "base_addr_aligned_kb": 16,
    "page_size": "default", "segment_size_mb": 0, "multi_stream_lazy_reclaim": False,
    "pinned_reserve_segment_size_mb": 0, "per_process_memory_fraction": 1.0, "release_lock_on_npumalloc": False,
    "throw_on_npumalloc_oom": False,
    # PyTorch's own (c10 AcceleratorAllocatorConfig), which the vendor's parser hands on
    "max_split_size_mb": None, "max_non_split_rounding_mb": None, "garbage_collection_threshold": 0.0,
    "roundup_power2_divisions": None, "expandable_segments": False, "pinned_use_background_threads": False,
    "pinned_num_register_threads": 1, "pinned_max_register_threads": 128, "pinned_max_cached_size_mb": None,
}
_BOOLEAN_SETTINGS = frozenset(k for k, v in ALLOCATOR_DEFAULTS.items() if isinstance(v, bool))
allocator_settings: dict[str, Any] = dict(ALLOCATOR_DEFAULTS)
_oom_rejections: dict[int, int] = {}
_limit: list[float] = []  # [fraction] while allocations are checked against the device's memory


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
    if _limit:
        _check_limit(index, size)

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


def _check_limit(index: int, size: int) -> None:
    """throw_on_npumalloc_oom: refuse an allocation that takes device `index` over its share of memory."""
    from ...hostmem import memory_info

    total = memory_info()[1]
    allowed = int(_limit[0] * total)
    live = state.live[index]
    if live + size > allowed:
        _oom_rejections[index] = _oom_rejections.get(index, 0) + 1
        raise torch.OutOfMemoryError(
            f"NPU out of memory (rejected by throw_on_npumalloc_oom). Tried to allocate {size / 2**20:.2f} MiB; "
            f"{live / 2**20:.2f} MiB already allocated, per_process_memory_fraction {_limit[0]} allows "
            f"{allowed / 2**20:.2f} MiB of the emulated device's {total / 2**30:.2f} GiB (host memory)")


def set_allocator_settings(text: str) -> None:
    """Parse and record "key:value,key:value" (the vendor's allocator configuration syntax); a key or value the
    vendor refuses is refused with an error naming it."""
    pairs = [item for item in str(text).replace(" ", "").split(",") if item]
    parsed: dict[str, Any] = {}
    for item in pairs:
        key, sep, value = item.partition(":")
        if not sep or not value:
            raise RuntimeError(f"Error, expecting {key} value (allocator settings are 'key:value,key:value', got "
                               f"'{item}')")
        if key not in ALLOCATOR_DEFAULTS:
            raise RuntimeError(f"Unrecognized key '{key}' in Accelerator allocator config (known: "
                               f"{', '.join(sorted(ALLOCATOR_DEFAULTS))})")
        if key in _BOOLEAN_SETTINGS:
            if value not in ("True", "False"):
                raise RuntimeError(f"Expected a single True/False argument for {key}")
            parsed[key] = value == "True"
        elif key in ("per_process_memory_fraction", "garbage_collection_threshold"):
            try:
                number = float(value)
            except ValueError:
                raise RuntimeError(f"Error, expecting {key} value") from None
            if not 0.0 <= number <= 1.0:
                raise RuntimeError(f"{key} is invalid, set it in [0.0, 1.0]")
            parsed[key] = number
        elif key == "page_size":
            parsed[key] = value
        else:
            try:
                parsed[key] = int(value)
            except ValueError:
                raise RuntimeError(f"Error, expecting {key} value (an integer)") from None
    allocator_settings.update(parsed)
    _limit[:] = [allocator_settings["per_process_memory_fraction"]] if allocator_settings["throw_on_npumalloc_oom"] \
        else []


def set_per_process_memory_fraction(fraction: float, index: int) -> None:
    """``torch.<chip>.set_per_process_memory_fraction``: the share of the device's memory the allocator may take
    (checked where throw_on_npumalloc_oom is set, as the vendor's allocator does before calling the driver)."""
    if not isinstance(fraction, float):
        raise TypeError("Invalid type for fraction argument, must be `float`")
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
    allocator_settings["per_process_memory_fraction"] = fraction
    if _limit:
        _limit[:] = [fraction]


def reset_accumulated_memory_stats(index: int) -> None:
    """Zero the accumulated counters (the OOM rejections) of device `index`."""
    _oom_rejections.pop(index, None)


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
            "requested_bytes": counts, "num_alloc_retries": 0, "num_ooms": 0,
            "num_oom_rejections": _oom_rejections.get(index, 0)}


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
    """Host-device copies and syncs so far on the emulated devices, and the optimizer steps they span (syncs
    per step = syncs / steps; their source lines: bench, grade and profile)."""
    return {"h2d_bytes": state.h2d_bytes, "h2d_calls": state.h2d_calls, "d2h_bytes": state.d2h_bytes,
            "d2h_calls": state.d2h_calls, "syncs": state.syncs, "steps": state.steps}


def reset_transfers() -> None:
    state.h2d_bytes = state.h2d_calls = state.d2h_bytes = state.d2h_calls = state.syncs = state.steps = 0


_step_hook: Any = None


def _count_step(*_: Any) -> None:
    state.steps += 1


def count_steps() -> None:
    """Count optimizer steps (torch.optim's global step-post hook, once per process) beside the syncs, so that
    route statistics read per step: where a training step ends is where its optimizer steps."""
    global _step_hook
    if _step_hook is None:
        from torch.optim.optimizer import register_optimizer_step_post_hook

        _step_hook = register_optimizer_step_post_hook(_count_step)



def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()
