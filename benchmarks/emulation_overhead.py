"""What the emulated device (emu:N, routing/emu/) costs against plain CPU, from one run.

  (a) training steps (examples/gpt.py: forward, backward, AdamW) on the emulated device vs the same
      step on the plain CPU, for a small-op model (dim 64, batch 2, context 16: every op is a few
      microseconds, so the per-op cost shows; goal <= 4x) and a GPT-size step (dim 512, 4 layers, batch
      8, context 128; goal <= 1.5x): on emu:cuda (every op the model uses is native there, so this is
      the device emulation alone) and on emu:minimal (translations too).
  (b) the added cost of one small op (a 16x16 add, and a 64x64 matmul) on the emulated device over
      the same op on the CPU, in microseconds per call, next to the floor of any Python backend: a bare
      wrapper subclass whose __torch_dispatch__ only unwraps, calls and wraps (what remains with every
      torch-fl check removed), and a bare TorchDispatchMode (the dispatch-mode emulator's floor).

Samples of the compared modes alternate; each ratio is the median of the per-sample ratios, so that
machine load affects both sides alike. The clock is the process's CPU time on one torch thread.

    python benchmarks/emulation_overhead.py [--repeats 11] [--calls 2000] [--steps 3]
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

import torch
from interleaved import command_line, gpt_step, interleaved, ratio, time_per_call  # benchmarks/interleaved.py
from torch.utils._python_dispatch import TorchDispatchMode

import torch_fl

# Register the device before any backward pass: PyTorch's autograd engine fixes its devices at the first.
torch_fl.device.emulated_devices(create=True)

SIZES = {  # name -> (GPT(...) arguments, batch, context)
    "small-op model": ({"dim": 64, "heads": 4, "layers": 2}, 2, 16),
    "GPT-size step": ({"dim": 512, "heads": 8, "layers": 4}, 8, 128),
}


def _step_runner(device: torch.device, size: str) -> Callable[[], None]:
    config, batch, context = SIZES[size]
    return gpt_step(device, batch, context, **config)


def main(argv: list[str] | None = None) -> None:
    args = command_line(__doc__, argv, repeats=11, calls=2000, calls_help="small-op calls per sample",
                        steps_help="GPT steps per sample")

    for size in SIZES:
        steps: dict[str, Callable[[], None]] = {"cpu": _step_runner(torch.device("cpu"), size)}
        for chip in ("cuda", "minimal"):
            # each chip's emulation is entered around its own steps only
            with torch_fl.emulate(chip) as activation:
                runner = _step_runner(activation.device, size)

            def run(chip: str = chip, runner: Callable[[], None] = runner) -> None:
                with torch_fl.emulate(chip):
                    runner()

            steps[f"emu:{chip}"] = run
        goal = 4 if size.startswith("small") else 1.5
        times = interleaved(steps, args.repeats, args.steps)
        print(f"(a) {size}: plain CPU {statistics.median(times['cpu']) * 1e3:.1f} ms")
        for name in steps:
            if name != "cpu":
                print(f"    {name}: {statistics.median(times[name]) * 1e3:.1f} ms, "
                      f"{ratio(times, name, 'cpu'):.2f}x plain CPU (goal <= {goal}x)")

    with torch_fl.emulate("cuda") as activation:
        d = activation.device
        for label, shape, fn in (("add 16x16", (16, 16), torch.add), ("matmul 64x64", (64, 64), torch.mm)):
            host = torch.randn(shape)
            dev, bare = host.to(d), _Bare(host)
            mode = _BareMode()
            ops = {"cpu": lambda f=fn, h=host: f(h, h), "bare": lambda f=fn, b=bare: f(b, b),
                   "emu": lambda f=fn, x=dev: f(x, x)}
            op_times = interleaved(ops, args.repeats, args.calls)
            op_times["mode"] = []
            for _ in range(args.repeats):  # the mode is entered once per sample, as around a model
                with mode:
                    op_times["mode"].append(time_per_call(lambda f=fn, h=host: f(h, h), args.calls))
            us = {k: statistics.median(v) * 1e6 for k, v in op_times.items()}
            print(f"(b) {label}: cpu {us['cpu']:.1f} us; emu:cuda {us['emu']:.1f} us "
                  f"(+{us['emu'] - us['cpu']:.1f} us, {ratio(op_times, 'emu', 'cpu'):.1f}x); floor of a Python "
                  f"backend (bare wrapper subclass) {us['bare']:.1f} us (+{us['bare'] - us['cpu']:.1f} us); "
                  f"bare dispatch mode {us['mode']:.1f} us (+{us['mode'] - us['cpu']:.1f} us)")
    print("    torch-fl's own share of the emulated op is emu - bare; the rest is the Python boundary "
          "(a C++ PrivateUse1 backend would not pay it)")


class _Bare(torch.Tensor):
    """The least a Python backend does per op: unwrap, call the CPU kernel, wrap the result."""

    @staticmethod
    def __new__(cls, data: torch.Tensor) -> _Bare:
        out = torch.Tensor._make_wrapper_subclass(cls, data.size(), strides=data.stride(), dtype=data.dtype,
                                                  device=data.device)
        out._data = data
        return out

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):  # type: ignore[override]
        return _Bare(func(*[a._data if type(a) is _Bare else a for a in args], **(kwargs or {})))


class _BareMode(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[override]
        return func(*args, **(kwargs or {}))


if __name__ == "__main__":
    main()
