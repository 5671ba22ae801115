"""``torch.fl.distributed``: torch.distributed with the backend and device from the description, a
preflight that fails at step 0, and a watchdog that turns a hung collective into an error.

Everything below is torch.distributed (rendezvous, process groups, DDP, torchrun); torch-fl adds the
choices and the checks::

    import torch, torch_fl
    torch.fl.distributed.init_process_group()        # under torchrun: env://, LOCAL_RANK -> accN
    model = torch.fl.distributed.wrap_ddp(MyModel())  # on this rank's device, right device_ids

What ``init_process_group`` does, in order:

1. rank, world size and the store come from ``dist.rendezvous`` (``env://`` unless ``init_method`` or
   ``store`` says otherwise), exactly as torch's own ``init_process_group`` does it;
2. the device is ``device=`` or ``acc{LOCAL_RANK}`` through the virtual device map (every rank on the host
   when the backend is the CPU), made current with ``torch.fl.set_device``;
3. the preflight's environment step (unless ``FL_PREFLIGHT=0``): ranks compare versions, descriptions and
   backends through the store, and rank 0 picks the backend (see `fingerprint` for the rules, including
   ``flagcx`` for jobs that span vendors);
4. ``torch.distributed.init_process_group`` with that backend, the store, and torch's timeout set to
   ``FL_COLLECTIVE_TIMEOUT`` plus a grace period; other keyword arguments pass through;
5. the preflight's checked all_reduce, broadcast and barrier on the device;
6. the hang watchdog (`watchdog`), unless ``FL_COLLECTIVE_TIMEOUT=0``.
"""

from __future__ import annotations

import importlib
import logging
import math
import os
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from .. import _env
from ..description.model import Description
from ..device import description_for, device_map, emulating
from ..errors import DeviceNotFoundError
from ..routing.current import use_device
from . import checks as _checks
from . import fingerprint, mixed
from .checks import DistributedError, PreflightError, PreflightReport, RanksMissingError
from .fingerprint import host_traffic
from .liveness import Liveness
from .uneven import UnevenBatchSampler, UnevenSplit, shares_for, uneven_split
from .watchdog import CollectiveTimeoutError, Watchdog, enable_flight_recorder, grace, unavailable

__all__ = [
    "CollectiveTimeoutError",
    "DistributedError",
    "PreflightError",
    "PreflightReport",
    "RanksMissingError",
    "UnevenBatchSampler",
    "UnevenSplit",
    "device",
    "host_traffic",
    "init_process_group",
    "preflight",
    "shares_for",
    "uneven_split",
    "wrap_ddp",
]

_log = logging.getLogger("torch_fl.distributed")

# torch names ROCm's RCCL "nccl"; a description may say which library it really is.
_TORCH_BACKEND = {"rccl": "nccl"}
# Backends that do not rendezvous through a store (MPI is launched by mpirun; fake has no peers).
_STORELESS = ("mpi", "fake")


@dataclass
class _State:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    backend: str
    store: dist.Store | None
    report: PreflightReport | None
    watchdog: Watchdog | None
    liveness: Liveness | None = None


_state: _State | None = None


# Settings -----------------------------------------------------------------------------------------
def preflight_enabled() -> bool:
    """FL_PREFLIGHT: on unless set to 0/false/no/off."""
    return _env.FL_PREFLIGHT.value()


def collective_timeout() -> float:
    """FL_COLLECTIVE_TIMEOUT in seconds (0: torch's default timeout, no watchdog)."""
    return _env.FL_COLLECTIVE_TIMEOUT.value()


def _seconds(timeout: timedelta | float | None) -> float:
    if timeout is None:
        return collective_timeout()
    return timeout.total_seconds() if isinstance(timeout, timedelta) else float(timeout)


# Rank -> device -----------------------------------------------------------------------------------
def _local_rank(rank: int) -> int:
    # torchrun sets LOCAL_RANK; without it (mp.spawn, explicit ranks on one node) the global rank is
    # the local one.
    return int(os.environ.get("LOCAL_RANK", max(rank, 0)))


