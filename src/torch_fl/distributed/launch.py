"""Running a function in N local ranks: the one process launcher of torch-fl's commands.

``torchfl preflight`` and ``torchfl grade``'s distributed criterion both start their ranks here. Ranks are
real processes started by torchrun's engine (``torch.distributed.launcher.elastic_launch``: c10d
rendezvous on a free local port, ``spawn``), so they see what a training job started with torchrun
sees: RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR/MASTER_PORT and the agent's store (``env://``).

When one rank fails, the agent stops the others at once instead of leaving them waiting for it. A rank
still running after ``deadline_s`` exits with status 124 (a hung collective or rendezvous, a busy
host) and stops the job the same way, so a hung rank never hangs the command.

Example::

    from torch_fl.distributed.launch import run_local, failure_text
    results = run_local(my_module.rank_fn, "arg", nproc=2, deadline_s=120)  # rank_fn: importable by name
    if not all(r.ok for r in results):
        raise RuntimeError(failure_text(results))
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["DEADLINE_STATUS", "RankResult", "failure_text", "run_local"]

DEADLINE_STATUS = 124  # as timeout(1): the rank outlived its deadline


@dataclass(frozen=True)
class RankResult:
    """One rank's outcome: what its function returned, or why it has nothing (`error`)."""

    rank: int
    value: Any = None
    error: str | None = None
    stopped: bool = False  # killed by the agent because another rank failed first

    @property
    def ok(self) -> bool:
        return self.error is None


def run_local(fn: Callable[..., Any], *args: Any, nproc: int, deadline_s: float | None = None,
              name: str = "torchfl") -> list[RankResult]:
    """Run ``fn(*args)`` in `nproc` local ranks and return one result per rank, in rank order.

    Args:
        fn: a module-level function (the ranks are spawned: they import it by name); its return value
            must pickle.
        args: its arguments (must pickle).
        nproc: how many ranks.
        deadline_s: a rank still running after this many seconds exits with DEADLINE_STATUS.
        name: prefix of the rendezvous run id (shows in torch's logs).

    An exception in `fn`, a crash or the deadline is that rank's `error`; the ranks the agent then
    stopped get ``stopped=True``. Nothing raises for a failed rank.
    """
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=nproc, rdzv_backend="c10d",
                          rdzv_endpoint="localhost:0", run_id=f"{name}-{uuid.uuid4().hex[:8]}",
                          max_restarts=0, monitor_interval=0.1, start_method="spawn")
    # The agent's lines (rendezvous, "Terminating process ...") are about the launcher, not the ranks.
    quiet = [logging.getLogger(name) for name in ("torch.distributed.elastic", "torch.multiprocessing.spawn")]
    levels = [logger.level for logger in quiet]
    for logger in quiet:
        logger.setLevel(logging.CRITICAL)
    try:
        returned = elastic_launch(config, _rank_main)(fn, deadline_s, args)
    except ChildFailedError as exc:
        failed = {rank: _failure_error(failure, deadline_s) for rank, failure in exc.failures.items()}
        # The rank that failed first in time (the cause), not the lowest failed rank: ranks that fail
        # later are usually failing because of it.
        first = exc.get_first_failure()[0] if hasattr(exc, "get_first_failure") else min(failed)
        return [RankResult(rank, error=failed[rank]) if rank in failed else
                RankResult(rank, error=f"stopped when rank {first} failed", stopped=True)
                for rank in range(nproc)]
    finally:
        for logger, level in zip(quiet, levels, strict=True):
            logger.setLevel(level)
    return [RankResult(rank, value=returned[rank]) for rank in sorted(returned)]


def failure_text(results: list[RankResult]) -> str:
    """One line naming the failed ranks and their errors, and the ranks stopped because of them."""
    world = len(results)
    failed = [f"rank {r.rank} of {world} {' '.join((r.error or '').split())}"  # one line: tracebacks wrap
              for r in results if not r.ok and not r.stopped]
    stopped = [str(r.rank) for r in results if r.stopped]
    return "; ".join(failed) + (f"; stopped rank(s) {', '.join(stopped)}, left waiting for it" if stopped else "")


def _rank_main(fn: Callable[..., Any], deadline_s: float | None, args: tuple[Any, ...]) -> Any:
    """What each spawned rank runs: `fn`, under the deadline."""
    timer = None
    if deadline_s is not None:
        timer = threading.Timer(deadline_s, _expire, (deadline_s,))
        timer.daemon = True
        timer.start()
    try:
        return fn(*args)
    finally:
        if timer is not None:
            timer.cancel()


def _expire(deadline_s: float) -> None:
    print(f"rank {os.environ.get('RANK', '?')}: did not finish within {deadline_s:g} s", file=sys.stderr,
          flush=True)
    os._exit(DEADLINE_STATUS)  # the rank may be blocked in C (a collective): only _exit is sure to end it


def _failure_error(failure: Any, deadline_s: float | None) -> str:
    if failure.exitcode == DEADLINE_STATUS and deadline_s is not None:
        return f"did not finish within {deadline_s:g} s (killed)"
    message = failure.message
    if isinstance(message, dict):
        message = message.get("message", "")
    return f"exited with status {failure.exitcode}: {str(message).strip() or 'no error message'}"
