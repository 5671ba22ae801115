#!/usr/bin/env python
"""`torchfl fix` against `torchfl scan` on real files, and a seeded sample of findings to judge (issue 30).

Usage:
    python scripts/realworld_fixspeed.py speed FILE...        best of 5, in-process: scan, fix --unsafe-fixes, ratio
    python scripts/realworld_fixspeed.py sample N CHECKOUT... N findings drawn with random.Random(30), with
                                                              their source line, for judging by hand

Run with PYTHONPATH pointing at another checkout's src/ to time an older torch-fl the same way.
"""

from __future__ import annotations

import random
import sys
import time
from collections import Counter
from pathlib import Path


def speed(files: list[str]) -> None:
    from torch_fl.migrate.fix import fix_source
    from torch_fl.migrate.scan import scan_source

    def best(fn, *args, **kwargs) -> float:
        times = []
        for _ in range(5):
            start = time.perf_counter()
            fn(*args, **kwargs)
            times.append(time.perf_counter() - start)
        return min(times)

    fix_source("import torch\nx = torch.zeros(1).cuda()\n")  # import libcst once
    for name in files:
        text = Path(name).read_text()
        scan = best(scan_source, text, name)
        fix = best(fix_source, text, unsafe=True, path=name)
        print(f"{name}: scan {scan * 1000:.0f} ms, fix --unsafe-fixes {fix * 1000:.0f} ms, {fix / scan:.1f}x")


def sample(count: int, roots: list[str]) -> None:
    from torch_fl.migrate.scan import scan_paths

    found = []
    for root in roots:
        result = scan_paths([root])
        print(f"{root}: {result.files} files, {result.lines} lines, {len(result.findings)} findings, "
              f"{dict(Counter(f.code for f in result.findings).most_common(8))}")
        found += result.findings
    for f in sorted(random.Random(30).sample(found, min(count, len(found))), key=lambda f: f.sort_key):
        line = Path(f.path).read_text(errors="replace").splitlines()[f.line - 1].strip()
        print(f"{f.path}:{f.line} {f.code} ({f.safety or '-'}) | {line[:150]}")


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] not in ("speed", "sample"):
        sys.exit(__doc__)
    if sys.argv[1] == "speed":
        speed(sys.argv[2:])
    else:
        sample(int(sys.argv[2]), sys.argv[3:])
