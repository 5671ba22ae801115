"""Extra time of `import torch_fl` over `import torch` (target: under 10%).

Each sample is a fresh interpreter; samples of both kinds alternate so that machine load affects them
alike. Prints the medians and the ratio.

    python benchmarks/import_time.py [--repeats 15]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

PROBE = "import time; t = time.perf_counter(); {stmt}; print(time.perf_counter() - t)"


def sample(stmt: str) -> float:
    out = subprocess.run([sys.executable, "-c", PROBE.format(stmt=stmt)], check=True,
                         capture_output=True, text=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    sample("import torch")  # warm the OS file cache
    plain, with_fl, fl_only = [], [], []
    for i in range(args.repeats):
        plain.append(sample("import torch"))
        with_fl.append(sample("import torch, torch_fl"))
        fl_only.append(sample("import torch; t = time.perf_counter(); import torch_fl"))
        print(f"\r{i + 1}/{args.repeats}", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    base, total = statistics.median(plain), statistics.median(with_fl)
    extra = statistics.median(fl_only)
    print(f"import torch            median {base * 1000:7.1f} ms")
    print(f"import torch, torch_fl  median {total * 1000:7.1f} ms")
    print(f"import torch_fl alone   median {extra * 1000:7.1f} ms (after torch)")
    print(f"extra over import torch: {extra / base:.1%} (target < 10%)")


if __name__ == "__main__":
    main()
