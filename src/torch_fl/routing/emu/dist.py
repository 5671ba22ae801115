"""Collectives on the emulated device: a c10d backend named ``emu`` that runs gloo on the host data of
``emu`` tensors (gloo accepts CPU and CUDA tensors only).

Registered with ``torch.distributed.Backend.register_backend("emu", ..., devices=["emu"])`` when the
process group is made through ``register()``; use it as ``init_process_group("cpu:gloo,emu:emu")``, one
process per emulated device (each on its own ``emu:0``), which is how DDP runs on a laptop:

    FL_DEVICE=emu:cuda torchrun --nproc-per-node 2 train.py   # train.py: backend="cpu:gloo,emu:emu"

An EmuTensor's data is a CPU tensor over the same storage, so gloo's in-place results (allreduce,
broadcast, allgather outputs) land in the device tensors themselves.

Under the stream sanitizer (sanitizer.py) every collective is also a kernel of the current stream that reads
its inputs and writes its outputs, as NCCL's is (its stream waits for the current one when it is issued), and
its work's ``wait()`` makes the stream current then wait for it, as NCCL's work does: a collective that races
with another stream's kernel is reported like any op.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from . import sanitizer
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


def _device(*values: Any) -> list[Any]:
    """The tensors of the emulated device in `values` (tensors, lists of them, lists of lists)."""
    found: list[Any] = []
    for value in values:
        if isinstance(value, EmuTensor):
            found.append(value)
        elif isinstance(value, (list, tuple)):
            found.extend(_device(*value))
    return found


def _seen(name: str, work: Any, *, reads: Any = (), writes: Any = ()) -> Any:
    """`work`, the collective `name` just issued on `reads` and `writes`, as the stream sanitizer sees it when
    it checks this thread: a kernel of the current stream, and a work whose wait() orders the stream current
    then after it (`_Ordered`). Without the sanitizer: `work` itself."""
    checking = sanitizer.checking()
    if checking is None:
        return work
    event = checking.collective(f"c10d::{name}", _device(reads), _device(writes))
    return work if event is None else _Ordered(work, event)


def _root(opts: Any, rank: int) -> bool:
    return (opts.rootRank if opts is not None else 0) == rank


class EmuProcessGroup(dist.ProcessGroup):
    """The collectives DDP and FSDP-style code call, forwarded to a gloo group on the host data.

    Every method PyTorch's C++ calls through this Python subclass (its PyProcessGroup trampoline: the
    ``_c10d_functional`` ops of DTensor and FSDP2, DDP's reducer, send/recv) is overridden here. Where
    one is not, the trampoline runs ProcessGroup's own method while it still holds the GIL, and that
    enqueues on gloo's work lock: a gloo worker that is freeing an earlier work holds that lock and waits
    for the GIL (the work's host tensors have Python objects: each is an EmuTensor's data), so both
    ranks stopped for good (2 of 16 runs of FSDP2 training then ``full_tensor()`` of every parameter;
    both runs of 400 functional all-gathers in a loop). The gloo methods called below release the GIL
    first, as every c10d binding does.
    """

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
        return _seen("allreduce_", self._gloo.allreduce(_host(tensors), opts or dist.AllreduceOptions()),
                     writes=tensors)

    def allreduce_coalesced(self, tensors: Any, opts: Any = None) -> Any:
        return _seen("allreduce_coalesced_", self._gloo.allreduce_coalesced(
            _host(tensors), opts or dist.AllreduceCoalescedOptions()), writes=tensors)

    def broadcast(self, tensors: Any, opts: Any = None) -> Any:
        work = self._gloo.broadcast(_host(tensors), opts or dist.BroadcastOptions())
        return _seen("broadcast_", work, **{"reads" if _root(opts, self.rank()) else "writes": tensors})

    def allgather(self, outputs: Any, inputs: Any, opts: Any = None) -> Any:
        return _seen("allgather_", self._gloo.allgather(_host(outputs), _host(inputs),
                                                         opts or dist.AllgatherOptions()),
                     reads=inputs, writes=outputs)

    def _allgather_base(self, output: Any, input: Any, opts: Any = None) -> Any:
        return _seen("_allgather_base_", self._gloo._allgather_base(_host(output), _host(input),
                                                                     opts or dist.AllgatherOptions()),
                     reads=input, writes=output)

    def reduce_scatter(self, outputs: Any, inputs: Any, opts: Any = None) -> Any:
        return _seen("reduce_scatter_", self._gloo.reduce_scatter(_host(outputs), _host(inputs),
                                                                   opts or dist.ReduceScatterOptions()),
                     reads=inputs, writes=outputs)

    def _reduce_scatter_base(self, output: Any, input: Any, opts: Any = None) -> Any:
        return _seen("_reduce_scatter_base_", self._gloo._reduce_scatter_base(
            _host(output), _host(input), opts or dist.ReduceScatterOptions()), reads=input, writes=output)

    # torch >= 2.13's names of the two (dist.all_gather_into_tensor and reduce_scatter_tensor, which FSDP2
    # calls every step, look them up on the group): the same host path on every torch version
    all_gather_single = _allgather_base
    reduce_scatter_single = _reduce_scatter_base

    def all_gather_single_coalesced(self, outputs: Any, inputs: Any, opts: Any = None) -> Any:
        """All-gathers of several tensors at once (all_gather_into_tensor of DTensor's full_tensor and of
        FSDP2 go through here): gloo's allgather_coalesced on each output's per-rank chunks, as gloo's
        own C++ allgather_into_tensor_coalesced does (its binding is not in Python)."""
        size = self.size()
        per_rank: list[list[torch.Tensor]] = [[] for _ in range(size)]
        for output in _host(outputs):
            for rank, chunk in enumerate(output.chunk(size)):
                per_rank[rank].append(chunk)
        return _seen("allgather_into_tensor_coalesced_", self._gloo.allgather_coalesced(
            per_rank, _host(inputs), opts or dist.AllgatherOptions()), reads=inputs, writes=outputs)

    def reduce_scatter_single_coalesced(self, outputs: Any, inputs: Any, opts: Any = None) -> Any:
        """Reduce-scatters of several tensors at once: one gloo _reduce_scatter_base per tensor (gloo's
        Python binding has no coalesced form), finished together as one work."""
        opts = opts or dist.ReduceScatterOptions()
        works = [self._gloo._reduce_scatter_base(output, input, opts)
                 for output, input in zip(_host(outputs), _host(inputs), strict=True)]
        return _seen("reduce_scatter_tensor_coalesced_", works[0] if len(works) == 1 else _AllOf(works),
                     reads=inputs, writes=outputs)

    def all_to_all_single(self, output: Any, input: Any, output_split_sizes: Any, input_split_sizes: Any,
                          opts: Any = None) -> Any:
        return _seen("alltoall_base_", self._gloo.alltoall_base(_host(output), _host(input), output_split_sizes,
                                                                input_split_sizes, opts or dist.AllToAllOptions()),
                     reads=input, writes=output)

    def send(self, tensors: Any, dst: int, tag: int = 0) -> Any:
        return _seen("send", self._gloo.send(_host(tensors), dst, tag), reads=tensors)

    def recv(self, tensors: Any, src: int, tag: int = 0) -> Any:
        return _seen("recv_", self._gloo.recv(_host(tensors), src, tag), writes=tensors)

    def reduce(self, tensors: Any, opts: Any = None) -> Any:
        work = self._gloo.reduce(_host(tensors), opts or dist.ReduceOptions())
        return _seen("reduce_", work, **{"writes" if _root(opts, self.rank()) else "reads": tensors})

    def gather(self, outputs: Any, inputs: Any, opts: Any = None) -> Any:
        return _seen("gather_", self._gloo.gather(_host(outputs), _host(inputs), opts or dist.GatherOptions()),
                     reads=inputs, writes=outputs)

    def scatter(self, outputs: Any, inputs: Any, opts: Any = None) -> Any:
        return _seen("scatter_", self._gloo.scatter(_host(outputs), _host(inputs), opts or dist.ScatterOptions()),
                     reads=inputs, writes=outputs)

    def barrier(self, opts: Any = None) -> Any:
        return self._gloo.barrier(opts or dist.BarrierOptions())


class _AllOf(dist.Work):
    """One work for several of gloo's, done when each is (waits go through Work's trampoline, which
    c10d's wait_tensor and _coalescing_manager call). No future: gloo's _reduce_scatter_base has none."""

    def __init__(self, works: list[Any]) -> None:
        super().__init__()
        self._works = works

    def wait(self, timeout: timedelta = timedelta(0)) -> bool:
        return all([work.wait(timeout) for work in self._works])  # (a list: every work waited)

    def is_completed(self) -> bool:
        return all(work.is_completed() for work in self._works)


class _Ordered(dist.Work):
    """A collective's work under the stream sanitizer: wait() (and synchronize()) also make the stream current
    then wait for the collective's event, as NCCL's work does, so a kernel after ``work.wait()`` on another
    stream is ordered after the collective; everything else is the work's own."""

    def __init__(self, work: Any, event: Any) -> None:
        super().__init__()
        self._work, self._event = work, event

    def wait(self, timeout: timedelta = timedelta(0)) -> bool:
        done = self._work.wait(timeout)
        self._event.wait()
        return done

    def synchronize(self) -> None:
        self._event.wait()


def _forwarded(name: str) -> Callable[[_Ordered], Any]:
    def call(self: _Ordered) -> Any:
        return getattr(self._work, name)()
    call.__name__ = call.__qualname__ = name
    return call


# the rest of Work's methods are the work's own (c10d calls them through Work's trampoline, by name)
for _name in ("is_completed", "is_success", "exception", "source_rank", "result", "get_future"):
    setattr(_Ordered, _name, _forwarded(_name))


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
