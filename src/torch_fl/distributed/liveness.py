"""Which rank died: when a rank ends mid-job, the survivors name it instead of gloo's raw
"Connection reset by peer" (or "closed by peer", "Broken pipe").

A rank's death is visible to its peers only as a broken connection, and the broken connection says
nothing about who or why. So every rank leaves word in the rendezvous store (which torchrun's agent, or
rank 0, hosts), in the namespace of its process group:

- **its own failure**: an exception that ends a rank (a Python error escaping the script, an
  unsupported op on its chip, an OOM) is written as ``died/<rank>`` with its first line, before the
  process exits (``sys.excepthook``, and ``threading.excepthook`` for a failing worker thread);
- **a normal exit** while others may still wait: ``left/<rank>`` at interpreter exit;
- **a heartbeat** counter ``beat/<rank>``, bumped every second by a daemon thread, for deaths that
  leave no word (SIGKILL, a segfault, the OOM killer, a node that vanished).

A survivor whose script ends on a lost-peer error reads those keys and adds one line after the
traceback: which rank, on which device, and its own error; or which rank stopped its heartbeat. The
survivor's own key records that it stopped because of that rank, so the root cause stays first.
"""

from __future__ import annotations

import atexit
import json
import logging
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import torch.distributed as dist

from .fingerprint import ranks_text

_log = logging.getLogger("torch_fl.distributed")

BEAT_SECONDS = 1.0
# How long interpreter exit waits for this module's threads to leave a store call (a live store answers in
# milliseconds; a dead host fails the call at once; a hung one is not waited for past this).
EXIT_JOIN_SECONDS = 5.0
_PEER_LOST = ("closed by peer", "reset by peer", "broken pipe", "connection refused", "socket closed",
              "connection closed", "peer")
_DIED, _LEFT, _BEAT, _ORDER = "died/", "left/", "beat/", "death-order"


_store_threads: list[tuple[threading.Event, threading.Thread]] = []


def end_at_exit(stop: threading.Event, thread: threading.Thread) -> None:
    """Have interpreter exit set `stop` and wait (at most EXIT_JOIN_SECONDS) for `thread`, a daemon thread of
    torch-fl's that calls into the rendezvous store (the heartbeat, the collective watchdog).

    Why: a daemon thread still inside a store call when the interpreter finalizes is ended by CPython
    (pthread_exit) as it takes the GIL back in pybind11's gil_scoped_release destructor, which is noexcept:
    std::terminate, "terminate called without an active exception", SIGABRT (or SIGSEGV) after the script's
    last line (pytorch/pytorch#38228). atexit runs before finalization, while the thread may still finish.
    """
    _store_threads[:] = [(s, t) for s, t in _store_threads if t.ident is None or t.is_alive()]  # ended ones go
    _store_threads.append((stop, thread))


def _end_store_threads() -> None:
    for stop, _ in _store_threads:
        stop.set()
    deadline = time.monotonic() + EXIT_JOIN_SECONDS
    for _, thread in _store_threads:
        if thread.is_alive():
            thread.join(max(0.0, deadline - time.monotonic()))


atexit.register(_end_store_threads)  # at import, before any Liveness._left: runs after them (atexit is LIFO)


