"""What the profiler ranges of non-native calls (routing/router.py: "fl::ROUTE OP") cost when no profiler
is active, and what they cost under one (no asserts; prints a table).

A small op (gelu on a 16-element tensor) is forced onto a route on the CPU key with FL_ROUTE and called
many times, in these modes, whose samples alternate:

  shipped    the router as shipped: one C call (torch._C._autograd._profiler_enabled) per routed call
             decides that no range is opened
  no check   the same router with the range helper replaced by a plain call of its function (what the
             router did before the ranges, plus the helper's frame): shipped / no check is the cost of
             the check
  profiled   shipped, under torch.profiler.profile (CPU activities): what a range costs when one is
             wanted (the profiler's own per-op cost included)

Each ratio is the median of the per-sample ratios to "no check", on the process's CPU time (one torch
thread) and on the wall clock, side by side.

    OMP_NUM_THREADS=1 python benchmarks/profiler_ranges.py [--route translate] [--calls 2000] [--repeats 21]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time
import warnings

import torch

import torch_fl
from torch_fl.routing import router


def plain_call(route, op, fn, /, *args, **kwargs):
    return fn(*args, **kwargs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--route", default="translate", choices=["translate", "fallback"])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=21)
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    os.environ["FL_ROUTE"] = f"aten::gelu.default={args.route}"
    torch_fl.reset()
    torch_fl.activate("cpu")
    x = torch.randn(16)
    gelu = torch.nn.functional.gelu
    shipped = router._ranged

    @contextlib.contextmanager
    def mode(name: str):
        router._ranged = plain_call if name == "no check" else shipped
        if name == "profiled":
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
                yield
        else:
            yield
        router._ranged = shipped

    modes = ("no check", "shipped", "profiled")
    samples: dict[str, list[tuple[float, float]]] = {m: [] for m in modes}
    for _ in range(200):
        gelu(x)
    for repeat in range(args.repeats):
        for name in (modes if repeat % 2 == 0 else modes[::-1]):
            with mode(name):
                cpu, wall = time.thread_time(), time.perf_counter()
                for _ in range(args.calls):
                    gelu(x)
                samples[name].append(((time.thread_time() - cpu) / args.calls,
                                      (time.perf_counter() - wall) / args.calls))
    torch_fl.deactivate()
    calls = sum(r["calls"] for r in torch_fl.route_stats())
    print(f"gelu(16 floats) routed by {args.route} on the CPU key, {args.calls} calls x {args.repeats} "
          f"samples per mode ({calls} routed calls counted)")
    print(f"{'mode':<10} {'CPU us/call':>12} {'wall us/call':>13} {'CPU ratio':>10} {'wall ratio':>11}")
    base = samples["no check"]
    for name in modes:
        cpu = statistics.median(s[0] for s in samples[name]) * 1e6
        wall = statistics.median(s[1] for s in samples[name]) * 1e6
        cpu_ratio = statistics.median(s[0] / b[0] for s, b in zip(samples[name], base, strict=True))
        wall_ratio = statistics.median(s[1] / b[1] for s, b in zip(samples[name], base, strict=True))
        print(f"{name:<10} {cpu:>12.2f} {wall:>13.2f} {cpu_ratio:>10.3f} {wall_ratio:>11.3f}")


if __name__ == "__main__":
    main()
