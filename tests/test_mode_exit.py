"""exit_mode: once a mode has exited, no C++ work of PyTorch's still holds it (a gloo worker dropping the
last copy needs the GIL, and deadlocks against a process group's destructor holding it)."""

from __future__ import annotations

import datetime
import logging
import sys
import threading
import time
import types

import pytest
import torch
import torch.distributed as dist
from torch.overrides import TorchFunctionMode

from torch_fl import _mode_exit
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


def join_later(group, delay_s: float) -> tuple[threading.Thread, list[float]]:
    """Rank 1 joins the collective after `delay_s`; the list gets the moment it starts joining."""
    started: list[float] = []

    def run() -> None:
        time.sleep(delay_s)
        started.append(time.monotonic())
        group.allreduce([torch.ones(4)]).wait()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, started


def copies(handle: EnteredMode) -> int:
    """The C++ copies of the mode's stack entries (beyond the references EnteredMode counted at start)."""
    mode = handle.mode
    return sys.getrefcount(mode) - handle._base


# Order, not seconds (issue 43: a loaded machine stretches every wall-clock bound): the exit returns only
# after the peer started the collective that releases the copy, and without reaching its timeout.
def test_the_exit_waits_for_work_in_flight_to_drop_its_copy(two_ranks, caplog):
    handle = EnteredMode(PassThrough)
    two_ranks[0].allreduce([torch.ones(4)])  # in flight, handle dropped: gloo's worker holds the modes
    peer, started = join_later(two_ranks[1], 0.2)
    with caplog.at_level(logging.DEBUG, logger="torch_fl.distributed"):
        handle.exit(timeout_s=300)
    returned = time.monotonic()
    assert copies(handle) == 0  # the worker dropped its copy while this thread waited
    assert started and started[0] <= returned  # it waited for the peer, which released the copy
    assert "still holds the exited mode" not in caplog.text  # ... and not for its timeout
    peer.join()


def test_a_copy_taken_before_the_mode_was_pushed_again_is_waited_for(two_ranks):
    """The collective copies the stack entry of the moment; the mode's own next call replaces that entry
    with a new one (torch.overrides pops and pushes it again), so the copy outlives the entry it came from."""
    handle = EnteredMode(PassThrough)
    two_ranks[0].allreduce([torch.ones(4)])
    torch.ones(2).add(1)
    peer, started = join_later(two_ranks[1], 0.2)
    handle.exit(timeout_s=300)
    assert started and started[0] <= time.monotonic() and copies(handle) == 0
    peer.join()


def test_without_work_in_flight_the_exit_does_not_wait(monkeypatch):
    handle = EnteredMode(PassThrough)
    torch.ones(2).add(1)  # through the mode: popped and pushed again around the call

    def no_sleep(seconds: float) -> None:
        raise AssertionError(f"exit waited ({seconds} s) with no copy of the mode held")

    monkeypatch.setattr(_mode_exit, "time", types.SimpleNamespace(monotonic=time.monotonic, sleep=no_sleep))
    handle.exit()
    assert copies(handle) == 0
    assert handle.mode not in torch.overrides._get_current_function_mode_stack()


def test_a_work_handle_kept_by_the_caller_ends_the_wait_at_the_timeout(two_ranks, caplog):
    handle = EnteredMode(PassThrough)
    work = two_ranks[0].allreduce([torch.ones(4)])
    join_later(two_ranks[1], 0)[0].join()
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
