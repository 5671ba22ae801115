"""CPU time of `torchfl fix` against `torchfl scan` on a small and a large tree (issue 37 item 3: fix <= 1.5x
scan in CPU time on every tree size, no torch imported, libcst paid only for files rewritten).

Each command runs in a fresh process (--runs times, interleaved so that machine load affects all alike);
the CPU time is the child's user+system time (resource.getrusage(RUSAGE_CHILDREN)), printed beside the
wall time; medians are compared. `fix` runs with --diff (nothing written, the same work up to the write).

    fix (shipped)  the `torchfl` console script's start as installed (src/_torch_fl_cli.main): since
                   60beb18 it gives `fix` the bare torch_fl package, as it gives `scan` (before: the real
                   package, whose __init__ imports torch, +1.6 CPU-s a call)
    fix (bare)     the same command with the bare package forced: the two agree now; a gap between them
                   says the console script imports torch for `fix` again

Trees: "fixtures" is tests/migrate/fixtures (ours: every rule's odd shapes, many rewritten with libcst);
"13k" is a generated 13k-line training project (benchmarks/scan_speed.py's generator: device strings,
.cuda(), AMP, NCCL, syncs; 70 files rewritten); "torch" is torch's own Python sources (torch/nn, optim,
utils, distributed, amp, cuda of the installed wheel; read only: fix --diff writes nothing).

    python benchmarks/fix_speed.py [--runs 3] [--small-lines 13000]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNNER = (
    "import sys; sys.path.insert(0, {src!r}); import _torch_fl_cli\n"
    "if {bare}:\n    _torch_fl_cli._bare_package()\n    from torch_fl.cli import main\n"
    "else:\n    main = _torch_fl_cli.main\n"
    "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
    "sys.stderr.write('torch=%s libcst=%s\\n' % ('torch' in sys.modules, 'libcst' in sys.modules))\n"
)


def _command(kind: str, tree: list[str]) -> list[str]:
    if kind == "scan":
        args, bare = ["scan", "-q", *tree], False
    elif kind == "fix (shipped)":
        args, bare = ["fix", "--diff", *tree], False
    else:
        args, bare = ["fix", "--diff", *tree], True
    return [sys.executable, "-c", RUNNER.format(src=str(ROOT / "src"), bare=bare), *args]


def _timed(cmd: list[str]) -> tuple[float, float, str]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""


def _lines(tree: list[str]) -> tuple[int, int]:
    files = [p for t in tree for p in Path(t).rglob("*.py")]
    return len(files), sum(len(p.read_bytes().splitlines()) for p in files)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--small-lines", type=int, default=13000)
    args = parser.parse_args()
    import importlib.util
    import tempfile

    sys.path.insert(0, str(Path(__file__).parent))
    from scan_speed import generate

    generated = Path(tempfile.mkdtemp(prefix="fix_speed_"))
    generate(generated, args.small_lines)

    spec = importlib.util.find_spec("torch")
    assert spec is not None and spec.origin is not None, "needs torch installed (its sources are the large tree)"
    torch_dir = Path(spec.origin).parent
    trees = {
        "fixtures": [str(ROOT / "tests" / "migrate" / "fixtures")],
        f"{args.small_lines // 1000}k": [str(generated)],
        "torch": [str(torch_dir / d) for d in ("nn", "optim", "utils", "distributed", "amp", "cuda")],
    }
    kinds = ("scan", "fix (shipped)", "fix (bare)")
    for name, tree in trees.items():
        files, lines = _lines(tree)
        print(f"{name} tree: {files} files, {lines} lines")
        samples: dict[str, list[tuple[float, float]]] = {k: [] for k in kinds}
        modules: dict[str, str] = {}
        for _ in range(args.runs):
            for kind in kinds:
                cpu, wall, last = _timed(_command(kind, tree))
                samples[kind].append((cpu, wall))
                modules[kind] = last
        scan_cpu = statistics.median(c for c, _ in samples["scan"])
        for kind in kinds:
            cpu = statistics.median(c for c, _ in samples[kind])
            wall = statistics.median(w for _, w in samples[kind])
            print(f"  {kind:14s} cpu {cpu:6.2f} s  wall {wall:6.2f} s  cpu/scan {cpu / scan_cpu:4.2f}x  "
                  f"({modules[kind]})")


if __name__ == "__main__":
    main()
