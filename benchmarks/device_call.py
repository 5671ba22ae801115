"""What `torch.fl.device()` costs (issue 43: user code calls it per step): the first call (CPU time, Python
calls, modules it imports) and a repeated call (wall and CPU microseconds, Python calls), without FL_DEVICE
(the CPU backend) and with FL_DEVICE=emu:npu. Each case runs in a fresh interpreter with one torch thread.

    python benchmarks/device_call.py [--repeats 2000]

Targets (issue 43 item 2): a repeated call <= 50 us and <= 100 Python calls; the first <= 20 ms CPU, with no
DTensor / sympy import on the emulated path. Prints the measured figures beside the targets, and what the
device's first op costs (the route table's native set, the emulated tensor's dispatch rules: see
docs/architecture.md, "What device() costs").

Modules are compiled once, into a bytecode cache of the run's own (an installed package has its .pyc files;
with PYTHONDONTWRITEBYTECODE set every lazily imported module would be compiled inside the timed call), and
each case runs once unmeasured first to fill it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

PROBE = r"""
import cProfile, json, pstats, sys, time
import torch, torch_fl
before = set(sys.modules)
counting = sys.argv[2] == "count"  # the first call's Python calls (under cProfile), else its CPU time (without)
profile = cProfile.Profile()
cpu = time.process_time()
if counting:
    profile.enable()
torch.fl.device()
profile.disable()
first_cpu = time.process_time() - cpu
first_calls = pstats.Stats(profile).total_calls if counting else 0
loaded = set(sys.modules) - before
dev = torch.fl.device()
before, cpu = set(sys.modules), time.process_time()
(torch.ones(2, device=dev) * 2).sum().item()  # the device's first op: PyTorch's first wrapper-subclass dispatch
first_op_cpu = time.process_time() - cpu
op_loaded = set(sys.modules) - before
n = int(sys.argv[1])
profile = cProfile.Profile()
profile.enable()
for _ in range(100):
    torch.fl.device()
profile.disable()
calls = pstats.Stats(profile).total_calls / 100
wall, cpu = time.perf_counter(), time.process_time()
for _ in range(n):
    torch.fl.device()
wall, cpu = (time.perf_counter() - wall) / n, (time.process_time() - cpu) / n
print(json.dumps({"first_cpu_ms": first_cpu * 1e3, "first_calls": first_calls, "first_modules": len(loaded),
                  "dtensor": "torch.distributed.tensor" in loaded, "sympy": "sympy" in loaded,
                  "first_op_cpu_ms": first_op_cpu * 1e3, "first_op_modules": len(op_loaded),
                  "first_op_dtensor": "torch.distributed.tensor" in op_loaded, "first_op_sympy": "sympy" in op_loaded,
                  "repeat_wall_us": wall * 1e6, "repeat_cpu_us": cpu * 1e6, "repeat_calls": calls}))
"""


def measure(fl_device: str, repeats: int, bytecode: str) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FL_") and k != "PYTHONDONTWRITEBYTECODE"}
    env.update(OMP_NUM_THREADS="1", PYTHONPYCACHEPREFIX=bytecode, **({"FL_DEVICE": fl_device} if fl_device else {}))
    found = {}
    for mode in ("time", "time", "count"):  # the first run fills the bytecode cache
        done = subprocess.run([sys.executable, "-c", PROBE, str(repeats), mode], env=env, capture_output=True,
                              text=True, check=True)
        found[mode] = json.loads(done.stdout.strip().splitlines()[-1])
    return {**found["time"], "first_calls": found["count"]["first_calls"]}  # (CPU time measured unprofiled)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2000)
    args = parser.parse_args()
    print(f"{'FL_DEVICE':10} {'first CPU ms':>12} {'first calls':>11} {'modules':>7} {'DTensor':>7} "
          f"{'repeat us (wall/CPU)':>21} {'repeat calls':>12} {'first op CPU ms':>15} {'op modules':>10} "
          f"{'op DTensor':>10} {'op sympy':>8}")
    bytecode = tempfile.mkdtemp(prefix="device_call_pyc_")
    for fl_device in ("", "emu:npu"):
        m = measure(fl_device, args.repeats, bytecode)
        print(f"{fl_device or '(unset)':10} {m['first_cpu_ms']:12.1f} {m['first_calls']:11d} {m['first_modules']:7d} "
              f"{'yes' if m['dtensor'] else 'no':>7} {m['repeat_wall_us']:10.1f} / {m['repeat_cpu_us']:<8.1f} "
              f"{m['repeat_calls']:12.0f} {m['first_op_cpu_ms']:15.1f} {m['first_op_modules']:10d} "
              f"{'yes' if m['first_op_dtensor'] else 'no':>10} {'yes' if m['first_op_sympy'] else 'no':>8}")
    print("targets: repeat <= 50 us and <= 100 calls; first <= 20 ms CPU, no DTensor/sympy on the emulated path")


if __name__ == "__main__":
    main()
