"""What the emulated device (emu:N, routing/emu/) costs against plain CPU, from one run.

  (a) a GPT training step (examples/gpt.py: forward, backward, AdamW) on the emulated device vs the
      same step on the plain CPU: on emu:cuda (every op the model uses is native there, so this is the
      device emulation alone) and on emu:minimal (translations too). Goal: at most 4x.
  (b) the added cost of one small op (a 16x16 add, and a 64x64 matmul) on the emulated device over
      the same op on the CPU, in microseconds per call.

Samples of the compared modes alternate; each ratio is the median of the per-sample ratios, so that
machine load affects both sides alike. The clock is the process's CPU time on one torch thread.

    python benchmarks/emulation_overhead.py [--repeats 11] [--calls 2000] [--steps 3]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

import torch_fl

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from gpt import factory  # examples/ is not a package

# Register the device before any backward pass: PyTorch's autograd engine fixes its devices at the first.
torch_fl.device.emulated_devices(create=True)


def _clock() -> float:
    return time.process_time()


def _step_runner(device: torch.device, batch: int, context: int) -> Callable[[], None]:
    model, (tokens,), loss_fn = factory(batch=batch, context=context)
    model = copy.deepcopy(model).to(device)
    tokens = tokens.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step() -> None:
        opt.zero_grad()
        loss = loss_fn(model(tokens), tokens)
        loss.backward()
        opt.step()
        loss.item()

    return step


def _time(fn: Callable[[], None], n: int) -> float:
    start = _clock()
    for _ in range(n):
        fn()
    return (_clock() - start) / n


def interleaved(runners: dict[str, Callable[[], None]], repeats: int, n: int) -> dict[str, list[float]]:
    for fn in runners.values():
        fn()  # warm up (first-call route decisions, allocator)
    times: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(repeats):
        for name, fn in runners.items():
            times[name].append(_time(fn, n))
    return times


def ratio(times: dict[str, list[float]], name: str, base: str) -> float:
    return statistics.median(a / b for a, b in zip(times[name], times[base], strict=True))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--calls", type=int, default=2000, help="small-op calls per sample")
    parser.add_argument("--steps", type=int, default=3, help="GPT steps per sample")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--context", type=int, default=64)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    warnings.simplefilter("ignore", torch_fl.errors.FallbackWarning)
    print(f"torch {torch.__version__}, 1 thread, CPU-time clock, {args.repeats} interleaved samples")

    steps: dict[str, Callable[[], None]] = {"cpu": _step_runner(torch.device("cpu"), args.batch, args.context)}
    for chip in ("cuda", "minimal"):
        # each chip's emulation is entered around its own steps only
        with torch_fl.emulate(chip) as activation:
            runner = _step_runner(activation.device, args.batch, args.context)

        def run(chip: str = chip, runner: Callable[[], None] = runner) -> None:
            with torch_fl.emulate(chip):
                runner()

        steps[f"emu:{chip}"] = run
    times = interleaved(steps, args.repeats, args.steps)
    print(f"(a) GPT train step (batch {args.batch}, context {args.context}): plain CPU "
          f"{statistics.median(times['cpu']) * 1e3:.1f} ms")
    for name in steps:
        if name != "cpu":
            print(f"    {name}: {statistics.median(times[name]) * 1e3:.1f} ms, "
                  f"{ratio(times, name, 'cpu'):.2f}x plain CPU (goal <= 4x)")

    with torch_fl.emulate("cuda") as activation:
        d = activation.device
        for label, make in (("add 16x16", lambda dev: (torch.randn(16, 16, device=dev),) * 2),
                            ("matmul 64x64", lambda dev: (torch.randn(64, 64, device=dev),) * 2)):
            host, dev = make("cpu"), make(d)
            fn = torch.add if label.startswith("add") else torch.mm
            ops = {"cpu": lambda h=host, f=fn: f(*h), "emu": lambda x=dev, f=fn: f(*x)}
            op_times = interleaved(ops, args.repeats, args.calls)
            cpu_us, emu_us = (statistics.median(op_times[k]) * 1e6 for k in ("cpu", "emu"))
            print(f"(b) {label}: cpu {cpu_us:.1f} us, emu:cuda {emu_us:.1f} us per call: "
                  f"+{emu_us - cpu_us:.1f} us added per op ({ratio(op_times, 'emu', 'cpu'):.1f}x)")


if __name__ == "__main__":
    main()
