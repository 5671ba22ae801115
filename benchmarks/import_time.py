"""Extra time of `import torch_fl` over `import torch` (target: under 10%), and the same under an
emulated FL_DEVICE (the chip is registered at import; the emulator's autograd check, which makes PyTorch
import DTensor and sympy, waits for the device's first use), with the heavy modules either imported.

Each sample is a fresh interpreter; samples of all kinds alternate so that machine load affects them
alike. Prints the medians and the ratios.

    python benchmarks/import_time.py [--repeats 15]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

PROBE = "import time; t = time.perf_counter(); {stmt}; print(time.perf_counter() - t)"
HEAVY = ("sympy", "torch._dynamo", "torch._inductor", "torch.distributed.tensor")
EMULATED = "emu:npu"


def _env(fl_device: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FL_")}
    if fl_device:
        env["FL_DEVICE"] = fl_device
    return env


def sample(stmt: str, fl_device: str | None = None) -> float:
    out = subprocess.run([sys.executable, "-c", PROBE.format(stmt=stmt)], check=True,
                         capture_output=True, text=True, env=_env(fl_device))
    return float(out.stdout.strip().splitlines()[-1])


def heavy_modules(fl_device: str | None) -> list[str]:
    code = f"import json, sys, torch_fl; print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                         env=_env(fl_device))
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    sample("import torch")  # warm the OS file cache
    plain, with_fl, fl_only, emulated = [], [], [], []
    for i in range(args.repeats):
        plain.append(sample("import torch"))
        with_fl.append(sample("import torch, torch_fl"))
        fl_only.append(sample("import torch; t = time.perf_counter(); import torch_fl"))
        emulated.append(sample("import torch, torch_fl", EMULATED))
        print(f"\r{i + 1}/{args.repeats}", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    base, total = statistics.median(plain), statistics.median(with_fl)
    extra = statistics.median(fl_only)
    print(f"import torch            median {base * 1000:7.1f} ms")
    print(f"import torch, torch_fl  median {total * 1000:7.1f} ms")
    print(f"import torch_fl alone   median {extra * 1000:7.1f} ms (after torch)")
    print(f"extra over import torch: {extra / base:.1%} (target < 10%)")
    emu = statistics.median(emulated)
    print(f"FL_DEVICE={EMULATED}: import torch, torch_fl  median {emu * 1000:7.1f} ms "
          f"({emu / base - 1:+.1%} over plain import torch: the chip's registration)")
    for fl_device in (None, EMULATED):
        found = heavy_modules(fl_device)
        print(f"heavy modules after import torch_fl{f' (FL_DEVICE={fl_device})' if fl_device else ''}: "
              f"{', '.join(found) if found else 'none'} (of {', '.join(HEAVY)})")


if __name__ == "__main__":
    main()
