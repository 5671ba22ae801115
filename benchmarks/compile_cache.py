"""Time to first result of the example transformer (examples/gpt.py) on the CPU, in fresh processes:
torch.fl.compile with an empty compile cache vs a warm one (target: at least 5x), for one inference
forward and one training step (forward + backward), and optionally an AOT package (torch.fl.load_aot).

Each child times itself from its first line (before `import torch`) to the first result and splits that
time into:

``import``  importing torch and torch-fl, then Dynamo, Inductor and torch-fl's compiler (imported
            explicitly, so that the import is not counted as tracing or loading)
``trace``   Dynamo: tracing the model's bytecode into a graph and building guards (its compile time
            minus the backend's)
``load``    the backend: AOTAutograd and Inductor compiling the graph (empty cache) or loading it from
            the cache (warm), plus torch.fl.compile's own work (fingerprint, trust and integrity checks)
``run``     the rest of the first call: running the compiled code (and, for a training step, the loss
            and the backward pass)
``model``   building the model and the eager reference (not part of the ratio's interest, shown apart)

Cold and warm runs alternate, each cold run in a new empty cache, so that the load of the machine
affects both alike; the load average is printed at the start and the end. A third run per round
("new entry") removes the entry but keeps the root's shared precompiled header, as after a fingerprint
change in a used cache: building that header is 5-15 s of an empty-cache start (Inductor keeps it in
/tmp by default, where earlier measurements found it already built). Each child also reports
Inductor's and AOTAutograd's cache counters, so a "warm" run that missed shows up.

After each warm run, the entry's artifacts are checked here the two ways torch.fl.compile can: size and
mtime only, and sha256 of every artifact (what each start does before Inductor unpickles or loads any of
them, since an altered pickle with a restored mtime passed the first); the cost is printed against the
warm start.

    python benchmarks/compile_cache.py [--rounds 3] [--model examples/gpt.py:factory] [--aot] [--json F]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import time
start = time.perf_counter()
import json, sys
import torch, torch_fl
from torch_fl.analysis.model import load_model

imported = time.perf_counter()
mode, model_entry, train, package = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4]
spec = load_model(model_entry)
model, inputs = spec.model, spec.inputs
model.train(train)
with torch.no_grad():
    reference = model(*inputs)
built = time.perf_counter()
if mode == "jit":
    import torch._dynamo, torch._inductor.compile_fx  # noqa: F401  (what torch.compile imports)
else:
    import torch._inductor  # noqa: F401
from torch_fl.compiler.warmup import step  # (imports torch-fl's compiler, as torch.fl.compile would)
imported_compiler = time.perf_counter()
run = torch.fl.compile(model) if mode == "jit" else torch.fl.load_aot(package)
wrapped = time.perf_counter()
output = step(run, inputs, spec, train)  # the first call, as torchfl warmup makes it
first = time.perf_counter()
result = {"total": first - start, "import": (imported - start) + (imported_compiler - built),
          "model": built - imported, "fl_compile": wrapped - imported_compiler,
          "max_abs_diff": float((output.detach() - reference).abs().max()) if not train else None}
if mode == "jit":
    from torch._dynamo.utils import counters, get_compilation_metrics

    def total_s(field):
        return sum(getattr(m, field) or 0 for m in get_compilation_metrics()) / 1e6

    dynamo = total_s("dynamo_cumulative_compile_time_us")
    backend = total_s("aot_autograd_cumulative_compile_time_us")
    backward = total_s("backward_cumulative_compile_time_us")
    result.update(trace=dynamo - backend, load=backend + backward + result["fl_compile"],
                  run=(first - wrapped) - dynamo - backward,
                  counters={k: counters[g][k] for g, k in (
                      ("inductor", "fxgraph_cache_hit"), ("inductor", "fxgraph_cache_miss"),
                      ("aot_autograd", "autograd_cache_hit"), ("aot_autograd", "autograd_cache_miss"))})
else:
    result.update(trace=0.0, load=wrapped - imported_compiler, run=first - wrapped, counters={})
print("RESULT " + json.dumps(result))
"""

BUILD = r"""
import sys, torch, torch_fl
from torch_fl.analysis.model import load_model
from torch_fl.compiler.aot import export_aot
spec = load_model(sys.argv[1])
result = export_aot(spec.model.eval(), spec.inputs, sys.argv[2], label=sys.argv[1])
print(f"RESULT {result.seconds}")
"""

PARTS = ("import", "trace", "load", "run")


