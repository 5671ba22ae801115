"""Time to trace a ~100M-parameter GPT without compute (torch_fl.analysis.trace), against a 2 s target.

The model (examples/gpt.py: dim 768, 12 layers, 12 heads, vocab 32000, context 512, batch 8) is built on
the meta device, so no parameter memory is allocated. Prints the first trace of the process apart:
it pays PyTorch's one-time import of its fake-tensor machinery (torch._dynamo, sympy, meta kernels),
part of which building on meta already paid. Then the median of the next runs of an inference forward
pass, of forward + loss + backward, and of a whole training step (with an AdamW step).

    python benchmarks/trace_time.py [--repeats 5] [--layers 12] [--dim 768]
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

from torch_fl.analysis.model import ModelSpec
from torch_fl.analysis.trace import trace

TARGET_S = 2.0


def timed(spec: ModelSpec, train: bool, step: bool) -> tuple[float, int]:
    start = time.perf_counter()
    records = trace(spec, train=train, step=step)
    return time.perf_counter() - start, sum(r.calls for r in records)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--dim", type=int, default=768)
    parser.add_argument("--batch", type=int, default=8)
    args = parser.parse_args()

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

    first, _ = timed(spec, train=True, step=True)
    print(f"first trace in this process (training step): {first:.2f} s")
    for train, step, label in ((False, False, "forward pass"),
                               (True, False, "forward + loss + backward"),
                               (True, True, "training step (forward, loss, backward, AdamW step)")):
        runs = [timed(spec, train, step) for _ in range(args.repeats)]
        median = statistics.median(t for t, _ in runs)
        print(f"{label}: median {median:.3f} s over {args.repeats} runs, {runs[0][1]} calls; "
              f"{median / TARGET_S:.2f}x the {TARGET_S:.0f} s target"
              + (" (OK)" if median < TARGET_S else " (OVER TARGET)"))


if __name__ == "__main__":
    main()