def _rank_device(local_rank: int) -> torch.device:
    """acc{LOCAL_RANK} through the device map; every rank shares the host when it is the only device. A
    process whose device comes from FL_RANK_DEVICES (one launch, ranks on different chips) has that one
    device as its default."""
    if _env.device_choice()[1].startswith(_env.FL_RANK_DEVICES.name):
        return use_device(None)
    mapping = device_map()
    wanted = f"acc{local_rank}"
    if wanted in mapping:
        return use_device(wanted)
    if emulating() is not None:
        # An emulated chip lives in its process's host memory: every rank's process is a chip of its own
        # (FL_DEVICE=emu:npu torchrun --nproc-per-node 4: each rank on its own emu:0).
        return use_device("acc0")
    if all(dev.type == "cpu" for dev in mapping.values()):
        return use_device("acc0")
    listing = ", ".join(f"{k} -> {v}" for k, v in mapping.items())
    raise DeviceNotFoundError(
        f"LOCAL_RANK={local_rank} maps to {wanted}, which does not exist: this node has {len(mapping)} "
        f"device(s) ({listing}). Start at most {len(mapping)} processes per node (torchrun "
        f"--nproc-per-node {len(mapping)}), map more virtual ids with FL_DEVICE_MAP, or pass device=.")


def device() -> torch.device:
    """This rank's device: the one init_process_group chose, else acc{LOCAL_RANK} by the same rule."""
    if _state is not None and dist.is_initialized():
        return _state.device
    return _rank_device(_local_rank(int(os.environ.get("RANK", "0"))))


def _backend_of(desc: Description, dev: torch.device) -> str:
    from ..device import is_emulated
    from ..runtime import dist_backend

    if is_emulated(dev):
        # An emulated chip's tensors live in host memory: its collectives are gloo on that data, whatever
        # library the emulated chip's description names (nccl on emu:cuda would need a GPU).
        return dist_backend(dev)
    name = desc.collective_backend
    if name == "none":
        raise DistributedError(f"the '{desc.name}' description ({desc.path}) says its device has no "
                               "collective library ([collectives] backend = 'none'). Pass backend='gloo' "
                               "to stage collectives through the host, if the device's tensors allow it.")
    return _TORCH_BACKEND.get(name, name)


