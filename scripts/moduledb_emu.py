#!/usr/bin/env python
"""Run PyTorch's ModuleInfo database on an emulated chip and compare every sample with the CPU.

Run under ``FL_DEVICE=emu:NAME`` (the emulated chip must be the process's device, so it is registered
before the first backward pass). For every ModuleInfo of
``torch.testing._internal.common_modules.module_db`` that supports float32, each sample of its
``module_inputs_func`` (training mode, requires_grad inputs) is built once on the CPU (seeded), copied to
the emulated device, and run forward and backward (the sum of its floating outputs) on both. A sample
passes when outputs, parameter gradients and input gradients match (``torch.testing.assert_close``'s
float32 tolerances, loosened by the ModuleInfo's own float32 CPU tolerance overrides), or when the
emulated run stops with torch-fl's ``UnsupportedOperatorError`` (the chip cannot run it, and says so).
Anything else (a mismatch, another exception) is a failure. Samples whose CPU reference raises are
skipped and counted; random modules (dropout and friends) are run with the same seed on both sides.

Usage: FL_DEVICE=emu:npu moduledb_emu.py [--modules NAME,...] [--samples N] [--json FILE]
Exit status: 0 when no sample failed, 1 otherwise. The summary goes to stdout.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
import warnings
from collections import Counter
from typing import Any

import torch
from torch.utils import _pytree as pytree

import torch_fl
from torch_fl.errors import UnsupportedOperatorError


def _to(value: Any, device: torch.device, memo: dict[int, torch.Tensor]) -> Any:
    """`value` with its tensors copied to `device`; one tensor passed twice stays one tensor (samples
    such as KLDivLoss's pass the same tensor as input and target, and its gradient is the sum)."""
    def move(t: Any) -> Any:
        if not isinstance(t, torch.Tensor):
            return t
        if id(t) not in memo:
            moved = t.detach().to(device)
            memo[id(t)] = moved.requires_grad_(t.requires_grad) if t.is_floating_point() else moved
        return memo[id(t)]
    return pytree.tree_map(move, value)


def _floats(value: Any) -> list[torch.Tensor]:
    return [t for t in pytree.tree_leaves(value) if isinstance(t, torch.Tensor) and t.is_floating_point()]


def _run(module: torch.nn.Module, args: Any, kwargs: Any, seed: int) -> tuple[list, list, list]:
    torch.manual_seed(seed)
    out = module(*args, **kwargs)
    outs = _floats(out)
    leaves = [t for t in _floats((args, kwargs)) if t.requires_grad]
    params = [p for p in module.parameters() if p.requires_grad]
    grads: list = []
    differentiable = [o for o in outs if o.requires_grad]
    if differentiable:
        loss = sum(o.sum() for o in differentiable)
        grads = list(torch.autograd.grad(loss, params + leaves, allow_unused=True))
    return [o.detach() for o in outs], grads[:len(params)], grads[len(params):]


def _tolerance(info: Any) -> dict[str, float]:
    """The ModuleInfo's own float32 CPU tolerance override, if any (else assert_close's defaults)."""
    for decorator in getattr(info, "decorators", ()) or ():
        override = getattr(decorator, "cls", None)
        tol = getattr(override, "d", None) if override is not None else getattr(decorator, "d", None)
        if isinstance(tol, dict) and torch.float32 in tol:
            t = tol[torch.float32]
            return {"rtol": max(t.rtol, 1.3e-6), "atol": max(t.atol, 1e-5)}
    return {"rtol": 1e-5, "atol": 1e-5}


def _close(expected: list, actual: list, tol: dict[str, float], what: str) -> None:
    if len(expected) != len(actual):
        raise AssertionError(f"{what}: {len(expected)} tensors on the CPU, {len(actual)} on the chip")
    for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
        if e is None or a is None:
            if (e is None) != (a is None):
                raise AssertionError(f"{what}[{i}]: None on one side only")
            continue
        torch.testing.assert_close(a.cpu(), e, equal_nan=True, **tol, msg=lambda m, i=i: f"{what}[{i}]: {m}")


def check_sample(info: Any, sample: Any, device: torch.device, seed: int) -> tuple[str, str]:
    """('pass' | 'unsupported' | 'skip' | 'fail', detail) of one sample."""
    try:
        torch.manual_seed(seed)
        reference = info.module_cls(*sample.constructor_input.args, **sample.constructor_input.kwargs)
        emulated = copy.deepcopy(reference).to(device)
        args, kwargs = sample.forward_input.args, sample.forward_input.kwargs
        expected = _run(reference, args, kwargs, seed)
    except Exception as exc:  # the reference itself fails: nothing to compare against
        return "skip", f"CPU reference raised {type(exc).__name__}: {str(exc)[:120]}"
    try:
        memo: dict[int, torch.Tensor] = {}
        actual = _run(emulated, _to(args, device, memo), _to(kwargs, device, memo), seed)
    except UnsupportedOperatorError as exc:
        return "unsupported", str(exc).splitlines()[0][:200]
    except Exception as exc:
        return "fail", f"{type(exc).__name__}: {str(exc)[:300]}"
    tol = _tolerance(info)
    try:
        for name, e, a in zip(("outputs", "parameter grads", "input grads"), expected, actual, strict=True):
            _close(e, a, tol, name)
    except AssertionError as exc:
        return "fail", str(exc)[:300]
    return "pass", ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modules", help="comma-separated ModuleInfo names (default: all)")
    parser.add_argument("--samples", type=int, default=0, help="samples per module (default: all)")
    parser.add_argument("--json", help="write per-sample results to this file")
    parser.add_argument("--progress", action="store_true", help="name each module on stderr as it starts")
    parser.add_argument("--start", type=int, default=0, help="skip the first N ModuleInfos (used by --isolate)")
    parser.add_argument("--jsonl", help="append each sample's result to this file as it is known (--isolate)")
    parser.add_argument("--isolate", action="store_true",
                        help="run in child processes: a module that kills the process (a C++ abort) is "
                             "recorded as a failure ('crash') and the run resumes after it")
    args = parser.parse_args(argv)
    if args.isolate:
        return _isolated(args)
    from torch.testing._internal.common_modules import module_db

    device = torch.fl.device()
    if device.type == "cpu":
        sys.exit("run under FL_DEVICE=emu:NAME: the emulated chip must be this process's device")
    wanted = set(args.modules.split(",")) if args.modules else None
    counts: Counter[str] = Counter()
    results = []
    started = time.perf_counter()
    warnings.filterwarnings("ignore")
    for position, info in enumerate(module_db):
        if position < args.start or (wanted and info.name not in wanted) or torch.float32 not in info.dtypes:
            continue
        if args.progress:
            print(f"... {position} {info.name}", file=sys.stderr, flush=True)
        try:
            samples = info.module_inputs_func(info, device="cpu", dtype=torch.float32, requires_grad=True,
                                              training=True)
        except Exception as exc:
            counts["skip"] += 1
            results.append({"module": info.name, "sample": -1, "result": "skip", "detail": str(exc)[:120]})
            continue
        for index, sample in enumerate(samples[:args.samples or None]):
            result, detail = check_sample(info, sample, device, seed=index)
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
