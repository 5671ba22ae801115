"""What torch-fl's dispatch layer costs on the CPU, from one run (no asserts; prints a table).

  (a) a GPT training step (examples/gpt.py: forward, backward, AdamW) with routing active on the CPU
      vs plain PyTorch. On the CPU only ops without a CPU kernel get routers, so none of the model's
      ops is routed: the ratio should be 1 (target <= 1.01).
  (b) the extra cost of one routed call, translate and fallback (forced with FL_ROUTE on the CPU key),
      over the bare op; and the same op unrouted while routing is active (ideally no extra cost).
  (c) the cost of the dispatch-mode emulator (torch.fl.emulate(..., host=True), the fallback when a
      vendor owns PrivateUse1): the same op under emulate("cpu", host=True) (every op native, so only the
      dispatch mode is measured), and a GPT step under emulate("minimal", host=True), vs bare. The
      emulated device (emu:0) is measured by benchmarks/emulation_overhead.py.

Samples of the compared modes alternate; each ratio is the median of the per-sample ratios, so that
machine load affects both sides alike. By default the clock is the process's CPU time on one torch
thread, which other processes' load barely moves; --clock wall measures elapsed time instead.

    python benchmarks/dispatch_overhead.py [--repeats 31] [--calls 2000] [--threads 1] [--clock cpu]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.nn import functional as F

import torch_fl

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from gpt import factory  # examples/ is not a package

Mode = Callable[[], contextlib.AbstractContextManager]


# Modes: each is a context in which the timed code runs ------------------------------------------------
@contextlib.contextmanager
def plain() -> Iterator[None]:
    torch_fl.deactivate()
    yield


@contextlib.contextmanager
def activated_cpu(route: str = "") -> Iterator[None]:
    """Routing active on the CPU key, with FL_ROUTE set to `route` while the route table is built."""
    previous = os.environ.get("FL_ROUTE")
    os.environ["FL_ROUTE"] = route
    torch_fl.reset()
    try:
        torch_fl.activate("cpu")
        yield
    finally:
        torch_fl.deactivate()
        if previous is None:
            del os.environ["FL_ROUTE"]
        else:
            os.environ["FL_ROUTE"] = previous
        torch_fl.reset()


@contextlib.contextmanager
def emulated(name: str) -> Iterator[None]:
    torch_fl.deactivate()
    # the dispatch-mode emulator (host tensors checked); the emulated device is emulation_overhead.py's
    with torch_fl.emulate(name, host=True):
        yield


# Timing -----------------------------------------------------------------------------------------------
CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}
clock = CLOCKS["cpu"]


@dataclass
class Result:
    """Median seconds per call in each mode, and the median per-sample ratio of each mode to the first."""

    medians: dict[str, float]
    ratios: dict[str, float]


def timed(fn: Callable[[], None], count: int) -> float:
    # As timeit does: a collection triggered by one mode's setup garbage must not land in a sample.
    gc.disable()
    try:
        start = clock()
        for _ in range(count):
            fn()
        return (clock() - start) / count
    finally:
        gc.enable()


def interleaved(fn: Callable[[], None], modes: dict[str, Mode], repeats: int, count: int) -> Result:
    """Time `fn` in each mode, modes alternating every sample; the first mode is the baseline."""
    samples: dict[str, list[float]] = {name: [] for name in modes}
    for mode in modes.values():  # warm-up: first-call caches (route tables, decompositions)
        with mode():
            timed(fn, max(1, count // 4))
    order = list(modes)
    for _ in range(repeats):
        for name in order:
            with modes[name]():
                fn()  # untimed: switching modes (activation) disturbs caches; steady state is wanted
                samples[name].append(timed(fn, count))
        order.reverse()  # A B B A ...: neither mode always runs right after the other
    base = samples[next(iter(modes))]
    return Result({name: statistics.median(values) for name, values in samples.items()},
                  {name: statistics.median(v / b for v, b in zip(values, base, strict=True))
                   for name, values in samples.items()})


# Workloads --------------------------------------------------------------------------------------------
def gpt_step() -> Callable[[], None]:
    model, (tokens,), loss_fn = factory(batch=8, context=64)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        loss_fn(model(tokens), tokens).backward()
        opt.step()

    return step


def small_op() -> Callable[[], None]:
    x = torch.randn(16, 16)
    return lambda: F.gelu(x)


# Report -----------------------------------------------------------------------------------------------
def us(seconds: float) -> str:
    return f"{seconds * 1e6:10.2f} us"


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:10.2f} ms"


def report_step(title: str, result: Result, target: float | None = None) -> None:
    print(f"\n{title}")
    for i, (name, value) in enumerate(result.medians.items()):
        ratio = f"   ratio {result.ratios[name]:.3f}" if i else ""
        goal = f" (target <= {target})" if target and name == list(result.medians)[-1] else ""
        print(f"  {name:<28}{ms(value)}/step{ratio}{goal}")


def report_op(title: str, result: Result) -> None:
    print(f"\n{title}")
    base = next(iter(result.medians.values()))
    for i, (name, value) in enumerate(result.medians.items()):
        extra = f"   extra {us(value - base).strip()}/call   ratio {result.ratios[name]:.2f}" if i else ""
        print(f"  {name:<28}{us(value)}/call{extra}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=41, help="samples per mode (default 41)")
    parser.add_argument("--calls", type=int, default=2000, help="small-op calls per sample (default 2000)")
    parser.add_argument("--steps", type=int, default=3, help="GPT steps per sample (default 3)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1: steadiest)")
    parser.add_argument("--clock", choices=CLOCKS, default="cpu", help="cpu (process time) or wall")
    args = parser.parse_args()
    global clock
    clock = CLOCKS[args.clock]
    torch.set_num_threads(args.threads)
    warnings.simplefilter("ignore")  # the fallback route warns once per op, by design
    for name in [n for n in os.environ if n.startswith("FL_")]:
        del os.environ[name]  # the machine's own FL_* settings must not change what is measured
    torch_fl.reset()
    print(f"torch {torch.__version__}, torch-fl {torch_fl.__version__}, {torch.get_num_threads()} threads, "
          f"{args.clock} clock, {args.repeats} interleaved samples per mode, medians")
    started = time.perf_counter()

    step = gpt_step()
    report_step("(a) GPT step (forward + backward + AdamW), routing active on cpu vs plain",
                interleaved(step, {"plain": plain, "plain again (noise floor)": plain,
                                   "torch-fl active (cpu)": activated_cpu},
                            args.repeats, args.steps), target=1.01)

    op = small_op()
    report_op("(b) routed call: F.gelu on a 16x16 float32 tensor, forced with FL_ROUTE on the CPU key",
              interleaved(op, {"bare": plain,
                               "active, gelu not routed": activated_cpu,
                               "route translate": lambda: activated_cpu("aten::gelu=translate"),
                               "route fallback": lambda: activated_cpu("aten::gelu=fallback")},
                          args.repeats, args.calls))

    report_op("(c) emulation: the same op under torch.fl.emulate('cpu') (all native)",
              interleaved(op, {"bare": plain, "emulate('cpu')": lambda: emulated("cpu")},
                          args.repeats, args.calls))
    report_step("(c) GPT step under torch.fl.emulate('minimal') vs plain",
                interleaved(step, {"plain": plain, "emulate('minimal')": lambda: emulated("minimal")},
                            max(5, args.repeats // 3), 1))
    print(f"\ntotal {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