def child(cache_dir: str, *args: str, script: str = CHILD) -> dict | float:
    env = {**os.environ, "FL_CACHE_DIR": cache_dir, "FL_DEVICE": "cpu"}
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    env.pop("TRITON_CACHE_DIR", None)
    begin = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", script, *args], env=env, cwd=ROOT, capture_output=True,
                          text=True)
    wall = time.perf_counter() - begin
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode or not lines:
        sys.exit(f"child failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    result = json.loads(lines[-1][len("RESULT "):])
    if isinstance(result, dict):
        result["wall"] = wall  # with the interpreter's start and exit
    return result


def median(samples: list[dict], key: str) -> float:
    return statistics.median(s[key] for s in samples)


def show(name: str, samples: list[dict]) -> float:
    counters = "/".join(
        f"{s['counters'].get('autograd_cache_hit', 0)}h{s['counters'].get('autograd_cache_miss', 0)}m"
        for s in samples) or "-"
    parts = " ".join(f"{median(samples, p):7.2f}" for p in PARTS)
    print(f"{name:<24} {median(samples, 'total'):7.2f} {median(samples, 'wall'):7.2f}   {parts}   "
          f"{median(samples, 'model'):5.2f}   {counters}")
    return median(samples, "total")


def integrity_cost(cache_dir: str) -> dict:
    """Time the size+mtime check and the sha256 check of the entry's recorded artifacts."""
    from torch_fl.compiler import cache, integrity

    entry = next(p for p in Path(cache_dir).iterdir() if p.is_dir() and not p.name.startswith("."))
    records = cache.read_manifest(entry)["artifacts"]
    timings = {}
    for name, full in (("quick", False), ("sha256", True)):
        begin = time.perf_counter()
        result = integrity.check(entry, records, full=full)
        timings[name] = time.perf_counter() - begin
        assert result.ok, result.problems()
    timings["files"] = len(records)
    timings["bytes"] = sum(rec[1] for rec in records.values())
    return timings


def load_text() -> str:
    one, five, _ = os.getloadavg()
    return f"{one:.1f} (1 min), {five:.1f} (5 min)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="fresh processes per kind (default 3)")
    parser.add_argument("--model", default="examples/gpt.py:factory")
    parser.add_argument("--aot", action="store_true", help="also time an AOT package (inference)")
    parser.add_argument("--only", choices=("inference", "train"), help="time one of the two only")
    parser.add_argument("--json", metavar="FILE", help="write every sample as JSON")
    args = parser.parse_args()
    kinds = [k for k in ("inference", "train") if args.only in (None, k)]
    samples: dict[str, list[dict]] = {f"{k} {w}": [] for k in kinds for w in ("cold", "warm", "new")}
    samples["aot"] = []
    checks: list[dict] = []
    load_start = load_text()
    with tempfile.TemporaryDirectory(prefix="fl-compile-bench-") as tmp:
        for i in range(args.rounds):
            for kind in kinds:
                cache_dir = str(Path(tmp) / f"{kind}{i}")  # empty: a cold start
                for when in ("cold", "warm", "new"):
                    if when == "new":  # a new fingerprint in a used root: the entry goes, the header stays
                        for entry in Path(cache_dir).iterdir():
                            if entry.is_dir() and not entry.name.startswith("."):
                                shutil.rmtree(entry)
                    print(f"round {i + 1}/{args.rounds}: {kind} {when}", file=sys.stderr, flush=True)
                    samples[f"{kind} {when}"].append(
                        child(cache_dir, "jit", args.model, "1" if kind == "train" else "0", ""))
                    if when == "warm":
                        checks.append({**integrity_cost(cache_dir), "warm": samples[f"{kind} warm"][-1]["total"]})
        if args.aot:
            package = str(Path(tmp) / "model.pt2")
            print("building the AOT package", file=sys.stderr, flush=True)
            build_s = child(str(Path(tmp) / "aot-cache"), args.model, package, script=BUILD)
            for i in range(args.rounds):
                print(f"round {i + 1}/{args.rounds}: aot load", file=sys.stderr, flush=True)
                samples["aot"].append(child(str(Path(tmp) / "aot-cache"), "aot", args.model, "0", package))
    print(f"\n{args.model} on CPU, time to first result, median of {args.rounds} fresh processes per row")
    print(f"({os.cpu_count()} CPUs; load average {load_start} at the start, {load_text()} at the end)")
    print(f"{'':<24} {'total':>7} {'wall':>7}   {'import':>7} {'trace':>7} {'load':>7} {'run':>7}   "
          f"{'model':>5}   AOTAutograd cache")
    ratios = {}
    for kind in kinds:
        cold = show(f"{kind}, empty cache", samples[f"{kind} cold"])
        warm = show(f"{kind}, warm cache", samples[f"{kind} warm"])
        new = show(f"{kind}, new entry", samples[f"{kind} new"])
        ratios[kind] = cold / warm
        ratios[f"{kind} (new entry)"] = new / warm
    if samples["aot"]:
        show("inference, AOT package", samples["aot"])
        print(f"AOT package build (once): {build_s:.1f} s")
    if checks:
        quick, full = statistics.median(c["quick"] for c in checks), statistics.median(c["sha256"] for c in checks)
        share = statistics.median(c["sha256"] / c["warm"] for c in checks)
        print(f"artifact check per warm start ({checks[-1]['files']} artifacts, {checks[-1]['bytes'] / 1e6:.1f} MB): "
              f"size+mtime {quick * 1e3:.1f} ms, sha256 of every artifact {full * 1e3:.1f} ms "
              f"({100 * share:.2f}% of the warm start)")
    print()
    for kind, ratio in ratios.items():
        what = "new entry / warm cache" if "new entry" in kind else "empty / warm cache"
        print(f"{kind.replace(' (new entry)', '')}: {what} {ratio:.1f}x (target >= 5x)")
    if args.json:
        Path(args.json).write_text(json.dumps({"load_start": load_start, "load_end": load_text(),
                                               "samples": samples, "ratios": ratios, "integrity": checks},
                                              indent=2))


if __name__ == "__main__":
    main()
