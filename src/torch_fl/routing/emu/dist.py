"""Collectives on the emulated device: a c10d backend named ``emu`` that runs gloo on the host data of
``emu`` tensors (gloo accepts CPU and CUDA tensors only).

Registered with ``torch.distributed.Backend.register_backend("emu", ..., devices=["emu"])`` when the
process group is made through ``register()``; use it as ``init_process_group("cpu:gloo,emu:emu")``, one
process per emulated device (each on its own ``emu:0``), which is how DDP runs on a laptop:

    FL_DEVICE=emu:cuda torchrun --nproc-per-node 2 train.py   # train.py: backend="cpu:gloo,emu:emu"

An EmuTensor's data is a CPU tensor over the same storage, so gloo's in-place results (allreduce,
broadcast, allgather outputs) land in the device tensors themselves.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from .slot import backend_name
from .tensor import EmuTensor


def backend_string() -> str:
    """init_process_group's backend on emulated devices: gloo for host tensors, this one for device ones."""
    name = backend_name()
    return f"cpu:gloo,{name}:{name}"


def _host(value: Any) -> Any:
    if isinstance(value, EmuTensor):
        return value._data
    if isinstance(value, list):
        return [_host(v) for v in value]
    return value


class EmuProcessGroup(dist.ProcessGroup):
    """The collectives DDP and FSDP-style code call, forwarded to a gloo group on the host data."""

    def __init__(self, store: Any, rank: int, size: int, timeout: timedelta) -> None:
        super().__init__(rank, size)
        self._gloo = dist.ProcessGroupGloo(dist.PrefixStore("emu-gloo", store), rank, size, timeout)
        # c10d's helpers ask the group for its backend per device type (init_process_group(device_id=emu:0)
        # checks `_get_backend(device_id).supports_splitting`; timeouts are read from its options): the
        # gloo group answers for both. Collectives still come through the methods below.
        for device_type in ("cpu", backend_name()):
            self._register_backend(torch.device(device_type), dist.ProcessGroup.BackendType.GLOO, self._gloo)

    def getBackendName(self) -> str:
        return backend_name()

    def allreduce(self, tensors: Any, opts: Any = None) -> Any:
        return self._gloo.allreduce(_host(tensors), opts or dist.AllreduceOptions())

    def allreduce_coalesced(self, tensors: Any, opts: Any = None) -> Any:
        return self._gloo.allreduce_coalesced(_host(tensors), opts or dist.AllreduceCoalescedOptions())

    def broadcast(self, tensors: Any, opts: Any = None) -> Any:
        return self._gloo.broadcast(_host(tensors), opts or dist.BroadcastOptions())

    def allgather(self, outputs: Any, inputs: Any, opts: Any = None) -> Any:
        return self._gloo.allgather(_host(outputs), _host(inputs), opts or dist.AllgatherOptions())

    def _allgather_base(self, output: Any, input: Any, opts: Any = None) -> Any:
        return self._gloo._allgather_base(_host(output), _host(input), opts or dist.AllgatherOptions())

    def reduce_scatter(self, outputs: Any, inputs: Any, opts: Any = None) -> Any:
        return self._gloo.reduce_scatter(_host(outputs), _host(inputs), opts or dist.ReduceScatterOptions())

    def reduce(self, tensors: Any, opts: Any = None) -> Any:
        return self._gloo.reduce(_host(tensors), opts or dist.ReduceOptions())

    def gather(self, outputs: Any, inputs: Any, opts: Any = None) -> Any:
        return self._gloo.gather(_host(outputs), _host(inputs), opts or dist.GatherOptions())

    def scatter(self, outputs: Any, inputs: Any, opts: Any = None) -> Any:
        return self._gloo.scatter(_host(outputs), _host(inputs), opts or dist.ScatterOptions())

    def barrier(self, opts: Any = None) -> Any:
        return self._gloo.barrier(opts or dist.BarrierOptions())


def register(vendor_backend: str | None = None) -> None:
    """Make ``emu`` a c10d backend (idempotent), and the default backend of the emulated device type.
    `vendor_backend`: the collectives backend the emulated chip's own code names (the description's
    ``collectives.backend``: ``"hccl"`` for npu), registered as the same backend so that vendor code's
    ``init_process_group("hccl")`` starts, as it does on the chip (a name torch already has is left alone).

    Called when the emulator registers its device (register.ensure), so plain torch.distributed code
    that asks by device finds it: ``init_process_group(device_id=emu:0)`` (Lightning's DDP, which names
    the backend from ``Backend.default_device_backend_map``) gets this backend, and a backend of
    ``"emu"`` alone also serves CPU tensors (capability ``cpu`` too: EmuProcessGroup hands host tensors
    to its gloo group unchanged). ``cpu`` keeps gloo as its default: register_backend never takes a
    device type that already has one.
    """
    if not supports_distributed():
        return
    name = backend_name()
    for backend in (name, vendor_backend):
        if backend and backend not in dist.Backend.backend_list:
            dist.Backend.register_backend(backend, EmuProcessGroup, devices=["cpu", name])


def supports_distributed() -> bool:
    return dist.is_available() and hasattr(dist, "ProcessGroupGloo") and torch.distributed.is_gloo_available()
