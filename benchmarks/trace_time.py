"""Time to trace a ~110M-parameter GPT without compute (torch_fl.analysis.trace), against a 1 s target
for forward + backward.

The model (examples/gpt.py: dim 768, 12 layers, 12 heads, vocab 32000, context 512, batch 8) is built on
the meta device, so no parameter memory is allocated. Prints the first trace of the process apart:
it pays PyTorch's one-time import of its fake-tensor machinery (torch._dynamo, sympy, meta kernels),
part of which building on meta already paid. Then the median of the next runs of an inference forward
pass, of forward + loss + backward, and of a whole training step (with an AdamW step): first the plain
trace (every call recorded), then the trace `torchfl coverage` runs, which also routes every call with a
device's route table and runs the translations (chains) as the router would, on the device's own
tensors (``--device``, default ``emu:minimal``, the description with the most translations; ``cuda``
records fused attention).

    python benchmarks/trace_time.py [--repeats 5] [--layers 12] [--dim 768] [--device emu:minimal]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from gpt import GPT, lm_loss  # examples/ is not a package

from torch_fl.analysis.coverage import trace_device
from torch_fl.analysis.fidelity import device_kernels
from torch_fl.analysis.model import ModelSpec
from torch_fl.analysis.trace import trace, trace_step
from torch_fl.routing import route_table

TARGET_S = 1.0  # forward + backward


def timed(spec: ModelSpec, train: bool, step: bool, routed: dict | None) -> tuple[float, int]:
    start = time.perf_counter()
    if routed is None:
        records = trace(spec, train=train, step=step)
    else:
        records = trace_step(spec, train=train, step=step, **routed).records
    return time.perf_counter() - start, sum(r.calls for r in records)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--dim", type=int, default=768)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--device", default="emu:minimal", help="the device whose routes coverage replays")
    args = parser.parse_args()
    table = route_table(args.device.removeprefix("emu:"))
    kernels = device_kernels(table.description, emulated=args.device.startswith("emu:"))
    routed = dict(table=table, kernels=kernels, device=trace_device(kernels, amp=False))

    start = time.perf_counter()
    with torch.device("meta"):
        model = GPT(vocab=32000, dim=args.dim, heads=args.dim // 64, layers=args.layers, context=512)
    tokens = torch.zeros(args.batch, 512, dtype=torch.long, device="meta")
    built = time.perf_counter() - start
    params = sum(p.numel() for p in model.parameters())
    spec = ModelSpec("gpt-100m", model, (tokens,), lm_loss)
    print(f"GPT {params / 1e6:.0f}M parameters, batch {args.batch} x 512 tokens; "
          f"built on meta in {built:.2f} s "
          f"(first meta ops import torch's meta kernels)")

    first, _ = timed(spec, train=True, step=True, routed=None)
    print(f"first trace in this process (training step): {first:.2f} s")
    for title, how in (("plain trace", None), (f"coverage trace of {args.device} (routes, chains, "
                                                f"tensors on {routed['device']})", routed)):
        print(title)
        for train, step, label in ((False, False, "forward pass"),
                                   (True, False, "forward + loss + backward"),
                                   (True, True, "training step (forward, loss, backward, AdamW step)")):
            runs = [timed(spec, train, step, how) for _ in range(args.repeats)]
            median = statistics.median(t for t, _ in runs)
            verdict = ""
            if (train, step) == (True, False):
                verdict = f"; {median / TARGET_S:.2f}x the {TARGET_S:.0f} s target" + (
                    " (OK)" if median < TARGET_S else " (OVER TARGET)")
            print(f"  {label}: median {median:.3f} s over {args.repeats} runs, {runs[0][1]} calls{verdict}")


if __name__ == "__main__":
    main()
