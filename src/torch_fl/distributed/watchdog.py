"""Hang watchdog: a collective that does not finish within FL_COLLECTIVE_TIMEOUT ends the process with
an error that names the collective, this rank, the elapsed time, the ranks that never joined, and the
likely causes, instead of a hang.

What torch already has, and is used: every process group gets torch's own ``timeout`` (so gloo's
transport raises "Timed out waiting Nms for recv operation" and NCCL's watchdog tears the process down),
and torch's **flight recorder** (``TORCH_FR_BUFFER_SIZE``), which records every collective of every
process group with its name, sequence number, sizes and completion, for gloo as for NCCL (measured on
torch 2.13: +1-8 us on a 185 us gloo all_reduce; one dump ~20 us). What is missing is a message that says
what hung and why, and a guaranteed end on backends whose timeout does not fire. So this thread reads the
flight recorder every ``interval`` seconds and:

- publishes this rank's progress (the last collective it enqueued, per process group) to the rendezvous
  store, so that another rank's watchdog can tell which ranks never joined its collective;
- when a collective has been in flight longer than the timeout, logs the diagnosis, records it in
  torchrun's error file, and calls ``os._exit(124)``.

Why exit rather than raise: a thread blocked inside a collective does not run Python, so
``_thread.interrupt_main`` would only be seen once the collective returns, which is never; aborting a
gloo process group does not release a rank waiting in it (measured on torch 2.13); and after a partial
collective the communicator is unusable on every rank, so the job must restart all ranks anyway, which
torchrun does when a worker exits. torch's NCCL backend makes the same choice by default
(``TORCH_NCCL_ASYNC_ERROR_HANDLING=3``). torch's own timeout is set to the watchdog's plus a grace
period, so the diagnosis comes first and torch's error remains the backstop.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import torch.distributed as dist

from ..errors import CollectiveTimeoutError
from .fingerprint import ranks_text
from .liveness import end_at_exit

_log = logging.getLogger("torch_fl.distributed")

EXIT_CODE = 124  # timeout(1)'s "the command timed out"
FLIGHT_RECORDER_ENV = "TORCH_FR_BUFFER_SIZE"
FLIGHT_RECORDER_ENTRIES = "1000"  # only in-flight entries matter; older ones may be overwritten


def grace(timeout: float) -> float:
    """How much later than the watchdog torch's own timeout fires."""
    return max(5.0, 0.1 * timeout)


def interval(timeout: float) -> float:
    return min(max(timeout / 20, 0.25), 5.0)


def enable_flight_recorder() -> None:
    """Ask torch to record collectives; must run before the process group is created (torch reads the
    variable when its recorder starts). A value the user set is kept."""
    os.environ.setdefault(FLIGHT_RECORDER_ENV, FLIGHT_RECORDER_ENTRIES)


def unavailable() -> str:
    """Why the watchdog cannot see this process's collectives ('' when it can)."""
    try:
        from torch._C._distributed_c10d import _dump_fr_trace_json  # noqa: F401
    except ImportError:
        return "this torch build has no flight recorder API (_dump_fr_trace_json)"
    if os.environ.get(FLIGHT_RECORDER_ENV, "").strip() == "0":
        return f"{FLIGHT_RECORDER_ENV}=0 turns torch's flight recorder off"
    return ""


def flight_recorder() -> dict[str, Any]:
    """torch's flight recorder for this process: entries (collectives) and pg_status per group."""
    from torch._C._distributed_c10d import _dump_fr_trace_json

    return json.loads(_dump_fr_trace_json(True, False))


def _progress(trace: dict[str, Any]) -> dict[str, int]:
    return {pg: int(status.get("last_enqueued_collective", -1))
            for pg, status in trace.get("pg_status", {}).items()}


def _signature(entry: dict[str, Any]) -> str:
    """'gloo:all_reduce float[4]': what two ranks must agree on for a collective to complete."""
    shapes = ", ".join(f"{dtype.lower()}{list(size)}" for dtype, size in
                       zip(entry.get("input_dtypes", []), entry.get("input_sizes", []), strict=False))
    return f"{entry.get('profiling_name', 'collective')} {shapes}".strip()


def _in_flight(trace: dict[str, Any]) -> dict[str, list[Any]]:
    """Per process group, the oldest collective not finished yet: [sequence number, signature]."""
    found: dict[str, list[Any]] = {}
    for entry in sorted(trace.get("entries", []), key=lambda e: e["time_created_ns"]):
        if not entry.get("retired", True) and not entry.get("is_p2p", False):
            found.setdefault(str(entry.get("pg_id", 0)), [entry.get("collective_seq_id", 0), _signature(entry)])
    return found


