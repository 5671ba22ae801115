"""exit_mode: once a mode has exited, no C++ work of PyTorch's still holds it (a gloo worker dropping the
last copy needs the GIL, and deadlocks against a process group's destructor holding it)."""

from __future__ import annotations

import datetime
import logging
import sys
import threading
import time

import pytest
import torch
import torch.distributed as dist
from torch.overrides import TorchFunctionMode

from torch_fl._mode_exit import EnteredMode, entered


class PassThrough(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


@pytest.fixture
def two_ranks():
    """Two gloo ranks in this process (one thread each), so that a collective of rank 0 stays in flight
    until rank 1 joins it."""
    store, groups = dist.HashStore(), [None, None]

    def make(rank: int) -> None:
        groups[rank] = dist.ProcessGroupGloo(store, rank, 2, datetime.timedelta(seconds=30))

    threads = [threading.Thread(target=make, args=(rank,)) for rank in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return groups


def join_later(group, delay_s: float) -> threading.Thread:
    def run() -> None:
        time.sleep(delay_s)
        group.allreduce([torch.ones(4)]).wait()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def copies(handle: EnteredMode) -> int:
    """The C++ copies of the mode's stack entries (beyond the references EnteredMode counted at start)."""
    mode = handle.mode
    return sys.getrefcount(mode) - handle._base


def test_the_exit_waits_for_work_in_flight_to_drop_its_copy(two_ranks):
    handle = EnteredMode(PassThrough)
    two_ranks[0].allreduce([torch.ones(4)])  # in flight, handle dropped: gloo's worker holds the modes
    peer = join_later(two_ranks[1], 0.2)
    start = time.monotonic()
    handle.exit()
    waited = time.monotonic() - start
    assert copies(handle) == 0  # the worker dropped its copy while this thread waited
    assert 0.1 < waited < 0.5 - 0.01
    peer.join()


def test_a_copy_taken_before_the_mode_was_pushed_again_is_waited_for(two_ranks):
    """The collective copies the stack entry of the moment; the mode's own next call replaces that entry
    with a new one (torch.overrides pops and re-pushes it), so the copy outlives the entry it came from."""
    handle = EnteredMode(PassThrough)
    two_ranks[0].allreduce([torch.ones(4)])
    torch.ones(2).add(1)
    peer = join_later(two_ranks[1], 0.2)
    start = time.monotonic()
    handle.exit()
    assert time.monotonic() - start > 0.1 and copies(handle) == 0
    peer.join()


def test_without_work_in_flight_the_exit_does_not_wait():
    handle = EnteredMode(PassThrough)
    torch.ones(2).add(1)  # through the mode: popped and pushed again around the call
    start = time.monotonic()
    handle.exit()
    assert time.monotonic() - start < 0.05 and copies(handle) == 0
    assert handle.mode not in torch.overrides._get_current_function_mode_stack()


def test_a_work_handle_kept_by_the_caller_ends_the_wait_at_the_timeout(two_ranks, caplog):
    handle = EnteredMode(PassThrough)
    work = two_ranks[0].allreduce([torch.ones(4)])
    join_later(two_ranks[1], 0).join()
    work.wait()
    with caplog.at_level(logging.DEBUG, logger="torch_fl.distributed"):
        handle.exit(timeout_s=0.05)
    assert "still holds the exited mode" in caplog.text
    assert copies(handle) == 1  # the work's copy: dropped on this thread (with the GIL) when it goes
    del work
    assert copies(handle) == 0


def test_entered_is_a_with_block_of_the_mode():
    with entered(PassThrough) as mode:
        assert torch.overrides._get_current_function_mode_stack()[-1] is mode
    assert mode not in torch.overrides._get_current_function_mode_stack()
