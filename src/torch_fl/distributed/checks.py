"""The preflight: a broken multi-rank setup fails at initialisation, with a message naming the rank.

Two steps, both with a short timeout:

1. **Environment.** Every rank writes its fingerprint (`fingerprint.collect`) to the rendezvous store
   under its own key; rank 0 waits for all of them, compares them and writes one verdict (the backend,
   or an error) that every rank reads. The store, not a collective, carries this step: it runs before
   the backend is initialised (the backend choice depends on it), costs O(world size) store operations
   in total, and a missing key names the rank that never arrived, where a collective that never
   completes names nobody.
2. **Collectives.** A checked ``all_reduce``, ``broadcast`` and ``barrier`` on the rank's real device
   with the chosen backend. Before each, a rank writes an arrival key; when the collective does not
   complete in time, the ranks without an arrival key are the ones that did not answer. Completion is
   polled with ``Work.is_completed()``, which every backend implements, instead of trusting each
   backend's ``Work.wait(timeout)``.

Rank 0 then gathers one report row per rank and logs a one-line summary (INFO) and the table (DEBUG)
on the ``torch_fl.distributed`` logger.
"""

from __future__ import annotations

import itertools
import json
import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from ..errors import DistributedError as DistributedError  # re-exported: distributed/__init__.py
from ..errors import PreflightError
from ..errors import RanksMissingError as RanksMissingError  # re-exported: distributed/__init__.py
from ..report import Table, render_table
from .fingerprint import Fingerprint, Verdict, decide, ranks_text

_log = logging.getLogger("torch_fl.distributed")

DEFAULT_TIMEOUT = 60.0  # seconds; the first NCCL-style collective also builds the communicator
_VERDICT_MARGIN = 5.0  # ranks > 0 wait this much longer than rank 0, which must time out first
_BACKEND_MARGIN = 2.0  # the backend's own timeout during the checks: just after ours
_generation = itertools.count(1)
_PEER_GONE = re.compile(r"closed by peer|reset by peer|Broken pipe|Connection refused|EOF", re.I)
# A store timeout or lost connection: DistStoreError/DistNetworkError on recent torch, RuntimeError before.
_StoreError = getattr(dist, "DistError", RuntimeError)


def namespace(store: dist.Store) -> dist.Store:
    """A fresh key space in the rendezvous store for one initialisation (every rank calls
    init_process_group the same number of times, so the generation numbers agree)."""
    return dist.PrefixStore(f"torch_fl/{next(_generation)}", store)


def _missing(store: dist.Store, keys: Sequence[str]) -> list[int]:
    return [rank for rank, key in enumerate(keys) if not store.check([key])]


def _get_all(store: dist.Store, keys: Sequence[str]) -> list[bytes]:
    multi_get = getattr(store, "multi_get", None)  # one round trip; older torch lacks it
    return multi_get(list(keys)) if multi_get else [store.get(key) for key in keys]


def _absent(store: dist.Store, keys: Sequence[str]) -> list[int] | None:
    """`_missing`, or None when the store itself is gone (it lives in rank 0 under plain env://)."""
    try:
        return _missing(store, keys)
    except _StoreError:
        return None


# Step 1: environment ------------------------------------------------------------------------------
def exchange(store: dist.Store, rank: int, world_size: int, mine: Fingerprint, timeout: float) -> Verdict:
    """Publish this rank's fingerprint and return rank 0's verdict.

    Raises:
        PreflightError: ranks differ, or some never published within `timeout` seconds.
    """
    store.set(f"fingerprint/{rank}", json.dumps(mine))
    keys = [f"fingerprint/{r}" for r in range(world_size)]
    if rank == 0:
        try:
            store.wait(keys, timedelta(seconds=timeout))
        except _StoreError:
            missing = _missing(store, keys)
            verdict = Verdict("", never_arrived(missing, world_size, timeout), missing)
        else:
            verdict = decide([json.loads(value) for value in _get_all(store, keys)])
        store.set("verdict", json.dumps(asdict(verdict)))
    else:
        try:
            store.wait(["verdict"], timedelta(seconds=timeout + _VERDICT_MARGIN))
        except _StoreError:
            missing = _absent(store, keys)
            if missing:
                raise RanksMissingError(f"rank {rank}: {never_arrived(missing, world_size, timeout)}") from None
            if missing is None:
                who = "the rendezvous store is unreachable (rank 0, or the launcher's agent, is gone)"
            else:
                who = "every rank published its environment, but rank 0 did not answer"
            raise PreflightError(f"rank {rank}: the preflight got no verdict from rank 0 within "
                                 f"{timeout + _VERDICT_MARGIN:g} s: {who}.") from None
        verdict = Verdict(**json.loads(store.get("verdict")))
        store.set(f"read/{rank}", "")
    if verdict.error:
        if rank == 0:
            _outlive_readers(store, world_size)
        if verdict.missing:
            raise RanksMissingError(f"rank {rank}: {verdict.error}")
        raise PreflightError(f"rank {rank}: torch-fl preflight failed: {verdict.error}")
    return verdict


