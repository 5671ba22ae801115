"""A rank's end: torch-fl's daemon threads (the liveness heartbeat, the collective watchdog) call into the
rendezvous store, and one still inside such a call when the interpreter finalizes is ended by CPython in
pybind11's noexcept GIL re-acquisition: "terminate called without an active exception", SIGABRT, after the
rank printed its results (a CI run of test_ddp_on_two_ranks_matches_one_process; pytorch/pytorch#38228).
Interpreter exit now stops those threads and waits for them (liveness.end_at_exit), and the watchdog no longer
keeps a destroyed group (and gloo's threads) alive into finalization."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def _printed(rank, prefix: str) -> list:
    lines = [line for line in rank.stdout.splitlines() if line.startswith(prefix)]
    assert lines, f"rank {rank.rank} printed no {prefix} line (rc {rank.returncode}):\n{rank.stdout}\n{rank.stderr}"
    return json.loads(lines[-1].removeprefix(prefix))


@pytest.mark.slow  # measured: 6 s (one interpreter start, 1 s in the store, 2 s of finalization), load 2
def test_a_heartbeat_inside_the_store_at_exit_is_waited_for(launch):
    (rank,) = launch("slow_store_at_exit", nproc=1)
    # Without the wait: rc -6 (SIGABRT, "terminate called without an active exception") or -11 (SIGSEGV).
    assert rank.returncode == 0, rank.stderr
    assert rank.result["entered"] is True  # the heartbeat was inside the store when the script ended
    assert "HEARTBEAT_ANSWERED" in rank.stdout  # and finished its call before finalization
    assert "terminate called" not in rank.stderr


@pytest.mark.slow  # measured: 4 s (two ranks) on the shared 2-core machine, load 2
def test_torch_fl_threads_have_ended_when_a_rank_finalizes(launch):
    ranks = launch("threads_at_exit")
    for r in ranks:
        assert r.returncode == 0, r.stderr
        assert "torch_fl-liveness" in r.result["threads"]  # the job ran with the heartbeat
        assert _printed(r, "THREADS_AT_EXIT=") == []  # none left to be ended inside a store call


@pytest.mark.slow  # measured: 4 s (two ranks), load 2
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="lists the process's threads from /proc")
def test_destroy_process_group_frees_the_group_and_its_threads(launch):
    # The collective watchdog held the default group, so destroy_process_group left gloo's threads running
    # until its next wake (up to 5 s), or until interpreter finalization tore the group down.
    ranks = launch("gloo_threads_after_destroy")
    for r in ranks:
        assert r.returncode == 0, r.stderr
        assert r.result["during"], "no gloo thread while the group existed: nothing to check"
        assert r.result["after"] == []