# init ---------------------------------------------------------------------------------------------
def init_process_group(backend: str | None = None, init_method: str | None = None,
                       timeout: timedelta | float | None = None, world_size: int = -1, rank: int = -1,
                       store: dist.Store | None = None, *, device: str | torch.device | None = None,
                       preflight: bool | None = None, preflight_timeout: float | None = None,
                       **kwargs: Any) -> PreflightReport | None:
    """``torch.distributed.init_process_group`` with the backend and device from the description, a
    preflight, and a hang watchdog (see the module docstring for the steps).

    Args:
        backend: a torch.distributed backend; default: chosen from the descriptions of all ranks.
        init_method, world_size, rank, store: as in torch.distributed (default ``env://``, which is what
            torchrun provides).
        timeout: how long a collective may take (seconds or timedelta); default FL_COLLECTIVE_TIMEOUT
            (600). torch's own timeout is this plus a grace period of max(5 s, 10%).
        device: this rank's device (default ``acc{LOCAL_RANK}``).
        preflight: run the preflight (default: on unless FL_PREFLIGHT=0).
        preflight_timeout: seconds each preflight step may take (default min(60, timeout)).
        **kwargs: passed to torch.distributed.init_process_group (pg_options, device_id, ...).

    Returns:
        The preflight report (every rank's row on rank 0), or None when the preflight is off.

    Raises:
        PreflightError: ranks differ, or did not answer a checked collective (the message names them).
        DistributedError: no backend connects the ranks' devices.
        DeviceNotFoundError: LOCAL_RANK names a device this node does not have.

    Example:
        >>> torch.fl.distributed.init_process_group()   # torchrun --nproc-per-node 2 train.py
    """
    global _state
    if dist.is_initialized():
        raise DistributedError("the default process group is already initialised (call "
                               "torch.fl.distributed.preflight() to check a group created elsewhere).")
    if _state is not None and _state.watchdog is not None:
        _state.watchdog.stop()  # the group it watched is gone; a new one gets a new watchdog
    if _state is not None and _state.liveness is not None:
        _state.liveness.stop()
    began = time.perf_counter()
    seconds = _seconds(timeout)
    # A negative or NaN wait would fail the first check as "the ranks cannot reach each other".
    if not (math.isfinite(seconds) and seconds >= 0):
        raise ValueError(f"init_process_group: timeout={timeout!r} is not a number of seconds >= 0")
    if preflight_timeout is not None and not (math.isfinite(preflight_timeout) and preflight_timeout > 0):
        raise ValueError(f"init_process_group: preflight_timeout={preflight_timeout!r} is not a number of "
                         "seconds > 0")
    checks = preflight_enabled() if preflight is None else preflight
    step_timeout = preflight_timeout or min(_checks.DEFAULT_TIMEOUT, seconds or _checks.DEFAULT_TIMEOUT)
    torch_timeout = timedelta(seconds=seconds + grace(seconds)) if seconds else None
    wanted = str(backend or "")
    if backend is not None:
        # Before the rendezvous: every rank fails alike, and none is left waiting for one that did.
        early = rank if rank >= 0 else int(os.environ.get("RANK", "0"))
        _check_backend(wanted, use_device(device) if device is not None else _rank_device(_local_rank(early)),
                       early)
    if store is None and wanted not in _STORELESS:
        store, rank, world_size = _rendezvous(init_method, rank, world_size, step_timeout, torch_timeout)
        init_method = None  # torch takes a store or an init_method, not both
    local_rank = _local_rank(rank)
    dev = use_device(device) if device is not None else _rank_device(local_rank)
    from ..runtime import set_device

    set_device(dev)
    desc = description_for(dev)
    chosen = backend or _backend_of(desc, dev)
    if backend is None:
        _check_backend(chosen, dev, rank)
    space = _checks.namespace(store) if store is not None else None
    mine = fingerprint.collect(dev, desc, chosen, explicit=backend is not None, local_rank=local_rank)
    verdict = None
    if checks and space is not None:
        verdict = _checks.exchange(space, rank, world_size, mine, step_timeout)
        chosen = verdict.backend
    elif space is not None:
        _checks.arrive(space, rank, world_size, step_timeout)
    if chosen == "flagcx":
        importlib.import_module("flagcx")  # its torch plugin registers the 'flagcx' backend
    elif chosen == mixed.BACKEND:
        mixed.register(dev)
    if verdict is not None and verdict.plan:
        _settle_autocast(dev, verdict.autocast, rank)
        if rank == 0:
            _log.warning("%s", verdict.plan)
    if seconds:
        enable_flight_recorder()
    extra = {"init_method": init_method} if init_method else {}
    if store is not None:
        extra.update(store=store, rank=rank, world_size=world_size)
    try:
        dist.init_process_group(chosen, timeout=torch_timeout, **extra, **kwargs)
    except (RuntimeError, ValueError) as exc:  # DistError, "Distributed package doesn't have NCCL built in"
        raise DistributedError(
            f"rank {rank}: torch.distributed could not create the '{chosen}' process group on {dev}: "
            f"{_first_line(exc)}. Why: another rank exited while the group was being built, or the "
            "backend cannot run here. Fix: read the other ranks' logs for the first error; check that "
            f"backend '{chosen}' fits this device (or leave backend= unset to take the description's).") from exc
    rank, world_size = dist.get_rank(), dist.get_world_size()
    report = None
    if checks and space is not None:
        timings = _checks.check_collectives(space, rank, world_size, dev, chosen, step_timeout, torch_timeout)
        row = _checks.row(rank, mine, chosen, timings, time.perf_counter() - began)
        report = _checks.gather_report(space, rank, world_size, row, chosen, row["seconds"], step_timeout)
        report.plan = verdict.plan if verdict is not None else ""
    elif checks:
        _log.info("preflight skipped: backend '%s' has no rendezvous store to compare ranks through", chosen)
    watch = None
    if seconds and unavailable():
        _log.warning("collective watchdog off: %s; torch's own timeout (%g s) still applies",
                     unavailable(), torch_timeout.total_seconds())
    elif seconds:
        watch = Watchdog(seconds, rank, world_size, space, context=f" ({dev}, {chosen})").start()
    live = Liveness(space, rank, world_size, str(dev)).start() if space is not None else None
    _state = _State(rank, world_size, local_rank, dev, chosen, space, report, watch, live)
    return report


