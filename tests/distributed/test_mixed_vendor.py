"""One job across chips of different vendors (issue 39), rehearsed on one CPU: torchrun starts ranks on
emu:npu, emu:cuda and emu:mlu (FL_RANK_DEVICES), each emulating its own chip, and they train together
on the flmixed process group; a rank that dies, a chip that lacks an op and a rank with another
torch-fl version are named by the others."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from torch_fl import _env
from torch_fl.distributed import fingerprint, host_traffic, shares_for
from torch_fl.distributed.uneven import UnevenSplit
from torch_fl.errors import ConfigError, DistributedError

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from mixed_workers import reference_weights  # noqa: E402

from conftest import _free_port  # noqa: E402

THREE = "emu:npu,emu:cuda,emu:mlu"


def torchrun(scenario: str, out: Path, devices: str = THREE, steps: int = 20, timeout: float = 150,
             **env: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(len(devices.split(","))),
               "--master-port", str(_free_port()), str(HERE / "mixed_workers.py"), scenario, str(out), str(steps)]
    child = {**os.environ, "FL_RANK_DEVICES": devices, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", **env}
    child.pop("FL_DEVICE", None)
    return subprocess.run(command, env=child, capture_output=True, text=True, timeout=timeout)


def weights_of(out: Path, ranks: int) -> list[dict]:
    return [torch.load(out / f"rank{r}.pt") for r in range(ranks)]


def assert_full_batch(results: list[dict], steps: int) -> None:
    reference = reference_weights(steps)
    for got in results:
        for name, value in reference.items():
            torch.testing.assert_close(got["state"][name], value, rtol=1e-5, atol=1e-6, msg=name)


# Rehearsals ------------------------------------------------------------------------------------------
@pytest.mark.slow  # torchrun / a subprocess
def test_ddp_across_three_vendors_ends_with_the_full_batch_weights(tmp_path):
    run = torchrun("ddp", tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    results = weights_of(tmp_path, 3)
    assert [r["device"] for r in results] == ["npu:0", "emu:0", "mlu:0"]  # each rank on its own chip
    assert {r["backend"] for r in results} == {"flmixed"}
    assert "this job spans 3 kinds of chip; backend 'flmixed'" in run.stderr
    assert "Huawei npu (npu) on rank 0: hccl" in run.stderr
    assert "DDP on flmixed across 3 kinds of chip: " in run.stderr  # the host traffic per step
    assert "gloo on host copies among the leaders (ranks 0-2); FlagCX would replace this" in run.stderr
    assert results[0]["plan"].startswith("this job spans 3 kinds")
    assert_full_batch(results, 20)


@pytest.mark.slow  # torchrun / a subprocess
def test_fsdp2_across_three_vendors_ends_with_the_full_batch_weights(tmp_path):
    run = torchrun("fsdp", tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    assert_full_batch(weights_of(tmp_path, 3), 20)


@pytest.mark.slow  # torchrun / a subprocess
def test_every_collective_across_vendors_many_times_over(tmp_path):
    # Every method c10d's C++ reaches a Python process group by must be one of flmixed's: a missing one
    # runs ProcessGroup's own with the GIL held, which deadlocked gloo (routing/emu/dist.py).
    run = torchrun("collectives", tmp_path, devices="emu:npu,emu:cuda,emu:mlu,emu:npu", steps=30)
    assert run.returncode == 0, run.stderr[-3000:]
    assert [r["rounds"] for r in weights_of(tmp_path, 4)] == [30] * 4


@pytest.mark.slow  # torchrun / a subprocess
def test_uneven_shares_by_throughput_still_take_the_full_batch_step(tmp_path):
    run = torchrun("uneven", tmp_path, MIXED_THROUGHPUT="3,1,2")
    assert run.returncode == 0, run.stderr[-3000:]
    results = weights_of(tmp_path, 3)
    assert results[0]["shares"] == [6, 2, 4]
    assert_full_batch(results, 20)


@pytest.mark.slow  # torchrun / a subprocess
def test_a_chip_that_lacks_an_op_the_model_uses_is_named_by_the_other_ranks(tmp_path):
    # minimal's table has no aten::empty_permuted; with fallbacks forbidden its rank stops at step 0.
    run = torchrun("ddp", tmp_path, devices="emu:npu,emu:cuda,emu:minimal", FL_FALLBACK="error")
    assert run.returncode != 0
    assert "UnsupportedOperatorError: aten::empty_permuted.default is not supported on emu:minimal" in run.stderr
    named = [line for line in run.stderr.splitlines() if line.startswith("torch-fl: rank ")]
    assert named, run.stderr[-3000:]
    assert all("because rank 2 (emu:0) died: UnsupportedOperatorError: aten::empty_permuted" in line for line in named)


@pytest.mark.slow  # torchrun / a subprocess
def test_a_rank_with_another_torch_fl_version_fails_at_step_0_named(tmp_path):
    run = torchrun("ddp", tmp_path, MIXED_OTHER_VERSION_RANK="1", timeout=90)
    assert run.returncode != 0
    assert "torch-fl version:" in run.stderr and "0.0.1+other on rank 1" in run.stderr
    assert "Differing from the others: rank 1" in run.stderr
    assert not list(tmp_path.glob("rank*.pt"))  # nobody trained


@pytest.mark.slow  # three processes
@pytest.mark.parametrize("how, says", [
    ("raise", "because rank 1 (cpu) died: RuntimeError: planted failure on rank 1"),
    ("kill", "because rank 1 died without a word (killed by a signal"),
    ("exit", "because rank 1 exited normally while this rank still waited in a collective"),
])
def test_a_rank_that_dies_mid_job_is_named_by_the_survivors(launch, how, says):
    ranks = launch("dies_mid_job", how, nproc=3, timeout=60)
    for survivor in (ranks[0], ranks[2]):
        assert survivor.returncode != 0
        assert "Connection" in survivor.stderr or "peer" in survivor.stderr  # gloo's own error stays
        notes = [line for line in survivor.stderr.splitlines() if line.startswith("torch-fl: ")]
        assert any(says in line for line in notes), survivor.stderr[-2000:]


# The plan, on paper ------------------------------------------------------------------------------
def _print(rank: int, device_type: str, vendor: str, autocast: str = "float16",
           dtypes: tuple[str, ...] = ("float32", "float16", "bfloat16"), flagcx: bool = False) -> dict:
    return {"host": "h", "local_rank": rank, "device": f"{device_type}:0", "device_type": device_type,
            "vendor": vendor, "torch": "2.13.0", "torch_fl": "1", "python": "3.11", "plugin": "-",
            "description": f"{device_type}@abc", "description_path": "-", "backend": f"cpu:gloo,{device_type}:x",
            "explicit_backend": False, "flagcx": flagcx, "library": "hccl", "dtypes": list(dtypes),
            "autocast": autocast, "native_ops": 100 + rank}


def test_ranks_of_different_vendors_get_flmixed_with_a_plan():
    verdict = fingerprint.decide([_print(0, "npu", "Huawei"), _print(1, "mlu", "Cambricon"),
                                  _print(2, "npu", "Huawei")])
    assert verdict.backend == "flmixed" and not verdict.error
    assert "Huawei npu (npu) on ranks 0, 2: hccl (emulated: gloo on the host data) inside, 100 native ops, leader rank 0" in verdict.plan
    assert "an op one chip's table lacks stops that rank at its first use, and the others name it" in verdict.plan
    assert verdict.autocast == "float16"


def test_flagcx_on_every_rank_wins_over_host_staging():
    verdict = fingerprint.decide([_print(0, "npu", "Huawei", flagcx=True), _print(1, "mlu", "Cambricon", flagcx=True)])
    assert verdict.backend == "flagcx" and "FlagCX (installed on every rank)" in verdict.plan


def test_autocast_dtypes_that_differ_settle_on_one_every_chip_computes():
    verdict = fingerprint.decide([_print(0, "npu", "Huawei", autocast="bfloat16"),
                                  _print(1, "mlu", "Cambricon", autocast="float16"),
                                  _print(2, "emu", "NVIDIA", autocast="float16")])
    assert verdict.autocast == "float16"  # two of three chips use it, and all compute it
    assert "their own: bfloat16, float16" in verdict.plan
    lacking = fingerprint.decide([_print(0, "npu", "Huawei", autocast="bfloat16", dtypes=("float32", "bfloat16")),
                                  _print(1, "mlu", "Cambricon", autocast="float16", dtypes=("float32", "float16"))])
    assert lacking.backend == "" and "no low-precision dtype in common" in lacking.error
    assert "Huawei npu with cpu:gloo,npu:x on rank 0 lacks float16" in lacking.error


def test_ranks_of_one_kind_must_agree_on_their_locked_environment():
    lock = {"python.abi": "cpython-311", "glibc": "2.36", "driver.nvidia": "550.54"}
    prints = [dict(_print(r, "npu", "Huawei"), lock=dict(lock)) for r in range(3)]
    prints[2]["lock"]["glibc"] = "2.31"
    prints.append(dict(_print(3, "mlu", "Cambricon"), lock={**lock, "glibc": "2.17"}))  # another kind may differ
    verdict = fingerprint.decide(prints)
    assert not verdict.backend
    assert "  - glibc (torchfl env lock): 2.36 on ranks 0-1; 2.31 on rank 2" in verdict.error
    assert "Differing from the others: rank 2." in verdict.error


def test_host_traffic_of_one_all_reduce():
    cost = host_traffic(100_000_000, kinds=3, link_gbps=25.0)
    assert cost["device_host_bytes"] == 200_000_000
    assert cost["link_bytes"] == pytest.approx(2 * 2 / 3 * 100_000_000)
    assert cost["link_seconds"] == pytest.approx(cost["link_bytes"] * 8 / 25e9)
    assert host_traffic(10, kinds=1)["link_bytes"] == 0


# Uneven shares -------------------------------------------------------------------------------------
def test_shares_follow_throughput_and_sum_to_the_global_batch():
    assert shares_for(12, [3, 1, 2]) == [6, 2, 4]
    assert shares_for(10, [1, 1, 1]) == [4, 3, 3]  # largest remainder, lowest rank first on ties
    assert shares_for(3, [1000, 1, 1]) == [1, 1, 1]  # at least one sample each
    with pytest.raises(DistributedError, match=r"rank 1 gave -1\.0"):
        shares_for(8, [1.0, -1.0])
    with pytest.raises(DistributedError, match="a global batch of at least 3"):
        shares_for(2, [1, 1, 1])


def test_loss_scales_make_the_averaged_gradient_the_full_batch_mean():
    shares = [6, 2, 4]
    scales = [UnevenSplit(shares, r).loss_scale for r in range(3)]
    assert scales == [1.5, 0.5, 1.0]
    # (1/W) sum_r s_r * mean_r == the mean over all samples, for any per-sample values
    values = torch.arange(12.0)
    means = [values[0:6].mean(), values[6:8].mean(), values[8:12].mean()]
    assert sum(s * m for s, m in zip(scales, means, strict=True)) / 3 == pytest.approx(values.mean().item())


def test_the_batch_sampler_gives_every_sample_to_exactly_one_rank():
    shares = [3, 1, 2]
    samplers = [UnevenSplit(shares, r).sampler(20, seed=4) for r in range(3)]
    per_rank = [list(s) for s in samplers]
    assert [len(b) for b in per_rank[0]] == [3, 3, 3] and len(samplers[0]) == 3
    seen = sorted(i for batches in per_rank for batch in batches for i in batch)
    assert len(seen) == len(set(seen)) == 18  # three global batches of 6; the last 2 samples dropped
    samplers[0].set_epoch(1)
    assert list(samplers[0]) != per_rank[0]
    with pytest.raises(ValueError, match="fewer than one global batch"):
        UnevenSplit(shares, 0).sampler(5)


# FL_RANK_DEVICES ----------------------------------------------------------------------------------
@pytest.mark.parametrize("value, env, want", [
    ("emu:npu,emu:cuda", {"LOCAL_RANK": "1"}, ("emu:cuda", "FL_RANK_DEVICES (LOCAL_RANK=1)")),
    ("0=emu:npu,1=emu:mlu", {"LOCAL_RANK": "0"}, ("emu:npu", "FL_RANK_DEVICES (LOCAL_RANK=0)")),
    ("0=emu:npu,rank3=emu:mlu", {"RANK": "3", "LOCAL_RANK": "0"}, ("emu:mlu", "FL_RANK_DEVICES (RANK=3)")),
    ("emu:npu,emu:cuda", {}, ("emu:npu", "FL_RANK_DEVICES (LOCAL_RANK=0)")),  # not launched: local rank 0
])
def test_each_process_takes_its_rank_entry(monkeypatch, value, env, want):
    for name in ("FL_DEVICE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("FL_RANK_DEVICES", value)
    for name, text in env.items():
        monkeypatch.setenv(name, text)
    assert _env.device_choice() == want


def test_fl_device_wins_and_a_missing_entry_says_how_many_are_needed(monkeypatch):
    monkeypatch.setenv("FL_RANK_DEVICES", "emu:npu,emu:cuda")
    monkeypatch.setenv("FL_DEVICE", "cpu")
    assert _env.device_choice() == ("cpu", "FL_DEVICE")
    monkeypatch.delenv("FL_DEVICE")
    monkeypatch.setenv("LOCAL_RANK", "2")
    monkeypatch.delenv("RANK", raising=False)
    with pytest.raises(ConfigError, match=r"no entry for this process \(RANK=unset, LOCAL_RANK=2\); it has "
                                          r"local0, local1.*--nproc-per-node N needs N entries"):
        _env.device_choice()


@pytest.mark.parametrize("value, says", [
    ("emu:npu,,emu:cuda", "missing a device in entry 2"),
    ("node1=emu:npu", "not a rank key"),
    ("0=emu:npu,0=emu:mlu", "giving local0 twice"),
])
def test_bad_rank_device_maps_are_refused(monkeypatch, value, says):
    monkeypatch.setenv("FL_RANK_DEVICES", value)
    monkeypatch.delenv("FL_DEVICE", raising=False)
    with pytest.raises(ConfigError, match=says):
        _env.device_choice()


def test_the_import_hook_reads_the_same_entry_as_torch_fl(monkeypatch):
    import _torch_fl_alias

    monkeypatch.delenv("FL_DEVICE", raising=False)
    monkeypatch.setenv("FL_RANK_DEVICES", "cpu,rank1=emu:npu")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert _torch_fl_alias._emulated_here()
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("LOCAL_RANK", "0")
    assert not _torch_fl_alias._emulated_here()


@pytest.mark.slow  # torchrun / a subprocess
def test_a_spawn_launcher_that_sets_the_rank_after_import_gets_its_own_chip():
    # mp.spawn and elastic's start_method='spawn' set LOCAL_RANK inside the worker, after `import torch`:
    # the chip must follow the rank set then, not entry 0 guessed at import.
    code = ("import os, torch, torch_fl\n"
            "os.environ['LOCAL_RANK'] = '1'\n"
            "from torch_fl.device import description_for\n"
            "d = torch.fl.device(); print(d, description_for(d).name)\n")
    env = {**os.environ, "FL_RANK_DEVICES": "emu:npu,emu:cuda", "OMP_NUM_THREADS": "1"}
    for name in ("FL_DEVICE", "RANK", "LOCAL_RANK"):
        env.pop(name, None)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["emu:0", "cuda"]  # emulated CUDA on the emu type, not the npu slot


@pytest.mark.slow  # a subprocess
def test_each_rank_of_an_emulated_job_is_a_chip_of_its_own():
    # FL_DEVICE=emu:npu torchrun --nproc-per-node 4: LOCAL_RANK=3 has no acc3 in its process, and needs none
    code = "import torch, torch_fl; print(torch.fl.distributed.device())"
    env = {**os.environ, "FL_DEVICE": "emu:npu", "LOCAL_RANK": "3", "RANK": "3", "OMP_NUM_THREADS": "1"}
    env.pop("FL_RANK_DEVICES", None)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "npu:0"
