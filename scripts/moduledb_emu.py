#!/usr/bin/env python
"""Run PyTorch's ModuleInfo database on an emulated chip and compare every sample with the CPU.

Run under ``FL_DEVICE=emu:NAME`` (the emulated chip must be the process's device, so it is registered
before the first backward pass). The samples, the comparison and what each result means are
moduledb_harness.py's, which tests/routing/test_module_db.py runs in-process on emu:cuda and emu:mps: a
sample passes when outputs and gradients match the CPU's, is counted `unsupported` when the emulated run
stops with torch-fl's ``UnsupportedOperatorError`` (the chip cannot run it, and says so), and `skipped`
when the CPU reference raises and the device does too; anything else is a failure. Random modules
(dropout and friends) are run with the same seed on both sides.

Usage: FL_DEVICE=emu:npu moduledb_emu.py [--modules NAME,...] [--samples N] [--json FILE]
       FL_DEVICE=emu:npu moduledb_emu.py --optim [--json FILE]   (optim_db instead)
Exit status: 0 when no sample failed, 1 otherwise. The summary goes to stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from collections import Counter
from typing import Any

import torch

import torch_fl

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import moduledb_harness as harness  # (beside this script, on sys.path above)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modules", help="comma-separated ModuleInfo names (default: all)")
    parser.add_argument("--samples", type=int, default=0, help="samples per module (default: all)")
    parser.add_argument("--json", help="write per-sample results to this file")
    parser.add_argument("--progress", action="store_true", help="name each module on stderr as it starts")
    parser.add_argument("--optim", action="store_true",
                        help="run optim_db instead: three steps of every optimizer configuration, equal to the CPU")
    parser.add_argument("--start", type=int, default=0, help="skip the first N ModuleInfos (used by --isolate)")
    parser.add_argument("--jsonl", help="append each sample's result to this file as it is known (--isolate)")
    parser.add_argument("--isolate", action="store_true",
                        help="run in child processes: a module that kills the process (a C++ abort) is "
                             "recorded as a failure ('crash') and the run resumes after it")
    args = parser.parse_args(argv)
    if args.optim:
        return _optim(args)
    if args.isolate:
        return _isolated(args)
    device = torch.fl.device()
    if device.type == "cpu":
        sys.exit("run under FL_DEVICE=emu:NAME: the emulated chip must be this process's device")
    wanted = set(args.modules.split(",")) if args.modules else None
    counts: Counter[str] = Counter()
    results = []
    started = time.perf_counter()
    warnings.filterwarnings("ignore")
    announced = -1
    for position, info, index, sample in harness.samples(args.start, wanted, args.samples):
        if args.progress and position != announced:
            print(f"... {position} {info.name}", file=sys.stderr, flush=True)
            announced = position
        if isinstance(sample, Exception):
            counts["skip"] += 1
            results.append({"module": info.name, "sample": -1, "result": "skip", "detail": str(sample)[:120]})
            continue
        result, detail = harness.check_sample(info, sample, device, seed=index)
        counts[result] += 1
        results.append({"module": info.name, "sample": index, "result": result, "detail": detail})
        if args.jsonl:
            with open(args.jsonl, "a", encoding="utf-8") as f:
                f.write(json.dumps(results[-1]) + "\n")
        if result == "fail":
            print(f"FAIL {info.name}[{index}]: {detail}", file=sys.stderr)
    modules = len({r["module"] for r in results})
    print(f"module_db on {device} ({torch_fl.description().name}): {modules} modules, {sum(counts.values())} "
          f"samples: {counts['pass']} equal the CPU, {counts['unsupported']} stop with "
          f"UnsupportedOperatorError, {counts['fail']} fail, {counts['skip']} skipped (CPU reference "
          f"raised) in {time.perf_counter() - started:.1f} s")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"device": str(device), "counts": dict(counts), "results": results}, f, indent=1)
    return 1 if counts["fail"] else 0


def _optim(args: argparse.Namespace) -> int:
    """optim_db on the emulated chip (moduledb_harness.run_optim_db)."""
    device = torch.fl.device()
    if device.type == "cpu":
        sys.exit("run under FL_DEVICE=emu:NAME: the emulated chip must be this process's device")
    started = time.perf_counter()
    warnings.filterwarnings("ignore")
    total, passed, failures = harness.run_optim_db(device)
    for name, reasons in failures.items():
        for reason in reasons:
            print(f"FAIL {name}: {reason}", file=sys.stderr)
    print(f"optim_db on {device} ({torch_fl.description().name}): {total} configurations, {passed} equal the CPU "
          f"after three steps, {total - passed} differ or stop (not run: {', '.join(harness.NOT_RUN)}) in "
          f"{time.perf_counter() - started:.1f} s")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"device": str(device), "total": total, "passed": passed, "failures": failures}, f, indent=1)
    return 1 if failures else 0


def _isolated(args: argparse.Namespace) -> int:
    """Run the check in child processes, resuming after a module whose sample aborts the process."""
    import subprocess
    import tempfile

    counts: Counter[str] = Counter()
    results: list[dict[str, Any]] = []
    start, started = 0, time.perf_counter()
    while True:
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as tmp:
            out = tmp.name
        cmd = [sys.executable, __file__, "--progress", "--start", str(start), "--jsonl", out,
               "--samples", str(args.samples)] + (["--modules", args.modules] if args.modules else [])
        child = subprocess.run(cmd, capture_output=True, text=True, check=False)
        last = [line.split(" ", 2) for line in child.stderr.splitlines() if line.startswith("... ")]
        with open(out, encoding="utf-8") as f:
            part = [json.loads(line) for line in f if line.strip()]
        os.unlink(out)
        counts.update(r["result"] for r in part)
        results.extend(part)
        if child.returncode in (0, 1):
            break
        if not last:
            sys.exit(f"the child run failed before any module: {child.stderr[-2000:]}")
        position, name = int(last[-1][1]), last[-1][2]
        counts["fail"] += 1
        results.append({"module": name, "sample": -1, "result": "fail",
                        "detail": f"crash: the process died (exit {child.returncode}): {child.stderr[-300:]}"})
        print(f"FAIL {name}: crash (exit {child.returncode})", file=sys.stderr)
        start = position + 1
    modules = len({r["module"] for r in results})
    print(f"module_db: {modules} modules, {sum(counts.values())} samples: {counts['pass']} equal the CPU, "
          f"{counts['unsupported']} stop with UnsupportedOperatorError, {counts['fail']} fail, "
          f"{counts['skip']} skipped (CPU reference raised) in {time.perf_counter() - started:.1f} s")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"counts": dict(counts), "results": results}, f, indent=1)
    return 1 if counts["fail"] else 0


if __name__ == "__main__":
    sys.exit(main())
