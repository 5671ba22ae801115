"""Time of `torch.fl.register_kernel` and of its handle's `remove()` with routing active on the CPU key
(target: <= 10 ms each; issue 32), against the full re-install the handles replace, and a check that the
kernel is called while registered and not after.

    python benchmarks/register_kernel.py [--repeats 20]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import torch_fl  # noqa: F401  (torch.fl)
from torch_fl.routing import activation


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    torch.fl.activate("cpu")
    calls = []

    def gelu(x, approximate="none"):
        calls.append(1)
        return torch.nn.functional.gelu(x.float(), approximate=approximate).to(x.dtype)

    x = torch.randn(8, 8, dtype=torch.bfloat16)
    add, remove, full = [], [], []
    for _ in range(args.repeats):
        start = time.perf_counter()
        handle = torch.fl.register_kernel("aten::gelu", gelu, dtypes=["bfloat16"])
        add.append(time.perf_counter() - start)
        before = len(calls)
        torch.nn.functional.gelu(x)
        assert len(calls) == before + 1, "the registered kernel was not called"
        start = time.perf_counter()
        handle.remove()
        remove.append(time.perf_counter() - start)
        torch.nn.functional.gelu(x)
        assert len(calls) == before + 1, "the removed kernel was still called"
        start = time.perf_counter()
        activation.refresh()  # what every register_kernel cost before per-op handles
        full.append(time.perf_counter() - start)
    ms = {name: statistics.median(v) * 1e3 for name, v in (("add", add), ("remove", remove), ("full", full))}
    print(f"register_kernel on the CPU key  median {ms['add']:6.2f} ms (target <= 10 ms)")
    print(f"handle.remove()                 median {ms['remove']:6.2f} ms (target <= 10 ms)")
    print(f"full re-install (before)        median {ms['full']:6.2f} ms "
          f"({ms['full'] / max(ms['add'], 1e-9):.0f}x a handle)")


if __name__ == "__main__":
    main()
