"""Speed of `torchfl scan`: a generated 100k-line tree (target: at least 100k lines/s on one core) and,
in the same run, the start-up of a one-file `torchfl scan` against `python -c "import ast"` (target:
within 3x: a linter's start, possible because the scan path imports no torch).

Alongside, in the same run and interleaved with it (so machine load affects both alike), it times
reading and `ast.parse` of the same files alone, the floor for any ast-based scanner, and prints the
ratio; `--libcst` adds `libcst.parse_module` for comparison with a libcst-everywhere design.

The tree mixes CUDA-coupled training code (device strings, .cuda(), torch.cuda.*, AMP, NCCL, cuDNN
flags, syncs in loops) with plain code (models, data utilities, configuration) in about the
proportion of a research repository. The scan runs in this process, pinned to one CPU where the OS
allows it. Prints files, lines, seconds, lines/s, findings per code, and peak memory: the scanner's
own Python allocations (tracemalloc, in a second run, since tracing slows it down) and the process's
peak RSS (no torch: the scanner is loaded the way the `torchfl` console script loads it for `scan`).

The start-up ratio runs each command --startup-runs times, interleaved, in fresh processes, and compares
medians: `python -c "import ast"` and `python -c "<the torchfl console script> scan one.py"` on a 20-line
file, with bytecode cached as after `pip install` (a private PYTHONPYCACHEPREFIX).

    python benchmarks/scan_speed.py [--lines 100000] [--repeats 5] [--keep DIR] [--libcst] [--startup-runs 15]
"""

from __future__ import annotations

import argparse
import ast
import os
import resource
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections import Counter
from pathlib import Path

TRAIN = '''"""Training entry point {i}."""
import argparse
import ast
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.cuda.amp import GradScaler, autocast
from torch.nn.parallel import DistributedDataParallel as DDP

from .model_{i} import Net{i}
from .data_{i} import build_loader


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--lr", type=float, default=3e-4)
    return parser.parse_args()


def setup(rank, world_size):
    os.environ["NCCL_DEBUG"] = "INFO"
    dist.init_process_group("nccl", rank=rank, world_size=world_size)
    torch.cuda.set_device(rank)
    torch.backends.cudnn.benchmark = True


def train(rank, world_size):
    args = parse_args()
    setup(rank, world_size)
    device = torch.device(f"cuda:{{rank}}")
    model = Net{i}().cuda(rank)
    model = DDP(model, device_ids=[rank])
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    scaler = GradScaler()
    loader = build_loader(batch_size=32)
    for epoch in range(args.epochs):
        start = time.perf_counter()
        total = 0.0
        for step, (inputs, targets) in enumerate(loader):
            inputs, targets = inputs.to(device), targets.to(args.device)
            optimizer.zero_grad(set_to_none=True)
            with autocast():
                loss = nn.functional.cross_entropy(model(inputs), targets)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            total += loss.item()
        torch.cuda.synchronize()
        if rank == 0:
            print(f"epoch {{epoch}} loss {{total / (step + 1):.4f}} "
                  f"{{time.perf_counter() - start:.1f}}s mem {{torch.cuda.max_memory_allocated()}}")
    dist.destroy_process_group()


if __name__ == "__main__":
    train(int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)))
'''

MODEL = '''"""Model {i}: a small transformer encoder."""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention{i}(nn.Module):
    def __init__(self, dim: int, heads: int = 8, dropout: float = 0.1) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)
        self.dropout = dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q = q.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0)
        return self.proj(out.transpose(1, 2).reshape(b, t, c))


class Block{i}(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention{i}(dim)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class Net{i}(nn.Module):
    def __init__(self, vocab: int = 32000, dim: int = 512, depth: int = 6) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block{i}(dim) for _ in range(depth))
        self.head = nn.Linear(dim, vocab, bias=False)
        self.apply(self._init)

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=1 / math.sqrt(module.in_features))
            if module.bias is not None:
                nn.init.zeros_(module.bias)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(x).mean(dim=1)
'''

DATA = '''"""Data utilities {i}."""
from __future__ import annotations

import json
import logging
import random
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)


@dataclass
class DataConfig{i}:
    root: Path = Path("data")
    batch_size: int = 32
    shuffle: bool = True
    workers: int = 4
    extensions: list[str] = field(default_factory=lambda: [".jsonl", ".json"])


def read_records(path: Path) -> list[dict]:
    records = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            line = line.strip()
            if not line:
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as exc:
                log.warning("%s:%d: skipped: %s", path, number, exc)
    return records


def split(records: list[dict], ratio: float = 0.9, seed: int = {i}) -> tuple[list[dict], list[dict]]:
    rng = random.Random(seed)
    shuffled = records[:]
    rng.shuffle(shuffled)
    cut = int(len(shuffled) * ratio)
    return shuffled[:cut], shuffled[cut:]


def tokenize(text: str, vocab: dict[str, int]) -> list[int]:
    return [vocab.get(word, 0) for word in text.lower().split()]


def build_loader(batch_size: int = 32, config: DataConfig{i} | None = None):
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    config = config or DataConfig{i}(batch_size=batch_size)
    inputs = torch.randint(0, 32000, (1024, 64))
    targets = torch.randint(0, 32000, (1024,))
    return DataLoader(TensorDataset(inputs, targets), batch_size=config.batch_size,
                      shuffle=config.shuffle, num_workers=config.workers, pin_memory=True)


def summarize(records: list[dict]) -> dict[str, float]:
    lengths = sorted(len(r.get("text", "")) for r in records)
    if not lengths:
        return {{"count": 0, "median": 0.0, "max": 0.0}}
    middle = len(lengths) // 2
    median = lengths[middle] if len(lengths) % 2 else (lengths[middle - 1] + lengths[middle]) / 2
    return {{"count": len(lengths), "median": float(median), "max": float(lengths[-1])}}
'''