def _log_host_traffic(model: nn.Module, link_gbps: float = 25.0) -> None:
    """What DDP's gradient all_reduce moves through each leader's host per step on a flmixed job."""
    payload = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    group = dist.group.WORLD
    kinds = len(group.layout.kinds) if isinstance(group, mixed.MixedProcessGroup) else 2
    cost = host_traffic(payload, kinds, link_gbps)
    _log.warning("DDP on %s across %d kinds of chip: %s of gradients per step; each leader copies %s between "
                 "device and host and sends %s over the link between vendors (%.2f ms at %g Gb/s; "
                 "torch.fl.distributed.host_traffic for another link)", mixed.BACKEND, kinds, _size(payload),
                 _size(cost["device_host_bytes"]), _size(cost["link_bytes"]), cost["link_seconds"] * 1e3,
                 link_gbps)


def _size(n: float) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e5 else f"{n / 1e3:.1f} kB"


def _settle_autocast(dev: torch.device, dtype: str, rank: int) -> None:
    """Make torch.autocast on this rank's device use the dtype the job agreed on (fingerprint's rule)."""
    wanted = getattr(torch, dtype)
    if torch.get_autocast_dtype(dev.type) != wanted:
        _log.info("rank %d: autocast on %s uses %s, the dtype every chip of this job computes", rank, dev.type,
                  dtype)
        torch.set_autocast_dtype(dev.type, wanted)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else 'no message'}"


def _check_backend(backend: str, dev: torch.device, rank: int) -> None:
    """A backend this torch lacks, or one that cannot take this device's tensors, is an error now, not
    raw c10d text later."""
    if backend in _STORELESS or backend.upper() in dist.Backend._plugins or backend == mixed.BACKEND or \
            not hasattr(dist, "is_backend_available"):
        return  # (flmixed is registered once the device is known)
    build = f"torch {torch.__version__}"
    if not dist.is_backend_available(backend):
        have = ", ".join(b for b in ("gloo", "nccl", "mpi", "ucc", "xccl") if dist.is_backend_available(b))
        raise DistributedError(
            f"rank {rank}: backend '{backend}' is not available: this {build} was built without it (it has "
            f"{have or 'none'}). Fix: leave backend= unset to take the backend of this device's "
            "description, pass one this build has (gloo runs on the CPU), or install a torch build with "
            f"'{backend}'.")
    devices = getattr(dist.Backend, "backend_capability", {}).get(backend)
    if dev.type == "cpu" and devices is not None and "cpu" not in devices:
        raise DistributedError(
            f"rank {rank}: backend '{backend}' cannot run on this rank's device, the host CPU: it only "
            f"takes {', '.join(devices)} tensors, and this machine has no such device visible to torch-fl. "
            "Fix: leave backend= unset (the CPU description uses gloo) or pass backend='gloo'; on a GPU "
            "node, check the driver with 'torchfl doctor' and CUDA_VISIBLE_DEVICES.")