BOUND_HELP = ("preflight_timeout= of torch.fl.distributed.init_process_group; default min(60 s, "
              "FL_COLLECTIVE_TIMEOUT)")


def never_arrived(missing: Sequence[int], world_size: int, timeout: float) -> str:
    """What happened, why and the fix, for ranks that never reached init_process_group."""
    verb = "was" if len(missing) == 1 else "were"
    return (f"init_process_group gave up after {timeout:g} s: {ranks_text(missing)} never arrived "
            f"({world_size - len(missing)} of {world_size} did). Such a rank crashed or hung before "
            f"calling init_process_group, {verb} never started (the launcher started fewer processes "
            f"than WORLD_SIZE={world_size}), or uses another MASTER_ADDR/MASTER_PORT. Fix: read that "
            "rank's log for an earlier error and check the launch command; if it only starts slowly, "
            f"raise the bound ({BOUND_HELP}).")


def arrive(store: dist.Store, rank: int, world_size: int, timeout: float) -> None:
    """Wait at most `timeout` seconds for every rank to reach init_process_group (the preflight's
    environment step does this when the preflight is on).

    Rank 0 (which hosts the store under plain env://) waits for every arrival key; on a timeout it
    writes the missing ranks for the others and lets them read it before it raises. The other ranks
    poll for either outcome.

    Raises:
        RanksMissingError: naming the ranks that never arrived.
    """
    keys = [f"arrived/{r}" for r in range(world_size)]
    store.set(keys[rank], "")
    if rank == 0:
        try:
            store.wait(keys, timedelta(seconds=timeout))
            return
        except _StoreError:
            missing = _missing(store, keys)
        store.set("absent", json.dumps(missing))
        readers = [f"read/{r}" for r in range(1, world_size) if r not in missing]
        try:
            store.wait(readers, timedelta(seconds=10))
        except _StoreError:
            pass
        raise RanksMissingError(f"rank 0: {never_arrived(missing, world_size, timeout)}")
    deadline = time.monotonic() + timeout + _VERDICT_MARGIN
    pause = 0.01
    try:
        while time.monotonic() < deadline:
            if store.check(keys):
                return
            if store.check(["absent"]):
                missing = json.loads(store.get("absent"))
                store.set(f"read/{rank}", "")
                raise RanksMissingError(f"rank {rank}: {never_arrived(missing, world_size, timeout)}")
            time.sleep(pause)
            pause = min(pause * 2, 0.25)
        missing = _missing(store, keys)
    except _StoreError:
        raise RanksMissingError(
            f"rank {rank}: init_process_group lost the rendezvous store while waiting for the other "
            "ranks: rank 0 (which hosts it under env://) or the launcher's agent has exited. Fix: read "
            "rank 0's log first; its error is the cause.") from None
    raise RanksMissingError(f"rank {rank}: {never_arrived(missing, world_size, timeout)}")


def _outlive_readers(store: dist.Store, world_size: int, timeout: float = 10.0) -> None:
    """Under plain env:// the store lives in rank 0's process: before rank 0 raises (and exits), let
    the other ranks read the verdict, so that they fail with it rather than with a lost connection."""
    readers = [f"read/{r}" for r in range(1, world_size) if store.check([f"fingerprint/{r}"])]
    try:
        store.wait(readers, timedelta(seconds=timeout))
    except _StoreError:
        pass  # a rank that died meanwhile has nothing left to read


