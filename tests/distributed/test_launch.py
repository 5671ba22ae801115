"""torch_fl.distributed.launch: the one launcher of local ranks (torchfl preflight, torchfl grade)."""

from __future__ import annotations

import launch_workers
import pytest

from torch_fl.distributed.launch import RankResult, failure_text, run_local


@pytest.mark.slow  # the passing path also runs in test_distributed_ranks.py (torchfl preflight)
def test_ranks_see_the_torchrun_environment_and_return_values():
    results = run_local(launch_workers.report, nproc=2)
    assert [(r.rank, r.value["rank"], r.value["world"]) for r in results] == [(0, 0, 2), (1, 1, 2)]
    assert all(r.value["master"] for r in results)  # env:// works inside the ranks, as under torchrun
    assert all(r.ok and not r.stopped for r in results)


@pytest.mark.slow  # measured: 11 s on the shared 2-core machine (a subprocess/interpreter start)
def test_a_failed_rank_is_named_and_the_others_are_stopped_at_once():
    results = run_local(launch_workers.one_rank_fails, nproc=2, deadline_s=100)
    # stopped when rank 1 failed, not at rank 0's 120 s sleep nor at the 100 s deadline: the error says which
    # (phases, not seconds: a bound in seconds would fail on a loaded machine, issue 43)
    assert results[0].stopped and results[0].error == "stopped when rank 1 failed"
    assert not results[1].stopped and "ValueError: ranks disagree" in results[1].error
    assert failure_text(results) == ("rank 1 of 2 exited with status 1: ValueError: ranks disagree: rank 1: "
                                     "torch 2.4; stopped rank(s) 0, left waiting for it")


@pytest.mark.slow
def test_a_hung_rank_is_ended_at_its_deadline():
    results = run_local(launch_workers.hangs, nproc=1, deadline_s=2)
    # ended by the deadline (killed), not by its own end 120 s later, which would return a value
    assert results == [RankResult(0, error="did not finish within 2 s (killed)")]
    assert failure_text(results) == "rank 0 of 1 did not finish within 2 s (killed)"