class Watchdog:
    """Watches this rank's collectives through torch's flight recorder (see the module docstring).

    Args:
        timeout: seconds a collective may stay in flight.
        rank, world_size: this rank and the default group's size.
        store: the rendezvous store namespace for progress keys (None: no cross-rank diagnosis).
        trace: returns the flight recorder dump (replaced in tests).
        exit: ends the process (replaced in tests).
    """

    def __init__(self, timeout: float, rank: int, world_size: int, store: dist.Store | None = None,
                 *, trace: Callable[[], dict[str, Any]] = flight_recorder,
                 exit: Callable[[int], None] = os._exit, context: str = ""):
        self.timeout, self.rank, self.world_size, self.store = timeout, rank, world_size, store
        self.interval = interval(timeout)
        self.context = context
        self._trace, self._exit = trace, exit
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="torch_fl-collective-watchdog", daemon=True)
        self._group: Any = None

    def start(self) -> Watchdog:
        # The group this watchdog watches: a later group (after destroy_process_group and a new
        # init_process_group within one interval) is not its business. Without this, the old thread
        # saw "initialised" again and kept reading the flight recorder, publishing into the old store and
        # judging the new group's collectives against the old timeout, for the rest of the process.
        # A weak reference: destroy_process_group must free the group (gloo's threads end with it); held here,
        # it lived until this thread's next wake, or was destroyed during interpreter finalization when the
        # process ended first, which is when a group's teardown can abort the process (pytorch/pytorch#179291).
        self._group = weakref.ref(dist.group.WORLD) if dist.is_initialized() else None
        end_at_exit(self._stop, self._thread)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def watching(self) -> bool:
        """Whether the group this watchdog started with is still the default group."""
        return dist.is_initialized() and (self._group is None or dist.group.WORLD is self._group())

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.interval):
                if not self.watching():
                    return  # destroy_process_group ends the watch
                try:
                    self.check()
                except Exception as exc:  # the watchdog must never be what kills training
                    _log.debug("collective watchdog: %s: %s", type(exc).__name__, exc)
        finally:
            self.store = self._group = None  # keep the old store alive no longer

    def check(self, now_ns: int | None = None) -> str | None:
        """One round: publish progress, and end the process if a collective is overdue. Returns the
        diagnosis when it fired (useful where `exit` does not end the process)."""
        trace = self._trace()
        self._publish(trace)
        now_ns = time.time_ns() if now_ns is None else now_ns
        overdue = [e for e in trace.get("entries", []) if not e.get("retired", True)
                   and now_ns - e["time_created_ns"] > self.timeout * 1e9]
        if not overdue:
            return None
        entry = min(overdue, key=lambda e: e["time_created_ns"])
        message = self.diagnose(entry, trace, (now_ns - entry["time_created_ns"]) / 1e9)
        self._fire(message)
        return message

    def _publish(self, trace: dict[str, Any]) -> None:
        if self.store is not None:
            self.store.set(f"progress/{self.rank}", json.dumps(
                {"time": time.time(), "pg": _progress(trace), "open": _in_flight(trace)}))

    # Diagnosis ------------------------------------------------------------------------------------
    def diagnose(self, entry: dict[str, Any], trace: dict[str, Any], elapsed: float) -> str:
        seq = entry.get("collective_seq_id", 0)
        group = entry.get("process_group", ["0", "default_pg"])
        mine = _signature(entry)
        absent, mismatched, note = self._peers(str(entry.get("pg_id", 0)), seq, mine,
                                               entry.get("is_p2p", False), trace)
        lines = [f"rank {self.rank}{self.context}: collective #{seq} {mine} (process group "
                 f"{group[-1] or group[0]}) has not finished after {elapsed:.1f} s "
                 f"(FL_COLLECTIVE_TIMEOUT={self.timeout:g} s)."]
        if absent:
            lines.append("Ranks that have not joined it: " + "; ".join(absent) + ".")
        if mismatched:
            lines.append(f"Ranks running a different collective as #{seq}: " + "; ".join(mismatched) + ".")
        if note:
            lines.append(note)
        lines += ["Likely causes:", *(f"  - {c}" for c in _causes(bool(absent), bool(mismatched)))]
        lines.append(f"This process exits now with code {EXIT_CODE}: after a collective times out the "
                     "process group is unusable on every rank, and torchrun restarts or stops the job. "
                     "If the wait is legitimate (rank-0-only evaluation or checkpointing, a first "
                     "compilation), raise FL_COLLECTIVE_TIMEOUT.")
        return "\n".join(lines)

    def _peers(self, pg: str, seq: int, mine: str, p2p: bool,
               trace: dict[str, Any]) -> tuple[list[str], list[str], str]:
        """From the other ranks' published progress: who never joined collective `seq` of group `pg`,
        who runs another collective under that number, and a note when neither is known."""
        if self.store is None or p2p:
            return [], [], ""
        absent: list[str] = []
        mismatched: list[str] = []
        silent: list[int] = []
        try:
            for r in _members(trace, pg, self.world_size):
                if r == self.rank:
                    continue
                key = f"progress/{r}"
                if not self.store.check([key]):
                    silent.append(r)
                    continue
                seen = json.loads(self.store.get(key))
                if pg not in seen["pg"] and pg != "0":
                    continue  # not a member of that subgroup
                last = seen["pg"].get(pg, -1)
                if last < seq:
                    quiet = time.time() - seen["time"]
                    stale = f", last heard from {quiet:.0f} s ago" if quiet > 3 * self.interval + 1 else ""
                    absent.append(f"rank {r} (its last collective is #{last}{stale})")
                    continue
                theirs = seen.get("open", {}).get(pg)
                if theirs and theirs[0] == seq and theirs[1] != mine:
                    mismatched.append(f"rank {r} runs {theirs[1]}")
        except Exception as exc:  # the store lives in rank 0 or the agent, which may be gone
            return [], [], f"The other ranks' progress could not be read ({type(exc).__name__}: {exc})."
        if silent:
            absent.append(f"{ranks_text(silent)} (no progress published: its watchdog is off, or it "
                          "never finished init_process_group)")
        note = "" if absent or mismatched else f"Every other rank has entered #{seq} too."
        return absent, mismatched, note

    def _fire(self, message: str) -> None:
        _log.critical("%s", message)
        _record(CollectiveTimeoutError(message))
        for handler in logging.getLogger("torch_fl").handlers:
            handler.flush()
        sys.stderr.flush()
        self._exit(EXIT_CODE)


