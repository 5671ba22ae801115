"""What streams.py, stream_copies.py and the stream sanitizer cost on the emulated device, from one run.

  (a) copies: a host-to-device ``.to(d)``, a blocking ``.cpu()`` and a non-blocking copy to the host, per call,
      through stream_copies.py's wrapped copy handlers vs copies.py's handlers as they were (goal: equal for the
      blocking copies; the non-blocking one adds its deferral: a clone and a poison fill of the host result);
      and a 16x16 add, which nothing of stream_copies.py touches (the dispatch path is unchanged).
  (b) a training step (examples/gpt.py, dim 64, 2 layers, batch 2, context 16: small ops, where a per-op
      cost shows most) on emu:cuda with the sanitizer off and on (goal: on <= 2x off).

Samples of the compared modes alternate; each ratio is the median of the per-sample ratios. The clock is the
process's CPU time on one torch thread.

    python benchmarks/streams_sanitizer.py [--repeats 9] [--calls 1000] [--steps 3]
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

import torch
from interleaved import command_line, gpt_step, interleaved, ratio  # benchmarks/interleaved.py

import torch_fl

torch_fl.device.emulated_devices(create=True)  # (before any backward: autograd fixes its devices at the first)


def _switch(handlers: dict) -> Callable[[], None]:
    """A call that makes the emulator's copies go through `handlers` (op -> handler)."""
    from torch_fl.routing.emu import tensor

    def use() -> None:
        for op, handler in handlers.items():
            if tensor.SPECIAL[op] is not handler:
                tensor.SPECIAL[op] = handler
                tensor._plans.pop(id(op), None)

    return use


def copies(device: torch.device, repeats: int, calls: int) -> None:
    host, small = torch.randn(16, 16), torch.randn(16, 16, device=device)
    work = {
        "h2d .to(d)": lambda: host.to(device),
        "d2h .cpu()": lambda: small.cpu(),
        "d2h non_blocking": lambda: small.to("cpu", non_blocking=True),
        "16x16 add": lambda: small + small,
    }
    from torch_fl.routing.emu import stream_copies, tensor

    wrapped = _switch({op: tensor.SPECIAL[op] for op in stream_copies.unwrapped})
    plain = _switch(dict(stream_copies.unwrapped))
    for name, fn in work.items():
        def with_wrappers(fn: Callable[[], None] = fn) -> None:
            wrapped()
            fn()

        def without(fn: Callable[[], None] = fn) -> None:
            plain()
            fn()

        times = interleaved({"streams": with_wrappers, "before": without}, repeats, calls)
        before, after = statistics.median(times["before"]), statistics.median(times["streams"])
        print(f"(a) {name:18s} before {before * 1e6:7.1f} us  streams.py {after * 1e6:7.1f} us  "
              f"ratio {ratio(times, 'streams', 'before'):.2f}x")
    wrapped()
    torch_fl.synchronize()


def steps(device: torch.device, repeats: int, n: int) -> None:
    from torch_fl.routing.emu.sanitizing import sanitize

    step = gpt_step(device, batch=2, context=16, dim=64, heads=4, layers=2)

    def sanitized() -> None:
        with sanitize():
            step()

    times = interleaved({"off": step, "on": sanitized}, repeats, n)
    print(f"(b) training step: sanitizer off {statistics.median(times['off']) * 1e3:.1f} ms, on "
          f"{statistics.median(times['on']) * 1e3:.1f} ms: {ratio(times, 'on', 'off'):.2f}x (goal <= 2x)")


def main(argv: list[str] | None = None) -> None:
    args = command_line(__doc__, argv, repeats=9, calls=1000, calls_help="copy calls per sample",
                        steps_help="training steps per sample")
    with torch_fl.emulate("cuda") as activation:
        copies(activation.device, args.repeats, args.calls)
        steps(activation.device, args.repeats, args.steps)


if __name__ == "__main__":
    main()
