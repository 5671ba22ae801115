"""What the profiler ranges of non-native calls (routing/router.py: "fl::ROUTE OP") cost when no profiler
is active, and what they cost under one (no asserts; prints a table).

A small op (gelu on a 16-element tensor) is forced onto a route on the CPU key with FL_ROUTE and called
many times, in these modes, whose samples alternate:

  before     the router without ranges: Router's methods from git revision --before (default 2f8abbd,
             the commit before the ranges), read with `git show` and swapped onto the live router
  shipped    the router as shipped: one C call (torch._C._autograd._profiler_enabled) per routed call
             decides that no range is opened, and the call goes on as before
  profiled   shipped, under torch.profiler.profile (CPU activities): what a range costs when one is
             wanted (the profiler's own per-op cost included)

Each ratio is the median of the per-pair ratios to "before" (each mode is sampled in its own pass,
alternating with "before": calls right after a profiler session ran slower, which charged "shipped" for
the profiler when the three modes rotated), on the thread's CPU time (one torch thread) and on the wall
clock, side by side.

    OMP_NUM_THREADS=1 python benchmarks/profiler_ranges.py [--route translate] [--calls 2000] [--repeats 21]

--emulated measures the other profiler hook instead: an emulated chip's kernels as device activity in any
torch.profiler trace (routing/emu/profiling.py wraps torch.autograd.profiler.profile's _start_trace, __exit__
and export_chrome_trace). A native op on emu:npu (relu of 16 floats), in these modes:

  before     torch's own profiler methods (profiling.ORIGINALS swapped back)
  shipped    torch-fl's methods, no profiler active: the emulator's dispatch reads its hook, None
  profiled   under torch.profiler.profile() (its default activities: the device's too), the recorder on
  cpu-only   under torch.profiler.profile(activities=[CPU]): the same profiler, the recorder off

    OMP_NUM_THREADS=1 python benchmarks/profiler_ranges.py --emulated [--calls 2000] [--repeats 21]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import time
import types
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

import torch_fl
from torch_fl.routing import router

ROOT = Path(__file__).resolve().parents[1]
METHODS = ("call", "_run", "translate", "_untranslatable", "fallback")


def router_before(revision: str) -> types.ModuleType:
    """routing/router.py as it was at `revision`, executed as a module of the torch_fl.routing package."""
    source = subprocess.run(["git", "show", f"{revision}:src/torch_fl/routing/router.py"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout
    module = types.ModuleType("torch_fl.routing._router_before")
    module.__package__ = "torch_fl.routing"
    exec(compile(source, f"{revision}:src/torch_fl/routing/router.py", "exec"), module.__dict__)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--route", default="translate", choices=["translate", "fallback"])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--before", default="2f8abbd", help="git revision of the router without ranges")
    parser.add_argument("--emulated", action="store_true", help="the device-track hook of emulated chips")
    args = parser.parse_args()
    if args.emulated:
        return emulated(args)
    old = router_before(args.before)
    shipped = {name: getattr(router.Router, name) for name in METHODS}
    before = {name: getattr(old.Router, name) for name in METHODS}
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    os.environ["FL_ROUTE"] = f"aten::gelu.default={args.route}"
    torch_fl.reset()
    torch_fl.activate("cpu")
    x = torch.randn(16)
    gelu = torch.nn.functional.gelu

    @contextlib.contextmanager
    def mode(name: str):
        for method, fn in (before if name == "before" else shipped).items():
            setattr(router.Router, method, fn)
        if name == "profiled":
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
                yield
        else:
            yield
        for method, fn in shipped.items():
            setattr(router.Router, method, fn)

    def sample(name: str) -> tuple[float, float]:
        with mode(name):
            cpu, wall = time.thread_time(), time.perf_counter()
            for _ in range(args.calls):
                gelu(x)
            return ((time.thread_time() - cpu) / args.calls, (time.perf_counter() - wall) / args.calls)

    for _ in range(200):
        gelu(x)
    pairs = alternate(sample, ("shipped", "profiled"), args.repeats)
    torch_fl.deactivate()
    calls = sum(r["calls"] for r in torch_fl.route_stats())
    print(f"gelu(16 floats) routed by {args.route} on the CPU key, {args.calls} calls x {args.repeats} "
          f"samples per mode ({calls} routed calls counted)")
    table(pairs, ("before", "shipped", "profiled"))


Sample = tuple[float, float]


def alternate(sample: Callable[[str], Sample], modes: tuple[str, ...], repeats: int) -> dict[str, list[tuple[Sample, Sample]]]:
    """Per mode, `repeats` pairs (its sample, a "before" sample) taken ABBA. One pass per mode: the steps right
    after a profiler session ran slower, so "shipped" never follows a profiled mode."""
    pairs: dict[str, list[tuple[Sample, Sample]]] = {}
    for name in modes:
        for repeat in range(repeats):
            if repeat % 2 == 0:
                base, other = sample("before"), sample(name)
            else:
                other, base = sample(name), sample("before")
            pairs.setdefault(name, []).append((other, base))
    pairs["before"] = [(b, b) for _, b in pairs[modes[0]]]
    return pairs


def table(pairs: dict[str, list[tuple[Sample, Sample]]], modes: tuple[str, ...]) -> None:
    print(f"{'mode':<10} {'CPU us/call':>12} {'wall us/call':>13} {'CPU ratio':>10} {'wall ratio':>11}")
    for name in modes:
        got = pairs[name]
        cpu = statistics.median(o[0] for o, _ in got) * 1e6
        wall = statistics.median(o[1] for o, _ in got) * 1e6
        cpu_ratio = statistics.median(o[0] / b[0] for o, b in got)
        wall_ratio = statistics.median(o[1] / b[1] for o, b in got)
        print(f"{name:<10} {cpu:>12.2f} {wall:>13.2f} {cpu_ratio:>10.3f} {wall_ratio:>11.3f}")


def emulated(args: argparse.Namespace) -> None:
    """The --emulated modes (module docstring)."""
    from torch_fl.routing.emu import profiling, tensor

    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    os.environ.pop("FL_ROUTE", None)
    torch_fl.reset()
    with torch_fl.emulate("npu") as activation:
        x = torch.randn(16).to(activation.device)
        profile = torch.autograd.profiler.profile
        shipped = {name: getattr(profile, name) for name in profiling.ORIGINALS}

        @contextlib.contextmanager
        def mode(name: str) -> Iterator[None]:
            for method, fn in (profiling.ORIGINALS if name == "before" else shipped).items():
                setattr(profile, method, fn)
            try:
                if name in ("profiled", "cpu-only"):
                    kinds = {} if name == "profiled" else {"activities": [torch.profiler.ProfilerActivity.CPU]}
                    with torch.profiler.profile(**kinds):
                        if (tensor.on_device_op is None) != (name == "cpu-only"):
                            raise RuntimeError(f"{name}: the recorder is {'off' if name == 'profiled' else 'on'}")
                        yield
                else:
                    if tensor.on_device_op is not None:
                        raise RuntimeError(f"{name}: a device-op hook is installed with no profiler active")
                    yield
            finally:
                for method, fn in shipped.items():
                    setattr(profile, method, fn)

        def sample(name: str) -> Sample:
            with mode(name):
                cpu, wall = time.thread_time(), time.perf_counter()
                for _ in range(args.calls):
                    torch.relu(x)
                return ((time.thread_time() - cpu) / args.calls, (time.perf_counter() - wall) / args.calls)

        for _ in range(200):
            torch.relu(x)
        pairs = alternate(sample, ("shipped", "profiled", "cpu-only"), args.repeats)
    torch_fl.reset()
    print(f"relu(16 floats) on emu:npu (native), {args.calls} calls x {args.repeats} samples per mode")
    table(pairs, ("before", "shipped", "profiled", "cpu-only"))

if __name__ == "__main__":
    main()
