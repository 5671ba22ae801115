"""torch.fl.distributed in one process: the verdict across fingerprints, the watchdog's diagnosis, settings,
rank -> device, and a one-rank group (init, preflight report, wrap_ddp, watchdog shutdown)."""

from __future__ import annotations

import importlib
import json
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

import torch_fl
from torch_fl.distributed import fingerprint, watchdog
from torch_fl.errors import ConfigError, DeviceNotFoundError


def _print(**changes) -> dict:
    base = {"host": "n0", "local_rank": 0, "device": "cuda:0", "device_type": "cuda", "vendor": "NVIDIA",
            "torch": "2.13.0", "torch_fl": "0.1.0", "python": "3.11.9", "plugin": "-",
            "description": "cuda@aaaaaaaaaaaa", "description_path": "<builtin>/cuda.toml", "backend": "nccl",
            "explicit_backend": False, "flagcx": False}
    return {**base, **changes}


NPU = {"device": "npu:0", "device_type": "npu", "vendor": "Huawei", "plugin": "torch_npu 2.13.0",
       "description": "npu@bbbbbbbbbbbb", "description_path": "<builtin>/npu.toml", "backend": "hccl"}


# Verdict ------------------------------------------------------------------------------------------
def test_equal_ranks_get_their_descriptions_backend():
    assert fingerprint.decide([_print(), _print(local_rank=1)]) == fingerprint.Verdict("nccl")


def test_the_odd_rank_out_is_named_with_every_field_it_differs_in():
    prints = [_print(), _print(), _print(torch_fl="0.0.9", plugin="x 1"), _print()]
    verdict = fingerprint.decide(prints)
    assert not verdict.backend
    assert "  - torch-fl version: 0.1.0 on ranks 0-1, 3; 0.0.9 on rank 2" in verdict.error
    assert "  - vendor plugin: - on ranks 0-1, 3; x 1 on rank 2" in verdict.error
    assert "Differing from the others: rank 2." in verdict.error
    assert "FL_PREFLIGHT=0" in verdict.error


def test_a_description_difference_shows_the_file_of_each_variant():
    error = fingerprint.decide([_print(), _print(description="cuda@cccccccccccc",
                                                  description_path="/opt/cuda.toml")]).error
    assert ("device description: cuda@aaaaaaaaaaaa (<builtin>/cuda.toml) on rank 0; "
            "cuda@cccccccccccc (/opt/cuda.toml) on rank 1") in error


def test_ranks_of_two_vendors_use_flagcx_when_every_rank_has_it():
    prints = [_print(flagcx=True), _print(**NPU, flagcx=True)]
    verdict = fingerprint.decide(prints)
    assert verdict.backend == "flagcx" and not verdict.error
    assert "between kinds: FlagCX (installed on every rank)" in verdict.plan


def test_ranks_of_two_vendors_without_flagcx_stage_through_the_host_naming_the_ranks_that_lack_it():
    verdict = fingerprint.decide([_print(flagcx=True), _print(**NPU), _print(**NPU)])
    assert verdict.backend == "flmixed" and not verdict.error
    assert "NVIDIA cuda (cuda) on rank 0: nccl inside, leader rank 0" in verdict.plan
    assert "Huawei npu (npu) on ranks 1-2: hccl inside, leader rank 1" in verdict.plan
    assert "FlagCX would replace this, but it is not installed on ranks 1-2" in verdict.plan


def test_a_rank_on_the_host_among_accelerators_is_a_rank_that_lost_its_device():
    host = {"device": "cpu", "device_type": "cpu", "vendor": "host", "description": "cpu@dddddddddddd",
            "backend": "gloo"}
    error = fingerprint.decide([_print(), _print(**host), _print()]).error
    assert error.startswith("rank 1 runs on the host CPU while the others use an accelerator")
    assert "CUDA_VISIBLE_DEVICES" in error


def test_an_explicit_backend_is_used_as_given_but_must_agree():
    assert fingerprint.decide([_print(backend="gloo", explicit_backend=True)] * 2).backend == "gloo"
    error = fingerprint.decide([_print(backend="gloo", explicit_backend=True), _print()]).error
    assert "collective backend (backend= argument): gloo on rank 0; nccl on rank 1" in error


def test_rank_lists_stay_short():
    assert fingerprint.ranks_text([3]) == "rank 3"
    assert fingerprint.ranks_text([5, 0, 1, 2, 7, 8]) == "ranks 0-2, 5, 7-8"
    assert fingerprint.ranks_text(range(1024)) == "ranks 0-1023"


