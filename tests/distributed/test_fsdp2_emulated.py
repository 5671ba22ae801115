"""FSDP2 (``fully_shard``) and DDP on every emulated chip: two ranks (processes), each on its own device of
the chip, collectives through the emulated backend (gloo on the host data), compared with one process
training on the whole batch on the CPU.

One launch per chip runs DDP, then FSDP2 resharding after forward (the model built on the host,
fully_shard moving the shards to the chip), then FSDP2 keeping the parameters unsharded between forward
and backward (the model built on the chip), each from the same initial weights.
"""

from __future__ import annotations

from pathlib import Path

import fsdp_workers  # tests/distributed is on sys.path (pytest's rootdir-relative import)
import pytest
import torch

from torch_fl.routing.emu import dist as emu_dist

SCRIPT = Path(fsdp_workers.__file__)
STEPS = 4
# the device type each chip's tensors carry: a plugin chip's own name, a built-in type's chip as 'emu'
CHIPS = {"npu": "npu", "mlu": "mlu", "musa": "musa", "cuda": "emu", "xpu": "emu"}


@pytest.fixture(scope="module")
def reference() -> tuple[dict[str, torch.Tensor], list[float]]:
    return fsdp_workers.reference(STEPS)


@pytest.mark.slow  # measured: 4-6 s of training per chip, 13-25 s a launch on the shared 2-core machine (load 7-9)
@pytest.mark.skipif(not emu_dist.supports_distributed(), reason="torch.distributed with gloo is unavailable")
@pytest.mark.parametrize("chip", list(CHIPS))
def test_fsdp2_and_ddp_on_an_emulated_chip_end_with_the_weights_of_one_process(launch, tmp_path, reference, chip):
    out = tmp_path / "weights.pt"
    ranks = launch("train", str(STEPS), str(out), script=SCRIPT, timeout=180,
                   env={"FL_DEVICE": f"emu:{chip}", "FL_EMU_DEVICES": "2"})
    for r in ranks:
        assert r.returncode == 0, r.stderr[-3000:]
    device_type = CHIPS[chip]
    facts = [r.result for r in ranks]
    assert [f["device"] for f in facts] == [f"{device_type}:0", f"{device_type}:1"]
    assert facts[0]["backend"] == f"cpu:gloo,{device_type}:{device_type}"

    weights, losses = reference
    assert losses[-1] < losses[0]  # it trained
    runs = torch.load(out)
    for run in ("ddp", *fsdp_workers.FSDP_CASES):
        for f in facts:
            assert f[run]["losses"] == pytest.approx(losses, rel=1e-5), run
        assert runs[run].keys() == weights.keys(), run
        for name, value in weights.items():
            torch.testing.assert_close(runs[run][name], value, rtol=1e-5, atol=1e-6, msg=f"{run}: {name}")

    for rank, f in enumerate(facts):
        assert f["ddp"]["param_devices"] == [f"{device_type}:{rank}"]
        for run in fsdp_workers.FSDP_CASES:
            # every parameter a DTensor on the chip's mesh, each rank holding its half on its own device
            assert f[run]["sharded"] and f[run]["mesh"] == device_type, f[run]
            assert f[run]["shard_devices"] == [f"{device_type}:{rank}"]
            assert f[run]["local_numel"] * 2 == f[run]["numel"]
        resharded, kept = f["fsdp_reshard"]["after_first_forward"], f["fsdp_keep"]["after_first_forward"]
        # between forward and backward a block's weight is its shard again (the unsharded storage resized
        # to 0 on the chip), or stays the whole parameter on the chip
        assert resharded["weight_type"] == "DTensor" and kept["weight_type"] != "DTensor"
        assert resharded["weight_shape"] == kept["weight_shape"] == [fsdp_workers.WIDTH] * 2
        assert resharded["allocated"] < kept["allocated"]


@pytest.mark.slow  # measured: 2.5-6.5 s of collectives (machine load) plus two interpreter starts
@pytest.mark.skipif(not emu_dist.supports_distributed(), reason="torch.distributed with gloo is unavailable")
def test_functional_collectives_on_an_emulated_chip_give_their_results_and_never_hang(launch):
    """DTensor's and FSDP2's collectives (c10d's functional ops) and send/recv on emulated tensors, 300
    rounds: before EmuProcessGroup took the coalesced all-gather, both ranks deadlocked on the GIL within
    these rounds."""
    ranks = launch("collectives", "300", script=SCRIPT, timeout=120,
                   env={"FL_DEVICE": "emu:npu", "FL_EMU_DEVICES": "2"})
    for r in ranks:
        assert r.returncode == 0, r.stderr[-3000:]
        result = r.result
        assert (result["device"], result["rounds"], result["wrong"]) == (f"npu:{r.rank}", 300, [])