# Step 2: checked collectives ----------------------------------------------------------------------
@dataclass(frozen=True)
class _Stage:
    name: str
    start: Callable[[], tuple[dist.Work, torch.Tensor | None]]
    expected: torch.Tensor | None


def _stages(device: torch.device, rank: int, world_size: int) -> list[_Stage]:
    values = torch.full((8,), float(rank + 1), device=device)
    reference = torch.arange(1, 9, dtype=torch.float32)
    broadcast = (reference.clone() if rank == 0 else torch.zeros(8)).to(device)

    def all_reduce() -> tuple[dist.Work, torch.Tensor]:
        return dist.all_reduce(values, async_op=True), values

    def bcast() -> tuple[dist.Work, torch.Tensor]:
        return dist.broadcast(broadcast, src=0, async_op=True), broadcast

    def barrier() -> tuple[dist.Work, None]:
        return dist.barrier(async_op=True), None

    return [_Stage("all_reduce", all_reduce, torch.full((8,), world_size * (world_size + 1) / 2)),
            _Stage("broadcast", bcast, reference),
            _Stage("barrier", barrier, None)]


def _completes(work: dist.Work, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    pause = 0.0002
    while not work.is_completed():
        if time.monotonic() > deadline:
            return False
        time.sleep(pause)
        pause = min(pause * 2, 0.01)
    return True


def check_collectives(store: dist.Store, rank: int, world_size: int, device: torch.device,
                      backend: str, timeout: float, restore: timedelta | None) -> dict[str, float]:
    """Run the checked collectives on the default group; returns milliseconds per stage.

    Args:
        restore: the group's timeout, put back afterwards. While the checks run, the group's own
            timeout is `timeout` plus a margin: a collective given up on must still end, because a
            pending one keeps the process from exiting after the PreflightError. None: leave the
            group's timeout alone (it is unknown).

    Raises:
        PreflightError: a collective raised, returned a wrong value, or did not complete within
            `timeout` seconds (naming the ranks that never entered it).
    """
    where = f"on {device} with backend '{backend}'"
    group = dist.group.WORLD
    if not hasattr(group, "set_timeout"):
        restore = None  # torch < 2.3: the group's timeout cannot be changed after creation
    if restore is not None:
        group.set_timeout(timedelta(seconds=timeout + _BACKEND_MARGIN))
    timings: dict[str, float] = {}
    for stage in _stages(device, rank, world_size):
        store.set(f"{stage.name}/{rank}", "")
        began = time.perf_counter()
        try:
            work, result = stage.start()
        except Exception as exc:  # e.g. a backend that does not take this device's tensors
            raise PreflightError(f"rank {rank}: the preflight {stage.name} {where} failed: "
                                 f"{type(exc).__name__}: {exc}") from exc
        error: Exception | None = None
        done = _completes(work, timeout)
        if done:
            try:
                work.wait()  # raises the backend's error, if the collective failed
            except Exception as exc:
                error = exc
        if error is not None or not done:
            message = _not_answered(store, rank, world_size, stage.name, where, timeout, error)
            _log.error("%s", message)  # the backend may end the process before the exception is shown
            raise PreflightError(message) from error
        timings[stage.name] = (time.perf_counter() - began) * 1000
        if stage.expected is not None and result is not None:
            got = result.cpu()
            if not torch.equal(got, stage.expected):
                raise PreflightError(
                    f"rank {rank}: the preflight {stage.name} {where} returned {got.tolist()}, expected "
                    f"{stage.expected.tolist()}: the backend computes wrong results on this device. "
                    "Check the description's [collectives] backend and the vendor's collective library.")
    if restore is not None:
        group.set_timeout(restore)
    return timings


def _not_answered(store: dist.Store, rank: int, world_size: int, stage: str, where: str,
                  timeout: float, error: Exception | None) -> str:
    missing = _absent(store, [f"{stage}/{r}" for r in range(world_size)])
    head = f"rank {rank}: the preflight {stage} {where} " + (
        f"did not complete within {timeout:g} s: " if error is None else
        f"failed ({type(error).__name__}: {str(error).strip()}): ")
    if missing is None:
        return head + ("the rendezvous store is unreachable too (rank 0 or the launcher's agent is "
                       "gone), so which ranks did not answer is unknown: read rank 0's log first.")
    if missing:
        return head + (f"{ranks_text(missing)} did not answer (never entered it). Such a rank is stuck "
                       "before it or has crashed: read its log. In training this is the hang that "
                       "shows at step 300; the preflight shows it at step 0.")
    if error is not None and _PEER_GONE.search(str(error)):
        return head + ("every rank entered it, and a peer's process ended meanwhile (its connection "
                       "closed): that rank crashed or was killed. Fix: read the other ranks' logs; the "
                       "first error there is the cause, this one is its consequence.")
    return head + ("every rank entered it, so the ranks cannot reach each other through the backend: "
                   "check the network interface it uses (GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME or the "
                   "vendor's equivalent), firewalls between the nodes, and the vendor runtime's log.")


# Report -------------------------------------------------------------------------------------------
COLUMNS = ("rank", "local_rank", "host", "device", "backend", "torch", "torch_fl", "plugin",
           "description", "all_reduce", "broadcast", "barrier", "seconds")


@dataclass
class PreflightReport:
    """The preflight result: one row per rank on rank 0, this rank's row on the others."""

    world_size: int
    backend: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    plan: str = ""  # a job across vendors: its groups, backends and autocast dtype (fingerprint._plan)

    def summary(self) -> str:
        first = self.rows[0]
        slowest = {name: max(row[name] for row in self.rows) for name in ("all_reduce", "broadcast", "barrier")}
        hosts = len({row["host"] for row in self.rows})
        timings = ", ".join(f"{name} {ms:.1f} ms" for name, ms in slowest.items())
        return (f"preflight passed: {self.world_size} ranks on {hosts} host{'s' * (hosts > 1)}, "
                f"{self.backend} on {first['device'].split(':')[0]}, torch {first['torch']}, torch-fl "
                f"{first['torch_fl']}, description {first['description']}; {timings} (slowest rank); "
                f"{self.seconds:.2f} s")

    def rank_table(self) -> Table:
        """One row per rank, the timings with their units (the report model's table)."""
        return Table(list(COLUMNS), [[_cell(row, column) for column in COLUMNS] for row in self.rows])

    def table(self) -> str:
        """`rank_table` as text (torch_fl.report.render_table, as every command's tables)."""
        return render_table(self.rank_table())


def _cell(row: dict[str, Any], column: str) -> str:
    value = row.get(column, "")
    if column in ("all_reduce", "broadcast", "barrier") and isinstance(value, float):
        return f"{value:.1f} ms"
    if column == "seconds" and isinstance(value, float):
        return f"{value:.2f} s"
    return str(value)


def row(rank: int, mine: Fingerprint, backend: str, timings: dict[str, float], seconds: float) -> dict[str, Any]:
    keep = ("local_rank", "host", "device", "torch", "torch_fl", "plugin", "description")
    return {"rank": rank, **{k: mine[k] for k in keep}, "backend": backend, **timings, "seconds": seconds}


def gather_report(store: dist.Store, rank: int, world_size: int, mine: dict[str, Any], backend: str,
                  seconds: float, timeout: float) -> PreflightReport:
    """Every rank publishes its row; rank 0 collects them all and logs the summary."""
    store.set(f"row/{rank}", json.dumps(mine))
    report = PreflightReport(world_size, backend, [mine], seconds)
    if rank != 0:
        return report
    keys = [f"row/{r}" for r in range(world_size)]
    try:
        store.wait(keys, timedelta(seconds=timeout))
    except _StoreError:
        # Every rank has passed the barrier, so this is a rank that died right after it.
        _log.warning("preflight: no report from %s", ranks_text(_missing(store, keys)))
        return report
    report.rows = [json.loads(value) for value in _get_all(store, keys)]
    report.seconds = max(r["seconds"] for r in report.rows)
    _log.info("%s", report.summary())
    _log.debug("preflight, per rank:\n%s", report.table())
    return report