# Watchdog -----------------------------------------------------------------------------------------
def _entry(seq: int, *, retired: bool, age: float, now: int, name: str = "gloo:all_reduce") -> dict:
    return {"collective_seq_id": seq, "profiling_name": name, "retired": retired, "pg_id": 0,
            "process_group": ["0", "default_pg"], "input_dtypes": ["Float"], "input_sizes": [[4]],
            "is_p2p": False, "time_created_ns": now - int(age * 1e9)}


def _trace(*entries: dict, last: int) -> dict:
    return {"entries": list(entries), "pg_status": {"0": {"last_enqueued_collective": str(last)}},
            "pg_config": {}}


def _watchdog(store, trace: dict, exits: list[int], rank: int = 0, world_size: int = 3) -> watchdog.Watchdog:
    return watchdog.Watchdog(3, rank, world_size, store, trace=lambda: trace, exit=exits.append,
                             context=" (cpu, gloo)")


def test_a_collective_within_the_timeout_only_publishes_progress():
    store, exits, now = dist.HashStore(), [], time.time_ns()
    dog = _watchdog(store, _trace(_entry(4, retired=True, age=9, now=now),
                                  _entry(5, retired=False, age=1, now=now), last=5), exits)
    assert dog.check(now) is None and exits == []
    published = json.loads(store.get("progress/0"))
    assert published["pg"] == {"0": 5} and published["open"] == {"0": [5, "gloo:all_reduce float[4]"]}


def test_an_overdue_collective_names_itself_the_rank_and_who_never_joined():
    store, exits, now = dist.HashStore(), [], time.time_ns()
    store.set("progress/1", json.dumps({"time": time.time(), "pg": {"0": 4}, "open": {}}))
    store.set("progress/2", json.dumps({"time": time.time(), "pg": {"0": 5},
                                        "open": {"0": [5, "gloo:all_reduce float[4]"]}}))
    message = _watchdog(store, _trace(_entry(5, retired=False, age=3.4, now=now), last=5), exits).check(now)
    assert exits == [watchdog.EXIT_CODE] == [124]
    assert message.startswith("rank 0 (cpu, gloo): collective #5 gloo:all_reduce float[4] (process group "
                              "default_pg) has not finished after 3.4 s (FL_COLLECTIVE_TIMEOUT=3 s).")
    assert "Ranks that have not joined it: rank 1 (its last collective is #4)." in message
    assert "rank 2" not in message
    assert message.index("a rank did not reach") < message.index("sync semantics mismatch")


def test_ranks_in_another_collective_under_the_same_number_point_at_a_sync_mismatch():
    store, exits, now = dist.HashStore(), [], time.time_ns()
    for rank in (1, 2):
        store.set(f"progress/{rank}", json.dumps({"time": time.time(), "pg": {"0": 5},
                                                  "open": {"0": [5, "gloo:broadcast float[8]"]}}))
    message = _watchdog(store, _trace(_entry(5, retired=False, age=4, now=now), last=5), exits).check(now)
    assert "Ranks running a different collective as #5: rank 1 runs gloo:broadcast float[8]; rank 2 runs" in message
    assert message.split("Likely causes:\n")[1].startswith("  - sync semantics mismatch")


def test_a_rank_that_never_published_is_reported_as_silent():
    store, exits, now = dist.HashStore(), [], time.time_ns()
    message = _watchdog(store, _trace(_entry(2, retired=False, age=5, now=now), last=2), exits,
                        world_size=2).check(now)
    assert "rank 1 (no progress published: its watchdog is off, or it never finished init_process_group)" in message


# Settings and devices -----------------------------------------------------------------------------
def test_torch_fl_distributed_is_reachable_without_an_import():
    assert torch.fl.distributed is importlib.import_module("torch_fl.distributed")
    assert "distributed" in dir(torch_fl)


def test_bad_settings_name_the_variable(monkeypatch):
    from torch_fl import distributed

    assert distributed.preflight_enabled() and distributed.collective_timeout() == 600
    monkeypatch.setenv("FL_PREFLIGHT", "maybe")
    with pytest.raises(ConfigError, match="FL_PREFLIGHT: 'maybe' is neither on"):
        distributed.preflight_enabled()
    monkeypatch.setenv("FL_PREFLIGHT", "off")
    assert not distributed.preflight_enabled()
    monkeypatch.setenv("FL_COLLECTIVE_TIMEOUT", "-1")
    with pytest.raises(ConfigError, match="FL_COLLECTIVE_TIMEOUT: '-1' is not a number of seconds"):
        distributed.collective_timeout()


