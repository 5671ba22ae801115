"""Time to first result of the example transformer (examples/gpt.py) on the CPU, in fresh processes:
JIT (torch.fl.compile) with an empty compile cache vs a warm one (target: at least 5x), and an AOT
package (torch.fl.load_aot) vs JIT with a warm cache.

"Time to first result" runs from the first line of the child script (before `import torch`) to the
first output of the compiled model, and so includes importing torch and torch-fl, building the model,
compiling (or loading from the cache) and one forward pass. Cold and warm runs alternate, each cold
run in a new empty cache directory, so that machine load affects both alike. Each child also reports
Inductor's cache counters, so a "warm" run that did not hit the cache shows up.

    python benchmarks/compile_cache.py [--rounds 2] [--train] [--model examples/gpt.py:factory]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import time
start = time.perf_counter()
import json, sys
import torch, torch_fl
from torch_fl.analysis.model import load_model

mode, model_entry, train, package = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4]
spec = load_model(model_entry)
model, inputs = spec.model, spec.inputs
model.train(train)
with torch.no_grad():
    reference = model(*inputs)
built = time.perf_counter()
if mode == "jit":
    run = torch.fl.compile(model)
else:
    run = torch.fl.load_aot(package)
if train:
    output = run(*inputs)
    spec.loss(output, inputs).backward()
else:
    with torch.no_grad():
        output = run(*inputs)
first = time.perf_counter()
from torch._dynamo.utils import counters
print("RESULT " + json.dumps({
    "to_first_result": first - start, "import_and_build": built - start, "compile_and_call": first - built,
    "fxgraph_hit": counters["inductor"]["fxgraph_cache_hit"],
    "fxgraph_miss": counters["inductor"]["fxgraph_cache_miss"],
    "max_abs_diff": float((output.detach() - reference).abs().max()) if not train else None,
}))
"""

BUILD = r"""
import sys, torch, torch_fl
from torch_fl.analysis.model import load_model
from torch_fl.compiler.aot import export_aot
spec = load_model(sys.argv[1])
result = export_aot(spec.model.eval(), spec.inputs, sys.argv[2], label=sys.argv[1])
print(f"RESULT {result.seconds}")
"""


def child(cache_dir: str, *args: str, script: str = CHILD) -> dict | float:
    env = {**os.environ, "FL_CACHE_DIR": cache_dir, "FL_BACKEND": "cpu"}
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    env.pop("TRITON_CACHE_DIR", None)
    proc = subprocess.run([sys.executable, "-c", script, *args], env=env, cwd=ROOT, capture_output=True,
                          text=True)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode or not lines:
        sys.exit(f"child failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return json.loads(lines[-1][len("RESULT "):])


def row(name: str, samples: list[dict]) -> tuple[str, float]:
    first = statistics.median(s["to_first_result"] for s in samples)
    compile_ = statistics.median(s["compile_and_call"] for s in samples)
    hits = "/".join(f"{s['fxgraph_hit']}h{s['fxgraph_miss']}m" for s in samples)
    diffs = [s["max_abs_diff"] for s in samples if s["max_abs_diff"] is not None]
    diff = f"{max(diffs):.1e}" if diffs else "-"  # training: the output is a loss step, not compared
    print(f"{name:<26} {first:8.2f} s {compile_:10.2f} s   {hits:<14} {diff}")
    return name, first


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="fresh processes per kind (default 2)")
    parser.add_argument("--model", default="examples/gpt.py:factory")
    parser.add_argument("--train", action="store_true", help="first result = one training step "
                                                              "(forward + backward); AOT is skipped")
    args = parser.parse_args()
    train = "1" if args.train else "0"
    cold, warm, aot = [], [], []
    with tempfile.TemporaryDirectory(prefix="fl-compile-bench-") as tmp:
        for i in range(args.rounds):
            cache_dir = str(Path(tmp) / f"cache{i}")  # empty: a cold start
            print(f"round {i + 1}/{args.rounds}: cold", file=sys.stderr, flush=True)
            cold.append(child(cache_dir, "jit", args.model, train, ""))
            print(f"round {i + 1}/{args.rounds}: warm", file=sys.stderr, flush=True)
            warm.append(child(cache_dir, "jit", args.model, train, ""))
        if not args.train:
            package = str(Path(tmp) / "model.pt2")
            print("building the AOT package", file=sys.stderr, flush=True)
            build_s = child(str(Path(tmp) / "aot-cache"), args.model, package, script=BUILD)
            for i in range(args.rounds):
                print(f"round {i + 1}/{args.rounds}: aot load", file=sys.stderr, flush=True)
                aot.append(child(str(Path(tmp) / "aot-cache"), "aot", args.model, train, package))
    what = "one training step" if args.train else "one inference forward"
    print(f"\n{args.model} on CPU, time to first result ({what}), median of {args.rounds} fresh processes")
    print(f"({os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f} at the end of the run)")
    print(f"{'':<26} {'to first':>10} {'compile+call':>12}   {'inductor cache':<14} max|diff|")
    _, t_cold = row("JIT, empty cache", cold)
    _, t_warm = row("JIT, warm cache", warm)
    print(f"\nempty / warm cache: {t_cold / t_warm:.1f}x (target >= 5x)")
    if aot:
        _, t_aot = row("AOT load + first run", aot)
        print(f"AOT package build (once): {build_s:.1f} s")
        print(f"JIT warm / AOT: {t_warm / t_aot:.1f}x")


if __name__ == "__main__":
    main()