def _tcp_store(host: str, port: int, world_size: int, master: bool, bound: float) -> dist.Store:
    """A TCPStore whose host does not wait for the others, connected within about `bound` seconds:
    a client's connect overshoots its own timeout (5 s -> 8 s on torch 2.13), so it retries short
    attempts until the deadline."""
    deadline = time.monotonic() + bound
    while True:
        left = deadline - time.monotonic()
        attempt = bound if master else max(0.5, min(2.0, left))
        try:
            if master:
                return dist.TCPStore(host, port, world_size, is_master=True, timeout=timedelta(seconds=attempt),
                                     wait_for_workers=False, multi_tenant=True)
            return _client_store(host, port, world_size, attempt)
        except _checks._StoreError:
            if master or time.monotonic() + 0.5 > deadline:
                raise


# How long a connected client may take to finish torch's store handshake: milliseconds when the server
# is a TCPStore, forever when it is another program that accepted the connection and never answers.
_HANDSHAKE = 10.0


def _client_store(host: str, port: int, world_size: int, attempt: float) -> dist.Store:
    """A TCPStore client, given up on (with the cause named) when whatever listens at host:port accepts
    the connection but never answers torch's handshake: another program holds MASTER_PORT. torch's
    client would wait in that handshake without a timeout (measured: over 400 s on torch 2.13)."""
    import threading

    result: list[Any] = []

    def connect() -> None:
        try:
            result.append(dist.TCPStore(host, port, world_size, is_master=False, timeout=timedelta(seconds=attempt),
                                        wait_for_workers=False, multi_tenant=True))
        except BaseException as exc:  # handed to the caller's thread
            result.append(exc)

    worker = threading.Thread(target=connect, name="torch_fl-store-connect", daemon=True)
    worker.start()
    worker.join(attempt + _HANDSHAKE)
    if not result:
        rank = os.environ.get("RANK", "?")
        raise DistributedError(
            f"rank {rank}: a program at {host}:{port} (MASTER_ADDR:MASTER_PORT) accepted the connection but "
            f"did not answer as torch's rendezvous store within {attempt + _HANDSHAKE:g} s: another program "
            "holds MASTER_PORT (rank 0 then fails to open the store there, or is about to). Fix: pick a free "
            "MASTER_PORT for this job (torchrun --master-port, or --rdzv-endpoint host:0 to let torchrun pick "
            "one); `ss -ltnp` on the master node shows which program holds the port.")
    if isinstance(result[0], BaseException):
        raise result[0]
    return result[0]


def _rendezvous(init_method: str | None, rank: int, world_size: int, bound: float,
                timeout: timedelta | None) -> tuple[dist.Store, int, int]:
    """What torch.distributed.init_process_group does before creating the group, done first so the
    ranks can talk through the store before choosing the backend.

    Connecting to the store takes at most `bound` seconds. Under env:// and tcp:// the store's host
    does not wait for the others to connect (torch's TCPStore would, for the whole group timeout,
    without saying who is missing): the arrival step after it names them."""
    from urllib.parse import parse_qs, urlparse

    from torch.distributed.rendezvous import rendezvous

    timeout = timeout or dist.default_pg_timeout
    url = urlparse(init_method or "env://")
    query = {k: v[-1] for k, v in parse_qs(url.query).items()}
    where = ""
    agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == str(True)  # torchrun's agent hosts it
    try:
        if url.scheme in ("env", "tcp") and set(query) <= {"rank", "world_size"}:
            if url.scheme == "env":
                host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
                rank = int(os.environ["RANK"]) if rank < 0 else rank
                world_size = int(os.environ["WORLD_SIZE"]) if world_size < 0 else world_size
            else:
                host, port = url.hostname or "", int(url.port or 0)
                rank = int(query.get("rank", rank))
                world_size = int(query.get("world_size", world_size))
            where = f" at {host}:{port}"
            store = _tcp_store(host, port, world_size, rank == 0 and not agent, bound)
        else:
            store, rank, world_size = next(rendezvous(init_method or "env://", rank, world_size,
                                                      timeout=timedelta(seconds=bound)))
    except KeyError as exc:
        raise DistributedError(f"init_process_group: {exc.args[0]} is not set: under env:// (the default) "
                               "RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT come from the launcher. Fix: "
                               "start the script with torchrun, or pass init_method=, rank= and "
                               "world_size=.") from None
    except _checks._StoreError as exc:
        if rank == 0 and not agent:
            raise DistributedError(
                f"rank 0: init_process_group could not open the rendezvous store{where}: "
                f"{_first_line(exc)}. Fix: pick a free MASTER_PORT (another job may hold this one) and "
                "check that MASTER_ADDR is this host.") from exc
        if agent:
            raise DistributedError(
                f"rank {rank}: init_process_group could not reach torchrun's rendezvous store{where} within "
                f"{bound:g} s ({_first_line(exc)}): the agent of node 0 has exited or is unreachable. Fix: "
                "read node 0's torchrun log; check --rdzv-endpoint/--master-addr and the firewall.") from None
        raise _checks.RanksMissingError(
            f"rank {rank}: init_process_group gave up after {bound:g} s: it could not reach the rendezvous "
            f"store{where}, which rank 0 hosts: rank 0 never arrived. It crashed or hung before calling "
            "init_process_group, was never started, or MASTER_ADDR/MASTER_PORT point elsewhere. Fix: read "
            "rank 0's log for an earlier error and check the launch command; if it only starts slowly, "
            f"raise the bound ({_checks.BOUND_HELP}).") from None
    store.set_timeout(timeout)
    return store, rank, world_size


