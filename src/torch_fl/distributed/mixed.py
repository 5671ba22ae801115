"""One process group across chips of different vendors: each vendor's own backend inside its ranks, the
host between vendors.

No vendor's collective library talks to another's (nccl, hccl, cncl, mccl, xccl). When the ranks of a job
resolve to more than one device kind and FlagCX is not installed everywhere, `torch.fl.distributed`
initialises the job with this backend, registered with torch.distributed as ``flmixed``. It is built from
torch.distributed's own pieces only:

- the **intra** group of each kind (the ranks of one vendor's device type) is that vendor's backend,
  made the way torch makes it (its registered creator, or ProcessGroupNCCL / ProcessGroupXCCL; on an
  emulated chip, the emulator's gloo-on-host-data group), over a PrefixStore of the job's store;
- the **cross** group joins the first rank of every kind (its *leader*) with gloo on host copies;
- the **host** group (gloo over every rank) takes collectives on CPU tensors (DDP's parameter checks,
  object collectives), which a vendor library would refuse.

A collective on device tensors runs in three steps: within each kind on the vendor's library (reduce to
the leader, or all_gather), between leaders over gloo on a host copy, and back within each kind
(broadcast from the leader). Only leaders cross the host, once per collective: with K kinds of a payload
of P bytes each leader moves P to the host and back plus 2(K-1)/K P over the link (gloo's ring), whatever
the number of ranks per kind. Results equal a single-vendor group's: the same sums, in rank order.

Collectives run to completion when called (the returned Work is done), which is what host staging needs
anyway: the host copy must hold the vendor step's result before gloo reads it.

Usage outside ``torch.fl.distributed.init_process_group`` (which chooses it by itself)::

    torch.fl.distributed.mixed.register()              # this rank's device: torch.fl.device()
    torch.distributed.init_process_group("flmixed")     # every rank, whatever its chip
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import AllgatherOptions, _create_work_from_future

from .checks import DistributedError
from .fingerprint import MIXED_BACKEND, ranks_text

_log = logging.getLogger("torch_fl.distributed")

BACKEND = MIXED_BACKEND
# ReduceOps that compose level by level (a sum of sums is the sum); AVG is a SUM divided once at the end.
_COMPOSABLE = ("SUM", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR")


@dataclass(frozen=True)
class Member:
    """What one rank told the others when the group was built."""

    rank: int
    kind: str  # "<vendor> <device type>": ranks of one kind share a vendor library
    device: str
    backend: str  # the vendor backend its kind runs inside (as torch names it)


@dataclass(frozen=True)
class Layout:
    """Who is in which kind, and which rank leads each; the same on every rank."""

    members: tuple[Member, ...]

    @property
    def kinds(self) -> dict[str, list[int]]:
        kinds: dict[str, list[int]] = {}
        for m in self.members:
            kinds.setdefault(m.kind, []).append(m.rank)
        return kinds

    @property
    def leaders(self) -> list[int]:
        return [ranks[0] for ranks in self.kinds.values()]

    def kind_of(self, rank: int) -> str:
        return self.members[rank].kind


def kind_key(vendor: str, device_type: str) -> str:
    """The kind of a rank: ranks of one vendor and device type can share that vendor's library."""
    return f"{vendor or 'unknown'} {device_type}"


# The backend ---------------------------------------------------------------------------------------
def _done(result: Any) -> dist.Work:
    future: torch.futures.Future = torch.futures.Future()
    future.set_result(result)
    return _create_work_from_future(future)


def _op_name(op: Any) -> str:
    """'SUM' for ReduceOp.SUM, a ReduceOp object (what c10d's options hold) or its RedOpType."""
    op = getattr(op, "op", op)
    return str(getattr(op, "name", op)).rsplit(".", 1)[-1].upper()


