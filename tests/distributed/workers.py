"""One rank of a multi-process test: ``python workers.py SCENARIO [ARGS]`` with RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR and MASTER_PORT set (env://, as torchrun sets them).

Prints one JSON line prefixed with RESULT= on stdout; errors that torch-fl raises become
{"error": message} with exit code 3, so the test can assert on each rank's message.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

import torch_fl  # noqa: F401  (installs torch.fl)
from torch_fl.errors import TorchFLError

RANK = int(os.environ.get("RANK", "0"))
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def emit(result: dict) -> None:
    print("RESULT=" + json.dumps(result), flush=True)


def init(**kwargs):
    return torch.fl.distributed.init_process_group(**kwargs)


def preflight(timeout: str = "10") -> dict:
    report = init(preflight_timeout=float(timeout))
    return {"rows": report.rows, "summary": report.summary() if RANK == 0 else "",
            "device": str(torch.fl.distributed.device())}


def no_preflight(timeout: str = "3") -> dict:
    init(preflight=False, preflight_timeout=float(timeout))
    return {}


def nccl(timeout: str = "3") -> dict:
    init(backend="nccl", preflight_timeout=float(timeout))
    return {}


def dies() -> dict:
    """Rank 1 passes the environment check, then its process ends before the checked collectives."""
    if RANK == 1:
        from torch_fl.distributed import checks

        def end(*args, **kwargs):
            time.sleep(0.5)
            os._exit(9)

        checks.check_collectives = end
    init(preflight_timeout=5)
    return {}


def other_version() -> dict:
    if RANK == 1:
        import torch_fl._version

        torch_fl._version.__version__ = "0.0.1+other"  # what a node with an older install reports
    init(preflight_timeout=10)
    return {}


def silent() -> dict:
    """Rank 1 passes the environment check, then never enters the checked collectives."""
    if RANK == 1:
        from torch_fl.distributed import checks

        checks.check_collectives = lambda *args, **kwargs: time.sleep(60)
    init(preflight_timeout=3)
    return {}


def hang() -> dict:
    """After a good start, rank 1 stops taking part in collectives (FL_COLLECTIVE_TIMEOUT is short)."""
    init(preflight_timeout=10)
    values = torch.ones(4)
    dist.all_reduce(values)
    if RANK == 1:
        print("rank 1 sleeping", flush=True)
        time.sleep(60)
    began = time.time()
    dist.all_reduce(values)
    return {"returned_after": time.time() - began}


def dies_mid_job(how: str = "raise") -> dict:
    """Rank 1 ends after two good steps: by an exception ('raise'), by SIGKILL ('kill') or by a normal
    exit ('exit'); the others are left in the next all_reduce."""
    init(preflight_timeout=10)
    values = torch.ones(4)
    for step in range(4):
        if RANK == 1 and step == 2:
            if how == "raise":
                raise RuntimeError("planted failure on rank 1: CUDA out of memory (emulated)")
            if how == "kill":
                os.kill(os.getpid(), 9)
            sys.exit(0)
        dist.all_reduce(values)
    return {"finished": True}


def ddp(steps: str, out: str) -> dict:
    """A few DDP steps of the example language model; this rank trains on its share of the batch."""
    sys.path.insert(0, str(EXAMPLES))
    import gpt

    init(preflight_timeout=10)
    world = dist.get_world_size()
    model, _, loss_fn = gpt.factory()
    ddp_model = torch.fl.distributed.wrap_ddp(model)
    batches = training_batches(int(steps))
    share = batches.shape[1] // world
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for tokens in batches:
        mine = tokens[RANK * share:(RANK + 1) * share].to(torch.fl.distributed.device())
        optimizer.zero_grad()
        loss = loss_fn(ddp_model(mine), mine)
        loss.backward()
        optimizer.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append(mean.item() / world)
    if RANK == 0:
        torch.save({"losses": losses, "state": model.state_dict()}, out)
    dist.destroy_process_group()
    return {"losses": losses}


def training_batches(steps: int, batch: int = 8, context: int = 64, vocab: int = 512) -> torch.Tensor:
    generator = torch.Generator().manual_seed(1234)
    return torch.randint(0, vocab, (steps, batch, context), generator=generator)


def main() -> int:
    scenario, *args = sys.argv[1:]
    # The scenario's own time, imports and interpreter start left out: what a bound on giving up promises,
    # which a loaded machine's slow start (20.7 s of a 20 s wall bound once, every test green) must not break.
    began = time.monotonic()
    try:
        result = globals()[scenario](*args)
    except TorchFLError as exc:
        emit({"error": str(exc), "type": type(exc).__name__, "scenario_seconds": time.monotonic() - began})
        return 3
    emit(result)
    if dist.is_initialized():
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
