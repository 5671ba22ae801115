"""The timing that emulation_overhead.py and streams_sanitizer.py share: the process's CPU time per call,
samples of the compared modes taken in turn (machine load then affects both sides alike), the median of the
per-sample ratios, and one training step of examples/gpt.py on a device.

A benchmark run as ``python benchmarks/NAME.py`` has benchmarks/ on sys.path: ``import interleaved``."""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

from torch_fl.errors import FallbackWarning

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"  # examples/ is not a package


def command_line(doc: str, argv: list[str] | None, repeats: int, calls: int, calls_help: str,
                 steps_help: str) -> argparse.Namespace:
    """A benchmark's --repeats, --calls and --steps (its description: the first paragraph of `doc`), and the
    conditions it runs under: one torch thread, fallback warnings off; prints the header line."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=repeats)
    parser.add_argument("--calls", type=int, default=calls, help=calls_help)
    parser.add_argument("--steps", type=int, default=3, help=steps_help)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    warnings.simplefilter("ignore", FallbackWarning)
    print(f"torch {torch.__version__}, 1 thread, CPU-time clock, {args.repeats} interleaved samples")
    return args


def time_per_call(fn: Callable[[], None], n: int) -> float:
    """CPU seconds per call of `fn` over `n` calls."""
    start = time.process_time()
    for _ in range(n):
        fn()
    return (time.process_time() - start) / n


def interleaved(runners: dict[str, Callable[[], None]], repeats: int, n: int) -> dict[str, list[float]]:
    """`repeats` samples of each runner (n calls each, one warm-up call first), the runners in turn."""
    for fn in runners.values():
        fn()  # warm up (first-call route decisions, allocator)
    times: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(repeats):
        for name, fn in runners.items():
            times[name].append(time_per_call(fn, n))
    return times


def ratio(times: dict[str, list[float]], name: str, base: str) -> float:
    """The median of the per-sample ratios name / base."""
    return statistics.median(a / b for a, b in zip(times[name], times[base], strict=True))


def gpt_step(device: torch.device, batch: int, context: int, **config: int) -> Callable[[], None]:
    """One training step (forward, backward, AdamW, .item()) of examples/gpt.py's GPT(vocab=512, context,
    **config) on `device`; the model is built on the host (seed 0) and copied there."""
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    from gpt import GPT, lm_loss

    torch.manual_seed(0)
    model = copy.deepcopy(GPT(vocab=512, context=context, **config)).to(device)
    tokens = torch.randint(0, 512, (batch, context)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step() -> None:
        opt.zero_grad()
        loss = lm_loss(model(tokens), tokens)
        loss.backward()
        opt.step()
        loss.item()

    return step
