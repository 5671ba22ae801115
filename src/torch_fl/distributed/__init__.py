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
from ..device import description_for, device_map, resolve
from ..errors import DeviceNotFoundError
from . import checks as _checks
from . import fingerprint
from .checks import DistributedError, PreflightError, Report
from .watchdog import CollectiveTimeoutError, Watchdog, enable_flight_recorder, grace, unavailable

__all__ = [
    "CollectiveTimeoutError", "DistributedError", "PreflightError", "Report", "device",
    "init_process_group", "preflight", "wrap_ddp",
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
    report: Report | None
    watchdog: Watchdog | None


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
    """acc{LOCAL_RANK} through the device map; every rank shares the host when it is the only device."""
    mapping = device_map()
    wanted = f"acc{local_rank}"
    if wanted in mapping:
        return resolve(wanted)
    if all(dev.type == "cpu" for dev in mapping.values()):
        return resolve("acc0")
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
                       **kwargs: Any) -> Report | None:
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
    if store is None and wanted not in _STORELESS:
        store, rank, world_size = _rendezvous(init_method, rank, world_size, torch_timeout)
        init_method = None  # torch takes a store or an init_method, not both
    local_rank = _local_rank(rank)
    dev = resolve(device) if device is not None else _rank_device(local_rank)
    from ..runtime import set_device

    set_device(dev)
    desc = description_for(dev)
    chosen = backend or _backend_of(desc, dev)
    space = _checks.namespace(store) if store is not None else None
    mine = fingerprint.collect(dev, desc, chosen, explicit=backend is not None, local_rank=local_rank)
    if checks and space is not None:
        chosen = _checks.exchange(space, rank, world_size, mine, step_timeout).backend
    if chosen == "flagcx":
        importlib.import_module("flagcx")  # its torch plugin registers the 'flagcx' backend
    if seconds:
        enable_flight_recorder()
    extra = {"init_method": init_method} if init_method else {}
    if store is not None:
        extra.update(store=store, rank=rank, world_size=world_size)
    dist.init_process_group(chosen, timeout=torch_timeout, **extra, **kwargs)
    rank, world_size = dist.get_rank(), dist.get_world_size()
    report = None
    if checks and space is not None:
        timings = _checks.check_collectives(space, rank, world_size, dev, chosen, step_timeout, torch_timeout)
        row = _checks.row(rank, mine, chosen, timings, time.perf_counter() - began)
        report = _checks.gather_report(space, rank, world_size, row, chosen, row["seconds"], step_timeout)
    elif checks:
        _log.info("preflight skipped: backend '%s' has no rendezvous store to compare ranks through", chosen)
    watch = None
    if seconds and unavailable():
        _log.warning("collective watchdog off: %s; torch's own timeout (%g s) still applies",
                     unavailable(), torch_timeout.total_seconds())
    elif seconds:
        watch = Watchdog(seconds, rank, world_size, space, context=f" ({dev}, {chosen})").start()
    _state = _State(rank, world_size, local_rank, dev, chosen, space, report, watch)
    return report


def _rendezvous(init_method: str | None, rank: int, world_size: int,
                timeout: timedelta | None) -> tuple[dist.Store, int, int]:
    """What torch.distributed.init_process_group does before creating the group, done first so the
    ranks can talk through the store before choosing the backend."""
    from torch.distributed.rendezvous import rendezvous

    timeout = timeout or dist.default_pg_timeout
    store, rank, world_size = next(rendezvous(init_method or "env://", rank, world_size, timeout=timeout))
    store.set_timeout(timeout)
    return store, rank, world_size


def preflight(timeout: float | None = None) -> Report:
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
    if dev.type != "cpu" and "device_ids" not in kwargs:
        kwargs.update(device_ids=[dev], output_device=dev)
    return nn.parallel.DistributedDataParallel(model, **kwargs)