def _members(trace: dict[str, Any], pg: str, world_size: int) -> list[int]:
    for config in trace.get("pg_config", {}).values():
        if str(config.get("name", "")) == pg:
            try:
                return [int(r) for r in json.loads(config["ranks"])]
            except (ValueError, KeyError, TypeError):
                break
    return list(range(world_size))


def _causes(someone_absent: bool, mismatch: bool) -> list[str]:
    """The article's causes of a hang in collectives, the one the evidence points to first."""
    absent = ("a rank did not reach this collective: it crashed, is stuck, or took another code path "
              "(uneven batches per rank: use drop_last or DDP's join(); rank-0-only work longer than "
              "the timeout; an exception caught on one rank only)")
    init = ("inconsistent backend initialisation: ranks initialised with different backends, "
            "init_method or MASTER_ADDR/MASTER_PORT, or a description whose [collectives] backend does "
            "not fit the device (the preflight checks this at start unless FL_PREFLIGHT=0)")
    sync = ("sync semantics mismatch: ranks issue collectives in a different order or with different "
            "shapes, dtypes or ops, or code written for CUDA's asynchronous streams waits on a device "
            "that submits synchronously (rerun with TORCH_DISTRIBUTED_DEBUG=DETAIL to have torch compare "
            "every collective across ranks)")
    transport = ("the transport: the network interface the backend picked (GLOO_SOCKET_IFNAME, "
                 "NCCL_SOCKET_IFNAME or the vendor's equivalent), firewalls, a failed link")
    if mismatch:
        return [sync, absent, init, transport]
    if someone_absent:
        return [absent, init, sync, transport]
    return [sync, transport, init, absent]


def _record(exc: BaseException) -> None:
    """Write the diagnosis to torchrun's error file, so its failure summary shows it as the root cause
    (torchrun prints a plain-string ``message`` as is)."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path:
        return
    try:
        with open(path, "w") as file:
            json.dump({"message": f"{type(exc).__name__}: {exc}", "timestamp": int(time.time())}, file)
    except OSError as err:  # never let the report of a hang hide the hang
        _log.debug("could not write torchrun's error file %s: %s", path, err)