def test_every_local_rank_shares_the_host(monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert torch.fl.distributed.device() == torch.device("cpu")


def test_a_local_rank_beyond_the_devices_says_how_many_processes_fit(monkeypatch):
    monkeypatch.setenv("FL_DEVICE_MAP", "acc0=cuda:0,acc1=cuda:1")
    monkeypatch.setenv("LOCAL_RANK", "2")
    with pytest.raises(DeviceNotFoundError, match=r"LOCAL_RANK=2 maps to acc2, which does not exist: this node "
                                                  r"has 2 device\(s\) \(acc0 -> cuda:0, acc1 -> cuda:1\)\. "
                                                  r"Start at most 2 processes per node \(torchrun --nproc-per-node 2\)"):
        torch.fl.distributed.device()


# One rank, in this process ------------------------------------------------------------------------
@pytest.fixture
def one_rank(monkeypatch, tcp_init_method):
    monkeypatch.delenv(watchdog.FLIGHT_RECORDER_ENV, raising=False)  # init sets it; keep it out of later tests
    report = torch.fl.distributed.init_process_group(init_method=tcp_init_method(), rank=0, world_size=1,
                                                     timeout=30)
    yield report
    if dist.is_initialized():
        dist.destroy_process_group()


def test_one_rank_initialises_checks_and_wraps_ddp(one_rank):
    assert dist.get_backend() == "gloo" and dist.get_world_size() == 1
    assert [row["rank"] for row in one_rank.rows] == [0]
    assert one_rank.summary().startswith("preflight passed: 1 ranks on 1 host, gloo on cpu")
    assert one_rank.table().splitlines()[0].split()[:3] == ["rank", "local_rank", "host"]
    ddp = torch.fl.distributed.wrap_ddp(torch.nn.Linear(4, 2))
    assert ddp.device_ids is None  # DDP takes no device_ids for a host module
    ddp(torch.ones(3, 4)).sum().backward()
    # torch's timeout is the watchdog's plus a grace period, so the watchdog's diagnosis comes first
    backend = dist.group.WORLD._get_backend(torch.device("cpu"))
    assert backend.options._timeout == timedelta(seconds=30 + watchdog.grace(30))


def test_the_watchdog_stops_with_the_process_group(one_rank):
    from torch_fl import distributed

    thread = distributed._state.watchdog._thread
    assert thread.is_alive()
    dist.destroy_process_group()
    thread.join(timeout=5)
    assert not thread.is_alive()


def test_the_watchdog_does_not_adopt_the_next_process_group(one_rank, torch_group):
    # destroy and init again faster than the watchdog wakes: the old thread used to see "initialised"
    # and watch the new group (and its store, and every later test's collectives) for good
    from torch_fl import distributed

    old = distributed._state.watchdog
    dist.destroy_process_group()
    with torch_group(30):
        assert not old.watching()
        old._thread.join(timeout=old.interval + 5)
        assert not old._thread.is_alive() and old.store is None


def test_initialising_twice_is_refused(one_rank):
    with pytest.raises(torch.fl.distributed.DistributedError, match="already initialised"):
        torch.fl.distributed.init_process_group()


def test_torchfl_preflight_renders_failed_ranks_after_the_table():
    from torch_fl.cli.preflight import render

    row = {"rank": 0, "local_rank": 0, "host": "n0", "device": "cpu", "backend": "gloo", "torch": "2.13.0",
           "torch_fl": "0.1.0", "plugin": "-", "description": "cpu@42a32a17247d", "all_reduce": 1.04,
           "broadcast": 0.5, "barrier": 0.25, "seconds": 0.3}
    text = render([{"rank": 0, "row": row}, {"rank": 1, "error": "rank 1: torch-fl preflight failed: x"}], 2, 4.2)
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("rank  local_rank"))
    assert lines[header + 2].split() == ["0", "0", "n0", "cpu", "gloo", "2.13.0", "0.1.0", "-", "cpu@42a32a17247d",
                                         "1.0", "ms", "0.5", "ms", "0.2", "ms", "0.30", "s"]
    failure = lines.index("rank 1: FAILED: torch-fl preflight failed: x")
    assert failure > header + 2
    assert lines[-1] == "preflight FAILED on 1 of 2 ranks: 2 local ranks, 4.2 s including process start-up"


def test_the_preflight_checks_a_group_that_torch_created(torch_group):
    with torch_group(40):
        report = torch.fl.distributed.preflight(timeout=10)
        assert report.backend == "gloo" and [row["rank"] for row in report.rows] == [0]
        # the group's own timeout, shortened during the checks, is back
        assert dist.group.WORLD._get_backend(torch.device("cpu")).options._timeout == timedelta(seconds=40)