def preflight(timeout: float | None = None) -> PreflightReport:
    """Run the preflight on a default process group that torch.distributed (or a framework) created.

    The backend is already chosen, so the environment step only compares; the watchdog is not started
    (it needs the flight recorder, which must be enabled before the group exists: use
    torch.fl.distributed.init_process_group for that).

    Raises:
        PreflightError: as for init_process_group.
    """
    if not dist.is_initialized():
        raise DistributedError("no default process group: call torch.fl.distributed.init_process_group() "
                               "(or torch.distributed.init_process_group) first.")
    began = time.perf_counter()
    step_timeout = timeout or _checks.DEFAULT_TIMEOUT
    rank, world_size = dist.get_rank(), dist.get_world_size()
    backend = str(dist.get_backend())
    local_rank = _local_rank(rank)
    dev = device()
    # torch keeps the group's store private; it is the same store torch's own barriers use.
    space = _checks.namespace(dist.distributed_c10d._get_default_store())
    mine = fingerprint.collect(dev, description_for(dev), backend, explicit=True, local_rank=local_rank)
    _checks.exchange(space, rank, world_size, mine, step_timeout)
    timings = _checks.check_collectives(space, rank, world_size, dev, backend, step_timeout,
                                        _group_timeout(dev))
    row = _checks.row(rank, mine, backend, timings, time.perf_counter() - began)
    return _checks.gather_report(space, rank, world_size, row, backend, row["seconds"], step_timeout)


def _group_timeout(dev: torch.device) -> timedelta | None:
    """The default group's current timeout, where torch exposes it (None: unknown)."""
    try:
        return dist.group.WORLD._get_backend(dev).options._timeout
    except (AttributeError, RuntimeError):
        return None


# DDP ----------------------------------------------------------------------------------------------
def wrap_ddp(model: nn.Module, **kwargs: Any) -> nn.parallel.DistributedDataParallel:
    """Move `model` to this rank's device and wrap it in DistributedDataParallel with the device_ids
    that device type needs: None on the host CPU, ``[device]`` on an accelerator. Keyword arguments
    pass through (an explicit ``device_ids`` wins).

    Example:
        >>> ddp = torch.fl.distributed.wrap_ddp(MyModel())
    """
    dev = device()
    model = model.to(dev)
    if _state is not None and _state.backend == mixed.BACKEND and _state.rank == 0:
        _log_host_traffic(model)
    if dev.type != "cpu" and "device_ids" not in kwargs:
        kwargs.update(device_ids=[dev], output_device=dev)
    return nn.parallel.DistributedDataParallel(model, **kwargs)