class Liveness:
    """This rank's word in the store, and the reading of the others'."""

    def __init__(self, store: dist.Store, rank: int, world_size: int, device: str) -> None:
        self.store, self.rank, self.world_size, self.device = store, rank, world_size, device
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="torch_fl-liveness", daemon=True)
        self._previous: dict[str, Any] = {}
        self._died = False

    # this rank -----------------------------------------------------------------------------------
    def start(self) -> Liveness:
        self._safe(lambda: self.store.add(f"{_BEAT}{self.rank}", 1))
        end_at_exit(self._stop, self._thread)
        self._thread.start()
        self._previous = {"sys": sys.excepthook, "threading": threading.excepthook}
        sys.excepthook = self._excepthook
        threading.excepthook = self._thread_excepthook
        atexit.register(self._left)
        return self

    def stop(self) -> None:
        """Destroying the group: this rank ends its part normally (no word is a death after this)."""
        self._stop.set()
        if sys.excepthook == self._excepthook:
            sys.excepthook = self._previous["sys"]
        if threading.excepthook == self._thread_excepthook:
            threading.excepthook = self._previous["threading"]
        atexit.unregister(self._left)

    def _beat(self) -> None:
        while not self._stop.wait(BEAT_SECONDS):
            if not self._safe(lambda: self.store.add(f"{_BEAT}{self.rank}", 1)):
                return  # the store is gone: the job is ending

    def _safe(self, call: Callable[[], Any]) -> bool:
        try:
            call()
            return True
        except Exception:  # the store's host may be gone; liveness must never add an error
            return False

    def record_death(self, exc: BaseException, caused_by: str = "") -> None:
        self._died = True  # the interpreter still runs atexit after an uncaught error: not a normal exit
        word = {"rank": self.rank, "device": self.device, "error": first_line(exc), "caused_by": caused_by,
                "order": 0}
        self._safe(lambda: word.update(order=self.store.add(_ORDER, 1)))
        self._safe(lambda: self.store.set(f"{_DIED}{self.rank}", json.dumps(word)))

    def _left(self) -> None:
        self._stop.set()
        if self._died:
            return
        self._safe(lambda: self.store.set(f"{_LEFT}{self.rank}", self.device))

    def _excepthook(self, kind: type[BaseException], exc: BaseException, tb: Any) -> None:
        note = self.explain(exc) if peer_lost(exc) else ""
        if not note:
            self.record_death(exc)
        self._previous["sys"](kind, exc, tb)
        if note:
            print(f"torch-fl: {note}", file=sys.stderr, flush=True)

    def _thread_excepthook(self, args: Any) -> None:
        if args.exc_value is not None and not peer_lost(args.exc_value):
            self.record_death(args.exc_value)
        self._previous["threading"](args)

    # the others --------------------------------------------------------------------------------------
    def explain(self, exc: BaseException, wait: float = 3 * BEAT_SECONDS) -> str:
        """Who this rank lost, from the store: a rank's own word first, then a normal exit, then what
        another survivor found, else a stopped heartbeat (which takes up to `wait` seconds to see).
        Records this rank's death as caused by it."""
        others = [r for r in range(self.world_size) if r != self.rank]
        try:
            reason = self._reason(others, wait)
        except Exception:  # the store is gone with the rank that hosted it
            return (f"rank {self.rank} lost a peer ({first_line(exc)}), and the rendezvous store is gone "
                    "too: the rank that hosts it (rank 0 without torchrun's agent) has died. Fix: read rank "
                    "0's log for the first error.")
        if not reason:
            return ""
        self.record_death(exc, caused_by=reason)
        return f"rank {self.rank} stopped because {reason}"

    def _reason(self, others: list[int], wait: float) -> str:
        """Why this rank lost its peers ('' when the store says nothing), as 'rank N died: ...'."""
        words = self._words(others)
        died = [w for w in words if not w["caused_by"]]  # ranks that failed by themselves
        if died:
            root = died[0]
            return (f"rank {root['rank']} ({root['device']}) died: {root['error'].rstrip('.')}. Fix: read rank "
                    f"{root['rank']}'s log for that error; every other rank's error follows from it.")
        spoke = {w["rank"] for w in words}
        left = [r for r in others if r not in spoke and self.store.check([f"{_LEFT}{r}"])]
        if left:
            return (f"{ranks_text(left)} exited normally while this rank still waited in a collective: the "
                    "ranks ran different numbers of steps or batches (an uneven last batch, a rank-dependent "
                    "loop). Fix: give every rank the same number of steps (DistributedSampler(drop_last=True), "
                    "or torch.distributed.algorithms.Join).")
        if words:  # another survivor has already found the cause
            return words[0]["caused_by"]
        stopped = self._silent(others, wait)
        if stopped:
            return (f"{ranks_text(stopped)} died without a word (killed by a signal, a crash below Python "
                    "such as a segfault, the OOM killer, or its node was lost): its heartbeat stopped. Fix: "
                    "read that rank's log and the launcher's exit codes.")
        words = self._words(others)  # a survivor that looked first may have named it meanwhile
        return self._reason(others, 0.0) if words else ""

    def _words(self, ranks: list[int]) -> list[dict[str, Any]]:
        keys = [f"{_DIED}{r}" for r in ranks if self.store.check([f"{_DIED}{r}"])]
        return sorted((json.loads(self.store.get(k)) for k in keys), key=lambda w: w["order"])

    def _silent(self, ranks: list[int], wait: float) -> list[int]:
        before = {r: self._count(r) for r in ranks}
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            time.sleep(BEAT_SECONDS / 2)
            if any(not w["caused_by"] for w in self._words(ranks)):
                return []
            alive = {r for r in ranks if self._count(r) != before[r]}
            if len(alive) == len(ranks):
                return []
        return [r for r in ranks if self._count(r) == before[r]]

    def _count(self, rank: int) -> int:
        return self.store.add(f"{_BEAT}{rank}", 0)


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else 'no message'}"[:300]


def peer_lost(exc: BaseException) -> bool:
    """Whether `exc` (or its cause) is a collective that lost a peer."""
    seen = 0
    while exc is not None and seen < 5:
        text = str(exc).lower()
        if isinstance(exc, (RuntimeError, ConnectionError, dist.DistError)) and any(p in text for p in _PEER_LOST):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False
