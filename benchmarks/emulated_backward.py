"""Per-op and per-step cost of an emulated chip (emu:npu by default) against plain CPU torch, CPU time beside
wall time, from one run.

The vendors' optimizer tests (torch_npu's test/test_optim.py: 200 optimizer steps of a 10x5 ``mv`` problem
per case, hundreds of cases) are all small ops, forward and backward: the emulator's per-op cost is the
whole of their run time, and the judge (scripts/vendor_suites.py) gives a file 60 s. This prints, for
each workload, microseconds per call on the plain CPU and on the emulated chip, wall and CPU time, and the
ratio to the CPU; for backward also the emulated chip with PyTorch's device thread (the engine's default
for a non-CPU device, which routing/emu/engine.py replaces by the calling thread).

Samples of the compared modes alternate; the printed figure is the median of the samples. Wall time is
what a timeout sees; CPU time (the process's, every thread) is what the machine's load does not inflate.

    python benchmarks/emulated_backward.py [--chip npu] [--repeats 7] [--calls 400]
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from collections.abc import Callable

import torch
from torch.autograd.variable import Variable

import torch_fl

# Register the device before any backward pass: PyTorch's autograd engine fixes its devices at the first.
torch_fl.device.emulated_devices(create=True)


def _workloads(device: torch.device) -> dict[str, Callable[[], object]]:
    torch.manual_seed(0)
    a, b = torch.randn(16, 16, device=device), torch.randn(16, 16, device=device)
    weight = torch.nn.Parameter(torch.randn(10, 5, device=device))
    bias = torch.nn.Parameter(torch.randn(10, device=device))
    x = torch.randn(5, device=device)
    single = torch.optim.Adam([weight, bias], foreach=False)
    multi = torch.optim.Adam([weight, bias], foreach=True)

    def loss() -> torch.Tensor:  # torch_npu's test_optim.py fn(): (weight.mv(input) + bias).pow(2).sum()
        single.zero_grad()
        out = (weight.mv(x) + bias).pow(2).sum()
        out.backward()
        return out

    return {
        "add 16x16": lambda: a + b,
        "add_ 16x16": lambda: a.add_(b),
        "sum 16x16": lambda: a.sum(),
        "mv 10x5": lambda: weight.detach().mv(x),
        "x.sum().backward()": lambda: weight.sum().backward(),
        "fwd+bwd (test_optim fn)": loss,
        "Adam step, single tensor": lambda: single.step(loss),
        "Adam step, foreach": lambda: multi.step(loss),
    }


def _sample(fn: Callable[[], object], calls: int) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - wall) / calls, (time.process_time() - cpu) / calls


class _DeviceThread:
    """PyTorch's own engine handle for the duration: backward on the engine's device thread."""

    def __enter__(self) -> None:
        self._engine = Variable._execution_engine
        Variable._execution_engine = torch._C._ImperativeEngine()

    def __exit__(self, *exc: object) -> None:
        Variable._execution_engine = self._engine


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chip", default="npu")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--calls", type=int, default=400, help="calls per sample")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    print(f"torch {torch.__version__}, 1 thread, emu:{args.chip} vs plain CPU, {args.repeats} interleaved "
          f"samples of {args.calls} calls; us per call, wall / CPU")
    with torch_fl.emulate(args.chip) as chip:
        emulated = _workloads(chip.device)
    host = _workloads(torch.device("cpu"))
    print(f"{'workload':28} {'cpu wall/cpu':>15} {'emu wall/cpu':>17} {'ratio wall/cpu':>15}"
          f" {'emu, device thread':>19}")
    for name in host:
        backward = "backward" in name or "fwd" in name or "step" in name
        modes = {"cpu": (host[name], None), "emu": (emulated[name], args.chip)}
        if backward:
            modes["thread"] = (emulated[name], args.chip)
        samples: dict[str, list[tuple[float, float]]] = {m: [] for m in modes}
        for _ in range(args.repeats + 1):  # (the first round warms up: route decisions, allocator)
            for mode, (fn, emulate) in modes.items():
                if emulate is None:
                    samples[mode].append(_sample(fn, args.calls))
                    continue
                with torch_fl.emulate(emulate):
                    if mode == "thread":
                        with _DeviceThread():
                            samples[mode].append(_sample(fn, args.calls))
                    else:
                        samples[mode].append(_sample(fn, args.calls))
        us = {m: (statistics.median(s[0] for s in v[1:]) * 1e6, statistics.median(s[1] for s in v[1:]) * 1e6)
              for m, v in samples.items()}
        cpu, emu = us["cpu"], us["emu"]
        thread = f"{us['thread'][0]:8.1f} /{us['thread'][1]:7.1f}" if "thread" in us else ""
        print(f"{name:28} {cpu[0]:7.1f} /{cpu[1]:6.1f} {emu[0]:8.1f} /{emu[1]:7.1f} "
              f"{emu[0] / cpu[0]:6.1f}x /{emu[1] / cpu[1]:5.1f}x {thread:>19}")


if __name__ == "__main__":
    main()