class MixedProcessGroup(dist.ProcessGroup):
    """A c10d process group whose ranks run on chips of different vendors (see the module docstring)."""

    def __init__(self, store: dist.Store, rank: int, size: int, timeout: timedelta) -> None:
        super().__init__(rank, size)
        self._timeout = timeout
        self.device = _this_device()
        me = _describe_self(rank, self.device)
        self.layout = _exchange(store, me, size, timeout)
        kinds = self.layout.kinds
        self.kind_ranks = kinds[me.kind]
        self.leaders = self.layout.leaders
        self.is_leader = rank == self.kind_ranks[0]
        self.host = dist.ProcessGroupGloo(dist.PrefixStore("flmixed-host", store), rank, size, timeout)
        index = sorted(kinds).index(me.kind)
        self.intra = (_vendor_backend(me.backend, dist.PrefixStore(f"flmixed-intra-{index}", store),
                                      self.kind_ranks.index(rank), len(self.kind_ranks), timeout, self.device)
                      if len(self.kind_ranks) > 1 else None)
        self.cross = (dist.ProcessGroupGloo(dist.PrefixStore("flmixed-cross", store), self.leaders.index(rank),
                                            len(self.leaders), timeout)
                      if self.is_leader and len(self.leaders) > 1 else None)
        # c10d's helpers ask the group for a backend per device type (timeouts, splitting): the host group
        # answers; every collective still comes through the methods below.
        for device_type in {"cpu", self.device.type}:
            self._register_backend(torch.device(device_type), dist.ProcessGroup.BackendType.GLOO, self.host)
        _log.info("rank %d: %s group, kind %s (%s), leader %s", rank, BACKEND, me.kind,
                  ranks_text(self.kind_ranks), self.kind_ranks[0])

    def getBackendName(self) -> str:
        return BACKEND

    # helpers ---------------------------------------------------------------------------------------
    def _on_host(self, tensors: Sequence[Any]) -> bool:
        flat = [t for t in _flatten(tensors) if isinstance(t, torch.Tensor)]
        return all(t.device.type == "cpu" and type(t) is torch.Tensor for t in flat)

    def _intra(self, call: Callable[[Any], dist.Work]) -> None:
        if self.intra is not None:
            call(self.intra).wait()

    def _stage(self, tensor: torch.Tensor, call: Callable[[Any, torch.Tensor], dist.Work]) -> None:
        """Run `call(cross_group, host_copy)` on a host copy of `tensor` and write the result back."""
        if self.cross is None:
            return
        host = tensor.detach().to("cpu", copy=True)
        call(self.cross, host).wait()
        with torch.no_grad():
            tensor.copy_(host)

    def _all_reduce_one(self, tensor: torch.Tensor, op: Any) -> None:
        name = _op_name(op)
        average = name == "AVG"
        if not average and name not in _COMPOSABLE:
            raise DistributedError(f"the {BACKEND} process group cannot reduce with {name} across vendors: "
                                   f"it composes {', '.join(_COMPOSABLE)} and AVG level by level. Fix: "
                                   "reduce with SUM and scale the result.")
        level_op = dist.ReduceOp.SUM if average else getattr(dist.ReduceOp, name)
        self._intra(lambda g: g.reduce([tensor], _reduce_opts(level_op, 0)))
        if self.is_leader:
            self._stage(tensor, lambda g, host: g.allreduce([host], _allreduce_opts(level_op)))
        self._intra(lambda g: g.broadcast([tensor], _broadcast_opts(0)))
        if average:
            with torch.no_grad():
                tensor.div_(self.size())

    def _broadcast_one(self, tensor: torch.Tensor, root: int) -> None:
        root_kind = self.layout.kind_of(root)
        root_ranks = self.layout.kinds[root_kind]
        mine = self.layout.kind_of(self.rank()) == root_kind
        if mine and root != root_ranks[0]:
            self._intra(lambda g: g.broadcast([tensor], _broadcast_opts(root_ranks.index(root))))
        if self.is_leader:
            leader = self.leaders.index(root_ranks[0])
            self._stage(tensor, lambda g, host: g.broadcast([host], _broadcast_opts(leader)))
        if not mine or root == root_ranks[0]:
            self._intra(lambda g: g.broadcast([tensor], _broadcast_opts(0)))

    def _gather_all(self, tensor: torch.Tensor) -> torch.Tensor:
        """Every rank's `tensor`, stacked in rank order ([world, *shape]), on every rank."""
        kind_ranks, size = self.kind_ranks, self.size()
        local = [torch.empty_like(tensor) for _ in kind_ranks]
        if self.intra is not None:
            self.intra.allgather([local], [tensor], AllgatherOptions()).wait()
        else:
            local[0] = tensor
        stacked = torch.empty((size, *tensor.shape), dtype=tensor.dtype, device=tensor.device)
        if self.is_leader:
            width = max(len(r) for r in self.layout.kinds.values())
            mine = torch.stack([t.detach().to("cpu") for t in local])
            if self.cross is not None:
                padded = torch.zeros((width, *tensor.shape), dtype=tensor.dtype)
                padded[: len(kind_ranks)] = mine
                parts = [torch.empty_like(padded) for _ in self.leaders]
                self.cross.allgather([parts], [padded], AllgatherOptions()).wait()
            else:
                parts = [mine]
            full = torch.empty((size, *tensor.shape), dtype=tensor.dtype)
            for leader, part in zip(self.leaders, parts, strict=True):
                for i, r in enumerate(self.layout.kinds[self.layout.kind_of(leader)]):
                    full[r] = part[i]
            with torch.no_grad():
                stacked.copy_(full)
        self._intra(lambda g: g.broadcast([stacked], _broadcast_opts(0)))
        return stacked

    # c10d's methods --------------------------------------------------------------------------------
    def _each(self, call: str, tensors: Any, opts: Any, one: Callable[[torch.Tensor], None]) -> dist.Work:
        """c10d's `call` on a list of tensors: the host group's own where every tensor is a host tensor, else
        `one` on each tensor, level by level."""
        if self._on_host(tensors):
            return getattr(self.host, call)(tensors, opts)
        for tensor in tensors:
            one(tensor)
        return _done(list(tensors))

    def allreduce(self, tensors: Any, opts: Any = None) -> dist.Work:
        opts = opts or dist.AllreduceOptions()
        return self._each("allreduce", tensors, opts, lambda t: self._all_reduce_one(t, opts.reduceOp))

    def allreduce_coalesced(self, tensors: Any, opts: Any = None) -> dist.Work:
        opts = opts or dist.AllreduceCoalescedOptions()
        return self._each("allreduce_coalesced", tensors, opts, lambda t: self._all_reduce_one(t, opts.reduceOp))

    def broadcast(self, tensors: Any, opts: Any = None) -> dist.Work:
        opts = opts or dist.BroadcastOptions()
        return self._each("broadcast", tensors, opts, lambda t: self._broadcast_one(t, opts.rootRank))

    def allgather(self, outputs: Any, inputs: Any, opts: Any = None) -> dist.Work:
        opts = opts or AllgatherOptions()
        if self._on_host([outputs, inputs]):
            return self.host.allgather(outputs, inputs, opts)
        for out, tensor in zip(outputs, inputs, strict=True):
            stacked = self._gather_all(tensor)
            with torch.no_grad():
                for r, target in enumerate(out):
                    target.copy_(stacked[r])
        return _done(outputs)

    def _allgather_base(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> dist.Work:
        opts = opts or AllgatherOptions()
        if self._on_host([output, input]):
            return self.host._allgather_base(output, input, opts)
        stacked = self._gather_all(input)
        with torch.no_grad():
            output.copy_(stacked.reshape(output.shape))
        return _done([output])

    def reduce_scatter(self, outputs: Any, inputs: Any, opts: Any = None) -> dist.Work:
        opts = opts or dist.ReduceScatterOptions()
        if self._on_host([outputs, inputs]):
            return self.host.reduce_scatter(outputs, inputs, opts)
        for out, chunks in zip(outputs, inputs, strict=True):
            full = torch.stack([c.detach() for c in chunks])
            self._all_reduce_one(full, opts.reduceOp)
            with torch.no_grad():
                out.copy_(full[self.rank()])
        return _done(outputs)

    def _reduce_scatter_base(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> dist.Work:
        opts = opts or dist.ReduceScatterOptions()
        if self._on_host([output, input]):
            return self.host._reduce_scatter_base(output, input, opts)
        full = input.detach().clone().reshape(self.size(), -1)
        self._all_reduce_one(full, opts.reduceOp)
        with torch.no_grad():
            output.copy_(full[self.rank()].reshape(output.shape))
        return _done([output])

    # torch 2.13's names for the same calls (dist.all_gather_into_tensor, reduce_scatter_tensor), and the
    # coalesced forms DTensor's full_tensor and FSDP2 use: every one must reach a method here, or c10d
    # hands device tensors to the host group with the GIL held (routing/emu/dist.py has the measured hang)
    all_gather_single = _allgather_base
    reduce_scatter_single = _reduce_scatter_base

    def all_gather_single_coalesced(self, outputs: Any, inputs: Any, opts: Any = None) -> dist.Work:
        opts = opts or AllgatherOptions()
        for output, input in zip(outputs, inputs, strict=True):
            self._allgather_base(output, input, opts).wait()  # (host tensors: gloo's work runs on)
        return _done(list(outputs))

    allgather_into_tensor_coalesced = all_gather_single_coalesced

    def reduce_scatter_single_coalesced(self, outputs: Any, inputs: Any, opts: Any = None) -> dist.Work:
        opts = opts or dist.ReduceScatterOptions()
        for output, input in zip(outputs, inputs, strict=True):
            self._reduce_scatter_base(output, input, opts).wait()
        return _done(list(outputs))

    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

    def allgather_coalesced(self, outputs: Any, inputs: Any, opts: Any = None) -> dist.Work:
        opts = opts or AllgatherOptions()
        if self._on_host([outputs, inputs]):
            return self.host.allgather_coalesced(outputs, inputs, opts)
        return self.allgather([list(group) for group in outputs], list(inputs), opts)

    def send(self, tensors: Any, dst: int, tag: int = 0) -> dist.Work:
        """Point to point: inside one kind on the vendor's library, across kinds through a host copy."""
        if self._same_kind_p2p(dst):
            return self.intra.send(tensors, self.kind_ranks.index(dst), tag)
        for tensor in tensors:
            self.host.send([tensor.detach().to("cpu")], dst, tag).wait()
        return _done(list(tensors))

    def recv(self, tensors: Any, src: int, tag: int = 0) -> dist.Work:
        if self._same_kind_p2p(src):
            return self.intra.recv(tensors, self.kind_ranks.index(src), tag)
        for tensor in tensors:
            host = torch.empty(tensor.shape, dtype=tensor.dtype)
            self.host.recv([host], src, tag).wait()
            with torch.no_grad():
                tensor.copy_(host)
        return _done(list(tensors))

    def _same_kind_p2p(self, peer: int) -> bool:
        return self.intra is not None and self.layout.kind_of(peer) == self.layout.kind_of(self.rank())

    def reduce(self, tensors: Any, opts: Any = None) -> dist.Work:
        opts = opts or dist.ReduceOptions()
        # (every rank gets the result; only the root's is defined by c10d)
        return self._each("reduce", tensors, opts, lambda t: self._all_reduce_one(t, opts.reduceOp))

    def gather(self, outputs: Any, inputs: Any, opts: Any = None) -> dist.Work:
        opts = opts or dist.GatherOptions()
        if self._on_host([outputs, inputs]):
            return self.host.gather(outputs, inputs, opts)
        stacked = self._gather_all(inputs[0])
        if self.rank() == opts.rootRank:
            with torch.no_grad():
                for r, target in enumerate(outputs[0]):
                    target.copy_(stacked[r])
        return _done(outputs)

    def scatter(self, outputs: Any, inputs: Any, opts: Any = None) -> dist.Work:
        opts = opts or dist.ScatterOptions()
        if self._on_host([outputs, inputs]):
            return self.host.scatter(outputs, inputs, opts)
        out = outputs[0]
        full = torch.empty((self.size(), *out.shape), dtype=out.dtype, device=out.device)
        if self.rank() == opts.rootRank:
            with torch.no_grad():
                full.copy_(torch.stack([t.detach() for t in inputs[0]]))
        self._broadcast_one(full, opts.rootRank)
        with torch.no_grad():
            out.copy_(full[self.rank()])
        return _done(outputs)

    def barrier(self, opts: Any = None) -> dist.Work:
        return self.host.barrier(opts or dist.BarrierOptions())

    def all_to_all_single(self, *args: Any, **kwargs: Any) -> dist.Work:
        return self.alltoall_base()

    def alltoall_base(self, *args: Any, **kwargs: Any) -> dist.Work:
        raise DistributedError(f"the {BACKEND} process group has no all_to_all across vendors yet. Fix: run "
                               "expert/sequence parallelism within one vendor's ranks (a subgroup of one "
                               "kind), or install FlagCX on every rank.")

    alltoall = alltoall_base


def _flatten(items: Any) -> list[Any]:
    if isinstance(items, (list, tuple)):
        return [x for item in items for x in _flatten(item)]
    return [items]


def _reduce_opts(op: Any, root: int) -> dist.ReduceOptions:
    opts = dist.ReduceOptions()
    opts.reduceOp, opts.rootRank = op, root
    return opts


def _allreduce_opts(op: Any) -> dist.AllreduceOptions:
    opts = dist.AllreduceOptions()
    opts.reduceOp = op
    return opts


def _broadcast_opts(root: int) -> dist.BroadcastOptions:
    opts = dist.BroadcastOptions()
    opts.rootRank = root
    return opts


# Who is who ----------------------------------------------------------------------------------------
_device: torch.device | None = None  # this rank's device, set by `register`


def _this_device() -> torch.device:
    if _device is None:
        raise DistributedError(f"the {BACKEND} backend was not registered on this rank: call "
                               "torch.fl.distributed.mixed.register() before torch.distributed.init_process_group"
                               f"('{BACKEND}'), or let torch.fl.distributed.init_process_group() choose it.")
    return _device


def _describe_self(rank: int, dev: torch.device) -> Member:
    from ..device import description_for, is_emulated

    desc = description_for(dev)
    backend = "emulated" if is_emulated(dev) else desc.collective_backend
    return Member(rank, kind_key(desc.vendor, dev.type), str(dev), backend)


def _exchange(store: dist.Store, me: Member, size: int, timeout: timedelta) -> Layout:
    store.set(f"flmixed-member/{me.rank}", json.dumps(me.__dict__))
    keys = [f"flmixed-member/{r}" for r in range(size)]
    store.wait(keys, timeout)
    return Layout(tuple(Member(**json.loads(store.get(k))) for k in keys))


def _vendor_backend(name: str, store: dist.Store, rank: int, size: int, timeout: timedelta,
                    dev: torch.device) -> Any:
    """The vendor's own backend for the ranks of one kind, made as torch.distributed makes it."""
    if name == "emulated":
        from ..routing.emu.dist import EmuProcessGroup

        return EmuProcessGroup(store, rank, size, timeout)
    torch_name = {"rccl": "nccl"}.get(name, name)
    if torch_name == "nccl" and hasattr(dist, "ProcessGroupNCCL"):
        options = dist.ProcessGroupNCCL.Options()
        options._timeout = timeout
        return dist.ProcessGroupNCCL(store, rank, size, options)
    if torch_name == "xccl" and hasattr(dist, "ProcessGroupXCCL"):
        return dist.ProcessGroupXCCL(store, rank, size)
    if torch_name == "gloo":
        return dist.ProcessGroupGloo(store, rank, size, timeout)
    plugin = dist.Backend._plugins.get(torch_name.upper())
    if plugin is None:
        raise DistributedError(
            f"rank {dist.get_rank() if dist.is_initialized() else '?'}: the {BACKEND} group needs {dev}'s own "
            f"collective library '{name}' for the ranks of its kind, and torch.distributed does not know it "
            f"(registered backends: {', '.join(sorted(dist.Backend.backend_list))}). Fix: import the "
            "vendor's plugin (it registers the backend) before init_process_group.")
    if plugin.extended_api:
        opts = dist.distributed_c10d._DistributedBackendOptions()
        opts.store, opts.group_rank, opts.group_size, opts.timeout = store, rank, size, timeout
        return plugin.creator_fn(opts, None)
    return plugin.creator_fn(store, rank, size, timeout)


def register(device: torch.device | str | None = None) -> None:
    """Make ``flmixed`` a torch.distributed backend on this rank, whose device is `device` (default
    torch.fl.device()). Every rank of the job registers it before init_process_group; ``cpu`` comes first
    among its devices, so every rank builds it under the same store prefix whatever its own device type."""
    global _device
    from ..routing.current import use_device

    _device = use_device(device)
    if BACKEND not in dist.Backend.backend_list:
        dist.Backend.register_backend(BACKEND, MixedProcessGroup, devices=["cpu", _device.type])