TEMPLATES = (("train", TRAIN), ("model", MODEL), ("data", DATA))


def generate(root: Path, target_lines: int) -> tuple[int, int]:
    files = lines = i = 0
    while lines < target_lines:
        package = root / f"pkg{i // 50}"
        package.mkdir(parents=True, exist_ok=True)
        for name, template in TEMPLATES:
            text = template.format(i=i)
            (package / f"{name}_{i}.py").write_text(text)
            files += 1
            lines += text.count("\n")
        i += 1
    return files, lines


def parse_only(root: Path) -> None:
    for path in sorted(root.rglob("*.py")):
        ast.parse(path.read_text(encoding="utf-8"))


def libcst_only(root: Path) -> None:
    import libcst

    for path in sorted(root.rglob("*.py")):
        libcst.parse_module(path.read_text(encoding="utf-8"))


def timed(fn, *args) -> float:
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def pin_one_core() -> str:
    if hasattr(os, "sched_setaffinity"):
        cpu = min(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpu})
        return f"pinned to CPU {cpu}"
    return "not pinned (no sched_setaffinity)"


ONE_FILE = """import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x)


def main():
    model = Net().cuda()
    x = torch.randn(2, 4, device="cuda")
    print(model(x).sum().item())


main()
"""


def startup(runs: int) -> tuple[float, float]:
    """Median seconds of `python -c "import ast"` and of a one-file `torchfl scan` (fresh processes)."""
    import subprocess

    src = str(Path(__file__).resolve().parents[1] / "src")
    with tempfile.TemporaryDirectory() as tmp:
        one = Path(tmp) / "one.py"
        one.write_text(ONE_FILE)
        baseline = [sys.executable, "-c", "import ast"]
        scan = [sys.executable, "-c", f"import sys; sys.path.insert(0, {src!r}); import _torch_fl_cli; "
                                      f"sys.exit(_torch_fl_cli.main(['scan', {str(one)!r}]))"]
        # As installed: bytecode cached (pip compiles it at install time). This environment may set
        # PYTHONDONTWRITEBYTECODE; a private cache folder keeps the checkout clean.
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
        for command in (baseline, scan):  # warm-up: fills the bytecode cache
            subprocess.run(command, capture_output=True, env=env)
        base_times, scan_times = [], []
        for _ in range(runs):
            for command, sink in ((baseline, base_times), (scan, scan_times)):
                start = time.perf_counter()
                proc = subprocess.run(command, capture_output=True, text=True, env=env)
                sink.append(time.perf_counter() - start)
                if command is scan and "FL102" not in proc.stdout:
                    raise SystemExit(f"one-file scan failed: {proc.stdout}{proc.stderr}")
    return statistics.median(base_times), statistics.median(scan_times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--keep", type=Path, help="generate the tree here and keep it")
    parser.add_argument("--libcst", action="store_true", help="also time libcst.parse_module (slow)")
    parser.add_argument("--startup-runs", type=int, default=15, help="fresh processes per start-up command")
    args = parser.parse_args()

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    import _torch_fl_cli

    _torch_fl_cli._bare_package()  # as `torchfl scan` loads it: no torch
    from torch_fl.migrate.scan import scan_paths

    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp)
        files, lines = generate(root, args.lines)
        print(f"tree: {files} files, {lines} lines in {root}; {pin_one_core()}")
        result = scan_paths([root])  # warm the OS file cache and the scanner's imports
        times, parse_times = [], []
        for _ in range(args.repeats):
            times.append(timed(scan_paths, [root]))
            parse_times.append(timed(parse_only, root))
        best, median = min(times), statistics.median(times)
        parse = statistics.median(parse_times)
        cst = timed(libcst_only, root) if args.libcst else None
        tracemalloc.start()
        scan_paths([root])
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)
    print(f"scanned {result.files} files, {result.lines} lines: median {median:.2f} s, best {best:.2f} s")
    print(f"speed: {result.lines / median:,.0f} lines/s (median), {result.lines / best:,.0f} lines/s "
          f"(best); target >= 100,000")
    print(f"read + ast.parse alone: {result.lines / parse:,.0f} lines/s; scan / parse time = "
          f"{median / parse:.2f}x")
    if cst is not None:
        print(f"read + libcst.parse_module alone: {result.lines / cst:,.0f} lines/s "
              f"({cst / median:.1f}x the scan's time)")
    print(f"findings: {len(result.findings)} ({', '.join(f'{c} {n}' for c, n in sorted(Counter(f.code for f in result.findings).items()))}); errors: {len(result.errors)}")
    print(f"peak memory: scanner allocations {peak / 2**20:.1f} MiB (tracemalloc); "
          f"process peak RSS {rss / 2**20:.0f} MiB; torch imported: {'torch' in sys.modules}")
    base, one = startup(args.startup_runs)
    print(f"start-up: one-file `torchfl scan` {one * 1000:.0f} ms, `python -c 'import ast'` {base * 1000:.0f} ms: "
          f"{one / base:.2f}x (target <= 3x; medians of {args.startup_runs} fresh processes each)")


if __name__ == "__main__":
    main()
