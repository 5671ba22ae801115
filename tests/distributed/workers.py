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
from typing import Any

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


def threads_at_exit() -> dict:
    """A short job that ends without destroying its group; the last atexit hook (registered first, so it
    runs after torch-fl's) prints which torch-fl threads are still alive when finalization begins."""
    import atexit
    import threading

    def report() -> None:
        alive = sorted(t.name for t in threading.enumerate() if t.name.startswith("torch_fl") and t.is_alive())
        print("THREADS_AT_EXIT=" + json.dumps(alive), flush=True)

    atexit.register(report)
    init(preflight_timeout=10)
    values = torch.ones(4)
    dist.all_reduce(values)
    return {"threads": sorted(t.name for t in threading.enumerate() if t.name.startswith("torch_fl"))}


def gloo_threads_after_destroy() -> dict:
    """The OS threads of gloo left once the script has destroyed its group (the group freed: none)."""
    import gc

    def gloo_threads() -> list[str]:
        names = []
        for task in Path("/proc/self/task").iterdir():
            try:
                names.append((task / "comm").read_text().strip())
            except OSError:  # a thread that ended while being listed
                continue
        return sorted(n for n in names if "gloo" in n)

    init(preflight_timeout=10)
    values = torch.ones(4)
    dist.all_reduce(values)
    during = gloo_threads()
    dist.destroy_process_group()
    gc.collect()
    deadline = time.monotonic() + 2.0  # a freed group joins its threads before destroy returns; slack for load
    while gloo_threads() and time.monotonic() < deadline:
        time.sleep(0.05)
    return {"during": during, "after": gloo_threads()}


def slow_store_at_exit() -> dict:
    """The heartbeat is inside a store call when the script ends and answers during finalization: a
    rendezvous store host slowed by load. The store is a Python dist.Store (torch's extension point) under
    torch's PrefixStore, as init_process_group's namespace is, so the call passes through pybind11's GIL
    release as a TCPStore call does; its add returns 1 s after the script's end."""
    import threading

    from torch_fl.distributed.liveness import Liveness

    class SlowStore(dist.Store):
        def __init__(self) -> None:
            super().__init__()
            self.data: dict[str, Any] = {}
            self.slow = False
            self.entered = threading.Event()

        def set(self, key: str, value: Any) -> None:
            self.data[key] = value

        def add(self, key: str, amount: int) -> int:
            if self.slow:
                self.entered.set()
                time.sleep(1.0)
                os.write(1, b"HEARTBEAT_ANSWERED\n")  # os.write: sys.stdout may be gone by then
            self.data[key] = int(self.data.get(key, 0)) + amount
            return self.data[key]

    class SlowFinalization:
        """Finalization that releases the GIL while the heartbeat waits for it, as torch's store and
        process group destructors do, for longer than the store's answer takes."""

        def __del__(self) -> None:
            time.sleep(2.0)

    store = SlowStore()
    Liveness(dist.PrefixStore("default_pg", store), RANK, 2, "cpu").start()
    store.slow = True
    store.entered.wait(30)
    globals()["_finalized_late"] = SlowFinalization()  # a module global: deleted during finalization
    return {"entered": store.entered.is_set()}


def training_batches(steps: int, batch: int = 8, context: int = 64, vocab: int = 512,
                     seed: int = 1234) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (steps, batch, context), generator=generator)


def next_token_batches(steps: int, batch: int, context: int, vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token batches (seed 1) and their targets, the next token of each (the tokens shifted left, wrapping):
    fsdp_workers.py's and mixed_workers.py's training data."""
    tokens = training_batches(steps, batch, context, vocab, seed=1)
    return tokens, torch.roll(tokens, -1, dims=-1)


def next_token_loss(net: torch.nn.Module, tokens: torch.Tensor, targets: torch.Tensor, vocab: int) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(net(tokens).reshape(-1, vocab), targets.reshape(-1))


def run(scenarios: dict[str, Any]) -> int:
    """Run the scenario named by argv[1] (a function of `scenarios`, a worker module's globals) with the
    other arguments; print its result with the scenario's own seconds (imports and the interpreter's start
    left out: what a bound on giving up promises, which a loaded machine's slow start, 20.7 s of a 20 s wall
    bound once with every test green, must not break)."""
    scenario, *args = sys.argv[1:]
    began = time.monotonic()
    try:
        result = scenarios[scenario](*args)
    except TorchFLError as exc:
        emit({"error": str(exc), "type": type(exc).__name__, "scenario_seconds": time.monotonic() - began})
        return 3
    result["scenario_seconds"] = time.monotonic() - began
    emit(result)
    if dist.is_initialized():
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(run(globals()))
