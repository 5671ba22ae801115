"""The emulated chip as a device: PyTorch's PrivateUse1 slot borrowed as a Python backend (``emu``).

A tensor on ``emu:N`` is a CPU tensor wrapped in an ``EmuTensor`` whose every aten call is checked
against the emulated description's route table, as a real backend's dispatch key would be. Host tensors
never reach it: they are neither routed, counted nor flagged.

The modules, lowest first:

- ``slot``: the borrowed PrivateUse1 slot (``backend_name()``, availability) and the state of the
  emulated devices; ``register``: borrowing it (``ensure``), with everything below;
- ``memory``: live/peak device bytes and host-device transfer counters;
- ``tensor``: ``EmuTensor`` and its dispatch (device checks, routes, wrapping);
- ``copies``: host <-> device copies, dtype conversions, syncs; ``attention``: fused SDPA as the chip runs it;
- ``factories``: ``torch.zeros(.., device="emu")`` and friends (a PrivateUse1 fallback), pinning;
- ``storage``: device storages over the host data (``untyped_storage()``, ``data_ptr()``, sharing),
  resizing the wrapper with its data, pinned memory;
- ``serialization``: ``torch.save`` / ``torch.load`` (every map_location form), ``set_``;
  ``dlpack``: DLPack export/import of device tensors, as torch_npu;
- ``moves``: ``module.to(device)`` of parameters something else still holds, ``x.data = <device data>``;
- ``generator``: ``torch.Generator(device="emu")``; ``rng``: each device's own generator, which its random
  ops draw from (``torch.npu.manual_seed``); ``events``: ``torch.Event(device="emu")``;
- ``engine``: backward across several emulated devices; ``profiling``: ``profile(use_device=...)`` on it;
- ``module``: the backend module ``torch.emu``, the hooks and the device guard;
- ``autocast``: ``torch.autocast("emu")``; ``dist``: a c10d backend on gloo;
- ``compiled``: ``torch.compile``'s Inductor refused on the device (it would compile for the host);
  ``hub_kernels``: Hugging Face hub kernels off (binaries for the real chip);
- ``wider``: ops the chip's kernel computes in dtypes the host's refuses;
- ``vendor``, ``identity``, ``vendor_module``, ``plugin`` and its parts (``npu_ops``, ``npu_optim``,
  ``npu_utils``, ``npu_composed``, ``mlu_plugin``, ``musa_plugin``): a plugin chip under its own name, with
  the vendor's identity, device module, package and fused ops;
- ``mode``: the dispatch-mode emulator, used where the device cannot exist.

PrivateUse1 has one owner per process. When a vendor plugin (torch_npu, ...) owns it, ``emu`` cannot
be a device: emulation then falls back to the dispatch mode (``mode.py``), which checks every CPU op
(host work included) and cannot catch forgotten ``.to(device)`` calls; see ``borrowed()`` and
``owner()``.
"""

from __future__ import annotations

from ..._state import process

# attention, copies and serialization add their ops to the tensor's dispatch table when imported
from . import attention, copies, serialization  # noqa: F401
from .memory import (
    count_steps,
    max_memory_allocated,
    memory_allocated,
    reset_peak_memory_stats,
    reset_transfers,
    transfers,
)
from .register import ensure
from .slot import (
    DeviceEmulation,
    available,
    backend_name,
    borrowed,
    chip,
    device,
    devices,
    owner,
    set_router,
    state,
    status,
    unavailable_reason,
)
from .tensor import EmuTensor, to_host

# route_stats() reports the copy counters (routing/stats.py reads them through the process state)
process.transfers, process.reset_transfers = transfers, reset_transfers
count_steps()  # (so that its syncs read per optimizer step)

__all__ = [
    "DeviceEmulation", "EmuTensor", "available", "backend_name", "borrowed", "chip", "device", "devices",
    "ensure",
    "max_memory_allocated", "memory_allocated", "owner", "reset_peak_memory_stats", "reset_transfers",
    "set_router", "state", "status", "to_host", "transfers", "unavailable_reason",
]
